"""llama-server's command line (common/arg.cpp of the build the service runs; 11434 unless told), as a typed config.
One module for one reading of one engine file: the option table, the value rules the engine applies at startup, the
typed config and its slot arithmetic all mirror common/arg.cpp together, and a build's change lands in one place.

The engine applies ``LLAMA_ARG_*`` environment variables first and the command line after them; a
``--long_name`` is read as ``--long-name``; a repeated flag keeps its last value except ``--spec-type`` and
the tensor overrides (``-ot``, ``-otd``), whose values accumulate; an unknown flag stops the server at startup ("error: invalid argument").
``accepted_flags(build)`` is the complete list of a build's flags, from llama_server_builds.json (build
11434's is checked against the real binary's ``--help`` by the suite's tests); ``OPTIONS`` are the ones
fleetgate interprets, under their 11434 names (a build that lacks a name does not accept it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING

from fleetgate.engines.argv import ArgvProblem, FlagUse, Option, OptionTable, ParsedArgv
from fleetgate.engines.llama_builds import load_builds
from fleetgate.engines.llama_values import INT_MAX, INT_MIN, refusal, server_rule, stof, stoi

if TYPE_CHECKING:
    from fleetgate.fleet import Service

__all__ = [
    "BUILD",
    "INT_MAX",
    "INT_MIN",
    "OPTIONS",
    "TRUTHY",
    "ContextShape",
    "LlamaServerConfig",
    "accepted_flags",
    "context_shape",
    "engine_variables",
    "llama_table_build",
    "pad",
    "parse_llama_server",
    "stof",
    "stoi",
    "value_problems",
]

BUILD = 11434


def _o(dest: str, *names: str, env: str | None = None, value: bool = True, neg: tuple[str, ...] = (),
       repeat: str = "last") -> Option:
    return Option(dest=dest, names=names, neg_names=neg, takes_value=value, env=env,
                  repeat="append" if repeat == "append" else "last")


OPTIONS: tuple[Option, ...] = (
    _o("model", "-m", "--model", env="LLAMA_ARG_MODEL"),
    _o("alias", "-a", "--alias", env="LLAMA_ARG_ALIAS"),
    _o("host", "--host", env="LLAMA_ARG_HOST"),
    _o("port", "--port", env="LLAMA_ARG_PORT"),
    _o("api_key", "--api-key", env="LLAMA_API_KEY"),
    _o("api_key_file", "--api-key-file", env="LLAMA_ARG_API_KEY_FILE"),
    _o("ctx_size", "-c", "--ctx-size", env="LLAMA_ARG_CTX_SIZE"),
    _o("parallel", "-np", "--parallel", env="LLAMA_ARG_N_PARALLEL"),
    _o("kv_unified", "-kvu", "--kv-unified", value=False, neg=("-no-kvu", "--no-kv-unified"), env="LLAMA_ARG_KV_UNIFIED"),
    _o("batch_size", "-b", "--batch-size", env="LLAMA_ARG_BATCH"),
    _o("ubatch_size", "-ub", "--ubatch-size", env="LLAMA_ARG_UBATCH"),
    _o("swa_full", "--swa-full", value=False, env="LLAMA_ARG_SWA_FULL"),
    _o("cache_reuse", "--cache-reuse", env="LLAMA_ARG_CACHE_REUSE"),
    _o("embeddings", "--embedding", "--embeddings", value=False, env="LLAMA_ARG_EMBEDDINGS"),
    _o("pooling", "--pooling", env="LLAMA_ARG_POOLING"),
    _o("reranking", "--rerank", "--reranking", value=False, env="LLAMA_ARG_RERANKING"),
    _o("rope_scaling", "--rope-scaling", env="LLAMA_ARG_ROPE_SCALING_TYPE"),
    _o("rope_scale", "--rope-scale", env="LLAMA_ARG_ROPE_SCALE"),
    _o("rope_freq_scale", "--rope-freq-scale", env="LLAMA_ARG_ROPE_FREQ_SCALE"),
    _o("yarn_orig_ctx", "--yarn-orig-ctx", env="LLAMA_ARG_YARN_ORIG_CTX"),
    _o("models_preset", "--models-preset", env="LLAMA_ARG_MODELS_PRESET"),
    _o("models_max", "--models-max", env="LLAMA_ARG_MODELS_MAX"),
    _o("ctx_checkpoints", "-ctxcp", "--ctx-checkpoints", "--swa-checkpoints", env="LLAMA_ARG_CTX_CHECKPOINTS"),
    _o("cache_ram", "-cram", "--cache-ram", env="LLAMA_ARG_CACHE_RAM"),
    _o("flash_attn", "-fa", "--flash-attn", env="LLAMA_ARG_FLASH_ATTN"),
    _o("cache_type_k", "-ctk", "--cache-type-k", env="LLAMA_ARG_CACHE_TYPE_K"),
    _o("cache_type_v", "-ctv", "--cache-type-v", env="LLAMA_ARG_CACHE_TYPE_V"),
    _o("n_gpu_layers", "-ngl", "--gpu-layers", "--n-gpu-layers", env="LLAMA_ARG_N_GPU_LAYERS"),
    _o("split_mode", "-sm", "--split-mode", env="LLAMA_ARG_SPLIT_MODE"),
    _o("tensor_split", "-ts", "--tensor-split", env="LLAMA_ARG_TENSOR_SPLIT"),
    _o("main_gpu", "-mg", "--main-gpu", env="LLAMA_ARG_MAIN_GPU"),
    _o("device", "-dev", "--device", env="LLAMA_ARG_DEVICE"),
    _o("rpc", "--rpc", env="LLAMA_ARG_RPC"),
    _o("fit", "-fit", "--fit", env="LLAMA_ARG_FIT"),
    _o("spec_type", "--spec-type", env="LLAMA_ARG_SPEC_TYPE", repeat="append"),
    _o("spec_draft_model", "--spec-draft-model", "-md", "--model-draft", env="LLAMA_ARG_SPEC_DRAFT_MODEL"),
    _o("spec_draft_n_max", "--spec-draft-n-max", env="LLAMA_ARG_SPEC_DRAFT_N_MAX"),
    _o("spec_draft_n_min", "--spec-draft-n-min", env="LLAMA_ARG_SPEC_DRAFT_N_MIN"),
    _o("spec_draft_device", "--spec-draft-device", "-devd", "--device-draft"),
    _o("spec_draft_ngl", "--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft",
       env="LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
    _o("spec_draft_type_k", "--spec-draft-type-k", "-ctkd", "--cache-type-k-draft", env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K"),
    _o("spec_draft_type_v", "--spec-draft-type-v", "-ctvd", "--cache-type-v-draft", env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V"),
    _o("spec_ngram_mod_n_min", "--spec-ngram-mod-n-min"),
    _o("spec_ngram_mod_n_max", "--spec-ngram-mod-n-max"),
    _o("spec_ngram_mod_n_match", "--spec-ngram-mod-n-match"),
    _o("mmproj", "-mm", "--mmproj", env="LLAMA_ARG_MMPROJ"),
    _o("mmproj_offload", "--mmproj-offload", value=False, neg=("--no-mmproj-offload",), env="LLAMA_ARG_MMPROJ_OFFLOAD"),
    _o("mmproj_device", "-mmdev", "--mmproj-device", env="MTMD_BACKEND_DEVICE"),
    _o("temp", "--temp", "--temperature", env="LLAMA_ARG_TEMPERATURE"),
    _o("top_k", "--top-k", env="LLAMA_ARG_TOP_K"),
    _o("top_p", "--top-p", env="LLAMA_ARG_TOP_P"),
    _o("min_p", "--min-p", env="LLAMA_ARG_MIN_P"),
    _o("presence_penalty", "--presence-penalty", env="LLAMA_ARG_PRESENCE_PENALTY"),
    _o("repeat_penalty", "--repeat-penalty", env="LLAMA_ARG_REPEAT_PENALTY"),
    _o("seed", "-s", "--seed"),
    _o("n_predict", "-n", "--predict", "--n-predict", env="LLAMA_ARG_N_PREDICT"),
    _o("reasoning_format", "--reasoning-format", env="LLAMA_ARG_THINK"),
    _o("reasoning_budget", "--reasoning-budget", env="LLAMA_ARG_THINK_BUDGET"),
    _o("jinja", "--jinja", value=False, neg=("--no-jinja",), env="LLAMA_ARG_JINJA"),
    _o("chat_template", "--chat-template", env="LLAMA_ARG_CHAT_TEMPLATE"),
    _o("chat_template_file", "--chat-template-file", env="LLAMA_ARG_CHAT_TEMPLATE_FILE"),
    _o("chat_template_kwargs", "--chat-template-kwargs", env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS"),
    _o("metrics", "--metrics", value=False, env="LLAMA_ARG_ENDPOINT_METRICS"),
    _o("slots", "--slots", value=False, neg=("--no-slots",), env="LLAMA_ARG_ENDPOINT_SLOTS"),
    _o("props", "--props", value=False, env="LLAMA_ARG_ENDPOINT_PROPS"),
    _o("timeout", "-to", "--timeout", env="LLAMA_ARG_TIMEOUT"),
    _o("threads", "-t", "--threads", env="LLAMA_ARG_THREADS"),
    _o("threads_http", "--threads-http", env="LLAMA_ARG_THREADS_HTTP"),
    _o("cont_batching", "-cb", "--cont-batching", value=False, neg=("-nocb", "--no-cont-batching"),
       env="LLAMA_ARG_CONT_BATCHING"),
    _o("verbosity", "-lv", "--verbosity", "--log-verbosity", env="LLAMA_ARG_LOG_VERBOSITY"),
    _o("verbose", "-v", "--verbose", "--log-verbose", value=False),
)


def llama_table_build(service: Service) -> int:
    """The build whose option table reads a service's argv: its declared ``engine_build`` where the tables
    cover it, else the newest build held (engine-accepts-argv says which, and skips a build no table covers)."""
    declared = service.engine_build.number if service.engine_build is not None else None
    if declared is not None and load_builds().resolve(declared) is not None:
        return declared
    return load_builds().last


def _sample(build: int) -> int:
    resolved = load_builds().resolve(build)
    if resolved is None:
        builds = load_builds()
        raise ValueError(f"no option table for llama.cpp build {build}: the tables cover builds {builds.first} to "
                         f"{builds.last}")
    return resolved.sample


@cache
def accepted_flags(build: int = BUILD) -> frozenset[str]:
    """Every flag name llama-server ``build`` knows (positive and negative forms; removed ones it refuses too)."""
    return frozenset(name for variant in load_builds().at(_sample(build)) for name in variant.all_names)


# Options whose common/arg.cpp handler appends to a list (``parse_tensor_buffer_overrides`` pushes every
# PATTERN=BUFT of every use), so a repeated flag adds up: two ``-ot`` flags moved both sets of tensors on a real boot
# (docs/ledger.md, the held-out ``ho-moe-ot-twice``)
_APPENDING = frozenset({"--override-tensor", "--override-tensor-draft"})


def _table(build: int = BUILD) -> OptionTable:
    return _table_of_sample(_sample(build))


def engine_variables(build: int = BUILD) -> frozenset[str]:
    """Every environment variable ``build`` reads as a flag (common/arg.cpp ``set_env``): the ``LLAMA_ARG_*`` names,
    and those that are not, ``LLAMA_API_KEY`` for ``--api-key`` and ``HF_TOKEN`` for ``--hf-token`` among them."""
    return frozenset(option.env for option in _table(build).options if option.env)


@cache
def _table_of_sample(sample: int) -> OptionTable:
    """Interpreted options (with the names this build knows) plus every other option of the build, so
    nothing valid reads as unknown and nothing the build lacks reads as known."""
    variants = load_builds().at(sample)
    have = {name for variant in variants for name in variant.all_names}
    interpreted = []
    for option in OPTIONS:
        names = tuple(n for n in option.names if n in have)
        negs = tuple(n for n in option.neg_names if n in have)
        if names or negs:
            interpreted.append(replace(option, names=names or negs, neg_names=negs if names else ()))
    known = {name for option in interpreted for name in (*option.names, *option.neg_names)}
    others = []
    for i, variant in enumerate(variants):
        positive = tuple(n for n in variant.names if n not in known)
        negative = tuple(n for n in variant.neg if n not in known)
        if positive or negative:
            others.append(Option(dest=f"_other_{i}", names=positive or negative, neg_names=negative if positive else (),
                                 takes_value=variant.takes_value, env=variant.env,
                                 repeat="append" if set(positive) & _APPENDING else "last"))
    return OptionTable((*interpreted, *others))


@dataclass(frozen=True)
class LlamaServerConfig:
    """The settings of one llama-server process, with llama.cpp's defaults where argv is silent."""

    argv: tuple[str, ...]
    build: int
    """The llama.cpp build whose option table read the argv."""
    parsed: ParsedArgv = field(repr=False)
    model: str | None
    alias: str | None
    host: str
    port: int
    ctx_size: int
    """``-c``; 0 means the model's trained context."""
    parallel: int
    """``-np``; -1 (the default) means auto: 4 slots with a unified KV cache."""
    kv_unified: bool | None
    batch_size: int
    ubatch_size: int
    swa_full: bool
    ctx_checkpoints: int
    cache_ram_mib: int
    flash_attn: str
    cache_type_k: str
    cache_type_v: str
    n_gpu_layers: str
    split_mode: str
    tensor_split: tuple[float, ...]
    devices: tuple[str, ...]
    rpc: tuple[str, ...]
    fit: str
    spec_types: tuple[str, ...]
    spec_draft_model: str | None
    spec_draft_n_max: int
    spec_draft_n_min: int
    spec_draft_device: tuple[str, ...]
    spec_ngram_mod_n_min: int
    spec_ngram_mod_n_max: int
    mmproj: str | None
    temp: float | None
    top_k: int | None
    top_p: float | None
    min_p: float | None
    presence_penalty: float | None
    reasoning_format: str | None
    reasoning_budget: int | None
    jinja: bool
    metrics: bool
    slots: bool
    timeout: int
    api_key_set: bool
    problems: tuple[ArgvProblem, ...]
    unjudged: tuple[ArgvProblem, ...] = ()
    """Values whose handler throws on a condition the build's recorded grammar does not read."""

    def use(self, dest: str) -> FlagUse | None:
        """How the setting was given (flag as written, value, argv index), or None if defaulted."""
        return self.parsed.last(dest)

    @property
    def unknown_flags(self) -> tuple[ArgvProblem, ...]:
        return tuple(p for p in self.problems if p.message == "invalid argument")

    @property
    def n_slots(self) -> int:
        return 4 if self.parallel < 0 else self.parallel

    @property
    def unified_kv(self) -> bool:
        """``-np -1`` turns on the unified KV cache (tools/server/server-context.cpp)."""
        return bool(self.kv_unified) or self.parallel < 0

    @property
    def speculative(self) -> bool:
        return any(t != "none" for t in self.spec_types)


