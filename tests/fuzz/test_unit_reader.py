"""systemd units and Quadlet files: any bytes read as a unit or one line; specifiers resolve or say why not."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.units import Setting, parse_unit, resolve_specifiers, split_command, split_environment_assignments
from tests.fuzz._oneline import assert_reads_or_one_line

UNITISH = st.sampled_from([*"[]=\\\"' \t\n#;%hniuHabABCDEFGSTV-_./é\0", "[Service]\n", "Environment=", "ExecStart=",
                           "EnvironmentFile=", "%%", "\\\n"])
LINES = st.lists(UNITISH, max_size=80).map("".join)


@given(st.one_of(LINES, st.text(max_size=200)).map(lambda t: t.encode("utf-8", "surrogatepass")) | st.binary(max_size=200),
       st.sampled_from(["x.service", "x@inst-a.service", "x.container"]))
def test_any_unit_file_is_read_or_one_line(data: bytes, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        unit = assert_reads_or_one_line(lambda: parse_unit(path))
        if hasattr(unit, "settings"):
            for setting in unit.settings:
                assert_reads_or_one_line(lambda s=setting: split_environment_assignments(s))
                assert_reads_or_one_line(lambda s=setting: split_command(s))


@given(st.text(st.sampled_from(list("%nNpPiIjJfuhytSCLETVgGdHmbva%x -/")), max_size=40),
       st.sampled_from(["a.service", "a-b@c-d.service", "x@.service"]), st.sampled_from([None, "root", "dank"]))
def test_specifiers_resolve_or_say_they_cannot(value: str, unit: str, user: str | None) -> None:
    setting = Setting("Service", "Environment", value, Path("u.service"), 1)
    resolved = assert_reads_or_one_line(lambda: resolve_specifiers(setting, unit, user))
    if isinstance(resolved, str) and "%" not in value:
        assert resolved == value


def test_specifiers_as_systemd_resolves_them() -> None:
    setting = Setting("Service", "Environment", "A=%n B=%N C=%p D=%i E=%I F=%h G=%u H=%% I=%t J=%f", Path("u"), 1)
    assert resolve_specifiers(setting, "llama@gpu-0.service", "dank") == (
        "A=llama@gpu-0.service B=llama@gpu-0 C=llama D=gpu-0 E=gpu/0 F=/home/dank G=dank H=% I=/run J=/gpu/0")
    assert resolve_specifiers(setting, "frank.service", None).startswith("A=frank.service B=frank C=frank D= E= F=/root G=root")
