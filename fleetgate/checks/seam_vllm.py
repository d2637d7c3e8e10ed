"""vLLM memory knobs on this fleet's cards (B.4): fill ceiling, KV_MEM as a literal 0, a measured pool for the shape.

The KV pool is measured per shape (tensor parallelism, max sequences, prefill chunk, fill, KV dtype): a
shape that was never booted has no pool, and the failure names the knob that moved, at its own line.
"""

from __future__ import annotations

import difflib
from typing import Any

from fleetgate.checks import NotApplicable, service_seam
from fleetgate.policies import policy_on
from fleetgate.render.rendered import RenderedService

__all__ = ["pool_differs"]


@service_seam(
    policy_codes={"kv-memory-not-zero": "vllm-kv-cache-memory", "kv-memory-omitted": "vllm-kv-cache-memory"},
    cites=("B-VL-1", "B-VL-2", "B-VL-3", "B-VL-4", "B-VL-5", "INC-30", "INC-31", "INC-32", "INC-42", "INC-78",
              "INC-87"),
    summary="gpu_memory_utilization under the host's ceiling, --kv-cache-memory 0 passed, a measured pool for this shape",
    engines=("vllm",),
    codes={
        "over-ceiling": "`--gpu-memory-utilization` above the host's ceiling",
        "pool-below-max-model-len": "the measured pool cannot hold one max-length request",
        "misspelt-shape-flag": "a shape flag is misspelt, so the knob falls back to vLLM's default",
        "unmeasured-shape": (
            "TP, max sequences, chunk, fill or KV dtype of no measured boot, named at its own line (INC-31, INC-32, INC-87)"
        ),
        "kv-memory-not-zero": "`--kv-cache-memory` given, but not a literal 0 (policy `vllm-kv-cache-memory`)",
        "kv-memory-omitted": "the serve script drops `--kv-cache-memory` (a blank KV_MEM, INC-30; policy `vllm-kv-cache-memory`)",
    },
)
def vllm_memory_knobs(config: RenderedService) -> None:
    vllm = config.vllm
    assert vllm is not None
    ceiling = config.host.vllm_max_gpu_memory_utilization
    if ceiling is not None and vllm.gpu_memory_utilization > ceiling:
        card = config.host.cards[0]
        raise vllm_memory_knobs.fail(
            config, "over-ceiling",
            cites=("B-VL-1", "INC-42", "INC-78"),
            where=config.where_flag(vllm.use("gpu_memory_utilization")),
            observed=(f"--gpu-memory-utilization {vllm.gpu_memory_utilization:g} asks "
                      f"{vllm.gpu_memory_utilization * card.vram_bytes / (1 << 30):.2f} GiB of {card.name}"),
            expected=f"<= {ceiling:g} ({config.fleet.where('hosts', config.service.host, 'vllm_max_gpu_memory_utilization')})",
            fix="the startup check refuses a budget above the free memory at device init, before any weight loads",
        )
    kv_policy = policy_on(config.fleet, "vllm-kv-cache-memory")
    if kv_policy and (vllm.kv_cache_memory is None or vllm.kv_cache_memory.strip() != "0"):
        _kv_memory(config)
    pools: list[dict[str, Any]] = list(config.service.calibration.get("kv_pool", []))
    if not pools:
        if ceiling is None and not kv_policy:
            raise NotApplicable(
                f"{config.name}: nothing of vLLM's memory to judge: declare hosts.{config.service.host}."
                f"vllm_max_gpu_memory_utilization (the fill the cards allow) or services.{config.name}.calibration."
                "kv_pool (the KV pool measured at a boot of this shape)")
        return  # no boot measured: the pool's own branches have nothing to compare
    shape = {key: getattr(vllm, key) for key, _ in SHAPE}
    matching = [p for p in pools if not pool_differs(p, shape)]
    if not matching:
        _unmeasured(config, pools, shape)
    pool = int(matching[0]["tokens"])
    if vllm.max_model_len is not None and pool < vllm.max_model_len:
        raise vllm_memory_knobs.fail(
            config, "pool-below-max-model-len",
            cites=("B-VL-4", "B-VL-5"),
            where=config.where_flag(vllm.use("max_model_len")),
            observed=(f"--max-model-len {vllm.max_model_len} against a measured pool of {pool} tokens "
                      f"({pool / vllm.max_model_len:.2f}x)"),
            expected=f"a pool of at least one full request (>= 1.0x): max-model-len <= {pool}",
            fix="the engine refuses to start when one max-length request cannot fit: cut MAXLEN or free KV",
        )


# The keys a measured boot is matched on: every knob that moves the KV pool (B-VL-3..6, INC-32, INC-87).
SHAPE = (("tensor_parallel_size", "TP"), ("max_num_seqs", "seqs"), ("max_num_batched_tokens", "chunk"),
         ("gpu_memory_utilization", "fill"), ("kv_cache_dtype", "KV"))
