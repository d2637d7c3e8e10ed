"""A service whose unit the host's manager cannot show: every systemd check says why, and the process checks
cannot find the MainPID. Run on the suite's own machine: where systemd is not PID 1 (a container, CI)
``systemctl show`` itself fails; where it is, the unit is not installed and shows LoadState=not-found."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgate.reference import llama_bin_dir, model_dir
from tests.host.conftest import fleet_copy, run_host_gate, unit_fleet_copy

SYSTEMD_CHECKS = ("host-unit-state", "host-unit-drop-ins", "host-unit-limits", "host-boot-persistence")
PROCESS_CHECKS = ("host-process-argv", "host-process-env", "host-exposure", "host-runtime-libs")


def test_a_unit_no_manager_shows(tmp_path: Path, port: int, engine: None) -> None:
    fleet_toml, _ = unit_fleet_copy(tmp_path / "fleet", port)
    gate = run_host_gate(fleet_toml)
    if Path("/run/systemd/system").is_dir():  # systemd is this machine's init: the unit is just not installed
        expected = {**{c: f"{c}/not-loaded" for c in SYSTEMD_CHECKS}, **{c: f"{c}/no-process" for c in PROCESS_CHECKS}}
    else:
        expected = {**{c: f"{c}/systemctl-failed" for c in SYSTEMD_CHECKS},
                    **{c: f"{c}/process-unreadable" for c in PROCESS_CHECKS}}
    assert gate.outcomes() == {**expected, "host-payload": "PASS", "host-memavailable": "SKIPPED",
                               "host-vram-vs-ledger": "SKIPPED"}, gate.output


def test_no_readelf_on_the_host_fails_the_libs_check(tmp_path: Path, port: int,
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
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**{c: "SKIPPED" for c in SYSTEMD_CHECKS}, "host-process-argv": "PASS",
                               "host-process-env": "PASS", "host-exposure": "PASS",
                               "host-runtime-libs": "host-runtime-libs/readelf-failed",
                               "host-payload": "PASS", "host-memavailable": "SKIPPED",
                               "host-vram-vs-ledger": "SKIPPED"}, gate.output


def test_a_rootless_quadlet_whose_user_does_not_linger(tmp_path: Path, port: int,
                                                       engine: None) -> None:
    """The reference as a Quadlet of the user who owns the checkout: that user does not linger here (B-UN-2), and
    there is no user manager to show the unit."""
    fleet_dir = tmp_path / "fleet"
    fleet_toml, _ = unit_fleet_copy(fleet_dir, port)
    quadlet = fleet_dir / "scripts" / "reference.container"
    quadlet.write_text(f"""[Container]
Image=localhost/fleetgate-reference:11434
Environment=PATH={llama_bin_dir()}:/usr/bin:/bin
Environment=REFERENCE_MODELS={model_dir()}
Volume={fleet_dir}/scripts:/entry:ro
Exec=/entry/serve-reference.sh

[Service]
Restart=on-failure

[Install]
WantedBy=default.target
""", encoding="utf-8")
    text = fleet_toml.read_text(encoding="utf-8")
    fleet_toml.write_text(text.replace('unit = "scripts/reference.service"', 'unit = "scripts/reference.container"'),
                          encoding="utf-8")
    owner = fleet_dir.owner()
    assert not Path(f"/var/lib/systemd/linger/{owner}").exists()
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {
        "host-unit-state": "host-unit-state/systemctl-failed",
        "host-unit-drop-ins": "host-unit-drop-ins/systemctl-failed",
        "host-unit-limits": "SKIPPED",
        "host-boot-persistence": "host-boot-persistence/no-linger",
        **{c: f"{c}/process-unreadable" for c in PROCESS_CHECKS},
        "host-payload": "PASS",
        "host-memavailable": "SKIPPED",
        "host-vram-vs-ledger": "SKIPPED",
    }, gate.output
