"""The weights each device holds, and how the host holds its own.

- Weights: nextn (MTP) blocks are skipped unless ``draft-mtp`` loads them (src/models/qwen35.cpp,
  ``mtp_flags``; common/common.cpp, ``load_mtp``); a model without ``output.weight`` duplicates its token
  embeddings onto the output device (``TENSOR_DUPLICATED``). A device buffer is the sum of every tensor's
  allocation size padded to the buffer type's alignment (ggml/src/ggml-backend.cpp,
  ``ggml_backend_buft_alloc_buffer_n_plan``); CUDA and HIP add a row of padding to quantized tensors whose
  ``ne0 % 512 != 0`` (ggml/src/ggml-cuda/ggml-cuda.cu, ``get_alloc_size``). The host keeps a view of the
  file (``CPU_Mapped``): the span from the first to the last of its tensors
  (src/llama-model-loader.cpp, ``get_mapping_range``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetgate.engines.llamacpp import LlamaServerConfig, pad
from fleetgate.ledger.accounts import Accounts, Basis, Term
from fleetgate.ledger.devices import BACKENDS, FLOAT_TYPES, HOST, Backend, Card
from fleetgate.ledger.options import flag_value
from fleetgate.ledger.overrides import Moved, TensorOverride, match_override
from fleetgate.ledger.placement import Devices, PlacedModel
from fleetgate.models.gguf import row_bytes
from fleetgate.models.profile import Profile, Weight

__all__ = [
    "AMX_FEATURES",
    "MTP_SKIP_ARCHS",
    "HostHolding",
    "alloc",
    "amx_size",
    "book_weights",
    "host_holding",
    "local_cpu_features",
    "moved_tensors",
    "repacked",
    "weight_device",
    "with_tied_output",
]

# Nextn blocks are created with TENSOR_SKIP unless MTP is loaded (src/models/<arch>.cpp, mtp_flags).
MTP_SKIP_ARCHS = frozenset({"qwen35", "qwen35moe", "qwen3next", "glm4moe", "deepseek2", "mimo2", "step35",
                            "bailingmoe3", "cohere2moe", "hy-v3", "nemotron_h"})


def alloc(weight: Weight, backend: Backend) -> int:
    size = weight.nbytes
    padding = backend.quant_row_padding
    quantized = weight.ggml_type is not None and weight.ggml_type not in FLOAT_TYPES
    if padding and quantized and weight.shape and weight.shape[0] % padding:
        assert weight.ggml_type is not None
        size += row_bytes(weight.ggml_type, padding - weight.shape[0] % padding)
    return pad(size, backend.alignment)


def _layer_device(model: PlacedModel, weight: Weight) -> Card | None:
    """The device of the tensor's layer (None: skipped), before any override."""
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


def _override(model: PlacedModel, weight: Weight) -> tuple[TensorOverride, Card] | None:
    """The first override whose pattern the tensor's name matches (src/llama-model-loader.cpp
    ``buft_for_tensor``: regex_search in order, first match wins). A duplicated output (tied embeddings) is
    matched by the name it is created under, ``token_embd.weight``."""
    if not model.overrides:
        return None
    found = match_override(weight.name, [o for o, _ in model.overrides])
    return next(pair for pair in model.overrides if pair[0] is found) if found is not None else None


def weight_device(model: PlacedModel, weight: Weight) -> Card | None:
    """The device holding one tensor: its layer's, unless an override moves it (skipped tensors are never
    matched: the loader returns before it tries the overrides)."""
    card = _layer_device(model, weight)
    if card is None:
        return None
    pair = _override(model, weight)
    return pair[1] if pair is not None else card


def moved_tensors(model: PlacedModel) -> tuple[Moved, ...]:
    """Every tensor an override puts on another device than its layer's, with the bytes it takes there."""
    moved = []
    for weight in with_tied_output(model.profile):
        card = _layer_device(model, weight)
        pair = _override(model, weight) if card is not None else None
        if card is None or pair is None or pair[1] is card:
            continue
        moved.append(Moved(tensor=weight.name, source=card.label, target=pair[1].label,
                           nbytes=alloc(weight, pair[1].backend), override=pair[0]))
    return tuple(moved)


