""""Not judged": a check that applies but lacks a fact says so once per service, never as a failure (issue 32).

The example fleet with frank-medium's model profile removed: every seam blind without the profile is not judged
with one line, the same line, naming the `fleetgate profile` command for the GGUF its argv loads. pytest counts them
as skips; the per-service summary counts them apart and says the line once; the report carries each; under
``--fleetgate-strict`` (or the ini key) each fails with that line and the run exits 1.

A vLLM service whose release nothing pins is not "not judged": no pin is no missing fact, so the newest release
fleetgate holds judges its argv, and the pass's figures say which table judged it and how to pin the release (issue
33). A release that is pinned (an image tag) but has no recorded option table is not judged, naming that release.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from fleetgate.checks import NotJudged
from fleetgate.errors import InputError
from fleetgate.incidents import load_catalogue
from fleetgate.report import report_schema
from fleetgate.runner import run_seams

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
IMPORT_BY_PATH = "--import-mode=importlib"
PROFILE_LINE = "profile = \"profiles/swift-qwen3.8-27b-mtp.toml\"\n"
# The GGUF frank-medium's env file gives --model (scripts/frank-medium.env, MODEL=).
GGUF = "/home/dank/models/Swift-Qwen3.8-27B-Uncensored-Dynamic-MTP-GGUF/Swift-Qwen3.8-27B-Uncensored-Dynamic-MTP-UD-Q8_K_XL.gguf"
MEDIUM_LINE = (
    "not judged: frank-medium declares no model profile, which the ledger and the context seams read: write it with "
    f"`fleetgate profile {GGUF} -o profiles/frank-medium.toml` and set services.frank-medium.profile = "
    "\"profiles/frank-medium.toml\" in fleet.toml"
)
# The example fleet's own not-judged lines: frank-medium's and frank-zealot's chat templates are their GGUFs' own,
# and the models are not on the machine that runs the seams (chat-template, docs/seams.md).
TEMPLATE_TAIL = ("'s own (tokenizer.chat_template), and the model is not on this machine: pass the template as a file of "
                 "the repository (--chat-template-file), or run the seams where the model is")
MEDIUM_TEMPLATE = ("not judged: the chat template of frank-medium cannot be read: the template is "
                   f"Swift-Qwen3.8-27B-Uncensored-Dynamic-MTP-UD-Q8_K_XL.gguf{TEMPLATE_TAIL}")
ZEALOT_TEMPLATE = ("not judged: the chat template of frank-zealot cannot be read: the template is "
                   f"Ternary-Bonsai-2-9B-PQ2_0.gguf{TEMPLATE_TAIL}")
TEMPLATES = {("frank-medium", "chat-template"): MEDIUM_TEMPLATE, ("frank-zealot", "chat-template"): ZEALOT_TEMPLATE}
# Each seam of frank-medium that reads the profile (the clean fleet passes them all).
BLIND = ("card-balance", "card-floor", "drafter-kv-fits", "drafter-placement", "profile-declared",
         "prompt-cache-holds-slot", "slot-within-trained-window")
ARCHON_IMAGE = "Image=localhost/radiance-vllm:0.13.0-e060895\n"
ARCHON_NOTE = (
    "vLLM 0.34.0's table, the newest release held: frank-archon pins no vLLM release; pin the release it runs: "
    "services.frank-archon.engine_build = { vllm = \"X.Y.Z\" }, or an image tag that names it (vllm/vllm-openai:vX.Y.Z)"
)


def _fleet(root: Path, *edits: tuple[str, str, str]) -> Path:
    target = root / "fleet"
    shutil.copytree(FLEET, target)
    for file, old, new in edits:
        path = target / file
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, (file, old)
        path.write_text(text.replace(old, new), encoding="utf-8")
    return target / "fleet.toml"


def _no_profile(root: Path) -> Path:
    """frank-medium without its profile, in the example fleet less its model-profiles policy (with it, the missing
    profile fails: fixtures/branches/profile-declared.missing.toml)."""
    return _fleet(root, ("fleet.toml", PROFILE_LINE, ""), ("fleet.toml", '"model-profiles",', ""))


@pytest.fixture
def seams(pytester: pytest.Pytester) -> Path:
    target = pytester.path / "seams"
    shutil.copytree(REPO / "seams", target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_the_runner_says_one_line_for_every_seam_blind_without_the_profile(tmp_path: Path) -> None:
    outcomes = run_seams(_no_profile(tmp_path))
    unjudged = {(o.subject, o.check): o.text for o in outcomes if o.outcome == "not-judged"}
    assert unjudged == {**{("frank-medium", check): MEDIUM_LINE for check in BLIND}, **TEMPLATES}
    assert [o for o in outcomes if o.outcome == "failed"] == []


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["in-process", "xdist"])
def test_the_summary_says_not_judged_once_per_service(pytester: pytest.Pytester, seams: Path, xdist: tuple[str, ...]) -> None:
    fleet_toml = _no_profile(pytester.path)
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest_subprocess(IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-p", "no:cacheprovider",
                                           "-rs", f"--fleetgate-report={report}", *xdist)
    assert result.ret == pytest.ExitCode.OK
    document = json.loads(report.read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    medium = document["services"]["frank-medium"]
    assert sorted(medium["not_judged"]) == sorted([MEDIUM_LINE, MEDIUM_TEMPLATE])
    assert medium["outcomes"]["not-judged"] == len(BLIND) + 1
    assert "failed" not in medium["outcomes"]
    assert sorted((c["check"], c["outcome"], c.get("not_judged")) for c in medium["checks"]
                  if "not_judged" in c) == sorted([*((check, "not-judged", MEDIUM_LINE) for check in BLIND),
                                                   ("chat-template", "not-judged", MEDIUM_TEMPLATE)])
    assert {name: sorted(s["not_judged"]) for name, s in document["services"].items() if s["not_judged"]} == {
        "frank-medium": sorted([MEDIUM_LINE, MEDIUM_TEMPLATE]), "frank-zealot": [ZEALOT_TEMPLATE]}
    out = result.stdout.lines
    counts = medium["outcomes"]
    # engine-auth is waived for frank-medium (fleet.toml [[waivers]]): pytest's xfail.
    assert (f"frank-medium: {counts['passed']} passed, 0 failed, {counts['skipped']} skipped, 8 not judged, "
            f"{counts['xfailed']} xfailed") in out
    assert counts["xfailed"] == 1
    # Each line once in the summary, and once in -rs: every not-judged skip of the service shares its fleet.toml table.
    assert out.count(f"  {MEDIUM_LINE}") == 1
    assert sorted(line for line in out if line.startswith("SKIPPED") and "not judged" in line) == sorted([
        f"SKIPPED [7] fleet/fleet.toml:85: {MEDIUM_LINE}", f"SKIPPED [1] fleet/fleet.toml:85: {MEDIUM_TEMPLATE}",
        f"SKIPPED [1] fleet/fleet.toml:223: {ZEALOT_TEMPLATE}"])
    assert sorted(line for line in out if "not judged: " in line and not line.startswith("SKIPPED")) == sorted(
        f"  {line}" for line in (MEDIUM_LINE, MEDIUM_TEMPLATE, ZEALOT_TEMPLATE))


@pytest.mark.parametrize("switch", [("--fleetgate-strict",), ("-o", "fleetgate_strict=true")], ids=["option", "ini"])
def test_strict_fails_each_not_judged_check_with_its_line(pytester: pytest.Pytester, seams: Path,
                                                          switch: tuple[str, ...]) -> None:
    fleet_toml = _no_profile(pytester.path)
    report = pytester.path / "fleetgate.json"
    result = pytester.runpytest_subprocess(IMPORT_BY_PATH, str(seams), f"--fleet={fleet_toml}", "-p", "no:cacheprovider",
                                           f"--fleetgate-report={report}", *switch)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes()["failed"] == len(BLIND) + len(TEMPLATES)
    # Each failure is the one line, no traceback: once in each failure's section.
    assert result.stdout.lines.count(MEDIUM_LINE) == len(BLIND)
    assert result.stdout.lines.count(MEDIUM_TEMPLATE) == result.stdout.lines.count(ZEALOT_TEMPLATE) == 1
    assert "Traceback" not in result.stdout.str()
    document = json.loads(report.read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    medium = document["services"]["frank-medium"]
    assert sorted(medium["not_judged"]) == sorted([MEDIUM_LINE, MEDIUM_TEMPLATE])
    assert medium["outcomes"]["failed"] == len(BLIND) + 1 and "not-judged" not in medium["outcomes"]
    assert sorted((c["check"], c["outcome"]) for c in medium["checks"] if "not_judged" in c) == sorted(
        (check, "failed") for check in (*BLIND, "chat-template"))
    assert out_line(result, "frank-medium: ") == (
        f"frank-medium: {medium['outcomes']['passed']} passed, 8 failed, {medium['outcomes']['skipped']} skipped, "
        "8 not judged, 1 xfailed")


def out_line(result: pytest.RunResult, start: str) -> str:
    found = [line for line in result.stdout.lines if line.startswith(start)]
    assert len(found) == 1, found
    return found[0]


def test_a_fleet_with_nothing_unjudged_is_green_under_strict(pytester: pytest.Pytester, seams: Path) -> None:
    result = pytester.runpytest_subprocess(IMPORT_BY_PATH, str(seams), f"--fleet={FLEET / 'fleet.toml'}",
                                           "-p", "no:cacheprovider", "--fleetgate-strict", "--check", "profile-declared")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)


def test_an_unpinned_vllm_release_is_judged_by_the_newest_held_and_says_so(tmp_path: Path) -> None:
    """No pin is not a missing fact: the newest release held reads the argv, and the pass's figures say which table
    judged it and how to pin the release (issue 33)."""
    fleet_toml = _fleet(tmp_path, ("dankserver/frank-archon/quadlet/frank-archon.container", ARCHON_IMAGE,
                                   "Image=localhost/radiance-vllm:latest\n"))
    [outcome] = run_seams(fleet_toml, ["vllm-argv"])
    assert (outcome.subject, outcome.outcome, outcome.figures) == ("frank-archon", "passed", {"table": ARCHON_NOTE})


def test_a_declared_release_judges_an_image_whose_tag_names_none(tmp_path: Path) -> None:
    fleet_toml = _fleet(tmp_path, ("dankserver/frank-archon/quadlet/frank-archon.container", ARCHON_IMAGE,
                                   "Image=localhost/radiance-vllm:latest\n"),
                        ("fleet.toml", 'engine = "vllm"\nunit = "dankserver/frank-archon/quadlet/frank-archon.container"\n',
                         'engine = "vllm"\nengine_build = { version = "0.13.0" }\n'
                         'unit = "dankserver/frank-archon/quadlet/frank-archon.container"\n'))
    [outcome] = run_seams(fleet_toml, ["vllm-argv"])
    assert (outcome.subject, outcome.outcome) == ("frank-archon", "passed")


def test_the_image_tag_pins_the_release_it_names(tmp_path: Path) -> None:
    """A tag naming a release nothing holds a table for is not judged, naming that release (not read as another)."""
    fleet_toml = _fleet(tmp_path, ("dankserver/frank-archon/quadlet/frank-archon.container", ARCHON_IMAGE,
                                   "Image=localhost/radiance-vllm:v0.7.3\n"))
    [outcome] = run_seams(fleet_toml, ["vllm-argv"])
    assert (outcome.outcome, outcome.text) == ("not-judged", (
        "not judged: vLLM 0.7.3 has no recorded option table (fleetgate holds every release from 0.8.0 to 0.34.0); "
        "declare the release the service runs, or record it: python -m tools.extract_vllm_args (it reads "
        "each release's sdist from PyPI); pinned by the Quadlet's image localhost/radiance-vllm:v0.7.3"))


def test_not_judged_begins_its_line_once() -> None:
    assert str(NotJudged("declare the build")) == "not judged: declare the build"
    assert str(NotJudged("not judged: declare the build")) == "not judged: declare the build"


BRANCH = 'id = "B-X-1"\nname = "x"\nsummary = "s"\n[[mutation]]\nfile = "fleet.toml"\ncreate = ""\n'


def test_a_branch_may_only_leave_seams_not_judged(tmp_path: Path) -> None:
    (tmp_path / "B-X-1.toml").write_text(f'not_judged = ["svc: card-floor"]\n{BRANCH}', encoding="utf-8")
    [entry] = load_catalogue(tmp_path)
    assert (entry.not_judged, entry.expect, entry.skip) == ((("svc", "card-floor"),), (), ())


def test_a_malformed_not_judged_pair_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "B-X-1.toml"
    path.write_text(f'not_judged = ["svc: card-floor/short"]\n{BRANCH}', encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_catalogue(tmp_path)
    assert str(info.value) == (f"{path}: not_judged: 'svc: card-floor/short'; expected 'SUBJECT: check' or "
                               "'SUBJECT: *', e.g. 'frank-medium: card-floor'")


def test_a_compose_services_missing_profile_names_the_model_at_its_host_path() -> None:
    """The command in the line runs on the host, where the container's /models is the .env's MODELS_DIR."""
    outcomes = run_seams(REPO / "fixtures" / "fleets" / "compose-rocm" / "fleet.toml")
    lines = {o.text for o in outcomes if o.outcome == "not-judged" and o.subject == "chat"}
    assert lines == {
        "not judged: chat declares no model profile, which the ledger and the context seams read: write it with "
        "`fleetgate profile /mnt/fast/models/Mistral-Small-3.2-24B-Instruct-2506-Q4_K_M.gguf -o profiles/chat.toml` "
        "and set services.chat.profile = \"profiles/chat.toml\" in fleet.toml"}
