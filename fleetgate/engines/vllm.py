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

__all__ = [
    "DEFAULT_RELEASE",
    "OPTIONS",
    "RADIANCE",
    "ArgvFinding",
    "Fork",
    "Release",
    "ReleaseOption",
    "VllmConfig",
    "load_release",
    "parse_value",
    "parse_vllm",
    "read_as_vllm",
    "releases",
]


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
    _o("dtype", "--dtype"),
    _o("block_size", "--block-size"),
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


# -- the pinned release's own argument definitions (vllm_release.json, read from its wheel) ---------------------


@dataclass(frozen=True)
class ReleaseOption:
    names: tuple[str, ...]
    kind: str
    """bool (--x/--no-x), flag, int, float, str, json, choice, list."""
    choices: tuple[str, ...] = ()
    human_readable: bool = False
    optional: bool = False


@dataclass(frozen=True)
class Fork:
    """A vLLM fork's additions to the release it is built on (flags and speculative methods)."""

    name: str
    options: tuple[ReleaseOption, ...]
    speculative_methods: tuple[str, ...]
    source: str


# The radiance fork (Image=localhost/radiance-vllm:0.13.0-e060895) adds these to 0.13.0; the seeds name them
# (S002 deployed flags, S003's --expert-precise-memory incident, the dflash drafter).
RADIANCE = Fork(
    name="radiance",
    options=(
        ReleaseOption(("--override-sampling-effects",), "flag"),
        ReleaseOption(("--kv-cache-memory",), "int", human_readable=True),
        ReleaseOption(("--expert-precise-memory",), "flag"),
    ),
    speculative_methods=("dflash",),
    source="seed-extract A (S002 deployed flags), INC-88/B-VL-8 (S003)",
)


@dataclass(frozen=True)
class Release:
    version: str
    options: tuple[ReleaseOption, ...]
    speculative_fields: Mapping[str, ReleaseOption]
    speculative_methods: tuple[str, ...]
    metrics: Mapping[str, str]
    """metric name -> counter / gauge / histogram."""
    generated_from: str

    def with_fork(self, fork: Fork | None) -> Release:
        if fork is None:
            return self
        return Release(self.version, (*self.options, *fork.options), self.speculative_fields,
                       (*self.speculative_methods, *fork.speculative_methods), self.metrics,
                       f"{self.generated_from} + the {fork.name} fork ({fork.source})")

    def exported_series(self) -> frozenset[str]:
        """The series names Prometheus scrapes: counters end in _total, histograms add _bucket/_sum/_count."""
        found: set[str] = set()
        for name, kind in self.metrics.items():
            if kind == "counter":
                found.add(name if name.endswith("_total") else f"{name}_total")
            elif kind == "histogram":
                found.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            else:
                found.add(name)
        return frozenset(found)


def _option(data: Mapping[str, Any]) -> ReleaseOption:
    return ReleaseOption(tuple(data.get("names", ())), data["kind"], tuple(data.get("choices", ())),
                         bool(data.get("human_readable")), bool(data.get("optional")))


DEFAULT_RELEASE = "0.13.0"


def releases() -> tuple[str, ...]:
    """The vLLM releases fleetgate holds option tables for: vllm_release.json (0.13.0) and vllm_release_X.json."""
    from importlib import resources

    found = [DEFAULT_RELEASE]
    for entry in resources.files("fleetgate.engines").iterdir():
        name = entry.name
        if name.startswith("vllm_release_") and name.endswith(".json"):
            found.append(name.removeprefix("vllm_release_").removesuffix(".json"))
    return tuple(sorted(found, key=lambda v: tuple(int(p) for p in v.split("."))))


def load_release(version: str = DEFAULT_RELEASE) -> Release:
    """One vLLM release's options, speculative-config schema and metrics (vllm_release.json is 0.13.0, the
    default; vllm_release_VERSION.json another), read from its wheel by fleetgate.engines.vllm_wheel."""
    from importlib import resources

    name = "vllm_release.json" if version == DEFAULT_RELEASE else f"vllm_release_{version}.json"
    if version not in releases():
        raise ValueError(f"no option table for vLLM {version}: fleetgate holds {', '.join(releases())}")
    data = json.loads(resources.files("fleetgate.engines").joinpath(name).read_text(encoding="utf-8"))
    spec = data["speculative_config"]
    return Release(
        version=data["release"],
        options=tuple(_option(o) for o in data["options"]),
        speculative_fields={name: _option({"names": (), **kind}) for name, kind in spec["fields"].items()},
        speculative_methods=tuple(spec["methods"]),
        metrics={m["name"]: m["type"] for m in data["metrics"]},
        generated_from=data["generated_from"],
    )


