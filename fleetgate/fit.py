"""The ledger: what one llama-server process holds on each device, mirroring llama.cpp build 11434.

Every figure is computed the way the engine allocates it, and named the way llama-server names the
buffer in its load log (``model``, ``KV``, ``RS``, ``compute``, ``output``):

- Layer placement (src/llama-model.cpp, ``llama_model_base::load_tensors``): split points are the
  cumulative ``--tensor-split`` normalised to 1 (float32), or the devices' memory when no split is given;
  block ``il`` goes to ``upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)`` with
  ``i_gpu_start = max(n_layer_all + 1 - ngl, 0)`` and ``act_gpu_layers = min(ngl, n_layer_all + 1)``; the
  output layer is ``il = n_layer_all``; the input layer (token embeddings) always stays on the host; blocks
  past the model's layers go with the output (``create_tensor``). ``--split-mode none`` keeps only the main
  device and RPC devices come first (src/llama.cpp, ``llama_model_load_from_file_impl``).
- Weights: nextn (MTP) blocks are skipped unless ``draft-mtp`` loads them (src/models/qwen35.cpp,
  ``mtp_flags``; common/common.cpp, ``load_mtp``); a model without ``output.weight`` duplicates its token
  embeddings onto the output device (``TENSOR_DUPLICATED``). A device buffer is the sum of every tensor's
  allocation size padded to the buffer type's alignment (ggml/src/ggml-backend.cpp,
  ``ggml_backend_buft_alloc_buffer_n_plan``); CUDA and HIP add a row of padding to quantized tensors whose
  ``ne0 % 512 != 0`` (ggml/src/ggml-cuda/ggml-cuda.cu, ``get_alloc_size``). The host keeps a view of the
  file (``CPU_Mapped``): the span from the first to the last of its tensors
  (src/llama-model-loader.cpp, ``get_mapping_range``).
- Context (src/llama-context.cpp, ``llama_context::llama_context``): ``n_ctx = PAD256(-c or n_ctx_train)``,
  ``n_ctx_seq = n_ctx`` when unified else ``PAD256(n_ctx / n_seq)``; ``n_ubatch = min(n_batch, ubatch)``.
- KV (src/llama-kv-cache.cpp, ``llama_kv_cache::llama_kv_cache``): per attention block, on that block's
  device, ``row(type_k, heads_kv * key_length) * kv_size * n_stream`` plus the same for V, with
  ``n_stream = unified ? 1 : n_seq``; one buffer per device and cache. Sliding-window blocks get
  ``PAD256(min(kv_size, n_swa * (unified ? n_seq : 1) + n_ubatch))`` cells unless ``--swa-full``
  (src/llama-kv-cache-iswa.cpp). Which blocks carry KV: src/llama-model.cpp, ``create_memory``.
- Recurrent state (src/llama-memory-recurrent.cpp): per recurrent block, two F32 tensors of
  ``max(1, n_seq) * (1 + n_rs_seq)`` rows; ``n_rs_seq`` is the draft depth when a drafter needs rollback
  (common/common.h, ``need_n_rs_seq``; src/llama-arch.cpp, ``llm_arch_supports_rs_rollback``).
- Drafters (common/speculative.cpp, ``common_speculative_init_result``): the draft context holds
  ``llama_n_ctx(ctx_tgt)`` tokens with the target's slots, its own cache types and no rollback rows;
  a drafter without ``sliding_window`` therefore caches the whole target window (INC-03). The MTP
  context runs on the target's own nextn blocks and caches only them.
- Compute buffers are measured, not derived: a calibration (per device and context, naming the boot it
  came from) or an estimate marked as such.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fleetgate.engines.llamacpp import ContextShape, LlamaServerConfig, pad
from fleetgate.gguf import KV_CACHE_TYPES, RS_ROLLBACK_ARCHS, row_bytes
from fleetgate.profile import Profile, Weight, load_profile

__all__ = [
    "BACKENDS",
    "TERMS",
    "Backend",
    "Buffer",
    "Calibration",
    "Card",
    "DeviceLedger",
    "Ledger",
    "SlotState",
    "SweepRow",
    "arm_rungs",
    "backend_for",
    "build_ledger",
    "calibrations_of",
    "placement",
    "service_ledger",
    "service_sweep",
    "summarize",
    "sweep_tensor_split",
]

MiB = 1 << 20
Basis = Literal["derived", "reconstructed", "calibrated", "estimate"]
Term = Literal["model", "output", "kv", "recurrent", "draft", "projector", "compute", "runtime"]
TERMS: tuple[Term, ...] = ("model", "output", "kv", "recurrent", "draft", "projector", "compute", "runtime")

# Nextn blocks are created with TENSOR_SKIP unless MTP is loaded (src/models/<arch>.cpp, mtp_flags).
MTP_SKIP_ARCHS = frozenset({"qwen35", "qwen35moe", "qwen3next", "glm4moe", "deepseek2", "mimo2", "step35",
                            "bailingmoe3", "cohere2moe", "hy-v3", "nemotron_h"})
CONTEXT_DRAFTERS = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
ROLLBACK_DRAFTERS = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})
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


@dataclass(frozen=True)
class Runtime:
    """What a GPU process holds outside every buffer: the runtime's context, the BLAS workspace, the memory
    pool and graphs, read off the engine's own breakdown at exit ("unaccounted") and nvidia-smi's used memory
    (less the buffers) on named boots, at health and after the first request."""

    first_context: int
    further_context: int
    boot: str
    no_layers: int = 0
    """A GPU that holds no quantized matrix at boot (``-ngl 0``: it only takes the host's products of large
    batches; or only an F16 output layer): the quantized kernels load with the first quantized product."""
    idle: int = 0
    """A GPU the process sees but does not use (``--device none``, ``-sm none`` on another GPU)."""
    rpc_server: int = 0
    """A ggml-rpc-server process serving this kind of device, outside its buffers."""
    first_request: int = 0
    """Growth on the first request whose prompt fills a ubatch (the pool, kernels first used at batch size)."""
    offload_request: int = 0
    """More of it where the GPU also runs the host layers' products (op offload)."""
    blas_first: int = 0
    blas_further: int = 0
    """More growth where a context first multiplies float matrices or attention scores in cuBLAS (F16/BF16/F32
    weights on the GPU, or attention without flash attention on the GPU): the first such context, each further."""


# tests/ledger/data/gpu-h200.json, NVIDIA H200, driver 580.159.04, CUDA 13, llama.cpp 11434. At health: 595-599
# MiB per GPU (breakdown at exit, the 25 one-context boots without a request), a second context (MTP, a draft
# model) 0.7-5 MiB more by nvidia-smi; 527-531.5 MiB where no quantized matrix sits on the GPU (-ngl 0, or only
# an F16 output layer) or the GPU is not used at all. After a
# request that fills a ubatch: up to 619 MiB in all (631 with op offload); with cuBLAS 88 MiB more, read where it
# is the only other growth (no op offload: 701.8-706.2 MiB in all), 104 more for a second cuBLAS context. cuBLAS
# with op offload grew 701.5-731.1 MiB in all (by model: the tiny hybrid 701.5-703.1, SmolLM2 704.6-727.5,
# gemma-3-270m 723.9-731.1) where the ledger gives 719: not a maximum, since the device total is held within 5 %
# both ways (issue 19 boots; tests/ledger/test_datasets.py holds each figure to its boots).
RUNTIMES: Mapping[str, Runtime] = {
    "CUDA": Runtime(
        599 * MiB, 4 * MiB,
        "NVIDIA H200, driver 580.159.04, CUDA 13, llama.cpp 11434: gpu-h200.json smollm2-cuda-q4 (599 MiB "
        "unaccounted, the most of 25 one-context boots), smollm2-cuda-draft-np4-ub1024 (602.6 MiB by "
        "nvidia-smi with a draft context), qwen35-cuda-ngl1 (531.5, no quantized matrix on the GPU), "
        "smollm2-cpu-only (527), "
        "smollm2-cuda-ngl1-ub32 (630.5 after a request), "
        "qwen35-cuda-nkvo-np4-ub128 (706.2, cuBLAS), qwen35-mtp-cuda-np1-request (810.1, two cuBLAS contexts); "
        "RPC: smollm2-split-ngl20 (589.6)",
        no_layers=532 * MiB, idle=527 * MiB, rpc_server=590 * MiB, first_request=20 * MiB, offload_request=12 * MiB,
        blas_first=88 * MiB, blas_further=104 * MiB),
}


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

    @property
    def backend(self) -> Backend:
        return backend_for(self.name, self.kind)

    @property
    def label(self) -> str:
        return self.buffer_name or self.name


HOST = Card(name="CPU", vram_bytes=None, buffer_name="CPU")


@dataclass(frozen=True)
class Calibration:
    """A compute buffer measured on one of the fleet's own boots."""

    device: str
    context: str
    """target, draft, mtp or projector."""
    bytes: int
    ubatch: int
    boot: str


