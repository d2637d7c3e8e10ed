"""The pytest plugin, driven the way users drive it (pytester): options, ids, errors, hermetic seams, xdist."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.test_mutations import CLEAN, NOT_JUDGED, PASSED, SKIPPED, WAIVED

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
# The copied seams/ has the same module names as the outer run's: import them by path.
IMPORT_BY_PATH = "--import-mode=importlib"


@pytest.fixture
def seams(pytester: pytest.Pytester) -> Path:
    """The repository's seams/, copied so the run has no ini file but the one a test writes."""
    target = pytester.path / "seams"
    shutil.copytree(REPO / "seams", target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def copy_fleet(pytester: pytest.Pytester) -> Path:
    target = pytester.path / "fleet"
    shutil.copytree(FLEET, target)
    return target


def test_another_projects_run_gets_no_warning_from_the_installed_plugin(pytester: pytest.Pytester) -> None:
    """The entry point loads the plugin into every pytest run of this Python; a project that is not a fleet's gets
    its tests run and no warning of fleetgate's (the hook modules are imported before pytest registers them)."""
    pytester.makepyfile(test_other="def test_other():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=1, warnings=0)
    # fleetgate is named once: among the loaded plugins (the run's directory may hold the word: the suite's basetemp
    # is named after its checkout).
    named = [line for line in result.stdout.lines if "fleetgate" in line and not line.startswith("rootdir:")]
    assert len(named) == 1 and named[0].startswith("plugins:") and "fleetgate-" in named[0], result.stdout.str()


def test_without_a_fleet_the_run_stops_with_one_line(pytester: pytest.Pytester, seams: Path) -> None:
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_timeouts.py"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: fleetgate: no fleet to check: pass --fleet PATH/fleet.toml or set fleetgate_fleet*"])


def test_the_ini_option_names_the_fleet_relative_to_the_ini_file(pytester: pytest.Pytester, seams: Path) -> None:
    copy_fleet(pytester)
    pytester.makeini("[pytest]\nfleetgate_fleet = fleet/fleet.toml\n")
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_timeouts.py"), "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_timeouts_nest[[]tts-budgets[]] PASSED*"])


def test_seams_are_parametrised_per_service_they_apply_to(pytester: pytest.Pytester, seams: Path) -> None:
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vllm.py"), str(seams / "test_render.py"),
                                f"--fleet={FLEET / 'fleet.toml'}", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "*test_vllm.py::test_vllm_memory_knobs[[]frank-archon[]]",
        "*test_render.py::test_serve_script_renders[[]frank-medium[]]",
        "*test_render.py::test_serve_script_renders[[]frank-tts[]]",
    ])
    assert "test_vllm_memory_knobs[frank-medium]" not in result.stdout.str()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("fleet.toml", "port = 7771", 'port = "7771"'),
         'ERROR: fleetgate: */fleet.toml:*: services.frank-zealot.port: expected integer, got "7771"'),
        (("fleet.toml", 'engine = "vllm"', 'engine = "sglang"'),
         'ERROR: fleetgate: */fleet.toml:*: services.frank-archon.engine: expected one of "llama.cpp", "vllm", "openai", got "sglang"'),
        (("fleet.toml", "[fleet]\n", "[fleet\n"), "ERROR: fleetgate: */fleet.toml:*: not valid TOML*"),
        (("fleet.toml", 'host = "apu"', 'host = "apu"\ncolour = "red"'),
         "ERROR: fleetgate: */fleet.toml:*: services.frank-dragoon: unknown key 'colour'; expected one of:*"),
    ],
    ids=["schema-type", "schema-enum", "toml-syntax", "unknown-key"],
)
def test_a_malformed_manifest_stops_the_run_with_one_line(
    pytester: pytest.Pytester, seams: Path, edit: tuple[str, str, str], expected: str
) -> None:
    fleet = copy_fleet(pytester)
    file, old, new = edit
    text = (fleet / file).read_text()
    assert old in text
    (fleet / file).write_text(text.replace(old, new, 1))
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams), f"--fleet={fleet / 'fleet.toml'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "raise " not in output
    assert len([line for line in result.stderr.lines if line.startswith("ERROR:")]) == 1


