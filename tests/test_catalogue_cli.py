"""`fleetgate incidents` (terminal, one id, counts, Markdown pages kept in sync) and `pytest --incident ID`."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.cli import main
from fleetgate.cli.incidents import markdown_pages
from fleetgate.incidents import apply, load_catalogue
from tests.test_mutations import CLEAN

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
DOCS = REPO / "docs" / "incidents"
ENTRIES = load_catalogue(REPO / "fixtures" / "incidents")
INCIDENTS = [e for e in ENTRIES if e.is_incident]


def test_the_checked_in_pages_are_what_the_catalogue_generates() -> None:
    pages = markdown_pages(INCIDENTS)
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")}
    assert sorted(on_disk) == sorted(pages), "regenerate: fleetgate incidents --markdown docs/incidents"
    stale = [name for name, text in pages.items() if on_disk[name] != text]
    assert stale == [], f"stale pages {stale}: regenerate with fleetgate incidents --markdown docs/incidents"
    assert len(pages) == 91 + 2


def test_every_page_links_resolve() -> None:
    import re

    for page in DOCS.glob("*.md"):
        text = re.sub(r"`[^`\n]*`", "", page.read_text(encoding="utf-8"))  # a code span (a mutation's text) links nothing
        for target, anchor in re.findall(r"\]\(([^)#]+\.md)(?:#([^)]+))?\)", text):
            assert (DOCS / target).is_file(), f"{page.name} links {target}"
            if anchor:
                assert f"### {anchor.upper()}" in (DOCS / target).read_text(encoding="utf-8"), f"{page.name}: #{anchor}"


def test_list_and_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("INC-")]
    assert [r.split()[0] for r in rows] == [e.id for e in INCIDENTS]
    assert main(["incidents", "--counts"]) == 0
    counts = dict(reversed(line.split(" ", 1)) for line in capsys.readouterr().out.splitlines())
    by_kind = {k: sum(e.caught == k for e in INCIDENTS) for k in ("offline", "live", "host", "offline (pending)", "not checkable")}
    assert counts == {**{k: str(v) for k, v in by_kind.items()}, "incidents": "91"}


def test_one_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "--id", "INC-53"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("INC-53 stale-drop-in-zealot-ptq1 (2026-10-18; frank-zealot)")
    assert "  codes:   serve-script-renders/sources-outside-repo" in out
    assert main(["incidents", "--id", "B-SH-4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "B-SH-4 (invariant, B.8 Shell and env-file semantics)"
    assert out[-1] == "  incidents: INC-53"


def test_an_unknown_id_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "--id", "B-XX-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetgate: B-XX-1: no such id")


def test_markdown_writes_the_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "--markdown", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in DOCS.glob("*.md"))


def _expected(guards: set[str], changes: dict[tuple[str, str], str] | None = None) -> dict[str, int]:
    table = {**CLEAN, **(changes or {})}
    kept = [v for (subject, check), v in table.items() if check in guards]
    return {"passed": kept.count("passed"), "skipped": kept.count("skipped"),
            "failed": sum(v not in ("passed", "skipped") for v in kept), "deselected": len(table) - len(kept)}


def test_pytest_incident_runs_the_checks_that_guard_it(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(str(REPO / "seams"), f"--fleet={FLEET / 'fleet.toml'}", "--incident", "INC-53",
                                          "-p", "no:cacheprovider", "--import-mode=importlib")
    result.assert_outcomes(**_expected({"serve-script-renders"}))


def test_pytest_incident_on_the_mutated_fleet_fails_it(pytester: pytest.Pytester, tmp_path: Path) -> None:
    entry = next(e for e in ENTRIES if e.id == "INC-59")
    fleet = apply(entry, FLEET, tmp_path / "fleet")
    result = pytester.runpytest_inprocess(str(REPO / "seams"), f"--fleet={fleet}", "--incident", "INC-59",
                                          "-p", "no:cacheprovider", "--import-mode=importlib")
    result.assert_outcomes(**_expected({"vision-mmproj"}, {("frank-zealot", "vision-mmproj"): "vision-mmproj/not-concurrent-projector"}))
    result.stdout.fnmatch_lines(["*frank-zealot: vision-mmproj/not-concurrent-projector*", "*guards:   INC-59*"])


@pytest.mark.parametrize(("incident", "message"), [
    ("INC-99", "--incident INC-99: no such entry in the catalogue"),
    ("INC-61", "--incident INC-61: no registered check guards it"),
])
def test_pytest_incident_refuses_what_it_cannot_run(pytester: pytest.Pytester, incident: str, message: str) -> None:
    result = pytester.runpytest_inprocess(str(REPO / "seams"), f"--fleet={FLEET / 'fleet.toml'}", "--incident", incident,
                                          "-p", "no:cacheprovider", "--import-mode=importlib")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: fleetgate: {message}*"])
