"""Run a fleet's bash (serve scripts, env files in the bash dialect) in a sandbox of its own.

The sandbox is made of Linux namespaces, through util-linux's ``unshare``: a user namespace (so no
privilege is needed), a mount namespace whose root is a size-bounded tmpfs, a network namespace with
nothing in it (not even a loopback that is up), and a PID namespace whose init kills every process in
it when the command ends or runs out of time. Inside: this machine's ``/usr`` (programs only, writes
land in the tmpfs), the fleet repository read-only where the caller says, empty placeholders for the
declared payload, the files the caller puts (stubs, the preamble), and nothing else of the host -- no
``/home``, no ``/etc`` beyond the loader's cache and the alternatives links. The command runs without
any capability, so it cannot remount, unmount or leave that root.

Where the machine cannot make namespaces (an unprivileged container, a kernel without user
namespaces), ``run`` refuses with one line naming the opt-in ``FLEETGATE_UNSAFE_RENDER_WITHOUT_SANDBOX=1``,
under which the command runs directly on this machine with the same stubs and nothing else to
contain it.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from fleetgate.errors import InputError

__all__ = [
    "INSIDE",
    "OPT_OUT",
    "SandboxResult",
    "SandboxSpec",
    "SandboxUnavailable",
    "run",
    "sandbox_problem",
]

OPT_OUT = "FLEETGATE_UNSAFE_RENDER_WITHOUT_SANDBOX"
INSIDE = "/run/fleetgate"
"""Where the caller's own files (stubs, preamble, records) live inside the sandbox."""
_UNSHARE = ("unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child",
            "--propagation", "private")
_TMPFS_BYTES = 64 << 20
_RECORD_LIMIT = 4 << 20
_GRACE_S = 15.0


class SandboxUnavailable(InputError):
    """This machine cannot run the sandbox; the message says why and names the opt-in."""


