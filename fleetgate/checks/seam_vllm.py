"""vLLM memory knobs on this fleet's cards (B.4): fill ceiling, KV_MEM as a literal 0, CHUNK coupled to MAXLEN."""

from __future__ import annotations

from typing import Any

from fleetgate.checks import check
from fleetgate.config import ServiceConfig
from fleetgate.failure import Failure

NAME = "vllm-memory-knobs"


def _is_vllm(config: ServiceConfig) -> str | None:
    return None if config.vllm is not None else f"{config.name} renders no vLLM command line"


@check(NAME, kind="seam", subject="service", requires=_is_vllm, engines=("vllm",),
       cites=("B-VL-1", "B-VL-2", "B-VL-3", "B-VL-4", "B-VL-5", "INC-30", "INC-31", "INC-42"),
       summary="gpu_memory_utilization under the host's ceiling, --kv-cache-memory 0 passed, a measured pool for this CHUNK")
def vllm_memory_knobs(config: ServiceConfig) -> None:
    vllm = config.vllm
    assert vllm is not None
    ceiling = config.host.vllm_max_gpu_memory_utilization
    if ceiling is not None and vllm.gpu_memory_utilization > ceiling:
        card = config.host.cards[0]
        raise Failure(
            code=f"{NAME}/over-ceiling",
            service=config.name, check=NAME, cites=("B-VL-1", "INC-42"),
            where=config.where_flag(vllm.use("gpu_memory_utilization")),
            observed=(f"--gpu-memory-utilization {vllm.gpu_memory_utilization:g} asks "
                      f"{vllm.gpu_memory_utilization * card.vram_bytes / (1 << 30):.2f} GiB of {card.name}"),
            expected=f"<= {ceiling:g} ({config.fleet.where('hosts', config.service.host, 'vllm_max_gpu_memory_utilization')})",
            fix="the startup check refuses a budget above the free memory at device init, before any weight loads",
        )
    if vllm.kv_cache_memory is None or vllm.kv_cache_memory.strip() != "0":
        observed = ("no --kv-cache-memory: the KV cache is sized from gpu_memory_utilization alone"
                    if vllm.kv_cache_memory is None else f"--kv-cache-memory {vllm.kv_cache_memory!r}")
        raise Failure(
            code=f"{NAME}/kv-memory-not-zero",
            service=config.name, check=NAME, cites=("B-VL-2", "INC-30"),
            where=config.where_variable("KV_MEM") if "KV_MEM" in config.variables else str(config.rendered.script),
            observed=observed,
            expected="--kv-cache-memory 0 (profile this shape), passed literally",
            fix="set KV_MEM=0; never blank it -- with the flag omitted the KV allocation dies with torch.OutOfMemoryError",
        )
    pools: list[dict[str, Any]] = list(config.service.calibration.get("kv_pool", []))
    chunk = vllm.max_num_batched_tokens
    matching = [p for p in pools
                if p.get("max_num_batched_tokens") == chunk
                and abs(float(p.get("gpu_memory_utilization", -1)) - vllm.gpu_memory_utilization) < 1e-9
                and p.get("kv_cache_dtype", "auto") == vllm.kv_cache_dtype]
    where_chunk = config.where_flag(vllm.use("max_num_batched_tokens"))
    if not matching:
        measured = ", ".join(f"{p.get('max_num_batched_tokens')} @ {p.get('gpu_memory_utilization')} "
                             f"({p.get('kv_cache_dtype', 'auto')})" for p in pools) or "none"
        raise Failure(
            code=f"{NAME}/unmeasured-chunk",
            service=config.name, check=NAME, cites=("B-VL-3", "INC-31"), where=where_chunk,
            observed=(f"--max-num-batched-tokens {chunk} at fill {vllm.gpu_memory_utilization:g}, "
                      f"KV {vllm.kv_cache_dtype}: no measured boot"),
            expected=f"a shape whose KV pool was measured (calibrated: {measured})",
            fix=("the prefill arena grows with CHUNK and shares the card with the KV, non-monotonically: boot the new "
                 "shape once, record its pool under calibration.kv_pool, or keep the measured CHUNK"),
        )
    pool = int(matching[0]["tokens"])
    if vllm.max_model_len is not None and pool < vllm.max_model_len:
        raise Failure(
            code=f"{NAME}/pool-below-max-model-len",
            service=config.name, check=NAME, cites=("B-VL-4", "B-VL-5"),
            where=config.where_flag(vllm.use("max_model_len")),
            observed=(f"--max-model-len {vllm.max_model_len} against a measured pool of {pool} tokens "
                      f"({pool / vllm.max_model_len:.2f}x)"),
            expected=f"a pool of at least one full request (>= 1.0x): max-model-len <= {pool}",
            fix="the engine refuses to start when one max-length request cannot fit: cut MAXLEN or free KV",
        )
