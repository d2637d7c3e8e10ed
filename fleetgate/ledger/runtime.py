"""What a GPU process holds outside every buffer: the runtime's context, the BLAS workspace, the memory pool and
graphs. Not derived from the source: calibrated per backend on named boots (``RUNTIMES``), at health and after the
first request that fills a ubatch (``runtime growth``), and left out where a card's compute is calibrated (those
figures are read off used VRAM and already hold it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetgate.ledger.accounts import RUNTIME_GROWTH, Accounts, Calibration
from fleetgate.ledger.devices import FLOAT_TYPES, HOST, Card
from fleetgate.ledger.drafters import Drafter
from fleetgate.ledger.kv import kv_layers
from fleetgate.ledger.placement import Devices, PlacedModel
from fleetgate.ledger.weights import with_tied_output
from fleetgate.models.profile import Profile

__all__ = ["RUNTIMES", "Runtime", "book_runtime"]

MiB = 1 << 20


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


def _holds_quantized(model: PlacedModel, card: Card) -> bool:
    """Whether a quantized weight matrix of this model sits on the card (tied embeddings as the output too)."""
    for w in with_tied_output(model.profile):
        if w.ggml_type is None or w.ggml_type in FLOAT_TYPES or len(w.shape) < 2 or w.shape[1] <= 1:
            continue
        if w.block is not None and w.block < len(model.layer_device) and model.layer_device[w.block] is card:
            return True
        if w.block is None and w.role == "output" and model.output_device is card:
            return True
    return False


def _uses_blas(profile: Profile, model: PlacedModel, card: Card, *, flash_attn: bool, kv_offload: bool,
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
    attention = any(il in runs for il in kv_layers(profile, mtp=False))
    return floats or (not flash_attn and kv_offload and attention)


def _blas_contexts(card: Card, model: PlacedModel, drafter: Drafter, *, flash_attn: bool, kv_offload: bool,
                   op_offload: bool) -> int:
    """How many contexts multiply in cuBLAS on this GPU: the target's, the MTP head's, the draft model's."""
    target = model.profile
    found = int(_uses_blas(target, model, card, flash_attn=flash_attn, kv_offload=kv_offload, op_offload=op_offload))
    head = model.layer_device[target.n_layer] if target.n_layer < len(model.layer_device) \
        else model.output_device
    if drafter.mtp and found and head is card and kv_offload and not flash_attn:
        found += 1  # the MTP context's nextn block scores its attention in cuBLAS too
    draft_model = drafter.model
    if draft_model is not None and card in draft_model.devices:
        found += int(_uses_blas(draft_model.profile, draft_model, card, flash_attn=flash_attn, kv_offload=kv_offload,
                                op_offload=False))
    return found


def book_runtime(acc: Accounts, notes: list[str], model: PlacedModel, drafter: Drafter,
                 calibrations: Sequence[Calibration], *, devices: Devices, flash_attn: bool, kv_offload: bool,
                 op_offload: bool) -> None:
    """Each GPU's memory outside every buffer, where a calibration for its backend exists and no compute
    calibration of that card (which is read off used VRAM, so already holds it) does: at health, and its growth
    on the first request (``runtime growth``); an RPC device serving a GPU gets its server's runtime, a GPU the
    process sees and does not use its idle context."""
    draft_model = drafter.model
    contexts = 1 + (1 if drafter.mtp else 0)
    host_cards = [c for c in devices.cards if c.backend.host_buffer]
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
        n_blas = _blas_contexts(card, model, drafter, flash_attn=flash_attn, kv_offload=kv_offload,
                                op_offload=op_offload)
        growth = runtime.first_request + (runtime.blas_first + (n_blas - 1) * runtime.blas_further if n_blas else 0)
        if rpc:
            acc.add(card, "runtime", "runtime", "target", runtime.rpc_server, "calibrated",
                    f"calibration (the ggml-rpc-server serving it): {runtime.boot}")
            acc.add(card, "runtime", RUNTIME_GROWTH, "target", growth, "calibrated",
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
        acc.add(card, "runtime", RUNTIME_GROWTH, "target", max(0, grown - at_health), "calibrated",
                "the first request that fills a ubatch" + (f" ({n_blas} context(s) in cuBLAS)" if n_blas else "")
                + f": calibration: {runtime.boot}")
