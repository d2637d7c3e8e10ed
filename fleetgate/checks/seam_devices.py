"""Device visibility: the engine sees exactly the cards it is meant to use (B.9, INC-19, INC-29).

ROCm filters devices by ROCR_VISIBLE_DEVICES first; HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES)
then indexes into what is left. llama.cpp names the visible devices ROCm0, ROCm1, ... in that order.
The rules are fleetgate.visibility's, which the ledger reads too; a card named by UUID is not judged here.
"""

from __future__ import annotations

from fleetgate.checks import NotJudged, service_seam
from fleetgate.fleet import Device
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose, Kubernetes, quadlet_of
from fleetgate.visibility import ContainerGrant, container_grant, named_backend, visible_devices

__all__: list[str] = []

NAME = "device-visibility"


def _no_devices(config: RenderedService) -> str | None:
    if not config.host.devices:
        return (f"host {config.host.name} declares no device (CPU only): declare its devices, in "
                f"enumeration order, in hosts.{config.host.name}.devices")
    return None


@service_seam(
    cites=("B-DV-1", "B-DV-2", "B-DV-3", "B-DV-4", "INC-19", "INC-29"),
    summary="visibility variables leave exactly the serving cards the engine is told to use",
    requires=_no_devices,
    engines=("llama.cpp", "vllm"),
    codes={
        "nothing-visible": "the visibility variables leave no device (hipErrorNoDevice)",
        "non-serving-card-visible": "a non-serving device (an iGPU) is visible to the engine",
        "too-few-visible": "fewer visible devices than `--device`/tensor parallelism needs",
        "tensor-split-length": "`--device` and `--tensor-split` of different lengths",
        "compose-no-gpu": ("a compose service is granted no GPU (no `deploy.resources.reservations.devices`, `gpus:`, "
                           "`runtime: nvidia` or `/dev/dri` in `devices:`)"),
        "compose-unknown-device": "a compose GPU grant names a device id that is not an index of the host's cards",
        "container-no-gpu": ("a `docker run`/`podman run` line or a Quadlet grants its container no GPU (no `--gpus`, "
                             "no GPU `--device`/`AddDevice=`, no `NVIDIA_VISIBLE_DEVICES`)"),
        "kubernetes-no-gpu": ("a Kubernetes container asks for no GPU in `resources.limits` (`nvidia.com/gpu`, "
                              "`amd.com/gpu`, `gpu.intel.com/i915`): the device plugin gives it none"),
        "kubernetes-too-many-cards": "a Kubernetes container's GPU limit asks for more cards than its host has",
    },
)
def device_visibility(config: RenderedService) -> None:
    env = dict(config.rendered.env)
    seen = visible_devices(_granted(config), env, named_backend(config))
    if seen.unresolved:
        raise NotJudged(seen.unresolved)
    where = next((config.where_variable(v) for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                                                     "ROCR_VISIBLE_DEVICES", "GGML_VK_VISIBLE_DEVICES") if v in env),
                 str(config.rendered.script))
    if seen.problem or not seen.devices:
        raise device_visibility.fail(
            config, "nothing-visible",
            where=where,
            observed=seen.problem or "no device left visible",
            details=list(seen.steps),
            expected="a non-empty device set: ROCR filters first, HIP/CUDA index into the filtered list",
            fix="never pair a single-valued ROCR_VISIBLE_DEVICES with HIP_VISIBLE_DEVICES; set one of them (hipErrorNoDevice)",
        )
    hidden = [d for d in seen.devices if not d.serves]
    if hidden:
        raise device_visibility.fail(
            config, "non-serving-card-visible",
            where=where,
            observed=f"{', '.join(d.name for d in hidden)} is visible to the engine",
            details=list(seen.steps) or [f"no visibility variable: all {len(config.host.devices)} devices enumerate"],
            expected=f"only the serving cards ({', '.join(d.name for d in config.host.cards)})",
            fix="hide the non-serving device: e.g. HIP_VISIBLE_DEVICES=" +
                ",".join(str(d.index) for d in config.host.cards),
        )
    needed = _devices_needed(config)
    if needed > len(seen.devices):
        raise device_visibility.fail(
            config, "too-few-visible",
            where=where,
            observed=f"{len(seen.devices)} visible device(s) for an engine configured for {needed}",
            details=list(seen.steps),
            expected=f"at least {needed} visible serving cards",
            fix="widen the visibility variables, or configure fewer devices",
        )
    llama = config.llama
    if llama is not None and llama.devices and llama.tensor_split and len(llama.devices) != len(llama.tensor_split):
        raise device_visibility.fail(
            config, "tensor-split-length",
            cites=("B-DV-4",), where=config.where_flag(llama.use("tensor_split")),
            observed=f"--device {','.join(llama.devices)} ({len(llama.devices)}) with --tensor-split "
                     f"{','.join(f'{v:g}' for v in llama.tensor_split)} ({len(llama.tensor_split)} entries)",
            expected="one --tensor-split entry per --device entry",
            fix="give every device its share in --tensor-split",
        )