@dataclass(frozen=True)
class Buffer:
    device: str
    term: Term
    buffer: str
    """llama-server's word for it: model, KV, KV (SWA), RS, compute, output."""
    context: str
    """target, draft, mtp, projector."""
    bytes: int
    basis: Basis
    source: str
    buffer_type: str = ""
    """The engine's name for the buffer type, as its log prints it: CUDA0, CUDA_Host, CPU_Mapped, CPU_REPACK."""

    @property
    def device_label(self) -> str:
        return self.buffer_type or self.device


@dataclass(frozen=True)
class DeviceLedger:
    card: Card
    blocks: tuple[int, ...]
    holds_output: bool
    buffers: tuple[Buffer, ...]
    draft_blocks: tuple[int, ...] = ()

    def term(self, term: Term) -> int:
        return sum(b.bytes for b in self.buffers if b.term == term)

    @property
    def total(self) -> int:
        return sum(b.bytes for b in self.buffers)

    @property
    def free(self) -> int | None:
        return None if self.card.vram_bytes is None else self.card.vram_bytes - self.total


@dataclass(frozen=True)
class SlotState:
    """What the RAM prompt cache stores for one full slot (tools/server/server-task.cpp, ``alloc``)."""

    tokens: int
    target_kv: int
    recurrent: int
    draft: int
    checkpoints: int

    @property
    def total(self) -> int:
        return self.target_kv + self.recurrent + self.draft + self.checkpoints


@dataclass(frozen=True)
class Ledger:
    shape: ContextShape
    n_ubatch: int
    devices: tuple[DeviceLedger, ...]
    host: DeviceLedger
    slot_state: SlotState
    notes: tuple[str, ...] = ()

    @property
    def cards(self) -> tuple[DeviceLedger, ...]:
        """Devices with a known capacity: the cards a floor applies to."""
        return tuple(d for d in self.devices if d.card.vram_bytes is not None)


def _f32(value: float) -> float:
    """Round to IEEE float32: the engine does its split arithmetic in float."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def placement(n_layer_all: int, n_gpu_layers: int, weights: Sequence[float], n_devices: int) -> list[int]:
    """Device index of each block and (last) of the output layer; -1 is the host.

    Mirrors src/llama-model.cpp, ``load_tensors``: splits are float cumulative sums normalised by their
    total, and ``upper_bound`` picks the first split strictly above ``(il - i_gpu_start) / act``.
    """
    if n_devices == 0:
        return [-1] * (n_layer_all + 1)
    splits = []
    total = _f32(0.0)
    for w in weights:
        total = _f32(total + _f32(w))
        splits.append(total)
    splits = [_f32(s / total) for s in splits]
    i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer_all + 1)
    devices = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or (il - i_gpu_start) >= act:
            devices.append(-1)
            continue
        x = _f32(_f32(il - i_gpu_start) / act)
        devices.append(min(next((i for i, s in enumerate(splits) if s > x), n_devices), n_devices - 1))
    return devices


def _alloc(weight: Weight, backend: Backend) -> int:
    size = weight.nbytes
    padding = backend.quant_row_padding
    quantized = weight.ggml_type is not None and weight.ggml_type not in FLOAT_TYPES
    if padding and quantized and weight.shape and weight.shape[0] % padding:
        assert weight.ggml_type is not None
        size += row_bytes(weight.ggml_type, padding - weight.shape[0] % padding)
    return pad(size, backend.alignment)


def _flag(config: LlamaServerConfig, *names: str) -> str | None:
    """The value of an option fleetgate does not interpret by name (last use wins); '' for a switch."""
    found: str | None = None
    for uses in config.parsed.uses.values():
        for use in uses:
            if use.flag in names:
                found = use.value if use.value is not None else ""
    return found


def _option(config: LlamaServerConfig, dest: str, default: str) -> str:
    use = config.use(dest)
    return use.value if use is not None and use.value is not None else default


def _ngl(value: str, n_layer_all: int) -> int:
    """``-ngl``: a count, or auto/all/negative: every layer plus the output (llama_model::n_gpu_layers)."""
    try:
        n = int(value)
    except ValueError:
        return n_layer_all + 1
    return n_layer_all + 1 if n < 0 else n


@dataclass
class _Acc:
    """Buffers collected per device label."""

    buffers: dict[str, list[Buffer]] = field(default_factory=dict)

    def add(self, card: Card, term: Term, buffer: str, context: str, nbytes: int, basis: Basis,
            source: str, buffer_type: str = "") -> None:
        if nbytes > 0:
            self.buffers.setdefault(card.label, []).append(
                Buffer(card.name, term, buffer, context, nbytes, basis, source, buffer_type or card.label))


@dataclass(frozen=True)
class _Model:
    """A model placed on devices: which device holds each block and the output layer."""

    profile: Profile
    devices: tuple[Card, ...]
    layer_device: tuple[Card, ...]
    output_device: Card
    load_mtp: bool

    @property
    def cards(self) -> list[Card]:
        seen: list[Card] = []
        for card in (*self.layer_device, self.output_device):
            if card not in seen:
                seen.append(card)
        return seen


def _model_devices(cards: Sequence[Card], names: Sequence[str], split_mode: str, main_gpu: int,
                   rpc: Sequence[Card]) -> list[Card]:
    known = {c.name: c for c in (*cards, *rpc)} | {c.label: c for c in (*cards, *rpc)}
    if [n.lower() for n in names] == ["none"]:
        devices: list[Card] = []
    elif names:
        devices = []
        for name in names:
            if name not in known:
                raise KeyError(name)
            devices.append(known[name])
    else:
        devices = [*rpc, *cards]
    if split_mode == "none" and devices:
        devices = [devices[main_gpu if 0 <= main_gpu < len(devices) else 0]]
    return devices


def _place(profile: Profile, devices: Sequence[Card], ngl: int, tensor_split: Sequence[float],
           load_mtp: bool) -> _Model:
    n_all = profile.block_count
    weights = list(tensor_split)[: len(devices)]
    if len(weights) < len(devices) or not any(weights):
        # no -ts: the engine splits by each device's free memory at boot; the card's size stands in for it
        weights = [float(c.vram_bytes or 1) for c in devices]
    cards = tuple(HOST if i < 0 else devices[i] for i in placement(n_all, ngl, weights, len(devices)))
    return _Model(profile, tuple(devices), cards[:n_all], cards[n_all], load_mtp)


def _weight_device(model: _Model, weight: Weight) -> Card | None:
    profile = model.profile
    if weight.role == "input":
        return HOST
    if weight.role == "output" or weight.block is None:
        return model.output_device
    nextn = weight.block >= profile.n_layer and profile.nextn_layers > 0
    if nextn and not model.load_mtp and profile.architecture in MTP_SKIP_ARCHS:
        return None  # TENSOR_SKIP: "model has unused tensor ... -- ignoring"
    if weight.block < len(model.layer_device):
        return model.layer_device[weight.block]
    return model.output_device


def _with_tied_output(profile: Profile) -> list[Weight]:
    weights = list(profile.weights)
    if not any(w.name in ("output.weight", "output") for w in weights):
        embd = next((w for w in weights if w.name in ("token_embd.weight", "token_embd")), None)
        if embd is not None:
            weights.append(dataclasses.replace(embd, role="output", duplicate=True))
    return weights


# CPU_REPACK (ggml/src/ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type): which quantized matrices
# the CPU backend re-lays out, by the CPU features it runs with, and the row count each layout needs
_REPACK_X86: Mapping[str, tuple[str, int]] = {"Q4_0": ("avx2", 8), "Q4_K": ("avx2", 8), "IQ4_NL": ("avx2", 8),
                                              "MXFP4": ("avx2", 8), "Q2_K": ("avx512f", 8)}
_REPACK_ARM: Mapping[str, tuple[str, int]] = {"Q4_0": ("asimddp", 4), "Q4_K": ("asimddp", 8),
                                              "Q5_K": ("asimddp", 8), "Q6_K": ("asimddp", 8),
                                              "IQ4_NL": ("asimddp", 4), "MXFP4": ("asimddp", 4),
                                              "Q8_0": ("asimddp", 4)}


def local_cpu_features() -> frozenset[str]:
    """This machine's CPU feature flags (Linux /proc/cpuinfo; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def repacked(weight: Weight, cpu_features: frozenset[str]) -> bool:
    """Whether the CPU backend moves this weight into a ``CPU_REPACK`` buffer (a matrix of a repackable type
    whose row count the interleaved layout divides, on a CPU with the features that layout needs)."""
    kind = weight.ggml_type
    if kind is None or weight.name.startswith("token_embd") or len(weight.shape) not in (2, 3):
        return False  # token embeddings are read by GET_ROWS, which the repacked buffer does not serve
    for table in (_REPACK_X86, _REPACK_ARM):
        rule = table.get(kind)
        if rule is not None and rule[0] in cpu_features and weight.shape[1] % rule[1] == 0:
            return True
    return False


@dataclass(frozen=True)
class _Host:
    """How the host holds what lands on it: mapped weights, pinned buffers, repacking."""

    mapped: bool
    pinned: str | None
    """The pinned host buffer type of the first device offering one (CUDA_Host), else None."""
    compute: str
    """The buffer type of the host's compute buffer: the first device's pinned type, else CPU."""
    cpu_features: frozenset[str] | None


