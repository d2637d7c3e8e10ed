"""Every catchable incident is reproduced: its mutation of the example fleet fails exactly its failure codes.

The seams run in this process on a mutated copy of fixtures/fleet (``fleetgate.runner.reproduce``,
the same subjects the plugin parametrises). An entry that no longer fails is stale and fails here; a
check that fails besides the expected ones fails here; every other check keeps its clean-fleet outcome.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.incidents import Entry, guarding, load_catalogue
from fleetgate.runner import Outcome, reproduce, run_seams
from tests.test_mutations import CLEAN

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
ENTRIES = load_catalogue(REPO / "fixtures" / "incidents")
# The incidents; rules/ and fixtures/branches run through the plugin in tests/test_mutations.py.
MUTATIONS = [e for e in ENTRIES if e.is_incident and e.reproduction.kind == "mutation"]
# Host faults reproduced by a named test in tests/host (tests/test_catalogue_ids.py holds it to the codes).
HOSTS = [e for e in ENTRIES if e.is_incident and e.reproduction.kind == "host" and e.reproduction.test]


@pytest.fixture(scope="module")
def baseline() -> dict[tuple[str, str], str]:
    return _table(run_seams(FLEET / "fleet.toml"))


def _table(outcomes: list[Outcome]) -> dict[tuple[str, str], str]:
    """(subject, check) -> passed, skipped, not-judged, or the failure code: the form of tests/test_mutations.py's
    CLEAN."""
    return {(o.subject, o.check): o.code if o.outcome == "failed" and o.code else o.outcome for o in outcomes}


def test_in_process_runs_give_the_plugins_clean_table(baseline: dict[tuple[str, str], str]) -> None:
    """The in-process runner sees exactly what `pytest seams/` sees on the clean fleet (CLEAN, by hand)."""
    assert baseline == CLEAN


@pytest.mark.parametrize("entry", MUTATIONS, ids=[e.id for e in MUTATIONS])
def test_reproduction_fails_exactly_its_codes(entry: Entry, baseline: dict[tuple[str, str], str], tmp_path: Path) -> None:
    outcomes = reproduce(entry, FLEET, tmp_path)
    table = _table(outcomes)
    failing = {(e.subject, e.check) for e in entry.expect}
    expected = dict(baseline)
    for subject, check in entry.skip:
        if check == "*":  # every other seam of a service that no longer renders
            expected.update({k: "skipped" for k, v in baseline.items() if k[0] == subject and k not in failing})
        else:
            expected[(subject, check)] = "skipped"
    for subject, check in entry.passes:
        assert baseline.get((subject, check)) == "skipped", f"{entry.id}: passes {subject}: {check}, not a skip when clean"
        expected[(subject, check)] = "passed"
    for subject, check in entry.not_judged:
        assert baseline.get((subject, check)) == "passed", f"{entry.id}: not judged {subject}: {check}, not a pass when clean"
        expected[(subject, check)] = "not-judged"
    for e in entry.expect:
        expected[(e.subject, e.check)] = e.code
    failed = {k: v for k, v in table.items() if v not in ("passed", "skipped", "not-judged")}
    assert failed, f"{entry.id} is stale: its mutation no longer fails any seam (expected {sorted(entry.codes)})"
    changed = {k: (baseline.get(k), v) for k, v in table.items() if expected.get(k) != v}
    assert table == expected, f"{entry.id}: (clean, now) where the entry expects otherwise: {changed}"
    # Every failure is one an operator can act on, and names the incidents its code guards.
    for o in outcomes:
        if o.outcome != "failed":
            continue
        assert o.code is not None
        lines = o.text.splitlines()
        assert lines[0].startswith(f"{o.subject}: {o.code}")
        for label in ("where:", "observed:", "expected:", "fix:"):
            assert any(line.startswith(f"  {label}") for line in lines), f"{entry.id}: no {label} line"
        assert "Traceback" not in o.text
        if entry.is_incident:
            assert entry.id in guarding(o.code)
            assert any(line.startswith("  guards:") and entry.id in line for line in lines)


@pytest.mark.parametrize("entry", HOSTS, ids=[e.id for e in HOSTS])
def test_host_reproduction_runs(entry: Entry, pytester: pytest.Pytester) -> None:
    """The named host test runs and passes: the host check fails with the entry's code on the reproduced host."""
    assert entry.reproduction.test is not None
    result = pytester.runpytest_subprocess(str(REPO / entry.reproduction.test), "-p", "no:cacheprovider",
                                           "--rootdir", str(REPO), timeout=300)
    result.assert_outcomes(passed=1)