def with_tied_output(profile: Profile) -> list[Weight]:
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


# The AMX extra buffer type (ggml/src/ggml-cpu/amx/amx.cpp): it exists when ggml-cpu was compiled with AMX INT8 and
# AVX512-VNNI (``defined(__AMX_INT8__) && defined(__AVX512VNNI__)``, which a native build on such a CPU does) and the
# kernel grants the tile state (``ggml_amx_init``); ggml-cpu.cpp ``ggml_backend_cpu_get_extra_buffer_types`` lists it
# before CPU_REPACK, so a weight it takes is never repacked. /proc/cpuinfo names the two features amx_int8 and
# avx512_vnni.
AMX_FEATURES = frozenset({"amx_int8", "avx512_vnni"})
# amx.cpp ``extra_buffer_type::supports_op``: the K (ne0) multiple each type needs; the N (ne1) multiple is
# 2 x TILE_N = 32 for every type
_AMX_K: Mapping[str, int] = {"Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256,
                             "IQ4_XS": 256, "F16": 16}
# amx/mmq.cpp ``get_row_size``: the bytes per block of K a packed row takes beyond the block itself (Q8_0's int32
# compensation, Q4_K/Q5_K's 4 B and IQ4_XS's 2 B of unpacked scales); qtype_has_amx_kernels types only, F16 keeps
# ggml_nbytes
_AMX_EXTRA: Mapping[str, int] = {"Q4_0": 0, "Q4_1": 0, "Q8_0": 4, "Q4_K": 4, "Q5_K": 4, "Q6_K": 0, "IQ4_XS": 2}
_AMX_BLOCK: Mapping[str, int] = {"Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256,
                                 "IQ4_XS": 256}


def amx_size(weight: Weight, cpu_features: frozenset[str]) -> int | None:
    """The bytes the AMX buffer type allocates for this weight, or None where it does not take it.

    Mirrors ggml/src/ggml-cpu/amx/amx.cpp: only matrices read by a plain MUL_MAT (the loader probes each weight with
    its op, src/llama-model-loader.cpp ``weight_buft_supported``: never GET_ROWS token embeddings, never MUL_MAT_ID
    experts), of a type with a kernel, K a multiple of its block (``alignment``) and N of 32 (``op->ne[0] %
    (TILE_N * 2)``); its size is ``N x get_row_size(K)`` (amx/mmq.cpp ``ggml_backend_amx_get_alloc_size``)."""
    kind = weight.ggml_type
    # the input token embeddings are read by GET_ROWS; their duplicate as a tied output layer by MUL_MAT, so AMX
    # takes that copy (seen on a native build: SmolLM2's and gemma-3-270m's tied Q8_0 embeddings packed into AMX)
    if kind is None or not cpu_features >= AMX_FEATURES or len(weight.shape) != 2 or weight.role == "input" \
            or weight.name.endswith(("ssm_conv1d.weight",)):
        return None
    k, n = weight.shape[0], weight.shape[1]
    align = _AMX_K.get(kind)
    if align is None or k % align or n % 32:
        return None
    if kind == "F16":
        return weight.nbytes
    blocks = k // _AMX_BLOCK[kind]
    return n * blocks * (row_bytes(kind, _AMX_BLOCK[kind]) + _AMX_EXTRA[kind])


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
class HostHolding:
    """How the host holds what lands on it: mapped weights, pinned buffers, repacking."""

    mapped: bool
    pinned: str | None
    """The pinned host buffer type of the first device offering one (CUDA_Host), else None."""
    compute: str
    """The buffer type of the host's compute buffer: the first device's pinned type, else CPU."""
    cpu_features: frozenset[str] | None


