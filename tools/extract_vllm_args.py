"""Extract ``vllm serve``'s options, every release from 0.8.0 to the newest on PyPI, as intervals of releases.

``python -m tools.extract_vllm_args`` regenerates ``fleetgate/engines/vllm_releases.json``:

1. PyPI's JSON API lists vLLM's releases (final ones, 0.8.0 and later);
2. each release's sdist is streamed (its wheel where no sdist was published) and only the argument code is read
   out of it: vllm/engine/arg_utils.py, the CLI's cli_args.py, the config dataclasses (vllm/config*.py), the
   module that holds FlexibleArgumentParser, and the metric loggers; nothing is installed or imported;
3. ``tools.vllm_wheel.read_sources`` reads them with ``ast``: each option's names and how argparse
   reads its value (with a config group's keys, which its dotted ``--X-config.KEY`` arguments may set), the
   ``SpeculativeConfig`` schema, the metrics, and whether the parser takes abbreviations and dotted arguments;
4. every distinct option (and field, method, metric) is kept once with the intervals of releases that carry it.

``--cache DIR`` keeps each release's files; ``--releases X ...`` reads only those (a trial run).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tools.vllm_wheel import read_sources, wanted

__all__ = ["FIRST", "intervals", "published_releases", "release_key", "release_sources", "release_table", "table"]

INDEX = "https://pypi.org/pypi/vllm/json"
FIRST = (0, 8, 0)
_FINAL = re.compile(r"\d+\.\d+\.\d+(?:\.post\d+|\.\d+)?")


def release_key(version: str) -> tuple[int, ...]:
    """``0.8.5.post1`` -> (0, 8, 5, 1): releases in the order PyPI published them."""
    return tuple(int(p.removeprefix("post")) for p in version.split("."))


def published_releases(index: dict[str, Any]) -> list[str]:
    return sorted((v for v in index["releases"] if _FINAL.fullmatch(v) and release_key(v) >= FIRST
                   and index["releases"][v]), key=release_key)


def _fetch(files: list[dict[str, Any]]) -> tuple[dict[str, str], str]:
    sdist = next((f for f in files if f["packagetype"] == "sdist"), None)
    found: dict[str, str] = {}
    if sdist is not None:
        with urllib.request.urlopen(urllib.parse.urljoin(INDEX, sdist["url"]), timeout=900) as stream, \
                tarfile.open(fileobj=stream, mode="r|gz") as archive:
            for member in archive:
                name = member.name.split("/", 1)[1] if "/" in member.name else ""
                if member.isfile() and wanted(name):
                    handle = archive.extractfile(member)
                    assert handle is not None
                    found[name] = handle.read().decode("utf-8")
        return found, sdist["filename"]
    wheels = [f for f in files if f["packagetype"] == "bdist_wheel"]
    wheel = next((f for f in wheels if "x86_64" in f["filename"]), wheels[0])
    with urllib.request.urlopen(urllib.parse.urljoin(INDEX, wheel["url"]), timeout=900) as answer:
        data = answer.read()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        found = {n: archive.read(n).decode("utf-8") for n in archive.namelist() if wanted(n)}
    return found, wheel["filename"]


def release_sources(version: str, files: list[dict[str, Any]], cache: Path | None) -> tuple[dict[str, str], str]:
    """A release's argument code, from the cache or streamed out of its sdist (or wheel), and where it came from."""
    kept = cache / version if cache is not None else None
    if kept is not None and (kept / "done").is_file():
        found = {str(p.relative_to(kept)): p.read_text(encoding="utf-8") for p in kept.rglob("*.py")}
        return {n: t for n, t in found.items() if wanted(n)}, (kept / "done").read_text(encoding="utf-8").strip()
    found, origin = _fetch(files)
    if kept is not None:
        for name, text in found.items():
            (kept / name).parent.mkdir(parents=True, exist_ok=True)
            (kept / name).write_text(text, encoding="utf-8")
        (kept / "done").write_text(origin, encoding="utf-8")
    return found, origin


def release_table(version: str, found: dict[str, str], origin: str) -> dict[str, Any]:
    return read_sources(found, version, origin)


