"""``fleetgate init`` on any file name: a unit whose name is any bytes but NUL and '/' gives a fleet.toml that loads
with the services and files it meant, or one line naming the file -- never a traceback, never an injected key."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import tomllib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.cli import main
from fleetgate.manifest import load_fleet

UNIT = "[Service]\nExecStart=/usr/bin/llama-server --port {port} -m /models/m.gguf\n"
HOST = 'ram_gib = 64\ndevices = [{ name = "CUDA0", vram_bytes = 25769803776 }]\n'
# Any byte but NUL and '/', with the bytes that break lines, strings and comments drawn often.
BYTES = st.one_of(st.integers(1, 255).filter(lambda b: b != 0x2F).map(lambda b: bytes([b])),
                  st.sampled_from([b"\n", b"\r", b"\t", b"\x7f", b'"', b"\\", b"#", b"[", b"]", b"=", b"\xff", b"\xc3",
                                   "\u202e".encode(), "\u2028".encode(), b"\x1b", "é".encode()]))
NAMES = st.lists(BYTES, min_size=1, max_size=40).map(b"".join).filter(lambda n: n != b"aaa-clean")


def _run(repo: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["init", str(repo)])
    return code, out.getvalue(), err.getvalue()


@given(NAMES)
def test_any_unit_file_name_gives_a_manifest_that_loads_or_one_line(stem: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        units = repo / "systemd"
        units.mkdir(parents=True)
        (units / "aaa-clean.service").write_text(UNIT.format(port=8081), encoding="utf-8")
        raw = stem + b".service"
        fd = os.open(os.fsencode(units) + b"/" + raw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, UNIT.format(port=8082).encode())
        os.close(fd)

        code, _, err = _run(repo)

        assert "Traceback" not in err
        assert all(line.startswith("fleetgate init: skipped ") for line in err.splitlines()), err
        text = (repo / "fleet.toml").read_text(encoding="utf-8")
        data = tomllib.loads(text)
        # Every comment init wrote is one line of printable characters: no name ended it.
        assert all(ch.isprintable() for line in text.splitlines() if line.lstrip().startswith("#") for ch in line)
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            name = None
        declarable = name is not None and not any(c in name for c in "\n\r\t")
        units_named = {s["unit"]: s["port"] for s in data["services"].values()}
        if declarable:
            assert (code, err) == (0, "")
            assert units_named == {"systemd/aaa-clean.service": 8081, f"systemd/{name}": 8082}
        else:
            assert code == 3
            assert len(err.splitlines()) == 1, err
            assert units_named == {"systemd/aaa-clean.service": 8081}
        assert all(re.fullmatch(r"[a-z0-9][a-z0-9-]*", n) for n in data["services"])

        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith(("ram_gib = ", "devices = "))]
        at = kept.index("[hosts.localhost]\n") + 1
        (repo / "fleet.toml").write_text("".join([*kept[:at], HOST, *kept[at:]]), encoding="utf-8")
        fleet = load_fleet(repo / "fleet.toml")
        assert {s.unit.name if s.unit else None: s.port for s in fleet.services.values()} == {
            os.fsdecode(u.encode("utf-8")).split("/")[-1]: p for u, p in units_named.items()}
        assert sorted(os.listdir(os.fsencode(repo))) == [b"fleet.toml", b"systemd"]
