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


CONTAINERISH = st.sampled_from([*"[]=\\\"' \t\n#$%{}:/-_.0189é\0", "[Container]\n", "[Service]\n", "Image=",
                                "ghcr.io/ggml-org/llama.cpp:server", "ghcr.io/ggml-org/llama.cpp:full", "vllm/vllm-openai:v0.13.0",
                                "Exec=", "Entrypoint=", "[\"", "PublishPort=", "Volume=", "AddDevice=", "User=",
                                "Environment=", "${A}", "$A", "A=", "%h", "-c ", "\\\n"])


@given(st.lists(CONTAINERISH, max_size=60).map("".join))
def test_any_quadlet_is_read_and_rendered_or_one_line(text: str) -> None:
    """A Quadlet whose Exec= is the engine's arguments: the reader and the render give a value or one line (a
    ``NotRead`` "not judged" line is an ``InputError`` too)."""
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render
    from fleetgate.sources.quadlet import read_quadlet

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "q.container").write_text(text, encoding="utf-8", errors="surrogateescape")
        (root / "fleet.toml").write_text('[fleet]\nname = "t"\n\n[hosts.h]\nram_gib = 8\ndevices = []\n\n'
                                         '[services.q]\nhost = "h"\nport = 8080\nengine = "llama.cpp"\n'
                                         'unit = "q.container"\n', encoding="utf-8")
        unit = assert_reads_or_one_line(lambda: parse_unit(root / "q.container", root=root))
        if hasattr(unit, "settings"):
            assert_reads_or_one_line(lambda: read_quadlet(unit))
            fleet = load_fleet(root / "fleet.toml")
            assert_reads_or_one_line(lambda: render(fleet, fleet.services["q"]))
