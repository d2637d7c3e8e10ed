"""The service's host, read through testinfra: systemd's view of the unit, the engine's process, its
libraries, its memory and cards (INC-53, INC-88, INC-75, INC-10, B-DV, B-RAM-1, B-RAM-4, B-UN-1/2/3, C-H-3)."""

import pytest

from fleetgate.plugin import HostCheck


@pytest.mark.check("host-unit-state")
def test_unit_state(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-unit-drop-ins")
def test_unit_drop_ins(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-unit-limits")
def test_unit_limits(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-boot-persistence")
def test_boot_persistence(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-process-argv")
def test_process_argv(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-process-env")
def test_process_env(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-exposure")
def test_exposure(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-runtime-libs")
def test_runtime_libs(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-payload")
def test_payload(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-memavailable")
def test_memavailable(host_check: HostCheck) -> None:
    host_check.run()


@pytest.mark.check("host-vram-vs-ledger")
def test_vram_vs_ledger(host_check: HostCheck) -> None:
    host_check.run()
