"""``fleetgate init`` against a hostile repository, and fleet.toml against absurd numbers (issue 30).

init writes a new file beside the target and renames it into place, never opening what is there: a hard link to a
file elsewhere keeps that file byte for byte; a FIFO, a socket or a directory is one line and blocks nothing. Every
string it writes is escaped for TOML (comments hold no control character at all), what it would write is loaded by
fleetgate's own loader first, and a file name fleet.toml cannot hold is one line. Nothing is left behind on any
failure: no half-written fleet.toml, no temporary file.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetgate.cli import main
from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from tests.test_init import NO_ENGINE_NEXT

UNIT = "[Service]\nExecStart=/usr/bin/llama-server --port 8081 -m /models/m.gguf\n"
HOST = 'ram_gib = 64\ndevices = [{ name = "CUDA0", vram_bytes = 25769803776 }]\n'


def _repo(base: Path) -> Path:
    repo = base / "repo"
    (repo / "systemd").mkdir(parents=True)
    (repo / "systemd" / "llama.service").write_text(UNIT, encoding="utf-8")
    return repo


def _init(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["init", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _declared(toml: Path) -> Path:
    """The one hand edit init asks for (its TODO host declared), in a copy beside it: what the seams then load."""
    text = toml.read_text(encoding="utf-8")
    kept = [line for line in text.splitlines(keepends=True) if not line.startswith(("ram_gib = ", "devices = "))]
    at = kept.index("[hosts.localhost]\n") + 1
    copy = toml.with_name("declared.toml")
    copy.write_text("".join([*kept[:at], HOST, *kept[at:]]), encoding="utf-8")
    return copy


# --- the write: a new file renamed into place -------------------------------------------------------------------


def test_force_over_a_hard_link_leaves_the_linked_file_as_it_was(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "precious.toml"
    victim.write_bytes(b"# somebody else's file\nkeep = true\n")
    victim.chmod(0o600)
    os.link(victim, repo / "fleet.toml")
    code, out, err = _init(capsys, str(repo), "--force")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"wrote {repo / 'fleet.toml'}: 1 service(s) from 1 units: llama (llama.cpp, port 8081)"
    assert victim.read_bytes() == b"# somebody else's file\nkeep = true\n"
    info = victim.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_nlink) == (0o600, 1)
    assert (repo / "fleet.toml").stat().st_ino != info.st_ino
    assert "[services.llama]" in (repo / "fleet.toml").read_text(encoding="utf-8")
    assert sorted(p.name for p in repo.iterdir()) == ["fleet.toml", "systemd"]


def test_the_written_file_has_the_mode_a_new_file_gets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Made 0600 until it is complete, then what open(..., 0o644) under the caller's umask gives.
    repo = _repo(tmp_path)
    old = os.umask(0o027)
    try:
        assert _init(capsys, str(repo))[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((repo / "fleet.toml").stat().st_mode) == 0o640


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    os.mknod(path, stat.S_IFSOCK | 0o600)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x", encoding="utf-8")


@pytest.mark.parametrize(("make", "kind"), [(_fifo, "a FIFO"), (_socket, "a socket"), (_directory, "a directory")],
                         ids=["fifo", "socket", "directory"])
@pytest.mark.parametrize("force", [True, False], ids=["force", "no-force"])
def test_a_target_that_is_no_regular_file_is_one_line_and_nothing_blocks(
        make: object, kind: str, force: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    assert callable(make)
    make(repo / "fleet.toml")
    before = sorted(str(p.relative_to(repo)) for p in repo.rglob("*"))
    started = time.monotonic()
    code, out, err = _init(capsys, str(repo), *(["--force"] if force else []))
    assert time.monotonic() - started < 10
    assert (code, out) == (2, "")
    assert err == (f"fleetgate: {repo / 'fleet.toml'}: is {kind}; init replaces only a regular fleet.toml (remove it, "
                   "or --output ANOTHER.toml)\n")
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*")) == before


def test_a_target_init_cannot_look_at_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    (repo / "notes.txt").write_text("x", encoding="utf-8")
    code, out, err = _init(capsys, str(repo), "--output", str(repo / "notes.txt" / "fleet.toml"))
    assert (code, out) == (2, "")
    assert err == f"fleetgate: {repo / 'notes.txt' / 'fleet.toml'}: cannot look at it: Not a directory\n"
    assert sorted(p.name for p in repo.iterdir()) == ["notes.txt", "systemd"]


def test_a_fleet_toml_that_appears_while_init_reads_is_not_overwritten(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetgate.init.write as write

    repo = _repo(tmp_path)
    vet = write.vet

    def racing(output: Path, *args: object, **kwargs: object) -> object:
        (repo / "fleet.toml").write_text("# mine\n", encoding="utf-8")
        return vet(output, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(write, "vet", racing)
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (2, "")
    assert err == (f"fleetgate: {repo.resolve() / 'fleet.toml'}: appeared while init read the files; init never "
                   "overwrites a fleet.toml (pass --force to replace it, or --output ANOTHER.toml)\n")
    assert (repo / "fleet.toml").read_text(encoding="utf-8") == "# mine\n"
    assert sorted(p.name for p in repo.iterdir()) == ["fleet.toml", "systemd"]


def test_a_directory_that_appears_at_the_target_with_force_is_one_line(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetgate.init.write as write

    repo = _repo(tmp_path)
    vet = write.vet

    def racing(output: Path, *args: object, **kwargs: object) -> object:
        (repo / "fleet.toml").mkdir()
        return vet(output, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(write, "vet", racing)
    code, out, err = _init(capsys, str(repo), "--force")
    assert (code, out) == (2, "")
    assert err == f"fleetgate: {repo.resolve() / 'fleet.toml'}: cannot write: Is a directory\n"
    assert sorted(p.name for p in repo.iterdir()) == ["fleet.toml", "systemd"]
    assert list((repo / "fleet.toml").iterdir()) == []


@pytest.mark.parametrize("call", ["tempfile.mkstemp", "os.ftruncate"])
def test_a_file_system_that_refuses_the_write_is_one_line_and_leaves_nothing(
        call: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetgate.init.write as write

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    repo = _repo(tmp_path)
    module, name = call.split(".")
    monkeypatch.setattr(getattr(write, module), name, full)
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (2, "")
    assert err == f"fleetgate: {repo.resolve() / 'fleet.toml'}: cannot write: No space left on device\n"
    assert sorted(p.name for p in repo.iterdir()) == ["systemd"]


# --- file names: escaped, or one line -----------------------------------------------------------------------------

INJECTED = "a\n[services.injected]\nhost = \"localhost\"\nport = 9999\nengine = \"vllm\"\n#"


def test_a_file_name_with_newlines_never_becomes_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    bad = repo / "systemd" / f"{INJECTED}.service"
    bad.write_text(UNIT.replace("8081", "8082"), encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert code == 3
    shown = INJECTED.replace("\n", "\\n")
    assert err == (f"fleetgate init: skipped {repo.resolve() / 'systemd' / shown}.service:2: services.a-services-"
                   f"injected-host-localhost-port-9999-engine-vllm.unit: 'systemd/"
                   f"{shown}.service' holds a control character; expected a plain relative path: fleet.toml cannot "
                   "declare services.a-services-injected-host-localhost-port-9999-engine-vllm as found: left "
                   "out\n")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert sorted(data["services"]) == ["llama"]
    fleet = load_fleet(_declared(repo / "fleet.toml"))
    assert {name: (s.port, s.unit) for name, s in fleet.services.items()} == {
        "llama": (8081, (repo / "systemd" / "llama.service").resolve())}


def test_a_del_and_other_controls_in_a_name_are_escaped_and_the_manifest_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    name = "d\x7fe\x1bl\u202e\u0085\"q\\.service"
    (repo / "systemd" / name).write_text(UNIT.replace("8081", "8082"), encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    text = (repo / "fleet.toml").read_text(encoding="utf-8")
    assert 'unit = "systemd/d\\u007Fe\\u001Bl\u202e\\u0085\\"q\\\\.service"' in text
    assert "# found in systemd/d\\x7fe\\x1bl\\u202e\\x85\"q\\.service:2\n" in text
    assert all(ch.isprintable() for line in text.splitlines() if line.lstrip().startswith("#") for ch in line)
    fleet = load_fleet(_declared(repo / "fleet.toml"))
    assert {n: (s.port, s.unit) for n, s in fleet.services.items()} == {
        "llama": (8081, (repo / "systemd" / "llama.service").resolve()),
        "d-e-l-q": (8082, (repo / "systemd" / name).resolve())}


def test_a_file_name_that_is_not_utf8_is_one_line_naming_it_escaped(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    fd = os.open(os.fsencode(repo / "systemd") + b"/qwen\xff.service", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, UNIT.replace("8081", "8082").encode())
    os.close(fd)
    code, _, err = _init(capsys, str(repo))
    assert code == 3
    assert err == (f"fleetgate init: skipped {repo.resolve() / 'systemd'}/qwen\\xff.service: unit: the file name is "
                   "not UTF-8, which fleet.toml cannot name; services.qwen left out (rename the file)\n")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert sorted(data["services"]) == ["llama"]
    assert sorted(os.listdir(os.fsencode(repo))) == [b"fleet.toml", b"systemd"]


def test_a_name_option_that_is_not_utf8_is_one_line_and_nothing_is_written(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    code, out, err = _init(capsys, str(repo), "--name", "fleet\udcff")
    assert (code, out) == (2, "")
    assert err == (f"fleetgate: {repo.resolve() / 'fleet.toml'}: \\xff is not UTF-8 (a file name or --name with bytes "
                   "that are not); fleet.toml is UTF-8 text: nothing written\n")
    assert sorted(p.name for p in repo.iterdir()) == ["systemd"]


def test_a_name_option_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    assert _init(capsys, str(repo), "--name", 'x"\n[hosts.evil]\n')[0] == 0
    assert load_fleet(_declared(repo / "fleet.toml")).name == 'x"\n[hosts.evil]\n'


# --- what the loader refuses is never written ----------------------------------------------------------------------


def test_a_service_the_loader_would_refuse_is_left_out_in_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path)
    (repo / "systemd" / "spaced.service").write_text(
        '[Service]\nExecStart=/usr/bin/llama-server --port 8082 -m "/models/my model.gguf"\n', encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    assert code == 3
    assert err == (f"fleetgate init: skipped {repo.resolve() / 'systemd' / 'spaced.service'}:2: services.spaced."
                   "payload[0]: '/models/my model.gguf'; expected an absolute host path or an hf:// / https:// URL, on "
                   "one line: fleet.toml cannot declare services.spaced as found: left out\n")
    assert out.splitlines()[0] == f"wrote {repo / 'fleet.toml'}: 1 service(s) from 2 units: llama (llama.cpp, port 8081)"
    assert sorted(load_fleet(_declared(repo / "fleet.toml")).services) == ["llama"]


def test_when_the_loader_refuses_every_service_nothing_is_written(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "systemd").mkdir(parents=True)
    (repo / "systemd" / "spaced.service").write_text(
        '[Service]\nExecStart=/usr/bin/llama-server -m "/models/my model.gguf"\n', encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (1, "")
    assert err.splitlines()[1:] == [f"fleetgate init: no engine (llama-server, vllm) found under {repo} (1 units); "
                                    "nothing written. " + NO_ENGINE_NEXT]
    assert err.splitlines()[0].endswith("fleet.toml cannot declare services.spaced as found: left out")
    assert sorted(p.name for p in repo.iterdir()) == ["systemd"]


def test_a_manifest_the_loader_refuses_as_a_whole_is_one_line_and_nothing_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetgate.init.write as write

    fleet_toml = write.fleet_toml
    monkeypatch.setattr(write, "fleet_toml", lambda *a, **k: fleet_toml(*a, **k) + "[bogus]\n")
    repo = _repo(tmp_path)
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (2, "")
    assert err.startswith(f"fleetgate: {repo.resolve() / 'fleet.toml'}: fleetgate's own loader refuses the fleet.toml "
                          "init would write: (top level): unknown key 'bogus'; expected one of: ")
    assert err.endswith("; nothing written\n") and err.count("\n") == 1
    assert sorted(p.name for p in repo.iterdir()) == ["systemd"]


def test_a_manifest_that_does_not_read_back_as_meant_is_not_put_in_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # What escaping prevents, checked once more on the very bytes about to be renamed into place.
    import fleetgate.init as init

    fleet_toml = init.fleet_toml
    extra = '\n[services.injected]\nhost = "localhost"\nport = 9999\nengine = "vllm"\nunit = "systemd/llama.service"\n'
    monkeypatch.setattr(init, "fleet_toml", lambda *a, **k: fleet_toml(*a, **k) + extra)
    repo = _repo(tmp_path)
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (2, "")
    assert err == (f"fleetgate: {repo.resolve() / 'fleet.toml'}: the fleet.toml init would write does not read back as "
                   "meant (services injected); nothing written\n")
    assert sorted(p.name for p in repo.iterdir()) == ["systemd"]


# --- a directory the caller may not list ---------------------------------------------------------------------------


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A directory an unprivileged user may enter (the tests' own temporary directory may not be)."""
    base = Path(tempfile.mkdtemp(prefix="fleetgate-init-"))
    base.chmod(0o755)
    yield base
    for path in (base, *base.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(base)


def test_a_directory_the_caller_cannot_list_is_one_line(shared_base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(shared_base)
    locked = repo / "locked"
    locked.mkdir()
    (locked / "other.service").write_text(UNIT.replace("8081", "8083"), encoding="utf-8")
    if os.geteuid() == 0:
        # root lists every directory: the case is run as the unprivileged user the hostile table uses.
        from tests.hostile.test_hostile import UNPRIVILEGED, _render_as

        for path in (repo, *repo.rglob("*")):
            os.lchown(path, UNPRIVILEGED, UNPRIVILEGED)
        locked.chmod(0)
        code, out, err = _render_as(UNPRIVILEGED, ["init", str(repo)], shared_base / "visible")
    else:
        locked.chmod(0)
        code, out, err = _init(capsys, str(repo))
    assert "Traceback" not in err
    assert err == f"fleetgate init: skipped {repo / 'locked'}: cannot list this directory (Permission denied): not read\n"
    assert code == 3
    assert out.splitlines()[0] == f"wrote {repo / 'fleet.toml'}: 1 service(s) from 1 units: llama (llama.cpp, port 8081)"


# --- absurd numbers in fleet.toml ---------------------------------------------------------------------------------

FLEET = """[fleet]
name = "t"

[hosts.h]
ram_gib = {ram}
devices = [{{ name = "CUDA0", vram_bytes = {vram} }}]

[services.s]
host = "h"
port = {port}
engine = "llama.cpp"
serve_script = "serve.sh"
"""


def _refusal(tmp_path: Path, ram: str = "64", vram: str = "25769803776", port: str = "8080") -> str:
    (tmp_path / "serve.sh").write_text("#!/bin/bash\nexec llama-server\n", encoding="utf-8")
    (tmp_path / "fleet.toml").write_text(FLEET.format(ram=ram, vram=vram, port=port), encoding="utf-8")
    with pytest.raises(InputError) as refused:
        load_fleet(tmp_path / "fleet.toml")
    return str(refused.value).replace(f"{tmp_path.resolve()}/", "")


@pytest.mark.parametrize(("vram", "expected"), [
    ("1e308", "expected integer, got 1e+308"),
    ("25769803776.0", "expected integer, got 25769803776.0"),
    ("24.5", "expected integer, got 24.5"),
    ("1125899906842624", "expected a value < 1125899906842624 (2**50, 1 PiB), got 1125899906842624"),
    ("0x7fffffffffffffff", "expected a value < 1125899906842624 (2**50, 1 PiB), got 9223372036854775807"),
    ("0", "expected a value >= 1, got 0"),
])
def test_a_card_of_absurd_or_fractional_bytes_is_one_line(vram: str, expected: str, tmp_path: Path) -> None:
    assert _refusal(tmp_path, vram=vram) == f"fleet.toml:6: hosts.h.devices.0.vram_bytes: {expected}"


def test_a_card_just_under_the_bound_loads(tmp_path: Path) -> None:
    (tmp_path / "serve.sh").write_text("#!/bin/bash\nexec llama-server\n", encoding="utf-8")
    (tmp_path / "fleet.toml").write_text(FLEET.format(ram="64", vram=str((1 << 50) - 1), port="8080"), encoding="utf-8")
    assert load_fleet(tmp_path / "fleet.toml").hosts["h"].devices[0].vram_bytes == (1 << 50) - 1


@pytest.mark.parametrize("ram", ["1048576", "1e308"])
def test_ram_of_a_pib_or_more_is_one_line(ram: str, tmp_path: Path) -> None:
    shown = repr(float(ram)) if "e" in ram else ram
    assert _refusal(tmp_path, ram=ram) == (f"fleet.toml:5: hosts.h.ram_gib = {shown} GiB is 1 PiB (1048576 GiB) or "
                                           "more, more than any machine or card holds; expected the figure in GiB")


def test_a_port_written_as_a_float_is_one_line(tmp_path: Path) -> None:
    assert _refusal(tmp_path, port="8080.0") == "fleet.toml:10: services.s.port: expected integer, got 8080.0"
