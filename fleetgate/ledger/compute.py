"""The compute buffers of each context on each device.

- Compute buffers are measured, not derived: a calibration (per device and context, naming the boot it
  came from) or an estimate marked as such.

The estimate is the structural peak of one ubatch's graph on the device (``compute_peak``) times the measured
factor of its kind of buffer (``COMPUTE_FACTORS``), plus ``COMPUTE_MARGIN`` where the device runs layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import LlamaServerConfig, pad
from fleetgate.ledger.accounts import Accounts, Calibration, Term, calibrations_at
from fleetgate.ledger.context import ContextParams, fa_kernel
from fleetgate.ledger.devices import FLOAT_TYPES, HOST, Card
from fleetgate.ledger.drafters import Drafter
from fleetgate.ledger.kv import KvCache, kv_layers
from fleetgate.ledger.options import flag_value
from fleetgate.ledger.placement import PlacedModel
from fleetgate.ledger.weights import alloc
from fleetgate.ledger.weights import moved_tensors as model_moved
from fleetgate.models.gguf import row_bytes
from fleetgate.models.profile import Profile

__all__ = [
    "COMPUTE_FACTORS",
    "COMPUTE_MARGIN",
    "GATED_Q_ARCHS",
    "ComputeShape",
    "attention_floor",
    "book_compute",
    "compute_peak",
    "compute_role",
    "host_cache_copies",
    "host_flash_attention",
    "offloads_ops",
]


@dataclass(frozen=True)
class ComputeShape:
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
    v_copy: int = 0
    """Without flash attention and with V not transposed (``-fa auto`` resolved off after the cache was made with
    V as flash attention lays it out: src/llama-context.cpp sets ``cparams.flash_attn`` from the requested type
    before ``create_memory`` and only ``resolve_fused_ops`` turns it off), src/llama-graph.cpp ``build_attn_mha``
    takes ``ggml_cont(ggml_transpose(v))``: an f16 copy of the widest layer's whole V view, live with the scores."""
    floor: int = 0
    """A peak traced from the engine's source that the estimate must not fall below (``attention_floor``,
    ``host_inputs``)."""
    device_attention: bool = True
    """Whether the device runs its layers' flash attention. Not where its backend has no kernel for the head size
    or the cache's types (``context.fa_kernel``): ggml-cuda.cu ``supports_op`` refuses the node, ggml-backend.cpp
    ``ggml_backend_sched_split_graph`` gives it to the CPU, and the masks it reads, inputs on the host, are never
    copied to the device."""
    returned: int = 0
    """Under pipeline parallelism, the outputs of the attention the host runs for this device's layers, which come
    back as split inputs: pass 5 makes ``copies`` of each and flags them input and output, so none is freed
    (one f32 ``n_ubatch x n_head x head`` per layer and copy)."""
    every_token: bool = False
    """An embedding context (``ContextParams.every_token``): the output layer's logits cover the whole ubatch, an
    exact tensor that most of the buffer is; the measured factor, which stands for small tensors the peak does not
    list, does not scale it."""


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


