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

from fleetgate.checks import NotJudged, service_seam
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
            return None
        case Compose(read=compose) if compose is not None:
            return None
    return not_a_quadlet(config)


@service_seam(
    name=PATHS,
    cites=("B-VL-14", "B-VL-16", "INC-85"),
    summary="every path a containerised engine is given is inside a Volume= (a compose bind mount, a Kubernetes "
               "volumeMount) and exists behind it: in the repository, or among the payload the host is declared to hold",
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
        "k8s-not-mounted": "a path a Kubernetes container's engine is given lies in no `volumeMount` of the container",
        "k8s-missing-in-repo": "a hostPath volume holds the repository, and the file the engine is given there is not committed",
        "k8s-payload-undeclared": (
            "a hostPath volume puts a path the engine is given on a host file fleet.toml's `payload` does not name"
        ),
        "k8s-configmap-key-missing": (
            "a path the engine is given lies in a configMap volume whose ConfigMap (in the repository) has no such key"
        ),
    },
)
def quadlet_container_paths(config: RenderedService) -> None:
    if isinstance(config.rendered.start, Compose) and config.rendered.start.read is not None:
        _compose_paths(config)
        return
    if isinstance(config.rendered.start, Kubernetes) and config.rendered.start.read is not None:
        _kubernetes_paths(config)
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
    """A compose service's paths, through its bind mounts: a host path behind one is the repository's or payload;
    one on a named or anonymous volume, a tmpfs or a home-directory source is not judged (no file shows it)."""
    start = config.rendered.start
    assert isinstance(start, Compose) and start.read is not None
    compose = start.read
    details = [f"{m.where}: {m.source} -> {m.target}" for m in compose.mounts] + [
        f"{m.where}: {m.kind} -> {m.target}" for m in compose.opaque]
    unseen: list[str] = []
    for what, path in container_paths(config):
        if compose.holder(path) is None:
            raise quadlet_container_paths.fail(
                config, "compose-not-mounted",
                where=compose.command_where,
                observed=f"{what} {path}: no entry of volumes: of {compose.name} holds it, so the container cannot "
                         "see it",
                expected="a path inside one of: "
                         f"{', '.join([m.target for m in compose.mounts] + [m.target for m in compose.opaque]) or 'no volumes'}",
                details=details,
                fix="mount the host directory in volumes:, or hand the engine the container path it is mounted at",
            )
        volume = compose.volume_at(path)
        if volume is not None:
            unseen.append(f"{what} {path} is on {volume.kind} ({_shown(config, volume.where)})")
            continue
        host = compose.host_path(path)
        assert host is not None
        _host_side(config, what, path, host, compose.command_where, details, kubernetes=False)
    if unseen:
        raise NotJudged("; ".join(unseen) + ": what a volume holds is written at run time, not by the repository; "
                        "a bind mount of the host directory (held to the repository or the payload) shows it")


def _host_side(config: RenderedService, what: str, path: str, host: str, where: str, details: list[str], *,
               kubernetes: bool) -> None:
    """A host path a bind mount (compose) or a hostPath volume (Kubernetes) puts behind a path the engine is given:
    the repository's file, committed, or a file of the payload fleet.toml declares for the host."""
    mount = "a hostPath volume" if kubernetes else "the bind mount"
    local = map_to_repo(config.fleet, host)
    if local is not None:
        if not local.exists():
            raise quadlet_container_paths.fail(
                config, "k8s-missing-in-repo" if kubernetes else "compose-missing-in-repo",
                where=where,
                observed=f"{what} {path} is {host} on the host, which is not in this repository",
                expected=f"{local.relative_to(config.fleet.root)} committed, since {mount} holds the repository",
                fix="commit the file, or point the path at the one that is committed",
            )
        return
    declared = [PurePosixPath(p) for p in config.service.payload if p.startswith("/")]
    inside = PurePosixPath(host)
    if declared and not any(inside == p or p in inside.parents for p in declared):
        raise quadlet_container_paths.fail(
            config, "k8s-payload-undeclared" if kubernetes else "payload-undeclared",
            where=where,
            observed=f"{what} {path} is {host} on the host (through {'a hostPath volume' if kubernetes else 'volumes:'}), "
                     "which fleet.toml's payload does not name",
            expected=f"one of the declared payload: {', '.join(config.service.payload)}",
            details=details,
            fix="declare the file in services.NAME.payload (what the host must hold), or fix the mount or the path",
        )


