"""Run a fleet's bash (serve scripts, env files in the bash dialect) in a sandbox of its own.

The sandbox is made of Linux namespaces, through util-linux's ``unshare``: a user namespace (so no
privilege is needed), a mount namespace whose root is a size-bounded tmpfs, a UTS namespace (a host
name of its own), a network namespace with nothing in it (not even a loopback that is up), and a PID
namespace whose init kills every process in it when the command ends, reaches the process limit or
runs out of time. Inside: this machine's ``/usr`` (programs only, writes land in the tmpfs), its
null, zero, full, random and urandom devices read-only, the fleet repository read-only where the
caller says, empty placeholders for the declared payload, the files the caller puts (stubs, the
preamble), and nothing else of the host -- no ``/home``, no ``/etc`` beyond the loader's cache and the
alternatives links, a ``/proc`` of the sandbox's own processes only. The command runs without any
capability, with at most ``NPROC_LIMIT`` processes and ``MEMORY_LIMIT_MIB`` of address space per
process, so it cannot remount, unmount or leave that root.

Nothing the caller names is created on this machine: every path of a spec (directories,
placeholders, stubs, mount points) is created by the init after ``pivot_root``, inside the new root.

Where the machine cannot make namespaces (an unprivileged container, a kernel without user
namespaces), ``run`` refuses with one line naming the opt-in ``FLEETGATE_UNSAFE_RENDER_WITHOUT_SANDBOX=1``,
under which the command runs directly on this machine with the same stubs and nothing else to
contain it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import math
import os
import posixpath
import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from fleetgate.errors import InputError

__all__ = [
    "INSIDE",
    "MEMORY_LIMIT_MIB",
    "NPROC_LIMIT",
    "OPT_OUT",
    "SCRATCH_MIB",
    "SandboxResult",
    "SandboxSpec",
    "SandboxUnavailable",
    "overrun_message",
    "run",
    "sandbox_problem",
]

OPT_OUT = "FLEETGATE_UNSAFE_RENDER_WITHOUT_SANDBOX"
INSIDE = "/run/fleetgate"
"""Where the caller's own files (stubs, preamble, records) live inside the sandbox."""
_UNSHARE = ("unshare", "--user", "--map-root-user", "--mount", "--uts", "--net", "--pid", "--fork", "--kill-child",
            "--propagation", "private")
SCRATCH_MIB = 64
"""The sandbox's tmpfs: every file the command writes (``/tmp``, ``$HOME``, the overlay on ``/usr``)."""
NPROC_LIMIT = 256
"""Processes (tasks) of the sandbox's user namespace at once (RLIMIT_NPROC; the init counts too)."""
MEMORY_LIMIT_MIB = 1024
"""Address space of each process of the command (RLIMIT_AS)."""
HOSTNAME = "fleetgate"
ROOT_RUNS_AS = int(os.environ.get("FLEETGATE_SANDBOX_UID", "2147483646"))
"""When fleetgate runs as root, the command's uid 0 inside is this host uid (and gid): a user that owns
no file of this machine, so no bound host inode is the command's to chmod or touch, and the kernel
enforces RLIMIT_NPROC, which it never does for the host's root. The host's root is uid 1 inside (it
owns nothing there); the command keeps only CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH in the sandbox's
user namespace, so it reads a repository only root may enter as before (every host file it can reach
is bound read-only)."""
_TMPFS_BYTES = SCRATCH_MIB << 20
_TICK_S = 0.25
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
    overrun: str | None = None
    """The bound the command ran into: ``processes``, ``memory`` or ``scratch`` (``overrun_message``
    says it), else None."""

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
    """(links to recreate at /, directories to bind read-only): this machine's program directories."""
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
    return tuple(links), tuple(dirs)


def _write_host_basics(root: Path, links: tuple[str, ...]) -> None:
    """What programs need to start, as files of the sandbox's tree: /bin -> usr/bin and the like, /dev/fd,
    the update-alternatives links and the loader's cache. Nothing else of /etc."""
    for target in links:
        (root / posixpath.basename(target.rstrip("/"))).symlink_to(target)
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev" / "fd").symlink_to("/proc/self/fd")
    (root / "etc").mkdir(exist_ok=True)
    alternatives = Path("/etc/alternatives")
    if alternatives.is_dir():
        (root / "etc" / "alternatives").mkdir()
        for entry in alternatives.iterdir():
            if entry.is_symlink():
                (root / "etc" / "alternatives" / entry.name).symlink_to(os.readlink(entry))
    cache_file = Path("/etc/ld.so.cache")
    if cache_file.is_file():
        shutil.copyfile(cache_file, root / "etc" / "ld.so.cache")


