"""Reports people act on: JUnit (xunit2 and xunit1), JSON lines, the fleetgate report, waivers, --check.

Every run here is the real plugin on a copy of the example fleet (pytester). The reports are checked
against their schemas (the xunit2 XSD shipped beside this file, fleetgate's report schema), for the
properties of every test case (under xdist too), and for the absence of the API key.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema

from fleetgate.checks import get_check
from fleetgate.manifest import load_fleet
from fleetgate.report import report_schema

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
XUNIT2 = REPO / "tests" / "schemas" / "xunit2.xsd"
IMPORT_BY_PATH = "--import-mode=importlib"
FAKE_KEY = "sk-fleetgate-fake-4c9e1f0b7a"
FAILING = ("frank-medium", "vision-mmproj")
CODE = "vision-mmproj/no-mmproj"
"""The failure code of vision-mmproj when the rendered argv has no --mmproj (what VISION=off does)."""


@pytest.fixture
def seams(pytester: pytest.Pytester) -> Path:
    target = pytester.path / "seams"
    shutil.copytree(REPO / "seams", target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def copy_fleet(pytester: pytest.Pytester, *, vision_off: bool = False, waivers: str = "") -> Path:
    target = pytester.path / "fleet"
    shutil.copytree(FLEET, target)
    if vision_off:
        env = target / "scripts" / "frank-medium.env"
        text = env.read_text()
        assert "VISION=on" in text
        env.write_text(text.replace("VISION=on", "VISION=off"))
    if waivers:
        manifest = target / "fleet.toml"
        manifest.write_text(manifest.read_text() + "\n" + waivers)
    return target / "fleet.toml"


def waiver(code: str, service: str, expires: str) -> str:
    return f'[[waivers]]\ncode = "{code}"\nservice = "{service}"\nreason = "projector rollout pending"\nexpires = {expires}\n'


def suite_properties(junit: Path) -> dict[str, dict[str, Any]]:
    """fleetgate's per-case properties as xunit2 writes them: ``fleetgate[NODEID]`` on the suite."""
    root = ET.parse(junit).getroot()
    found = {}
    for prop in root.iter("property"):
        name = prop.get("name", "")
        if name.startswith("fleetgate[") and name.endswith("]"):
            found[name[len("fleetgate["):-1]] = json.loads(prop.get("value", ""))
    return found


