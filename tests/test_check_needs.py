"""``@CHECK.needing(needs)``: a check's applicability and the value it needs, found once and handed over narrowed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, Check, Lacks, NotApplicable, NotJudged, find_check
from fleetgate.runner import run_seams

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Box:
    name: str
    content: str | None


@pytest.fixture
def check() -> Iterator[Check[Box]]:
    declared: Check[Box] = Check(name="test-needs", kind="seam", subject="service", cites=(), summary="s",
                                 codes={"test-needs/empty": "the box holds an empty string"})
    yield declared
    REGISTRY.pop("test-needs", None)


def _content(box: Box) -> str | Lacks:
    if box.content is None:
        return Lacks(f"{box.name} holds nothing: declare its content")
    if box.content == "?":
        return Lacks(f"not judged: {box.name}'s content is unknown")
    return box.content


def test_the_function_gets_the_value_needs_found(check: Check[Box]) -> None:
    seen: list[tuple[str, str]] = []

    @check.needing(_content)
    def test_needs(box: Box, content: str) -> None:
        seen.append((box.name, content))
        if not content:
            raise check.fail(box, "empty", where="box", observed="''", expected="a word", fix="fill it")

    assert REGISTRY["test-needs"] is check and test_needs.__qualname__.endswith("test_needs")
    check(Box("a", "apple"))
    assert seen == [("a", "apple")]
    with pytest.raises(AssertionError, match="test-needs/empty"):
        check(Box("b", ""))


def test_what_needs_lacks_is_the_reason_the_check_cannot_judge(check: Check[Box]) -> None:
    check.needing(_content)(lambda box, content: None)
    assert check.why_not(Box("a", None)) == "a holds nothing: declare its content"
    assert check.why_not(Box("a", "apple")) is None
    # Called without asking first, the check says the same: not applicable, or not judged.
    with pytest.raises(NotApplicable, match=r"^a holds nothing") as raised:
        check(Box("a", None))
    assert not isinstance(raised.value, NotJudged)
    with pytest.raises(NotJudged, match=r"^not judged: q's content is unknown$"):
        check(Box("q", "?"))


def test_a_check_says_when_it_cannot_judge_one_way(check: Check[Box]) -> None:
    check.requires = lambda box: None
    with pytest.raises(ValueError, match="requires= and needs"):
        check.needing(_content)


def test_build_script_takes_its_build_from_needs() -> None:
    declared = find_check("build-script")
    assert declared.requires is not None
    outcomes = {(o.subject, o.outcome, o.text) for o in run_seams(REPO / "fixtures" / "fleet" / "fleet.toml",
                                                                   ["build-script"])}
    # frank-medium declares its build (fleet.toml); the others declare none and say so, each in its own words.
    assert outcomes == {("frank-medium", "passed", "")} | {
        (name, "skipped", f"{name} declares no build script (services.{name}.build in fleet.toml)")
        for name in ("frank-archon", "frank-zealot", "frank-dragoon", "frank-tts", "reference")}