def _through_links(path: str, links: tuple[str, ...]) -> str:
    """/bin/x -> /usr/bin/x where /bin is a link the sandbox recreates (a directory there would shadow it)."""
    for target in links:
        name = "/" + posixpath.basename(target.rstrip("/"))
        if path == name or path.startswith(name + "/"):
            return posixpath.join("/", target) + path[len(name):]
    return path


_CACHE: Path | None = None


def _cache_root() -> Path:
    """A directory of this process for what every sandboxed run shares (the init, stub trees), on the
    same tmpfs as the runs' scratch files where there is one: a tree is hundreds of links, and writing
    them on a disk cost 0.25 s per distinct tree."""
    global _CACHE
    if _CACHE is None or not _CACHE.is_dir():
        _CACHE = Path(tempfile.mkdtemp(prefix="fleetgate-sandbox-cache-", dir=scratch_dir()))
        atexit.register(shutil.rmtree, _CACHE, True)
    return _CACHE


def _cached(name: str, write: Callable[[Path], None]) -> Path:
    """``name`` under the cache, written once (into a staging path, then renamed into place)."""
    target = _cache_root() / name
    if not target.exists():
        staging = Path(tempfile.mkdtemp(dir=_cache_root(), prefix=".staging-"))
        write(staging / "item")
        with contextlib.suppress(OSError):  # another thread was first: the same content
            os.rename(staging / "item", target)
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _host_tree() -> Path:
    """The host basics every run shares (/bin links, /dev/fd, the alternatives, the loader's cache)."""
    host_links = _host_layout()[0]
    key = hashlib.sha256(repr(host_links).encode("utf-8", "surrogateescape")).hexdigest()[:24]

    def write(root: Path) -> None:
        root.mkdir()
        _write_host_basics(root, host_links)
    return _cached(f"host-{key}", write)


def _tree(files: list[tuple[str, bytes]], links: list[tuple[str, str]], blobs: list[tuple[str, bytes]]) -> Path:
    """The files and links under ``INSIDE`` that the init copies onto the sandbox's root after the host
    basics, and the contents of the stubs it puts elsewhere (``/.fg/blob/NAME``)."""
    key = hashlib.sha256(repr((files, links, blobs)).encode("utf-8", "surrogateescape")).hexdigest()[:24]

    def write(root: Path) -> None:
        path = root / INSIDE.lstrip("/")
        path.mkdir(parents=True)
        for where, content in files:
            target = path / _inside_relative(where)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(0o755)
        for where, link_target in links:
            link_path = path / _inside_relative(where)
            link_path.parent.mkdir(parents=True, exist_ok=True)
            link_path.symlink_to(link_target)
        (root / ".fg" / "blob").mkdir(parents=True)
        for name, content in blobs:
            (root / ".fg" / "blob" / name).write_bytes(content)
            (root / ".fg" / "blob" / name).chmod(0o755)
    return _cached(f"tree-{key}", write)


def _inside_relative(where: str) -> str:
    """``INSIDE/a/b`` -> ``a/b``; refused (it would be written on this machine, in the shared tree) when
    the path leaves ``INSIDE`` once normalised."""
    relative = posixpath.normpath(where)[len(INSIDE) + 1:]
    if not posixpath.normpath(where).startswith(INSIDE + "/") or relative.split("/")[0] in ("", "..", "."):
        raise ValueError(f"a sandbox file outside {INSIDE}: {where!r}")
    return relative


def _normal(path: str) -> str | None:
    """An absolute path with ``.``, ``..`` and repeated slashes resolved lexically (the init creates it
    inside the new root, where ``..`` stops at ``/`` anyway); None for a relative one."""
    if not path.startswith("/") or "\0" in path:
        return None
    return "/" + posixpath.normpath(path).lstrip("/")


@cache
def _init_text() -> str:
    return resources.files("fleetgate").joinpath("_sandbox_init.bash").read_text(encoding="utf-8")


