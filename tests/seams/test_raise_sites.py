"""Every check's declared codes are the codes its raise sites raise, and every seam code is reproduced.

The codes are declared once, with the check (``fleetgate.checks``: ``codes=``); the raise sites are found by
reading the source (tests/seams/raise_sites.py). A branch raised but not declared fails at run time
(``UndeclaredCode``) and here, before it reaches a user; a code declared but never raised is a promise nothing
keeps; two sites raising one code make the code say less than which branch fired. A seam code is reproduced
when a catalogue entry (fixtures/incidents, fixtures/branches) expects it: that entry's mutation of the example
fleet makes exactly that branch fire (tests/test_mutations.py).
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, TRANSPORT_CODES, Check, UndeclaredCode, load_checks, service_seam
from fleetgate.incidents import load_catalogue
from tests.seams.raise_sites import CHECKS, REPO, endpoint_sites, raise_sites

SITES = raise_sites()
MODULES = sorted({site.path.name for site in SITES})
load_checks()


def _declaring(code: str) -> list[Check]:
    """The checks that declare ``code``; ``{check}/branch`` (a shared helper's) is declared by any check."""
    if code.startswith("{"):
        branch = code.split("/", 1)[1]
        return [c for c in REGISTRY.values() if f"{c.name}/{branch}" in c.codes]
    check = REGISTRY.get(code.split("/", 1)[0])
    return [check] if check is not None and code in check.codes else []


@pytest.mark.parametrize("module", MODULES)
def test_every_raise_site_raises_a_declared_code(module: str) -> None:
    unread = [site.where for site in SITES if site.path.name == module and not site.codes]
    undeclared = [(site.where, code) for site in SITES if site.path.name == module for code in site.codes
                  if not _declaring(code)]
    assert not unread, f"raise sites whose code cannot be read: {unread}"
    assert not undeclared, f"codes raised but declared by no check: {undeclared}"


def test_every_declared_code_is_raised() -> None:
    raised = {code for site in [*SITES, *endpoint_sites()] for code in site.codes}
    shared = {code.split("/", 1)[1] for code in raised if code.startswith("{")}
    unraised = sorted(code for check in REGISTRY.values() for code in check.codes
                      if code not in raised and code.split("/", 1)[1] not in shared
                      and not (check.kind == "live" and code.split("/", 1)[1] in TRANSPORT_CODES))
    assert not unraised, f"declared codes no raise site raises: {unraised}"


def test_no_two_raise_sites_share_a_code() -> None:
    counts = Counter(code for site in SITES for code in site.codes if not code.startswith("{"))
    shared = {code: [s.where for s in SITES if code in s.codes] for code, n in counts.items() if n > 1}
    assert not shared, f"codes raised from more than one site: {shared}"


def test_every_seam_code_is_reproduced_by_a_catalogued_mutation() -> None:
    from tests.test_fleets import MISSES

    expected = {e.code for name in ("incidents", "branches")
                for entry in load_catalogue(REPO / "fixtures" / name) for e in entry.expect}
    # A shape the example fleet has no service of (compose, docker run, llama-swap) is reproduced on its own fixture
    # fleet: each miss there is a mutation whose exact outcome table tests/test_fleets.py asserts.
    expected |= {code for _, _, changes in MISSES.values() for code in changes.values() if "/" in code}
    # A shared branch (the ledger's unknown device) is reproduced once, on one of the checks that declare it.
    reproduced_branches = {code.split("/", 1)[1] for code in expected}
    shared = {code.split("/", 1)[1] for site in SITES if site.kind == "seam" for code in site.codes
              if code.startswith("{")}
    unreproduced = sorted(code for check in REGISTRY.values() if check.kind == "seam" for code in check.codes
                          if code not in expected
                          and not (code.split("/", 1)[1] in shared and code.split("/", 1)[1] in reproduced_branches))
    assert not unreproduced, f"seam failure codes no catalogue entry expects: {unreproduced}"


def test_the_finder_reads_every_shape_of_raise_site(tmp_path: Path) -> None:
    (tmp_path / "seam_example.py").write_text(textwrap.dedent('''
        NAME = "example-check"
        CHECK = service_seam(NAME, cites=(), summary="", codes={})

        def _made(config, *, code: str) -> Failure:
            return CHECK.fail(config, code, where="w", observed="o", expected="e", fix="f")

        def _shared(config, check):
            raise check.fail(config, "shared", where="w", observed="o", expected="e", fix="f")

        def example(config):
            if config.a:
                raise CHECK.fail(config, "first", where="w", observed="o", expected="e", fix="f")
            if config.b:
                raise CHECK.fail(config, "second" if config.c else "third", where="w", observed="o", expected="e", fix="f")
            if config.d:
                raise _made(config, code="made")
            if config.g:
                raise ValueError("not a failure")
            return None
    '''))
    found = [(s.line, s.codes) for s in raise_sites(tmp_path)]
    assert found == [
        (9, ("{check}/shared",)),
        (13, ("example-check/first",)),
        (15, ("example-check/second", "example-check/third")),
        (17, ("example-check/made",)),
    ]


def test_the_finder_sees_the_checks_package() -> None:
    # A module whose checks declare no failure code has no raise site to find: profile-declared only ever says
    # "not judged" (a missing profile is a declaration fleetgate lacks, not a finding; docs/seams.md).
    codeless = {f"{c.func.__module__.rsplit('.', 1)[1]}.py" for c in REGISTRY.values() if not c.codes and c.func is not None}
    assert codeless == {"seam_profile.py"}
    assert not codeless & set(MODULES)
    assert {p.name for p in CHECKS.glob("seam_*.py")} <= set(MODULES) | codeless
    assert {p.name for p in CHECKS.glob("live_*.py")} <= set(MODULES)


def test_a_check_refuses_a_branch_it_does_not_declare() -> None:
    check = service_seam("example-refusal", cites=(), summary="an example", codes={"known": "what fired"})
    assert check.fail("svc", "known", where="w", observed="o", expected="e", fix="f").code == "example-refusal/known"
    with pytest.raises(UndeclaredCode, match=r"does not declare the failure code 'example-refusal/unknown'"):
        check.fail("svc", "unknown", where="w", observed="o", expected="e", fix="f")


def test_a_declaration_without_what_fired_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'example-empty/branch' declares no 'what fired'"):
        service_seam("example-empty", cites=(), summary="an example", codes={"branch": " "})


SHARED_BRANCHES = {code.split("/", 1)[1] for site in SITES for code in site.codes if code.startswith("{")}
"""Branches of helpers several checks share (the ledger's, systemd's, the process reader's): a page names them once."""


def _table(page: str) -> dict[str, str]:
    return dict(re.findall(r"^\| `([A-Za-z-]+/[a-z0-9-]+)` \| (.*) \|$", page, flags=re.MULTILINE))


def test_the_seams_page_lists_exactly_the_declared_seam_codes() -> None:
    page = (REPO / "docs" / "seams.md").read_text(encoding="utf-8")
    declared = {code: what for check in REGISTRY.values() if check.kind == "seam" for code, what in check.codes.items()}
    assert _table(page) == declared


@pytest.mark.parametrize("kind", ["live", "host"])
def test_the_live_and_host_pages_name_exactly_each_checks_own_codes(kind: str) -> None:
    """docs/live.md and docs/host.md give each check a row whose last column names its branches."""
    page = (REPO / "docs" / f"{kind}.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|.*\| ([^|]*) \|$", page, flags=re.MULTILINE)}
    wrong = {}
    for check in REGISTRY.values():
        if check.kind != kind:
            continue
        own = ({code.split("/", 1)[1] for code in check.codes} - (set(TRANSPORT_CODES) if kind == "live" else set())
               - SHARED_BRANCHES)
        listed = set(re.findall(r"`([a-z0-9-]+)`", rows.get(check.name, "")))
        unknown = listed - {code.split("/", 1)[1] for code in check.codes}
        if check.name not in rows or own - listed or unknown:
            wrong[check.name] = {"not named": sorted(own - listed), "not declared": sorted(unknown)}
    assert not wrong, f"docs/{kind}.md rows that do not name exactly the check's declared branches: {wrong}"
