"""The devices one llama-server process places buffers on, named as llama.cpp names them (CUDA0, ROCm1, RPC0 ...,
and the host, CPU), and what each device's buffer type does to a tensor's size: the alignment, the padding row
CUDA and HIP add to a quantized tensor, the pinned host buffer type the device offers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BACKENDS", "DEVICE_KINDS", "FLOAT_TYPES", "HOST", "Backend", "Card", "backend_for"]

FLOAT_TYPES = frozenset({"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"})


@dataclass(frozen=True)
class Backend:
    """What a device's buffer type does to a tensor's size."""

    kind: str
    alignment: int
    quant_row_padding: int
    """CUDA/HIP pad every quantized tensor whose ``ne0 % 512 != 0`` by one row of the missing elements."""
    cite: str
    host_buffer: str | None = None
    """The pinned host buffer type the device offers (``CUDA_Host``); host-side output and compute buffers
    and the host's weights use it when this device comes first (src/llama-context.cpp, ``sched_reserve``;
    src/llama-model.cpp, ``make_cpu_buft_list``)."""
    split_buffers: bool = False
    """Whether the backend offers a row-split buffer type (its registry exports ``ggml_backend_split_buffer_type``).
    In build 11434 only SYCL and Hexagon do (ggml-sycl.cpp, ggml-hexagon.cpp ``get_proc_address``); none of the
    kinds here, so ``--split-mode row`` with any of them as a model device is refused at load
    (src/llama-model.cpp ``make_gpu_buft_list``: "device CUDA0 does not support split buffers")."""


_CUDA = "ggml/src/ggml-cuda/ggml-cuda.cu buffer_type_get_alignment, get_alloc_size"
BACKENDS: Mapping[str, Backend] = {
    "CPU": Backend("CPU", 32, 0, "ggml/src/ggml-impl.h TENSOR_ALIGNMENT"),
    # an RPC device allocates on the remote backend (a CPU unless the card says otherwise), which reports
    # its alignment; it offers no pinned host buffer
    "RPC": Backend("RPC", 32, 0, "ggml/src/ggml-rpc/ggml-rpc.cpp get_alignment (remote CPU)"),
    "CUDA": Backend("CUDA", 128, 512, _CUDA, "CUDA_Host"),
    "ROCm": Backend("ROCm", 128, 512, _CUDA + " (the HIP build names its devices ROCm)", "ROCm_Host"),
    "Vulkan": Backend("Vulkan", 256, 0, "ggml/src/ggml-vulkan: device-dependent alignment, 256 assumed",
                      "Vulkan_Host"),
    "Metal": Backend("Metal", 32, 0, "ggml/src/ggml-metal: 32 assumed"),
}
DEVICE_KINDS = tuple(BACKENDS)


def backend_for(device: str, kind: str | None = None) -> Backend:
    """A device's backend from its kind, else from its name as llama.cpp names it (CUDA0, ROCm1, RPC0 ...)."""
    if kind is not None:
        if kind not in BACKENDS:
            raise ValueError(f"unknown device kind {kind!r}: one of {', '.join(DEVICE_KINDS)}")
        backend = BACKENDS[kind]
        if device.startswith("RPC") and kind != "RPC":
            # the remote backend's sizes, but an RPC device offers no pinned host buffer
            return dataclasses.replace(backend, host_buffer=None,
                                       cite=backend.cite + " (behind ggml-rpc-server)")
        return backend
    for prefix, backend in BACKENDS.items():
        if device.startswith(prefix):
            return backend
    return Backend(device, 32, 0, "unknown backend: alignment 32 assumed")


@dataclass(frozen=True)
class Card:
    """A device the engine can place buffers on."""

    name: str
    """As llama.cpp names the device: ROCm0, CUDA0, RPC0 ..."""
    vram_bytes: int | None
    buffer_name: str = ""
    """As llama-server names its buffers there (an RPC device: ``RPC0[host:port]``)."""
    endpoint: str | None = None
    kind: str | None = None
    """The backend behind the device when its name does not say it (an RPC device serving a CUDA GPU)."""
    declared: str | None = None
    """The fleet's name for the card (``hosts.NAME.devices``) where the engine names it otherwise: a process shown
    only the host's second card by ``HIP_VISIBLE_DEVICES=1`` calls it ROCm0."""

    @property
    def backend(self) -> Backend:
        return backend_for(self.name, self.kind)

    @property
    def label(self) -> str:
        return self.buffer_name or self.name

    @property
    def host_name(self) -> str:
        """The card as fleet.toml declares it: what a host's tools and the other services are matched by."""
        return self.declared or self.name

    @property
    def shown(self) -> str:
        """The card for an operator: its declared name, and the engine's where that differs."""
        return f"{self.declared} (the engine's {self.name})" if self.declared else self.name


HOST = Card(name="CPU", vram_bytes=None, buffer_name="CPU")
