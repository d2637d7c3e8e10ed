"""Run a fleet's bash (serve scripts, env files in the bash dialect) in a sandbox of its own. One module for one
job, running a command there: the spec, the host layout it is checked against, the request sent to the sandbox
parent, the result read back with the bounds' messages (one protocol with ``sandbox/_parent.py``), and the opt-out
that runs the same command without one; the opt-in render cache is ``fleetgate.sandbox.render_cache``.

The sandbox is made of Linux namespaces: a user namespace (so no privilege is needed), a mount namespace
whose root is a size-bounded tmpfs, a UTS namespace (a host name of its own), a network namespace with
nothing in it (not even a loopback that is up), and a PID namespace whose init kills every process in it
when the command ends, reaches the process limit or runs out of time. Inside: this machine's ``/usr``
(programs only, writes land in the tmpfs), its null, zero, full, random and urandom devices read-only, the
fleet repository read-only where the caller says, empty placeholders for the declared payload, the files
the caller puts (stubs, the preamble), and nothing else of the host -- no ``/home``, no ``/etc`` beyond the
loader's cache and the alternatives links, a ``/proc`` of the sandbox's own processes only. The command
runs without any capability, with at most ``NPROC_LIMIT`` processes and ``MEMORY_LIMIT_MIB`` of address
space per process, so it cannot remount, unmount or leave that root.

Every run gets fresh mount and PID namespaces, its own tmpfs and its own init; a run of its own gets fresh user, UTS
and network namespaces too, and the runs of one session (``run_many``) share those three, one run after another.
What builds them is one long-lived
sandbox parent per process (``sandbox/_parent.py``, started on the first run, ending with this process):
it forks each run from a prepared interpreter and makes the namespaces, mounts and ``pivot_root`` by
system calls, so a run costs a few forks instead of the fifteen programs of util-linux the sandbox used
to start per run (docs/sandbox.md, "Cost"). Nothing of a run is written on this machine: its spec
travels over a socket, its files live in its tmpfs.

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
import marshal
import math
import os
import posixpath
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, cast

from fleetgate.errors import InputError
from fleetgate.sandbox.render_cache import CACHE_ENV, cache_dir, cache_key, cache_load, cache_store

__all__ = [
    "CACHE_ENV",
    "INSIDE",
    "MEMORY_LIMIT_MIB",
    "NPROC_LIMIT",
    "OPT_OUT",
    "SCRATCH_MIB",
    "SCRATCH_PREFIX",
    "SESSION_JOBS",
    "SandboxResult",
    "SandboxSpec",
    "SandboxUnavailable",
    "counting",
    "overrun_message",
    "run",
    "run_many",
    "sandbox_problem",
]

OPT_OUT = "FLEETGATE_UNSAFE_RENDER_WITHOUT_SANDBOX"
INSIDE = "/run/fleetgate"
"""Where the caller's own files (stubs, preamble, records) live inside the sandbox."""
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


_TALLY: ContextVar[Callable[[], None] | None] = ContextVar("fleetgate_sandbox_tally", default=None)


@contextlib.contextmanager
def counting(tally: Callable[[], None]) -> Iterator[None]:
    """Within the block (in this thread), ``tally()`` once per sandbox session made (a ``run``, or a session of
    ``run_many`` however many runs it holds): how the run's renderer counts what its renders cost (an env file read by
    bash and a render's retries included; an answer from the render cache is no session)."""
    token = _TALLY.set(tally)
    try:
        yield
    finally:
        _TALLY.reset(token)


def _opted_out() -> bool:
    return os.environ.get(OPT_OUT, "") not in ("", "0")


_PROBE_LOCK = threading.Lock()


@cache
def sandbox_problem() -> str | None:
    """None when this machine can make the sandbox, else one line saying why not (one probe run, once)."""
    # Renders start side by side: without the lock, each thread that asked before the first answer probed again.
    with _PROBE_LOCK:
        return _probe()


