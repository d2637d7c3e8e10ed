"""Every check's declared codes are the codes its raise sites raise, and every seam code is reproduced.

The codes are declared once, with the check (``fleetgate.checks``: ``codes=``); the raise sites are found by
reading the source (tests/seams/raise_sites.py). A branch raised but not declared fails at run time
(``UndeclaredCode``) and here, before it reaches a user; a code declared but never raised is a promise nothing
keeps; two sites raising one code make the code say less than which branch fired. A seam code is reproduced
when a catalogue entry (fixtures/incidents, fixtures/branches) expects it: that entry's mutation of the example
fleet makes exactly that branch fire (tests/test_mutations.py).
"""

from __future__ import annotations

import ast
import re
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, TRANSPORT_CODES, UndeclaredCode, load_checks, service_seam
from fleetgate.incidents import load_catalogue
from tests.seams.raise_sites import CHECKS, REPO, Site, endpoint_sites, own_codes, raise_sites

SITES = raise_sites()
MODULES = sorted({site.path.name for site in SITES})
load_checks()


def _declared(code: str) -> bool:
    check = REGISTRY.get(code.split("/", 1)[0])
    return check is not None and code in check.codes


@pytest.mark.parametrize("module", MODULES)
def test_every_raise_site_raises_a_declared_code(module: str) -> None:
    unread = [site.where for site in SITES if site.path.name == module and not site.codes]
    undeclared = [(site.where, code) for site in SITES if site.path.name == module for code in site.codes
                  if not _declared(code)]
    assert not unread, f"raise sites whose code cannot be read: {unread}"
    assert not undeclared, f"codes raised but declared by no check: {undeclared}"


OWN_CODES = own_codes()


def unraised(sites: list[Site]) -> list[str]:
    """The declared codes that no site of ``sites`` (nor the endpoint client) raises. A transport code is the client's
    to raise for every live check, unless the check lists it among its own codes."""
    raised = {code for site in [*sites, *endpoint_sites()] for code in site.codes}
    return sorted(code for check in REGISTRY.values() for code in check.codes
                  if code not in raised and not (check.kind == "live" and code.split("/", 1)[1] in TRANSPORT_CODES
                                                 and code not in OWN_CODES))


def test_every_declared_code_is_raised() -> None:
    assert not unraised(SITES), f"declared codes no raise site raises: {unraised(SITES)}"


def test_no_two_raise_sites_share_a_code() -> None:
    counts = Counter(code for site in SITES for code in site.codes)
    shared = {code: [s.where for s in SITES if code in s.codes] for code, n in counts.items() if n > 1}
    assert not shared, f"codes raised from more than one site: {shared}"


class _Delete(ast.NodeTransformer):
    """The source less one raise site: its ``raise``/``return`` statement becomes ``pass``."""

    def __init__(self, line: int) -> None:
        self.line = line

    def visit_Raise(self, node: ast.Raise) -> ast.stmt:
        return ast.Pass() if node.lineno == self.line else node

    def visit_Return(self, node: ast.Return) -> ast.stmt:
        return ast.Pass() if node.lineno == self.line else node