def case_ids(junit: Path) -> dict[str, str]:
    """``test_x.py::test_y[param]`` -> outcome, for every test case of a JUnit file."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        outcome = "passed"
        for child, word in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            if case.find(child) is not None:
                outcome = word
        outcomes[f"{module}.py::{case.get('name')}"] = outcome
    return outcomes


def short(nodeid: str) -> str:
    return nodeid.split("/")[-1]


def test_junit_jsonl_and_report_under_xdist_carry_every_case(
    pytester: pytest.Pytester, seams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETGATE_API_KEY", FAKE_KEY)
    fleet_toml = copy_fleet(pytester, vision_off=True)
    junit, jsonl, report = (pytester.path / n for n in ("junit.xml", "run.jsonl", "fleetgate.json"))
    result = pytester.runpytest_subprocess(
        IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-n", "4", "-p", "no:cacheprovider",
        f"--junitxml={junit}", f"--report-log={jsonl}", f"--fleetgate-report={report}",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED

    # JUnit: valid xunit2, one fleetgate property set per test case, each naming its own case.
    xmlschema.XMLSchema(str(XUNIT2)).validate(str(junit))
    cases = case_ids(junit)
    props = {short(k): v for k, v in suite_properties(junit).items()}
    assert set(props) == set(cases)
    for nodeid, value in props.items():
        assert nodeid.endswith(f"[{value['service']}]"), (nodeid, value)
        check = get_check(value["check"])
        assert value["cites"] == ",".join(check.cites)
        assert value["incidents"] == ",".join(c for c in check.cites if c.startswith("INC-"))
    assert {k for k, outcome in cases.items() if outcome == "failed"} == {"test_vision.py::test_vision_mmproj[frank-medium]"}
    assert set(cases.values()) <= {"passed", "failed", "skipped"}
    skipped = {k for k, outcome in cases.items() if outcome == "skipped"}
    assert props["test_vision.py::test_vision_mmproj[frank-medium]"]["code"] == CODE
    assert [k for k, v in props.items() if "code" in v] == ["test_vision.py::test_vision_mmproj[frank-medium]"]
    assert "INC-08" in props["test_vision.py::test_vision_mmproj[frank-medium]"]["incidents"].split(",")
    figures = props["test_memory.py::test_card_floor[frank-medium]"]["figures"]
    assert set(figures["headroom_bytes"]) == {"ROCm0", "ROCm1"}

    # JSON lines: every call report of a seam carries the properties; the failure its code.
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    calls = [r for r in lines if r.get("$report_type") == "TestReport" and r["when"] == "call"]
    assert {short(r["nodeid"]): r["outcome"] for r in calls} == cases
    for record in calls:
        found = dict(record["user_properties"])
        assert record["nodeid"].endswith(f"[{found['fleetgate.service']}]")
        assert "fleetgate.check" in found
        assert ("fleetgate.code" in found) == (record["outcome"] == "failed")
    failing = next(r for r in calls if r["outcome"] == "failed")
    assert dict(failing["user_properties"])["fleetgate.code"] == CODE

    # The fleetgate report: schema-valid, every case once, the ledger's figures per card.
    document = json.loads(report.read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    outcomes = {short(c["test"]): c["outcome"] for s in document["services"].values() for c in s["checks"]}
    assert outcomes == cases
    assert {(service, c["check"]) for service, s in document["services"].items() for c in s["checks"]
            if c["outcome"] == "failed"} == {FAILING}
    assert {k for k, v in outcomes.items() if v == "skipped"} == skipped
    medium = document["services"]["frank-medium"]
    fleet = load_fleet(fleet_toml)
    host = fleet.hosts[fleet.services["frank-medium"].host]
    assert set(medium["headroom_bytes"]) == {c.name for c in host.cards}
    floor = host.card_floor_bytes or 0
    assert {k: v - floor for k, v in medium["free_bytes"].items()} == medium["headroom_bytes"]
    margins = [*medium["headroom_bytes"].values(), medium["balance_margin_bytes"],
               medium["prompt_cache"]["margin_bytes"], medium["prompt_cache"]["ram_margin_bytes"]]
    assert medium["tightest_margin"]["bytes"] == min(margins)
    tally: dict[str, int] = {}
    for entry in medium["checks"]:
        tally[entry["outcome"]] = tally.get(entry["outcome"], 0) + 1
    assert medium["outcomes"] == tally and tally["failed"] == 1

    # No secret anywhere.
    for text in (junit.read_text(), jsonl.read_text(), report.read_text(), result.stdout.str(), result.stderr.str()):
        assert FAKE_KEY not in text


def test_xunit1_keeps_the_properties_on_each_test_case(pytester: pytest.Pytester, seams: Path) -> None:
    fleet_toml = copy_fleet(pytester)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        IMPORT_BY_PATH, str(seams / "test_memory.py"), f"--fleet={fleet_toml}", "-n", "2", "-p", "no:cacheprovider",
        f"--junitxml={junit}", "-o", "junit_family=xunit1",
    )
    assert result.ret == pytest.ExitCode.OK
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert cases
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert case.get("name", "").endswith(f"[{props['fleetgate.service']}]")
        assert props["fleetgate.check"] in {"card-floor", "card-balance", "drafter-kv-fits", "prompt-cache-holds-slot"}
        assert "fleetgate.code" not in props


def test_the_seams_end_with_a_summary_per_service(pytester: pytest.Pytester, seams: Path) -> None:
    fleet_toml = copy_fleet(pytester, vision_off=True)
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-p", "no:cacheprovider",
                                f"--fleetgate-report={report}")
    document = json.loads(report.read_text())
    medium = document["services"]["frank-medium"]
    counts = medium["outcomes"]
    tight = medium["tightest_margin"]
    result.stdout.fnmatch_lines([
        "*fleetgate: per service*",
        f"frank-medium: {counts['passed']} passed, 1 failed, {counts.get('skipped', 0)} skipped",
        "  headroom above the floor: ROCm0 * GiB, ROCm1 * GiB",
        f"  tightest margin: {tight['bytes'] / (1 << 30):.2f} GiB ({tight['what']})",
    ])


def test_a_waived_failure_is_expected_until_its_date(pytester: pytest.Pytester, seams: Path) -> None:
    fleet_toml = copy_fleet(pytester, vision_off=True, waivers=waiver(CODE, "frank-medium", "2999-12-31"))
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}",
                                "-p", "no:cacheprovider", f"--fleetgate-report={report}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("xfailed") == 1 and "failed" not in outcomes
    checks = json.loads(report.read_text())["services"]["frank-medium"]["checks"]
    assert [(c["check"], c["outcome"]) for c in checks] == [("vision-mmproj", "xfailed")]
    assert checks[0]["code"] == CODE
    assert checks[0]["waiver"].startswith(f"waiver {CODE} for frank-medium until 2999-12-31")
    assert result.ret == pytest.ExitCode.OK


def test_an_expired_waiver_fails_again_naming_itself(
    pytester: pytest.Pytester, seams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet_toml = copy_fleet(pytester, vision_off=True, waivers=waiver("vision-mmproj", "frank-medium", "2027-03-31"))
    monkeypatch.setenv("FLEETGATE_TODAY", "2027-04-01")
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}",
                                "-p", "no:cacheprovider", f"--fleetgate-report={report}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and "xfailed" not in outcomes, outcomes
    checks = json.loads(report.read_text())["services"]["frank-medium"]["checks"]
    assert [(c["check"], c["outcome"], c["code"]) for c in checks] == [("vision-mmproj", "failed", CODE)]
    assert checks[0]["waiver"].startswith("expired: waiver vision-mmproj for frank-medium until 2027-03-31")
    result.stdout.fnmatch_lines([f"frank-medium: {CODE}: the waiver vision-mmproj for frank-medium until 2027-03-31*"
                                 "expired on 2027-03-31 (fleet.toml:*)*"])
    # On its last day the waiver still holds.
    monkeypatch.setenv("FLEETGATE_TODAY", "2027-03-31")
    again = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}", "-p", "no:cacheprovider")
    assert again.parseoutcomes().get("xfailed") == 1 and "failed" not in again.parseoutcomes()


def test_a_waiver_whose_check_passes_is_reported_unused(pytester: pytest.Pytester, seams: Path) -> None:
    fleet_toml = copy_fleet(pytester, waivers=waiver("vision-mmproj", "frank-medium", "2999-12-31"))
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}",
                                "-p", "no:cacheprovider", f"--fleetgate-report={report}")
    assert result.ret == pytest.ExitCode.OK
    checks = json.loads(report.read_text())["services"]["frank-medium"]["checks"]
    assert [(c["check"], c["outcome"]) for c in checks] == [("vision-mmproj", "passed")]
    assert checks[0]["waiver"].startswith("unused: waiver vision-mmproj for frank-medium")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (waiver("vision-mmproj", "frank-nope", "2999-12-31"),
         "ERROR: fleetgate: */fleet.toml:*: waivers[[]0[]].service: 'frank-nope' names no service or timeout chain;*"),
        (waiver("vision-mmproj", "frank-medium", "2999-02-30"),
         "ERROR: fleetgate: */fleet.toml:*: not valid TOML*"),
        ('[[waivers]]\ncode = "vision-mmproj"\nservice = "frank-medium"\nexpires = 2999-12-31\n',
         "ERROR: fleetgate: */fleet.toml:*: waivers.0: missing required key 'reason'"),
    ],
    ids=["unknown-service", "not-a-date", "no-reason"],
)
def test_a_malformed_waiver_is_one_line(pytester: pytest.Pytester, seams: Path, entry: str, expected: str) -> None:
    fleet_toml = copy_fleet(pytester, waivers=entry)
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def collected(result: pytest.RunResult) -> set[str]:
    return {short(line) for line in result.stdout.lines if "::" in line}


def test_check_selects_by_name_or_failure_code(pytester: pytest.Pytester, seams: Path) -> None:
    fleet_toml = copy_fleet(pytester)
    args = (IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-p", "no:cacheprovider", "--collect-only", "-q")
    everything = collected(pytester.runpytest(*args))
    vision = {n for n in everything if n.startswith("test_vision.py::test_vision_mmproj[")}
    assert vision and vision != everything
    assert collected(pytester.runpytest(*args, "--check", "vision-mmproj")) == vision
    assert collected(pytester.runpytest(*args, "--check", CODE)) == vision
    both = {n for n in everything if n.startswith(("test_vision.py::test_vision_mmproj[", "test_timeouts.py::"))}
    assert collected(pytester.runpytest(*args, "--check", "vision-mmproj", "--check", "timeouts-nest")) == both
    result = pytester.runpytest(*args, "--check", "no-such-check")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --check no-such-check: no check named 'no-such-check'; registered: *"])