@cache
def _values(sample: int) -> dict[str, str]:
    """The names a recorded build refuses as removed, with its removal message."""
    return {n: v.removed for v in load_builds().at(sample) if v.removed is not None for n in v.all_names}


# common/arg.cpp: is_truthy / is_falsey, what parse_bool_value takes for a switch given by its variable.
TRUTHY = ("on", "enabled", "true", "1")
FALSEY = ("off", "disabled", "false", "0")


@dataclass(frozen=True)
class ValueVerdicts:
    problems: list[ArgvProblem]
    """Values the build refuses."""
    unjudged: list[ArgvProblem]
    """Values whose handler throws on a condition the build's recorded grammar does not read."""


def value_problems(table: OptionTable, parsed: ParsedArgv, build: int = BUILD) -> list[ArgvProblem]:
    """Every value llama-server ``build`` refuses at start (see ``value_verdicts``)."""
    return value_verdicts(table, parsed, build).problems


def value_verdicts(table: OptionTable, parsed: ParsedArgv, build: int = BUILD) -> ValueVerdicts:
    """Every value llama-server ``build`` refuses at start: it prints "error while handling argument"
    (or "... environment variable") and exits before it loads anything. The value's type, choices, ranges and
    list grammar are the build's own (its arg.cpp, read by extract_llama_args: fleetgate.engines.llama_values);
    a build never published is read with the recorded build before it, where the seam has found that both
    neighbours agree on the flag."""
    sample = _sample(build)
    removed = _values(sample)
    builds = load_builds()
    problems: list[ArgvProblem] = []
    unjudged: list[ArgvProblem] = []
    for dest, uses in parsed.uses.items():
        option = table.by_dest[dest]
        names = set(option.names) | set(option.neg_names)
        variant = next((v for n in sorted(names) if (v := builds.variant(n, sample)) is not None), None)
        for use in uses:
            value = use.value
            if names & set(removed):
                problems.append(ArgvProblem(use.flag, use.index, "the argument has been removed; "
                                            f"{removed[sorted(names & set(removed))[0]]}"))
                continue
            if value is None:
                continue
            if not option.takes_value:
                if option.neg_names and use.index is None and value not in (*TRUTHY, *FALSEY):
                    # A boolean switch from the environment goes through parse_bool_value.
                    problems.append(ArgvProblem(use.flag, use.index, f"invalid boolean value {value!r}; expected one "
                                                f"of {', '.join((*TRUTHY, *FALSEY))}"))
                continue
            why = (refusal(variant, value, build) if variant is not None else None) or server_rule(names, value)
            if why is not None:
                problems.append(ArgvProblem(use.flag, use.index, why))
            elif variant is not None and variant.rule("partial"):
                unjudged.append(ArgvProblem(use.flag, use.index, (
                    f"build {build}'s handler of {option.flag} throws on a condition its recorded grammar does not "
                    f"read, so whether it takes {value!r} is not known")))
    return ValueVerdicts(problems, unjudged)


