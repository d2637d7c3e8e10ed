"""fleetgate.visibility: what an engine process enumerates, as the runtimes document it, and the names llama.cpp
gives what it sees. The fleet-level reproductions (a pinned llama-server beside vLLM, over its one card) are
tests/test_misses_round3.py's; these hold the reading itself, one rule per case."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from fleetgate.fleet import Device
from fleetgate.render.start import ServeScript
from fleetgate.visibility import engine_cards, visible_devices

GIB = 1 << 30
THREE = (Device("CUDA0", 24 * GIB, 0), Device("CUDA1", 24 * GIB, 1), Device("CUDA2", 24 * GIB, 2))


@pytest.mark.parametrize(("env", "names"), [
    # The CUDA C Programming Guide's own example: "0,2,-1,1" shows devices 0 and 2; the invalid -1 hides itself and 1.
    ({"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}, ["CUDA0", "CUDA2"]),
    # An index past the devices is invalid the same way.
    ({"CUDA_VISIBLE_DEVICES": "1,7,0"}, ["CUDA1"]),
    # Order is the variable's.
    ({"CUDA_VISIBLE_DEVICES": "2,0"}, ["CUDA2", "CUDA0"]),
    # ROCm filters first; HIP indexes what is left.
    ({"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"}, ["CUDA2"]),
    ({}, ["CUDA0", "CUDA1", "CUDA2"]),
])
def test_what_the_variables_leave(env: dict[str, str], names: list[str]) -> None:
    seen = visible_devices(THREE, env)
    assert (seen.problem, seen.unresolved) == (None, None)
    assert [d.name for d in seen.devices] == names


@pytest.mark.parametrize(("env", "problem"), [
    # Nothing valid before the invalid entry: nothing visible (hipErrorNoDevice, CUDA's no device).
    ({"HIP_VISIBLE_DEVICES": "5"}, "HIP_VISIBLE_DEVICES=5: index 5 points past the 3 device(s) left visible at that point"),
    # llama.cpp's Vulkan backend throws at an index past its devices ("Invalid Vulkan device index"), valid ones or not.
    ({"GGML_VK_VISIBLE_DEVICES": "0,5"},
     "GGML_VK_VISIBLE_DEVICES=0,5: index 5 points past the 3 device(s) left visible at that point"),
])
def test_what_the_runtime_refuses(env: dict[str, str], problem: str) -> None:
    seen = visible_devices(THREE, env)
    assert (seen.devices, seen.problem, seen.unresolved) == ((), problem, None)


@pytest.mark.parametrize("value", ["GPU-8f6c2d4e-1a3b-4c5d-9e8f-0a1b2c3d4e5f", "0,MIG-5e1c7a9b-3f2d-5a6b-8c7d"])
def test_a_uuid_is_not_guessed(value: str) -> None:
    seen = visible_devices(THREE, {"CUDA_VISIBLE_DEVICES": value})
    assert seen.devices == () and seen.problem is None
    assert seen.unresolved is not None and "by UUID, which fleet.toml does not declare" in seen.unresolved


def _config(devices: tuple[Device, ...], env: dict[str, str], device_flag: tuple[str, ...] = ()) -> Any:
    """The few fields of a rendered host-process service that engine_cards reads."""
    return SimpleNamespace(
        host=SimpleNamespace(name="box", devices=devices, cards=tuple(d for d in devices if d.serves)),
        rendered=SimpleNamespace(env=tuple(env.items()), start=ServeScript()),
        llama=SimpleNamespace(devices=device_flag, spec_draft_device=()),
    )


# dankserver's shape: two R9700s and the Raphael iGPU, declared not to serve, third in the runtime's order.
AMD = (Device("ROCm0", 32 * GIB, 0), Device("ROCm1", 32 * GIB, 1), Device("Raphael iGPU", GIB // 2, 2, serves=False))


@pytest.mark.parametrize(("env", "device_flag", "cards"), [
    # Nothing narrows, the backend is the host's: the declared names, the iGPU not a card (as before issue 32).
    ({}, (), [("ROCm0", "ROCm0"), ("ROCm1", "ROCm1")]),
    # Pinned to the second card: the engine calls it ROCm0.
    ({"HIP_VISIBLE_DEVICES": "1"}, (), [("ROCm0", "ROCm1")]),
    ({"HIP_VISIBLE_DEVICES": "1,0"}, (), [("ROCm0", "ROCm1"), ("ROCm1", "ROCm0")]),
    # The iGPU left visible takes a number of its own; it is no card of the ledger.
    ({"HIP_VISIBLE_DEVICES": "2,1"}, (), [("ROCm1", "ROCm1")]),
    # A Vulkan build: --device names its backend, and its k-th device is the host's k-th.
    ({}, ("Vulkan1",), [("Vulkan0", "ROCm0"), ("Vulkan1", "ROCm1")]),
    # GGML_VK_VISIBLE_DEVICES is read by the Vulkan backend alone: it says the build is one.
    ({"GGML_VK_VISIBLE_DEVICES": "1"}, (), [("Vulkan0", "ROCm1")]),
    # Two backends named at once (a ROCm card and a Vulkan one): the host's names stand, and Vulkan0 matches none.
    ({}, ("ROCm0", "Vulkan0"), [("ROCm0", "ROCm0"), ("ROCm1", "ROCm1")]),
])
def test_the_engine_names_what_it_sees(env: dict[str, str], device_flag: tuple[str, ...],
                                       cards: list[tuple[str, str]]) -> None:
    seen = engine_cards(_config(AMD, env, device_flag))
    assert seen.unresolved is None
    assert [(name, d.name) for name, d in seen.cards] == cards


def test_cards_named_by_no_backend_keep_their_names() -> None:
    # Names that are no engine's (a model name): fleetgate cannot rename them, and does not.
    devices = (Device("RTX 3090", 24 * GIB, 0), Device("RTX 3090 Ti", 24 * GIB, 1))
    seen = engine_cards(_config(devices, {"CUDA_VISIBLE_DEVICES": "1"}))
    assert [(name, d.name) for name, d in seen.cards] == [("RTX 3090 Ti", "RTX 3090 Ti")]


@pytest.mark.parametrize(("gpus", "devices", "env", "cards", "unresolved"), [
    # --gpus device=1: the container sees the host's CUDA1 alone, as its CUDA0.
    (("device=1",), (), {}, [("CUDA0", "CUDA1")], False),
    # The NVIDIA runtime's own variable, with no --gpus.
    ((), (), {"NVIDIA_VISIBLE_DEVICES": "2"}, [("CUDA0", "CUDA2")], False),
    ((), (), {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "1"}, [("CUDA0", "CUDA1")], False),
    ((), (), {"NVIDIA_VISIBLE_DEVICES": "GPU-8f6c2d4e-1a3b"}, [], True),
    # CDI: podman's and Docker's --device nvidia.com/gpu=N.
    ((), ("nvidia.com/gpu=1",), {}, [("CUDA0", "CUDA1")], False),
    ((), ("nvidia.com/gpu=all",), {}, [("CUDA0", "CUDA0"), ("CUDA1", "CUDA1"), ("CUDA2", "CUDA2")], False),
    # Nothing grants a card: the container sees none.
    ((), (), {}, [], False),
    # One render node of three cards: which one is the host's DRM order.
    ((), ("/dev/dri/renderD129",), {}, [], True),
])
def test_what_a_container_is_granted(gpus: tuple[str, ...], devices: tuple[str, ...], env: dict[str, str],
                                     cards: list[tuple[str, str]], unresolved: bool) -> None:
    config = _config(THREE, env)
    config.rendered.start = ServeScript(container=SimpleNamespace(client="docker", gpus=gpus, devices=devices))
    seen = engine_cards(config)
    assert [(name, d.name) for name, d in seen.cards] == cards
    assert (seen.unresolved is not None) == unresolved


@pytest.mark.parametrize(("device_flag", "env", "cards"), [
    # A Vulkan build reads its own list alone: HIP_VISIBLE_DEVICES left from a ROCm setup hides nothing from it.
    (("Vulkan1",), {"HIP_VISIBLE_DEVICES": "0"}, [("Vulkan0", "ROCm0"), ("Vulkan1", "ROCm1")]),
    ((), {"GGML_VK_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}, [("Vulkan0", "ROCm1")]),
    # A ROCm build: ROCR, then HIP; CUDA_VISIBLE_DEVICES only where HIP's is unset.
    (("ROCm0",), {"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, [("ROCm0", "ROCm1")]),
    (("ROCm0",), {"CUDA_VISIBLE_DEVICES": "1"}, [("ROCm0", "ROCm1")]),
    # Where the service does not say its backend, every variable applies in order (the host's names say how its
    # cards are named, not which build runs).
    ((), {"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, [("ROCm0", "ROCm1")]),
])
def test_each_backend_reads_its_own_variables(device_flag: tuple[str, ...], env: dict[str, str],
                                              cards: list[tuple[str, str]]) -> None:
    assert [(name, d.name) for name, d in engine_cards(_config(AMD, env, device_flag)).cards] == cards
