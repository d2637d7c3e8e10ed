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
from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.report import report_schema
from tests.secrets_used import SECRETS

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
XUNIT2 = REPO / "tests" / "schemas" / "xunit2.xsd"
IMPORT_BY_PATH = "--import-mode=importlib"
FAKE_KEY = SECRETS["REPORT_KEY"]
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
    # The example fleet's waived engine-auth failures carry their code and waiver (fleet.toml [[waivers]]).
    assert [k for k, v in props.items() if "code" in v and "waiver" not in v] == ["test_vision.py::test_vision_mmproj[frank-medium]"]
    assert sorted(k for k, v in props.items() if "waiver" in v) == [
        f"test_security.py::test_engine_auth[{s}]" for s in ("frank-archon", "frank-medium", "frank-zealot")]
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
        assert ("fleetgate.code" in found) == (record["outcome"] == "failed" or "fleetgate.waiver" in found)
    failing = next(r for r in calls if r["outcome"] == "failed")
    assert dict(failing["user_properties"])["fleetgate.code"] == CODE

    # The fleetgate report: schema-valid, every case once, the ledger's figures per card.
    document = json.loads(report.read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    # xunit2 has no xfail and no not-judged: a waived failure and a not-judged check are skipped cases there
    outcomes = {short(c["test"]): "skipped" if c["outcome"] in ("xfailed", "not-judged") else c["outcome"]
                for s in document["services"].values() for c in s["checks"]}
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
        # its engine-auth failure is waived (fleet.toml [[waivers]]): pytest's xfail, with the waiver's line
        # its chat template is its GGUF's own, and the model is not on this machine: not judged (chat-template)
        f"frank-medium: {counts['passed']} passed, 1 failed, {counts.get('skipped', 0)} skipped, 1 not judged, "
        f"{counts['xfailed']} xfailed",
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
         "ERROR: fleetgate: */fleet.toml:*: waivers[[]3[]].service: 'frank-nope' names no service or timeout chain;*"),
        (waiver("vision-mmproj", "frank-medium", "2999-02-30"),
         "ERROR: fleetgate: */fleet.toml:*: not valid TOML*"),
        ('[[waivers]]\ncode = "vision-mmproj"\nservice = "frank-medium"\nexpires = 2999-12-31\n',
         "ERROR: fleetgate: */fleet.toml:*: waivers.3: missing required key 'reason'"),
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


# One waived fleet: the example with two failures (vision off on frank-medium; tts-budgets' last two budgets equal,
# INC-45) and three waivers -- one that applies, one that expired, one whose check passes.
WAIVED_CHECKS = ("vision-mmproj", "timeouts-nest")
WAIVERS = (waiver(CODE, "frank-medium", "2999-12-31")
           + waiver("timeouts-nest", "tts-budgets", "2020-01-31")
           + waiver("timeouts-nest", "scriptwriting-under-webui", "2999-12-31"))
WAIVED_ENTRY = f'''id = "waived-fleet"
name = "waived-fleet"
summary = "two failures and three waivers: one applies, one expired, one unused"
expect = ["frank-medium: {CODE}", "tts-budgets: timeouts-nest/not-strictly-longer"]

[[mutation]]
file = "scripts/frank-medium.env"
replace = "VISION=on"
with = "VISION=off"

[[mutation]]
file = "podcast/podcast-app.env"
replace = "ESPERANTO_TTS_TIMEOUT=660"
with = "ESPERANTO_TTS_TIMEOUT=600"

[[mutation]]
file = "fleet.toml"
replace = """[[timeouts]]
name = "tts-budgets"
"""
with = """{WAIVERS}
[[timeouts]]
name = "tts-budgets"
"""
'''
PYTEST_WORDS = {"xfailed": "waived", "failed": "failed", "passed": "passed", "skipped": "skipped"}
"""pytest's word for each of the runner's outcomes (a waived failure is an expected one)."""


def _waiver_lines(fleet_toml: Path) -> list[int]:
    return [n for n, line in enumerate(fleet_toml.read_text().splitlines(), 1) if line == "[[waivers]]"]


