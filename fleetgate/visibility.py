"""The devices an engine's process enumerates, and the names the engine gives them (issue 32).

One reading for every check and the ledger: a container's grant (compose ``device_ids``/``count``/``gpus:``, the render
nodes, ``NVIDIA_VISIBLE_DEVICES``; ``docker run``/``podman run`` ``--gpus``, ``--device`` and a Quadlet's
``AddDevice=``, both read by ``container_grant``; a Kubernetes GPU limit) narrows the host's devices to what the
container enumerates, and the visibility variables narrow that again:

- ROCm filters by ``ROCR_VISIBLE_DEVICES`` first; ``HIP_VISIBLE_DEVICES`` then indexes into what is left.
- ``CUDA_VISIBLE_DEVICES`` (and HIP's, which follows it) reorders and hides: the devices listed, in the order listed;
  an invalid entry (an index past the devices, a negative one) hides itself and every entry after it (CUDA C
  Programming Guide, "CUDA Environment Variables": "0,2,-1,1" leaves devices 0 and 2).
- ``GGML_VK_VISIBLE_DEVICES`` is llama.cpp's Vulkan backend's own list: indices into the physical devices the Vulkan
  loader lists; an index past them stops the backend ("Invalid Vulkan device index",
  ggml/src/ggml-vulkan/ggml-vulkan.cpp ``ggml_vk_instance_init``).

A process numbers what it enumerates from 0: llama.cpp names the k-th device ``<backend><k>`` (``CUDA0``, ``ROCm1``,
``Vulkan0``: ``GGML_VK_NAME + std::to_string(idx)`` in ggml-vulkan.cpp, ``GGML_CUDA_NAME`` likewise in ggml-cuda.cu),
so ``--device``, ``--tensor-split`` and ``--main-gpu`` index the visible cards, never the host's. fleet.toml declares a
host's devices once, in the order its GPU runtime enumerates them; fleetgate takes every backend of that host to
enumerate them in that order (a Vulkan build on a ROCm host sees the same cards), and the backend a service's engine
uses from its ``--device`` names, else from ``GGML_VK_VISIBLE_DEVICES`` (only the Vulkan backend reads it), else from
the host's own device names. Where the service itself says its backend, only the variables that backend reads apply
(``READ_BY``); otherwise every variable applies, in ``VISIBILITY``'s order.

A grant or variable fleetgate cannot map onto the declared devices (a UUID, a MIG instance, a compose device id that is
no index, a device plugin choosing among cards of different sizes) is not guessed: the seams that need the cards say
"not judged" with what to declare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetgate.fleet import Device, Host
from fleetgate.render.start import Compose, Kubernetes, container_run, quadlet_of

if TYPE_CHECKING:
    from fleetgate.render.rendered import RenderedService

__all__ = ["BACKENDS", "VISIBILITY", "ContainerGrant", "EngineCards", "Enumeration", "Unresolved", "Visibility",
           "container_grant", "docker_gpus", "engine_backend", "engine_cards", "enumerated", "named_backend",
           "visible_devices"]

VISIBILITY = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GGML_VK_VISIBLE_DEVICES")
"""The variables that narrow what the engine enumerates, in the order they apply: ROCm's runtime filter, then the
HIP/CUDA index into what is left; a Vulkan build's ggml backend indexes the devices its loader lists."""

_TRUNCATING = frozenset({"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"})
"""Variables whose first invalid entry ends the list instead of stopping the runtime (CUDA's rule; HIP follows it)."""

_UUID = re.compile(r"(?i)(GPU|MIG)-[0-9a-f]")
"""A card named by UUID (``GPU-5f4b...``) or a MIG instance (``MIG-...``): fleet.toml declares no UUID."""

BACKENDS = ("CUDA", "ROCm", "Vulkan", "Metal")
"""The GPU backends whose devices llama.cpp names ``<backend><index>`` (RPC devices come from ``--rpc``, not the host)."""


