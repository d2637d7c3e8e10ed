"""What clients are promised, pinned in the rendered argv: sampler defaults, reasoning, KV precision (B-UN-8/9/10).

The contract (fleet.toml) says what the endpoint serves clients; the rendered llama-server command line
is what it will do. A live check (live-sampler-defaults) reads the same values back from /props.
"""

from __future__ import annotations

from fleetgate.checks import service_seam
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []

# llama-server build 11434's defaults (common/common.h, common_params_sampling), for flags not passed.
_DEFAULTS = {"temperature": 0.8, "top_p": 0.95, "top_k": 40}
_FLAGS = {"temperature": ("temp", "--temp"), "top_p": ("top_p", "--top-p"), "top_k": ("top_k", "--top-k")}


def _no_pins(config: RenderedService) -> str | None:
    c = config.service.contract
    if not c.sampler and c.reasoning_budget is None and c.kv_cache_type is None:
        return (f"{config.name}'s contract pins nothing: declare sampler, reasoning_budget or kv_cache_type under "
                f"services.{config.name}.contract")
    return None


@service_seam(
    cites=("B-UN-8", "B-UN-9", "B-UN-10"),
    summary="the sampler defaults, reasoning and KV precision the contract promises are what the argv passes",
    requires=_no_pins,
    engines=("llama.cpp",),
    codes={
        "sampler-differs": "a sampler default the argv serves is not the contract's (B-UN-8)",
        "reasoning-budget": "`--reasoning-budget` is not the contract's (B-UN-9)",
        "reasoning-in-content": "`--reasoning-format none` where the contract promises `reasoning_content` (B-UN-9)",
        "kv-precision": "a KV cache type other than the contract's `kv_cache_type` (B-UN-10)",
    },
)
def contract_pins(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    contract = config.service.contract
    where_contract = config.fleet.where("services", config.name, "contract")
    for key, wanted in contract.sampler.items():
        dest, flag = _FLAGS[key]
        value = getattr(llama, dest)
        got = _DEFAULTS[key] if value is None else value
        if abs(float(got) - float(wanted)) > 1e-9:
            raise contract_pins.fail(
                config, "sampler-differs",
                cites=("B-UN-8",),
                where=config.where_flag(llama.use(dest)),
                observed=f"{flag} {got:g}" + (" (not passed: the build's default)" if value is None else ""),
                expected=f"{key} = {wanted:g}, the sampler default clients are promised ({where_contract})",
                fix=f"pass {flag} {wanted:g}: a request that sets no sampler gets the server's default",
            )
    if contract.reasoning_budget is not None:
        got_budget = -1 if llama.reasoning_budget is None else llama.reasoning_budget
        if got_budget != contract.reasoning_budget:
            raise contract_pins.fail(
                config, "reasoning-budget",
                cites=("B-UN-9",),
                where=config.where_flag(llama.use("reasoning_budget")),
                observed=f"--reasoning-budget {got_budget}",
                expected=f"{contract.reasoning_budget} ({where_contract})",
                fix="pass the promised budget: 0 turns thinking off, -1 leaves it unlimited",
            )
    if contract.reasoning_field == "reasoning_content" and (llama.reasoning_format or "auto") == "none":
        raise contract_pins.fail(
            config, "reasoning-in-content",
            cites=("B-UN-9",),
            where=config.where_flag(llama.use("reasoning_format")),
            observed="--reasoning-format none: the trace stays inside content",
            expected=f"the trace in reasoning_content, as the contract says ({where_contract}): --reasoning-format deepseek",
            fix="pass --reasoning-format deepseek (or auto)",
        )
    if contract.kv_cache_type is not None:
        kv = {"K": (llama.cache_type_k, "cache_type_k"), "V": (llama.cache_type_v, "cache_type_v")}
        for which, (value, dest) in kv.items():
            if value != contract.kv_cache_type:
                raise contract_pins.fail(
                    config, "kv-precision",
                    cites=("B-UN-10",),
                    where=config.where_flag(llama.use(dest)),
                    observed=f"the {which} cache is {value}",
                    expected=f"{contract.kv_cache_type} for K and V ({where_contract})",
                    fix="an agentic endpoint keeps its KV precision: quantise elsewhere, or change the contract knowingly",
                )
