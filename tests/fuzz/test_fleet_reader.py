"""fleet.toml: any text, and manifests of the right shape with hostile values (TOML dates and times among them),
load or fail in one line."""

from __future__ import annotations

import datetime
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.fleet import Fleet
from fleetgate.manifest import load_fleet
from tests.fuzz._oneline import assert_reads_or_one_line

TOMLISH = st.sampled_from([*"[]{}=\"'.,#\n\t ", "inf", "nan", "-inf", "1e308", "true", "[fleet]", "name", "deploy_root",
                           "[hosts.h]", "[services.s]", "ram_gib", "..", "/", "1979-05-27", "07:32:00",
                           "1979-05-27T07:32:00Z", "1979-05-27 07:32:00.999999-07:00"])
# TOML's four date and time types: offset date-time, local date-time, local date, local time.
DATES = st.one_of(st.datetimes(timezones=st.sampled_from([datetime.UTC,
                                                         datetime.timezone(datetime.timedelta(hours=-7))])),
                  st.datetimes(), st.dates(), st.times())
SCALAR = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.text(max_size=20), st.sampled_from(["../outside", "serve.sh", "/abs", "a\tb", "x\ny", "s.env"]),
                   DATES)


def _toml(value: object) -> str:
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value == float("inf") else ("-inf" if value == float("-inf") else repr(value)))
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return '"' + "".join(c if c.isprintable() or c in "\\" else f"\\u{ord(c):04x}" for c in text) + '"'


@st.composite
def manifests(draw: st.DrawFn) -> str:
    def v(default: object) -> str:
        return _toml(draw(st.one_of(st.just(default), SCALAR)))
    return (f"[fleet]\nname = {v('t')}\ndeploy_root = {v('/srv/repo')}\n\n"
            f"[hosts.h]\nram_gib = {v(8)}\ncard_floor_gib = {v(1.0)}\n"
            f"devices = [{{ name = {v('CPU')}, vram_bytes = {v(1)} }}]\n\n"
            f"[services.s]\nhost = {v('h')}\nport = {v(8080)}\nengine = {v('llama.cpp')}\n"
            f"serve_script = {v('serve.sh')}\nenv_file = {v('s.env')}\npayload = [{v('/models/m.gguf')}]\n")


def _load(text: str | bytes) -> Fleet | object:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        root.mkdir()
        (root / "serve.sh").write_text("#!/bin/bash\n", encoding="utf-8")
        (root / "s.env").write_text("A=1\n", encoding="utf-8")
        path = root / "fleet.toml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        return assert_reads_or_one_line(lambda: load_fleet(path))


@given(manifests())
def test_a_manifest_with_hostile_values_loads_or_fails_in_one_line(text: str) -> None:
    result = _load(text)
    if isinstance(result, Fleet):
        for service in result.services.values():
            assert result.root.resolve() in service.serve_script.parents


@given(st.one_of(st.lists(TOMLISH, max_size=60).map("".join), st.binary(max_size=200)))
def test_any_text_loads_or_fails_in_one_line(text: str | bytes) -> None:
    _load(text)


@given(DATES)
def test_every_date_and_time_the_fuzzer_writes_is_toml(value: object) -> None:
    """The property above is only as good as its dates: each one is read back as the same TOML value."""
    import tomllib

    assert tomllib.loads(f"x = {_toml(value)}")["x"] == value
