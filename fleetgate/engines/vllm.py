"""vLLM's ``vllm serve`` command line, as a typed config (the flags this fleet's engines use).

vLLM reads ``--flag value`` and ``--flag=value``, treats ``--flag_name`` as ``--flag-name``, and
takes JSON for dict-valued options. The radiance fork adds its own flags
(``--override-sampling-effects``, ``--kv-cache-memory``, ``--expert-precise-memory``); flags outside
this table are kept and reported as not modelled, never dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

from fleetgate.engines.argv import ArgvProblem, FlagUse, Option, OptionTable, ParsedArgv

__all__ = [
    "DEFAULT_RELEASE",
    "OPTIONS",
    "RADIANCE",
    "ArgvFinding",
    "ArgvReading",
    "Fork",
    "Release",
    "ReleaseOption",
    "Successor",
    "VllmConfig",
    "declared_release",
    "image_release",
    "is_vllm_image",
    "load_release",
    "newest",
    "parse_value",
    "parse_vllm",
    "read_argv",
    "read_as_vllm",
    "releases",
    "successors",
    "unrecorded",
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
    _o("tokenizer", "--tokenizer"),
    _o("enable_prompt_tokens_details", "--enable-prompt-tokens-details", value=False),
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
    tokenizer: str | None = None
    """``--tokenizer``: the tokenizer's directory when it is not the model's."""
    override_generation_config: Mapping[str, Any] | None = None
    """``--override-generation-config``: defaults every request gets (temperature, top_k, ...; ``max_new_tokens``
    a ceiling on max_tokens: vllm/entrypoints/openai/chat_completion/serving.py, ``override_max_tokens``)."""
    prompt_tokens_details: bool = False
    """``--enable-prompt-tokens-details``: answers count cached prompt tokens (usage.prompt_tokens_details)."""

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
        tokenizer=text("tokenizer"),
        override_generation_config=mapping("override_generation_config"),
        prompt_tokens_details=parsed.last("enable_prompt_tokens_details") is not None,
        problems=tuple(problems),
    )


# -- each release's own argument definitions (vllm_releases.json, read from its sdist) --------------------------


@dataclass(frozen=True)
class ReleaseOption:
    names: tuple[str, ...]
    kind: str
    """bool (--x/--no-x), flag, int, float, str, json, choice, list."""
    choices: tuple[str, ...] = ()
    human_readable: bool = False
    optional: bool = False
    keys: tuple[str, ...] = ()
    """For a config group (``--compilation-config``): its dataclass's fields, the keys a dotted argument may set."""


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
    abbreviations: bool = True
    """Whether the release's parser takes a unique prefix of a long option (argparse's allow_abbrev)."""
    dotted: bool = True
    """Whether the release's FlexibleArgumentParser reads ``--X-config.KEY VALUE``."""
    speculative_read: bool = True
    """Whether the release's SpeculativeConfig fields and methods were read (0.8.0 to 0.8.4 declare no annotated
    fields or method literal)."""

    def with_fork(self, fork: Fork | None) -> Release:
        if fork is None:
            return self
        return replace(self, options=(*self.options, *fork.options),
                       speculative_methods=(*self.speculative_methods, *fork.speculative_methods),
                       generated_from=f"{self.generated_from} + the {fork.name} fork ({fork.source})")

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
                         bool(data.get("human_readable")), bool(data.get("optional")), tuple(data.get("keys", ())))


DEFAULT_RELEASE = "0.13.0"


def release_key(version: str) -> tuple[int, ...]:
    """``0.8.5.post1`` -> (0, 8, 5, 1), the order of releases."""
    return tuple(int(p.removeprefix("post")) for p in version.split("."))


@cache
def _data() -> dict[str, Any]:
    return dict(json.loads(resources.files("fleetgate.engines").joinpath("vllm_releases.json").read_text(encoding="utf-8")))


def releases() -> tuple[str, ...]:
    """The vLLM releases fleetgate holds option tables for: every release from 0.8.0 to the newest it was
    extracted at (vllm_releases.json, tools.extract_vllm_args)."""
    return tuple(_data()["releases"])


def newest() -> str:
    return releases()[-1]


def _in(item: Mapping[str, Any], version: str) -> bool:
    key = release_key(version)
    return any(release_key(a) <= key <= release_key(b) for a, b in item["seen"])


