"""Every seam is shown failing: each catalogued mutation of the example fleet fails exactly its checks.

The seams run on a mutated copy of fixtures/fleet through the real plugin (pytester), and every
failure must name its subject, check, file:line, what was observed and expected, and the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.incidents import Entry, apply, load_catalogue

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
SEAMS = REPO / "seams"
CATALOGUE = load_catalogue(REPO / "fixtures" / "incidents")


def run_seams(pytester: pytest.Pytester, fleet_toml: Path) -> pytest.HookRecorder:
    return pytester.inline_run(str(SEAMS), f"--fleet={fleet_toml}", "-p", "no:cacheprovider", "-q", "--import-mode=importlib")


def failure_key(text: str) -> tuple[str, str]:
    """('frank-medium', 'vision-mmproj') from the first line 'frank-medium: vision-mmproj [B-MM-1, ...]'."""
    subject, _, rest = text.splitlines()[0].partition(": ")
    return subject, rest.split(" [")[0].split("/")[0]


def test_the_example_fleet_passes_every_seam(pytester: pytest.Pytester) -> None:
    recorder = run_seams(pytester, FLEET / "fleet.toml")
    passed, skipped, failed = recorder.listoutcomes()
    assert not failed, [str(r.longrepr) for r in failed]
    assert not skipped
    assert len(passed) >= 20


@pytest.mark.parametrize("entry", CATALOGUE, ids=[e.id for e in CATALOGUE])
def test_mutation_fails_exactly_its_checks(entry: Entry, pytester: pytest.Pytester, tmp_path: Path) -> None:
    fleet_toml = apply(entry, FLEET, tmp_path / "fleet")
    recorder = run_seams(pytester, fleet_toml)
    failures = {failure_key(str(report.longrepr)): str(report.longrepr) for report in recorder.getfailures()}
    expected = {(e.subject, e.check): e for e in entry.expect}
    assert set(failures) == set(expected), f"{entry.id}: failed {sorted(failures)}, expected {sorted(expected)}"
    for key, expectation in expected.items():
        text = failures[key]
        for label in ("where:", "observed:", "expected:", "fix:"):
            assert f"  {label}" in text, f"{entry.id}: no {label} line in\n{text}"
        for fragment in expectation.message:
            assert fragment in text, f"{entry.id}: {fragment!r} not in\n{text}"
        assert "Traceback" not in text
    _, _, errors_free = recorder.countoutcomes()
    assert len(recorder.getreports("pytest_collectreport")) >= 1
    assert errors_free == len(expected)