def intervals(present: Iterable[str], releases: Sequence[str]) -> list[list[str]]:
    """Runs of consecutive releases, as [first, last] pairs."""
    have = set(present)
    runs: list[list[str]] = []
    previous = False
    for release in releases:
        if release in have:
            if previous:
                runs[-1][1] = release
            else:
                runs.append([release, release])
        previous = release in have
    return runs


def _merge(per_release: dict[str, list[dict[str, Any]]], releases: Sequence[str]) -> list[dict[str, Any]]:
    seen: dict[str, list[str]] = {}
    items: dict[str, dict[str, Any]] = {}
    for release in releases:
        for item in per_release[release]:
            key = json.dumps(item, sort_keys=True)
            items.setdefault(key, item)
            seen.setdefault(key, []).append(release)
    return [{**items[k], "seen": intervals(seen[k], releases)} for k in items]


def table(tables: dict[str, dict[str, Any]], origins: dict[str, str]) -> dict[str, Any]:
    releases = sorted(tables, key=release_key)
    options = {r: [{k: v for k, v in o.items() if k != "config"} for o in tables[r]["options"]] for r in releases}
    fields = {r: [{"name": n, **kind} for n, kind in tables[r]["speculative_config"]["fields"].items()] for r in releases}
    methods = {r: [{"name": m} for m in tables[r]["speculative_config"]["methods"]] for r in releases}
    metrics = {r: [{"name": m["name"], "type": m["type"]} for m in tables[r]["metrics"]] for r in releases}
    parser = {r: [{"abbreviations": tables[r]["abbreviations"], "dotted": tables[r]["dotted"]}] for r in releases}
    return {
        "generated_by": "python -m tools.extract_vllm_args",
        "source": "each vLLM release's sdist on PyPI (its wheel where none was published): vllm/engine/arg_utils.py, "
                  "the CLI's cli_args.py, vllm/config*.py, FlexibleArgumentParser's module and the metric loggers, "
                  "read with ast (tools.vllm_wheel.read_sources), never imported",
        "note": "each option, SpeculativeConfig field, speculative method, metric and parser behaviour is listed once "
                "with 'seen', the intervals [first, last] of releases that carry it exactly so",
        "releases": releases,
        "origins": origins,
        "options": sorted(_merge(options, releases), key=lambda o: (o["names"][0], release_key(o["seen"][0][0]))),
        "speculative_fields": sorted(_merge(fields, releases), key=lambda o: (o["name"], release_key(o["seen"][0][0]))),
        "speculative_methods": sorted(_merge(methods, releases), key=lambda o: o["name"]),
        "metrics": sorted(_merge(metrics, releases), key=lambda o: (o["name"], release_key(o["seen"][0][0]))),
        "parser": _merge(parser, releases),
    }


def _write(data: dict[str, Any], out: Path) -> None:
    """One line per option (the file stays diffable and small)."""
    with out.open("w", encoding="utf-8") as handle:
        handle.write("{\n")
        keys = list(data)
        for i, key in enumerate(keys):
            comma = "," if i < len(keys) - 1 else ""
            value = data[key]
            if isinstance(value, list) and value and isinstance(value[0], dict):
                handle.write(f" {json.dumps(key)}: [\n")
                for j, item in enumerate(value):
                    handle.write("  " + json.dumps(item, separators=(",", ":")) + ("," if j < len(value) - 1 else "")
                                 + "\n")
                handle.write(" ]" + comma + "\n")
            else:
                handle.write(f" {json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}{comma}\n")
        handle.write("}\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.extract_vllm_args", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "fleetgate/engines/vllm_releases.json")
    parser.add_argument("--cache", type=Path, default=None, help="keep each release's argument code here")
    parser.add_argument("--releases", nargs="*", help="only these releases (a trial run)")
    parser.add_argument("--jobs", type=int, default=3, help="downloads at once")
    args = parser.parse_args(argv)
    with urllib.request.urlopen(INDEX, timeout=120) as answer:
        index = json.load(answer)
    releases = [r for r in published_releases(index) if not args.releases or r in args.releases]

    def load(version: str) -> tuple[str, dict[str, Any], str]:
        found, origin = release_sources(version, index["releases"][version], args.cache)
        print(f"vLLM {version}: {origin}", file=sys.stderr, flush=True)
        return version, release_table(version, found, origin), origin

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(load, releases))
    _write(table({v: t for v, t, _ in done}, {v: o for v, _, o in done}), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