def compute_peak(profile: Profile, shape: ComputeShape, *, holds_layers: bool, holds_output: bool,
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
                # V untransposed (-fa auto resolved off): build_attn_mha's ggml_cont(ggml_transpose(v)) sits between
                # the cache views (the CPU's, "1.vsrc") and the output it pins to the CPU, so pass 2's "expand rest
                # down" of ggml_backend_sched_split_graph gives it to the host too
                size += shape.v_copy
        return pad(size, 32)
    ffn = 4 * ub * (4 * n_embd + 3 * n_ff)
    attn = 4 * ub * (n_embd + 5 * q)
    if not shape.flash_attn and shape.kv_offload:  # with --no-kv-offload the scores are the host's
        attn += 4 * ub * n_head * max(shape.mask_cells or (0,)) + shape.v_copy
    if not shape.device_attention:
        cells = 0  # the masks stay on the host with the attention that reads them
    masks = (2 if shape.flash_attn else 4) * ub * cells
    # split inputs: the layer input, and under pipeline parallelism every copy of it and of the masks (f16 with
    # flash attention: src/llama-graph.cpp build_attn_inp_kq_mask); ggml-backend.cpp flags every copy as an
    # input and an output, so none is freed before the graph ends
    copy = 4 * ub * n_embd + (2 if shape.flash_attn else 4) * ub * cells
    size = max(ffn, attn) + masks + 4 * ub * n_embd + (shape.copies - 1) * copy + 65536 + 32 * ub
    if shape.copies > 1 and shape.first_stage:
        size += (2 * shape.copies + 1) * 4 * ub * n_embd
    size += shape.offloaded_input + shape.returned
    if holds_output:
        size += 4 * shape.n_outputs * max(profile.n_vocab, 1)
    return pad(size, 32)


def _compute_estimate(profile: Profile, shape: ComputeShape, role: tuple[str, str], *, holds_layers: bool,
                      holds_output: bool, host_layers: bool = False) -> int:
    """The compute buffer estimate where no boot measured it: the structural peak times the measured factor
    for this kind of buffer, plus COMPUTE_MARGIN on a device running layers (always shown as an estimate;
    docs/ledger.md gives its measured range)."""
    peak = compute_peak(profile, shape, holds_layers=holds_layers, holds_output=holds_output,
                        host_layers=host_layers)
    factor = COMPUTE_FACTORS[role]
    margin = COMPUTE_MARGIN if role[1] != "host" else 0
    # ggml-alloc.c places a tensor larger than every hole at the top of the buffer, above whatever is still live;
    # the scaled rest of the peak bounds that, the logits' own size is ggml_nbytes of [n_vocab, n_outputs] f32
    logits = 4 * shape.n_outputs * max(profile.n_vocab, 1) if shape.every_token and holds_output else 0
    return max(pad(int((peak - logits) * factor) + logits + margin + 1, 32), shape.floor)


def _widest_views(profile: Profile, cache: KvCache) -> tuple[int, int]:
    """Elements of the largest layer's whole K view and V view (every cell of every stream): what
    ``get_k``/``get_v`` hand the attention of one layer (src/llama-kv-cache.cpp)."""
    k_view = v_view = 0
    for il in kv_layers(profile, mtp=False):
        cells = (cache.swa_cells(profile) if profile.is_swa(il) else cache.n_ctx_seq) * cache.n_stream
        k_elems, v_elems = profile.kv_row_elements(il)
        k_view, v_view = max(k_view, cells * k_elems), max(v_view, cells * v_elems)
    return k_view, v_view


def _rotations(profile: Profile, cache: KvCache) -> int:
    """A quantized cache's Hadamard rotation inputs, f32 ``n_rot x n_rot`` for K and for V per cache
    (src/llama-kv-cache.cpp constructor: ``n_rot_k`` doubles while it divides the head size, ``n_rot_v`` is 64;
    ``build_input_k_rot``/``build_input_v_rot``); bounded by the head size squared."""
    if cache.type_k.upper() in ("F16", "F32", "BF16") and cache.type_v.upper() in ("F16", "F32", "BF16"):
        return 0
    side = max(profile.key_length, profile.value_length, 64)
    caches = 1 + any(profile.is_swa(il) for il in kv_layers(profile, mtp=False))
    return caches * 2 * 4 * side * side


def host_cache_copies(profile: Profile, cache: KvCache, layers: Iterable[int], card: Card) -> int:
    """The widest of the given layers' whole K and V views as the CUDA device copies them in from a cache on the
    host, in the cache's own type.

    Flash attention is never placed by its sources (ggml-backend.cpp ``ggml_backend_sched_backend_id_from_cur``
    skips FLASH_ATTN_EXT when it looks for weights) and src/llama-graph.cpp ``build_attn_mha`` pins only the path
    without it to the CPU under ``--no-kv-offload``; so pass 2 of ``ggml_backend_sched_split_graph`` spreads the
    GPU's assignment over the node from its neighbours: the query it reads, or the products the op-offload GPU
    takes over in a layer left on the host. The K and V views then live in a buffer the GPU cannot read
    (``ggml_backend_sched_buffer_supported``), and pass 5 makes each a split input: ``ggml_dup_tensor_layout``,
    the view's type, shape and strides, allocated in the GPU's compute buffer (``ggml_nbytes`` of all the cells of
    every stream, plus ggml-cuda.cu ``ggml_backend_cuda_buffer_type_get_alloc_size``'s padding row where the
    quantized ``ne[0]``, the head size, is not a multiple of 512) and live at the flash-attention node. One
    layer's pair at a time: each view is its own input and is freed after its node (one copy without pipeline
    parallelism, which ``--no-kv-offload`` and partial offload both turn off)."""
    return max((k + v for k, v in _view_copies(profile, cache, layers, card)), default=0)


def later_view_copy(profile: Profile, cache: KvCache, layers: Iterable[int], card: Card) -> int:
    """The widest single K or V view a later layer copies in above the mask (``host_cache_copies``).

    Pass 5 of ggml-backend.cpp ``ggml_backend_sched_split_graph`` lists a split's inputs in the order its nodes
    read them, and the graph copy adds them "so that they are allocated by ggml-alloc at the start of the split":
    the first flash-attention split's inputs are that layer's K view, its V view and then the mask (FLASH_ATTN_EXT's
    sources 1, 2, 3), so the mask's copy lands above the first layer's K and V copies. It is the same copy for every
    later split (``tensor_id_copy``, one per backend), live until the last layer's node; the next layer's K copy
    takes the hole the first one left, but the residual stream (``l_out``) stays live inside the V copy's hole,
    so the V copy lands above the mask. Seen on the stand-in CUDA device (tests/ledger/gpu/standin.cpp) for
    SmolLM2 at ``-ngl 0 -fa on -ub 256``: 3,540,992 B of activations, K, V, the mask, V again, to the byte at
    ``-np 1, 2, 4``; at ``-np 8`` the 0.5 MiB mask fits a hole below and the buffer is one copy smaller."""
    return max((max(k, v) for k, v in _view_copies(profile, cache, layers, card)), default=0)


def _view_copies(profile: Profile, cache: KvCache, layers: Iterable[int], card: Card) -> list[tuple[int, int]]:
    """Per layer, the bytes of its whole K view and V view as ``card``'s buffer type allocates a copy of them."""
    padding = card.backend.quant_row_padding
    found = []
    for il in sorted(set(layers) & set(kv_layers(profile, mtp=False))):
        swa = profile.is_swa(il)
        cells = (cache.swa_cells(profile) if swa else cache.n_ctx_seq) * cache.n_stream
        k_elems, v_elems = profile.kv_row_elements(il)
        heads = ((profile.key_length_swa, profile.value_length_swa) if swa
                 else (profile.key_length, profile.value_length))
        pair = []
        for ggml_type, elems, head in ((cache.type_k, k_elems, heads[0]), (cache.type_v, v_elems, heads[1])):
            nbytes = row_bytes(ggml_type, elems) * cells
            if padding and ggml_type.upper() not in FLOAT_TYPES and head % padding:
                nbytes += row_bytes(ggml_type, padding - head % padding)
            pair.append(pad(nbytes, card.backend.alignment))
        found.append((pair[0], pair[1]))
    return found


def attention_floor(profile: Profile, cache: KvCache, n_ubatch: int, mask_cells: Sequence[int],
                    copied: int = 0, later: int = 0) -> int:
    """The peak at the flash-attention node on a CUDA device with a K or V cache other than f16, or with K and V
    copied in from the host (``copied``, ``host_cache_copies``).

    ggml-alloc.c ``ggml_gallocr_allocate_node`` sizes a node by its buffer type's ``get_alloc_size``; for
    FLASH_ATTN_EXT the CUDA buffer type (ggml-cuda.cu ``ggml_backend_cuda_buffer_type_get_alloc_size`` ->
    fattn.cu ``ggml_cuda_flash_attn_ext_get_alloc_size`` -> fattn-common.cuh
    ``ggml_cuda_flash_attn_ext_get_f16_extra_data``) adds f16 copies of the whole K and V views, which
    ``launch_fattn`` dequantizes into, when the kernel chosen needs f16 K/V (the tile and MMA kernels: every
    batch of more than two tokens per stream on a recent card). The node is larger than any free block, so
    ``ggml_dyn_tallocr_alloc`` places it above everything still live: the activations of the layer (bounded by
    five of the widest of n_embd and the query per token), the positions and indices, every f16 mask, the
    rotation inputs and the K and V copied in from a cache on the host, and above the mask a later layer's copy
    (``later``, ``later_view_copy``). Measured equal or within 1 % over on every such boot (docs/ledger.md).
    fattn-common.cuh adds a view's f16 copy only where its type is not f16."""
    n_embd, _, q, _ = _dims(profile)
    k_view, v_view = _widest_views(profile, cache)
    ub = n_ubatch
    output = pad(4 * ub * q, 128)
    node = output
    if cache.type_k.upper() != "F16":
        node = pad(node, 128) + 2 * k_view
    if cache.type_v.upper() != "F16":
        node = pad(node, 128) + 2 * v_view
    masks = sum(2 * cells * ub for cells in mask_cells)
    live = 4 * ub * 5 * max(n_embd, q) + 64 * ub + _rotations(profile, cache) + 128 + copied
    # above the mask: the node's f16 copies, or a later layer's view copy where they are smaller (an f16 cache has
    # none); a later copy that fits in the hole the larger f16 copies left takes no more
    return output + masks + live + max(node - output, later)


def late_cache(profile: Profile) -> int | None:
    """The first layer of the attention cache whose layers start later (the full-attention cache of an iSWA model,
    whose first layer follows sliding-window ones), or None with one cache."""
    first: dict[bool, int] = {}
    for il in kv_layers(profile, mtp=False):
        first.setdefault(profile.is_swa(il), il)
    return max(first.values()) if len(first) > 1 else None


def late_mask_floor(profile: Profile, cache: KvCache, shape: ComputeShape) -> int:
    """The peak at the first flash attention over the later cache of an iSWA model, where a product the op-offload
    GPU takes over comes before it.

    Each offloaded host weight starts a split (ggml-backend.cpp ``ggml_backend_sched_split_graph`` pass 5), and the
    graph copy adds a split's inputs "so that they are allocated by ggml-alloc at the start of the split": the
    later cache's mask (``build_attn_inp_kq_mask``, f16) is first read in the split that the last offloaded weight
    before its first layer starts (``-ncffn``: the previous layer's ``ffn_down``), while that layer's FFN product
    (``ffn_geglu``, ``build_ffn``) is still live at the top of the buffer. The mask is larger than any hole, so
    ggml-alloc.c ``ggml_dyn_tallocr_alloc`` puts it above the FFN's peak, and the flash-attention node of the
    later cache (its f16 K/V copies where the cache is quantized, ``attention_floor``) lands above the mask. The
    FFN's peak is bounded by the FFN term of ``compute_peak`` (residual, norm, gate, up and their product), the
    inputs read before it (the earlier cache's mask, the rotations, positions and indices) and the weight copies
    (``offloaded_input``): traced on a stand-in CUDA device running build 11434's scheduler and allocator, the
    mask of gemma-3-270m under ``-ncffn 12`` lands at the top of layer 4's ``ffn_geglu``."""
    first_late = late_cache(profile)
    if first_late is None:
        return 0
    n_embd, n_ff, q, _ = _dims(profile)
    ub = shape.n_ubatch
    late_cells = cache.swa_cells(profile) if profile.is_swa(first_late) else cache.n_ctx_seq
    early_cells = cache.n_ctx_seq if profile.is_swa(first_late) else cache.swa_cells(profile)
    k_view, v_view = _widest_views(profile, cache)
    node = pad(4 * ub * q, 128)
    if cache.type_k.upper() != "F16":
        node = pad(node, 128) + 2 * k_view
    if cache.type_v.upper() != "F16":
        node = pad(node, 128) + 2 * v_view
    below = 4 * ub * (4 * n_embd + 3 * n_ff) + 2 * early_cells * ub + _rotations(profile, cache) + 64 * ub \
        + shape.offloaded_input
    return below + 2 * late_cells * ub + node


def host_attention_copies(profile: Profile, n_ubatch: int, layers: Iterable[int]) -> int:
    """What the host adds above its inputs where it runs the flash attention of a layer left on it because the
    op-offload GPU has no kernel for the head size (ggml-cuda.cu ``supports_op``: pass 3 of
    ``ggml_backend_sched_split_graph`` gives the node to the CPU).

    That layer's ``set_rows`` into its cache (src/llama-graph.cpp ``build_attn``: ``cpy_k``/``cpy_v`` into a view of
    a host buffer, ``1.vsrc``) and the flash attention form one CPU split whose inputs are the GPU's ``k_cur``,
    ``v_cur`` and query (f32, the products of host weights the GPU took over); the graph copy allocates a split's
    inputs at its start, and the f32 attention output (``build_attn_mha``) comes above them. Traced on the stand-in
    CUDA device (tests/ledger/gpu/standin.cpp) for the tiny hybrid at ``-ngl 0 -np 4``: the query's copy and the
    output are the top of the host's buffer, K and V land in holes the inputs left. Counted here above every input,
    a bound."""
    _, _, q, n_head = _dims(profile)
    widest = 0
    for il in set(layers) & set(kv_layers(profile, mtp=False)):
        k_elems, v_elems = profile.kv_row_elements(il)
        out = n_head * max(profile.value_length, 1)
        widest = max(widest, sum(pad(4 * n_ubatch * n, 32) for n in (k_elems, v_elems, q, out)))
    return widest


def host_flash_attention(profile: Profile, cache: KvCache, n_ubatch: int, layers: Iterable[int]) -> int:
    """What the host adds above its inputs where it runs the flash attention of layers whose cache is on a GPU
    without a kernel for them (``context.fa_kernel``: qwen35's head size 32, or an iq4_nl cache).

    ggml-cuda.cu ``supports_op`` (fattn.cu ``ggml_cuda_get_best_fattn_kernel``) refuses the node, so pass 2 of
    ggml-backend.cpp ``ggml_backend_sched_split_graph`` leaves it unassigned and pass 3 gives it to the backend
    that supports it, the CPU. Its K and V views sit in the GPU's KV buffer, which the CPU cannot read
    (``ggml_backend_sched_buffer_supported``), so pass 5 makes each a split input: a copy in the cache's own type
    of every cell of every stream (``ggml_dup_tensor_layout``) in the host's compute buffer, allocated at the
    split's start with the query's copy (f32), and the f32 output above them; the mask is a host input already.
    One layer at a time (each copy is freed after its node), so the widest layer's. The stand-in CUDA device
    gives the host's buffer of the tiny hybrid as these copies, the mask and 1,584 B per token more (its inputs),
    to the byte at ``-np 1, 4, 8`` and ``-ub 24, 64, 512``; gemma-3-270m's iq4_nl cache at 32k: 51,441,696 B, the
    H100's."""
    _, _, q, n_head = _dims(profile)
    out = n_head * max(profile.value_length, 1)
    return max((k + v + pad(4 * n_ubatch * q, 32) + pad(4 * n_ubatch * out, 32)
                for k, v in _view_copies(profile, cache, layers, HOST)), default=0)


def host_inputs(profile: Profile, cache: KvCache, shape: ComputeShape, *, mean_pooling: bool,
                cls_pooling: bool) -> int:
    """The host's compute buffer where it runs no layer: the graph's inputs (ggml-backend.cpp
    ``ggml_backend_sched_backend_id_from_cur`` puts every input on the last backend, the CPU) and the token
    embedding path, each tensor padded to 32 (src/llama-graph.cpp ``build_inp_embd``: the rows, the embeddings,
    the mixed batch and its copy; tokens, mixed tokens, slots (I64), positions (up to four per token), a row
    scale; per cache ``build_input_k_idxs`` (I64), ``build_input_v_idxs`` (I64, one per element when V is
    transposed), the mask ``build_attn_inp_kq_mask`` (f16 with flash attention, f32 without) and a quantized
    cache's rotations; the output ids (every token in an embedding context), ``build_inp_mean`` (f32
    ``[n_tokens, n_seq]``) or ``build_inp_cls``; a recurrent model's state copy indices)."""
    n_embd = max(profile.n_embd, 1)
    ub = shape.n_ubatch
    widest = max((max(profile.kv_row_elements(il)) for il in kv_layers(profile, mtp=False)), default=1)
    size = pad(16 * ub * n_embd, 32) + pad(ub * (4 + 4 + 8 + 16 + 4), 32)
    for cells in shape.mask_cells:
        size += pad(8 * ub, 32) + pad(8 * ub * (widest if cache.v_trans else 1), 32)
        size += pad((2 if shape.flash_attn else 4) * cells * ub, 32)
    size += _rotations(profile, cache) + pad(4 * shape.n_outputs, 32) + pad(4 * shape.n_seq, 32)
    if mean_pooling:
        size += pad(4 * ub * shape.n_seq, 32)
    if cls_pooling:
        size += pad(4 * shape.n_seq, 32)
    return size


_CONTEXT_TERMS: Mapping[str, Term] = {"draft": "draft", "mtp": "draft", "projector": "projector"}


def _host_tensors(model: PlacedModel) -> set[str]:
    """The layer tensors an override put on the host while their layer runs on a device."""
    return {m.tensor for m in model_moved(model) if m.target == HOST.label}


def _offloaded_input(profile: Profile, trunk: Sequence[Card], gpu: Card, cache: KvCache, flash_attn: bool,
                     moved_to_host: frozenset[str] | set[str] = frozenset()) -> int:
    """What the op-offload GPU copies into its compute buffer for the host layers it runs: two of the largest
    host weight matrices (a split starts at each, ggml-backend.cpp pass 5; the layer tensors an override keeps on
    the host count as host weights) and, without flash attention (whose op is never offloaded by weight), one host
    layer's K and V cache, which the scores are computed against."""
    host_layers = {il for il, card in enumerate(trunk) if card is HOST}
    sizes = sorted((alloc(w, gpu.backend) for w in profile.weights
                    if (w.block in host_layers or w.name in moved_to_host) and len(w.shape) > 1 and w.shape[1] > 1),
                   reverse=True)
    size = sum(sizes[:2])
    if not flash_attn:
        kv = [il for il in kv_layers(profile, mtp=False) if il in host_layers]
        size += max((cache.n_stream * (cache.swa_cells(profile) if profile.is_swa(il) else cache.n_ctx_seq)
                     * (row_bytes(cache.type_k, profile.kv_row_elements(il)[0])
                        + row_bytes(cache.type_v, profile.kv_row_elements(il)[1])) for il in kv), default=0)
    return size


def offloads_ops(config: LlamaServerConfig, model: PlacedModel, devices: Sequence[Card], n_ubatch: int) -> bool:
    """ggml-backend.cpp: with a GPU in the schedule, the products of weights left on the host run on the first
    GPU for batches of 32 tokens or more (op_offload), unless ``--no-op-offload``."""
    trunk = model.layer_device[: model.profile.n_layer]
    return any(d.backend.host_buffer for d in devices) and (HOST in trunk or bool(_host_tensors(model))) \
        and n_ubatch >= 32 and flag_value(config, "--no-op-offload") is None


def book_compute(acc: Accounts, notes: list[str], config: LlamaServerConfig, model: PlacedModel, drafter: Drafter,
                 calibrations: Sequence[Calibration], *, devices: Sequence[Card], params: ContextParams,
                 cache: KvCache, flash_attn: bool, op_offload: bool, host_compute: str = "CPU") -> None:
    """Compute buffers per context and device: a calibration for this ubatch, else an estimate."""
    target, ngl, draft_model = model.profile, model.ngl, drafter.model
    draft = draft_model.profile if draft_model is not None else None
    n_ubatch, n_batch = params.n_ubatch, params.n_batch
    by_key = calibrations_at(calibrations, n_ubatch)
    stale = sorted({f"{c.device}/{c.context} (ubatch {c.ubatch})"
                    for c in calibrations if c.ubatch != n_ubatch})
    if stale:
        notes.append(f"calibrations measured at another ubatch do not apply at ubatch {n_ubatch}: "
                     f"{', '.join(stale)}; those buffers are estimated")
    n_seq = cache.n_seq
    # src/llama-context.cpp: pipeline parallelism needs several devices, every layer offloaded, a layer split,
    # and no tensor override at all (``!model.has_tensor_overrides()``: any -ot/--cpu-moe entry, matched or not)
    pipeline = (len(devices) > 1 and ngl > target.block_count and config.split_mode == "layer"
                and cache.offload and not model.overrides)

    def shape_of(profile: Profile, outputs: int, parallel: bool, offloaded: int = 0,
                 host_attention: bool = False, first_stage: bool = False) -> ComputeShape:
        layers = kv_layers(profile, mtp=False)
        cells = [cache.n_ctx_seq] if any(not profile.is_swa(il) for il in layers) else []
        if any(profile.is_swa(il) for il in layers):
            cells.append(cache.swa_cells(profile))
        v_copy = 2 * _widest_views(profile, cache)[1] if not flash_attn and not cache.v_trans else 0
        return ComputeShape(n_ubatch=n_ubatch, n_outputs=outputs, n_seq=n_seq, mask_cells=tuple(cells),
                            copies=4 if parallel else 1, flash_attn=flash_attn, offloaded_input=offloaded,
                            host_attention=host_attention, kv_offload=cache.offload, first_stage=first_stage,
                            v_copy=v_copy, every_token=params.every_token)

    # src/llama-graph.cpp build_pooling: mean pooling takes inp_mean, cls/last/rank inp_cls; an embedding service
    # that names no pooling takes the model's, which the profile does not hold: both are booked
    pooling = (flag_value(config, "--pooling", "LLAMA_ARG_POOLING") or "").lower()
    reranking = flag_value(config, "--rerank", "--reranking", "LLAMA_ARG_RERANKING") is not None
    mean_pooling = params.every_token and pooling in ("", "mean") and not reranking
    cls_pooling = params.every_token and (pooling in ("", "cls", "last", "rank") or reranking)
    quantized_kv = not (cache.type_k.upper() == "F16" and cache.type_v.upper() == "F16")

    def floor_of(card: Card, context: str, profile: Profile, shape: ComputeShape, *, layers: bool) -> int:
        if context != "target":
            return 0
        floor = 0
        if card is HOST and not layers and not shape.host_attention:
            floor = host_inputs(profile, cache, shape, mean_pooling=mean_pooling, cls_pooling=cls_pooling)
            if op_offload and flash_attn and gpus and not fa_kernel(gpus[0], profile, cache.type_k, cache.type_v):
                floor += host_attention_copies(profile, n_ubatch, [il for il, where in enumerate(trunk)
                                                                   if where is HOST])
            if flash_attn and cache.offload and context == "target":
                floor += host_flash_attention(profile, cache, n_ubatch, host_attention_layers)
        elif card is not HOST and layers and flash_attn and card.backend.quant_row_padding > 0:
            # the layers whose flash attention runs here over a cache on the host: every layer of this card under
            # --no-kv-offload, and the host's own layers where this card is the op-offload GPU; where the card has
            # no kernel for the head size or the cache's types (ggml-cuda.cu supports_op), pass 3 gives the node to
            # the CPU instead
            kernel = fa_kernel(card, profile, cache.type_k, cache.type_v)
            host_cache = [il for il, where in enumerate(trunk)
                          if kernel and ((where is card and not cache.offload)
                                         or (where is HOST and op_offload and bool(gpus) and card is gpus[0]))]
            copied = host_cache_copies(profile, cache, host_cache, card) if host_cache else 0
            if copied or (quantized_kv and cache.offload and kernel):
                later = later_view_copy(profile, cache, host_cache, card) if copied else 0
                floor = attention_floor(profile, cache, n_ubatch, shape.mask_cells, copied, later)
            # a product of a host weight this card takes over before the later cache's first layer (where the card
            # runs the attention that reads the later mask)
            first_late = late_cache(profile)
            if op_offload and bool(gpus) and card is gpus[0] and first_late is not None and cache.offload and kernel:
                host_blocks = {w.block for w in profile.weights if w.name in _host_tensors(model)}
                host_blocks |= {il for il, where in enumerate(trunk) if where is HOST}
                if any(block is not None and block < first_late for block in host_blocks):
                    floor = max(floor, late_mask_floor(profile, cache, shape))
        # The floors mirror build 11434; a buffer measured on the fleet's own engine at a larger ubatch (a compute
        # buffer grows with it) is what that engine does, and no floor goes above it.
        measured = [c.bytes for c in calibrations if c.context == context and c.device in (card.name, card.label)
                    and c.ubatch >= n_ubatch]
        return min([floor, *measured])

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
        host_attention = card is HOST and not cache.offload and bool(kv_layers(profile, mtp=False))
        first = parallel and card is not HOST and bool(layer_cards.get(context)) and card is layer_cards[context][0]
        shape = shape_of(profile, outputs, parallel, offloaded, host_attention, first)
        if card is not HOST and flash_attn and not fa_kernel(card, profile, cache.type_k, cache.type_v):
            returned = 0
            if shape.copies > 1:
                _, _, _, n_head = _dims(profile)
                own = [il for il in kv_layers(profile, mtp=False)
                       if il < len(model_trunk(context)) and model_trunk(context)[il] is card]
                returned = shape.copies * len(own) * pad(4 * n_ubatch * n_head * max(profile.value_length, 1), 128)
            shape = dataclasses.replace(shape, device_attention=False, returned=returned)
        shape = dataclasses.replace(shape, floor=floor_of(card, context, profile, shape, layers=layers))
        estimate = _compute_estimate(profile, shape, role, holds_layers=layers, holds_output=output,
                                     host_layers=host_layers)
        acc.add(card, term, "compute", context, estimate, "estimate",
                f"estimate ({'/'.join(role)}): the structural peak of one ubatch times its measured factor, plus "
                "a 0.5 MiB margin where it runs layers "
                "(no boot measured it)",
                host_compute if card is HOST else "")

    # the graph is reserved for min(n_ubatch, n_outputs_max) outputs (src/llama-context.cpp sched_reserve);
    # an embedding service's n_outputs_max is n_batch (server_output_limits), so every token's logits are computed
    n_outputs = n_ubatch if params.every_token else \
        min(n_batch, n_seq * (1 + (config.spec_draft_n_max if config.speculative else 0)))
    trunk = model.layer_device[: target.n_layer]

    def model_trunk(context: str) -> Sequence[Card]:
        if context == "draft" and draft_model is not None and draft is not None:
            return draft_model.layer_device[: draft.n_layer]
        return trunk

    layer_cards: dict[str, list[Card]] = {"target": list(dict.fromkeys(trunk))}
    if draft_model is not None and draft is not None:
        layer_cards["draft"] = list(dict.fromkeys(draft_model.layer_device[: draft.n_layer]))
    # the op-offload GPU (offloads_ops) needs the activations of a layer
    gpus = [d for d in devices if d.backend.host_buffer]
    # the layers whose flash attention the host runs over a cache on a GPU that has no kernel for it
    host_attention_layers = [il for il, where in enumerate(trunk)
                             if where is not HOST and not fa_kernel(where, target, cache.type_k, cache.type_v)]
    offloaded = _offloaded_input(target, trunk, gpus[0], cache, flash_attn, _host_tensors(model)) \
        if op_offload else 0
    # an output layer left on the host (-ngl 0) is one more product the op-offload GPU takes once it has 32 rows or
    # more (ggml-cuda.cu ``offload_op``: the op's batch, here n_outputs): an embedding context's whole ubatch. The
    # logits are then the GPU's, beside its copy of the output weight (found on the held-out
    # ho-gemma3-embd-last-ngl0: 687.01 MiB on CUDA0, 512 of them logits, where the ledger had them on the host)
    output_offloaded = op_offload and model.output_device is HOST and n_outputs >= 32
    if output_offloaded:
        names = {w.name: w for w in target.weights}
        output_weight = names.get("output.weight") or names.get("token_embd.weight")
        offloaded += alloc(output_weight, gpus[0].backend) if output_weight is not None else 0
    # the host runs the ops of the layer tensors an override left on it, where no GPU takes them over (op offload)
    host_runs = bool(_host_tensors(model)) and not op_offload
    for card in model.cards:
        # the op-offload GPU runs the host layers, also where it holds only the output layer (-ngl 1)
        runs = op_offload and card is gpus[0]
        compute(card, "target", target, n_outputs, layers=card in trunk or runs or (card is HOST and host_runs),
                output=(card == model.output_device and not output_offloaded) or (runs and output_offloaded),
                parallel=pipeline, offloaded=offloaded if runs else 0)
    if op_offload and gpus[0] not in model.cards:
        compute(gpus[0], "target", target, n_outputs, layers=True, output=output_offloaded, parallel=pipeline,
                offloaded=offloaded)
    if HOST not in model.cards:
        compute(HOST, "target", target, n_outputs, layers=False, output=False, parallel=pipeline)
    if drafter.mtp and kv_layers(target, mtp=True):
        head = model.layer_device[target.n_layer] if target.n_layer < len(model.layer_device) \
            else model.output_device
        compute(head, "mtp", target, n_seq, layers=True, output=True, parallel=pipeline)
        compute(HOST, "mtp", target, n_seq, layers=False, output=False, parallel=pipeline)
    if draft_model is not None and draft is not None:
        outputs = n_seq * (config.spec_draft_n_max + 1)
        draft_trunk = draft_model.layer_device[: draft.n_layer]
        if gpus and HOST in draft_trunk and n_ubatch >= 32 and flag_value(config, "--no-op-offload") is None \
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