@cache
def _probe() -> str | None:
    if os.name != "posix" or not hasattr(os, "pidfd_open") or sys.platform != "linux":
        return "the sandbox needs Linux (user, mount, network and PID namespaces; pidfd, Linux 5.3+)"
    try:
        answer = _exchange(_request(SandboxSpec(command=[], env={}), probe=True), 10 + _GRACE_S)
    except OSError as exc:
        return f"the sandbox parent could not start: {exc}"
    if answer[0] != "done":
        reason = answer[1] if answer[0] == "error" else "no answer"
        return f"this machine does not allow unprivileged user, mount, network and PID namespaces ({reason})"
    return None


def run(spec: SandboxSpec, *, what: Path | str) -> SandboxResult:
    """Run ``spec.command`` in the sandbox; ``what`` names the file being read, for the refusal line."""
    problem = sandbox_problem()
    if problem is not None and not _opted_out():
        raise SandboxUnavailable(what, None, f"cannot run it in a sandbox: {problem}; fleetgate will not run a "
                                 f"fleet's bash unconfined unless {OPT_OUT}=1 is set")
    if problem is None:
        return _run_sandboxed(spec)
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=_swept_scratch_dir()) as tmp:
        return _run_unconfined(spec, Path(tmp))


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


SCRATCH_PREFIX = "fleetgate-sandbox-"
"""The unconfined fallback's scratch directories are ``SCRATCH_PREFIX`` + the owner's PID + ``-`` + a random
suffix, so that a later run can tell one whose owner was killed (atexit never ran) and remove it."""


def sweep_scratch(directory: str | None = None, prefix: str = SCRATCH_PREFIX) -> list[str]:
    """Remove the directories named ``prefix`` + PID + ``-`` + anything whose owner process is gone; the names
    removed. Another live process's directories, and names of any other shape, are left alone."""
    base = directory or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for entry in entries:
        owner, dash, _ = entry.name.removeprefix(prefix).partition("-")
        if (not entry.name.startswith(prefix) or not dash or not owner.isdigit() or _alive(int(owner))
                or not entry.is_dir(follow_symlinks=False)):
            continue
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@cache
def _swept_scratch_dir() -> str | None:
    """``scratch_dir()``, with what killed runs left there removed (once per process)."""
    directory = scratch_dir()
    sweep_scratch(directory)
    return directory


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


def _through_links(path: str, links: tuple[str, ...]) -> str:
    """/bin/x -> /usr/bin/x where /bin is a link the sandbox recreates (a directory there would shadow it)."""
    for target in links:
        name = "/" + posixpath.basename(target.rstrip("/"))
        if path == name or path.startswith(name + "/"):
            return posixpath.join("/", target) + path[len(name):]
    return path