def holders(name: str) -> list[tuple[str, str]]:
    """The intervals of held releases that have an option of this name, as (first, last)."""
    runs = [tuple(o["seen"]) for o in _data()["options"] if name in o["names"]]
    held = releases()
    have = sorted({r for run in runs for a, b in run for r in held
                   if release_key(a) <= release_key(r) <= release_key(b)}, key=release_key)
    found: list[tuple[str, str]] = []
    for release in have:
        if found and held.index(release) == held.index(found[-1][1]) + 1:
            found[-1] = (found[-1][0], release)
        else:
            found.append((release, release))
    return found


def load_release(version: str = DEFAULT_RELEASE) -> Release:
    """One vLLM release's options, speculative-config schema and metrics (vllm_releases.json, read from its sdist
    by tools.extract_vllm_args); 0.13.0 unless told (the release the radiance fork is built on)."""
    if version not in releases():
        raise ValueError(f"no option table for vLLM {version}: fleetgate holds {releases()[0]} to {releases()[-1]}")
    return _load_release(version)


@cache
def _load_release(version: str) -> Release:
    data = _data()
    parser = next(p for p in data["parser"] if _in(p, version))
    return Release(
        version=version,
        options=tuple(_option(o) for o in data["options"] if _in(o, version)),
        speculative_fields={f["name"]: _option({"names": (), **{k: v for k, v in f.items() if k not in ("name", "seen")}})
                            for f in data["speculative_fields"] if _in(f, version)},
        speculative_methods=tuple(m["name"] for m in data["speculative_methods"] if _in(m, version)),
        metrics={m["name"]: m["type"] for m in data["metrics"] if _in(m, version)},
        generated_from=f"{data['origins'][version]} (vllm_releases.json)",
        abbreviations=bool(parser["abbreviations"]),
        dotted=bool(parser["dotted"]),
        speculative_read=any(_in(f, version) for f in data["speculative_fields"])
        and any(_in(m, version) for m in data["speculative_methods"]),
    )


# -- which release a service pins: engine_build = { version } or the tag of one of vLLM's own images ----------------

# vLLM's images on Docker Hub: vllm/vllm-openai (and its -rocm/-cpu variants), vllm/vllm-cpu*. Another repository
# (a fork's local tag such as localhost/radiance-vllm:0.13.0-e060895) says nothing certain about the release.
_IMAGE_REPO = re.compile(r"(?:(?:docker\.io|index\.docker\.io)/)?vllm/vllm-(?:openai|cpu)(?:-[a-z0-9]+)*")
# v0.32.0, 0.32.0, v0.8.5.post1, v0.10.1.1, v0.11.0-cu128: the release is what precedes any variant suffix.
_RELEASE_TAG = re.compile(r"v?(\d+\.\d+\.\d+(?:\.post\d+|\.\d+)?)(?:-[A-Za-z0-9_.]+)?")


def _split_image(image: str) -> tuple[str, str | None]:
    """``REPO[:TAG][@DIGEST]`` -> (repo, tag); None when no tag is written (docker then pulls ``latest``)."""
    ref = image.split("@", 1)[0]
    repo, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        return ref, None
    return repo, tag


def is_vllm_image(image: str) -> bool:
    """Whether ``image`` is one of vLLM's own images, whose tag names the release it runs."""
    return _IMAGE_REPO.fullmatch(_split_image(image)[0]) is not None


def image_release(image: str) -> str | None:
    """The release a vLLM image's tag pins (``vllm/vllm-openai:v0.32.0`` -> ``0.32.0``); None for a tag that
    floats (``latest``, ``nightly``, none written) or an image that is not vLLM's own."""
    repo, tag = _split_image(image)
    if _IMAGE_REPO.fullmatch(repo) is None or tag is None:
        return None
    match = _RELEASE_TAG.fullmatch(tag)
    return match.group(1) if match else None


def declared_release(version: str | None, image: str | None) -> str | None:
    """The release a service pins: ``engine_build = { vllm/version = "X.Y.Z" }``, else its vLLM image's tag; None
    when nothing pins one."""
    if version is not None:
        return version
    return image_release(image) if image is not None else None


