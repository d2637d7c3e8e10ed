"""Every catchable incident is reproduced: its mutation of the example fleet fails exactly its failure codes.

The seams run in this process on a mutated copy of fixtures/fleet (``fleetgate.incidents.reproduce``,
the same subjects the plugin parametrises). An entry that no longer fails is stale and fails here; a
check that fails besides the expected ones fails here; every other check keeps its clean-fleet outcome.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.incidents import Entry, Outcome, guarding, load_catalogue, reproduce, run_seams

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
ENTRIES = load_catalogue(REPO / "fixtures" / "incidents")
MUTATIONS = [e for e in ENTRIES if e.reproduction.kind == "mutation"]
RENDERS = "serve-script-renders"


@pytest.fixture(scope="module")
def baseline() -> dict[tuple[str, str], Outcome]:
    return {(o.check, o.subject): o for o in run_seams(FLEET / "fleet.toml")}


def test_the_example_fleet_passes_every_seam(baseline: dict[tuple[str, str], Outcome]) -> None:
    assert {key: o.outcome for key, o in baseline.items() if o.outcome != "passed"} == {}
    # Every service is rendered, and every timeout chain is checked.
    assert {subject for check, subject in baseline if check == RENDERS} == {
        "frank-medium", "frank-archon", "frank-zealot", "frank-dragoon", "frank-tts", "reference"}
    assert {subject for check, subject in baseline if check == "timeouts-nest"} == {
        "tts-budgets", "scriptwriting-under-webui", "scriptwriting-at-app-default"}


@pytest.mark.parametrize("entry", MUTATIONS, ids=[e.id for e in MUTATIONS])
def test_reproduction_fails_exactly_its_codes(entry: Entry, baseline: dict[tuple[str, str], Outcome], tmp_path: Path) -> None:
    outcomes = reproduce(entry, FLEET, tmp_path)
    failed = {(o.subject, o.code) for o in outcomes if o.outcome == "failed"}
    expected = {(e.subject, e.code) for e in entry.expect}
    assert failed, f"{entry.id} is stale: its mutation no longer fails any seam (expected {sorted(expected)})"
    assert failed == expected, f"{entry.id}: failed {sorted(failed)}, expected {sorted(expected)}"
    # Nothing else moved: a check on a service that did not render skips; every other keeps its clean outcome.
    refused = {subject for subject, code in failed if code.split("/")[0] == RENDERS}
    assert {(o.check, o.subject) for o in outcomes if o.subject not in refused} == {k for k in baseline if k[1] not in refused}
    for o in outcomes:
        if o.outcome == "failed":
            continue
        want = "skipped" if o.subject in refused and o.check != RENDERS else baseline[(o.check, o.subject)].outcome
        assert o.outcome == want, f"{entry.id}: {o.check}[{o.subject}] {o.outcome}, expected {want}"
    # Every failure is one an operator can act on, and names the incidents its code guards.
    for o in outcomes:
        if o.outcome != "failed":
            continue
        assert o.code is not None
        lines = o.text.splitlines()
        assert lines[0].startswith(f"{o.subject}: {o.code}")
        for label in ("where:", "observed:", "expected:", "fix:"):
            assert any(line.startswith(f"  {label}") for line in lines), f"{entry.id}: no {label} line"
        if entry.is_incident:
            assert entry.id in guarding(o.code)
            assert any(line.startswith("  guards:") and entry.id in line for line in lines)
