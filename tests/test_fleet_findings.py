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
    recorder = pytester.inline_run(str(SEAM_MODULE), f"--fleet={fleet_toml}", "-p", "no:cacheprovider", "-q",
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
