"""The compute buffers of each context on each device.

- Compute buffers are measured, not derived: a calibration (per device and context, naming the boot it
  came from) or an estimate marked as such.

The estimate is the structural peak of one ubatch's graph on the device (``compute_peak``) times the measured
factor of its kind of buffer (``COMPUTE_FACTORS``), plus ``COMPUTE_MARGIN`` where the device runs layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import LlamaServerConfig, pad
from fleetgate.gguf import row_bytes
from fleetgate.ledger.accounts import Accounts, Calibration, Term, calibrations_at
from fleetgate.ledger.context import ContextParams
from fleetgate.ledger.devices import HOST, Card
from fleetgate.ledger.drafters import Drafter
from fleetgate.ledger.kv import KvCache, kv_layers
from fleetgate.ledger.options import flag_value
from fleetgate.ledger.placement import PlacedModel
from fleetgate.ledger.weights import alloc
from fleetgate.ledger.weights import moved_tensors as model_moved
from fleetgate.profile import Profile

__all__ = [
    "COMPUTE_FACTORS",
    "COMPUTE_MARGIN",
    "GATED_Q_ARCHS",
    "ComputeShape",
    "book_compute",
    "compute_peak",
    "compute_role",
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


def _compute_estimate(profile: Profile, shape: ComputeShape, role: tuple[str, str], *, holds_layers: bool,
                      holds_output: bool, host_layers: bool = False) -> int:
    """The compute buffer estimate where no boot measured it: the structural peak times the measured factor
    for this kind of buffer, plus COMPUTE_MARGIN on a device running layers (always shown as an estimate;
    docs/ledger.md gives its measured range)."""
    peak = compute_peak(profile, shape, holds_layers=holds_layers, holds_output=holds_output,
                        host_layers=host_layers)
    factor = COMPUTE_FACTORS[role]
    margin = COMPUTE_MARGIN if role[1] != "host" else 0
    return pad(int(peak * factor) + margin + 1, 32)


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
        return ComputeShape(n_ubatch=n_ubatch, n_outputs=outputs, n_seq=n_seq, mask_cells=tuple(cells),
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
        host_attention = card is HOST and not cache.offload and bool(kv_layers(profile, mtp=False))
        first = parallel and card is not HOST and bool(layer_cards.get(context)) and card is layer_cards[context][0]
        estimate = _compute_estimate(profile, shape_of(profile, outputs, parallel, offloaded, host_attention, first),
                                     role, holds_layers=layers, holds_output=output, host_layers=host_layers)
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
    layer_cards: dict[str, list[Card]] = {"target": list(dict.fromkeys(trunk))}
    if draft_model is not None and draft is not None:
        layer_cards["draft"] = list(dict.fromkeys(draft_model.layer_device[: draft.n_layer]))
    # the op-offload GPU (offloads_ops) needs the activations of a layer
    gpus = [d for d in devices if d.backend.host_buffer]
    offloaded = _offloaded_input(target, trunk, gpus[0], cache, flash_attn, _host_tensors(model)) \
        if op_offload else 0
    # the host runs the ops of the layer tensors an override left on it, where no GPU takes them over (op offload)
    host_runs = bool(_host_tensors(model)) and not op_offload
    for card in model.cards:
        # the op-offload GPU runs the host layers, also where it holds only the output layer (-ngl 1)
        runs = op_offload and card is gpus[0]
        compute(card, "target", target, n_outputs, layers=card in trunk or runs or (card is HOST and host_runs),
                output=card == model.output_device, parallel=pipeline, offloaded=offloaded if runs else 0)
    if op_offload and gpus[0] not in model.cards:
        compute(gpus[0], "target", target, n_outputs, layers=True, output=False, parallel=pipeline,
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