class Unresolved(ValueError):
    """Which cards an engine enumerates cannot be told from what fleet.toml declares; the message says what to
    declare and begins ``not judged: ``."""


@dataclass(frozen=True)
class Visibility:
    devices: tuple[Device, ...]
    steps: tuple[str, ...]
    problem: str | None = None
    """The runtime refuses the variables (nothing visible, an index the Vulkan backend rejects)."""
    unresolved: str | None = None
    """The variables name cards fleetgate cannot map onto the declared devices (UUIDs, MIG instances)."""


def _select(devices: tuple[Device, ...], spec: str, variable: str) -> tuple[tuple[Device, ...], str | None, str | None]:
    chosen: list[Device] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if _UUID.match(part):
            return (), None, (f"{variable}={spec} names {part!r} by UUID, which fleet.toml does not declare: name the "
                              "cards by index (the order nvidia-smi / rocm-smi lists them) to have them judged")
        index = int(part) if part.isdigit() else None
        if index is None or index >= len(devices):
            why = (f"{part!r} is not a device index" if index is None else
                   f"index {index} points past the {len(devices)} device(s) left visible at that point")
            if variable in _TRUNCATING and chosen:
                break  # CUDA/HIP: an invalid entry hides itself and everything after it
            return (), f"{variable}={spec}: {why}", None
        chosen.append(devices[index])
    return tuple(chosen), None, None


READ_BY: dict[str, tuple[str, ...]] = {
    "CUDA": ("CUDA_VISIBLE_DEVICES",),
    "ROCm": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "Vulkan": ("GGML_VK_VISIBLE_DEVICES",),
}
"""The variables each backend's runtime reads: CUDA its own; ROCm's runtime ROCR's, then HIP's, or CUDA's where HIP's
is unset (HIP honours it for ported code); llama.cpp's Vulkan backend its own list alone (the Vulkan loader reads
none of the others)."""


def _read_by(backend: str | None, env: dict[str, str]) -> tuple[str, ...]:
    """The variables of ``env`` the backend applies, in their order (every one where the backend is not known)."""
    read = READ_BY.get(backend or "", VISIBILITY)
    if backend == "ROCm" and "HIP_VISIBLE_DEVICES" in env:
        read = tuple(v for v in read if v != "CUDA_VISIBLE_DEVICES")
    return tuple(v for v in VISIBILITY if v in read and v in env)


def visible_devices(all_devices: tuple[Device, ...], env: dict[str, str], backend: str | None = None) -> Visibility:
    """What the variables leave of ``all_devices``: those the backend reads (every one, in order, where ``backend``
    is None)."""
    devices = all_devices
    steps: list[str] = []
    for variable in _read_by(backend, env):
        if variable in env:
            devices, problem, unresolved = _select(devices, env[variable], variable)
            steps.append(f"{variable}={env[variable]} -> {', '.join(d.name for d in devices) or 'nothing'}")
            if problem or unresolved:
                return Visibility((), tuple(steps), problem, unresolved)
    return Visibility(devices, tuple(steps))


def docker_gpus(pool: tuple[Device, ...], values: tuple[str, ...]) -> tuple[Device, ...]:
    """Of ``pool``, what ``docker run --gpus`` grants: ``all``, ``2`` (the first two), ``device=0,1`` /
    ``'"device=0,1"'`` (by the host's index)."""
    chosen: list[Device] = []
    for value in values:
        text = value.strip().strip("'\"")
        if text == "all":
            return pool
        if text.isdigit():
            chosen += pool[:int(text)]
            continue
        for part in text.split(","):
            key, _, item = part.partition("=")
            item = item if key.strip() in ("device", "\"device") else key
            item = item.strip().strip("'\"")
            if item.isdigit():
                chosen += [d for d in pool if d.index == int(item)]
    return tuple(dict.fromkeys(chosen))


