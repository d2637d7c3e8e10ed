"""A service whose unit the host's manager cannot show: every systemd check says why, and the process checks
cannot find the MainPID. Run on the suite's own machine: where systemd is not PID 1 (a container, CI)
``systemctl show`` itself fails; where it is, the unit is not installed and shows LoadState=not-found."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.host.conftest import fleet_copy, run_host_gate, unit_fleet_copy

SYSTEMD_CHECKS = ("host-unit-state", "host-unit-drop-ins", "host-unit-limits", "host-boot-persistence")
PROCESS_CHECKS = ("host-process-argv", "host-process-env", "host-runtime-libs")


def test_a_unit_no_manager_shows(pytester: pytest.Pytester, tmp_path: Path, port: int, engine: None) -> None:
    fleet_toml, _ = unit_fleet_copy(tmp_path / "fleet", port)
    gate = run_host_gate(pytester, fleet_toml)
    if Path("/run/systemd/system").is_dir():  # systemd is this machine's init: the unit is just not installed
        expected = {**{c: f"{c}/not-loaded" for c in SYSTEMD_CHECKS}, **{c: f"{c}/no-process" for c in PROCESS_CHECKS}}
    else:
        expected = {**{c: f"{c}/systemctl-failed" for c in SYSTEMD_CHECKS},
                    **{c: f"{c}/pid-unreadable" for c in PROCESS_CHECKS}}
    assert gate.outcomes() == {**expected, "host-payload": "PASS"}, gate.result.stdout.str()


def test_no_readelf_on_the_host_fails_the_libs_check(pytester: pytest.Pytester, tmp_path: Path, port: int,
                                                      reference_on: Callable[[Path], None],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without binutils: every tool the checks use is on PATH but readelf."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    reference_on(fleet_toml)
    tools = tmp_path / "tools"
    tools.mkdir()
    for directory in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        for tool in Path(directory).iterdir():
            if tool.name != "readelf" and not (tools / tool.name).exists():
                (tools / tool.name).symlink_to(tool)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{tools}")
    gate = run_host_gate(pytester, fleet_toml)
    assert gate.outcomes() == {**{c: "SKIPPED" for c in SYSTEMD_CHECKS}, "host-process-argv": "PASS",
                               "host-process-env": "PASS", "host-runtime-libs": "host-runtime-libs/readelf-failed",
                               "host-payload": "PASS"}, gate.result.stdout.str()
