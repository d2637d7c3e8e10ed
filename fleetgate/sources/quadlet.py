"""A Podman Quadlet ``.container`` file read the way Quadlet's generator reads it (podman-systemd.unit(5)): the
``podman run`` line it writes into the generated service's ``ExecStart=``.

- ``Image=`` is the image; ``Entrypoint=`` (podman ``--entrypoint``) replaces the image's ENTRYPOINT;
- ``Exec=`` is "additional arguments for the container; this has exactly the same effect as passing more
  arguments after a ``podman run <image> <arguments>`` invocation": the generator splits it as systemd splits a
  command line and writes the words, re-quoted but with ``$`` and ``%`` left as they are, after the image in
  ``ExecStart=``. systemd then expands the specifiers and ``$VAR``/``${VAR}`` from the ``[Service]`` environment (a
  ``[Container]`` ``Environment=`` becomes podman's ``--env``, the container's, which systemd never sees);
- ``PublishPort=[[IP:][HOST_PORT]:]CONTAINER_PORT[/PROTO]`` (``-p``), ``Network=`` (``--network``), ``Volume=``
  (``-v``), ``AddDevice=`` (``--device``: a device node or a CDI name such as ``nvidia.com/gpu=all``), ``User=``
  (``--user``: the container's user, not systemd's).

Nothing runs and nothing else is read: the ``[Container]`` environment files are read by the render, in podman's
dialect (fleetgate.render.inputs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import InputError
from fleetgate.units import Setting, Unit

__all__ = ["PublishedPort", "QuadletContainer", "entrypoint_words", "publish_port", "read_quadlet"]


@dataclass(frozen=True)
class PublishedPort:
    host_ip: str
    """The address the host listens on: "" for every address."""
    host_port: int | None
    """None: podman picks a free host port."""
    container_port: int
    where: str


@dataclass(frozen=True)
class QuadletContainer:
    path: Path
    image: str | None
    image_where: str
    entrypoint: tuple[str, ...] | None
    """``Entrypoint=`` as podman's ``--entrypoint`` takes it (a JSON array, or one command); None: the image's own."""
    exec_setting: Setting | None
    published: tuple[PublishedPort, ...]
    network: str | None
    volumes: tuple[tuple[str, str, str], ...]
    """(host path or volume name, container path, where) of every ``Volume=``."""
    devices: tuple[str, ...]
    """``AddDevice=`` values: a device node (``/dev/kfd``, ``/dev/dri``) or a CDI name (``nvidia.com/gpu=all``)."""
    user: Setting | None

    def host_port(self, container_port: int) -> int | None:
        """The host port that reaches ``container_port``; the port itself with ``Network=host``."""
        if self.network == "host":
            return container_port
        for item in self.published:
            if item.container_port == container_port and item.host_port is not None:
                return item.host_port
        return None

    def host_path(self, container_path: str) -> str | None:
        """The host path a ``Volume=`` bind-mounts at ``container_path`` (the deepest one that holds it), else None."""
        best: tuple[int, str] | None = None
        for host, inside, _ in self.volumes:
            if not host.startswith("/"):
                continue
            inside = inside.rstrip("/") or "/"
            if container_path == inside or container_path.startswith(inside.rstrip("/") + "/"):
                mapped = host.rstrip("/") + container_path[len(inside.rstrip("/")):]
                if best is None or len(inside) > best[0]:
                    best = (len(inside), mapped or "/")
        return best[1] if best else None


def publish_port(value: str) -> tuple[str, int | None, int] | None:
    """``PublishPort=[[IP:][HOST_PORT]:]CONTAINER_PORT[/PROTO]`` (podman run ``-p``): (address, host port, container
    port); a range is read by its first port; a UDP port, or one that is not a number, is none of the engine's."""
    spec, _, proto = value.strip().partition("/")
    if proto and proto != "tcp":
        return None
    ip = ""
    if spec.startswith("["):  # an IPv6 address: [::1]:8080:8080
        ip, _, spec = spec[1:].partition("]")
        spec = spec.removeprefix(":")
    parts = spec.split(":")
    if not ip and len(parts) == 3:
        ip, parts = parts[0], parts[1:]
    try:
        container = int(parts[-1].split("-")[0])
        host = int(parts[0].split("-")[0]) if len(parts) == 2 and parts[0] else None
    except ValueError:
        return None
    if not 0 < container < 65536 or (host is not None and not 0 < host < 65536):
        return None
    return ip, host, container


def entrypoint_words(setting: Setting) -> tuple[str, ...]:
    """``Entrypoint=`` as podman reads ``--entrypoint``: a JSON array of words, else the one command it names."""
    value = setting.value.strip()
    if value.startswith("["):
        try:
            words = json.loads(value)
        except json.JSONDecodeError:
            words = None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise InputError(setting.path, setting.line, f"Entrypoint={value}: not a JSON array of strings; expected "
                             "a command, or a JSON array such as [\"/app/llama-server\"]")
        return tuple(words)
    return (value,) if value else ()


def read_quadlet(unit: Unit) -> QuadletContainer:
    """The ``[Container]`` section of a Quadlet as the generator turns it into ``podman run`` options."""
    image = unit.last("Container", "Image")
    entry = unit.last("Container", "Entrypoint")
    published = []
    for setting in unit.all("Container", "PublishPort"):
        read = publish_port(setting.value)
        if read is not None:
            published.append(PublishedPort(read[0], read[1], read[2], setting.where))
    volumes = []
    for setting in unit.all("Container", "Volume"):
        parts = setting.value.split(":")
        if len(parts) >= 2:
            volumes.append((parts[0], parts[1], setting.where))
    network = unit.last("Container", "Network")
    user = unit.last("Container", "User")
    return QuadletContainer(
        path=unit.path,
        image=image.value.strip() if image is not None and image.value.strip() else None,
        image_where=image.where if image is not None else str(unit.path),
        entrypoint=entrypoint_words(entry) if entry is not None else None,
        exec_setting=unit.last("Container", "Exec"),
        published=tuple(published),
        network=network.value.strip() if network is not None else None,
        volumes=tuple(volumes),
        devices=tuple(s.value.strip() for s in unit.all("Container", "AddDevice")),
        user=user if user is not None and user.value.strip() else None,
    )