def host_holding(config: LlamaServerConfig, devices: Devices, model: PlacedModel,
                 cpu_features: frozenset[str] | None, notes: list[str]) -> HostHolding:
    """How the host holds its share: mapped unless ``--load-mode`` says otherwise, pinned in the first device's
    host buffer type unless ``--no-host``, repacked by the CPU's features unless ``--no-repack``."""
    host_mapped = (flag_value(config, "-lm", "--load-mode") or "auto") in ("auto", "mmap", "mmap+mlock")
    no_host = flag_value(config, "--no-host") is not None
    pinned = None if no_host else next((d.backend.host_buffer for d in devices.used if d.backend.host_buffer), None)
    no_repack = flag_value(config, "-nr", "--no-repack") is not None
    holding = HostHolding(mapped=host_mapped, pinned=pinned,
                          compute=(devices.used[0].backend.host_buffer or "CPU") if devices.used else "CPU",
                          cpu_features=frozenset() if no_repack else cpu_features)
    if cpu_features is None and pinned is None and not no_repack and any(c is HOST for c in model.layer_device):
        notes.append("the host's CPU features are not given (hosts.NAME.cpu_features, --cpu-features): weights the "
                     "CPU backend would repack (CPU_REPACK, AMX) are counted in the mapped file instead")
    return holding


def book_weights(acc: Accounts, model: PlacedModel, *, context: str, term_block: Term, term_output: Term,
                 host: HostHolding, basis: Basis) -> None:
    placed: dict[str, tuple[Card, list[Weight]]] = {}
    for weight in with_tied_output(model.profile):
        card = weight_device(model, weight)
        if card is not None:
            placed.setdefault(card.label, (card, []))[1].append(weight)
    for card, weights in placed.values():
        if card is HOST:
            weights = _host_weights(acc, weights, context=context, term_block=term_block,
                                    term_output=term_output, host=host, basis=basis)
        by_term: dict[Term, int] = {}
        for weight in weights:
            term = term_output if weight.role == "output" else term_block
            by_term[term] = by_term.get(term, 0) + alloc(weight, card.backend)
        buffer_type = (host.pinned or "CPU") if card is HOST else card.label
        for term, nbytes in by_term.items():
            acc.add(card, term, "model", context, nbytes, basis,
                    "src/llama-model.cpp load_tensors; ggml-backend.cpp alloc_buffer_n_plan", buffer_type)


def _host_weights(acc: Accounts, weights: list[Weight], *, context: str, term_block: Term, term_output: Term,
                  host: HostHolding, basis: Basis) -> list[Weight]:
    """Book the host's repacked and mapped weights; return those it must copy into a plain buffer."""
    if host.pinned is None and host.cpu_features:
        # the CPU's extra buffer types in ggml-cpu's order: AMX first, then CPU_REPACK (select_weight_buft takes the
        # first that supports the weight)
        amx = [(w, size) for w in weights if (size := amx_size(w, host.cpu_features)) is not None]
        amx_by_term: dict[Term, int] = {}
        for weight, size in amx:
            term = term_output if weight.role == "output" else term_block
            amx_by_term[term] = amx_by_term.get(term, 0) + pad(size, BACKENDS["CPU"].alignment)
        for term, nbytes in amx_by_term.items():
            acc.add(HOST, term, "model", context, nbytes, basis,
                    "ggml/src/ggml-cpu/amx/amx.cpp: matrices packed for AMX tiles (amx_int8 + avx512_vnni)", "AMX")
        taken = {id(w) for w, _ in amx}
        weights = [w for w in weights if id(w) not in taken]
        repack = [w for w in weights if repacked(w, host.cpu_features)]
        weights = [w for w in weights if w not in repack]
        by_term: dict[Term, int] = {}
        for weight in repack:
            term = term_output if weight.role == "output" else term_block
            by_term[term] = by_term.get(term, 0) + alloc(weight, BACKENDS["CPU"])
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
