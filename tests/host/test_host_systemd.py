"""The systemd host checks against a real systemd: the reference served by a unit of a nested systemd
(tests/host/nested_systemd.py), read by ``pytest live/test_host.py --endpoint reference`` run inside its
namespaces through testinfra's local backend. Each systemd check is shown passing, then failing on a real
misconfiguration of the running unit: a bench drop-in, a lowered memlock, a disabled unit, a crash and
restart, a stopped service.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetgate.reference import free_port
from tests.host.conftest import _LINE, HOST_TESTS, healthy, unit_fleet_copy
from tests.host.nested_systemd import NestedSystemd, why_not

UNIT = "reference.service"
DROP_IN_DIR = f"/etc/systemd/system/{UNIT}.d"
ALL_PASS = {name: "PASS" for name in (
    "host-unit-state", "host-unit-drop-ins", "host-unit-limits", "host-boot-persistence",
    "host-process-argv", "host-process-env", "host-exposure", "host-runtime-libs", "host-payload")}
ALL_PASS["host-memavailable"] = "SKIPPED"  # the reference declares no pin gate (tests/host/test_host_memory.py)
ALL_PASS["host-vram-vs-ledger"] = "SKIPPED"  # and its host no cards (tests/host/test_host_vram.py)

pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")


@dataclass
class Served:
    systemd: NestedSystemd
    fleet_toml: Path
    port: int
    work: Path

    def healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if healthy(self.port):
                return
            time.sleep(0.2)
        status = self.systemd.run("systemctl", "status", "--no-pager", UNIT).stdout
        raise AssertionError(f"the reference unit never became healthy:\n{status}")

    def systemctl(self, *args: str) -> str:
        done = self.systemd.run("systemctl", *args)
        assert done.returncode == 0, f"systemctl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def reset(self) -> None:
        """The unit as the repository declares it: no drop-ins, enabled, freshly started."""
        self.systemd.run("rm", "-rf", DROP_IN_DIR)
        self.systemctl("daemon-reload")
        self.systemctl("enable", UNIT)
        self.systemctl("restart", UNIT)
        self.healthy()

    def gate(self) -> dict[str, str]:
        # fleetgate supplies live/test_host.py (not on disk): its directory, and the module by name
        done = self.systemd.run(sys.executable, "-m", "pytest", str(HOST_TESTS.parent), "-k", HOST_TESTS.name,
                                "--endpoint", "reference",
                                "--fleet", str(self.fleet_toml), "-p", "no:cacheprovider", timeout=120)
        outcomes = {}
        for line in done.stdout.splitlines():
            match = _LINE.match(line)
            if match:
                word, name, note = match.groups()
                outcomes[name] = note.split(":", 1)[0] if word == "FAIL" else word
        assert outcomes, done.stdout + done.stderr
        self.last_output = done.stdout
        return outcomes


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("systemd")
    port = free_port()
    fleet_dir = work / "fleet"
    fleet_toml, unit_text = unit_fleet_copy(fleet_dir, port)
    fleet_dir.chmod(0o755)
    systemd = NestedSystemd.start(fleet_dir, work)
    try:
        systemd.write(f"/etc/systemd/system/{UNIT}", unit_text)
        served = Served(systemd, fleet_toml, port, work)
        served.reset()
        yield served
    finally:
        systemd.stop()


def test_the_reference_unit_passes_every_host_check(served: Served) -> None:
    served.reset()
    assert served.gate() == ALL_PASS, served.last_output


def test_a_bench_drop_in_fails_the_drop_in_and_limit_checks(served: Served) -> None:
    """INC-53 and B-RAM-4 on a real manager: an optional env file in /tmp and a lowered memlock."""
    served.reset()
    served.systemd.write(f"{DROP_IN_DIR}/ptq1.conf",
                         "[Service]\nEnvironmentFile=-/tmp/zealot-arm-current.env\nLimitMEMLOCK=8M\n")
    served.systemctl("daemon-reload")
    assert served.gate() == {**ALL_PASS, "host-unit-drop-ins": "host-unit-drop-ins/foreign-drop-in",
                             "host-unit-limits": "host-unit-limits/memlock-differs"}, served.last_output


def test_an_optional_env_file_outside_the_repository_fails_the_drop_in_check(served: Served) -> None:
    """INC-53 through a drop-in the repository does have: its EnvironmentFile=- names /tmp."""
    repo_drop_in = served.fleet_toml.parent / "scripts" / f"{UNIT}.d" / "bench.conf"
    text = "[Service]\nEnvironmentFile=-/tmp/zealot-arm-current.env\n"
    repo_drop_in.parent.mkdir()
    repo_drop_in.write_text(text, encoding="utf-8")
    try:
        served.reset()
        served.systemd.write(f"{DROP_IN_DIR}/bench.conf", text)
        served.systemctl("daemon-reload")
        assert served.gate() == {**ALL_PASS, "host-unit-drop-ins": "host-unit-drop-ins/env-file-outside"}, \
            served.last_output
    finally:
        repo_drop_in.unlink()
        repo_drop_in.parent.rmdir()


def test_another_user_fails_the_limit_check(served: Served) -> None:
    served.reset()
    served.systemd.write(f"{DROP_IN_DIR}/user.conf", "[Service]\nUser=root\n")
    served.systemctl("daemon-reload")
    assert served.gate() == {**ALL_PASS, "host-unit-drop-ins": "host-unit-drop-ins/foreign-drop-in",
                             "host-unit-limits": "host-unit-limits/user-differs"}, served.last_output


def test_a_disabled_unit_fails_boot_persistence(served: Served) -> None:
    served.reset()
    served.systemctl("disable", UNIT)
    assert served.gate() == {**ALL_PASS, "host-boot-persistence": "host-boot-persistence/not-enabled"}, \
        served.last_output


def test_a_crash_and_restart_fails_the_state_check(served: Served) -> None:
    served.reset()
    pid = served.systemctl("show", "--property=MainPID", "--value", UNIT).strip()
    served.systemd.run("kill", "-KILL", pid, check=True)
    time.sleep(0.5)
    served.healthy()
    assert served.systemctl("show", "--property=NRestarts", "--value", UNIT).strip() == "1"
    assert served.gate() == {**ALL_PASS, "host-unit-state": "host-unit-state/restarted"}, served.last_output


def test_a_stopped_unit_fails_state_and_process_checks(served: Served) -> None:
    served.reset()
    served.systemctl("stop", UNIT)
    assert served.gate() == {**ALL_PASS, "host-unit-state": "host-unit-state/inactive",
                             "host-process-argv": "host-process-argv/no-process",
                             "host-process-env": "host-process-env/no-process",
                             "host-exposure": "host-exposure/no-process",
                             "host-runtime-libs": "host-runtime-libs/no-process"}, served.last_output


def test_a_unit_the_manager_does_not_have_fails_every_systemd_check(served: Served) -> None:
    """fleet.toml names a unit that was never installed: systemd shows LoadState=not-found. The process
    checks find the engine by its port instead (the reference still runs under the installed unit)."""
    served.reset()
    manifest = served.fleet_toml
    clean = manifest.read_text(encoding="utf-8")
    other = manifest.parent / "scripts" / "reference-other.service"
    other.write_text((manifest.parent / "scripts" / UNIT).read_text(encoding="utf-8"), encoding="utf-8")
    manifest.write_text(clean.replace('unit = "scripts/reference.service"', 'unit = "scripts/reference-other.service"'),
                        encoding="utf-8")
    try:
        assert served.gate() == {**ALL_PASS, **{c: f"{c}/not-loaded" for c in (
            "host-unit-state", "host-unit-drop-ins", "host-unit-limits", "host-boot-persistence")}}, served.last_output
    finally:
        manifest.write_text(clean, encoding="utf-8")
        other.unlink()


def test_the_pin_gate_credits_the_units_main_pid(served: Served) -> None:
    """host-memavailable on a real manager: the engine is systemd's MainPID, and its RssAnon is credited. A gate
    of the model plus 1 GiB clears on this machine; one of 4096 GiB is short."""
    served.reset()
    manifest = served.fleet_toml
    clean = manifest.read_text(encoding="utf-8")
    try:
        for floor, expected in ((1, "PASS"), (4096, "host-memavailable/short")):
            manifest.write_text(clean + f"\n[services.reference.pin_gate]\npinned_gib = 0.0916\nfloor_gib = {floor}\n",
                                encoding="utf-8")
            assert served.gate() == {**ALL_PASS, "host-memavailable": expected}, served.last_output
        main_pid = served.systemctl("show", "--property=MainPID", "--value", UNIT).strip()
        assert f"RssAnon of PID {main_pid} released by the restart (MainPID of reference.service" in served.last_output
    finally:
        manifest.write_text(clean, encoding="utf-8")
