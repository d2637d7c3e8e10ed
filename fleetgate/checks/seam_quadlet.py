"""What a container's engine can see: a Quadlet's image and volumes, a compose service's bind mounts (B-VL-13..16,
INC-36, INC-79, INC-85).

A Quadlet is a rootless container unit: a local image tag, volumes for everything the engine reads (the model,
the serve script, the compile cache). The unit is the one the renderer parsed (``fleetgate.checks.seam_units``
reads the rest of it as systemd does).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import PurePosixPath

from fleetgate.checks import service_seam
from fleetgate.checks.seam_units import UNIT_ENGINES, not_a_quadlet, unit_of
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose, Kubernetes
from fleetgate.render.types import map_to_repo
from fleetgate.units import Setting, Unit

__all__ = ["container_paths", "mounts"]

PATHS = "container-paths"


@service_seam(
    policy="local-images",
    cites=("B-VL-15", "INC-36"),
    summary="a Quadlet's Image= is a local tag (localhost/NAME:TAG)",
    requires=not_a_quadlet,
    engines=UNIT_ENGINES,
    codes={
        "missing": "a Quadlet without `Image=`",
        "not-local-tag": "a registry-prefixed `Image=` (INC-36)",
    },
)
def quadlet_image(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    image = unit.last("Container", "Image")
    if image is None:
        raise quadlet_image.fail(
            config, "missing",
            where=str(unit.path),
            observed="no Image= in [Container]", expected="Image=localhost/NAME:TAG",
            fix="name the locally built image",
        )
    name = image.value
    if not name.startswith("localhost/") or ":" not in name.split("/", 1)[1]:
        raise quadlet_image.fail(
            config, "not-local-tag",
            where=image.where,
            observed=f"Image={name}",
            expected="Image=localhost/NAME:TAG: this host's Quadlet cannot create from a registry-prefixed ref in local storage",
            fix="re-tag the image as localhost/NAME:TAG (podman tag) and name that",
        )


def mounts(unit: Unit) -> list[tuple[str, str, Setting]]:
    """(host path, container path, setting) of every bind ``Volume=`` of a Quadlet."""
    found = []
    for setting in unit.all("Container", "Volume"):
        parts = setting.value.split(":")
        if len(parts) >= 2:
            found.append((parts[0], parts[1], setting))
    return found


@service_seam(
    policy="vllm-compile-cache",
    cites=("B-VL-13", "INC-79"),
    summary="a containerised vLLM keeps its compile cache (/root/.cache) on a host volume",
    requires=not_a_quadlet,
    engines=("vllm",),
    codes={
        "not-persisted": "no host volume at `/root/.cache` for a containerised vLLM (INC-79)",
    },
)
def quadlet_compile_cache(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    for host, container, _ in mounts(unit):
        if PurePosixPath(container) == PurePosixPath("/root/.cache") and host.startswith("/"):
            return
    raise quadlet_compile_cache.fail(
        config, "not-persisted",
        where=str(unit.path),
        observed="no Volume= at /root/.cache: torch.compile's cache lands in the container's ephemeral layer",
        expected="Volume=HOST_DIR:/root/.cache (every recreate re-pays torch.compile, 181 s)",
        fix="add Volume=/home/USER/.cache/SERVICE:/root/.cache",
    )


def container_paths(config: RenderedService) -> Iterator[tuple[str, str]]:
    """(what, path) for every absolute path the rendered argv hands the engine, JSON values included."""
    argv = config.rendered.argv
    for i, arg in enumerate(argv[1:], start=1):
        flag = argv[i - 1] if argv[i - 1].startswith("-") else "argument"
        if arg.startswith("/"):
            yield flag, arg
        elif arg.startswith("{"):
            try:
                value = json.loads(arg)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, str) and item.startswith("/"):
                        yield f"{flag} {key}", item


def _container(config: RenderedService) -> str | None:
    match config.rendered.start:
        case Kubernetes(read=pod) if pod is not None:
            # Its volumes are read (the container's mounts), but a persistentVolumeClaim has no host path to hold a
            # payload to, and the seam's Quadlet and compose branches have no Kubernetes one yet.
            return f"{config.name} is a Kubernetes container ({pod.workload}): its volumeMounts are not held to the payload"
        case Compose(read=compose) if compose is not None:
            return None
    return not_a_quadlet(config)


@service_seam(
    name=PATHS,
    cites=("B-VL-14", "B-VL-16", "INC-85"),
    summary="every path a containerised engine is given is inside a Volume= (or a compose bind mount) and exists "
               "behind it: in the repository, or among the payload the host is declared to hold",
    requires=_container,
    engines=UNIT_ENGINES,
    codes={
        "not-mounted": "a path the containerised engine is given lies in no `Volume=` (INC-85, B-VL-14)",
        "missing-in-repo": "a mounted repository file the engine is given is not committed (B-VL-16)",
        "compose-not-mounted": "a path a compose service's engine is given lies in no bind mount of `volumes:`",
        "compose-missing-in-repo": "a compose bind mount holds the repository, and the file the engine is given there is not committed",
        "payload-undeclared": (
            "a compose service's bind mount puts a path the engine is given on a host file fleet.toml's `payload` does not name"
        ),
    },
)
def quadlet_container_paths(config: RenderedService) -> None:
    if isinstance(config.rendered.start, Compose) and config.rendered.start.read is not None:
        _compose_paths(config)
        return
    unit = unit_of(config)
    assert unit is not None
    volumes = mounts(unit)
    for what, path in container_paths(config):
        inside = PurePosixPath(path)
        hit = None
        for host, container, setting in volumes:
            try:
                rest = inside.relative_to(PurePosixPath(container))
            except ValueError:
                continue
            hit = (PurePosixPath(host) / rest, setting)
            break
        if hit is None:
            raise quadlet_container_paths.fail(
                config, "not-mounted",
                where=config.where_flag(
                    config.vllm.use(what.split()[0].lstrip("-").replace("-", "_")) if config.vllm else None),
                observed=f"{what} {path}: no Volume= mounts it, so the container cannot see it",
                expected=f"a path inside one of: {', '.join(c for _, c, _ in volumes) or 'no volumes'}",
                details=[f"{s.where}: Volume={s.value}" for _, _, s in volumes],
                fix="hand the engine the container path (the same conversion every other path gets), not the host path",
            )
        host_path, setting = hit
        local = map_to_repo(config.fleet, str(host_path))
        if local is not None and not local.exists():
            raise quadlet_container_paths.fail(
                config, "missing-in-repo",
                where=setting.where,
                observed=f"{what} {path} is {host_path} on the host, which is not in this repository",
                expected=f"{local.relative_to(config.fleet.root)} committed, since the volume mounts the repository",
                fix="commit the file, or point the variable at the one that is committed",
            )


def _compose_paths(config: RenderedService) -> None:
    """A compose service's paths, through its bind mounts: a host path behind one is the repository's or payload."""
    start = config.rendered.start
    assert isinstance(start, Compose) and start.read is not None
    compose = start.read
    declared = [PurePosixPath(p) for p in config.service.payload if p.startswith("/")]
    for what, path in container_paths(config):
        host = compose.host_path(path)
        if host is None:
            raise quadlet_container_paths.fail(
                config, "compose-not-mounted",
                where=compose.command_where,
                observed=f"{what} {path}: no bind mount of {compose.name} holds it, so the container cannot see it",
                expected=f"a path inside one of: {', '.join(m.target for m in compose.mounts) or 'no bind mounts'}",
                details=[f"{m.where}: {m.source} -> {m.target}" for m in compose.mounts],
                fix="mount the host directory in volumes:, or hand the engine the container path it is mounted at",
            )
        local = map_to_repo(config.fleet, host)
        if local is not None:
            if not local.exists():
                raise quadlet_container_paths.fail(
                    config, "compose-missing-in-repo",
                    where=compose.command_where,
                    observed=f"{what} {path} is {host} on the host, which is not in this repository",
                    expected=f"{local.relative_to(config.fleet.root)} committed, since the bind mount holds the repository",
                    fix="commit the file, or point the path at the one that is committed",
                )
            continue
        inside = PurePosixPath(host)
        if declared and not any(inside == p or p in inside.parents for p in declared):
            raise quadlet_container_paths.fail(
                config, "payload-undeclared",
                where=compose.command_where,
                observed=f"{what} {path} is {host} on the host (through volumes:), which fleet.toml's payload does not name",
                expected=f"one of the declared payload: {', '.join(config.service.payload)}",
                details=[f"{m.where}: {m.source} -> {m.target}" for m in compose.mounts],
                fix="declare the file in services.NAME.payload (what the host must hold), or fix the mount or the path",
            )
