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
from fleetgate.checks.seam_vllm import pool_differs
from fleetgate.errors import InputError
from fleetgate.failure import Deferred
from fleetgate.ledger.vllm import Checkpoint, VllmLedger, checkpoint_of, vllm_ledger
from fleetgate.render.rendered import RenderedService

__all__ = ["no_vllm_ledger", "service_vllm_ledger"]


def no_vllm_ledger(config: RenderedService) -> str | None:
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


def _allow_long(config: RenderedService) -> bool:
    """vllm/envs.py: ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is true for "1" or "true" (any case)."""
    return config.rendered.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


def _checkpoints(config: RenderedService) -> tuple[Checkpoint, Checkpoint | None]:
    assert config.profile is not None
    drafter = checkpoint_of(config.draft_profile) if config.draft_profile is not None else None
    return checkpoint_of(config.profile), drafter


def service_vllm_ledger(config: RenderedService) -> VllmLedger:
    """The ledger of a rendered vLLM service on its host's first serving card (every rank has one such card)."""
    vllm = config.vllm
    assert vllm is not None
    target, drafter = _checkpoints(config)
    space = _cpu_space(config) if not config.host.cards else None
    if space is not None:
        # vLLM's CPU build: the pool is VLLM_CPU_KVCACHE_SPACE, the weights sit in host RAM
        try:
            return vllm_ledger(vllm, target, card="host RAM (vLLM CPU build)", card_bytes=config.host.ram_bytes,
                               drafter=drafter,
                               cpu_kvcache_space=space, allow_long=_allow_long(config))
        except ValueError as exc:
            raise InputError(Path(config.where_variable("VLLM_CPU_KVCACHE_SPACE").rsplit(":", 1)[0]), None,
                             str(exc)) from None
    card = config.host.cards[0]
    shape = {key: getattr(vllm, key) for key in ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens",
                                                 "gpu_memory_utilization", "kv_cache_dtype")}
    pools = list(config.service.calibration.get("kv_pool", []))
    try:
        return vllm_ledger(vllm, target, card=card.name, card_bytes=card.vram_bytes, drafter=drafter, pools=pools,
                           shape_matches=lambda p: not pool_differs(p, shape), allow_long=_allow_long(config))
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


@service_seam(
    cites=("B-VL-4", "B-VL-5", "B-VL-6", "B-VL-7"),
    summary="vLLM starts: each rank's weights fit its budget, and the KV pool holds one --max-model-len sequence",
    requires=no_vllm_ledger,
    engines=("vllm",),
    figures=_figures,
    codes={
        "weights-exceed-budget": (
            "vLLM's ledger: a rank's weights (and drafter's) exceed `--gpu-memory-utilization` x the card: it will not start"
        ),
        "pool-below-one-sequence": (
            "vLLM's ledger: the KV pool, less the block vLLM holds back, cannot hold one `--max-model-len` sequence "
            "(or nothing is left at all): it will not start (docs/ledger.md, \"vLLM\")"
        ),
        "max-model-len-over-model": (
            "`--max-model-len` above the model's own limit (max_position_embeddings and RoPE scaling): vLLM refuses "
            "it at config, before loading anything"
        ),
    },
)
def vllm_starts(config: RenderedService) -> None:
    vllm = config.vllm
    assert vllm is not None and config.profile is not None
    ledger = service_vllm_ledger(config)
    target, _ = _checkpoints(config)
    if ledger.config_refusal is not None:
        raise vllm_starts.fail(
            config, "max-model-len-over-model",
            where=config.where_flag(vllm.use("max_model_len")),
            observed=f"will not start: vLLM refuses at config: {ledger.config_refusal}",
            expected=(f"--max-model-len <= {ledger.model_limit:g} ({ledger.model_limit_key} of {target.name}, "
                      f"{config.profile.path.name})"),
            details=_terms(ledger, target),
            fix=("lower --max-model-len to the model's limit, or (only for a model that really holds longer contexts, "
                 "e.g. with RoPE scaling declared in its config.json) set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
        )
    if not ledger.weights_fit:
        raise vllm_starts.fail(
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
    refusal = ledger.pool_refusal
    if refusal is not None:
        certain = "" if ledger.peak or "pinned" in ledger.peak_basis else \
            " (the pool is an upper bound: no boot of this shape measured the profiled peak)"
        # nothing left for blocks is the pool's setting; a pool too small for one sequence is the length's
        empty = ledger.usable <= 0
        where = (config.where_flag(vllm.use(ledger.pool_dest)) if ledger.pool_dest != "VLLM_CPU_KVCACHE_SPACE"
                 else Deferred(lambda: f"{config.where_variable('VLLM_CPU_KVCACHE_SPACE')} (VLLM_CPU_KVCACHE_SPACE)")) \
            if empty \
            else config.where_flag(vllm.use("max_model_len") or vllm.use("kv_cache_memory"))
        held = f" less the {ledger.null_block:,} B block vLLM holds back" if ledger.null_block else ""
        raise vllm_starts.fail(
            config, "pool-below-one-sequence",
            cites=("B-VL-4", "B-VL-5", "B-VL-6"),
            where=where,
            observed=(f"will not start: vLLM refuses: {refusal} (the pool is {gib(ledger.pool)}{held}; one "
                      f"{ledger.max_model_len:,}-token sequence needs {gib(ledger.needed)} of KV per rank){certain}"),
            expected=(f"a KV pool that holds the block vLLM keeps back and one --max-model-len sequence "
                      f"({ledger.sequences:.2f}x now)"),
            details=_terms(ledger, target),
            fix=(f"give the pool memory ({ledger.pool_from.split(' (')[0]} sets it to {gib(ledger.pool)})" if empty else
                 f"lower --max-model-len to at most {ledger.estimated_max_model_len} (what the pool holds, in whole "
                 "blocks, after the block vLLM keeps back), use --kv-cache-dtype fp8, raise tensor parallelism or "
                 "free the budget"),
        )