def parse_llama_server(argv: Sequence[str], env: Mapping[str, str] | None = None, *,
                       build: int = BUILD) -> LlamaServerConfig:
    """Read llama-server's argv (``argv[0]`` is the binary) and environment as ``build`` does (11434 unless
    told; a build between two sampled ones is read with the sample before it)."""
    table = _table(build)
    parsed = table.parse(argv[1:], env, neg_env_prefix=("LLAMA_ARG_", "LLAMA_ARG_NO_"), offset=1)
    problems = list(parsed.problems)
    values = value_verdicts(table, parsed, build)
    problems += values.problems
    reported = {(p.flag, p.index) for p in problems}

    def note(problem: ArgvProblem) -> None:
        if (problem.flag, problem.index) not in reported:
            reported.add((problem.flag, problem.index))
            problems.append(problem)

    def text(dest: str, default: str | None = None) -> str | None:
        use = parsed.last(dest)
        return use.value if use is not None else default

    def number(dest: str, default: int) -> int:
        use = parsed.last(dest)
        if use is None or use.value is None:
            return default
        try:
            return stoi(use.value)
        except ValueError as exc:
            note(ArgvProblem(use.flag, use.index, str(exc)))
            return default

    def real(dest: str) -> float | None:
        use = parsed.last(dest)
        if use is None or use.value is None:
            return None
        try:
            return stof(use.value)
        except ValueError as exc:
            note(ArgvProblem(use.flag, use.index, str(exc)))
            return None

    def switch(dest: str, default: bool) -> bool:
        use = parsed.last(dest)
        if use is None:
            return default
        return use.value not in ("0", "false", "off")

    def listing(dest: str) -> tuple[str, ...]:
        value = text(dest)
        return tuple(v.strip() for v in value.split(",") if v.strip()) if value else ()

    tensor_split: list[float] = []
    split_use = parsed.last("tensor_split")
    if split_use is not None and split_use.value is not None:
        # common/arg.cpp: split on ',' and '/', each part through std::stof
        for part in (p for p in re.split(r"[,/]+", split_use.value) if p):
            try:
                tensor_split.append(stof(part))
            except ValueError:
                note(ArgvProblem(split_use.flag, split_use.index, f"expected proportions N0,N1,..., got {split_use.value!r}"))
                tensor_split = []
                break

    spec_types: list[str] = []
    for use in parsed.all("spec_type"):
        spec_types += [v.strip() for v in (use.value or "").split(",") if v.strip()]
    kv_unified_use = parsed.last("kv_unified")
    parallel = number("parallel", -1)
    parallel_use = parsed.last("parallel")
    if parallel == 0 and parallel_use is not None:
        note(ArgvProblem(parallel_use.flag, parallel_use.index, "invalid value for n_parallel (0)"))

    return LlamaServerConfig(
        argv=tuple(argv),
        build=build,
        parsed=parsed,
        model=text("model"),
        alias=text("alias"),
        host=text("host", "127.0.0.1") or "127.0.0.1",
        port=number("port", 8080),
        ctx_size=number("ctx_size", 0),
        parallel=parallel,
        kv_unified=None if kv_unified_use is None else switch("kv_unified", False),
        batch_size=number("batch_size", 2048),
        ubatch_size=number("ubatch_size", 512),
        swa_full=switch("swa_full", False),
        ctx_checkpoints=number("ctx_checkpoints", 32),
        cache_ram_mib=number("cache_ram", 8192),
        flash_attn=text("flash_attn", "auto") or "auto",
        cache_type_k=text("cache_type_k", "f16") or "f16",
        cache_type_v=text("cache_type_v", "f16") or "f16",
        n_gpu_layers=text("n_gpu_layers", "auto") or "auto",
        split_mode=text("split_mode", "layer") or "layer",
        tensor_split=tuple(tensor_split),
        devices=listing("device"),
        rpc=listing("rpc"),
        fit=text("fit", "on") or "on",
        spec_types=tuple(spec_types) or ("none",),
        spec_draft_model=text("spec_draft_model"),
        spec_draft_n_max=number("spec_draft_n_max", 3),
        spec_draft_n_min=number("spec_draft_n_min", 0),
        spec_draft_device=listing("spec_draft_device"),
        spec_ngram_mod_n_min=number("spec_ngram_mod_n_min", 48),
        spec_ngram_mod_n_max=number("spec_ngram_mod_n_max", 64),
        mmproj=text("mmproj"),
        temp=real("temp"),
        top_k=number("top_k", 40) if parsed.last("top_k") else None,
        top_p=real("top_p"),
        min_p=real("min_p"),
        presence_penalty=real("presence_penalty"),
        reasoning_format=text("reasoning_format"),
        reasoning_budget=number("reasoning_budget", -1) if parsed.last("reasoning_budget") else None,
        jinja=switch("jinja", True),
        metrics=switch("metrics", False),
        slots=switch("slots", True),
        timeout=number("timeout", 3600),
        api_key_set=parsed.last("api_key") is not None or parsed.last("api_key_file") is not None,
        problems=tuple(problems),
        unjudged=tuple(values.unjudged),
    )