@dataclass(frozen=True)
class Enumeration:
    """What one engine process enumerates, in the order it numbers them (non-serving devices included: they take
    a number too)."""

    devices: tuple[Device, ...]
    how: str
    narrowed: bool
    """A grant or a variable chose these: the engine's numbering may differ from the host's."""
    plugin: bool = False
    """Granted by Kubernetes' device plugin, which gives a card to one container only."""
    unresolved: str | None = None


def _nodes(devices: tuple[str, ...]) -> bool:
    return any(d.split(":")[0].rstrip("/") in ("/dev/dri", "/dev/kfd") or d.startswith("/dev/dri/renderD")
               for d in devices)


def _some_nodes(nodes: tuple[str, ...], host: Host, how: str) -> Enumeration | None:
    """Single render nodes (``/dev/dri/renderD129``) that pass fewer cards than the host has: which cards they are
    follows the host's DRM probe order, which fleet.toml does not declare, so it is not guessed (None: every card
    is passed, or no single node is named)."""
    single = [n for n in nodes if n.startswith("/dev/dri/renderD")]
    if not single or any(n.rstrip("/") == "/dev/dri" for n in nodes) or len(single) >= len(host.cards):
        return None
    return Enumeration((), how, True, unresolved=(
        f"{how} passes {len(single)} of host {host.name}'s {len(host.cards)} cards by render node, and which cards "
        "those are follows the host's DRM order, which fleet.toml does not declare: pass /dev/dri (every card) and "
        "pin the engine by HIP_VISIBLE_DEVICES or GGML_VK_VISIBLE_DEVICES to have it judged"))


def enumerated(config: RenderedService) -> Enumeration:
    """The devices a rendered service's engine process enumerates: the container's grant, then its visibility
    variables (a host process: the variables alone)."""
    host = config.host
    rendered = config.rendered
    env = dict(rendered.env)
    # the variables a backend reads are filtered only where the service says its backend: the host's names say how
    # the host's cards are named, not which build this service runs
    backend = named_backend(config)
    start = rendered.start
    if isinstance(start, Kubernetes) and start.read is not None:
        pod, shared = start.read.gpus, start.read.shared
        if pod is None:
            return Enumeration((), "no GPU in resources.limits", True, plugin=False)
        how = f"{pod.how} ({pod.where})"
        # a card the plugin time-slices, or NVIDIA_VISIBLE_DEVICES over the plugin, reaches several containers
        exclusive = shared is None
        if shared is not None:
            how += f"; {shared.how} ({shared.where})"
        indices = pod.indices if pod.indices is not None else tuple(range(len(host.devices)))
        granted = tuple(host.devices[i] for i in indices if i < len(host.devices))
        sizes = {d.vram_bytes for d in host.cards}
        if len(granted) < len(host.cards) and len(sizes) > 1:
            return Enumeration((), how, True, plugin=exclusive, unresolved=(
                f"the device plugin picks which {len(granted)} of host {host.name}'s cards of different sizes the pod "
                "gets: pin the pod to a node whose cards are alike (or declare that node as its own host)"))
        return _narrowed(granted, env, how, plugin=exclusive, narrowed=len(granted) < len(host.devices),
                         backend=backend)
    if isinstance(start, Compose) and start.read is not None:
        grant = start.read.gpus
        if grant is None:
            return Enumeration((), "compose grants no GPU", True)
        how = f"compose {grant.how} ({grant.where})"
        if grant.unknown:
            return Enumeration((), how, True, unresolved=(
                f"{grant.how} names {', '.join(grant.unknown)}, not an index of host {host.name}'s devices: name the "
                "cards by index (nvidia-smi's order) to have them judged"))
        some = _some_nodes(grant.nodes, host, how)
        if some is not None:
            return some
        if grant.indices is None:
            return _narrowed(host.devices, env, how, narrowed=False, backend=backend)
        granted = tuple(d for d in host.devices if d.index in grant.indices)
        return _narrowed(granted, env, how, narrowed=granted != host.devices, backend=backend)
    given = container_grant(config)
    if given is not None:
        if given.unresolved or not given.devices:
            return Enumeration((), given.how, True, unresolved=given.unresolved)
        return _narrowed(given.devices, env, given.how, narrowed=given.devices != host.devices, backend=backend)
    return _narrowed(host.devices, env, "", narrowed=False, backend=backend)