_HUMAN = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_value(option: ReleaseOption, value: str) -> str | None:
    """None when vLLM's argparse accepts ``value`` for ``option``, else what it expected."""
    if option.optional and value == "None":
        return None
    if option.kind == "int":
        try:
            int(value)
            return None
        except ValueError:
            if option.human_readable and value[-1:] in _HUMAN:
                try:
                    float(value[:-1])
                    return None
                except ValueError:
                    pass
            return "an integer" + (" (or 25.6k, 1M, 2Gi-style)" if option.human_readable else "")
    if option.kind == "float":
        try:
            float(value)
            return None
        except ValueError:
            return "a number"
    if option.kind == "choice":
        return None if value in option.choices else f"one of {', '.join(option.choices)}"
    if option.kind == "json":
        try:
            json.loads(value)
            return None
        except json.JSONDecodeError as exc:
            return f"JSON ({exc.msg} at column {exc.colno})"
    return None


@dataclass(frozen=True)
class ArgvFinding:
    index: int
    flag: str
    kind: str
    """unknown-flag, ambiguous-flag, missing-value, bad-value, speculative-config."""
    message: str


def read_as_vllm(argv: Sequence[str], release: Release) -> tuple[dict[str, tuple[int, str | None]], list[ArgvFinding]]:
    """Read ``vllm serve [MODEL] ...`` the way the release's argparse reads it (FlexibleArgumentParser:
    ``_`` in names is ``-``; ``--flag=value``; a unique prefix of a long option is that option).

    Returns canonical option name -> (argv index, value) and what argparse would refuse."""
    table = {name: option for option in release.options for name in option.names}
    long_names = sorted(n for n in table if n.startswith("--"))
    found: dict[str, tuple[int, str | None]] = {}
    problems: list[ArgvFinding] = []
    args = list(argv)
    i = 1
    if i < len(args) and args[i] == "serve":
        i += 1
        if i < len(args) and not args[i].startswith("-"):
            i += 1
    while i < len(args):
        word, start = args[i], i
        if not word.startswith("-"):
            problems.append(ArgvFinding(i, word, "unknown-flag", f"unexpected argument {word!r}"))
            i += 1
            continue
        name, eq, inline = word.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        option = table.get(name)
        if option is None and name.startswith("--"):
            matches = [n for n in long_names if n.startswith(name)]
            if len({id(table[n]) for n in matches}) == 1:
                option, name = table[matches[0]], matches[0]
            elif matches:
                problems.append(ArgvFinding(i, word, "ambiguous-flag", f"{name} could be {', '.join(matches[:4])}"))
                i = _past_values(args, i)
                continue
        if option is None:
            problems.append(ArgvFinding(i, word, "unknown-flag", f"{name} is not an option of vLLM {release.version}"))
            i = _past_values(args, i)
            continue
        canonical = option.names[0]
        if option.kind in ("bool", "flag"):
            found[canonical] = (start, None if not name.startswith("--no-") else "false")
            i += 1
            continue
        if option.kind == "list":
            j = i + 1
            while j < len(args) and not args[j].startswith("-"):
                j += 1
            found[canonical] = (start, " ".join(args[i + 1:j]) if not eq else inline)
            i = j if not eq else i + 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            problems.append(ArgvFinding(i, word, "missing-value", f"{name} expects a value"))
            i += 1
            continue
        expected = parse_value(option, value)
        if expected is not None:
            problems.append(ArgvFinding(start, name, "bad-value", f"{name} {value!r}: vLLM expects {expected}"))
        found[canonical] = (start, value)
    spec = found.get("--speculative-config")
    if spec is not None and spec[1] is not None:
        problems += _speculative(spec[0], spec[1], release)
    return found, problems


def _past_values(args: list[str], i: int) -> int:
    """Past a flag argparse does not know and the words after it (argparse reports them together)."""
    i += 1
    while i < len(args) and not args[i].startswith("-"):
        i += 1
    return i


def _speculative(index: int, text: str, release: Release) -> list[ArgvFinding]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return []  # already a bad-value finding
    if not isinstance(value, dict):
        return [ArgvFinding(index, "--speculative-config", "speculative-config", f"expected a JSON object, got {text!r}")]
    problems = []
    for key, item in value.items():
        field = release.speculative_fields.get(key)
        if field is None:
            problems.append(ArgvFinding(index, "--speculative-config", "speculative-config",
                                        f"{key!r} is not a field of SpeculativeConfig in vLLM {release.version}"))
            continue
        if key == "method":
            if item not in release.speculative_methods:
                problems.append(ArgvFinding(index, "--speculative-config", "speculative-config",
                                            f"method {item!r} is not one of {', '.join(release.speculative_methods)}"))
            continue
        if field.kind == "int" and not (isinstance(item, int) and not isinstance(item, bool)):
            problems.append(ArgvFinding(index, "--speculative-config", "speculative-config",
                                        f"{key} {item!r}: expected an integer"))
        elif field.kind == "float" and not isinstance(item, (int, float)):
            problems.append(ArgvFinding(index, "--speculative-config", "speculative-config",
                                        f"{key} {item!r}: expected a number"))
        elif field.kind == "bool" and not isinstance(item, bool):
            problems.append(ArgvFinding(index, "--speculative-config", "speculative-config",
                                        f"{key} {item!r}: expected true or false"))
    return problems
