"""Hostile and broken input: a table of cases a careless colleague or a malicious pull request writes.

For every case: no marker file appears and no file outside the render changes (content, mode, owner,
times), no node the sandbox binds in (this machine's devices, /usr) changes, a listener this test
opens on 127.0.0.1 receives nothing, no process the case started survives, and the user sees one line
(or a render that succeeded) -- never a traceback, never a hang. Every case runs as the caller (root
in CI) and again as an unprivileged user.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
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


def _meta(path: Path) -> str:
    """What a render must not change of a file: its content, mode, owner and times (not atime: reading
    is allowed)."""
    info = path.lstat()
    kept = f"mode {info.st_mode:o} owner {info.st_uid}:{info.st_gid} mtime {info.st_mtime_ns} ctime {info.st_ctime_ns}"
    if stat.S_ISREG(info.st_mode):
        kept += " sha256 " + hashlib.sha256(path.read_bytes()).hexdigest()
    return kept


def _snapshot(*roots: Path) -> dict[str, str]:
    found = {}
    for root in roots:
        found[str(root)] = _meta(root)
        for path in sorted(root.rglob("*")):
            found[str(path)] = _meta(path)
    return found


# This machine's nodes the sandbox binds in (read-only), and the directories of /usr it writes stubs
# into through its overlay: none may change, whoever runs the render.
BOUND = [Path(p) for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/usr",
                          "/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/bin/env", "/usr/bin/bash")
         if os.path.lexists(p)]


def _bound() -> dict[str, str]:
    return {str(p): _meta(p) for p in BOUND}


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


def _make_world(tmp_path: Path) -> World:
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
    return World(fleet=fleet, outside=outside, marker=outside / "marker", victim=victim, secret=secret, engine=engine,
                 port=listener.getsockname()[1], token=token, listener=listener)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = _make_world(tmp_path)
    yield made
    made.listener.close()


UNPRIVILEGED = 65534
"""The user the second run of every case is made as (nobody), when the caller is root."""


@pytest.fixture
def unprivileged_world() -> Iterator[World]:
    """A world the unprivileged user owns (so that an escape would be able to change it) under a
    directory that user may enter."""
    if os.geteuid() != 0:
        pytest.skip("the caller is unprivileged already: test_hostile_input_is_contained is the unprivileged run")
    base = Path(tempfile.mkdtemp(prefix="fleetgate-hostile-"))
    base.chmod(0o755)
    made = _make_world(base)
    yield made
    made.listener.close()
    shutil.rmtree(base, ignore_errors=True)


def _own(world: World, uid: int) -> None:
    for root in (world.fleet, world.outside):
        for path in (root, *root.rglob("*")):
            os.lchown(path, uid, uid)


# Run as root in a mount namespace of its own: a directory of this Python's environment that the unprivileged user
# cannot traverse (a tox env under its private .tox, an interpreter under /root) is shadowed by an open tmpfs, and
# what must stay visible is bound back in, so that user's Python finds its packages. Nothing outside the namespace
# changes; the stage directory lies in the test's own temporary directory.
_VISIBLE = """set -eu
stage=$1 keeps=$2 opens=$3; shift 3
mount --make-rprivate /
IFS=: read -r -a keep <<< "$keeps"
IFS=: read -r -a open <<< "$opens"
for i in "${!keep[@]}"; do mkdir -p "$stage/k$i"; mount --bind "${keep[$i]}" "$stage/k$i"; done
for o in "${open[@]}"; do [ -n "$o" ] && mount -t tmpfs -o mode=0755 tmpfs "$o"; done
for i in "${!keep[@]}"; do mkdir -p "${keep[$i]}"; mount --bind "$stage/k$i" "${keep[$i]}"; done
exec "$@"
"""


def _shadowed(keeps: list[str]) -> tuple[list[str], list[str]]:
    """The directories among the keeps' ancestors that others cannot traverse (shallowest first), and the keeps that
    lie beneath one of them (those alone need binding back)."""
    opens = sorted({str(a) for k in keeps for a in Path(k).parents if a != Path("/") and not os.stat(a).st_mode & 0o001},
                   key=lambda p: p.count("/"))
    hidden = [k for k in keeps if any(Path(o) in Path(k).parents for o in opens)]
    return opens, hidden


def _render_as(uid: int, args: list[str], stage: Path) -> tuple[int, str, str]:
    """``fleetgate ARGS`` in a process of its own, as ``uid`` without any capability."""
    keeps = list(dict.fromkeys([os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
                                str(Path(__file__).resolve().parents[2])]))
    opens, hidden = _shadowed(keeps)
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", "--", sys.executable, "-c",
               "import sys; from fleetgate.cli import main; sys.exit(main(sys.argv[1:]))", *args]
    command = (["unshare", "--mount", "--", "bash", "-c", _VISIBLE, "visible", str(stage), ":".join(hidden), ":".join(opens),
                *as_user] if opens else as_user)
    done = subprocess.run(command, capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "HOME": "/nonexistent"})
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


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
LINGER = ("bash -c '/bin/sleep 300; :' {token} & setsid bash -c '/bin/sleep 300; :' {token} & "
          "nohup bash -c '/bin/sleep 300; :' {token} >/dev/null 2>&1 &\n")


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    apply: Callable[[World], None]
    service: str = "s"
    renders: bool | None = None
    """True: the render succeeds; False: one line on stderr; None: either."""
    argv_lacks: str | tuple[str, ...] | None = None
    says: str | None = None
    """What the one line must say (the bound that stopped the script, the input refused)."""
    absent: tuple[str, ...] = ()
    """Paths (filled in) that must not exist after the render: what the case would plant outside."""
    argv_is: tuple[str, ...] | None = None
    """The rendered argv exactly (filled in): a host fact the sandbox fixes, or one it names as not hidden."""


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
    ("many-children", "for i in $(seq 200); do bash -c '/bin/sleep 300; :' {token} & done"),
    ("pipe-holder", "(exec -a {token} /bin/sleep 300) & (bash -c '/bin/sleep 300; :' {token} >&2) &"),
]

CASES: list[Case] = []
for name, line in WRITES:
    CASES.append(Case(f"write-{name}", "write", _script(LINGER + line + "\nexec llama-server --port 8080\n")))
for name, line in READS:
    CASES.append(Case(f"read-{name}", "read", _script(LINGER + line + "\n"), argv_lacks="SECRET-KEY"))
for name, line in NETWORK:
    CASES.append(Case(f"net-{name}", "network", _script(LINGER + line + "\nexec llama-server --port 8080\n")))
for name, line in PROCESSES:
    CASES.append(Case(f"proc-{name}", "process", _script(LINGER + line + "\nexec llama-server --port 8080\n"),
                      # 200 x (bash + sleep) is over the sandbox's process limit: said as such.
                      renders=name != "many-children",
                      says="started more than 256 processes" if name == "many-children" else None))
CASES += [
    Case("engine-absolute-path", "engine", _script(LINGER + "exec {engine} --port 8080\n"), renders=True),
    Case("engine-absolute-usr", "engine", _script(LINGER + "/usr/local/bin/llama-server --port 8080\n"), renders=True),
    Case("engine-unit-path", "engine", _script(LINGER + "exec /opt/llama/bin/llama-server --port 8080\n"), renders=True),
    # A unit-less service's env file is bash: sourced in the same sandbox.
    Case("bash-env-write", "env-bash", _file("b.env", "touch {marker}; echo x > {marker}; curl -s -m 2 http://127.0.0.1:{port}/\n"
                                            "bash -c '/bin/sleep 300; :' {token} &\nB=1\n"), service="b"),
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


def _toml(old: str, new: str) -> Callable[[World], None]:
    return _file("fleet.toml", FLEET_TOML.replace(old, new))


def _unit(old: str, new: str) -> Callable[[World], None]:
    return _file("s.service", UNIT.replace(old, new))


def _link(name: str, target: str, then: Callable[[World], None] | None = None) -> Callable[[World], None]:
    def apply(world: World) -> None:
        path = world.fleet / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(world.fill(target))
        if then is not None:
            then(world)
    return apply


UP = "/../../../../../../../.."
"""Enough ``..`` to climb from any path the sandbox lays out to this machine's root."""
# Every path the fleet names that the sandbox lays out before the script runs: created inside the
# new root only (after pivot_root), never on this machine, whatever its `..` or symlinks say.
CASES += [
    Case("pre-payload-dotdot", "pre-sandbox", _toml('"/models/m.gguf"', f'"/models{UP}{{outside}}/planted-payload"'),
         absent=("{outside}/planted-payload",)),
    Case("pre-deploy-root-dotdot", "pre-sandbox", lambda w: (
        _toml('deploy_root = "/srv/repo"', f'deploy_root = "/srv{UP}{w.outside}/planted-root"')(w),
        _unit("/srv/repo", f"/srv{UP}{w.outside}/planted-root")(w)), renders=False, says="deploy_root",
        absent=("{outside}/planted-root",)),
    Case("pre-home-dotdot", "pre-sandbox", _unit("Environment=PATH", f"Environment=HOME=/home{UP}{{outside}}/planted-home PATH"),
         renders=True, absent=("{outside}/planted-home",)),
    Case("pre-user-dotdot", "pre-sandbox", _unit("[Service]\n", f"[Service]\nUser=..{UP}{{outside}}/planted-user\n"),
         absent=("{outside}/planted-user",)),
    Case("pre-engine-path-dotdot", "pre-sandbox", _script(LINGER + f"exec /opt{UP}{{outside}}/planted-bin/llama-server --port 8080\n"),
         absent=("{outside}/planted-bin",)),
    # A stderr line is the script's: never a path to create here; inside, only a normal path of the engine.
    Case("pre-stderr-path-dotdot", "pre-sandbox",
         _script(f'echo "{UP}{{outside}}/planted-stderr/llama-server: No such file or directory" >&2; exit 1\n'),
         renders=False, says="exited 1", absent=("{outside}/planted-stderr",)),
    Case("pre-stderr-path", "pre-sandbox",
         _script('echo "{outside}/planted-stderr/llama-server: No such file or directory" >&2; exit 1\n'),
         renders=False, says="exited 1", absent=("{outside}/planted-stderr",)),
    Case("pre-binary-dotfile", "pre-sandbox", _toml('engine = "llama.cpp"\nunit', 'engine = "llama.cpp"\nbinary = ".bash_profile"\nunit'),
         renders=False, says="not a dotfile"),
    Case("pre-binary-slash", "pre-sandbox",
         _toml('engine = "llama.cpp"\nunit', f'engine = "llama.cpp"\nbinary = "..{UP}{{outside}}/planted-stub"\nunit'),
         renders=False, says="binary", absent=("{outside}/planted-stub",)),
    # Repository symlinks named like the stubbed engine, on the PATH and as engine copies.
    Case("symlink-engine-dangling", "repo-symlink",
         _link("bin/llama-server", "{outside}/planted-through-link",
               _unit("PATH=/opt/llama/bin", "PATH=/srv/repo/bin:/opt/llama/bin")),
         absent=("{outside}/planted-through-link",)),
    Case("symlink-engine-victim", "repo-symlink",
         _link("bin/llama-server", "{victim}", _unit("PATH=/opt/llama/bin", "PATH=/srv/repo/bin:/opt/llama/bin")), renders=True),
    Case("symlink-engine-copy", "repo-symlink", _link("tools/llama-server", "{outside}/planted-copy"), renders=True,
         absent=("{outside}/planted-copy",)),
    Case("symlink-dir-on-path", "repo-symlink",
         _link("bin", "{outside}", _unit("PATH=/opt/llama/bin", "PATH=/srv/repo/bin:/opt/llama/bin")), renders=True,
         absent=("{outside}/llama-server",)),
    # This machine's devices and programs, bound in: their data flows, their inodes do not change.
    Case("device-metadata", "device", _script(LINGER + "touch /dev/null /dev/zero /dev/urandom /usr/bin/env; "
                                               "chmod 0600 /dev/null /dev/zero /usr/bin/env; chown 1:1 /dev/null; "
                                               "touch -d 2001-01-01 /dev/full /usr/bin /usr/local/bin; "
                                               "echo x > /dev/null; head -c 4 /dev/urandom >/dev/null; "
                                               ": > /usr/bin/env; echo x >> /usr/bin/bash; rm -f /usr/bin/env\n"
                                               "exec llama-server --port 8080\n"), renders=True),
    Case("device-mknod", "device", _script(LINGER + "mknod /tmp/m c 1 3 && echo x > /tmp/m; mknod /dev/sda b 8 0\n"
                                            "exec llama-server --port 8080\n"), renders=True),
    # Drop-ins, confined by their real path like env files: refused in one line, not applied, not echoed.
    Case("dropin-etc-passwd", "drop-in", _link("s.service.d/x.conf", "/etc/passwd"), renders=False,
         says="outside the fleet repository", argv_lacks="root:"),
    Case("dropin-outside-valid", "drop-in", lambda w: (
        (w.outside / "valid.conf").write_text("[Service]\nEnvironment=CTX=99999999999\n", encoding="utf-8"),
        _link("s.service.d/x.conf", "{outside}/valid.conf")(w)), renders=False, says="outside the fleet repository"),
    Case("dropin-dir-symlink", "drop-in", lambda w: (
        (w.outside / "dropins").mkdir(),
        (w.outside / "dropins" / "x.conf").write_text("[Service]\nEnvironment=CTX=1\n", encoding="utf-8"),
        _link("s.service.d", "{outside}/dropins")(w)), renders=False, says="outside the fleet repository"),
    # Bounds: processes, memory, scratch. Each overrun is named.
    Case("flood-processes", "bounds", _script("for i in $(seq 2000); do /bin/sleep 300 & done\nexec llama-server --port 8080\n"),
         renders=False, says="started more than 256 processes"),
    Case("flood-fork-bomb", "bounds", _script(":(){ :|:& };:\n/bin/sleep 5\nexec llama-server --port 8080\n"),
         renders=False, says="started more than 256 processes"),
    Case("flood-memory-python", "bounds", _script("python3 -c 'b = bytearray(3 << 30)' || exit 3\nexec llama-server\n"),
         renders=False, says="ran out of memory"),
    Case("flood-memory-perl", "bounds", _script("perl -e '$x = \"x\" x (3 << 30)' || exit 3\nexec llama-server\n"),
         renders=False, says="ran out of memory"),
    Case("full-scratch", "bounds", _script("head -c 100M /dev/zero > /tmp/fill\nexec llama-server --port 8080\n"),
         renders=False, says="the sandbox's scratch (64 MiB) is full"),
    # What the host is must not reach the argv: no /proc/cpuinfo, meminfo or version, no scratch path.
    Case("host-facts", "host-facts", _script('exec llama-server --alias "$(cat /proc/cpuinfo /proc/meminfo /proc/version '
                                             '/proc/self/mountinfo /proc/1/mountinfo /proc/1/environ /proc/1/cmdline '
                                             '2>/dev/null | tr "\\0" " ")"\n'),
         renders=True, argv_lacks=("model name", "MemTotal", "Linux version", "fleetgate-sandbox-", "/dev/shm")),
    # The render runs on one CPU (taskset, the lowest this process may use): the count is 1 on every machine.
    Case("host-facts-cpus", "host-facts", _script('exec llama-server --threads "$(nproc)" --alias "$(nproc --all)'
                                                  ' $(getconf _NPROCESSORS_ONLN) $(grep Cpus_allowed_list /proc/self/status'
                                                  ' | cut -f2)"\n'),
         renders=True, argv_is=("llama-server", "--threads", "1", "--alias", f"1 1 {min(os.sched_getaffinity(0))}")),
    # A script its unit starts is run by the unit's path (deploy_root), not by this checkout's.
    Case("host-facts-script-path", "host-facts", _script('exec llama-server --alias "$0 ${BASH_SOURCE[0]} $PWD"\n'),
         renders=True, argv_is=("llama-server", "--alias", "/srv/repo/serve.sh /srv/repo/serve.sh /run/fleetgate/cwd")),
    # Not hidden (docs/sandbox.md): the kernel release through uname(2). Named here, exactly.
    Case("host-facts-kernel", "host-facts", _script('exec llama-server --alias "$(uname -r)"\n'),
         renders=True, argv_is=("llama-server", "--alias", os.uname().release)),
    # A unit's BASH_ENV is read as bash reads it, from the repository only.
    Case("bash-env-outside", "bash-env", _unit("Environment=PATH", "Environment=BASH_ENV={secret} PATH"), renders=True,
         argv_lacks="SECRET-KEY"),
    Case("bash-env-writes", "bash-env", lambda w: (
        # (a bash started here would read BASH_ENV again, as on the host: a process flood)
        _file("be.env", "touch {marker}; echo x > {victim}; (exec -a {token} /bin/sleep 300) &\nCTX=1\n")(w),
        _unit("Environment=PATH", "Environment=BASH_ENV=/srv/repo/be.env PATH")(w))),
]