# What a volume of another kind holds is not in the repository nor on a host path fleet.toml can declare.
_UNSEEN = {
    "persistentVolumeClaim": "a PersistentVolumeClaim: what the claim holds is written there at run time (kubectl cp, "
                             "a download job), not by the repository",
    "emptyDir": "an emptyDir, which starts empty: what fills it (an init container, the engine's download) is not read",
    "secret": "a Secret volume: its keys are not read, so as never to read a secret",
}


def _kubernetes_paths(config: RenderedService) -> None:
    """A Kubernetes container's paths, through its volumeMounts: a hostPath is judged as compose's bind mount is, a
    ConfigMap the repository defines must have the key, and what no file of the repository shows is not judged."""
    start = config.rendered.start
    assert isinstance(start, Kubernetes) and start.read is not None
    pod = start.read
    details = [f"{m.where}: {m.kind}{f' {m.source}' if m.source else ''} -> {m.target}" for m in pod.mounts]
    unseen: list[str] = []
    for what, path in container_paths(config):
        found = pod.mount_of(path)
        if found is None:
            # The same rule as compose's and the Quadlet's: a path under no mount is the image's own filesystem. The
            # engine images fleetgate reads (llama.cpp's server images, vllm/vllm-openai) hold no model and no
            # template, and the path most often handed unmounted is the host's own (INC-85), which no reading of the
            # image could tell from one baked into it. A fleet that bakes its files into its own image mounts nothing
            # and is told so, once, by this code (waive it), rather than have every unmounted path pass unseen.
            raise quadlet_container_paths.fail(
                config, "k8s-not-mounted",
                where=pod.command_where,
                observed=f"{what} {path}: no volumeMount of {pod.name} holds it, so the container sees only its "
                         f"image ({pod.image or 'unnamed'}) there",
                expected=f"a path inside one of: {', '.join(m.target for m in pod.mounts) or 'no volumeMounts'}",
                details=details,
                fix="mount the directory (volumeMounts: with a hostPath or a claim that holds it), or hand the "
                    "engine the path it is mounted at",
            )
        mount, rest = found
        if mount.kind == "hostPath" and mount.source is not None:
            host = pod.host_path(path)
            assert host is not None
            _host_side(config, what, path, host, pod.command_where, details, kubernetes=True)
        elif mount.kind == "configMap" and mount.keys is not None:
            entry = PurePosixPath(mount.sub or ".") / rest
            held = [PurePosixPath(k) for k in mount.keys]
            if str(entry) != "." and not any(entry == k or entry in k.parents for k in held):
                raise quadlet_container_paths.fail(
                    config, "k8s-configmap-key-missing",
                    where=mount.where,
                    observed=f"{what} {path} is the entry {entry} of ConfigMap {mount.source} (mounted at "
                             f"{mount.target}), which has no such key, so the file is not there",
                    expected=f"one of its keys: {', '.join(mount.keys) or 'none'}",
                    details=details,
                    fix=f"add {entry} to ConfigMap {mount.source}'s data, or hand the engine the key it has",
                )
        elif mount.kind == "configMap":
            unseen.append(f"{what} {path} is in ConfigMap {mount.source} ({_shown(config, mount.where)}), which no "
                          "manifest of the repository defines: whether it has the key is the cluster's")
        else:
            why = _UNSEEN.get(mount.kind, f"a {mount.kind} volume, whose contents fleetgate does not read")
            unseen.append(f"{what} {path} is on {why} ({_shown(config, mount.where)})")
    if unseen:
        raise NotJudged("; ".join(unseen) + ": only a hostPath (held to the repository or the payload) or a "
                        "ConfigMap the repository defines shows what is behind a path")


def _shown(config: RenderedService, where: str) -> str:
    root = f"{config.fleet.root}/"
    return where[len(root):] if where.startswith(root) else where