@dataclass(frozen=True)
class ContainerGrant:
    """The devices of the host a ``docker run``/``podman run`` line or a Quadlet gives its container, in the host's
    numbering, before the visibility variables narrow them."""

    devices: tuple[Device, ...]
    how: str
    granted: bool = True
    """False: nothing grants a device (no ``--gpus``, no GPU ``--device``/``AddDevice=``, no
    ``NVIDIA_VISIBLE_DEVICES``): the container sees none."""
    unresolved: str | None = None


def container_grant(config: RenderedService) -> ContainerGrant | None:
    """What the container that runs a service's engine is granted, where a ``docker run``/``podman run`` line (a
    script's) or a Quadlet starts it: its device nodes, CDI names, ``--gpus``, or the NVIDIA runtime's
    ``NVIDIA_VISIBLE_DEVICES``. None where the engine is not started by either."""
    rendered = config.rendered
    env = dict(rendered.env)
    run = container_run(rendered.start)
    if run is not None:
        return _grant(config.host, run.devices, run.gpus, False, env, f"{run.client} run")
    quadlet = quadlet_of(rendered.start)
    if quadlet is not None:
        return _grant(config.host, quadlet.devices, quadlet.gpus, quadlet.privileged, env,
                      f"Quadlet {quadlet.path.name}", quadlet=True)
    return None


def _grant(host: Host, devices: tuple[str, ...], gpus: tuple[str, ...], privileged: bool, env: dict[str, str],
           client: str, *, quadlet: bool = False) -> ContainerGrant:
    """One reading of ``--device``/``AddDevice=``, ``--gpus`` and ``NVIDIA_VISIBLE_DEVICES`` for both clients."""
    option = "AddDevice=" if quadlet else "--device "
    if privileged:
        return ContainerGrant(host.devices, f"{client} --privileged (every device of the host)")
    if _nodes(devices):
        how = f"{client} {' '.join(option + d for d in devices)}"
        some = _some_nodes(tuple(d.split(":")[0] for d in devices if d.startswith("/dev/dri")), host, how)
        if some is not None:
            return ContainerGrant((), how, unresolved=some.unresolved)
        return ContainerGrant(host.devices, how)
    cdi = [d.split("=", 1) for d in devices if d.split("=", 1)[0] in _CDI]
    if cdi and not gpus:
        return _cdi(host.devices, cdi, f"{client} {' '.join(option + d for d in devices)}")
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    if not gpus and visible is not None:
        # the NVIDIA runtime (--runtime nvidia, or its hook under podman) grants the cards this names
        return _nvidia_visible(host.devices, visible, f"{client} with NVIDIA_VISIBLE_DEVICES={visible}")
    if not gpus:
        what = "no AddDevice=" if quadlet else "no --gpus, no GPU --device"
        return ContainerGrant((), f"{client} with no GPU ({what}, no NVIDIA_VISIBLE_DEVICES)", granted=False)
    return ContainerGrant(docker_gpus(host.devices, gpus), f"{client} --gpus {' '.join(gpus)}")


_CDI = frozenset({"nvidia.com/gpu", "amd.com/gpu"})
"""CDI device kinds (``--device nvidia.com/gpu=all``, podman's and Docker's Container Device Interface)."""