def _inside_relative(where: str) -> str:
    """``INSIDE/a/b`` -> ``a/b``; refused (it would be written before pivot_root, outside the new root) when
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
def _parent_text() -> str:
    return resources.files("fleetgate").joinpath("sandbox/_parent.py").read_text(encoding="utf-8")


@cache
def _cap_last() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return 40


class _Parent:
    """The sandbox parent of this process (``sandbox/_parent.py``): started once, it forks every run."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.owner = os.getpid()
        # argv[0] is a name, not this machine's interpreter path, and the environment is empty: each run's PID 1 is
        # a fork of this process, and the command may read its cmdline.
        # Python finds its library from the directory it starts in when argv[0] is no path: its own bin directory.
        executable = os.path.realpath(sys.executable)
        try:
            self.process = _from_lasting_thread(lambda: subprocess.Popen(
                ["fleetgate-sandbox", "-I", "-S", "-c", _parent_text(), str(self.owner), str(theirs.fileno())],
                executable=executable, env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), cwd=os.path.dirname(executable)))
        finally:
            theirs.close()
        self.control = ours
        self.lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        """End the parent and wait for it: its runs' CPU time then counts as this process's children's."""
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.process.wait(timeout=_GRACE_S)

    def cpu_seconds(self) -> float:
        """User + system time of the parent and of the runs it has waited for (for benchmarks)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def connect(self) -> socket.socket:
        mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                socket.send_fds(self.control, [b"r"], [its.fileno()])
        finally:
            its.close()
        return mine


_PARENT: _Parent | None = None
_PARENT_LOCK = threading.Lock()

_T = TypeVar("_T")
_SPAWNER: tuple[int, queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[tuple[bool, Any]]]]] | None = None
_SPAWNER_LOCK = threading.Lock()


def _from_lasting_thread(make: Callable[[], _T]) -> _T:
    """``make()`` in a thread that lasts as long as this process: the main thread, else one kept for it.

    The parent's death signal (PR_SET_PDEATHSIG, which ends it with its owner) follows the thread that started
    it, not the process: started from a render pool's thread, the parent was killed when that pool ended, and
    the next run started another."""
    if threading.current_thread() is threading.main_thread():
        return make()
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None or _SPAWNER[0] != os.getpid():
            requests: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[tuple[bool, Any]]]] = queue.SimpleQueue()
            threading.Thread(target=_spawn_forever, args=(requests,), name="fleetgate-sandbox-spawner", daemon=True).start()
            _SPAWNER = (os.getpid(), requests)
        requests = _SPAWNER[1]
    answer: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    requests.put((make, answer))
    ok, value = answer.get()
    if not ok:
        raise value
    return cast(_T, value)


def _spawn_forever(requests: queue.SimpleQueue[tuple[Callable[[], Any], queue.SimpleQueue[tuple[bool, Any]]]]) -> None:
    while True:
        make, answer = requests.get()
        try:
            answer.put((True, make()))
        except BaseException as exc:  # handed to the caller, raised there
            answer.put((False, exc))


def _parent() -> _Parent:
    global _PARENT
    with _PARENT_LOCK:
        if _PARENT is None or not _PARENT.alive():
            _PARENT = _Parent()
        return _PARENT


def _exchange(request: Mapping[str, object], wait: float) -> tuple[object, ...]:
    """Send one run (or one session of runs, ``jobs``) to the parent; the init's answer (``done``/``error``) or the
    manager's ``end``; for a session, ``("session", answers)``, one answer of those kinds per job."""
    jobs = request.get("jobs")
    if isinstance(jobs, list):
        return ("session", _exchange_frames(request, wait, len(jobs)))
    frames = _exchange_frames(request, wait, None)
    return frames[0]


def _exchange_frames(request: Mapping[str, object], wait: float, jobs: int | None) -> list[tuple[object, ...]]:
    for attempt in (0, 1):
        try:
            connection = _parent().connect()
        except OSError:
            if attempt:
                raise
            continue
        break
    answers: list[tuple[object, ...]] = []
    answer: tuple[object, ...] | None = None
    ended: tuple[object, ...] = ("error", "the sandbox parent went away")
    with connection:
        connection.settimeout(wait)
        data = marshal.dumps(dict(request))
        try:
            connection.sendall(struct.pack("!Q", len(data)) + data)
            while True:
                head = _recv_exactly(connection, 8)
                if head is None:
                    break
                body = _recv_exactly(connection, struct.unpack("!Q", head)[0])
                if body is None:
                    break
                frame = marshal.loads(body)
                if jobs is not None and frame[0] == "job-end":
                    # a session's job is over: its init's first answer, else its deadline or a silent end
                    answers.append(answer if answer is not None and answer[0] != "end" else ("end", bool(frame[1])))
                    answer = None
                elif answer is None or answer[0] == "end":
                    answer = frame
        except TimeoutError:
            ended = ("end", True)
        except OSError as exc:
            ended = ("error", f"the sandbox parent went away: {exc}")
        else:
            if answer is not None:
                ended = answer
    if jobs is None:
        return [ended]
    if len(answers) < jobs and ended[0] == "done":
        # the job that was running when the session ended had answered; the ones after it never ran
        answers.append(ended)
        ended = ("end", True)
    # Jobs the session never reached (it ran past its deadline, or could not start) end the way the session did.
    return answers + [ended] * (jobs - len(answers))