@dataclass
class SandboxSpec:
    command: Sequence[str]
    env: Mapping[str, str]
    cwd: str = "/"
    timeout: float = 10.0
    read_only: Sequence[tuple[Path, str]] = ()
    """(host directory, path inside): the fleet repository, read-only."""
    placeholders: Sequence[str] = ()
    """Empty files (the declared payload)."""
    dirs: Sequence[str] = ()
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Inside path -> content, made executable (stubs, the preamble). Paths under ``INSIDE`` also exist
    in the unsandboxed fallback; any other path only inside the sandbox."""
    links: Mapping[str, str] = field(default_factory=dict)
    """Inside path (under ``INSIDE``) -> symlink target."""
    stdin: bytes | None = None


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    timed_out: bool
    files: Mapping[str, bytes]
    """What the command left in ``INSIDE/out`` (each file's last 4 MiB), plus ``stdout`` and ``stderr``."""
    sandboxed: bool

    @property
    def stderr(self) -> str:
        return self.files.get("stderr", b"").decode("utf-8", "replace")


def _opted_out() -> bool:
    return os.environ.get(OPT_OUT, "") not in ("", "0")


@cache
def sandbox_problem() -> str | None:
    """None when this machine can make the sandbox, else one line saying why not."""
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed (Debian/Ubuntu: apt-get install util-linux mount)"
    for tool in ("setpriv", "pivot_root", "mount"):
        if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"util-linux's {tool} is not installed (Debian/Ubuntu: apt-get install util-linux mount)"
    try:
        done = subprocess.run([*_UNSHARE, "--", "/bin/sh", "-c", "mount -t tmpfs probe /mnt 2>/dev/null || "
                               "mount -t tmpfs probe /tmp"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not run: {exc}"
    if done.returncode != 0:
        reason = " ".join(done.stderr.decode("utf-8", "replace").split()) or f"exit {done.returncode}"
        return f"this machine does not allow unprivileged user, mount, network and PID namespaces ({reason})"
    return None


def run(spec: SandboxSpec, *, what: Path | str) -> SandboxResult:
    """Run ``spec.command`` in the sandbox; ``what`` names the file being read, for the refusal line."""
    problem = sandbox_problem()
    if problem is not None and not _opted_out():
        raise SandboxUnavailable(what, None, f"cannot run it in a sandbox: {problem}; fleetgate will not run a "
                                 f"fleet's bash unconfined unless {OPT_OUT}=1 is set")
    with tempfile.TemporaryDirectory(prefix="fleetgate-sandbox-", dir=scratch_dir()) as tmp:
        if problem is not None:
            return _run_unconfined(spec, Path(tmp))
        return _run_sandboxed(spec, Path(tmp))


@cache
def scratch_dir() -> str | None:
    """Where a run's scratch files go: /dev/shm when it is a writable tmpfs that allows programs (the
    stubs are run from there), so that a render's files never touch a disk; else tempfile's default.
    An explicit TMPDIR wins."""
    if os.environ.get("TMPDIR"):
        return None
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if (len(fields) >= 4 and fields[1] == "/dev/shm" and fields[2] == "tmpfs"
                        and "noexec" not in fields[3].split(",") and os.access("/dev/shm", os.W_OK | os.X_OK)):
                    return "/dev/shm"
    except OSError:
        pass
    return None


def _nul(items: Sequence[str]) -> bytes:
    for item in items:
        if "\0" in item:
            raise ValueError(f"NUL in a sandbox argument: {item!r}")
    return b"".join(item.encode("utf-8", "surrogateescape") + b"\0" for item in items)


@cache
def _host_layout() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(symlinks to recreate at /, directories to bind read-only): this machine's program directories."""
    links: list[str] = []
    dirs: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            target = os.readlink(path)
            if os.path.basename(target.rstrip("/")) == name:
                links.append(target)
                continue
            path = os.path.realpath(path)
        if os.path.isdir(path) and not path.startswith("/usr/"):
            dirs.append(path)
    if os.path.isdir("/etc/alternatives"):
        dirs.append("/etc/alternatives")
    return tuple(links), tuple(dirs)


def _through_links(path: str, links: tuple[str, ...]) -> str:
    """/bin/x -> /usr/bin/x where /bin is a link the sandbox recreates (a directory there would shadow it)."""
    for target in links:
        name = "/" + posixpath.basename(target.rstrip("/"))
        if path == name or path.startswith(name + "/"):
            return posixpath.join("/", target) + path[len(name):]
    return path


def _run_sandboxed(spec: SandboxSpec, tmp: Path) -> SandboxResult:
    (tmp / "mnt").mkdir()
    inside = tmp / "inside"
    inside.mkdir()
    links, rodirs = _host_layout()
    dirs = {"/tmp", *(_through_links(d, links) for d in spec.dirs)}
    records: list[str] = ["size", str(_TMPFS_BYTES), "cwd", spec.cwd, "timeout", f"{spec.timeout:g}",
                          "limit", str(_RECORD_LIMIT)]
    for link in links:
        records += ["link", link]
    for path in rodirs:
        records += ["rodir", path]
    for host, where in spec.read_only:
        dirs.add(where)
        records += ["ro", str(host), where]
    for path in (_through_links(p, links) for p in spec.placeholders):
        dirs.add(posixpath.dirname(path))
        records += ["empty", path]
    for i, (where, content) in enumerate(spec.files.items()):
        if where.startswith(INSIDE + "/"):
            target = inside / where[len(INSIDE) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(0o755)
        else:
            where = _through_links(where, links)
            name = f"file{i}"
            (tmp / name).write_bytes(content)
            (tmp / name).chmod(0o755)
            dirs.add(posixpath.dirname(where))
            records += ["put", name, where]
    for where, target_path in spec.links.items():
        link_path = inside / where[len(INSIDE) + 1:]
        link_path.parent.mkdir(parents=True, exist_ok=True)
        link_path.symlink_to(target_path)
    if spec.stdin is not None:
        (inside / "stdin").write_bytes(spec.stdin)
        records += ["stdin", f"{INSIDE}/stdin"]
    for path in sorted(dirs):
        records += ["dir", path]
    (tmp / "spec.nul").write_bytes(_nul(records))
    (tmp / "env.nul").write_bytes(_nul([f"{k}={v}" for k, v in spec.env.items()]))
    (tmp / "command.nul").write_bytes(_nul(list(spec.command)))
    init = resources.files("fleetgate").joinpath("_sandbox_init.bash").read_text(encoding="utf-8")
    (tmp / "init.bash").write_text(init, encoding="utf-8")
    argv = [*_UNSHARE, "--", "/bin/bash", "--noprofile", "--norc", str(tmp / "init.bash"), str(tmp)]
    stdout, stderr, code = _communicate(argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
                                        spec.timeout + _GRACE_S)
    if code is None:
        return SandboxResult(None, True, {}, True)
    if code != 0:
        reason = " ".join(stderr.decode("utf-8", "replace").split()) or f"exit {code}"
        raise SandboxUnavailable(tmp.name, None, f"the sandbox could not start: {reason}")
    files = _read_tar(stdout)
    rc_text = files.pop(".rc", b"").decode("ascii", "replace")
    timed_out = files.pop(".timed-out", None) is not None
    return SandboxResult(int(rc_text) if rc_text.isdigit() else None, timed_out, files, True)


def _read_tar(data: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive.getmembers():
            if not member.isfile() or "/" in member.name.removeprefix("./"):
                continue
            extracted = archive.extractfile(member)
            if extracted is not None:
                files[member.name.removeprefix("./")] = extracted.read()[-_RECORD_LIMIT:]
    return files


def _communicate(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[bytes, bytes, int | None]:
    """Run argv in a session of its own; on timeout kill the whole session. Returns (stdout, stderr, rc)."""
    process = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        process.communicate()
        return b"", b"", None
    finally:
        _kill_session(process)
    return stdout, stderr, process.returncode


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _run_unconfined(spec: SandboxSpec, tmp: Path) -> SandboxResult:
    """The opt-in fallback: the same files under a temporary directory, the command run on this machine."""
    out = tmp / "out"
    out.mkdir()

    def local(inside: str) -> Path | None:
        return tmp / inside[len(INSIDE) + 1:] if inside.startswith(INSIDE + "/") else None

    for where, content in spec.files.items():
        target = local(where)
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.replace(INSIDE.encode(), str(tmp).encode()))
            target.chmod(0o755)
    for where, link_target in spec.links.items():
        link = local(where)
        if link is not None:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(link_target)
    env = {k: v.replace(INSIDE, str(tmp)) for k, v in spec.env.items()}
    command = [part.replace(INSIDE, str(tmp)) for part in spec.command]
    cwd = local(spec.cwd) or tmp / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = process.communicate(spec.stdin or b"", timeout=spec.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_session(process)
        stdout, stderr = process.communicate()
    finally:
        _kill_session(process)
    files = {p.name: p.read_bytes()[-_RECORD_LIMIT:] for p in out.iterdir() if p.is_file()}
    files["stdout"], files["stderr"] = stdout[-_RECORD_LIMIT:], stderr[-_RECORD_LIMIT:]
    return SandboxResult(None if timed_out else process.returncode, timed_out, files, False)