SERVICES = ("frank-medium", "frank-archon", "frank-zealot", "frank-tts", "frank-dragoon", "reference")


def _renders(pytester: pytest.Pytester, seams: Path, fleet_toml: Path) -> tuple[dict[str, str], dict[str, str]]:
    """serve-script-renders on every service: its outcome (passed, or the failure code) and its failure's text."""
    recorder = pytester.inline_run(IMPORT_BY_PATH, str(seams / "test_render.py"), f"--fleet={fleet_toml}",
                                   "-p", "no:cacheprovider")
    outcomes: dict[str, str] = {}
    texts: dict[str, str] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        subject = report.nodeid.partition("[")[2].rstrip("]")
        if report.failed:
            texts[subject] = str(report.longrepr)
            outcomes[subject] = texts[subject].splitlines()[0].partition(": ")[2].split(" [")[0]
        elif report.when == "call":
            outcomes[subject] = report.outcome
    return outcomes, texts


@pytest.mark.parametrize(
    ("edit", "service", "observed"),
    [
        (("scripts/frank-medium.env", "CACHE_RAM=16384", "export CACHE_RAM=16384"), "frank-medium",
         "  observed: 'export CACHE_RAM' is not a variable name; systemd ignores this line (systemd EnvironmentFile has no "
         "'export'; drop it)"),
        (("dankserver/frank-archon/frank-archon.env", "\nTP=2\n", "\nTP\n"), "frank-archon",
         "  observed: bare 'TP' copies the host's own value under podman; expected NAME=VALUE"),
        (("scripts/frank-tts.service", "[Service]", "[Service"), "frank-tts",
         "  observed: expected a section header like [Service], got '[Service'"),
        (("scripts/serve-frank-dragoon.sh", "exec halogen serve", "exec halogen serve ("), "frank-dragoon",
         "  observed: bash: syntax error near unexpected token `('"),
    ],
    ids=["systemd-export", "podman-bare-name", "unit-section", "script-syntax"],
)
def test_a_malformed_service_file_fails_that_services_render_and_no_other(
    pytester: pytest.Pytester, seams: Path, edit: tuple[str, str, str], service: str, observed: str
) -> None:
    fleet = copy_fleet(pytester)
    file, old, new = edit
    text = (fleet / file).read_text()
    assert old in text
    (fleet / file).write_text(text.replace(old, new, 1))
    outcomes, texts = _renders(pytester, seams, fleet / "fleet.toml")
    assert outcomes == {name: "serve-script-renders/broken-input" if name == service else "passed" for name in SERVICES}
    lines = texts[service].splitlines()
    assert lines[1] == f"  where:    {file}:{lines[1].rpartition(':')[2]}" and lines[1].rpartition(":")[2].isdigit(), lines
    assert observed in lines, lines
    assert "Traceback" not in texts[service]


def test_one_broken_drop_in_fails_its_service_and_every_other_service_is_judged(pytester: pytest.Pytester) -> None:
    """A bench-arm drop-in points frank-zealot's unit at an env file outside the repository: frank-zealot fails its
    render check in one line, its other seams skip naming it, and every other outcome is the clean fleet's."""
    from tests.test_mutations import run_seams

    fleet = copy_fleet(pytester)
    drop_in = fleet / "scripts" / "frank-zealot.service.d" / "ptq1.conf"
    drop_in.parent.mkdir()
    drop_in.write_text("[Service]\nEnvironmentFile=/tmp/zealot-arm-current.env\n")
    outcomes, texts = run_seams(pytester, fleet / "fleet.toml")
    expected = {key: SKIPPED if key[0] == "frank-zealot" else outcome for key, outcome in CLEAN.items()}
    expected[("frank-zealot", "serve-script-renders")] = "serve-script-renders/broken-input"
    assert outcomes == expected
    assert list(texts) == [("frank-zealot", "serve-script-renders")]
    text = texts[("frank-zealot", "serve-script-renders")]
    assert "  where:    scripts/frank-zealot.service.d/ptq1.conf:2" in text.splitlines(), text
    assert ("  observed: EnvironmentFile=/tmp/zealot-arm-current.env is not a file of this fleet repository "
            "(fleet deploy_root is /home/dank/serverAppConfigs)") in text.splitlines(), text