def _weights(acc: _Acc, model: _Model, *, context: str, term_block: Term, term_output: Term,
             host: _Host, basis: Basis) -> None:
    placed: dict[str, tuple[Card, list[Weight]]] = {}
    for weight in _with_tied_output(model.profile):
        card = _weight_device(model, weight)
        if card is not None:
            placed.setdefault(card.label, (card, []))[1].append(weight)
    for card, weights in placed.values():
        if card is HOST:
            weights = _host_weights(acc, weights, context=context, term_block=term_block,
                                    term_output=term_output, host=host, basis=basis)
        by_term: dict[Term, int] = {}
        for weight in weights:
            term = term_output if weight.role == "output" else term_block
            by_term[term] = by_term.get(term, 0) + _alloc(weight, card.backend)
        buffer_type = (host.pinned or "CPU") if card is HOST else card.label
        for term, nbytes in by_term.items():
            acc.add(card, term, "model", context, nbytes, basis,
                    "src/llama-model.cpp load_tensors; ggml-backend.cpp alloc_buffer_n_plan", buffer_type)


def _host_weights(acc: _Acc, weights: list[Weight], *, context: str, term_block: Term, term_output: Term,
                  host: _Host, basis: Basis) -> list[Weight]:
    """Book the host's repacked and mapped weights; return those it must copy into a plain buffer."""
    if host.pinned is None and host.cpu_features:
        repack = [w for w in weights if repacked(w, host.cpu_features)]
        weights = [w for w in weights if w not in repack]
        by_term: dict[Term, int] = {}
        for weight in repack:
            term = term_output if weight.role == "output" else term_block
            by_term[term] = by_term.get(term, 0) + _alloc(weight, BACKENDS["CPU"])
        for term, nbytes in by_term.items():
            acc.add(HOST, term, "model", context, nbytes, basis,
                    "ggml/src/ggml-cpu/repack.cpp: matrices re-laid out for the CPU's features", "CPU_REPACK")
    if not host.mapped:
        return weights
    # one view of the file: duplicated tensors share it (get_mapping_range spans the ctx's tensors)
    files = [w for w in weights if not w.duplicate]
    offsets = [w for w in files if w.offset is not None]
    if offsets:
        span = max(w.offset + w.nbytes for w in offsets if w.offset is not None) \
            - min(w.offset for w in offsets if w.offset is not None)
    else:
        span = sum(w.nbytes for w in files)
    acc.add(HOST, term_block, "model", context, span, basis,
            "src/llama-model-loader.cpp get_mapping_range (CPU_Mapped: a view of the file)", "CPU_Mapped")
    return []


def _kv_layers(profile: Profile, *, mtp: bool) -> list[int]:
    """Blocks that carry KV in the main context, or in the MTP context (create_memory's filters)."""
    if mtp:
        return list(range(profile.n_layer, profile.block_count))
    return [il for il in range(profile.n_layer) if profile.kind(il) in ("A", "S")]


@dataclass(frozen=True)
class _Cache:
    """How one context sizes its KV (the arguments llama_kv_cache gets)."""

    n_ctx_seq: int
    n_seq: int
    unified: bool
    n_ubatch: int
    swa_full: bool
    type_k: str
    type_v: str
    v_trans: bool
    offload: bool

    @property
    def n_stream(self) -> int:
        return 1 if self.unified else self.n_seq

    def swa_cells(self, profile: Profile) -> int:
        """src/llama-kv-cache-iswa.cpp: the windowed cache is padded to 256 and never above kv_size."""
        if self.swa_full:
            return self.n_ctx_seq
        window = profile.sliding_window * (self.n_seq if self.unified else 1) + self.n_ubatch
        return pad(min(self.n_ctx_seq, window), 256)


def _row_padding(ggml_type: str, ne0: int, card: Card) -> int:
    """CUDA/HIP's get_alloc_size: one padding row for a quantized tensor whose ne0 is not a multiple of 512
    (the KV cache's K and V tensors too: seen on the H200, 384 B per q8_0 tensor of SmolLM2)."""
    padding = card.backend.quant_row_padding
    if not padding or ggml_type.upper() in FLOAT_TYPES or ne0 % padding == 0:
        return 0
    return row_bytes(ggml_type, padding - ne0 % padding)


def _kv(acc: _Acc, profile: Profile, layer_device: Sequence[Card], layers: Iterable[int], cache: _Cache, *,
        context: str, term: Term, basis: Basis) -> None:
    layers = list(layers)
    widths = {profile.kv_row_elements(il)[1] for il in layers}
    caches: dict[tuple[str, str], tuple[Card, int]] = {}
    for il in layers:
        swa = profile.is_swa(il)
        cells = cache.swa_cells(profile) if swa else cache.n_ctx_seq
        k_elems, v_elems = profile.kv_row_elements(il)
        if cache.v_trans and len(widths) > 1:
            v_elems = max(widths)  # [TAG_V_CACHE_VARIABLE]: V padded to the widest layer
        card = layer_device[il] if cache.offload else HOST
        k = row_bytes(cache.type_k, k_elems) * cells * cache.n_stream + _row_padding(cache.type_k, k_elems, card)
        v = row_bytes(cache.type_v, v_elems) * cells * cache.n_stream + _row_padding(cache.type_v, v_elems, card)
        key = (card.label, "KV (SWA)" if swa else "KV")
        previous = caches.get(key, (card, 0))[1]
        caches[key] = (card, previous + pad(k, card.backend.alignment) + pad(v, card.backend.alignment))
    for (_, name), (card, nbytes) in caches.items():
        source = "src/llama-kv-cache.cpp llama_kv_cache"
        acc.add(card, term, name, context, nbytes, basis,
                source + ("; llama-kv-cache-iswa.cpp size_swa" if "SWA" in name else ""))


def _recurrent(acc: _Acc, profile: Profile, layer_device: Sequence[Card], *, n_seq: int, n_rs_seq: int,
               offload: bool, basis: Basis) -> None:
    rec = profile.recurrent
    if rec is None:
        return
    rows = max(1, n_seq) * (1 + n_rs_seq)
    per_card: dict[str, tuple[Card, int]] = {}
    for il in range(profile.n_layer):
        if profile.kind(il) != "R":
            continue
        card = layer_device[il] if offload else HOST
        align = card.backend.alignment
        nbytes = pad(4 * rec.n_embd_r * rows, align) + pad(4 * rec.n_embd_s * rows, align)
        per_card[card.label] = (card, per_card.get(card.label, (card, 0))[1] + nbytes)
    for card, nbytes in per_card.values():
        acc.add(card, "recurrent", "RS", "target", nbytes, basis,
                f"src/llama-memory-recurrent.cpp: {rows} rows = max(1, n_seq) x (1 + n_rs_seq {n_rs_seq})")


@dataclass(frozen=True)
class _ComputeShape:
    n_ubatch: int
    n_outputs: int
    n_seq: int
    mask_cells: tuple[int, ...]
    """KV cells per stream each attention mask spans (one mask per cache: full, sliding window)."""
    copies: int
    """Input copies the scheduler keeps: 4 with pipeline parallelism (GGML_SCHED_MAX_COPIES), else 1."""
    flash_attn: bool
    offloaded_input: int = 0
    """Bytes the op-offload GPU copies in per split: the largest host weight it multiplies (ggml-backend.cpp
    ``ggml_backend_sched_split_graph`` pass 5 starts a split at each offloaded weight, so two are live at the
    split boundary) and, without flash attention, one host layer's K and V (the scores run beside them)."""
    host_attention: bool = False
    """``--no-kv-offload``: attention runs on the host next to its cache (src/llama-graph.cpp ``build_attn_mha``
    sets the backend of every node between the KV store and the output to the CPU)."""
    kv_offload: bool = True
    first_stage: bool = False
    """Under pipeline parallelism, the device running the first layers: it holds ``9 n_embd`` floats per token
    more than every later stage (on every recorded two-device split and SmolLM2's three-device ones; gemma-3-270m's
    at ``-ts 1,2,1`` held less, so this over-counts there). Eight of
    them are split inputs: the first stage takes three of ``n_embd`` floats (the host's token embeddings and the
    mixed-batch inputs ``inp_mixed_embd`` and ``embd``, which ggml-backend.cpp pass 6 collects even where no
    node reads them) where a later stage takes one (the previous stage's ``l_out``), each kept ``copies`` times
    (seen with ``GGML_SCHED_DEBUG=1``); the ninth is measured, not located."""


GATED_Q_ARCHS = frozenset({"qwen35", "qwen35moe", "qwen3next"})


