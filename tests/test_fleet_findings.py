"""Fleet-level seams (fleetgate/checks/seam_fleet.py), run through the real plugin on mutated copies of
the example fleet: each failure branch is asserted by its code, every other outcome exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
SEAM_MODULE = REPO / "seams" / "test_fleet.py"
RENDERED_PORT_SERVICES = ("frank-medium", "frank-archon", "frank-zealot", "reference")


def outcomes(pytester: pytest.Pytester, fleet_toml: Path) -> dict[tuple[str, str], str]:
    """(test id, outcome or failure code) for every test of seams/test_fleet.py."""
    # fleetgate supplies the module (not on disk): its directory, and the module by name
    recorder = pytester.inline_run(str(SEAM_MODULE.parent), "-k", SEAM_MODULE.name, f"--fleet={fleet_toml}", "-p", "no:cacheprovider", "-q",
                                   "--import-mode=importlib")
    found: dict[tuple[str, str], str] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            continue
        name, _, subject = report.nodeid.partition("[")
        key = (name.rsplit("::", 1)[-1], subject.rstrip("]"))
        if report.failed:
            first = str(report.longrepr).splitlines()[0]
            found[key] = first.partition(": ")[2].split(" [")[0]
        else:
            found[key] = report.outcome
    return found


def mutated(tmp_path: Path, *edits: tuple[str, str, str]) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(FLEET, target)
    for name, old, new in edits:
        path = target / name
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {name}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return target / "fleet.toml"


def expected(**failures: str) -> dict[tuple[str, str], str]:
    table = {("test_fleet_numbers_finite", "frank"): "passed", ("test_service_ports_unique", "frank"): "passed"}
    table.update({("test_rendered_port_matches", name): "passed" for name in RENDERED_PORT_SERVICES})
    for key, code in failures.items():
        test, _, subject = key.partition("__")
        table[(f"test_{test}", subject.replace("_", "-"))] = code
    return table


def test_the_example_fleet_passes(pytester: pytest.Pytester) -> None:
    assert outcomes(pytester, FLEET / "fleet.toml") == expected()


def test_inf_and_nan_fail_the_finite_seam(pytester: pytest.Pytester, tmp_path: Path) -> None:
    fleet = mutated(tmp_path, ("fleet.toml", "ram_gib = 62", "ram_gib = inf"),
                    ("fleet.toml", "vllm_max_gpu_memory_utilization = 0.98", "vllm_max_gpu_memory_utilization = nan"))
    assert outcomes(pytester, fleet) == expected(fleet_numbers_finite__frank="fleet-numbers-finite/non-finite")


def test_two_active_services_on_one_port_and_a_port_the_script_does_not_pass(pytester: pytest.Pytester,
                                                                             tmp_path: Path) -> None:
    # frank-zealot moved onto frank-dragoon's host:port in fleet.toml only: its env file still says 7771.
    fleet = mutated(tmp_path, ("fleet.toml", 'host = "rtx3090"\nport = 7771', 'host = "apu"\nport = 7773'))
    assert outcomes(pytester, fleet) == expected(
        service_ports_unique__frank="service-ports-unique/duplicate",
        rendered_port_matches__frank_zealot="rendered-port-matches/differs",
    )


def test_a_rollback_may_share_the_port_it_replaces(pytester: pytest.Pytester, tmp_path: Path) -> None:
    fleet = mutated(tmp_path, ("fleet.toml", 'state = "rollback"\n', 'state = "active"\n'))
    assert outcomes(pytester, fleet) == expected(service_ports_unique__frank="service-ports-unique/duplicate")


def test_the_engine_default_port_counts_as_rendered(pytester: pytest.Pytester, tmp_path: Path) -> None:
    fleet = mutated(tmp_path, ("scripts/serve-reference.sh", '    --port "$PORT"\n', ""))
    assert outcomes(pytester, fleet) == expected(rendered_port_matches__reference="rendered-port-matches/differs")


# The readers' last tracebacks (issue 16): each input is one line naming file, line and what was expected, or a
# correct reading.

def _load_error(tmp_path: Path, *edits: tuple[str, str, str]) -> str:
    from fleetgate.errors import InputError
    from fleetgate.manifest import load_fleet

    fleet = mutated(tmp_path, *edits)
    with pytest.raises(InputError) as raised:
        load_fleet(fleet)
    message = str(raised.value)
    assert "\n" not in message
    return message.replace(f"{fleet.parent}/", "")


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def test_a_ram_figure_past_any_machine_is_one_line(tmp_path: Path) -> None:
    line = _line_of((FLEET / "fleet.toml").read_text(encoding="utf-8"), "ram_gib = 62")
    assert _load_error(tmp_path, ("fleet.toml", "ram_gib = 62", "ram_gib = 1e308")) == (
        f"fleet.toml:{line}: hosts.dankserver.ram_gib = 1e+308 GiB is 1 PiB (1048576 GiB) or more, more than any machine or "
        "card holds; expected the figure in GiB")


@pytest.mark.parametrize(("literal", "shown"), [
    ("1979-05-27", "the date 1979-05-27"),
    ("07:32:00", "the time 07:32:00"),
    ("1979-05-27T07:32:00Z", "the date-time 1979-05-27T07:32:00+00:00"),
    ("1979-05-27T07:32:00", "the date-time 1979-05-27T07:32:00"),
], ids=["date", "time", "offset-date-time", "local-date-time"])
def test_a_toml_date_or_time_where_a_number_belongs_is_one_line(tmp_path: Path, literal: str, shown: str) -> None:
    line = _line_of((FLEET / "fleet.toml").read_text(encoding="utf-8"), "port = 7771")
    assert _load_error(tmp_path, ("fleet.toml", "port = 7771", f"port = {literal}")) == (
        f"fleet.toml:{line}: services.frank-zealot.port: expected integer, got {shown}")


def test_a_date_inside_a_table_where_a_string_belongs_is_one_line(tmp_path: Path) -> None:
    assert _load_error(tmp_path, ("fleet.toml", 'deploy_root = "/home/dank/serverAppConfigs"', "deploy_root = 2026-12-01")) \
        .endswith("fleet.deploy_root: expected string, got the date 2026-12-01")


def test_a_string_kv_pool_token_count_is_one_line(tmp_path: Path) -> None:
    line = _line_of((FLEET / "fleet.toml").read_text(encoding="utf-8"), "tokens = 425047")
    assert _load_error(tmp_path, ("fleet.toml", "tokens = 425047", 'tokens = "425047"')) == (
        f'fleet.toml:{line}: services.frank-archon.calibration.kv_pool.0.tokens: expected integer, got "425047"')


@pytest.mark.parametrize("ratio", ["inf", "nan"])
def test_a_non_finite_extrapolation_is_the_finite_seams_finding_and_the_window_seam_skips(
        pytester: pytest.Pytester, tmp_path: Path, ratio: str) -> None:
    fleet = mutated(tmp_path)
    with (fleet.parent / "fleet.toml").open("a", encoding="utf-8") as manifest:
        manifest.write(f'\n[services.reference.extrapolation]\nmax_ratio = {ratio}\nwhy = "a typo"\n')
    recorder = pytester.inline_run(str(SEAM_MODULE.parent), f"--fleet={fleet}",
                                   "-p", "no:cacheprovider", "-q", "--import-mode=importlib", "-k",
                                   "slot_within_trained_window or fleet_numbers_finite")
    found = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        if report.when == "call" or report.outcome != "passed":
            name, _, subject = report.nodeid.rpartition("::")[2].partition("[")
            text = str(report.longrepr) if report.failed else (report.longrepr[2] if report.skipped else "")  # type: ignore[index]
            found[(name, subject.rstrip("]"))] = (report.outcome, text.splitlines()[0].split(" [")[0] if text else "")
    assert found == {
        ("test_fleet_numbers_finite", "frank"): (
            "failed", "frank: fleet-numbers-finite/non-finite"),
        ("test_slot_within_trained_window", "frank-medium"): ("passed", ""),
        ("test_slot_within_trained_window", "frank-zealot"): ("passed", ""),
        ("test_slot_within_trained_window", "reference"): (
            "skipped", f"Skipped: reference: services.reference.extrapolation.max_ratio is {float(ratio)}, not a ratio "
                       "(fleet-numbers-finite reports it): declare the finite ratio the extrapolation was measured to"),
    }


def test_a_serve_script_nested_past_bash_s_parser_is_one_line(tmp_path: Path) -> None:
    """200,000 nested $( overflow bash's recursive parser: bash -n dies of SIGSEGV without a word."""
    from fleetgate.manifest import load_fleet
    from fleetgate.render.rendered import attempt_service

    depth = 200_000
    script = "scripts/serve-reference.sh"
    shebang = (FLEET / script).read_text(encoding="utf-8").partition("\n")[0] + "\n"
    fleet = load_fleet(mutated(tmp_path, (script, shebang, shebang + ": " + "$(" * depth + ")" * depth + "\n")))
    attempt = attempt_service(fleet, fleet.services["reference"])
    assert attempt.config is None and attempt.broken is not None
    assert str(attempt.broken).replace(f"{fleet.root}/", "") == (
        f"{script}: bash died of SIGSEGV while parsing the serve script (constructs nested too deeply?); "
        "expected a script bash can parse")


def test_a_pyproject_whose_tool_pytest_is_not_a_table_holds_no_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.cli import main

    (tmp_path / "pyproject.toml").write_text('[tool]\npytest = "x"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["render", "reference"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"fleetgate: {tmp_path}: no fleet manifest: pass --fleet PATH (fleet.toml in the current "
                                "directory, else the fleetgate_fleet ini option of ./pyproject.toml)"]


def test_a_systemd_env_file_with_cr_line_endings_reads_as_systemd_reads_it(tmp_path: Path) -> None:
    """systemd's env-file parser ends a line at CR as at LF (NEWLINE is "\\n\\r"): the same variables, same lines."""
    from fleetgate.envfile import parse_env_file
    from fleetgate.manifest import load_fleet
    from fleetgate.render.rendered import load_service

    env = "scripts/frank-medium.env"
    clean = load_fleet(FLEET / "fleet.toml")
    fleet = load_fleet(mutated(tmp_path))
    path = fleet.root / env
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r"))
    lines = {name: (e.value, e.line) for name, e in parse_env_file(FLEET / env, "systemd").items()}
    assert {name: (e.value, e.line) for name, e in parse_env_file(path, "systemd").items()} == lines
    assert load_service(fleet, fleet.services["frank-medium"]).rendered.argv == \
        load_service(clean, clean.services["frank-medium"]).rendered.argv


def test_cr_lf_and_cr_inside_values_follow_systemd(tmp_path: Path) -> None:
    from fleetgate.envfile import parse_env_text

    path = tmp_path / "x.env"
    # CR LF is two line ends to systemd: a backslash before it continues nothing. Lines are counted as an editor
    # counts them (CR LF one, a lone CR one).
    text = "A=1\r\nB=two \\\r\nC=3\r\nD=\"x\ry\"\rE='p\r\nq'\r\n"
    assert {n: (e.value, e.line) for n, e in parse_env_text(text, path, "systemd").items()} == {
        "A": ("1", 1), "B": ("two ", 2), "C": ("3", 3), "D": ("x\ry", 4), "E": ("p\r\nq", 6)}


def test_a_bash_env_file_with_a_nul_byte_reads_as_bash_reads_it(tmp_path: Path) -> None:
    """bash drops a NUL byte of a file it sources: A=1<NUL>2 sets A=12."""
    from fleetgate.envfile import parse_env_text

    entries = parse_env_text("A=1\x002\nB=3\x00\n", tmp_path / "b.env", "bash")
    assert {n: (e.value, e.line) for n, e in entries.items()} == {"A": ("12", 1), "B": ("3", 2)}


def test_parse_unit_is_linear_in_continuation_lines(tmp_path: Path) -> None:
    """200,000 continuation lines: four times the lines take about four times the CPU, not sixteen (it was quadratic)."""
    import time

    from fleetgate.units import parse_unit

    def unit(lines: int) -> Path:
        path = tmp_path / f"u{lines}.service"
        path.write_text("[Service]\nEnvironment=A=1 \\\n" + "B=2 \\\n" * lines + "C=3\nExecStart=/x\n", encoding="utf-8")
        return path

    def cpu(path: Path) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            parsed = parse_unit(path)
            best = min(best, time.process_time() - start)
        assert parsed.last("Service", "ExecStart") is not None
        return best

    small, large = unit(50_000), unit(200_000)
    setting = parse_unit(large).last("Service", "Environment")
    assert setting is not None and setting.line == 2 and setting.value.count("B=2") == 200_000
    ratio = cpu(large) / cpu(small)
    # Linear is 4; quadratic is 16. The bound sits between them, far from both, so a loaded machine's noise does not
    # move the verdict.
    assert ratio < 8.0, ratio