def _run_sandboxed(spec: SandboxSpec, tmp: Path) -> SandboxResult:
    (tmp / "mnt").mkdir()
    links, rodirs = _host_layout()
    # Every path below is the caller's (and so, often, the fleet's): normalised here, created by the
    # init only after pivot_root, inside the new root.
    dirs = {"/tmp"}
    for path in spec.dirs:
        if (normal := _normal(path)) is not None and normal != "/":
            dirs.add(_through_links(normal, links))
    ticks = max(1, math.ceil(spec.timeout / _TICK_S))
    records: list[str] = ["size", str(_TMPFS_BYTES), "cwd", spec.cwd, "timeout", f"{spec.timeout:g}",
                          "ticks", str(ticks), "limit", str(_RECORD_LIMIT), "nproc", str(NPROC_LIMIT),
                          "mem", str(MEMORY_LIMIT_MIB << 10), "hostname", HOSTNAME]
    for path in rodirs:
        records += ["rodir", path]
    repo = spec.read_only[0][0] if spec.read_only else None
    for host, where in spec.read_only:
        normal = _normal(where)
        if normal is None or normal == "/" or normal == INSIDE or normal.startswith(INSIDE + "/"):
            raise ValueError(f"a read-only mount point the sandbox cannot make: {where!r}")
        dirs.add(normal)
        records += ["ro", "." if host == repo else str(host), normal]
    for path in spec.placeholders:
        normal = _normal(path)
        if normal is None or normal == "/" or normal == INSIDE or normal.startswith(INSIDE + "/"):
            continue
        normal = _through_links(normal, links)
        dirs.add(posixpath.dirname(normal))
        records += ["empty", normal]
    inside_files = sorted((w, c) for w, c in spec.files.items() if w.startswith(INSIDE + "/"))
    blobs: dict[str, bytes] = {}
    puts: list[str] = []
    put_paths: set[str] = set()
    for where, content in spec.files.items():
        if where.startswith(INSIDE + "/"):
            continue
        normal = _normal(where)
        if normal is None or normal == "/" or normal.startswith(INSIDE + "/"):
            continue
        normal = _through_links(normal, links)
        if normal in put_paths:  # /bin/x and /usr/bin/x: one file once /bin is the link to usr/bin
            continue
        put_paths.add(normal)
        name = hashlib.sha256(content).hexdigest()[:24]
        blobs[name] = content
        dirs.add(posixpath.dirname(normal))
        puts += ["put", name, normal]
    records += ["tree", str(_host_tree()),
                "tree", str(_tree(inside_files, sorted(spec.links.items()), sorted(blobs.items()))), *puts]
    if spec.stdin is not None:
        (tmp / "stdin").write_bytes(spec.stdin)
        records += ["stdin", str(tmp / "stdin")]
    for path in sorted(dirs):
        records += ["dir", path]
    (tmp / "spec.nul").write_bytes(_nul(records))
    (tmp / "env.nul").write_bytes(_nul([f"{k}={v}" for k, v in spec.env.items()]))
    (tmp / "command.nul").write_bytes(_nul(list(spec.command)))
    # The init's text itself, not a path to it, and the spec directory as the working directory: no
    # path of this machine in the init's argv (/proc/1/cmdline inside).
    # The init's text itself, not a path to it, and the spec directory on its standard input: no path
    # of this machine in the init's argv or environment (/proc/1/cmdline and environ inside).
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    mapping: list[str] = ["--map-root-user"]
    if os.geteuid() == 0:
        # unshare(1) maps ranges through newuidmap/newgidmap; these stand-ins (root may write any map)
        # write the sandbox's: uid 0 -> ROOT_RUNS_AS, uid 1 -> root.
        mapping = ["--keep-caps", f"--map-users={ROOT_RUNS_AS},0,1", f"--map-groups={ROOT_RUNS_AS},0,1"]
        env["PATH"] = f"{_id_mappers()}:{env['PATH']}"
    argv = [*_one_cpu(env["PATH"]), _UNSHARE[0], "--user", *mapping, *_UNSHARE[3:], "--", "/bin/bash", "--noprofile",
            "--norc", "-c", _init_text(), "fleetgate-init"]
    stdout, stderr, code = _communicate(argv, env, spec.timeout + _GRACE_S, cwd=repo or Path("/"),
                                        stdin=str(tmp).encode("utf-8", "surrogateescape") + b"\n")
    if code is None:
        return SandboxResult(None, True, {}, True)
    lines = stderr.decode("utf-8", "replace").splitlines()
    status = _status(lines[-1]) if lines else None
    if code != 0 or status is None:
        reason = " ".join(" ".join(line for line in lines if not line.startswith("fleetgate-status ")).split())
        raise SandboxUnavailable(tmp.name, None, f"the sandbox could not start: {reason or f'exit {code}'}")
    try:
        files = _read_tar(stdout)
    except tarfile.TarError as exc:
        raise SandboxUnavailable(tmp.name, None, f"the sandbox's output could not be read: {exc}") from None
    rc_text = status.get("rc", "")
    timed_out = status.get("timed-out") == "1"
    overrun = _overrun(status, files.get("stderr", b""))
    return SandboxResult(int(rc_text) if rc_text.isdigit() else None, timed_out, files, True, overrun)