def _dims(profile: Profile) -> tuple[int, int, int, int]:
    """n_embd, n_ff, the query width (n_head x head) and n_head, read off the weights where the header lacks them."""
    n_embd = max(profile.n_embd, 1)
    head = max(profile.key_length, 1)
    raw = profile.raw.get("model", {})
    n_ff = int(raw.get("n_ff", 0) or max((w.shape[1] for w in profile.weights
                                          if w.name.endswith(("ffn_up.weight", "ffn_gate.weight"))
                                          and len(w.shape) > 1), default=4 * n_embd))
    q = max((w.shape[1] for w in profile.weights if w.name.endswith("attn_q.weight") and len(w.shape) > 1),
            default=n_embd)
    if profile.architecture in GATED_Q_ARCHS:
        q //= 2  # the query projection also carries the output gate
    n_head = int(raw.get("n_head", 0) or max(q // head, 1))
    return n_embd, n_ff, q, n_head


# The measured ratio of each buffer kind to its structural peak (below), beside COMPUTE_MARGIN: the least, rounded
# up to 0.01, that keeps every recorded buffer of the kind (tests/ledger/data/gpu-h200.json, gpu-h200-x2.json and
# cpu-rpc.json, build 11434) at or above the engine. ``python -m tests.ledger.gpu_dataset --factors`` recomputes
# them. Never below 1: where the peak over-counts on every recorded buffer of a kind (the CPU's layers and
# pipelines need 0.97 and 0.98, all with flash attention), a factor under 1 would trust it on shapes not
# measured; at 0.99 a three-device CPU split without flash attention came out 0.4 % under.
COMPUTE_FACTORS: Mapping[tuple[str, str], float] = {
    ("gpu", "layers"): 1.04, ("gpu", "pipeline"): 1.03, ("gpu", "host"): 1.31,
    ("cpu", "layers"): 1.00, ("cpu", "pipeline"): 1.00, ("cpu", "host"): 1.24,
}


# What the estimate of a device running layers adds beside its factor: the small tensors its peak does not list
# (positions, KV indices, output ids, norm products, each tensor's alignment). Without it the factor of the GPU
# layer devices was set by a 3.3 MiB buffer of a tiny hybrid that needed 1.13 and then multiplied a 347 MiB
# buffer by 1.13, putting that GPU 6 % above nvidia-smi; with it, the factor is set by buffers whose size it
# scales. The host's buffers (inputs only) take none: their factor stays what it was.
COMPUTE_MARGIN = 512 * 1024


def compute_role(card: Card, *, layers: bool, pipeline: bool, gpu_host: bool) -> tuple[str, str]:
    """Which measured factor applies: the device's backend (a GPU, or a CPU / CPU behind RPC) and what it
    does (runs layers, runs layers in a pipeline-parallel split, or is the host feeding GPUs)."""
    if card is HOST:
        return ("gpu" if gpu_host else "cpu", "layers" if layers else "host")
    gpu = card.backend.quant_row_padding > 0 or card.backend.kind in ("Vulkan", "Metal")
    return ("gpu" if gpu else "cpu", "pipeline" if pipeline and layers else "layers" if layers else "host")


def compute_peak(profile: Profile, shape: _ComputeShape, *, holds_layers: bool, holds_output: bool,
                 host_layers: bool = False) -> int:
    """The structural peak of one device's compute buffer for one ubatch (src/llama-context.cpp,
    ``sched_reserve``: the prompt-processing graph of ``n_ubatch`` tokens, ``n_outputs`` outputs).

    A device that runs layers (or, with a GPU, the host layers' matrix products it takes over) holds the
    larger of the FFN peak (residual, norm, gate, up and their product: ``4 n_embd + 3 n_ff`` floats per
    token, seen exact on the H200) and the attention peak (``n_embd + 5 q`` floats per token plus, without
    flash attention, the f32 scores over the widest cache), the attention masks over every cache (f16 with
    flash attention, f32 without), the Gated DeltaNet chunk matrices of hybrid models, the output logits
    where it holds the output layer and the split inputs kept ``copies`` times. The host, when layers run
    elsewhere, holds the inputs: token embeddings, the f32 masks, the logits it reads back.
    """
    n_embd, n_ff, q, n_head = _dims(profile)
    ub = shape.n_ubatch
    cells = sum(shape.mask_cells)
    if not holds_layers and holds_output:
        # a device with the output layer only: its norm and the logits
        return pad(20 * ub * n_embd + 4 * shape.n_outputs * max(profile.n_vocab, 1) + 65536, 32)
    if not holds_layers:
        widest = max(shape.mask_cells or (0,))
        size = shape.copies * (8 * ub * n_embd + 4 * ub * widest) + 65536
        if not shape.flash_attn:
            size += 4 * ub * max(shape.mask_cells or (0,))  # the f32 mask the scores are built against
        if host_layers:
            size += 8 * ub * n_embd  # the norms and residuals of the layers it keeps
        if shape.host_attention:
            size += 4 * ub * (n_embd + 3 * q)  # Q, the attention output and its permuted copy
            if not shape.flash_attn:
                size += 4 * ub * n_head * max(shape.mask_cells or (0,))  # the f32 scores (softmax in place)
        return pad(size, 32)
    ffn = 4 * ub * (4 * n_embd + 3 * n_ff)
    attn = 4 * ub * (n_embd + 5 * q)
    if not shape.flash_attn and shape.kv_offload:  # with --no-kv-offload the scores are the host's
        attn += 4 * ub * n_head * max(shape.mask_cells or (0,))
    masks = (2 if shape.flash_attn else 4) * ub * cells
    # split inputs: the layer input, and under pipeline parallelism every copy of it and of the masks (f16 with
    # flash attention: src/llama-graph.cpp build_attn_inp_kq_mask); ggml-backend.cpp flags every copy as an
    # input and an output, so none is freed before the graph ends
    copy = 4 * ub * n_embd + (2 if shape.flash_attn else 4) * ub * cells
    size = max(ffn, attn) + masks + 4 * ub * n_embd + (shape.copies - 1) * copy + 65536 + 32 * ub
    if shape.copies > 1 and shape.first_stage:
        size += (2 * shape.copies + 1) * 4 * ub * n_embd
    size += shape.offloaded_input
    if holds_output:
        size += 4 * shape.n_outputs * max(profile.n_vocab, 1)
    return pad(size, 32)


def _compute_estimate(profile: Profile, shape: _ComputeShape, role: tuple[str, str], *, holds_layers: bool,
                      holds_output: bool, host_layers: bool = False) -> int:
    """The compute buffer estimate where no boot measured it: the structural peak times the measured factor
    for this kind of buffer, plus COMPUTE_MARGIN on a device running layers (always shown as an estimate;
    docs/ledger.md gives its measured range)."""
    peak = compute_peak(profile, shape, holds_layers=holds_layers, holds_output=holds_output,
                        host_layers=host_layers)
    factor = COMPUTE_FACTORS[role]
    margin = COMPUTE_MARGIN if role[1] != "host" else 0
    return pad(int(peak * factor) + margin + 1, 32)


def _state_per_slot(profile: Profile, layers: Sequence[int], cache: _Cache) -> int:
    """One sequence's KV in a saved state (src/llama-kv-cache.cpp, ``state_write_meta``/``_data``).

    Each cell costs its K and V rows on every layer plus 12 bytes of metadata (pos, n_seq_id, seq_id);
    a sliding-window cache saves only the cells inside the window.
    """
    total = 0
    for swa in (False, True):
        group = [il for il in layers if profile.is_swa(il) == swa]
        if not group:
            continue
        cells = min(cache.n_ctx_seq, profile.sliding_window + cache.n_ubatch) if swa else cache.n_ctx_seq
        per_cell = sum(row_bytes(cache.type_k, profile.kv_row_elements(il)[0])
                       + row_bytes(cache.type_v, profile.kv_row_elements(il)[1]) for il in group)
        total += cells * (per_cell + 12)
    return total


def _recurrent_per_slot(profile: Profile) -> int:
    """One sequence's recurrent state: one row of each state per recurrent block."""
    if profile.recurrent is None:
        return 0
    return profile.recurrent.row_bytes * sum(1 for il in range(profile.n_layer) if profile.kind(il) == "R")


def _projector_card(config: LlamaServerConfig, cards: Sequence[Card], rpc: Sequence[Card]) -> Card:
    offload = config.use("mmproj_offload")
    if offload is not None and offload.value == "0":
        return HOST
    named = _option(config, "mmproj_device", "")
    for card in (*cards, *rpc):
        if named in (card.name, card.label):
            return card
    # ggml_backend_init_by_type(GPU): the first GPU the registry lists (RPC devices register first)
    ordered = [*rpc, *cards]
    return ordered[0] if ordered else HOST


# ggml/src/ggml-cuda/fattn.cu ggml_cuda_get_best_fattn_kernel: the head sizes CUDA/HIP flash attention has
# kernels for; with ``-fa auto`` any other size turns flash attention off (src/llama-context.cpp,
# resolve_fused_ops: "Flash Attention not supported, set to disabled"), seen on the H200 with head size 32
FA_HEAD_SIZES: Mapping[str, frozenset[int]] = {
    "CUDA": frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576}),
    "ROCm": frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576}),
}