def pad(value: int, multiple: int) -> int:
    """GGML_PAD: round up to a multiple."""
    return (value + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class ContextShape:
    n_ctx: int
    """The whole KV pool in positions, after llama.cpp's padding and rounding."""
    n_ctx_seq: int
    """Positions one slot (sequence) can hold."""
    n_seq_max: int
    unified: bool


def context_shape(config: LlamaServerConfig, n_ctx_train: int | None) -> ContextShape | None:
    """The context llama_context will build (src/llama-context.cpp, llama_context::llama_context).

    ``n_ctx = PAD(-c or n_ctx_train, 256)``; a unified KV cache gives every slot the whole pool,
    otherwise ``n_ctx_seq = PAD(n_ctx / n_seq_max, 256)`` and the pool becomes ``n_ctx_seq * n_seq_max``.
    Returns None when ``-c`` is 0 and the trained context is unknown.
    """
    requested = config.ctx_size or n_ctx_train
    if not requested:
        return None
    n_ctx = pad(requested, 256)
    n_seq = max(1, config.n_slots)
    if config.unified_kv:
        return ContextShape(n_ctx=n_ctx, n_ctx_seq=n_ctx, n_seq_max=n_seq, unified=True)
    n_ctx_seq = pad(n_ctx // n_seq, 256)
    return ContextShape(n_ctx=n_ctx_seq * n_seq, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq, unified=False)