@pytest.fixture(scope="module")
def checks_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("checks") / "checks"
    shutil.copytree(CHECKS, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _without(site: Site, copy: Path) -> list[Site]:
    """Every raise site, read again from ``copy`` (of fleetgate/checks) with ``site``'s statement deleted."""
    module = copy / site.path.name
    text = site.path.read_text(encoding="utf-8")
    module.write_text(ast.unparse(ast.fix_missing_locations(_Delete(site.line).visit(ast.parse(text)))), encoding="utf-8")
    try:
        return raise_sites(copy)
    finally:
        module.write_text(text, encoding="utf-8")


def test_deleting_the_unit_exec_args_refused_raise_site_leaves_its_code_unraised(checks_copy: Path) -> None:
    """Issue 31: the scan once read serve-script-renders' branches (an ``attempt_seam``) as a shared helper's, and its
    ``refused`` excused unit-exec-args' own: deleting that raise site passed both code tests."""
    (site,) = [s for s in SITES if s.codes == ("unit-exec-args/refused",)]
    assert site.path == CHECKS / "seam_units.py"
    left = _without(site, checks_copy)
    assert len(left) == len(SITES) - 1
    assert unraised(left) == ["unit-exec-args/refused"]


UNSEEN_DELETIONS = {
    # A transport branch the check raises itself, without listing it among its own codes: the client may raise it for
    # every live check, so a code test cannot tell the site is gone (list it in the check's codes= to hold it here).
    "live-stream/rate-limited", "live-stream/refused",
    # Raised from two places, the readiness probe (fleetgate/live/endpoint.py) and the check: either one is enough.
    "live-alias/not-listed",
}
"""The raise sites whose deletion no code test sees, each for the reason given: any other is a hole."""


def test_deleting_any_raise_site_leaves_its_codes_unraised(checks_copy: Path) -> None:
    """Every other site is the only one to raise what it raises: without it, its codes (a helper's: its branch for
    every check passed to it) are declared and raised nowhere."""
    unseen: set[str] = set()
    wrong: dict[str, list[str]] = {}
    for site in SITES:
        found = unraised(_without(site, checks_copy))
        if not found:
            unseen |= set(site.codes)
        elif found != sorted(site.codes):
            wrong[site.where] = found
    assert not wrong, f"deleting these sites left other codes unraised than theirs: {wrong}"
    assert unseen == UNSEEN_DELETIONS


def test_every_seam_code_is_reproduced_by_a_catalogued_mutation() -> None:
    from tests.test_fleets import MISSES

    expected = {e.code for name in ("incidents", "branches")
                for entry in load_catalogue(REPO / "fixtures" / name) for e in entry.expect}
    # A shape the example fleet has no service of (compose, docker run, llama-swap) is reproduced on its own fixture
    # fleet: each miss there is a mutation whose exact outcome table tests/test_fleets.py asserts.
    expected |= {code for _, _, changes in MISSES.values() for code in changes.values() if "/" in code}
    # A shared branch (the ledger's unknown device) is reproduced once, on one of the checks that declare it.
    reproduced_branches = {code.split("/", 1)[1] for code in expected}
    shared = {code.split("/", 1)[1] for site in SITES if site.kind == "seam" and site.shared for code in site.codes}
    unreproduced = sorted(code for check in REGISTRY.values() if check.kind == "seam" for code in check.codes
                          if code not in expected
                          and not (code.split("/", 1)[1] in shared and code.split("/", 1)[1] in reproduced_branches))
    assert not unreproduced, f"seam failure codes no catalogue entry expects: {unreproduced}"


def test_the_finder_reads_every_shape_of_raise_site(tmp_path: Path) -> None:
    (tmp_path / "seam_example.py").write_text(textwrap.dedent('''
        NAME = "example-check"

        def _made(config, *, code: str) -> Failure:
            return example_check.fail(config, code, where="w", observed="o", expected="e", fix="f")

        def _shared(config, check):
            raise check.fail(config, "shared", where="w", observed="o", expected="e", fix="f")

        def _uncalled(config, check):
            raise check.fail(config, "nobody-passes-a-check", where="w", observed="o", expected="e", fix="f")

        @service_seam(name=NAME, cites=(), summary="", codes={})
        def example_check(config):
            if config.a:
                raise example_check.fail(config, "first", where="w", observed="o", expected="e", fix="f")
            if config.b:
                raise example_check.fail(config, "second" if config.c else "third", where="w", observed="o", expected="e", fix="f")
            if config.d:
                raise _made(config, code="made")
            if config.g:
                raise ValueError("not a failure")
            if config.h:
                raise OTHER.fail(config, "not-a-declaration", where="w", observed="o", expected="e", fix="f")
            _shared(config, check=example_check)
            return None

        OTHER = make_something(NAME)

        @attempt_seam(cites=(), summary="", codes={})
        def another_check(attempt):
            _shared(attempt, another_check)

        @service_seam(cites=(), summary="", codes={}).needing(lambda config: config.value)
        def needing_check(config, value):
            raise needing_check.fail(config, "needed", where="w", observed="o", expected="e", fix="f")
    '''))
    found = [(s.line, s.codes) for s in raise_sites(tmp_path)]
    # a helper's branch is raised for each check passed to it (by position or keyword), a check named by its
    # function unless it says name=; a module-level owner that is no declaration, or a helper no call passes a check,
    # leaves the site unread (a test above names it)
    assert found == [
        (8, ("another-check/shared", "example-check/shared")),
        (11, ()),
        (16, ("example-check/first",)),
        (18, ("example-check/second", "example-check/third")),
        (20, ("example-check/made",)),
        (24, ()),
        (36, ("needing-check/needed",)),
    ]


def test_the_finder_sees_the_checks_package() -> None:
    # Every check declares a failure code (a check that cannot fail is a defect): profile-declared fails where the
    # fleet keeps the model-profiles policy and is not judged elsewhere (docs/seams.md).
    codeless = {f"{c.func.__module__.rsplit('.', 1)[1]}.py" for c in REGISTRY.values() if not c.codes and c.func is not None}
    assert codeless == set()
    assert not codeless & set(MODULES)
    assert {p.name for p in CHECKS.glob("seam_*.py")} <= set(MODULES) | codeless
    assert {p.name for p in CHECKS.glob("live_*.py")} <= set(MODULES)


def test_a_check_refuses_a_branch_it_does_not_declare() -> None:
    check = service_seam(cites=(), summary="an example", codes={"known": "what fired"}).declare("example_refusal")
    assert check.fail("svc", "known", where="w", observed="o", expected="e", fix="f").code == "example-refusal/known"
    with pytest.raises(UndeclaredCode, match=r"does not declare the failure code 'example-refusal/unknown'"):
        check.fail("svc", "unknown", where="w", observed="o", expected="e", fix="f")


def test_a_declaration_without_what_fired_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'example-empty/branch' declares no 'what fired'"):
        service_seam(cites=(), summary="an example", codes={"branch": " "}).declare("example_empty")


SHARED_BRANCHES = {code.split("/", 1)[1] for site in SITES if site.shared for code in site.codes}
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
