"""vLLM's ``vllm serve`` command line, as a typed config (the flags this fleet's engines use).

vLLM reads ``--flag value`` and ``--flag=value``, treats ``--flag_name`` as ``--flag-name``, and
takes JSON for dict-valued options. The radiance fork adds its own flags
(``--override-sampling-effects``, ``--kv-cache-memory``, ``--expert-precise-memory``); flags outside
this table are kept and reported as not modelled, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.engines.argv import ArgvProblem, FlagUse, Option, OptionTable, ParsedArgv

__all__ = ["OPTIONS", "VllmConfig", "parse_vllm"]


def _o(dest: str, *names: str, value: bool = True) -> Option:
    return Option(dest=dest, names=names, takes_value=value)


OPTIONS: tuple[Option, ...] = (
    _o("model", "--model"),
    _o("served_model_name", "--served-model-name"),
    _o("host", "--host"),
    _o("port", "--port"),
    _o("api_key", "--api-key"),
    _o("tensor_parallel_size", "--tensor-parallel-size", "-tp"),
    _o("pipeline_parallel_size", "--pipeline-parallel-size", "-pp"),
    _o("max_model_len", "--max-model-len"),
    _o("max_num_seqs", "--max-num-seqs"),
    _o("max_num_batched_tokens", "--max-num-batched-tokens"),
    _o("gpu_memory_utilization", "--gpu-memory-utilization"),
    _o("kv_cache_memory", "--kv-cache-memory", "--kv-cache-memory-bytes"),
    _o("kv_cache_dtype", "--kv-cache-dtype"),
    _o("enable_prefix_caching", "--enable-prefix-caching", value=False),
    _o("no_enable_prefix_caching", "--no-enable-prefix-caching", value=False),
    _o("enable_chunked_prefill", "--enable-chunked-prefill", value=False),
    _o("enable_auto_tool_choice", "--enable-auto-tool-choice", value=False),
    _o("tool_call_parser", "--tool-call-parser"),
    _o("reasoning_parser", "--reasoning-parser"),
    _o("chat_template", "--chat-template"),
    _o("speculative_config", "--speculative-config"),
    _o("limit_mm_per_prompt", "--limit-mm-per-prompt"),
    _o("enforce_eager", "--enforce-eager", value=False),
    _o("trust_remote_code", "--trust-remote-code", value=False),
    _o("override_sampling_effects", "--override-sampling-effects", value=False),
    _o("expert_precise_memory", "--expert-precise-memory", value=False),
    _o("generation_config", "--generation-config"),
    _o("override_generation_config", "--override-generation-config"),
    _o("language_model_only", "--language-model-only", value=False),
)
_TABLE = OptionTable(OPTIONS)


@dataclass(frozen=True)
class VllmConfig:
    argv: tuple[str, ...]
    parsed: ParsedArgv = field(repr=False)
    model: str | None
    served_model_name: str | None
    port: int
    tensor_parallel_size: int
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    gpu_memory_utilization: float
    kv_cache_memory: str | None
    kv_cache_dtype: str
    prefix_caching: bool
    speculative_config: Mapping[str, Any] | None
    limit_mm_per_prompt: Mapping[str, Any] | None
    problems: tuple[ArgvProblem, ...]

    def use(self, dest: str) -> FlagUse | None:
        return self.parsed.last(dest)

    @property
    def not_modelled(self) -> tuple[ArgvProblem, ...]:
        return tuple(p for p in self.problems if p.message == "not modelled")

    @property
    def alias(self) -> str | None:
        return self.served_model_name or self.model


def parse_vllm(argv: Sequence[str]) -> VllmConfig:
    """Read ``vllm serve MODEL [flags]`` (``argv[0]`` is the binary)."""
    args = list(argv[1:])
    offset = 1
    model: str | None = None
    if args and args[0] == "serve":
        args, offset = args[1:], offset + 1
        if args and not args[0].startswith("-"):
            model = args[0]
            args, offset = args[1:], offset + 1
    parsed = _TABLE.parse(args, allow_equals=True, unknown="keep", offset=offset)
    problems = list(parsed.problems)

    def text(dest: str) -> str | None:
        use = parsed.last(dest)
        return use.value if use else None

    def number(dest: str) -> int | None:
        use = parsed.last(dest)
        if use is None or use.value is None:
            return None
        try:
            return int(use.value)
        except ValueError:
            problems.append(ArgvProblem(use.flag, use.index, f"expected an integer, got {use.value!r}"))
            return None

    def mapping(dest: str) -> Mapping[str, Any] | None:
        use = parsed.last(dest)
        if use is None or use.value is None:
            return None
        try:
            value = json.loads(use.value)
        except json.JSONDecodeError as exc:
            problems.append(ArgvProblem(use.flag, use.index, f"expected JSON, got {use.value!r} ({exc.msg})"))
            return None
        if not isinstance(value, dict):
            problems.append(ArgvProblem(use.flag, use.index, f"expected a JSON object, got {use.value!r}"))
            return None
        return value

    utilization = 0.9
    util_use = parsed.last("gpu_memory_utilization")
    if util_use is not None and util_use.value is not None:
        try:
            utilization = float(util_use.value)
        except ValueError:
            problems.append(ArgvProblem(util_use.flag, util_use.index, f"expected a fraction, got {util_use.value!r}"))
    return VllmConfig(
        argv=tuple(argv),
        parsed=parsed,
        model=text("model") or model,
        served_model_name=text("served_model_name"),
        port=number("port") or 8000,
        tensor_parallel_size=number("tensor_parallel_size") or 1,
        max_model_len=number("max_model_len"),
        max_num_seqs=number("max_num_seqs"),
        max_num_batched_tokens=number("max_num_batched_tokens"),
        gpu_memory_utilization=utilization,
        kv_cache_memory=text("kv_cache_memory"),
        kv_cache_dtype=text("kv_cache_dtype") or "auto",
        prefix_caching=parsed.last("no_enable_prefix_caching") is None,
        speculative_config=mapping("speculative_config"),
        limit_mm_per_prompt=mapping("limit_mm_per_prompt"),
        problems=tuple(problems),
    )