def _granted(config: RenderedService) -> tuple[Device, ...]:
    """The devices the engine's process can enumerate: the host's, or those a compose service is granted."""
    __tracebackhide__ = True
    start = config.rendered.start
    if isinstance(start, Kubernetes) and start.read is not None:
        return _pod_granted(config)
    given = container_grant(config)
    if given is not None:
        return _container_granted(config, given)
    compose = start.read if isinstance(start, Compose) else None
    if compose is None:
        return config.host.devices
    grant = compose.gpus
    if grant is None:
        raise device_visibility.fail(
            config, "compose-no-gpu",
            where=f"{compose.path}:{compose.line}",
            observed=(f"compose service {compose.name} is granted no GPU: no deploy.resources.reservations.devices, "
                      "no gpus:, no runtime: nvidia, no /dev/dri in devices:"),
            expected=f"the container granted the serving cards ({', '.join(d.name for d in config.host.cards)})",
            fix=("reserve them: deploy: resources: reservations: devices: [{driver: nvidia, count: 1, capabilities: "
                 "[gpu]}] (a container sees no GPU unless it is granted one: llama.cpp then runs on the CPU, vLLM "
                 "stops at start)"),
        )
    if grant.indices is None:
        return config.host.devices
    past = [str(i) for i in grant.indices if i >= len(config.host.devices)]
    if grant.unknown or past:
        raise device_visibility.fail(
            config, "compose-unknown-device",
            where=grant.where,
            observed=f"{grant.how} names {', '.join([*grant.unknown, *past])}, not a card of host {config.host.name}",
            details=[f"{d.index}: {d.name}" for d in config.host.devices],
            expected=f"device indices of the host's {len(config.host.devices)} device(s), in enumeration order",
            fix="name the card by its index (nvidia-smi's order), or declare the host's devices in fleet.toml",
        )
    return tuple(config.host.devices[i] for i in grant.indices)


def _container_granted(config: RenderedService, given: ContainerGrant) -> tuple[Device, ...]:
    """The cards a ``docker run``/``podman run`` line or a Quadlet gives its container (fleetgate.visibility's
    reading, the ledger's too): ``--gpus device=1`` is that card alone, as the container's device 0."""
    __tracebackhide__ = True
    if given.unresolved:
        raise NotJudged(given.unresolved)
    if not given.granted:
        quadlet = quadlet_of(config.rendered.start)
        raise device_visibility.fail(
            config, "container-no-gpu",
            where=str(quadlet.path) if quadlet is not None else str(config.rendered.script),
            observed=f"{given.how}: the container is given no GPU",
            expected=f"the container granted the serving cards ({', '.join(d.name for d in config.host.cards)})",
            fix=("grant them: " + ("AddDevice=nvidia.com/gpu=all (CDI; AddDevice=/dev/kfd and AddDevice=/dev/dri for "
                                   "ROCm or Vulkan) in [Container]" if quadlet is not None else
                                   "--gpus all, or --device nvidia.com/gpu=all (CDI; --device /dev/kfd --device "
                                   "/dev/dri for ROCm or Vulkan)")
                 + " (a container sees no GPU unless it is granted one: llama.cpp then runs on the CPU, vLLM stops at "
                   "start)"),
        )
    return given.devices


def _pod_granted(config: RenderedService) -> tuple[Device, ...]:
    """The cards a Kubernetes container gets: as many as its GPU limit, which the device plugin picks."""
    __tracebackhide__ = True
    start = config.rendered.start
    assert isinstance(start, Kubernetes)
    pod = start.read
    assert pod is not None
    grant = pod.gpus
    if grant is None:
        raise device_visibility.fail(
            config, "kubernetes-no-gpu",
            where=pod.command_where,
            observed=f"{pod.name} has no GPU in resources.limits",
            expected=f"the container granted the serving cards ({', '.join(d.name for d in config.host.cards)})",
            fix=("ask the device plugin for them: resources: limits: nvidia.com/gpu: 1 (amd.com/gpu, "
                 "gpu.intel.com/i915 for the other vendors); a container is given no card otherwise: llama.cpp then "
                 "runs on the CPU, vLLM stops at start"),
        )
    if grant.indices is None:
        return config.host.devices  # NVIDIA_VISIBLE_DEVICES=all: every card of the node
    if len(grant.indices) > len(config.host.devices):
        raise device_visibility.fail(
            config, "kubernetes-too-many-cards",
            where=grant.where,
            observed=f"{grant.how}: {len(grant.indices)} cards, and host {config.host.name} has "
                     f"{len(config.host.devices)}",
            details=[f"{d.index}: {d.name}" for d in config.host.devices],
            expected=f"at most {len(config.host.devices)} card(s): the pod stays Pending until a node has that many",
            fix="ask for the cards the node has, or declare the host's devices in fleet.toml",
        )
    return tuple(config.host.devices[i] for i in grant.indices if i < len(config.host.devices))


def _devices_needed(config: RenderedService) -> int:
    if config.llama is not None:
        names = set(config.llama.devices) | set(config.llama.spec_draft_device)
        indices = [int(n[len(n.rstrip("0123456789")):]) for n in names if n[-1:].isdigit()]
        return max(indices) + 1 if indices else 1
    if config.vllm is not None:
        return config.vllm.tensor_parallel_size
    return 1