def _status(line: str) -> dict[str, str] | None:
    """The init's last stderr line, ``fleetgate-status rc=N timed-out=0 flooded=0 full=0``."""
    if not line.startswith("fleetgate-status "):
        return None
    return dict(field.partition("=")[::2] for field in line.split()[1:])


# What programs print when a bound stops them: fork(2) failing with EAGAIN at RLIMIT_NPROC (bash,
# Python's BlockingIOError), an allocation failing at RLIMIT_AS (bash's xmalloc, Python, C++, glibc).
_FORK_REFUSED = ("fork: retry: Resource temporarily unavailable", "fork: Resource temporarily unavailable",
                 "Cannot fork", "BlockingIOError: [Errno 11]")
_MEMORY_REFUSED = ("xmalloc: ", "Cannot allocate memory", "MemoryError", "std::bad_alloc", "memory exhausted",
                   "out of memory", "Out of memory")


def _overrun(status: Mapping[str, str], stderr: bytes) -> str | None:
    text = stderr[-65536:].decode("utf-8", "replace")
    if status.get("flooded") == "1" or any(marker in text for marker in _FORK_REFUSED):
        return "processes"
    if status.get("full") == "1":
        return "scratch"
    if any(marker in text for marker in _MEMORY_REFUSED):
        return "memory"
    return None


def overrun_message(overrun: str, who: str) -> str:
    """The bound ``SandboxResult.overrun`` names, said as a clause about ``who`` ("the serve script")."""
    if overrun == "processes":
        return f"{who} started more than {NPROC_LIMIT} processes (the sandbox's process limit)"
    if overrun == "memory":
        return f"{who} ran out of memory (the sandbox's limit: {MEMORY_LIMIT_MIB} MiB of address space per process)"
    return f"the sandbox's scratch ({SCRATCH_MIB} MiB) is full"


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


@cache
def _one_cpu(path: str) -> tuple[str, ...]:
    """``taskset -c N``: the render runs on one CPU (the lowest this process may use), so ``nproc`` and the
    affinity mask say 1 on every machine; nothing where util-linux's taskset is missing (docs/sandbox.md)."""
    taskset = shutil.which("taskset", path=path)
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return ()
    return (taskset, "-c", str(min(cpus))) if taskset and cpus else ()


def _id_mappers() -> Path:
    def write(root: Path) -> None:
        root.mkdir()
        for name, table in (("newuidmap", "uid_map"), ("newgidmap", "gid_map")):
            (root / name).write_text(f"#!/bin/sh\nprintf '0 {ROOT_RUNS_AS} 1\\n1 0 1\\n' >/proc/\"$1\"/{table}\n",
                                     encoding="ascii")
            (root / name).chmod(0o755)
    return _cached(f"idmap-{ROOT_RUNS_AS}", write)


def _communicate(argv: Sequence[str], env: Mapping[str, str], timeout: float, cwd: Path | None = None,
                 stdin: bytes | None = None) -> tuple[bytes, bytes, int | None]:
    """Run argv in a session of its own; on timeout kill the whole session. Returns (stdout, stderr, rc)."""
    process = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                               cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = process.communicate(stdin, timeout=timeout)
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


def _unmounted(part: str, mounts: Sequence[tuple[Path, str]]) -> str:
    """A path under a read-only mount point (a script run by its deploy_root path) as its source on this machine:
    unconfined, nothing is mounted there."""
    for source, target in mounts:
        if part == target or part.startswith(target.rstrip("/") + "/"):
            return str(source) + part[len(target.rstrip("/")):]
    return part


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
    command = [_unmounted(part.replace(INSIDE, str(tmp)), spec.read_only) for part in spec.command]
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