def _cases_cover_every_kind() -> None:
    kinds = {c.kind for c in CASES}
    assert kinds == {"write", "read", "network", "process", "engine", "env-bash", "confinement", "broken", "pre-sandbox",
                     "repo-symlink", "device", "drop-in", "bounds", "host-facts", "bash-env"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_contained(world: World, case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    """As the caller (root in CI: the sandbox then runs as a host user of its own)."""
    case.apply(world)
    before, bound = _snapshot(world.fleet, world.outside), _bound()
    started = time.monotonic()
    code = main(["render", case.service, "--fleet", str(world.fleet / "fleet.toml"), "--json"])
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    _judge(world, case, code, out, err, took, before, bound)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_contained_unprivileged(unprivileged_world: World, case: Case) -> None:
    """The same case, the render run by an unprivileged user who owns the fleet and the outside."""
    world = unprivileged_world
    case.apply(world)
    _own(world, UNPRIVILEGED)
    before, bound = _snapshot(world.fleet, world.outside), _bound()
    started = time.monotonic()
    code, out, err = _render_as(UNPRIVILEGED, ["render", case.service, "--fleet", str(world.fleet / "fleet.toml"), "--json"],
                                world.fleet.parent / "visible")
    took = time.monotonic() - started
    _judge(world, case, code, out, err, took, before, bound, startup=1.5)


def _judge(world: World, case: Case, code: int, out: str, err: str, took: float, before: dict[str, str],
           bound: dict[str, str], startup: float = 0.0) -> None:
    # The user sees one line (or the render), never a traceback -- and the sandbox itself worked: a
    # refusal to sandbox would be one line too, and prove nothing about the case.
    assert "Traceback" not in err
    assert "in a sandbox" not in err and "sandbox could not start" not in err, err
    lacks = (case.argv_lacks,) if isinstance(case.argv_lacks, str) else case.argv_lacks or ()
    if code == 0:
        assert err == ""
        assert case.renders is not False, f"rendered although it should be refused: {out[:300]}"
    else:
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("fleetgate: "), err
        assert case.renders is not True, err
        if case.says:
            assert case.says in err, err
    for text in lacks:
        assert text not in out and text not in err, text
    if case.argv_is is not None:
        assert json.loads(out)["argv"] == [world.fill(part) for part in case.argv_is], out
    assert took < 12 + startup, f"took {took:.1f} s"
    # Nothing outside the render changed; no marker; the engine on this machine never ran; nothing
    # the case would plant exists; no node bound in changed.
    assert _snapshot(world.fleet, world.outside) == before
    assert _bound() == bound
    for planted in case.absent:
        assert not os.path.lexists(world.fill(planted)), planted
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
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

    _script("exec {engine} --port 8080 -c 1024\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    rendered = render(fleet, fleet.services["s"])
    assert rendered.argv == ("llama-server", "--port", "8080", "-c", "1024")
    assert not (world.outside / "engine-ran").exists()


def test_a_render_with_lingering_children_ends_when_the_script_does(world: World) -> None:
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

    _script("(exec -a {token} /bin/sleep 300) >&2 &\nexec llama-server --port 8080\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    started = time.monotonic()
    assert render(fleet, fleet.services["s"]).argv == ("llama-server", "--port", "8080")
    assert time.monotonic() - started < 5
    assert _survivors(world.token) == []


def test_a_timeout_kills_the_whole_tree(world: World) -> None:
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render
    from fleetgate.render.types import RenderRefused

    _script("for i in 1 2 3; do setsid bash -c 'while :; do /bin/sleep 1; done' {token} & done\nwhile :; do /bin/sleep 0.1; done\n")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    with pytest.raises(RenderRefused) as refused:
        render(fleet, fleet.services["s"], timeout=1.0)
    assert "did not exec llama-server within 1 s" in str(refused.value)
    assert _survivors(world.token) == []


def test_the_probes_see_an_escape_when_unconfined(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: under the explicit opt-out the same probes catch the write and the connection."""
    from fleetgate import sandbox
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

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


def test_a_units_bash_env_is_read_before_the_script_as_bash_reads_it(world: World) -> None:
    """bash reads BASH_ENV before a non-interactive script: a unit's BASH_ENV file sets what the script sees."""
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

    (world.fleet / "be.env").write_text("CTX=99999999999\n", encoding="utf-8")
    _unit("Environment=PATH", "Environment=BASH_ENV=/srv/repo/be.env PATH")(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    rendered = render(fleet, fleet.services["s"])
    assert rendered.argv == ("llama-server", "-c", "99999999999", "--port", "8080")
    assert rendered.env["BASH_ENV"] == "/srv/repo/be.env"
    assert [(s.target, s.inside_repo) for s in rendered.sourced] == [("/srv/repo/be.env", True)]


def test_the_sandbox_has_a_host_name_of_its_own(world: World) -> None:
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

    _script('exec llama-server --alias "$(hostname)/$(uname -n)/$HOSTNAME"\n')(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    assert render(fleet, fleet.services["s"]).argv == ("llama-server", "--alias", "fleetgate/fleetgate/fleetgate")
    assert socket.gethostname() != "fleetgate"


def test_a_drop_in_linked_to_a_file_of_the_repository_applies(world: World) -> None:
    """The control of the drop-in cases: confinement is by real path, not a ban on symlinks."""
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

    (world.fleet / "shared").mkdir()
    (world.fleet / "shared" / "ctx.conf").write_text("[Service]\nEnvironment=CTX=2048\n", encoding="utf-8")
    (world.fleet / "s.service.d").mkdir()
    (world.fleet / "s.service.d" / "ctx.conf").symlink_to("../shared/ctx.conf")
    (world.fleet / "s.env").write_text("OTHER=1\n", encoding="utf-8")
    fleet = load_fleet(world.fleet / "fleet.toml")
    assert render(fleet, fleet.services["s"]).argv == ("llama-server", "-c", "2048", "--port", "8080")


def test_a_stderr_path_is_stubbed_inside_the_sandbox_only(world: World) -> None:
    """The engine by a normal absolute path the script names on stderr: stubbed in the new root, the
    render goes on, and the directory does not appear on this machine."""
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render

    _script('[[ -x {outside}/made/llama-server ]] || echo "{outside}/made/llama-server: No such file or directory" >&2\n'
            'exec {outside}/made/llama-server --port 8080\n')(world)
    fleet = load_fleet(world.fleet / "fleet.toml")
    assert render(fleet, fleet.services["s"]).argv == ("llama-server", "--port", "8080")
    assert not (world.outside / "made").exists()