def test_a_waived_fleet_gets_one_verdict_from_the_plugin_the_catalogue_and_the_runner(
    pytester: pytest.Pytester, seams: Path, tmp_path: Path
) -> None:
    from fleetgate.incidents import apply, load_catalogue
    from fleetgate.runner import reproduce, run_seams
    from tests.test_mutations import CLEAN

    (tmp_path / "entries").mkdir()
    (tmp_path / "entries" / "waived-fleet.toml").write_text(WAIVED_ENTRY, encoding="utf-8")
    (entry,) = load_catalogue(tmp_path / "entries", rules=False)
    fleet_toml = apply(entry, FLEET, tmp_path / "fleet")
    # the entry's three, before the example fleet's own engine-auth waivers (at the end of its fleet.toml)
    applies, expired, unused = _waiver_lines(fleet_toml)[:3]
    expected = {key: (outcome, None, None) for key, outcome in CLEAN.items() if key[1] in WAIVED_CHECKS}
    expected[("frank-medium", "vision-mmproj")] = (
        "waived", CODE, f"waiver {CODE} for frank-medium until 2999-12-31: projector rollout pending (fleet.toml:{applies})")
    expected[("tts-budgets", "timeouts-nest")] = (
        "failed", "timeouts-nest/not-strictly-longer",
        f"expired: waiver timeouts-nest for tts-budgets until 2020-01-31: projector rollout pending (fleet.toml:{expired})")
    expected[("scriptwriting-under-webui", "timeouts-nest")] = (
        "passed", None, "unused: waiver timeouts-nest for scriptwriting-under-webui until 2999-12-31: projector rollout "
        f"pending (fleet.toml:{unused}): the check passes; drop the waiver")

    def verdicts(outcomes: list[Any]) -> dict[tuple[str, str], tuple[str, str | None, str | None]]:
        return {(o.subject, o.check): (o.outcome, o.code, o.waiver.note if o.waiver else None)
                for o in outcomes if o.check in WAIVED_CHECKS}

    # The pytest-free runner, and the catalogue's reproduction of the same entry.
    here = run_seams(fleet_toml)
    assert verdicts(here) == expected
    assert verdicts(reproduce(entry, FLEET, tmp_path / "catalogue")) == expected
    expiry = next(o.text for o in here if o.subject == "tts-budgets" and o.check == "timeouts-nest").splitlines()[0]
    assert expiry == ("tts-budgets: timeouts-nest/not-strictly-longer: the waiver timeouts-nest for tts-budgets until "
                      f"2020-01-31: projector rollout pending expired on 2020-01-31 (fleet.toml:{expired}): the failure "
                      "counts again")

    # The plugin: each test's word and properties.
    recorder = pytester.inline_run(IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-p", "no:cacheprovider",
                                   *(f"--check={c}" for c in WAIVED_CHECKS))
    plugin: dict[tuple[str, str], tuple[str, str | None, str | None]] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        if report.when != "call" and not (report.when == "setup" and report.skipped):
            continue
        props = dict(report.user_properties)
        word = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        key = (props["fleetgate.service"], props["fleetgate.check"])
        plugin[key] = (PYTEST_WORDS[word], props.get("fleetgate.code"), props.get("fleetgate.waiver"))
        if key == ("tts-budgets", "timeouts-nest"):
            assert str(report.longrepr).splitlines()[0] == expiry
    assert plugin == expected


# -- figures and reporting hooks: nothing they meet escapes a hook ----------------------------------------------------

PODMAN_SCRIPT = """#!/usr/bin/env bash
# vLLM's CPU build in podman: the pool is pinned by VLLM_CPU_KVCACHE_SPACE in the container's env file.
set -euo pipefail
exec podman run --rm --name vllm-cpu \\
  -p "${PORT}:8000" \\
  -v /srv/models:/models:ro \\
  --env-file /opt/llm/config/vllm-cpu.env \\
  vllm/vllm-openai:v0.13.0 \\
  --model /models/Qwen3-8B-FP8 \\
  --served-model-name qwen3-8b \\
  --port 8000 \\
  --max-model-len 8192
"""


def podman_vllm_fleet(tmp_path: Path, space: str) -> Path:
    """fixtures/fleets/docker-run turned into vLLM's CPU build started by ``podman run --env-file`` on a host with no
    serving card (the ledger then reads VLLM_CPU_KVCACHE_SPACE from the container's environment)."""
    fleets = REPO / "fixtures" / "fleets"
    target = tmp_path / "podman-vllm"
    shutil.copytree(fleets / "docker-run", target, symlinks=True)
    shutil.copytree(fleets / "compose-vllm" / "profiles", target / "profiles")
    (target / "scripts" / "run-coder.sh").write_text(PODMAN_SCRIPT, encoding="utf-8")
    (target / "config" / "coder.env").write_text("PORT=8000\n", encoding="utf-8")
    (target / "config" / "vllm-cpu.env").write_text(f"VLLM_CPU_KVCACHE_SPACE={space}\n", encoding="utf-8")
    manifest = target / "fleet.toml"
    text = manifest.read_text(encoding="utf-8")
    for old, new in (('devices = [{ name = "CUDA0", vram_bytes = 12884901888 }]', "devices = []"),
                     ('engine = "llama.cpp"', 'engine = "vllm"'),
                     ('payload = ["/data/models/Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf"]',
                      'payload = ["/srv/models/Qwen3-8B-FP8"]\nprofile = "profiles/qwen3-8b-fp8.toml"')):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    manifest.write_text(text, encoding="utf-8")
    return manifest