def _cdi(devices: tuple[Device, ...], named: list[list[str]], how: str) -> ContainerGrant:
    values = [v[1] if len(v) > 1 else "" for v in named]
    if "all" in values:
        return ContainerGrant(devices, how)
    if all(v.isdigit() for v in values):
        return ContainerGrant(tuple(d for d in devices if str(d.index) in values), how)
    return ContainerGrant((), how, unresolved=(
        f"{how} names a CDI device fleetgate cannot map onto the host's declared devices (a UUID or a name): grant "
        "the cards by index (nvidia.com/gpu=0) to have them judged"))


def _nvidia_visible(devices: tuple[Device, ...], value: str, how: str) -> ContainerGrant:
    """NVIDIA_VISIBLE_DEVICES as the NVIDIA container runtime reads it: ``all``, ``none``/``void``/empty (no card),
    host indices, or UUIDs (not declared: not judged)."""
    text = value.strip()
    if text == "all":
        return ContainerGrant(devices, how)
    if text in ("", "none", "void"):
        return ContainerGrant((), how)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return ContainerGrant((), how, unresolved=(
            f"NVIDIA_VISIBLE_DEVICES={value} names cards by UUID, which fleet.toml does not declare: name them by "
            "index to have them judged"))
    return ContainerGrant(tuple(d for d in devices if str(d.index) in parts), how)


def _narrowed(devices: tuple[Device, ...], env: dict[str, str], how: str, *, narrowed: bool,
              plugin: bool = False, backend: str | None = None) -> Enumeration:
    visibility = visible_devices(devices, env, backend)
    steps = "; ".join(visibility.steps)
    text = "; ".join(t for t in (how, steps) if t) or "every device of the host (no grant, no visibility variable)"
    if visibility.unresolved:
        return Enumeration((), text, True, plugin=plugin, unresolved=visibility.unresolved)
    return Enumeration(visibility.devices, text, narrowed or bool(visibility.steps), plugin=plugin)


def _prefix(name: str) -> str | None:
    stem = name.rstrip("0123456789")
    return stem if stem in BACKENDS and stem != name else None


def named_backend(config: RenderedService) -> str | None:
    """The backend the service itself says it runs: its ``--device`` names' (one backend), else Vulkan where
    ``GGML_VK_VISIBLE_DEVICES`` is set (only that backend reads it); None where the service does not say."""
    llama = config.llama
    if llama is not None:
        named = {_prefix(n) for n in (*llama.devices, *llama.spec_draft_device) if n.lower() != "none"}
        named.discard(None)
        if len(named) == 1:
            return named.pop()
    if "GGML_VK_VISIBLE_DEVICES" in dict(config.rendered.env):
        return "Vulkan"
    return None


def engine_backend(config: RenderedService) -> str | None:
    """The backend the engine names its devices by: the one the service says (``named_backend``), else the host's
    declared names' (None where they name no backend alike)."""
    named = named_backend(config)
    if named is not None:
        return named
    declared = {_prefix(d.name) for d in config.host.cards}
    return declared.pop() if len(declared) == 1 else None


@dataclass(frozen=True)
class EngineCards:
    """The serving cards an engine process sees, each with the name the engine gives it, in the engine's order."""

    cards: tuple[tuple[str, Device], ...]
    how: str
    plugin: bool = False
    unresolved: str | None = None

    def device(self, name: str) -> Device | None:
        return next((d for n, d in self.cards if n == name), None)


def engine_cards(config: RenderedService) -> EngineCards:
    """The serving cards the engine of a rendered service sees, named as the engine names them.

    Where nothing narrows what the host enumerates and the engine's backend is the host's, the names are the
    declared ones: the ledger of a service with no grant and no variable is the one it always was."""
    seen = enumerated(config)
    backend = engine_backend(config)
    declared = {_prefix(d.name) for d in config.host.cards}
    renumber = backend is not None and (seen.narrowed or declared != {backend})
    cards = tuple((f"{backend}{k}" if renumber else d.name, d) for k, d in enumerate(seen.devices) if d.serves)
    return EngineCards(cards, seen.how, seen.plugin, seen.unresolved)
