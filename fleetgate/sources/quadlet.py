"""A Podman Quadlet ``.container`` file read the way Quadlet's generator reads it (podman-systemd.unit(5)): the
``podman run`` line it writes into the generated service's ``ExecStart=``.

- ``Image=`` is the image; ``Entrypoint=`` (podman ``--entrypoint``) replaces the image's ENTRYPOINT;
- ``Exec=`` is "additional arguments for the container; this has exactly the same effect as passing more
  arguments after a ``podman run <image> <arguments>`` invocation": the generator splits it as systemd splits a
  command line and writes the words, re-quoted but with ``$`` and ``%`` left as they are, after the image in
  ``ExecStart=``. systemd then expands the specifiers and ``$VAR``/``${VAR}`` from the ``[Service]`` environment (a
  ``[Container]`` ``Environment=`` becomes podman's ``--env``, the container's, which systemd never sees);
- ``PublishPort=[[IP:][HOST_PORT]:]CONTAINER_PORT[/PROTO]`` (``-p``), ``Network=`` (``--network``), ``Volume=``
  (``-v``), ``AddDevice=`` (``--device``: a device node or a CDI name such as ``nvidia.com/gpu=all``; a leading
  ``-`` adds it only where the host has it), ``User=``/``Group=`` (``--user UID:GID``: the container's user, not
  systemd's), ``GroupAdd=`` (``--group-add``), ``UserNS=`` (``--userns``);
- ``PodmanArgs=`` is copied onto the ``podman run`` line as written: its ``--device``, ``--gpus`` and
  ``--privileged`` grant devices as ``AddDevice=`` does.

Where the file is installed says which manager runs it (podman-systemd.unit(5), "search path"):
``/etc/containers/systemd/``, ``/usr/share/containers/systemd/`` and ``/run/containers/systemd/`` are rootful (the
system manager runs podman as root, and the container's root is the host's unless ``UserNS=`` maps it), except their
``users/`` directories and ``~/.config/containers/systemd/``, which are rootless (a user's manager). Where the install
path is not known, a repository laid out as those directories says it; anything else is read as rootless.
``WantedBy=multi-user.target`` says nothing of it: on a rootless Quadlet it is the mistake ``unit-install`` names.

Nothing runs and nothing else is read: the ``[Container]`` environment files are read by the render, in podman's
dialect (fleetgate.render.inputs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import InputError
from fleetgate.units import Setting, Unit, split_command

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
    """``AddDevice=`` values (and ``PodmanArgs=`` ``--device``): a device node (``/dev/kfd``, ``/dev/dri``) or a CDI
    name (``nvidia.com/gpu=all``)."""
    user: Setting | None
    gpus: tuple[str, ...] = ()
    """``PodmanArgs=`` ``--gpus`` values (podman 5 turns them into the CDI devices ``nvidia.com/gpu=...``)."""
    privileged: bool = False
    """``PodmanArgs=--privileged``: the container is given every device of the host."""
    group: Setting | None = None
    groups: tuple[str, ...] = ()
    """``GroupAdd=`` values (``--group-add``)."""
    userns: Setting | None = None
    """``UserNS=`` (``--userns``): ``auto``, ``keep-id``, ``nomap`` map the container's root to an unprivileged ID."""
    rootful: str | None = None
    """Why the system manager runs this Quadlet (podman as root); None: a user's manager runs it (rootless)."""

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


_ROOTFUL = ("/run/containers/systemd/", "/etc/containers/systemd/", "/usr/share/containers/systemd/")
_ROOTLESS = ("/etc/containers/systemd/users/", "/.config/containers/systemd/")


def _rootful(unit: Unit, installed: str | None) -> str | None:
    """Why the system manager runs a Quadlet, by its search path (else its repository path)."""
    for path, how in ((installed, "installed at"), ("/" + unit.path.as_posix(), "kept in the repository as")):
        if path is None:
            continue
        if any(d in path for d in _ROOTLESS):
            return None
        if any(d in path for d in _ROOTFUL):
            return f"{how} {path.lstrip('/') if how.startswith('kept') else path}, a rootful Quadlet search path"
    return None


def read_quadlet(unit: Unit, installed: str | None = None) -> QuadletContainer:
    """The ``[Container]`` section of a Quadlet as the generator turns it into ``podman run`` options; ``installed``:
    where the host has the file (fleet.toml's ``deploy_root`` and its repository path), when known."""
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
    group = unit.last("Container", "Group")
    userns = unit.last("Container", "UserNS")
    devices = [s.value.strip().removeprefix("-") for s in unit.all("Container", "AddDevice") if s.value.strip()]
    gpus: list[str] = []
    privileged = False
    for setting in unit.all("Container", "PodmanArgs"):
        words = split_command(setting)
        for index, word in enumerate(words):
            name, eq, value = word.partition("=")
            if name == "--privileged":
                privileged = value.lower() not in ("false", "0") if eq else True
            elif name in ("--device", "--gpus"):
                value = value if eq else (words[index + 1] if index + 1 < len(words) else "")
                (devices if name == "--device" else gpus).append(value)
    return QuadletContainer(
        path=unit.path,
        image=image.value.strip() if image is not None and image.value.strip() else None,
        image_where=image.where if image is not None else str(unit.path),
        entrypoint=entrypoint_words(entry) if entry is not None else None,
        exec_setting=unit.last("Container", "Exec"),
        published=tuple(published),
        network=network.value.strip() if network is not None else None,
        volumes=tuple(volumes),
        devices=tuple(devices),
        user=user if user is not None and user.value.strip() else None,
        gpus=tuple(gpus),
        privileged=privileged,
        group=group if group is not None and group.value.strip() else None,
        groups=tuple(g for s in unit.all("Container", "GroupAdd") for g in s.value.split() if g),
        userns=userns if userns is not None and userns.value.strip() else None,
        rootful=_rootful(unit, installed),
    )