DEFAULTS: dict[str, Any] = {"kv_cache_dtype": "auto"}


def pool_differs(pool: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    """The shape's keys whose value is not the measured boot's (a key the boot does not record differs)."""
    out = []
    for key, value in shape.items():
        measured = pool.get(key, DEFAULTS.get(key))
        if isinstance(value, float) and isinstance(measured, (int, float)):
            same = abs(float(measured) - value) < 1e-9
        else:
            same = measured == value
        if not same:
            out.append(key)
    return out


def _describe(pool: dict[str, Any]) -> str:
    return ", ".join(f"{label} {pool.get(key, DEFAULTS.get(key, '?'))}" for key, label in SHAPE)


def _unmeasured(config: RenderedService, pools: list[dict[str, Any]], shape: dict[str, Any]) -> None:
    """No measured boot at this shape: name the knobs that moved from the nearest one, at their own line."""
    vllm = config.vllm
    assert vllm is not None
    nearest = min(pools, key=lambda p: len(pool_differs(p, shape))) if pools else None
    moved = pool_differs(nearest, shape) if nearest is not None else [key for key, _ in SHAPE]
    labels = dict(SHAPE)
    flags = {"tensor_parallel_size": "--tensor-parallel-size", "max_num_seqs": "--max-num-seqs",
             "max_num_batched_tokens": "--max-num-batched-tokens", "gpu_memory_utilization": "--gpu-memory-utilization",
             "kv_cache_dtype": "--kv-cache-dtype"}
    for key in moved:
        if vllm.use(key) is not None:
            continue
        # The knob's flag is not in the argv: a misspelling of it is the cause, not a new shape.
        close = difflib.get_close_matches(flags[key], [p.flag for p in vllm.problems if p.flag.startswith("--")], n=1, cutoff=0.85)
        if close:
            raise vllm_memory_knobs.fail(
                config, "misspelt-shape-flag",
                cites=("B-VL-3", "B-VL-5"), where=str(config.rendered.script),
                observed=(f"{close[0]} is not a flag of this model of vLLM's argv, and {flags[key]} is absent: "
                          f"{labels[key]} falls back to vLLM's default ({shape[key]})"),
                expected=f"{flags[key]} as the measured boot had it ({nearest.get(key) if nearest else '?'})",
                fix=f"spell it {flags[key]}: vLLM stops at argument parsing on an unknown flag",
            )
    observed = ", ".join(f"{flags[key]} {shape[key]}" for key in moved)
    measured = "; ".join(_describe(p) for p in pools) or "none"
    raise vllm_memory_knobs.fail(
        config, "unmeasured-shape",
        cites=("B-VL-3", "B-VL-4", "B-VL-5", "INC-31", "INC-32", "INC-87"),
        where=config.where_flag(vllm.use(moved[0])),
        observed=f"{observed}: no boot measured at this shape ({', '.join(labels[k] for k in moved)} moved)",
        expected=f"a shape whose KV pool was measured (calibration.kv_pool: {measured})",
        fix=("the KV pool moves with tensor parallelism, max sequences, the prefill chunk (non-monotonically), the fill "
             "and the KV dtype: boot the new shape once and record its pool under calibration.kv_pool with all five "
             "keys, or restore the measured shape"),
    )


def _kv_memory(config: RenderedService) -> None:
    """--kv-cache-memory is not a literal 0: blame the file that made it so (B-VL-2, INC-30)."""
    vllm = config.vllm
    assert vllm is not None
    origin = config.variables.get("KV_MEM")
    if vllm.kv_cache_memory is not None:
        raise vllm_memory_knobs.fail(
            config, "kv-memory-not-zero",
            cites=("B-VL-2", "INC-30"),
            where=config.where_flag(vllm.use("kv_cache_memory")),
            observed=f"--kv-cache-memory {vllm.kv_cache_memory!r}",
            expected="--kv-cache-memory 0 (profile this shape), passed literally",
            fix="set KV_MEM=0: a pinned pool from another shape (a TP=2 pin on one card) is invalid here",
        )
    blank = origin is not None and not origin.value.strip()
    details = [f"KV_MEM is {'blank' if blank else repr(origin.value)} at {origin.where}" if origin else "KV_MEM is not set"]
    raise vllm_memory_knobs.fail(
        config, "kv-memory-omitted",
        cites=("B-VL-2", "B-SH-2", "INC-30"),
        where=str(config.rendered.script),
        observed="no --kv-cache-memory in the rendered argv: the serve script drops the flag, and the KV cache is "
                 "sized from gpu_memory_utilization alone",
        details=details,
        expected="--kv-cache-memory 0 (profile this shape), always passed",
        fix="pass --kv-cache-memory \"$KV_MEM\" unconditionally (a blank value then stops vLLM at argument parsing "
            "instead of an OutOfMemoryError at KV allocation) and set KV_MEM=0; never blank it",
    )
