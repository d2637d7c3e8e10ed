"""What an endpoint promises, derived from what its files make it run (plus fleet.toml's few facts).

The rendered config says the alias, the payload, the slots and per-slot window, the sampler
defaults, the reasoning format, the drafter, the projector and whether metrics are on; fleet.toml
says what files cannot: whether the endpoint is meant to see images, which reasoning field clients
read, which reasoning efforts the template accepts, the window clients are told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fleetgate.engines.llamacpp import context_shape
from fleetgate.fleet import Engine
from fleetgate.render.rendered import RenderedService

__all__ = ["LiveContract", "derive_contract"]


@dataclass(frozen=True)
class LiveContract:
    service: str
    engine: Engine
    alias: str | None
    """The model id /v1/models must list (``--alias``, ``--served-model-name``, or fleet.toml's alias)."""
    model_path: str | None
    """The payload the process must have loaded (``--model``)."""
    n_slots: int | None
    slot_ctx: int | None
    """Tokens one conversation can hold: llama.cpp's per-slot n_ctx, vLLM's max_model_len."""
    context_window: int | None
    """The window clients are told (fleet.toml)."""
    sampler: Mapping[str, float] = field(default_factory=dict)
    """Sampler defaults the command line sets explicitly (temperature, top_k, top_p, min_p)."""
    reasoning_format: str | None = None
    reasoning_field: str | None = None
    reasoning_effort: Mapping[str, int] = field(default_factory=dict)
    speculative: bool | None = None
    """Whether a drafter runs; None when the files cannot say."""
    spec_types: tuple[str, ...] = ()
    mmproj: str | None = None
    vision: bool | None = None
    tools: bool | None = None
    metrics: bool = False
    endpoints: tuple[str, ...] = ()
    api_key_env: str | None = None
    prefix_caching: bool | None = None
    reasoning_budget: int | None = None
    """Tokens of trace the engine allows before it forces the answer (llama.cpp --reasoning-budget; -1
    unlimited); None when the files cannot say."""
    draft_acceptance_min: float | None = None
    ttft_s: float | None = None
    chunk_gap_s: float | None = None
    tokenizer: str | None = None
    """Where the tokenizer the engine must use lives (vLLM: ``--tokenizer``, else the model's directory)."""
    structured_output: bool | None = None
    """Whether ``response_format`` JSON schemas are honoured: declared, else True for the engines known to (llama.cpp
    json_schema -> GBNF, vLLM structured outputs), else None (not judged)."""
    reasoning_replay: str | None = None
    parallel_tool_calls: bool | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    """vLLM's ``--reasoning-parser``: where it runs, vLLM honours a request's ``thinking_token_budget``."""
    """vLLM's ``--tool-call-parser``: the markup of the model's own calls that the engine reads under auto."""

    @property
    def window(self) -> int | None:
        """The window a prompt is measured against: the engine's own, else the one clients are told."""
        return self.slot_ctx if self.slot_ctx is not None else self.context_window


_SAMPLERS = (("temperature", "temp"), ("top_k", "top_k"), ("top_p", "top_p"), ("min_p", "min_p"))


def derive_contract(config: RenderedService) -> LiveContract:
    service = config.service
    declared = service.contract
    base = LiveContract(
        service=service.name,
        engine=service.engine,
        alias=declared.alias,
        model_path=None,
        n_slots=None,
        slot_ctx=None,
        context_window=declared.context_window,
        reasoning_field=declared.reasoning_field if declared.reasoning_field != "none" else None,
        reasoning_effort=dict(declared.reasoning_effort),
        vision=declared.vision,
        tools=declared.tools,
        endpoints=declared.endpoints,
        api_key_env=declared.api_key_env,
        metrics="/metrics" in declared.endpoints,
        draft_acceptance_min=declared.draft_acceptance_min,
        ttft_s=declared.ttft_s,
        chunk_gap_s=declared.chunk_gap_s,
        structured_output=(declared.structured_output if declared.structured_output is not None
                           else True if service.engine in ("llama.cpp", "vllm") else None),
        reasoning_replay=declared.reasoning_replay,
        parallel_tool_calls=declared.parallel_tool_calls,
    )
    llama, vllm = config.llama, config.vllm
    if llama is not None:
        n_ctx_train = config.profile.n_ctx_train if config.profile else None
        shape = context_shape(llama, n_ctx_train)
        sampler: dict[str, float] = {}
        for key, dest in _SAMPLERS:
            value = getattr(llama, dest)
            if value is not None and llama.use(dest) is not None:
                sampler[key] = float(value)
        return replace(
            base,
            alias=declared.alias or llama.alias or llama.model,
            model_path=llama.model,
            n_slots=llama.n_slots,
            slot_ctx=shape.n_ctx_seq if shape else None,
            sampler=sampler,
            reasoning_format=llama.reasoning_format,
            speculative=llama.speculative,
            spec_types=tuple(t for t in llama.spec_types if t != "none"),
            mmproj=llama.mmproj,
            metrics=llama.metrics,
            prefix_caching=True,
            reasoning_budget=llama.reasoning_budget,
        )
    if vllm is not None:
        spec = vllm.speculative_config
        # vLLM's sampler defaults on the command line: --override-generation-config (over the model's own
        # generation_config.json, which is the payload's, not the command line's)
        overrides = vllm.override_generation_config or {}
        vllm_sampler = {key: float(overrides[key]) for key, _ in _SAMPLERS
                        if isinstance(overrides.get(key), int | float) and not isinstance(overrides.get(key), bool)}
        return replace(
            base,
            alias=declared.alias or vllm.served_model_name or vllm.model,
            model_path=vllm.model,
            n_slots=vllm.max_num_seqs,
            slot_ctx=vllm.max_model_len,
            speculative=spec is not None,
            spec_types=(str(spec.get("method", "")),) if spec else (),
            metrics=True,
            prefix_caching=vllm.prefix_caching,
            sampler=vllm_sampler,
            tokenizer=vllm.tokenizer or vllm.model,
            tool_call_parser=(use.value if (use := vllm.use("tool_call_parser")) is not None else None),
            reasoning_parser=(use.value if (use := vllm.use("reasoning_parser")) is not None else None),
        )
    return base
