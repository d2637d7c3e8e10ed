"""The host readers on real output: ``systemctl show`` recorded from a real systemd 252 (labelled in the file),
and this machine's own /proc/meminfo, ss and readelf."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleetgate.host import environment_files, limit_bytes, meminfo, parse_show, parse_ss_pid, runpath
from fleetgate.reference import llama_bin_dir

RECORDED = Path(__file__).parent / "recorded" / "systemctl-show-fgref.txt"


def test_systemctl_show_recorded_from_a_real_systemd() -> None:
    shown = parse_show(RECORDED.read_text(encoding="utf-8"))
    assert shown["NRestarts"] == ["5"]
    assert shown["DropInPaths"][0].split() == ["/run/systemd/system/fgref.service.d/bench.conf",
                                               "/etc/systemd/system/fgref.service.d/ptq1.conf"]
    assert environment_files(shown["EnvironmentFiles"]) == [("/tmp/fg-bench.env", True)]
    assert limit_bytes(shown["LimitMEMLOCK"][0]) == 8 << 20
    assert shown["User"] == ["nobody"]


@pytest.mark.parametrize(("value", "expected"), [("infinity", None), ("8M", 8 << 20), ("8388608", 8 << 20),
                                                 ("18446744073709551615", None), ("64K", 64 << 10)])
def test_limits_as_units_set_them_and_systemd_shows_them(value: str, expected: int | None) -> None:
    assert limit_bytes(value) == expected


def test_meminfo_of_this_machine() -> None:
    text = Path("/proc/meminfo").read_text(encoding="utf-8")
    fields = meminfo(text)
    first = text.splitlines()[0].split()
    assert fields["MemTotal"] == int(first[1]) * 1024
    assert 0 < fields["MemAvailable"] <= fields["MemTotal"]


def test_ss_names_the_listener() -> None:
    line = 'LISTEN 0      512    127.0.0.1:18231 0.0.0.0:* users:(("llama-server",pid=4426,fd=3))'
    assert parse_ss_pid(line) == 4426
    assert parse_ss_pid("LISTEN 0 128 0.0.0.0:2024 0.0.0.0:*") is None


def test_runpath_of_the_engine_binary() -> None:
    out = subprocess.run(["readelf", "-d", str(llama_bin_dir() / "llama-server")], capture_output=True, text=True,
                         check=True).stdout
    needed, paths = runpath(out)
    assert "libllama-server-impl.so" in needed
    assert paths == ("$ORIGIN",)