def test_a_chain_through_a_broken_service_skips_naming_it(pytester: pytest.Pytester, seams: Path) -> None:
    """frank-tts's unit is broken: the chain that holds its timeouts cannot be judged (not 'LLAMA_TIMEOUT is not set')."""
    fleet = copy_fleet(pytester)
    unit = fleet / "scripts" / "frank-tts.service"
    unit.write_text(unit.read_text().replace("[Service]", "[Service", 1))
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_timeouts.py"), f"--fleet={fleet / 'fleet.toml'}",
                                "-v", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines([
        "*test_timeouts_nest[[]tts-budgets[]] SKIPPED*",
        "*test_timeouts_nest[[]scriptwriting-under-webui[]] PASSED*",
        "*test_timeouts_nest[[]scriptwriting-at-app-default[]] PASSED*",
        "SKIPPED [[]1[]] *test_timeouts.py:*: tts-budgets holds frank-tts:LLAMA_TIMEOUT, and frank-tts did not render: "
        "see serve-script-renders[[]frank-tts[]]",
    ])


def test_a_broken_service_file_renders_the_fleet_once(pytester: pytest.Pytester, seams: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken service's error is remembered with the renders: nine seam test functions, one render per service."""
    import fleetgate.render.rendered

    fleet = copy_fleet(pytester)
    unit = fleet / "scripts" / "frank-tts.service"
    unit.write_text(unit.read_text().replace("[Service]", "[Service", 1))
    renders: Counter[str] = Counter()
    real = fleetgate.render.rendered.load_service

    def counting(fleet: object, service: object, *rest: Any) -> object:
        renders[getattr(service, "name", "?")] += 1
        return real(fleet, service, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(fleetgate.render.rendered, "load_service", counting)
    modules = [str(seams / f"test_{name}.py") for name in ("render", "context", "fleet", "argv", "vision")]
    recorder = pytester.inline_run(IMPORT_BY_PATH, *modules, f"--fleet={fleet / 'fleet.toml'}", "-p", "no:cacheprovider")
    failed = [r.nodeid.rpartition("::")[2] for r in recorder.getreports("pytest_runtest_logreport") if r.failed]
    assert failed == ["test_serve_script_renders[frank-tts]"]
    assert renders == Counter({name: 1 for name in SERVICES})


def test_a_fleet_with_one_malformed_file_renders_once_per_run(pytester: pytest.Pytester, seams: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every seam of seams/ on a fleet whose frank-medium env file is malformed: the fleet is rendered once for the
    whole run (the renders, the broken one with them, are the run's state), each service once."""
    import fleetgate.plugin._state
    import fleetgate.render.rendered

    fleet = copy_fleet(pytester)
    env = fleet / "scripts" / "frank-medium.env"
    env.write_text(env.read_text().replace("CACHE_RAM=16384", "export CACHE_RAM=16384", 1))
    fleets: list[str] = []
    renders: Counter[str] = Counter()
    real_fleet, real_service = fleetgate.plugin._state.attempt_services, fleetgate.render.rendered.attempt_service

    def fleet_render(rendered: Any, **kwargs: Any) -> Any:
        fleets.append(rendered.name)
        return real_fleet(rendered, **kwargs)

    def service_render(rendered: Any, service: Any, *rest: Any) -> Any:
        renders[service.name] += 1
        return real_service(rendered, service, *rest)

    monkeypatch.setattr(fleetgate.plugin._state, "attempt_services", fleet_render)
    monkeypatch.setattr(fleetgate.render.rendered, "attempt_service", service_render)
    recorder = pytester.inline_run(IMPORT_BY_PATH, str(seams), f"--fleet={fleet / 'fleet.toml'}", "-p", "no:cacheprovider")
    failed = [r.nodeid.rpartition("::")[2] for r in recorder.getreports("pytest_runtest_logreport") if r.failed]
    assert failed == ["test_serve_script_renders[frank-medium]"]
    assert fleets == ["frank"]
    assert renders == Counter({name: 1 for name in SERVICES})


def test_a_malformed_manifest_is_read_once(pytester: pytest.Pytester, seams: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetgate.plugin._state

    fleet = copy_fleet(pytester)
    manifest = fleet / "fleet.toml"
    manifest.write_text(manifest.read_text().replace("port = 7771", 'port = "7771"', 1))
    loads: list[Path] = []
    real = fleetgate.plugin._state.load_fleet

    def counting(path: Path) -> object:
        loads.append(path)
        return real(path)

    monkeypatch.setattr(fleetgate.plugin._state, "load_fleet", counting)
    modules = [str(seams / f"test_{name}.py") for name in ("render", "context", "fleet", "docs")]
    result = pytester.runpytest_inprocess(IMPORT_BY_PATH, *modules, f"--fleet={manifest}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['ERROR: fleetgate: */fleet.toml:*: services.frank-zealot.port: expected integer, got "7771"'])
    assert loads == [manifest]


def test_a_fleet_level_seam_skips_with_its_reason(pytester: pytest.Pytester, seams: Path) -> None:
    """docs-index on a fleet that names no docs index: a skip saying what to declare, not a bare AssertionError."""
    fleet = copy_fleet(pytester)
    manifest = fleet / "fleet.toml"
    text = manifest.read_text()
    line = 'docs_index = "docs/index.md"\n'
    assert text.count(line) == 1
    manifest.write_text(text.replace(line, ""))
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_docs.py"), f"--fleet={manifest}", "-v", "-rs",
                                "-k", "docs_index", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*test_docs_index[[]frank[]] SKIPPED*",
        "*frank: fleet.toml names no docs_index: name the runbooks' index page to hold the docs to the fleet",
    ])
    assert "AssertionError" not in result.stdout.str()
    # The catalogue's own runner decides the same way.
    from fleetgate.runner import run_seams

    assert [(o.check, o.subject, o.outcome) for o in run_seams(manifest, checks=["docs-index"])] == [
        ("docs-index", "frank", "skipped")]


def test_a_failing_seam_reads_as_an_operator_message_without_a_traceback(pytester: pytest.Pytester, seams: Path) -> None:
    fleet = copy_fleet(pytester)
    env = fleet / "scripts" / "frank-medium.env"
    env.write_text(env.read_text().replace("VISION=on", "VISION=off"))
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_vision.py"), f"--fleet={fleet / 'fleet.toml'}")
    result.assert_outcomes(passed=2, failed=1)  # frank-medium fails; frank-zealot and reference hold
    result.stdout.fnmatch_lines([
        "frank-medium: vision-mmproj/no-mmproj [[]B-MM-1, B-MM-2, INC-08[]]",
        "  where:    scripts/serve-frank-medium.sh",
        "  observed: no --mmproj in the rendered argv",
        "  expected: --mmproj <projector.gguf>*",
        "  fix:      pass --mmproj explicitly*",
    ])
    assert "Traceback" not in result.stdout.str() and "def vision_mmproj" not in result.stdout.str()


def test_seams_refuse_the_network(pytester: pytest.Pytester) -> None:
    seams = pytester.mkdir("seams")
    (seams / "conftest.py").write_text((REPO / "seams" / "conftest.py").read_text())
    (seams / "test_leak.py").write_text(
        "import socket\n"
        "def test_leak():\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=1)\n"
        "def test_loopback_is_fine():\n"
        "    with socket.socket() as s:\n"
        "        try:\n"
        "            s.connect(('127.0.0.1', 9))\n"
        "        except ConnectionRefusedError:\n"
        "            pass\n"
        "import pytest\n"
        "@pytest.fixture\n"
        "def leaks():\n"
        "    socket.create_connection(('192.0.2.2', 80), timeout=1)\n"
        "def test_leak_in_a_fixture(leaks):\n"
        "    pass\n"
    )
    (pytester.path / "test_not_a_seam.py").write_text(
        "import socket\n"
        "def test_not_a_seam_keeps_its_socket():\n"
        "    assert not getattr(socket.socket.connect, 'fleetgate_offline', False)\n"
    )
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams), "test_not_a_seam.py")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*fleetgate seams are offline: refused a connection to ('192.0.2.1', 80)*"])
    result.stdout.fnmatch_lines(["*fleetgate seams are offline: refused a connection to ('192.0.2.2', 80)*"])


def test_seams_run_under_xdist_and_keep_their_messages(pytester: pytest.Pytester, seams: Path) -> None:
    fleet = copy_fleet(pytester)
    env = fleet / "podcast" / "podcast-app.env"
    env.write_text(env.read_text().replace("ESPERANTO_TTS_TIMEOUT=660", "ESPERANTO_TTS_TIMEOUT=600"))
    result = pytester.runpytest_subprocess(IMPORT_BY_PATH, str(seams), f"--fleet={fleet / 'fleet.toml'}", "-n", "2",
                                           "-p", "no:cacheprovider")
    # The clean fleet's outcomes (tests/test_mutations.py), less the one chain this edit breaks.
    clean = Counter(CLEAN.values())
    # pytest counts a not-judged check as a skip
    result.assert_outcomes(passed=clean[PASSED] - 1, failed=1, skipped=clean[SKIPPED] + clean[NOT_JUDGED],
                           xfailed=clean[WAIVED])
    result.stdout.fnmatch_lines(["*tts-budgets: timeouts-nest/not-strictly-longer*",
                                 "*observed: podcast-app:ESPERANTO_TTS_TIMEOUT = 600 s is equal to*"])


def test_a_seam_with_no_subject_in_the_fleet_still_shows_one_skip(pytester: pytest.Pytester, seams: Path) -> None:
    """No [[timeouts]] chain and no vLLM service: each seam shows one skip named 'fleet', never an empty set."""
    fleet = copy_fleet(pytester)
    manifest = fleet / "fleet.toml"
    text = manifest.read_text()
    archon = text.index("[services.frank-archon]")
    text = text[:archon] + text[text.index("[services.frank-zealot]"):]
    manifest.write_text(text[:text.index("[[timeouts]]")])
    result = pytester.runpytest(IMPORT_BY_PATH, str(seams / "test_timeouts.py"), str(seams / "test_vllm.py"),
                                f"--fleet={manifest}", "-v", "-rs")
    result.assert_outcomes(skipped=3)  # test_vllm.py holds two seams: vllm-memory-knobs and vllm-starts
    result.stdout.fnmatch_lines([
        "*test_timeouts_nest[[]fleet[]] SKIPPED*",
        "*test_vllm_memory_knobs[[]fleet[]] SKIPPED*",
        "*test_vllm_starts[[]fleet[]] SKIPPED*",
        "*fleet: fleet.toml declares no [[][[]timeouts[]][]] chain: declare the budgets that must nest",
        "*fleet: the fleet declares no vllm service",
    ])
    assert "empty parameter set" not in result.stdout.str()


def _one_line_refusal(argv: list[str]) -> str:
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 4 and len(lines) == 1, (done.returncode, done.stdout, done.stderr)
    return lines[0]


def test_pytest_without_the_plugin_says_so_in_one_line() -> None:
    """This repository's ini and seams need the plugin: a Python that lacks it gets the cause, not an INTERNALERROR."""
    line = _one_line_refusal([sys.executable, "-m", "pytest", "seams/", "-q", "-p", "no:cacheprovider",
                              "-p", "no:fleetgate"])
    assert line.startswith("ERROR: fleetgate's pytest plugin is not loaded: fleetgate is not installed in this Python"), line


def test_a_missing_dependency_is_named_in_one_line() -> None:
    """fleetgate found on the path of a Python that lacks its requirements (jsonschema here, which reads fleet.toml):
    one line naming it."""
    run = ("import sys; sys.modules['jsonschema'] = None; import pytest; "
           "sys.exit(pytest.main(['seams/test_timeouts.py', '-q', '-p', 'no:cacheprovider']))")
    line = _one_line_refusal([sys.executable, "-c", run])
    assert line.startswith("ERROR: fleetgate needs the jsonschema package, which this Python"), line


def test_a_missing_requirement_of_a_seam_check_is_named_in_one_line() -> None:
    """promql-parser is imported by the alert-rule seams only: its absence is one line too, not a collection error per
    seam module."""
    run = ("import sys; sys.modules['promql_parser'] = None; import pytest; "
           "sys.exit(pytest.main(['seams/', '-q', '-p', 'no:cacheprovider']))")
    line = _one_line_refusal([sys.executable, "-c", run])
    assert line.startswith("ERROR: fleetgate needs the promql_parser package, which this Python"), line


def test_the_seams_run_without_the_live_stack() -> None:
    """httpx cannot be imported, and the seams run all the same: the live stack is imported only with --endpoint."""
    run = ("import sys; sys.modules['httpx'] = None; import pytest; "
           "code = pytest.main(['seams/test_timeouts.py', '-q', '-p', 'no:cacheprovider']); "
           "print(sorted(m for m in sys.modules if m.startswith(('fleetgate.live', 'fleetgate.checks.live_')))); "
           "sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", run], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and "3 passed in " in lines[-2] and lines[-1] == "[]", (done.stdout, done.stderr)


def test_the_live_gate_without_httpx_says_so_in_one_line() -> None:
    """With --endpoint the live stack is needed: a Python without httpx is told so in one line."""
    run = ("import sys; sys.modules['httpx'] = None; import pytest; "
           "sys.exit(pytest.main(['live/test_live_identity.py', '--endpoint', 'reference', '-q', '-p', 'no:cacheprovider']))")
    line = _one_line_refusal([sys.executable, "-c", run])
    assert line.startswith("ERROR: fleetgate needs the httpx package, which this Python"), line


UNIT_SCRIPT = REPO / "fixtures" / "fleets" / "unit-script"
# One test of each kind, each failing for a reason of its own: the live health against a closed port, the host's unit
# read here (no systemd, or no such unit: it fails either way), the seam of the unit that runs its engine as root.
EVERY_KIND = ("live/test_live_identity.py::test_health", "live/test_host.py::test_unit_state",
              "seams/test_units.py::test_unit_user")
HEALTH, UNIT_STATE, UNIT_USER = (f"{path}[qwen]" for path in EVERY_KIND)


def fleet_repository(pytester: pytest.Pytester) -> Path:
    """A fleet's repository at the rootdir (fixtures/fleets/unit-script, less its expected tables): the plugin supplies
    its seams/ and live/."""
    shutil.copytree(UNIT_SCRIPT, pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("expected*"))
    return pytester.path / "fleet.toml"


def _broken(hook: str, *nodeids: str) -> list[str]:
    return [f"fleetgate: {hook}{f' ({n})' if n else ''} failed: RuntimeError: broken on purpose" for n in nodeids or [""]]


@pytest.mark.parametrize(
    ("broken", "lines"),
    [
        ("fleetgate.gate.live_note", _broken("pytest_runtest_makereport", HEALTH)),
        ("fleetgate.gate.host_note", _broken("pytest_runtest_makereport", UNIT_STATE)),
        # every report of a live or host check carries the live gate's record
        ("fleetgate.plugin._live._Result", _broken("pytest_runtest_logreport", HEALTH, UNIT_STATE)),
        ("fleetgate.gate.summary_word", _broken("pytest_terminal_summary")),
        # every failure of a check is said in the operator's words, live and host checks' too
        ("fleetgate.plugin._seams._relative", _broken("pytest_runtest_makereport", HEALTH, UNIT_STATE, UNIT_USER)),
    ],
    ids=["live-makereport", "host-makereport", "live-logreport", "live-summary", "seams-makereport"],
)
def test_a_bug_in_any_reporting_hook_is_one_line_and_the_run_keeps_its_outcome(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, broken: str, lines: list[str]
) -> None:
    """Every hook of the plugin that runs per report or at the summary (_live, _host, _seams; _report's own are proven
    in tests/test_reports.py) turns its exception into one line under "fleetgate: reporting errors"."""
    # Imported here: pytester drops the modules a run imported, and the patch must land on the module that the hooks'
    # lazy imports find.
    import fleetgate.gate  # noqa: F401

    def raising(*_: object, **__: object) -> object:
        raise RuntimeError("broken\non purpose")

    monkeypatch.setattr(broken, raising)
    fleet_repository(pytester)
    result = pytester.runpytest("--fleet", "fleet.toml", *EVERY_KIND, "--endpoint", "qwen", "--base-url",
                                "http://127.0.0.1:9", "--host-url", "qwen=local://", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    out = result.stdout.lines
    start = next(i for i, x in enumerate(out) if x.startswith("-") and " fleetgate: reporting errors " in x) + 1
    end = next(i for i, x in enumerate(out) if x.startswith("=") and " short test summary info " in x)
    assert out[start:end] == lines


# -- the supplied modules (fleetgate/plugin/_collect.py): what a fleet's repository with only fleetgate installed gets --


def _ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if "::" in line]


def example_fleet_at_root(pytester: pytest.Pytester) -> Path:
    shutil.copytree(FLEET, pytester.path, dirs_exist_ok=True)
    return pytester.path / "fleet.toml"


def test_a_supplied_node_id_typed_on_the_command_line_runs_that_test_alone(pytester: pytest.Pytester) -> None:
    """As pytest prints a failure (``seams/test_argv.py::test_engine_accepts_argv[frank-zealot]``), so it can be run
    again, though no such file is on disk; the function without its id runs it on every service."""
    example_fleet_at_root(pytester)
    function = "seams/test_argv.py::test_engine_accepts_argv"
    one = pytester.runpytest("--fleet", "fleet.toml", f"{function}[frank-zealot]", "-p", "no:cacheprovider", "-v")
    one.assert_outcomes(passed=1)
    one.stdout.fnmatch_lines([f"{function}[[]frank-zealot[]] PASSED*"])
    every = pytester.runpytest("--fleet", "fleet.toml", function, "--collect-only", "-q", "-p", "no:cacheprovider")
    services = sorted(service for service, check in CLEAN if check == "engine-accepts-argv")
    assert sorted(_ids(every)) == [f"{function}[{service}]" for service in services]


def test_a_supplied_node_id_that_names_no_test_is_one_line_not_no_tests_ran(pytester: pytest.Pytester) -> None:
    example_fleet_at_root(pytester)
    result = pytester.runpytest("--fleet", "fleet.toml", "seams/test_argv.py::test_engine_accepts_argv[nobody]",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["fleetgate: the fleet was given but no test ran: the arguments, -k, -m, --check or "
                                 "--incident selected none of its checks (pytest --fleet FLEET --collect-only lists them)"])


def test_a_fleet_run_that_selects_nothing_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """Exit 5 ("no tests") is never the answer to a run given a fleet: a fleet always has checks."""
    fleet_repository(pytester)
    result = pytester.runpytest("--fleet", "fleet.toml", "-k", "no_such_check", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stdout.lines if line.startswith("fleetgate:")] == [
        "fleetgate: the fleet was given but no test ran: the arguments, -k, -m, --check or --incident selected none of "
        "its checks (pytest --fleet FLEET --collect-only lists them)"]


def test_live_modules_are_supplied_only_for_the_live_gate(pytester: pytest.Pytester) -> None:
    fleet_repository(pytester)
    seams = pytester.runpytest("--fleet", "fleet.toml", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert seams.ret == pytest.ExitCode.OK
    assert {line.partition("/")[0] for line in _ids(seams)} == {"seams"}
    gate = pytester.runpytest("--fleet", "fleet.toml", "--skip-live", "--collect-only", "-q", "-p", "no:cacheprovider")
    supplied_live = [line for line in _ids(gate) if line.startswith("live/")]
    # every live and host check of the supplied table, once: its placeholder with no endpoint
    from fleetgate.plugin._modules import MODULES

    live_checks = [check for module in MODULES if module.directory == "live" for check in module.checks]
    assert len(supplied_live) == len(live_checks)
    assert all(line.endswith("[no-endpoint]") for line in supplied_live), supplied_live
    assert [line for line in _ids(gate) if not line.startswith("live/")] == _ids(seams)


def test_a_module_on_disk_wins_over_the_supplied_one_and_ignore_drops_one(pytester: pytest.Pytester) -> None:
    fleet_repository(pytester)
    supplied = _ids(pytester.runpytest("--fleet", "fleet.toml", "--collect-only", "-q", "-p", "no:cacheprovider"))
    argv = [line for line in supplied if line.startswith("seams/test_argv.py::")]
    assert argv == ["seams/test_argv.py::test_engine_accepts_argv[qwen]"]
    ignored = pytester.runpytest("--fleet", "fleet.toml", "--ignore=seams/test_argv.py", "--collect-only", "-q",
                                 "-p", "no:cacheprovider")
    assert _ids(ignored) == [line for line in supplied if line not in argv]
    own = pytester.mkdir("seams") / "test_argv.py"
    own.write_text("def test_the_fleets_own():\n    pass\n")
    mine = pytester.runpytest("--fleet", "fleet.toml", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert _ids(mine) == [line if line not in argv else "seams/test_argv.py::test_the_fleets_own" for line in supplied]


def test_a_fleet_repository_run_without_its_fleet_says_what_to_pass(pytester: pytest.Pytester) -> None:
    """No --fleet, no ini option, a fleet.toml at the rootdir: one line naming both ways, not "no tests ran"."""
    fleet_repository(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line.strip()] == [
        "ERROR: fleetgate: no fleet given, and fleet.toml is at the rootdir: pass --fleet fleet.toml, or set "
        'fleetgate_fleet = "fleet.toml" in the ini file ([tool.pytest.ini_options] of pyproject.toml)']


def test_a_directory_without_a_fleet_keeps_pytests_own_answer(pytester: pytest.Pytester) -> None:
    """Another project (no fleet.toml, no ini option) meets nothing of fleetgate's, even with no tests at all."""
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "fleetgate:" not in result.stdout.str() + result.stderr.str()


def test_the_pyproject_ini_option_names_the_fleet_for_a_bare_pytest(pytester: pytest.Pytester) -> None:
    """``pytest`` alone, in a fleet's repository whose pyproject.toml names the fleet: every seam, as with --fleet."""
    fleet_repository(pytester)
    given = pytester.runpytest("--fleet", "fleet.toml", "-p", "no:cacheprovider", "-rA")
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nfleetgate_fleet = "fleet.toml"\n')
    bare = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    assert bare.ret == given.ret == pytest.ExitCode.TESTS_FAILED
    # unit-script's two findings: its unit runs the engine as root (unit-user), on 0.0.0.0 with no key (engine-auth)
    bare.assert_outcomes(failed=2, passed=12, skipped=45)
    summary = [line.split(" - ")[0] for line in given.stdout.lines if line.startswith(("PASSED ", "FAILED ", "SKIPPED "))]
    assert summary == [line.split(" - ")[0] for line in bare.stdout.lines if line.startswith(("PASSED ", "FAILED ", "SKIPPED "))]
    assert "FAILED seams/test_units.py::test_unit_user[qwen]" in summary
