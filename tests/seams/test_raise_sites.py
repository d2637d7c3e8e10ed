"""Every failure-raising line of fleetgate/checks names its own code, and every seam code is reproduced.

The sites are found by reading the source (tests/seams/raise_sites.py), so a new ``raise Failure``
without a code, or a second site reusing a code, fails here before it reaches a user. A seam code is
reproduced when a catalogue entry (fixtures/incidents, fixtures/branches) expects it: that entry's
mutation of the example fleet makes exactly that branch fire (tests/test_mutations.py).
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from fleetgate.incidents import load_catalogue
from tests.seams.raise_sites import CHECKS, REPO, failure_factories, raise_sites

SITES = raise_sites()
MODULES = sorted({site.path.name for site in SITES})


@pytest.mark.parametrize("module", MODULES)
def test_every_raise_site_names_a_code(module: str) -> None:
    if module.startswith("live_") and failure_factories().get("fail") == "none":
        pytest.xfail("endpoint.fail takes no code yet: the live checks' codes come with branch live")
    missing = [site.where for site in SITES if site.path.name == module and not site.codes]
    assert not missing, f"raise sites without a failure code: {missing}"


def test_no_two_raise_sites_share_a_code() -> None:
    counts = Counter(code for site in SITES if not site.own_code for code in site.codes)
    shared = {code: [s.where for s in SITES if code in s.codes] for code, n in counts.items() if n > 1}
    assert not shared, f"codes raised from more than one site: {shared}"


def test_every_code_starts_with_a_registered_check() -> None:
    from fleetgate.checks import REGISTRY, get_check

    get_check("card-floor")  # imports every check module
    bad = [(s.where, c) for s in SITES for c in s.codes
           if not c.startswith("{") and c.split("/", 1)[0] not in REGISTRY]
    assert not bad


def _pattern(code: str) -> re.Pattern[str]:
    """A code rendered from a name only known at run time (``{check_name}/unknown-device``) matches any check."""
    return re.compile("".join("[a-z-]+" if part.startswith("{") else re.escape(part)
                              for part in re.split(r"(\{[^}]*\})", code)) + "$")


def test_every_seam_code_is_reproduced_by_a_catalogued_mutation() -> None:
    from tests.test_fleets import MISSES

    expected = {e.code for name in ("incidents", "branches")
                for entry in load_catalogue(REPO / "fixtures" / name) for e in entry.expect}
    # A shape the example fleet has no service of (compose, docker run, llama-swap) is reproduced on its own fixture
    # fleet: each miss there is a mutation whose exact outcome table tests/test_fleets.py asserts.
    expected |= {code for _, _, changes in MISSES.values() for code in changes.values() if "/" in code}
    unreproduced = [(site.where, code) for site in SITES if site.kind == "seam" for code in site.codes
                    if not any(_pattern(code).match(e) for e in expected)]
    assert not unreproduced, f"seam failure codes no catalogue entry expects: {unreproduced}"


def test_the_finder_reads_every_shape_of_raise_site(tmp_path: Path) -> None:
    (tmp_path / "seam_example.py").write_text(textwrap.dedent('''
        NAME = "example-check"

        def check(endpoint, config, check_name):
            if config.a:
                raise Failure(code=f"{NAME}/first", service="s", check=NAME)
            if config.b:
                raise endpoint.fail(NAME, code="second" if config.c else "third")
            if config.d:
                raise endpoint.unreachable(NAME, config.error) from None
            if config.e:
                raise Failure(service="s", check=NAME)
            if config.f:
                raise Failure(code=f"{check_name}/shared", service="s", check=check_name)
            if config.g:
                raise ValueError("not a failure")
            return None

        def make(config) -> Failure:
            return Failure(code="example-check/made", service="s", check=NAME)
    '''))
    found = [(s.line, s.codes, s.own_code) for s in raise_sites(tmp_path, {"fail": "param", "unreachable": "own"})]
    assert found == [
        (6, ("example-check/first",), False),
        (8, ("example-check/second", "example-check/third"), False),
        (10, ("example-check/<unreachable>",), True),
        (12, (), False),
        (14, ("{check_name}/shared",), False),
        (20, ("example-check/made",), False),
    ]


def test_the_finder_sees_the_checks_package() -> None:
    assert {p.name for p in CHECKS.glob("seam_*.py")} <= set(MODULES)


def test_the_seams_page_lists_exactly_the_seam_codes() -> None:
    page = (REPO / "docs" / "seams.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([A-Za-z-]+/[a-z-]+)` \|", page, flags=re.MULTILINE))
    codes = {code.replace("{check_name}", "CHECK") for site in SITES if site.kind == "seam" for code in site.codes}
    assert listed == codes