def unrecorded(version: str) -> str | None:
    """None when fleetgate holds ``version``'s option table, else the not-judged reason (what to declare or record)."""
    if version in releases():
        return None
    held = releases()
    return (f"not judged: vLLM {version} has no recorded option table (fleetgate holds every release from {held[0]} "
            f"to {held[-1]}); declare the release the service runs, or record it: python -m "
            "tools.extract_vllm_args (it reads each release's sdist from PyPI)")


# -- what vLLM names as the successor of an option it removed or renamed (vllm_successors.json) -----------------


@dataclass(frozen=True)
class Successor:
    flag: str
    successor: str | None
    """The option(s) vLLM names in its place; None where it names none (the option is gone)."""
    how: str
    source: str


@cache
def successors() -> Mapping[str, Successor]:
    text = resources.files("fleetgate.engines").joinpath("vllm_successors.json").read_text(encoding="utf-8")
    return {flag: Successor(flag, entry.get("successor"), entry["how"], entry["source"])
            for flag, entry in json.loads(text)["flags"].items()}


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


@dataclass(frozen=True)
class ArgvReading:
    found: dict[str, tuple[int, str | None]]
    """Canonical option name -> (argv index, value)."""
    problems: list[ArgvFinding]
    """What the release's argparse would refuse."""
    unjudged: list[str]
    """Dotted keys of a config group the release has but whose fields its table does not list (accepted by the
    group, the key itself not judged)."""


def read_as_vllm(argv: Sequence[str], release: Release) -> tuple[dict[str, tuple[int, str | None]], list[ArgvFinding]]:
    """``read_argv``'s options and problems."""
    reading = read_argv(argv, release)
    return reading.found, reading.problems


def read_argv(argv: Sequence[str], release: Release) -> ArgvReading:
    """Read ``vllm serve [MODEL] ...`` the way the release's argparse reads it (FlexibleArgumentParser:
    ``_`` in names is ``-``; ``--flag=value``; a unique prefix of a long option is that option; the dotted
    ``--X-config.KEY VALUE`` merged into one ``--X-config JSON`` given after the rest)."""
    table = {name: option for option in release.options for name in option.names}
    long_names = sorted(n for n in table if n.startswith("--"))
    found: dict[str, tuple[int, str | None]] = {}
    problems: list[ArgvFinding] = []
    i = 1
    if i < len(argv) and argv[i] == "serve":
        i += 1
        if i < len(argv) and not argv[i].startswith("-"):
            i += 1
    args, dotted = _dotted(list(argv), i, problems) if release.dotted else (list[str | None](argv), [])

    def lookup(word: str, name: str, index: int) -> tuple[ReleaseOption | None, str, bool]:
        """The option argparse matches (exact, then a unique prefix); True when the name was ambiguous."""
        option = table.get(name)
        if option is None and name.startswith("--") and release.abbreviations:
            matches = [n for n in long_names if n.startswith(name)]
            if len({id(table[n]) for n in matches}) == 1:
                return table[matches[0]], matches[0], False
            if matches:
                problems.append(ArgvFinding(index, word, "ambiguous-flag", f"{name} could be {', '.join(matches[:4])}"))
                return None, name, True
        return option, name, False

    while i < len(args):
        word, start = args[i], i
        if word is None:
            i += 1
            continue
        if not word.startswith("-"):
            problems.append(ArgvFinding(i, word, "unknown-flag", f"unexpected argument {word!r}"))
            i += 1
            continue
        name, eq, inline = word.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        option, name, ambiguous = lookup(word, name, i)
        if ambiguous:
            i = _past_values(args, i)
            continue
        if option is None:
            problems.append(ArgvFinding(i, word, "unknown-flag", _unknown(name, release)))
            i = _past_values(args, i)
            continue
        canonical = option.names[0]
        if option.kind in ("bool", "flag"):
            found[canonical] = (start, None if not name.startswith("--no-") else "false")
            i += 1
            continue
        if option.kind == "list":
            j = i + 1
            while j < len(args) and not _is_flag(args[j]):
                j += 1
            found[canonical] = (start, " ".join(a for a in args[i + 1:j] if a is not None) if not eq else inline)
            i = j if not eq else i + 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(args) and (following := args[i + 1]) is not None:
            value = following
            i += 2
        else:
            problems.append(ArgvFinding(i, word, "missing-value", f"{name} expects a value"))
            i += 1
            continue
        expected = parse_value(option, value)
        if expected is not None:
            problems.append(ArgvFinding(start, name, "bad-value", f"{name} {value!r}: vLLM expects {expected}"))
        found[canonical] = (start, value)
    unjudged: list[str] = []
    for group in dotted:
        option, name, ambiguous = lookup(group.spelled, group.name, group.index)
        if ambiguous:
            continue
        if option is None:
            problems.append(ArgvFinding(group.index, group.spelled, "unknown-flag",
                                        f"{group.spelled}: {_unknown(group.name, release)}, so it has no keys to set"))
            continue
        value = json.dumps(group.value)
        if option.kind != "json":
            problems.append(ArgvFinding(group.index, group.spelled, "bad-value",
                                        f"{group.spelled}: {name} is not a config group of vLLM {release.version} "
                                        f"(vLLM reads the keys as {name} {value}, and expects {parse_value(option, value) or 'no value'})"))
            continue
        found[option.names[0]] = (group.index, value)
        if option.names[0] != "--speculative-config":
            # a key the group's dataclass has is taken; another is not judged (whether the release refuses an
            # unknown key of this group is not recorded)
            unjudged += [f"{name}.{key}" for key in group.value if key not in option.keys]
    spec = found.get("--speculative-config")
    if spec is not None and spec[1] is not None:
        if release.speculative_read:
            problems += _speculative(spec[0], spec[1], release)
        else:
            # the release's SpeculativeConfig is no annotated dataclass (0.8.0 to 0.8.4): its schema is not read
            unjudged.append("--speculative-config")
    return ArgvReading(found, problems, unjudged)