def _recv_exactly(connection: socket.socket, count: int) -> bytes | None:
    chunks = []
    while count:
        chunk = connection.recv(min(count, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _request(spec: SandboxSpec, *, probe: bool = False) -> dict[str, object]:
    links, rodirs = _host_layout()
    # Every path below is the caller's (and so, often, the fleet's): normalised here, created by the
    # init only after pivot_root, inside the new root.
    dirs = {"/tmp"}
    for path in spec.dirs:
        if (normal := _normal(path)) is not None and normal != "/":
            dirs.add(_through_links(normal, links))
    repo = spec.read_only[0][0] if spec.read_only else None
    ro: list[tuple[str, str]] = []
    for host, where in spec.read_only:
        normal = _normal(where)
        if normal is None or normal == "/" or normal == INSIDE or normal.startswith(INSIDE + "/"):
            raise ValueError(f"a read-only mount point the sandbox cannot make: {where!r}")
        dirs.add(normal)
        ro.append(("." if host == repo else str(host), normal))
    empty: list[str] = []
    for path in spec.placeholders:
        normal = _normal(path)
        if normal is None or normal == "/" or normal == INSIDE or normal.startswith(INSIDE + "/"):
            continue
        normal = _through_links(normal, links)
        dirs.add(posixpath.dirname(normal))
        empty.append(normal)
    files = [(_inside_relative(w), c) for w, c in sorted(spec.files.items()) if w.startswith(INSIDE + "/")]
    inside_links = [(_inside_relative(w), t) for w, t in sorted(spec.links.items())]
    blobs: dict[str, bytes] = {}
    puts: list[tuple[str, str]] = []
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
        puts.append((name, normal))
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = set()
    return {
        "size": _TMPFS_BYTES, "cwd": spec.cwd, "ticks": max(1, math.ceil(spec.timeout / _TICK_S)),
        "limit": _RECORD_LIMIT, "nproc": NPROC_LIMIT, "mem": MEMORY_LIMIT_MIB << 10, "hostname": HOSTNAME,
        "rodirs": list(rodirs), "ro": ro, "dirs": sorted(dirs), "empty": empty, "puts": puts,
        "files": files, "links": inside_links, "blobs": sorted(blobs.items()), "links_root": list(links),
        "stdin": spec.stdin, "env": [f"{k}={v}" for k, v in spec.env.items()], "command": [] if probe else list(spec.command),
        "mapped": os.geteuid() == 0, "root_runs_as": ROOT_RUNS_AS, "cpu": min(cpus) if cpus else None,
        "repo": str(repo) if repo is not None else None, "deadline": spec.timeout + _GRACE_S, "mnt": _MOUNT_POINT,
        "cap_last": _cap_last(), "track": False,
    }


_MOUNT_POINT = "/tmp"
"""Where each run's tmpfs is mounted before pivot_root, in the run's own mount namespace only."""


SESSION_JOBS = 16
"""Runs one session of the sandbox makes at most (``run_many``): its user, UTS and network namespaces are made once
for them, and each run still gets mount and PID namespaces, a tmpfs and an init of its own."""


@dataclass
class _Prepared:
    spec: SandboxSpec
    request: dict[str, object]
    repo: Path | None
    key: str | None = None
    snapshot: Any = None
    hit: SandboxResult | None = None


def _prepare(spec: SandboxSpec) -> _Prepared:
    for item in (*spec.command, *spec.env, *spec.env.values()):
        if "\0" in item:
            raise ValueError(f"NUL in a sandbox argument: {item!r}")
    prepared = _Prepared(spec, _request(spec), spec.read_only[0][0] if spec.read_only else None)
    cache = cache_dir()
    if cache is not None:
        prepared.request["track"] = prepared.repo is not None
        prepared.key, prepared.snapshot = cache_key(prepared.request, prepared.repo, _code_version())
        hit = cache_load(cache, prepared.key, prepared.repo, prepared.snapshot)
        if hit is not None:
            prepared.hit = SandboxResult(hit[0], False, hit[1], True, None)
    return prepared


def _run_sandboxed(spec: SandboxSpec) -> SandboxResult:
    prepared = _prepare(spec)
    if prepared.hit is not None:
        return prepared.hit
    _tallied()
    return _answered(prepared, _exchange(prepared.request, spec.timeout + _GRACE_S + 5))


def _tallied() -> None:
    tally = _TALLY.get()
    if tally is not None:
        tally()


def _answered(prepared: _Prepared, answer: tuple[object, ...]) -> SandboxResult:
    if answer[0] == "end":
        if answer[1]:
            return SandboxResult(None, True, {}, True)
        raise SandboxUnavailable("the sandbox", None, "the sandbox could not start: its init ended without an answer")
    if answer[0] == "error":
        raise SandboxUnavailable("the sandbox", None, f"the sandbox could not start: {answer[1]}")
    _, rc, timed_out, flooded, full, files, opened = answer
    assert isinstance(rc, int) and isinstance(files, dict)
    status = {"flooded": "1" if flooded else "0", "full": "1" if full else "0"}
    overrun = _overrun(status, files.get("stderr", b""))
    result = SandboxResult(rc, bool(timed_out), files, True, overrun)
    cache, repo, key = cache_dir(), prepared.repo, prepared.key
    if cache is not None and key is not None and not timed_out and overrun is None and (repo is None or opened is not None):
        cache_store(cache, key, repo, prepared.snapshot, opened if isinstance(opened, list) else [], result.returncode,
                    result.files)
    return result


def run_many(specs: Sequence[tuple[SandboxSpec, Path | str]]) -> list[SandboxResult | Exception]:
    """Run several commands, each as ``run`` would (``(spec, what)``: ``what`` names the file for a refusal line), in
    as few sandbox sessions as their repository allows (``SESSION_JOBS`` runs each): one user, UTS and network
    namespace per session, and for each run its own mount and PID namespaces, tmpfs, init and bounds, so that no run
    sees what another wrote or started. Each result in order, or the exception ``run`` would have raised for it."""
    problem = sandbox_problem()
    if problem is not None:
        out: list[SandboxResult | Exception] = []
        for spec, what in specs:
            try:
                out.append(run(spec, what=what))
            except (InputError, ValueError, OSError) as exc:
                out.append(exc)
        return out
    results: list[SandboxResult | Exception | None] = [None] * len(specs)
    waiting: dict[object, list[tuple[int, _Prepared]]] = {}
    for i, (spec, _) in enumerate(specs):
        try:
            prepared = _prepare(spec)
        except ValueError as exc:
            results[i] = exc
            continue
        if prepared.hit is not None:
            results[i] = prepared.hit
            continue
        # one session per repository: its mount is where the session's unsharer starts
        waiting.setdefault(prepared.request["repo"], []).append((i, prepared))
    chunks = [group[start:start + SESSION_JOBS] for group in waiting.values()
              for start in range(0, len(group), SESSION_JOBS)]
    tally = _TALLY.get()

    def session(chunk: list[tuple[int, _Prepared]]) -> None:
        if tally is not None:
            tally()
        if len(chunk) == 1:
            prepared = chunk[0][1]
            answers: list[tuple[object, ...]] = [_exchange(prepared.request, prepared.spec.timeout + _GRACE_S + 5)]
        else:
            first = chunk[0][1].request
            request = {"jobs": [p.request for _, p in chunk], "cpu": first["cpu"], "repo": first["repo"],
                       "mapped": first["mapped"], "root_runs_as": first["root_runs_as"],
                       "deadline": sum(float(cast(float, p.request["deadline"])) for _, p in chunk)}
            answer = _exchange(request, float(cast(float, request["deadline"])) + 5)
            answers = cast(list[tuple[object, ...]], answer[1])
        for (i, prepared), one in zip(chunk, answers, strict=True):
            try:
                results[i] = _answered(prepared, one)
            except SandboxUnavailable as exc:
                results[i] = exc

    if len(chunks) <= 1:
        for chunk in chunks:
            session(chunk)
    else:
        # Sessions side by side (a run of one session waits for the run before it, as the process limit of their
        # shared user namespace requires): a render mostly waits for its bash.
        with ThreadPoolExecutor(max_workers=min(len(chunks), _SESSIONS_AT_ONCE), thread_name_prefix="fleetgate-session") as pool:
            list(pool.map(session, chunks))
    return [r if r is not None else ValueError("no result") for r in results]


_SESSIONS_AT_ONCE = 8


@cache
def _code_version() -> bytes:
    """The sandbox's own code (this module, the cache's, the parent's text): a run kept by another version is never
    used."""
    own = Path(__file__).read_bytes() + Path(__file__).with_name("render_cache.py").read_bytes()
    return hashlib.sha256(own + _parent_text().encode("utf-8")).digest()


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
