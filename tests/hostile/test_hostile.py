"""Hostile and broken input: a table of cases a careless colleague or a malicious pull request writes.

For every case: no marker file appears and no file outside the render changes, a listener this test
opens on 127.0.0.1 receives nothing, no process the case started survives, and the user sees one line
(or a render that succeeded) -- never a traceback, never a hang.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetgate.cli import main

FLEET_TOML = """
[fleet]
name = "t"
deploy_root = "/srv/repo"

[hosts.h]
ram_gib = 8
devices = [{ name = "CPU", vram_bytes = 1 }]

[services.s]
host = "h"
port = 8080
engine = "llama.cpp"
unit = "s.service"
env_file = "s.env"
serve_script = "serve.sh"
payload = ["/models/m.gguf"]

[services.b]
host = "h"
port = 8081
engine = "llama.cpp"
env_file = "b.env"
serve_script = "serve-b.sh"
"""

UNIT = """[Service]
Environment=PATH=/opt/llama/bin:/usr/bin:/bin
EnvironmentFile=/srv/repo/s.env
ExecStart=/srv/repo/serve.sh
"""

SERVE_B = """#!/bin/bash
source "$(dirname "${BASH_SOURCE[0]}")/b.env"
exec llama-server --port 8081
"""


@dataclass
class World:
    """The fleet, the outside of the render, and the probes that watch it."""

    fleet: Path
    outside: Path
    marker: Path
    victim: Path
    secret: Path
    engine: Path
    port: int
    token: str
    listener: socket.socket = field(repr=False)

    def fill(self, text: str) -> str:
        for key in ("marker", "victim", "secret", "engine", "port", "token", "outside"):
            text = text.replace("{" + key + "}", str(getattr(self, key)))
        return text


def _snapshot(*roots: Path) -> dict[str, str]:
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[str(path)] = f"mode {info.st_mode:o}"
    return found


def _survivors(token: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {shown}")
    return found


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "fleet.toml").write_text(FLEET_TOML, encoding="utf-8")
    (fleet / "s.service").write_text(UNIT, encoding="utf-8")
    (fleet / "s.env").write_text("CTX=4096\n", encoding="utf-8")
    (fleet / "serve.sh").write_text("#!/bin/bash\nexec llama-server -c \"$CTX\" --port 8080\n", encoding="utf-8")
    (fleet / "b.env").write_text("B=1\n", encoding="utf-8")
    (fleet / "serve-b.sh").write_text(SERVE_B, encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    secret = outside / "id_ed25519"
    secret.write_text("SECRET-KEY-MATERIAL\n", encoding="utf-8")
    engine = outside / "bin" / "llama-server"
    engine.parent.mkdir()
    # A real "engine" on this machine: if anything runs it, the marker appears.
    engine.write_text(f"#!/bin/sh\necho ran > {outside}/engine-ran\n", encoding="utf-8")
    engine.chmod(0o755)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    token = f"fleetgate-hostile-{uuid.uuid4().hex[:12]}"
    yield World(fleet=fleet, outside=outside, marker=outside / "marker", victim=victim, secret=secret, engine=engine,
                port=listener.getsockname()[1], token=token, listener=listener)
    listener.close()


def _script(body: str) -> Callable[[World], None]:
    def apply(world: World) -> None:
        (world.fleet / "serve.sh").write_text("#!/bin/bash\n" + world.fill(textwrap.dedent(body)), encoding="utf-8")
    return apply


def _file(name: str, content: str | bytes) -> Callable[[World], None]:
    def apply(world: World) -> None:
        path = world.fleet / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(world.fill(content), encoding="utf-8")
    return apply


# A background process in every script case, named by the token: it must not outlive the render.
LINGER = "bash -c 'sleep 300; :' {token} & setsid bash -c 'sleep 300; :' {token} & nohup bash -c 'sleep 300; :' {token} >/dev/null 2>&1 &\n"


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    apply: Callable[[World], None]
    service: str = "s"
    renders: bool | None = None
    """True: the render succeeds; False: one line on stderr; None: either."""
    argv_lacks: str | None = None


WRITES = [
    ("redirect", "echo pwned > {marker}"),
    ("exec-fd", "exec 7> {marker}; echo x >&7"),
    ("absolute-touch", "/usr/bin/touch {marker}"),
    ("command-p", "command -p touch {marker}"),
    ("hash-p", "hash -p /usr/bin/touch t; t {marker}"),
    ("python", "python3 -c 'open(\"{marker}\", \"w\").write(\"x\")'"),
    ("sed-i", "sed -i s/precious/gone/ {victim}"),
    ("awk", "awk 'BEGIN { print 1 > \"{marker}\" }'"),
    ("sort-o", "echo x | sort -o {marker}"),
    ("unlink", "unlink {victim}"),
    ("find-delete", "find {outside} -name victim.txt -delete"),
    ("shred", "shred -u {victim}"),
    ("gzip", "gzip {victim}"),
    ("mktemp", "mktemp -p {outside}"),
    ("flock", "flock {marker} true"),
    ("curl-o", "curl -s -o {marker} file://{secret}"),
    ("cp-abs", "/usr/bin/cp {secret} {marker}"),
    ("repo-write", "echo x >> /srv/repo/s.env; echo y > /srv/repo/new-file"),
    ("repo-remount", "mount -o remount,rw /srv/repo; umount /srv/repo; echo x > /srv/repo/s.env"),
]
READS = [
    ("home-key", 'exec llama-server --api-key "$(cat ~/.ssh/id_ed25519 {secret} 2>/dev/null)"'),
    ("etc-via-deploy-root", 'source /srv/repo/../../etc/os-release; exec llama-server --alias "$ID"'),
    ("proc-root", 'exec llama-server --alias "$(cat /proc/1/root{secret} 2>/dev/null)"'),
]
NETWORK = [
    ("curl", "curl -s -m 2 http://127.0.0.1:{port}/"),
    ("wget", "wget -q -T 2 -O- http://127.0.0.1:{port}/"),
    ("dev-tcp", "echo hi > /dev/tcp/127.0.0.1/{port}"),
    ("python-socket", "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"),
    ("remote", "curl -s -m 2 http://192.0.2.1/ ; echo > /dev/tcp/192.0.2.1/80"),
]
PROCESSES = [
    ("kill-ppid", "kill -9 $PPID; kill -9 -1"),
    ("many-children", "for i in $(seq 200); do bash -c 'sleep 300; :' {token} & done"),
    ("pipe-holder", "(exec -a {token} sleep 300) & (bash -c 'sleep 300; :' {token} >&2) &"),
]

CASES: list[Case] = []
for name, line in WRITES:
    CASES.append(Case(f"write-{name}", "write", _script(LINGER + line + "\nexec llama-server --port 8080\n")))
for name, line in READS:
    CASES.append(Case(f"read-{name}", "read", _script(LINGER + line + "\n"), argv_lacks="SECRET-KEY"))
for name, line in NETWORK:
    CASES.append(Case(f"net-{name}", "network", _script(LINGER + line + "\nexec llama-server --port 8080\n")))
for name, line in PROCESSES:
    CASES.append(Case(f"proc-{name}", "process", _script(LINGER + line + "\nexec llama-server --port 8080\n"), renders=True))
CASES += [
    Case("engine-absolute-path", "engine", _script(LINGER + "exec {engine} --port 8080\n"), renders=True),
    Case("engine-absolute-usr", "engine", _script(LINGER + "/usr/local/bin/llama-server --port 8080\n"), renders=True),
    Case("engine-unit-path", "engine", _script(LINGER + "exec /opt/llama/bin/llama-server --port 8080\n"), renders=True),
    # A unit-less service's env file is bash: sourced in the same sandbox.
    Case("bash-env-write", "env-bash", _file("b.env", "touch {marker}; echo x > {marker}; curl -s -m 2 http://127.0.0.1:{port}/\n"
                                            "bash -c 'sleep 300; :' {token} &\nB=1\n"), service="b"),
    Case("bash-env-read", "env-bash", _file("b.env", "B=$(cat {secret})\n"), service="b", argv_lacks="SECRET-KEY"),
    Case("bash-env-crlf", "env-bash", _file("b.env", "B=1\r\nC=2\r\n"), service="b"),
    # Confinement by real path, not spelling.
    Case("envfile-dotdot", "confinement", _file("s.service", UNIT.replace("/srv/repo/s.env", "/srv/repo/../../{outside}/x.env")),
         renders=False),
    Case("envfile-symlink", "confinement",
         lambda w: (w.fleet / "s.env").unlink() or (w.fleet / "s.env").symlink_to(w.secret), renders=False),
    Case("toml-dotdot", "confinement", _file("fleet.toml", FLEET_TOML.replace('env_file = "s.env"', 'env_file = "../outside/victim.txt"')),
         renders=False),
    Case("toml-symlink", "confinement",
         lambda w: (w.fleet / "link.sh").symlink_to(w.engine) or _file("fleet.toml", FLEET_TOML.replace('"serve.sh"', '"link.sh"'))(w),
         renders=False),
    # Broken input: one line each.
    Case("fifo-fleet-toml", "broken", lambda w: (w.fleet / "fleet.toml").unlink() or os.mkfifo(w.fleet / "fleet.toml"), renders=False),
    Case("non-utf8-toml", "broken", _file("fleet.toml", FLEET_TOML.encode() + b"# caf\xe9\n"), renders=False),
    Case("non-utf8-unit", "broken", _file("s.service", UNIT.encode() + b"# caf\xe9\n"), renders=False),
    Case("non-utf8-env", "broken", _file("s.env", b"CTX=4096 # caf\xe9\n"), renders=False),
    Case("non-utf8-script", "broken", _file("serve.sh", b"#!/bin/bash\n# caf\xe9\nexec llama-server --port 8080\n"), renders=True),
    Case("deep-toml", "broken", _file("fleet.toml", FLEET_TOML + "x = " + "[" * 3000 + "]" * 3000 + "\n"), renders=False),
    Case("execstart-quote", "broken",
         _file("s.service", UNIT.replace("ExecStart=/srv/repo/serve.sh", 'ExecStart=/srv/repo/serve.sh "unclosed')), renders=False),
    Case("nul-in-unit", "broken", _file("s.service", UNIT + "Environment=A=x\0y\n"), renders=False),
    Case("huge-value", "broken", _file("s.env", "CTX=4096\nBIG=" + "x" * (200 << 10) + "\n"), renders=False),
    Case("nul-in-env", "broken", _file("s.env", b"CTX=4\x0096\n"), renders=False),
    Case("tab-newline-test", "broken", _script('[ -f "/models/a\tb" ]; [ -e "/models/x\ny" ]; exec llama-server --port 8080\n'),
         renders=True),
    Case("inf-nan", "broken", _file("fleet.toml", FLEET_TOML.replace("ram_gib = 8", "ram_gib = inf")), renders=False),
    Case("specifier", "broken", _file("s.service", UNIT.replace("Environment=PATH", "Environment=WHERE=%h/models PATH")), renders=True),
]


def _cases_cover_every_kind() -> None:
    kinds = {c.kind for c in CASES}
    assert kinds == {"write", "read", "network", "process", "engine", "env-bash", "confinement", "broken"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_contained(world: World, case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    case.apply(world)
    before = _snapshot(world.fleet, world.outside)
    started = time.monotonic()
    code = main(["render", case.service, "--fleet", str(world.fleet / "fleet.toml"), "--json"])
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    # The user sees one line (or the render), never a traceback -- and the sandbox itself worked: a
    # refusal to sandbox would be one line too, and prove nothing about the case.
    assert "Traceback" not in err
    assert "in a sandbox" not in err and "sandbox could not start" not in err, err
    if code == 0:
        assert err == ""
        assert case.renders is not False, f"rendered although it should be refused: {out[:300]}"
        if case.argv_lacks:
            assert case.argv_lacks not in out
    else:
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("fleetgate: "), err
        assert case.renders is not True, err
    assert took < 12, f"took {took:.1f} s"
    # Nothing outside the render changed; no marker; the engine on this machine never ran.
    assert _snapshot(world.fleet, world.outside) == before
    assert not world.marker.exists()
    assert not (world.outside / "engine-ran").exists()
    # The listener received nothing.
    with pytest.raises(BlockingIOError):
        world.listener.accept()
    # Nothing the case started is still running.
    assert _survivors(world.token) == []


def test_the_table_has_every_kind_of_the_issue() -> None:
    _cases_cover_every_kind()


def test_an_engine_run_by_absolute_path_renders_as_the_engine(world: World) -> None:
    from fleetgate.fleet import load_fleet
    from fleetgate.render import render

    _script("exec {engine} --port 8080 -c 1024\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    rendered = render(fleet, fleet.services["s"])
    assert rendered.argv == ("llama-server", "--port", "8080", "-c", "1024")
    assert not (world.outside / "engine-ran").exists()


def test_a_render_with_lingering_children_ends_when_the_script_does(world: World) -> None:
    from fleetgate.fleet import load_fleet
    from fleetgate.render import render

    _script("(exec -a {token} sleep 300) >&2 &\nexec llama-server --port 8080\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    started = time.monotonic()
    assert render(fleet, fleet.services["s"]).argv == ("llama-server", "--port", "8080")
    assert time.monotonic() - started < 5
    assert _survivors(world.token) == []


def test_a_timeout_kills_the_whole_tree(world: World) -> None:
    from fleetgate.fleet import load_fleet
    from fleetgate.render import RenderRefused, render

    _script("for i in 1 2 3; do setsid bash -c 'while :; do sleep 1; done' {token} & done\nwhile :; do sleep 0.1; done\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    with pytest.raises(RenderRefused) as refused:
        render(fleet, fleet.services["s"], timeout=1.0)
    assert "did not exec llama-server within 1 s" in str(refused.value)
    assert _survivors(world.token) == []


def test_the_probes_see_an_escape_when_unconfined(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: under the explicit opt-out the same probes catch the write and the connection."""
    from fleetgate import sandbox
    from fleetgate.fleet import load_fleet
    from fleetgate.render import render

    monkeypatch.setattr(sandbox, "sandbox_problem", lambda: "namespaces switched off by this test")
    monkeypatch.setenv(sandbox.OPT_OUT, "1")
    _script("echo pwned > {marker}; echo hi > /dev/tcp/127.0.0.1/{port}\nexec llama-server --port 8080\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    assert render(fleet, fleet.services["s"]).argv == ("llama-server", "--port", "8080")
    assert world.marker.read_text() == "pwned\n"
    connection, _ = world.listener.accept()
    connection.close()


def test_without_namespaces_the_render_refuses_in_one_line(world: World, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate import sandbox

    monkeypatch.setattr(sandbox, "sandbox_problem", lambda: "this machine does not allow user namespaces (test)")
    monkeypatch.delenv(sandbox.OPT_OUT, raising=False)
    assert main(["render", "s", "--fleet", str(world.fleet / "fleet.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot run it in a sandbox: this machine does not allow user namespaces (test)" in err
    assert f"{sandbox.OPT_OUT}=1" in err
