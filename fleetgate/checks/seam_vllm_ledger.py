"""vLLM's ledger (fleetgate.ledger.vllm): the service starts the way vLLM decides it at boot (B-VL-4..7).

Per tensor-parallel rank: the checkpoint's weights (and the drafter's) within the budget that
``--gpu-memory-utilization`` gives the card, and a KV pool that holds one ``--max-model-len`` sequence. Both
are vLLM's own refusals at start; the ledger's figures say how far off each is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.checks import NOT_JUDGED, service_seam
from fleetgate.checks._common import gib
from fleetgate.errors import InputError
from fleetgate.ledger.vllm import Checkpoint, VllmLedger, checkpoint_of, vllm_ledger
from fleetgate.rendered import RenderedService

NAME = "vllm-starts"


def _no_ledger(config: RenderedService) -> str | None:
    if config.vllm is None:
        return f"{config.name} renders no vLLM command line"
    if config.profile is None:
        return (f"{NOT_JUDGED}{config.name} declares no checkpoint profile: set services.{config.name}.profile to a "
                "profile with source = \"checkpoint\", [model] weight_bytes (or safetensors) and [config] (docs/ledger.md)")
    if not isinstance(config.profile.raw.get("config"), dict):
        return (f"profile {config.profile.name} has no [config] table: copy the model card's config.json keys into "
                f"{config.profile.path.name}")
    if not config.host.cards and _cpu_space(config) is None:
        return f"host {config.host.name} declares no serving device: declare its cards in hosts.{config.host.name}.devices"
    return None


def _cpu_space(config: RenderedService) -> str | None:
    """The engine's VLLM_CPU_KVCACHE_SPACE where vLLM's CPU build serves it (a host without serving cards)."""
    value = config.rendered.env.get("VLLM_CPU_KVCACHE_SPACE")
    return value if value is not None and value.strip() else None


def _checkpoints(config: RenderedService) -> tuple[Checkpoint, Checkpoint | None]:
    assert config.profile is not None
    drafter = checkpoint_of(config.draft_profile) if config.draft_profile is not None else None
    return checkpoint_of(config.profile), drafter


def service_vllm_ledger(config: RenderedService) -> VllmLedger:
    """The ledger of a rendered vLLM service on its host's first serving card (every rank has one such card)."""
    from fleetgate.checks.seam_vllm import _differs

    vllm = config.vllm
    assert vllm is not None
    target, drafter = _checkpoints(config)
    space = _cpu_space(config) if not config.host.cards else None
    if space is not None:
        # vLLM's CPU build: the pool is VLLM_CPU_KVCACHE_SPACE, the weights sit in host RAM
        try:
            return vllm_ledger(vllm, target, card="host RAM (vLLM CPU build)", card_bytes=config.host.ram_bytes,
                               drafter=drafter,
                               cpu_kvcache_space=space)
        except ValueError as exc:
            raise InputError(Path(config.where_variable("VLLM_CPU_KVCACHE_SPACE").rsplit(":", 1)[0]), None,
                             str(exc)) from None
    card = config.host.cards[0]
    shape = {key: getattr(vllm, key) for key in ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens",
                                                 "gpu_memory_utilization", "kv_cache_dtype")}
    pools = list(config.service.calibration.get("kv_pool", []))
    try:
        return vllm_ledger(vllm, target, card=card.name, card_bytes=card.vram_bytes, drafter=drafter, pools=pools,
                           shape_matches=lambda p: not _differs(p, shape))
    except ValueError as exc:
        raise InputError(config.profile.path if config.profile else config.rendered.script, None, str(exc)) from None


def _figures(config: RenderedService) -> dict[str, Any]:
    return {"vllm_ledger": service_vllm_ledger(config).summary()}


def _terms(ledger: VllmLedger, target: Checkpoint) -> list[str]:
    return [
        f"per rank ({ledger.tp} x TP{f', {ledger.pp} x PP' if ledger.pp > 1 else ''}, one {ledger.card} each): "
        f"budget {gib(ledger.budget)} = {ledger.utilization:g} x {gib(ledger.card_bytes)}",
        f"weights {gib(ledger.weights)} ({target.name}: {gib(target.weight_bytes)}, from {target.weights_from}), "
        f"drafter {gib(ledger.drafter)}",
        f"profiled peak {gib(ledger.peak)} ({ledger.peak_basis})",
        f"KV pool {gib(ledger.pool)} ({ledger.pool_from})",
        f"one sequence of {ledger.max_model_len:,} tokens: {gib(ledger.per_sequence)} ({ledger.kv_per_token:,} B/token "
        f"of attention, {ledger.state_per_sequence:,} B of linear-attention state)",
        *ledger.notes,
    ]


CHECK = service_seam(
    NAME,
    cites=("B-VL-4", "B-VL-5", "B-VL-6", "B-VL-7"),
    summary="vLLM starts: each rank's weights fit its budget, and the KV pool holds one --max-model-len sequence",
    requires=_no_ledger,
    engines=("vllm",),
    figures=_figures,
    codes={
        "weights-exceed-budget": (
            "vLLM's ledger: a rank's weights (and drafter's) exceed `--gpu-memory-utilization` x the card: it will not start"
        ),
        "pool-below-one-sequence": (
            "vLLM's ledger: the KV pool cannot hold one `--max-model-len` sequence: it will not start (docs/ledger.md, \"vLLM\")"
        ),
    },
)


@CHECK.register
def vllm_starts(config: RenderedService) -> None:
    vllm = config.vllm
    assert vllm is not None and config.profile is not None
    ledger = service_vllm_ledger(config)
    target, _ = _checkpoints(config)
    if not ledger.weights_fit:
        raise CHECK.fail(
            config, "weights-exceed-budget",
            cites=("B-VL-7",),
            where=config.where_flag(vllm.use("tensor_parallel_size") or vllm.use("model")),
            observed=(f"will not start: each rank loads {gib(ledger.weights + ledger.drafter)} of weights (drafter "
                      f"included) into a budget of {gib(ledger.budget)} on {ledger.card}"),
            expected=f"weights + drafter <= --gpu-memory-utilization x the card, per rank ({config.profile.path.name})",
            details=_terms(ledger, target),
            fix=("vLLM stops before allocating any KV ('No available memory for the cache blocks', or CUDA out of "
                 "memory while loading): a smaller checkpoint (a lower-bit quantisation), more tensor-parallel ranks, "
                 "or a card that holds it"),
        )
    if ledger.pool < ledger.per_sequence:
        certain = "" if ledger.peak or "pinned" in ledger.peak_basis else \
            " (the pool is an upper bound: no boot of this shape measured the profiled peak)"
        raise CHECK.fail(
            config, "pool-below-one-sequence",
            cites=("B-VL-4", "B-VL-5", "B-VL-6"),
            where=config.where_flag(vllm.use("max_model_len") or vllm.use("kv_cache_memory")),
            observed=(f"will not start: one {ledger.max_model_len:,}-token sequence needs {gib(ledger.per_sequence)} of "
                      f"KV per rank, the pool is {gib(ledger.pool)}{certain}"),
            expected=f"a KV pool of at least one --max-model-len sequence ({ledger.sequences:.2f}x now)",
            details=_terms(ledger, target),
            fix=("vLLM refuses at start ('To serve at least one request with the models's max seq len ..., KV cache is "
                 "needed, which is larger than the available KV cache memory'): lower --max-model-len, use "
                 "--kv-cache-dtype fp8, raise tensor parallelism or free the budget"),
        )