def test_a_quoted_value_in_a_podman_env_file_fails_its_check_in_one_line_not_the_run(
    pytester: pytest.Pytester, seams: Path
) -> None:
    """podman keeps the quotes of ``--env-file`` values: ``"40"`` is no number to vLLM's ledger. The check that reads
    it fails with one line; its figures (the same ledger) are no exception in a reporting hook (it was INTERNALERROR)."""
    fleet_toml = podman_vllm_fleet(pytester.path, '"40"')
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-p", "no:cacheprovider",
                                f"--fleetgate-report={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # and the fleet's two true findings: the port published on every address with no key, the image's root user
    result.assert_outcomes(passed=9, failed=3, skipped=47)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    # The variable reached the engine through the container's env file, so the script that ran podman is named.
    result.stdout.fnmatch_lines(["fleetgate: scripts/run-coder.sh: VLLM_CPU_KVCACHE_SPACE='\"40\"'; expected a whole "
                                 "number of GiB (vllm/platforms/cpu.py reads it with int())",
                                 "FAILED seams/test_vllm.py::test_vllm_starts[[]coder[]]*"])
    checks = json.loads(report.read_text())["services"]["coder"]["checks"]
    assert sorted(c["check"] for c in checks if c["outcome"] == "failed") == ["container-user", "engine-auth", "vllm-starts"]
    # Unquoted, the same fleet starts.
    manifest = podman_vllm_fleet(pytester.path / "unquoted", "40")
    again = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vllm.py"), f"--fleet={manifest}", "-p",
                               "no:cacheprovider", "--check=vllm-starts", f"--fleetgate-report={report}")
    again.assert_outcomes(passed=1)


def _vision_counts() -> dict[str, int]:
    from tests.test_mutations import CLEAN

    words = [outcome for (_, check), outcome in CLEAN.items() if check == "vision-mmproj"]
    return {word: words.count(word) for word in set(words)}


@pytest.mark.parametrize(
    ("error", "said"),
    [(InputError(Path("profiles/broken.toml"), 3, "no [model] table"), "profiles/broken.toml:3: no [model] table"),
     (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero")],
    ids=["input-error", "bug"],
)
def test_figures_that_cannot_be_derived_are_a_note_on_the_test(
    pytester: pytest.Pytester, seams: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, said: str
) -> None:
    def figures(config: Any) -> dict[str, Any]:
        raise error

    monkeypatch.setattr(get_check("vision-mmproj"), "figures", figures)
    fleet_toml = copy_fleet(pytester)
    report = pytester.path / "fleetgate.json"
    recorder = pytester.inline_run(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}",
                                   "-p", "no:cacheprovider", f"--fleetgate-report={report}")
    recorder.assertoutcome(**{"passed": _vision_counts().get("passed", 0), "skipped": _vision_counts().get("skipped", 0)})
    notes = {dict(r.user_properties)["fleetgate.service"]: dict(r.user_properties).get("fleetgate.note")
             for r in recorder.getreports("pytest_runtest_logreport") if r.when == "call"}
    note = f"vision-mmproj: no figures: {said}"
    assert notes["frank-medium"] == note  # it passes: its figures were asked for, and said why there are none
    document = json.loads(report.read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    assert [c.get("note") for c in document["services"]["frank-medium"]["checks"]] == [note]


def test_a_bug_in_a_reporting_hook_is_one_line_in_the_summary(
    pytester: pytest.Pytester, seams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**_: Any) -> list[tuple[str, str]]:
        raise RuntimeError("properties\nbroken")

    monkeypatch.setattr("fleetgate.plugin._report.case_properties", broken)
    fleet_toml = copy_fleet(pytester)
    target = pytester.path / "a-directory"
    target.mkdir()
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet_toml}",
                                "-p", "no:cacheprovider", f"--fleetgate-report={target}")
    result.assert_outcomes(**_vision_counts())
    assert result.ret == pytest.ExitCode.OK
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    nodeid = "seams/test_vision.py::test_vision_mmproj[frank-medium]"
    result.stdout.fnmatch_lines([
        "*- fleetgate: reporting errors -*",
        f"fleetgate: pytest_runtest_makereport ({nodeid}) failed: RuntimeError: properties broken",
    ])
    result.stdout.fnmatch_lines([f"fleetgate: pytest_sessionfinish failed: IsADirectoryError: *{target.name}*"])