def _flash_attn(config: LlamaServerConfig, profile: Profile, notes: list[str],
                devices: Sequence[Card] = ()) -> bool:
    """Whether the context runs flash attention: ``-fa on/off``; ``auto`` is on unless a device holding
    layers lacks a kernel for the head size; a quantized V cache needs it (src/llama.cpp,
    llama_init_from_model: "enabling flash_attn since it is required for quantized V cache")."""
    mode = config.flash_attn
    quantized_v = config.cache_type_v.upper() not in FLOAT_TYPES
    if mode == "off":
        if quantized_v:
            notes.append(f"-fa off with a {config.cache_type_v} V cache: llama-server refuses to start "
                         "(a quantized V cache needs flash attention)")
        return False
    if mode == "on" or quantized_v:
        return True
    for card in devices:
        sizes = FA_HEAD_SIZES.get(card.backend.kind)
        if sizes is not None and (profile.key_length not in sizes or profile.value_length != profile.key_length):
            notes.append(f"-fa auto: {card.name} has no flash-attention kernel for head size "
                         f"{profile.key_length}: flash attention is off")
            return False
    return True


def build_ledger(
    config: LlamaServerConfig,
    target: Profile,
    *,
    cards: Sequence[Card] = (),
    draft: Profile | None = None,
    projector: Profile | None = None,
    calibrations: Sequence[Calibration] = (),
    cpu_features: frozenset[str] | None = None,
) -> Ledger:
    """The per-device ledger of one llama-server command line.

    ``cards`` are the devices the host offers (in enumeration order); ``--device`` picks among them,
    ``--rpc`` adds RPC devices in front. ``cpu_features`` are the flags of the host's CPU (``avx2``,
    ``avx512f``, ``asimddp`` ...) that decide which weights the CPU backend repacks; None: not modelled,
    and said so in the notes when host weights could repack. Raises ``KeyError`` for a ``--device`` name no card has and
    ``ValueError`` for a cache type the engine refuses.
    """
    notes: list[str] = []
    basis: Basis = "reconstructed" if target.reconstructed else "derived"
    for flag, value in (("--cache-type-k", config.cache_type_k), ("--cache-type-v", config.cache_type_v),
                        ("--spec-draft-type-k", _option(config, "spec_draft_type_k", "f16")),
                        ("--spec-draft-type-v", _option(config, "spec_draft_type_v", "f16"))):
        if value.upper() not in KV_CACHE_TYPES:
            accepted = ", ".join(t.lower() for t in KV_CACHE_TYPES)
            raise ValueError(f"{flag} {value}: llama-server accepts only {accepted} (common/arg.cpp)")
    n_seq = max(1, config.n_slots)
    unified = config.unified_kv
    n_ctx = pad(config.ctx_size or target.n_ctx_train or 0, 256)
    n_ctx_seq = n_ctx if unified else pad(n_ctx // n_seq, 256)
    if not unified:
        n_ctx = n_ctx_seq * n_seq
    shape = ContextShape(n_ctx=n_ctx, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq, unified=unified)
    n_batch = min(n_ctx, config.batch_size) if n_ctx else config.batch_size
    n_ubatch = min(n_batch, config.ubatch_size or n_batch)
    offload = _flag(config, "-nkvo", "--no-kv-offload") is None
    host_mapped = (_flag(config, "-lm", "--load-mode") or "auto") in ("auto", "mmap", "mmap+mlock")
    if config.fit not in ("off", "0", "false"):
        notes.append("--fit is on: llama.cpp may change -ngl or -c at boot to fit free memory; this ledger "
                     "takes the flags as given")
    if config.split_mode not in ("none", "layer"):
        notes.append(f"--split-mode {config.split_mode}: modelled as a layer split")

    rpc = [next((c for c in cards if c.endpoint == endpoint),
                Card(name=f"RPC{i}", vram_bytes=None, buffer_name=f"RPC0[{endpoint}]", endpoint=endpoint))
           for i, endpoint in enumerate(config.rpc)]
    host_cards = [c for c in cards if c.endpoint is None]
    main_gpu = int(_option(config, "main_gpu", "0") or 0)
    devices = _model_devices(host_cards, config.devices, config.split_mode, main_gpu, rpc)
    spec = set(config.spec_types)
    ngl = _ngl(config.n_gpu_layers, target.block_count)
    model = _place(target, devices, ngl, config.tensor_split, "draft-mtp" in spec)
    flash_attn = _flash_attn(config, target, notes, [c for c in model.cards if c is not HOST])
    no_host = _flag(config, "--no-host") is not None
    pinned = None if no_host else next((d.backend.host_buffer for d in devices if d.backend.host_buffer), None)
    no_repack = _flag(config, "-nr", "--no-repack") is not None
    holding = _Host(mapped=host_mapped, pinned=pinned,
                 compute=(devices[0].backend.host_buffer or "CPU") if devices else "CPU",
                 cpu_features=frozenset() if no_repack else cpu_features)
    if cpu_features is None and pinned is None and not no_repack and any(c is HOST for c in model.layer_device):
        notes.append("the host's CPU features are not given: weights the CPU backend would repack "
                     "(CPU_REPACK) are counted in the mapped file instead")
    cache = _Cache(n_ctx_seq=n_ctx_seq, n_seq=n_seq, unified=unified, n_ubatch=n_ubatch,
                   swa_full=config.swa_full, type_k=config.cache_type_k, type_v=config.cache_type_v,
                   v_trans=not flash_attn, offload=offload)
    draft_cache = dataclasses.replace(cache, type_k=_option(config, "spec_draft_type_k", "f16"),
                                      type_v=_option(config, "spec_draft_type_v", "f16"))

    acc = _Acc()
    _weights(acc, model, context="target", term_block="model", term_output="output", host=holding,
             basis=basis)
    _kv(acc, target, model.layer_device, _kv_layers(target, mtp=False), cache, context="target", term="kv",
        basis=basis)
    rollback = target.recurrent is not None and target.recurrent.rollback \
        and target.architecture in RS_ROLLBACK_ARCHS
    n_rs_seq = config.spec_draft_n_max if spec & ROLLBACK_DRAFTERS and rollback else 0
    _recurrent(acc, target, model.layer_device, n_seq=n_seq, n_rs_seq=n_rs_seq, offload=offload, basis=basis)

    draft_model: _Model | None = None
    slot_draft = 0
    mtp = "draft-mtp" in spec and config.spec_draft_model is None
    if spec & CONTEXT_DRAFTERS and config.spec_draft_model is not None:
        if draft is None:
            notes.append("a drafter is configured but its profile is unknown: its weights and KV are not "
                         "counted")
        else:
            draft_basis: Basis = "reconstructed" if draft.reconstructed else "derived"
            names = config.spec_draft_device or config.devices
            mode = "layer" if len(names) == 1 else config.split_mode
            draft_devices = _model_devices(host_cards, names, mode, main_gpu, rpc)
            draft_ngl = _ngl(_option(config, "spec_draft_ngl", "-1"), draft.block_count)
            draft_model = _place(draft, draft_devices, draft_ngl, config.tensor_split, False)
            _weights(acc, draft_model, context="draft", term_block="draft", term_output="draft",
                     host=holding, basis=draft_basis)
            _kv(acc, draft, draft_model.layer_device, _kv_layers(draft, mtp=False), draft_cache,
                context="draft", term="draft", basis=draft_basis)
            slot_draft = _state_per_slot(draft, _kv_layers(draft, mtp=False), draft_cache)
    elif mtp:
        layers = _kv_layers(target, mtp=True)
        if not layers:
            notes.append("draft-mtp on a model without nextn blocks: the engine refuses to load it")
        _kv(acc, target, model.layer_device, layers, draft_cache, context="mtp", term="draft", basis=basis)
        slot_draft = _state_per_slot(target, layers, draft_cache)

    projector_card: Card | None = None
    if config.mmproj is not None:
        if projector is None:
            notes.append("an --mmproj is loaded but its profile is unknown: its weights are not counted")
        else:
            projector_card = _projector_card(config, host_cards, rpc)
            p_basis: Basis = "reconstructed" if projector.reconstructed else "derived"
            acc.add(projector_card, "projector", "model", "projector",
                    sum(_alloc(w, projector_card.backend) for w in projector.weights), p_basis,
                    "tools/mtmd/clip.cpp clip_ctx: the first GPU unless --mmproj-device, --no-mmproj-offload")

    trunk = model.layer_device[: target.n_layer]
    op_offload = any(d.backend.host_buffer for d in devices) and HOST in trunk and n_ubatch >= 32 \
        and _flag(config, "--no-op-offload") is None

    def blas(card: Card) -> int:
        found = int(_uses_blas(target, model, card, flash_attn=flash_attn, kv_offload=offload, op_offload=op_offload))
        head = model.layer_device[target.n_layer] if target.n_layer < len(model.layer_device) \
            else model.output_device
        if mtp and found and head is card and offload and not flash_attn:
            found += 1  # the MTP context's nextn block scores its attention in cuBLAS too
        if draft_model is not None and draft is not None and card in draft_model.devices:
            found += int(_uses_blas(draft, draft_model, card, flash_attn=flash_attn, kv_offload=offload,
                                    op_offload=False))
        return found
    _runtime(acc, notes, model, draft_model, calibrations, contexts=1 + (1 if mtp else 0),
             host_cards=[c for c in host_cards if c.backend.host_buffer], blas=blas, op_offload=op_offload)
    _computes(acc, notes, config, target, model, draft, draft_model, projector_card, calibrations,
              devices=devices, n_ubatch=n_ubatch, n_batch=n_batch, cache=cache, mtp=mtp, ngl=ngl,
              flash_attn=flash_attn, host_compute=holding.compute, projector=projector)
    out_type = model.output_device.backend.host_buffer or "CPU"
    boot, grown = output_buffer(target, n_seq=n_seq, n_batch=n_batch,
                                n_max=config.spec_draft_n_max if config.speculative else 0, mtp=mtp)
    acc.add(HOST, "output", "output", "target", boot, basis,
            "src/llama-context.cpp output_reserve: n_seq x n_vocab x 4 B at boot", out_type)
    acc.add(HOST, "output", "output growth", "target", grown - boot, basis,
            "output_reserve grows it on the first drafted request: n_seq x (1 + n_max) outputs"
            + (" + n_embd x n_batch nextn embeddings" if mtp else ""), out_type)
    if draft_model is not None and draft is not None:
        acc.add(HOST, "draft", "output", "draft", n_seq * draft.n_vocab * 4, basis,
                "src/llama-context.cpp output_reserve (draft context): n_seq x n_vocab x 4 B at boot; its "
                "growth while drafting is not measured", draft_model.output_device.backend.host_buffer or "CPU")
    if mtp and _kv_layers(target, mtp=True):
        # the MTP context's own outputs: logits, the backend sampler's probabilities and candidates, embeddings
        mtp_boot = n_seq * target.n_vocab * 4
        acc.add(HOST, "draft", "output", "mtp", mtp_boot, basis,
                "src/llama-context.cpp output_reserve (MTP context): n_seq x n_vocab x 4 B at boot", out_type)
        acc.add(HOST, "draft", "output growth", "mtp",
                n_seq * (4 * target.n_vocab + 1 + target.n_embd) * 4 - mtp_boot, basis,
                "output_reserve once the backend sampler is set: n_seq x (4 n_vocab + 1 + n_embd) x 4 B", out_type)

    ledgers = [DeviceLedger(
        card=card,
        blocks=tuple(il for il, c in enumerate(model.layer_device) if c is card),
        holds_output=model.output_device is card,
        buffers=tuple(acc.buffers.get(card.label, ())),
        draft_blocks=tuple(il for il, c in enumerate(draft_model.layer_device) if c is card)
        if draft_model else (),
    ) for card in devices]
    for label, buffers in acc.buffers.items():
        if label != HOST.label and all(d.card.label != label for d in ledgers):
            card = next(c for c in (*host_cards, *rpc) if c.label == label)
            ledgers.append(DeviceLedger(card=card, blocks=(), holds_output=False, buffers=tuple(buffers)))
    host = DeviceLedger(card=HOST, blocks=tuple(il for il, c in enumerate(model.layer_device) if c is HOST),
                        holds_output=model.output_device is HOST,
                        buffers=tuple(acc.buffers.get(HOST.label, ())))
    checkpoint = _recurrent_per_slot(target) + _state_per_slot(
        target, [il for il in _kv_layers(target, mtp=False) if target.is_swa(il)], cache)
    slot = SlotState(
        tokens=n_ctx_seq,
        target_kv=_state_per_slot(target, _kv_layers(target, mtp=False), cache),
        recurrent=_recurrent_per_slot(target),
        draft=slot_draft,
        checkpoints=config.ctx_checkpoints * checkpoint if checkpoint and config.ctx_checkpoints > 0 else 0,
    )
    return Ledger(shape=shape, n_ubatch=n_ubatch, devices=tuple(ledgers), host=host, slot_state=slot,
                  notes=tuple(notes))


def _holds_quantized(model: _Model, card: Card) -> bool:
    """Whether a quantized weight matrix of this model sits on the card (tied embeddings as the output too)."""
    for w in _with_tied_output(model.profile):
        if w.ggml_type is None or w.ggml_type in FLOAT_TYPES or len(w.shape) < 2 or w.shape[1] <= 1:
            continue
        if w.block is not None and w.block < len(model.layer_device) and model.layer_device[w.block] is card:
            return True
        if w.block is None and w.role == "output" and model.output_device is card:
            return True
    return False


def _uses_blas(profile: Profile, model: _Model, card: Card, *, flash_attn: bool, kv_offload: bool,
               op_offload: bool) -> bool:
    """Whether a context multiplies in cuBLAS on this GPU (ggml-cuda.cu ``ggml_cuda_mul_mat``: float weights
    take cuBLAS at batch sizes above the vector kernels'; without flash attention so do the scores)."""
    runs = {il for il, c in enumerate(model.layer_device) if c is card or (op_offload and c is HOST)}
    if model.output_device is card:
        runs.add(len(model.layer_device))
    floats = any(w.ggml_type in ("F16", "BF16", "F32") and len(w.shape) > 1 and w.shape[1] > 1
                 and ((w.block in runs) if w.block is not None else
                      (w.role == "output" and model.output_device is card))
                 for w in profile.weights)
    attention = any(il in runs for il in _kv_layers(profile, mtp=False))
    return floats or (not flash_attn and kv_offload and attention)


def _runtime(acc: _Acc, notes: list[str], model: _Model, draft_model: _Model | None,
             calibrations: Sequence[Calibration], *, contexts: int, host_cards: Sequence[Card] = (),
             blas: Callable[[Card], int] = lambda card: 0, op_offload: bool = False) -> None:
    """Each GPU's memory outside every buffer, where a calibration for its backend exists and no compute
    calibration of that card (which is read off used VRAM, so already holds it) does: at health, and its growth
    on the first request (``runtime growth``); an RPC device serving a GPU gets its server's runtime, a GPU the
    process sees and does not use its idle context."""
    cards = [c for c in model.devices if c is not HOST]
    if draft_model is not None:
        cards += [c for c in draft_model.devices if c not in cards and c is not HOST]
    calibrated = {c.device for c in calibrations}
    for card in [*cards, *(c for c in host_cards if c not in cards)]:
        if card.name in calibrated or card.label in calibrated:
            continue
        rpc = card.name.startswith("RPC")
        runtime = RUNTIMES.get(card.kind or "CPU") if rpc else RUNTIMES.get(card.backend.kind)
        if runtime is None:
            if card.backend.host_buffer:
                notes.append(f"{card.name}: the {card.backend.kind} runtime's memory outside the buffers is not "
                             "calibrated (about 0.6 GiB per GPU on CUDA): not counted")
            continue
        if card not in cards:
            acc.add(card, "runtime", "runtime", "target", runtime.idle, "calibrated",
                    f"calibration (a GPU the process sees and does not use): {runtime.boot}")
            continue
        n_blas = blas(card)
        growth = runtime.first_request + (runtime.blas_first + (n_blas - 1) * runtime.blas_further if n_blas else 0)
        if rpc:
            acc.add(card, "runtime", "runtime", "target", runtime.rpc_server, "calibrated",
                    f"calibration (the ggml-rpc-server serving it): {runtime.boot}")
            acc.add(card, "runtime", "runtime growth", "target", growth, "calibrated",
                    "the server's growth on the first request that fills a ubatch"
                    + (f" ({n_blas} context(s) in cuBLAS)" if n_blas else "") + f": calibration: {runtime.boot}")
            continue
        n = contexts + (1 if draft_model is not None and card in draft_model.devices else 0)
        # the quantized kernels load with the first quantized product, which the boot's warmup runs only where a
        # quantized matrix sits on the GPU (a GPU with no layer, or only an F16 output layer, stays lower)
        warm = any(_holds_quantized(m, card) for m in (model, draft_model) if m is not None)
        at_health = runtime.first_context + (n - 1) * runtime.further_context if warm else runtime.no_layers
        acc.add(card, "runtime", "runtime", "target", at_health, "calibrated", f"calibration: {runtime.boot}")
        grown = runtime.first_context + growth + (runtime.offload_request if op_offload else 0)
        acc.add(card, "runtime", "runtime growth", "target", max(0, grown - at_health), "calibrated",
                "the first request that fills a ubatch" + (f" ({n_blas} context(s) in cuBLAS)" if n_blas else "")
                + f": calibration: {runtime.boot}")


def output_buffer(profile: Profile, *, n_seq: int, n_batch: int, n_max: int, mtp: bool,
                  drafting: int | None = None) -> tuple[int, int]:
    """The target context's output buffer at boot and once ``drafting`` sequences (default: every slot)
    verify drafts: logits for ``1 + n_max`` outputs each, and with MTP the nextn embeddings of every token
    of the batch (src/llama-context.cpp, ``output_reserve``: ``embd_nextn`` unmasked is ``n_embd x n_batch``).
    Measured on the engine (tests/ledger/data/gpu-h200.json, qwen35-mtp-cuda): 2,080 B at boot, 528,448 B
    during one drafted request."""
    boot = n_seq * profile.n_vocab * 4
    if not n_max:
        return boot, boot
    active = n_seq if drafting is None else drafting
    outputs = max(n_seq, min(n_batch, active * (1 + n_max)))
    return boot, outputs * profile.n_vocab * 4 + (profile.n_embd * n_batch * 4 if mtp else 0)


_CONTEXT_TERMS: Mapping[str, Term] = {"draft": "draft", "mtp": "draft", "projector": "projector"}


def _offloaded_input(profile: Profile, trunk: Sequence[Card], gpu: Card, cache: _Cache, flash_attn: bool) -> int:
    """What the op-offload GPU copies into its compute buffer for the host layers it runs: two of the largest
    host weight matrices (a split starts at each, ggml-backend.cpp pass 5) and, without flash attention (whose
    op is never offloaded by weight), one host layer's K and V cache, which the scores are computed against."""
    host_layers = {il for il, card in enumerate(trunk) if card is HOST}
    sizes = sorted((_alloc(w, gpu.backend) for w in profile.weights
                    if w.block in host_layers and len(w.shape) > 1 and w.shape[1] > 1), reverse=True)
    size = sum(sizes[:2])
    if not flash_attn:
        kv = [il for il in _kv_layers(profile, mtp=False) if il in host_layers]
        size += max((cache.n_stream * (cache.swa_cells(profile) if profile.is_swa(il) else cache.n_ctx_seq)
                     * (row_bytes(cache.type_k, profile.kv_row_elements(il)[0])
                        + row_bytes(cache.type_v, profile.kv_row_elements(il)[1])) for il in kv), default=0)
    return size


def _projector_compute(projector: Profile) -> tuple[int, int] | None:
    """The mmproj's compute buffers for its warmup image (the header's image size): on its device the encoder's
    activations (``4 n_embd + n_ff`` floats per patch), the f32 scores of every head (one head per 16 of width
    assumed: the profile keeps no head count) and two projected tokens' widths; on the host the image's pixels.
    Measured on one tiny projector only (gpu-h200.json smollm2-cuda-mmproj: 0.07 and 0.01 MiB)."""
    by_name = {w.name: w for w in projector.weights}
    patch, position = by_name.get("v.patch_embd.weight"), by_name.get("v.position_embd.weight")
    if patch is None or position is None or len(position.shape) < 2:
        return None
    n_embd, n_pos = position.shape[0], position.shape[1]
    n_ff = max((w.shape[1] for w in projector.weights if w.name.endswith("ffn_up.weight") and len(w.shape) > 1),
               default=4 * n_embd)
    proj = max((w.shape[1] for w in projector.weights if w.name.startswith("mm.") and len(w.shape) > 1),
               default=n_embd)
    heads = max(1, n_embd // 16)
    encoder = 4 * n_pos * (4 * n_embd + n_ff + 2 * proj) + 4 * heads * n_pos * n_pos
    side = patch.shape[0] * max(1, round(n_pos ** 0.5))
    return pad(encoder, 32), pad(4 * 3 * side * side, 32)


def _computes(acc: _Acc, notes: list[str], config: LlamaServerConfig, target: Profile, model: _Model,
              draft: Profile | None, draft_model: _Model | None, projector_card: Card | None,
              calibrations: Sequence[Calibration], *, devices: Sequence[Card], n_ubatch: int, n_batch: int,
              cache: _Cache, mtp: bool, ngl: int, flash_attn: bool, host_compute: str = "CPU",
              projector: Profile | None = None) -> None:
    """Compute buffers per context and device: a calibration for this ubatch, else an estimate."""
    by_key = {(c.device, c.context): c for c in calibrations if c.ubatch == n_ubatch}
    stale = sorted({f"{c.device}/{c.context} (ubatch {c.ubatch})"
                    for c in calibrations if c.ubatch != n_ubatch})
    if stale:
        notes.append(f"calibrations measured at another ubatch do not apply at ubatch {n_ubatch}: "
                     f"{', '.join(stale)}; those buffers are estimated")
    n_seq = cache.n_seq
    # src/llama-context.cpp: pipeline parallelism needs several devices, every layer offloaded, a layer split
    pipeline = (len(devices) > 1 and ngl > target.block_count and config.split_mode == "layer"
                and cache.offload)

    def shape_of(profile: Profile, outputs: int, parallel: bool, offloaded: int = 0,
                 host_attention: bool = False, first_stage: bool = False) -> _ComputeShape:
        layers = _kv_layers(profile, mtp=False)
        cells = [cache.n_ctx_seq] if any(not profile.is_swa(il) for il in layers) else []
        if any(profile.is_swa(il) for il in layers):
            cells.append(cache.swa_cells(profile))
        return _ComputeShape(n_ubatch=n_ubatch, n_outputs=outputs, n_seq=n_seq, mask_cells=tuple(cells),
                             copies=4 if parallel else 1, flash_attn=flash_attn, offloaded_input=offloaded,
                             host_attention=host_attention, kv_offload=cache.offload, first_stage=first_stage)

    def compute(card: Card, context: str, profile: Profile, outputs: int, *, layers: bool, output: bool,
                parallel: bool, offloaded: int = 0) -> None:
        term: Term = _CONTEXT_TERMS.get(context, "compute")
        cal = by_key.get((card.name, context)) or by_key.get((card.label, context))
        if cal is not None:
            acc.add(card, term, "compute", context, cal.bytes, "calibrated", f"calibration: {cal.boot}",
                    host_compute if card is HOST else "")
            return
        host_layers = card is HOST and op_offload and layers
        if host_layers:
            layers = False  # the GPU runs the host layers' products: the host keeps inputs, norms, residuals
        role = compute_role(card, layers=layers, pipeline=parallel, gpu_host=bool(gpus))
        host_attention = card is HOST and not cache.offload and bool(_kv_layers(profile, mtp=False))
        first = parallel and card is not HOST and bool(layer_cards.get(context)) and card is layer_cards[context][0]
        estimate = _compute_estimate(profile, shape_of(profile, outputs, parallel, offloaded, host_attention, first),
                                     role, holds_layers=layers, holds_output=output, host_layers=host_layers)
        acc.add(card, term, "compute", context, estimate, "estimate",
                f"estimate ({'/'.join(role)}): the structural peak of one ubatch times its measured factor, plus "
                "a 0.5 MiB margin where it runs layers "
                "(no boot measured it)",
                host_compute if card is HOST else "")

    n_outputs = min(n_batch, n_seq * (1 + (config.spec_draft_n_max if config.speculative else 0)))
    trunk = model.layer_device[: target.n_layer]
    layer_cards: dict[str, list[Card]] = {"target": list(dict.fromkeys(trunk))}
    if draft_model is not None and draft is not None:
        layer_cards["draft"] = list(dict.fromkeys(draft_model.layer_device[: draft.n_layer]))
    # ggml-backend.cpp: with a GPU in the schedule, the products of weights left on the host run on the first
    # GPU for batches of 32 tokens or more (op_offload); that GPU then needs the activations of a layer
    gpus = [d for d in devices if d.backend.host_buffer]
    op_offload = bool(gpus) and HOST in trunk and n_ubatch >= 32 and _flag(config, "--no-op-offload") is None
    offloaded = _offloaded_input(target, trunk, gpus[0], cache, flash_attn) if op_offload else 0
    for card in model.cards:
        # the op-offload GPU runs the host layers, also where it holds only the output layer (-ngl 1)
        runs = op_offload and card is gpus[0]
        compute(card, "target", target, n_outputs, layers=card in trunk or runs,
                output=card == model.output_device, parallel=pipeline, offloaded=offloaded if runs else 0)
    if op_offload and gpus[0] not in model.cards:
        compute(gpus[0], "target", target, n_outputs, layers=True, output=False, parallel=pipeline,
                offloaded=offloaded)
    if HOST not in model.cards:
        compute(HOST, "target", target, n_outputs, layers=False, output=False, parallel=pipeline)
    if mtp and _kv_layers(target, mtp=True):
        head = model.layer_device[target.n_layer] if target.n_layer < len(model.layer_device) \
            else model.output_device
        compute(head, "mtp", target, n_seq, layers=True, output=True, parallel=pipeline)
        compute(HOST, "mtp", target, n_seq, layers=False, output=False, parallel=pipeline)
    if draft_model is not None and draft is not None:
        outputs = n_seq * (config.spec_draft_n_max + 1)
        draft_trunk = draft_model.layer_device[: draft.n_layer]
        if gpus and HOST in draft_trunk and n_ubatch >= 32 and _flag(config, "--no-op-offload") is None \
                and gpus[0] not in draft_model.cards:
            # the draft's host layers: their products of large batches run on the first GPU, as the target's do
            compute(gpus[0], "draft", draft, outputs, layers=True, output=False, parallel=False,
                    offloaded=_offloaded_input(draft, draft_trunk, gpus[0], cache, flash_attn))
        parallel = len(draft_model.devices) > 1 and config.split_mode == "layer" and cache.offload \
            and HOST not in draft_model.layer_device
        for card in draft_model.cards:
            if card is not HOST:
                compute(card, "draft", draft, outputs, layers=card in draft_model.layer_device,
                        output=card == draft_model.output_device, parallel=parallel)
        compute(HOST, "draft", draft, outputs, layers=HOST in draft_model.layer_device, output=False,
                parallel=parallel)
    if projector_card is not None:
        cal = by_key.get((projector_card.name, "projector"))
        if cal is not None:
            acc.add(projector_card, "projector", "compute", "projector", cal.bytes, "calibrated",
                    f"calibration: {cal.boot}")
        elif (projector_card.name, "target") in by_key:
            notes.append(f"the projector's compute buffer is taken to be inside {projector_card.name}'s "
                         "calibrated compute figure")
        else:
            found = _projector_compute(projector) if projector is not None else None
            if found is None:
                notes.append(f"the projector's compute buffer on {projector_card.name} is not calibrated and its "
                             "header names no patch or position embedding: only its weights are counted")
            else:
                encoder, image = found
                # clip.cpp runs its own CPU backend beside the GPU: its host buffer is plain CPU, never pinned
                acc.add(projector_card, "projector", "compute", "projector", encoder, "estimate",
                        "estimate (projector/encoder): one warmup image through the encoder and projector "
                        "(tools/mtmd/clip.cpp reserve_compute_meta): activations, every head's scores, the "
                        "projected tokens", "CPU" if projector_card is HOST else "")
                if projector_card is not HOST:
                    acc.add(HOST, "projector", "compute", "projector", image, "estimate",
                            "estimate (projector/image): the warmup image's f32 pixels on the host "
                            "(tools/mtmd/clip.cpp reserve_compute_meta)", "CPU")


def summarize(ledger: Ledger) -> dict[str, Any]:
    """Every figure in bytes, per device and per term, each buffer named as llama-server names it."""
    def device(d: DeviceLedger) -> dict[str, Any]:
        return {
            "device": d.card.name,
            "buffer_name": d.card.label,
            "vram_bytes": d.card.vram_bytes,
            "total_bytes": d.total,
            "free_bytes": d.free,
            "blocks": list(d.blocks),
            "output_layer": d.holds_output,
            "terms": {t: d.term(t) for t in TERMS},
            "buffers": [{"name": f"{b.device_label} {b.buffer} buffer", "buffer_type": b.device_label,
                         "buffer": b.buffer, "term": b.term,
                         "context": b.context, "bytes": b.bytes, "basis": b.basis, "source": b.source}
                        for b in d.buffers],
        }

    state = ledger.slot_state
    return {
        "context": {"n_ctx": ledger.shape.n_ctx, "n_ctx_seq": ledger.shape.n_ctx_seq,
                    "n_seq_max": ledger.shape.n_seq_max, "kv_unified": ledger.shape.unified,
                    "n_ubatch": ledger.n_ubatch},
        "devices": [device(d) for d in ledger.devices],
        "host": device(ledger.host),
        "slot_state": {"tokens": state.tokens, "target_kv": state.target_kv, "recurrent": state.recurrent,
                       "draft": state.draft, "checkpoints": state.checkpoints, "total": state.total},
        "notes": list(ledger.notes),
    }


def calibrations_of(service: Any) -> tuple[Calibration, ...]:
    """The compute calibrations a fleet.toml service declares (the schema has validated them)."""
    raw = service.calibration.get("compute", []) if isinstance(service.calibration, Mapping) else []
    return tuple(Calibration(device=str(c["device"]), context=str(c["context"]), bytes=int(c["bytes"]),
                             ubatch=int(c["ubatch"]), boot=str(c["boot"])) for c in raw)


def arm_rungs(service: Any, spec_types: Iterable[str]) -> frozenset[int]:
    """The ubatch rungs of the documented arms (``calibration.arms``) that this speculative type runs.

    An arm was booted and measured at its own rung, which no compute calibration covers: there its compute
    buffers are the ledger's never-under estimate (COMPUTE_FACTORS), and the arm is judged at that rung, not
    at a calibrated one it never ran at (B-SP-9, B-FIT-19).
    """
    raw = service.calibration.get("arms", []) if isinstance(service.calibration, Mapping) else []
    types = set(spec_types)
    return frozenset(int(a["ubatch"]) for a in raw if str(a["spec_type"]) in types)


def _ledger_builder(config: Any) -> Callable[[LlamaServerConfig], Ledger]:
    service = config.service
    if config.llama is None or config.profile is None:
        raise ValueError(f"{config.name}: the ledger needs a llama.cpp service with a profile")
    cards = [Card(name=d.name, vram_bytes=d.vram_bytes) for d in config.host.cards]
    projector = load_profile(service.projector_profile) if service.projector_profile else None
    calibrations = calibrations_of(service)

    def build(llama: LlamaServerConfig) -> Ledger:
        return build_ledger(llama, config.profile, cards=cards, draft=config.draft_profile,
                            projector=projector, calibrations=calibrations)

    return build


_LEDGERS: dict[int, tuple[Any, Ledger]] = {}


def service_ledger(config: Any) -> Ledger:
    """The ledger of a rendered llama.cpp service (``fleetgate.config.ServiceConfig``) on its host's cards.

    Built once per rendered config, for all the memory seams. Raises KeyError for a ``--device`` name
    the host has no card for.
    """
    cached = _LEDGERS.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    ledger = _ledger_builder(config)(config.llama)
    _LEDGERS[id(config)] = (config, ledger)
    return ledger


@dataclass(frozen=True)
class SweepRow:
    """One ``--tensor-split`` step of a two-card split, as the seeds tabulate them by hand (E.5-E.7)."""

    tensor_split: tuple[int, int]
    free: tuple[int, int]
    gap: int
    floor_ok: tuple[bool, bool]
    slack_ok: bool | None

    @property
    def ok(self) -> bool:
        return all(self.floor_ok) and self.slack_ok is not False


def sweep_tensor_split(config: LlamaServerConfig, ledger_of: Callable[[LlamaServerConfig], Ledger], *,
                       floor: int | None, slack: int | None) -> list[SweepRow]:
    """Every integer ``-ts a,b`` from ``1,total-1`` to ``total-1,1``, the total being the command's split's
    (100 when it gives none): the whole range, two cards only.

    A floor of None is a floor of 0: no row is ok with a card below zero, declared floor or not.
    """
    if len(config.tensor_split) == 2:
        total = round(sum(config.tensor_split))
    elif not config.tensor_split:
        total = 100
    else:
        return []
    limit = floor or 0
    rows: list[SweepRow] = []
    for first in range(1, total):
        ledger = ledger_of(dataclasses.replace(config, tensor_split=(float(first), float(total - first))))
        cards = ledger.cards
        if len(cards) != 2:
            return []
        free = (cards[0].free or 0, cards[1].free or 0)
        gap = abs(cards[0].total - cards[1].total)
        rows.append(SweepRow(tensor_split=(first, total - first), free=free, gap=gap,
                             floor_ok=(free[0] >= limit, free[1] >= limit),
                             slack_ok=None if slack is None else gap <= slack))
    return rows


def service_sweep(config: Any) -> list[SweepRow]:
    """The -ts sweep of a rendered service against its host's floor (0 when none is declared) and slack."""
    return sweep_tensor_split(config.llama, _ledger_builder(config), floor=config.host.card_floor_bytes,
                              slack=config.host.balance_slack_bytes)


@dataclass(frozen=True)
class Verdict:
    """What ``fleetgate fit`` gates on: every sized card at or above its floor (0 when none is declared), and
    the cards of a split within the declared slack."""

    floor: int
    floor_declared: bool
    failing: tuple[DeviceLedger, ...]
    """Cards below the floor, the worst first."""
    unsized: tuple[str, ...]
    """Cards whose size is not known: not judged."""
    gap: int | None
    slack: int | None

    @property
    def slack_fails(self) -> bool:
        return self.slack is not None and self.gap is not None and self.gap > self.slack

    @property
    def fits(self) -> bool:
        return not self.failing and not self.slack_fails

    @property
    def exit_code(self) -> int:
        """0 fits; 1 a card below zero or its floor, or a gap over the slack; 3 fits as far as it can see, but a
        card's size is unknown (``--card NAME=SIZE``)."""
        if not self.fits:
            return 1
        return 3 if self.unsized else 0


def judge(ledger: Ledger, *, floor: int | None, slack: int | None) -> Verdict:
    limit = floor or 0
    cards = ledger.cards
    sized = [d for d in cards if d.card.vram_bytes is not None]
    failing = tuple(sorted((d for d in sized if (d.free or 0) < limit), key=lambda d: d.free or 0))
    gap = max(d.total for d in sized) - min(d.total for d in sized) if len(sized) > 1 else None
    return Verdict(floor=limit, floor_declared=floor is not None, failing=failing,
                   unsized=tuple(d.card.name for d in ledger.devices if d.card.vram_bytes is None), gap=gap,
                   slack=slack if len(sized) > 1 else None)


def nearest_fitting(rows: Sequence[SweepRow], current: Sequence[float]) -> SweepRow | None:
    """The sweep's ok row nearest the current split (None when no split clears every floor and the slack)."""
    good = [r for r in rows if r.ok]
    if not good:
        return None
    first = current[0] if len(current) == 2 else 50.0  # the rows share the current split's total (100 without one)
    return min(good, key=lambda r: (abs(r.tensor_split[0] - first), r.tensor_split[0]))
