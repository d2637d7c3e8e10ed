"""``host-memavailable`` on the real reference server and on recorded real /proc/meminfo text: the pin gate
clears, is short, is not declared, and MemAvailable cannot be read or parsed (B-RAM-1, C-H-1, INC-75).

``tests/host/recorded/proc-meminfo-ci.txt`` is this suite's CI machine's own /proc/meminfo, copied verbatim
(Linux 6.18, Debian 12, 24 GiB, 2026-11-30); the check reads it through testinfra's local backend because the
gate's ``meminfo`` names it, as the serve script's FRANK_LARGE_MEMINFO seam names a file (B-SH-5).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.host.conftest import fleet_copy, run_host_gate, unit_fleet_copy

RECORDED = Path(__file__).parent / "recorded" / "proc-meminfo-ci.txt"
MODEL_BYTES = 98362432  # the reference's SmolLM2 file (scripts/reference.payload)
GIB = 1 << 30


def _gate(pinned_gib: float, floor_gib: float, meminfo: str | None = None) -> Callable[[str], str]:
    def edit(text: str) -> str:
        extra = f'meminfo = "{meminfo}"\n' if meminfo else ""
        return text + f"\n[services.reference.pin_gate]\npinned_gib = {pinned_gib}\nfloor_gib = {floor_gib}\n{extra}"
    return edit


def test_no_gate_declared_skips_with_what_to_declare(tmp_path: Path, port: int,
                                                     reference_on: Callable[[Path], None]) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    reference_on(fleet_toml)
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    assert gate.outcomes() == {"host-memavailable": "SKIPPED"}, gate.output
    assert "add [services.reference.pin_gate] with pinned_gib" in gate.checks["host-memavailable"][1]


def test_the_gate_clears_on_the_running_reference(tmp_path: Path, port: int,
                                                  reference_on: Callable[[Path], None]) -> None:
    """The real server, the real /proc/meminfo: its model plus a 1 GiB floor clears on this machine."""
    available = int(re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M).group(1)) * 1024  # type: ignore[union-attr]
    assert available > 2 * GIB, "this machine has too little free RAM for the pass case to mean anything"
    fleet_toml = fleet_copy(tmp_path / "fleet", port, {"fleet.toml": _gate(MODEL_BYTES / GIB, 1)})
    reference_on(fleet_toml)
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    assert gate.outcomes() == {"host-memavailable": "PASS"}, gate.output


def test_a_gate_above_the_host_is_short_and_credits_the_running_engine(
        tmp_path: Path, port: int, reference_on: Callable[[Path], None]) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port, {"fleet.toml": _gate(MODEL_BYTES / GIB, 4096)})
    reference_on(fleet_toml)
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    assert gate.outcomes() == {"host-memavailable": "host-memavailable/short"}, gate.output
    out = gate.output
    assert re.search(r"RssAnon of PID \d+ released by the restart \(the process listening on port", out), out
    assert "(pinned 0.09 GiB + the engine's floor 4096.00 GiB" in out


def test_recorded_meminfo_short_of_inc75s_gate(tmp_path: Path, port: int,
                                               engine: None) -> None:
    """INC-75's gate (62.11 GiB checkpoint + 16 GiB floor) on the recorded 24 GiB machine, nothing running."""
    available_kib = int(re.search(r"^MemAvailable:\s+(\d+) kB", RECORDED.read_text(), re.M).group(1))  # type: ignore[union-attr]
    fleet_toml = fleet_copy(tmp_path / "fleet", port, {"fleet.toml": _gate(62.11, 16, str(RECORDED))})
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    assert gate.outcomes() == {"host-memavailable": "host-memavailable/short"}, gate.output
    short = 78.11 - available_kib / (1 << 20)
    out = gate.output
    assert f"{short:.2f} GiB short of the pin gate" in out, out
    assert "0 B released (reference is not running" in out


def test_meminfo_that_cannot_be_read_fails(tmp_path: Path, port: int, engine: None) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port, {"fleet.toml": _gate(1, 1, str(tmp_path / "no-such-meminfo"))})
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    assert gate.outcomes() == {"host-memavailable": "host-memavailable/meminfo-unreadable"}, gate.output


def test_a_file_that_is_not_meminfo_fails(tmp_path: Path, port: int, engine: None) -> None:
    """/proc/version: real kernel text, no MemAvailable in it."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port, {"fleet.toml": _gate(1, 1, "/proc/version")})
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    assert gate.outcomes() == {"host-memavailable": "host-memavailable/meminfo-unparseable"}, gate.output


def test_a_unit_no_manager_shows_cannot_be_credited(tmp_path: Path, port: int,
                                                     engine: None) -> None:
    """The reference as a unit on this machine: where no manager answers, the running engine's memory cannot be
    found, so the check fails rather than guess; where systemd is init, the unit is simply not running."""
    fleet_toml, _ = unit_fleet_copy(tmp_path / "fleet", port)
    fleet_toml.write_text(_gate(1, 1, str(RECORDED))(fleet_toml.read_text(encoding="utf-8")), encoding="utf-8")
    gate = run_host_gate(fleet_toml, only=("host-memavailable",))
    expected = "PASS" if Path("/run/systemd/system").is_dir() else "host-memavailable/process-unreadable"
    assert gate.outcomes() == {"host-memavailable": expected}, gate.output