def _unknown(name: str, release: Release) -> str:
    """Why argparse refuses ``name``: not an option of the release, with the successor vLLM names for it and the
    recorded releases that have it."""
    message = f"{name} is not an option of vLLM {release.version}"
    successor = successors().get(name)
    if successor is not None:
        message += f"; {successor.how}"
    held = holders(name)
    if held:
        spans = ", ".join(a if a == b else f"{a} to {b}" for a, b in held)
        message += f" (vLLM {spans} {'has' if len(held) == 1 and held[0][0] == held[0][1] else 'have'} it)"
    return message


@dataclass(frozen=True)
class _Group:
    name: str
    """The group's option name as written before the first dot, ``_`` read as ``-`` (``--compilation-config``)."""
    spelled: str
    """The first dotted argument that set a key of it (``--compilation-config.level``)."""
    index: int
    value: dict[str, Any]


def _is_flag(word: str | None) -> bool:
    return word is not None and word.startswith("-")


def _dotted(args: list[str], start: int, problems: list[ArgvFinding]) -> tuple[list[str | None], list[_Group]]:
    """FlexibleArgumentParser.parse_args's dotted arguments: ``--X.a.b V`` / ``--X.a.b=V`` set key ``a.b`` of
    ``--X`` (V read as JSON, else a string; ``KEY+`` a comma list), all merged and given as ``--X JSON`` after the
    other arguments. The words they took are None in the returned argv, which keeps every index."""
    kept: list[str | None] = list(args)
    groups: dict[str, _Group] = {}
    i = start
    while i < len(args):
        word = args[i]
        name, eq, inline = word.partition("=")
        if not (word.startswith("-") and "." in name):
            i += 1
            continue
        if eq:
            text, taken = inline, 1
        elif i + 1 < len(args):
            text, taken = args[i + 1], 2
        else:
            problems.append(ArgvFinding(i, word, "missing-value", f"{name} expects a value"))
            kept[i] = None
            break
        head, *keys = name.split(".")
        if head.startswith("--"):
            head = "--" + head[2:].replace("_", "-")
        value: Any
        if keys[-1].endswith("+"):
            keys[-1] = keys[-1][:-1]
            value = text.split(",")
        else:
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text
        group = groups.setdefault(head, _Group(head, name, i, {}))
        node = group.value
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[keys[-1]] = value
        for j in range(i, i + taken):
            kept[j] = None
        i += taken
    return kept, list(groups.values())


def _past_values(args: list[str | None], i: int) -> int:
    """Past a flag argparse does not know and the words after it (argparse reports them together)."""
    i += 1
    while i < len(args) and not _is_flag(args[i]):
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
