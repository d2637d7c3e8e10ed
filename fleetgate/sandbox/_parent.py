"""fleetgate's sandbox parent: one module because it runs from its own text and can import nothing of fleetgate.

fleetgate.sandbox starts this text once per process (python -I -S -c TEXT, argv[0] "fleetgate-sandbox", an empty
environment: no path of this machine in its argv or environment, which every render's PID 1 inherits) and hands it
one socket per sandboxed run. It is never imported, and after pivot_root no file of this machine is there to import
from: the manager, the unsharer and the init are one text.
"""

# Per run it forks: a manager (outside, on one CPU; it writes the user namespace's id maps and ends the run at
# its deadline), which forks the unsharer (fresh user, mount, UTS, network and PID namespaces), which forks the
# init: PID 1 of the new PID namespace. The init builds the run's root on a tmpfs of its own, pivots into it,
# and only then creates the paths the caller named; it runs the command without capabilities and with bounded
# processes and memory, kills every process of the namespace when the command ends, floods the process table
# or runs out of time, and sends back what the command left in /run/fleetgate/out. Nothing is written on this
# machine: the request arrives on the socket, the tmpfs dies with the namespace.
#
# Only modules imported here may be used: after pivot_root this machine's file system (and its Python
# library) is gone.
import ctypes
import gc
import marshal
import os
import select
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, NoReturn

Request = dict[str, Any]
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_LIBC.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_LIBC.unshare.argtypes = (ctypes.c_int,)
_LIBC.sethostname.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
_LIBC.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_LIBC.syscall.restype = ctypes.c_long
_LIBC.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41, "ppc64le": 203, "ppc64": 203,
               "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218, "armv8l": 218}.get(os.uname().machine)
_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91, "loongarch64": 91, "ppc64le": 184, "ppc64": 184,
           "s390x": 185, "i686": 185, "i386": 185, "armv7l": 185, "armv8l": 185}.get(os.uname().machine)
_CAPGET = {"x86_64": 125, "aarch64": 90, "riscv64": 90, "loongarch64": 90, "ppc64le": 183, "ppc64": 183,
           "s390x": 184, "i686": 184, "i386": 184, "armv7l": 184, "armv8l": 184}.get(os.uname().machine)

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWUSER = 0x00020000, 0x04000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 1024, 2048, 4096, 16384, 1 << 18
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
_TICK_S = 0.25


class SetupError(Exception):
    """The sandbox could not be built; the message says which step."""


def _b(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def _fail_errno(what: str) -> NoReturn:
    number = ctypes.get_errno()
    raise SetupError(f"{what}: {os.strerror(number)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _LIBC.mount(_b(source), _b(target), _b(fstype), flags, _b(data)) != 0:
        _fail_errno(f"mount {target}")


def try_mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
    return bool(_LIBC.mount(_b(source), _b(target), _b(fstype), flags, _b(data)) == 0)


def _locked_flags(path: str) -> int:
    """The flags of the mount at ``path`` that a remount in a user namespace must keep."""
    kept = os.statvfs(path).f_flag
    flags = 0
    for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                   (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)):
        if kept & st:
            flags |= ms
    if not kept & (os.ST_NOATIME | os.ST_RELATIME):
        flags |= MS_STRICTATIME
    return flags


def bind_ro(source: str, target: str, quiet: bool = False) -> bool:
    """``source`` read-only at ``target`` (a bind, then a read-only remount that keeps the locked flags)."""
    if _LIBC.mount(_b(source), _b(target), None, MS_BIND, None) != 0:
        if quiet:
            return False
        _fail_errno(f"bind {target}")
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(target)
    if _LIBC.mount(None, _b(target), None, flags, None) != 0:
        if quiet:
            _LIBC.umount2(_b(target), MNT_DETACH)
            return False
        _fail_errno(f"make {target} read-only")
    return True


def prctl(option: int, arg2: int = 0) -> None:
    if _LIBC.prctl(option, arg2, 0, 0, 0) != 0:
        _fail_errno(f"prctl {option}")


def _capset_inheritable_empty() -> None:
    header = struct.pack("Ii", 0x20080522, 0)
    data = ctypes.create_string_buffer(24)
    head = ctypes.create_string_buffer(header, 8)
    if _LIBC.syscall(_CAPGET, head, data) != 0:
        _fail_errno("capget")
    words = list(struct.unpack("6I", data.raw))
    words[2] = words[5] = 0  # inheritable, both halves
    data = ctypes.create_string_buffer(struct.pack("6I", *words), 24)
    if _LIBC.syscall(_CAPSET, head, data) != 0:
        _fail_errno("capset")


def _write(path: str, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _quiet(call: Callable[..., object], *args: object) -> bool:
    try:
        call(*args)
        return True
    except OSError:
        return False


def _frame(sock: socket.socket, value: tuple[Any, ...]) -> None:
    data = marshal.dumps(value)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = sock.recv(min(count, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


# --- The init: PID 1 of the run's namespaces. ------------------------------------------------------------------

def _layout(req: Request, root: str) -> None:
    """Before pivot_root: fixed paths of the new root, this machine's programs and devices read-only, the
    repository at fixed staging paths, a proc of this PID namespace, the host basics and the caller's files."""
    mount("fleetgate", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={req['size']},mode=0755")
    for path in ("usr", "etc", "dev", "proc", ".old", ".fg", ".fg/blob", ".fg-repo", ".usr-upper/u", ".usr-upper/w",
                 "run/fleetgate/out"):
        os.makedirs(f"{root}/{path}", exist_ok=True)
    for path in req["rodirs"]:
        os.makedirs(f"{root}{path}", exist_ok=True)
    bind_ro("/usr", f"{root}/usr")
    for path in req["rodirs"]:
        bind_ro(path, f"{root}{path}")
    for name in ("null", "zero", "full", "random", "urandom"):
        if os.path.exists(f"/dev/{name}"):
            _write(f"{root}/dev/{name}", b"")
            bind_ro(f"/dev/{name}", f"{root}/dev/{name}")
    for i, (host, _) in enumerate(req["ro"]):
        os.mkdir(f"{root}/.fg-repo/{i}")
        # "." is the working directory this process was started in, bound without walking the path to it (it
        # binds where only its owner may enter the directories above it).
        bind_ro(host, f"{root}/.fg-repo/{i}")
    # A proc of this PID namespace only, and of its processes only (subset=pid); before Linux 5.8 a whole one
    # with /proc/sys and /proc/sysrq-trigger read-only; where the machine forbids it, none at all.
    proc = f"{root}/proc"
    if (not try_mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid")
            and try_mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)):
        bind_ro(f"{proc}/sys", f"{proc}/sys")
        bind_ro(f"{proc}/sysrq-trigger", f"{proc}/sysrq-trigger")
    # What programs need to start (the links to /usr, /dev/fd, the alternatives links, the loader's cache) and
    # the caller's files under /run/fleetgate, the stubs' contents under /.fg/blob.
    for link in req["links_root"]:
        os.symlink(link, f"{root}/{link.rstrip('/').rsplit('/', 1)[-1]}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    # This machine's update-alternatives links (hundreds: bound, not copied) and loader's cache, read-only.
    if os.path.isdir("/etc/alternatives"):
        os.mkdir(f"{root}/etc/alternatives")
        bind_ro("/etc/alternatives", f"{root}/etc/alternatives")
    if os.path.isfile("/etc/ld.so.cache"):
        _write(f"{root}/etc/ld.so.cache", b"")
        bind_ro("/etc/ld.so.cache", f"{root}/etc/ld.so.cache")
    for relative, content in req["files"]:
        path = f"{root}/run/fleetgate/{relative}"
        os.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        _write(path, content, 0o755)
        os.chmod(path, 0o755)
    for relative, target in req["links"]:
        path = f"{root}/run/fleetgate/{relative}"
        os.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        os.symlink(target, path)
    for name, content in req["blobs"]:
        _write(f"{root}/.fg/blob/{name}", content, 0o755)
        os.chmod(f"{root}/.fg/blob/{name}", 0o755)
    if req["stdin"] is not None:
        _write(f"{root}/run/fleetgate/stdin", req["stdin"])
    # A host name of its own (UTS namespace): not this machine's.
    hostname = os.fsencode(req["hostname"])
    _LIBC.sethostname(hostname, len(hostname))


def _after_pivot(req: Request) -> bool:
    """After pivot_root: only the sandbox's own tree is reachable. The fleet's directories, placeholders,
    repository mount points and stubs."""
    dirs, puts = req["dirs"], req["puts"]
    # The directories of /usr the caller writes into are made in the overlay's upper layer first: a merged
    # directory takes the upper one's owner, so uid 0 here may create files in it.
    for path in dirs:
        if path.startswith("/usr/"):
            _quiet(os.makedirs, f"/.usr-upper/u/{path[5:]}", 0o777, True)
    try_mount("overlay", "/usr", "overlay", 0, "lowerdir=/usr,upperdir=/.usr-upper/u,workdir=/.usr-upper/w")
    for path in dirs:
        _quiet(os.makedirs, path, 0o777, True)
    for path in req["empty"]:
        if not os.path.exists(path):
            _quiet(lambda p: os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)), path)
    # A directory or stub asked for under a repository mount point that the repository does not hold goes into a
    # layer of the tmpfs (/.fg-layer/N, holding nothing else), and that mount point becomes a read-only overlay of
    # the layer over the repository; where nothing is layered (or the kernel refuses), the plain read-only bind.
    blobs = {}
    layered = False
    for i, (_, where) in enumerate(req["ro"]):
        layer, made = f"/.fg-layer/{i}", False
        if not os.path.isdir(where):
            raise SetupError(f"cannot make the mount point {where}")
        staged = f"/.fg-repo/{i}"
        for path in dirs:
            if path.startswith(where + "/"):
                relative = path[len(where) + 1:]
                if not os.path.lexists(f"{staged}/{relative}"):
                    made = _quiet(os.makedirs, f"{layer}/{relative}", 0o777, True) or made
        for name, target in puts:
            if target.startswith(where + "/"):
                relative = target[len(where) + 1:]
                if not os.path.lexists(f"{staged}/{relative}"):
                    if "/" in relative:
                        _quiet(os.makedirs, f"{layer}/{relative.rsplit('/', 1)[0]}", 0o777, True)
                    if name not in blobs:
                        blobs[name] = _read_blob(name)
                    if _quiet(_write, f"{layer}/{relative}", blobs[name], 0o755) and _quiet(os.chmod, f"{layer}/{relative}", 0o755):
                        made = True
        if made and try_mount("overlay", where, "overlay", MS_RDONLY, f"lowerdir={layer}:{staged}"):
            layered = True
            continue
        bind_ro(staged, where)
    # Stubs (every directory the engine could be started from); where a file is already there, bound over it
    # read-only.
    made_stubs, binds = [], []
    for name, target in puts:
        source = f"/.fg/blob/{name}"
        if os.path.exists(target):
            if os.path.isfile(target):
                binds.append((source, target))
            continue
        if name not in blobs:
            blobs[name] = _read_blob(name)
        if _quiet(_write, target, blobs[name], 0o666):
            made_stubs.append(target)
    for target in made_stubs:
        _quiet(os.chmod, target, 0o755)
    for source, target in binds:
        bind_ro(source, target, quiet=True)
    return layered


IN_OPEN, IN_Q_OVERFLOW, IN_NONBLOCK, IN_CLOEXEC = 0x20, 0x4000, 0o4000, 0o2000000


def _watch(req: Request) -> tuple[int, dict[int, str]] | None:
    """For the caller's render cache: an inotify watch on every directory of the repository (its staging path),
    so that the files the command opens there are known. None where that cannot be seen whole."""
    if not req["ro"] or any(host != req["ro"][0][0] for host, _ in req["ro"]):
        return None
    fd = _LIBC.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        return None
    watches: dict[int, str] = {}
    for directory, _, _ in os.walk("/.fg-repo/0"):
        wd = _LIBC.inotify_add_watch(fd, os.fsencode(directory), IN_OPEN)
        if wd < 0:
            os.close(fd)
            return None
        watches[wd] = directory[len("/.fg-repo/0"):].lstrip("/")
    return fd, watches


def _opened(watch: tuple[int, dict[int, str]]) -> list[str] | None:
    """The repository's files the command opened (relative paths), or None if the queue overflowed."""
    fd, watches = watch
    found: set[str] = set()
    try:
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset + 16 <= len(data):
                wd, mask, _, size = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16:offset + 16 + size].split(b"\0", 1)[0]
                offset += 16 + size
                if mask & IN_Q_OVERFLOW or wd not in watches:
                    return None
                if name:
                    base = watches[wd]
                    found.add(f"{base}/{os.fsdecode(name)}" if base else os.fsdecode(name))
    finally:
        os.close(fd)
    return sorted(found)


def _read_blob(name: str) -> bytes:
    with open(f"/.fg/blob/{name}", "rb") as blob:
        return blob.read().split(b"\0", 1)[0]


def _spawn_command(req: Request) -> int:
    """The command: no capability but what the caller keeps, no privilege gain, bounded processes and address
    space, an environment of exactly what the caller passed, its output in /run/fleetgate/out. The init takes the
    bounds and drops the capabilities itself (it needs neither again), then spawns the command (posix_spawn: no
    copy of this interpreter). Returns its pid, or None when no program could be started (its exit is 126/127)."""
    if not _quiet(os.chdir, req["cwd"]):
        os.chdir("/")
    _RESOURCE.setrlimit(_RESOURCE.RLIMIT_NPROC, (req["nproc"], req["nproc"]))
    _RESOURCE.setrlimit(_RESOURCE.RLIMIT_AS, (req["mem"] << 10, req["mem"] << 10))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    keep = (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) if req["mapped"] else ()
    for cap in range(req["cap_last"] + 1):
        if cap not in keep:
            prctl(PR_CAPBSET_DROP, cap)
    _LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # fails only where there are none (< 4.3)
    _capset_inheritable_empty()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    fds = (os.open("/run/fleetgate/stdin" if req["stdin"] is not None else "/dev/null", os.O_RDONLY | os.O_CLOEXEC),
           os.open("/run/fleetgate/out/stdout", flags, 0o666), os.open("/run/fleetgate/out/stderr", flags, 0o666))
    env = dict(item.split("=", 1) if "=" in item else (item, "") for item in req["env"])
    command = req["command"]
    program = command[0]
    candidates = [program] if "/" in program else [f"{d or '.'}/{program}" for d in env.get("PATH", "/bin:/usr/bin").split(":")]
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)]
    error = 2
    try:
        for candidate in candidates:
            try:
                return os.posix_spawn(candidate, command, env, file_actions=actions, setsigmask=(),
                                      setsigdef=_DEFAULT_SIGNALS)
            except OSError as exc:
                error = exc.errno or error
        os.write(fds[2], f"env: '{program}': {os.strerror(error)}\n".encode("utf-8", "surrogateescape"))
        return 126 if error == 13 else 127
    finally:
        for fd in fds:
            os.close(fd)


_DEFAULT_SIGNALS = tuple(s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP))


def _can_fork() -> bool:
    """Can a process under the limit still fork? The init runs under the command's process limit: one fork,
    without retrying."""
    try:
        probe = os.fork()
    except OSError:
        return False
    if probe == 0:
        os._exit(0)
    os.waitpid(probe, 0)
    return True


def _reap(command: int, status: int | None) -> int | None:
    """Reap every exited child (orphans come to PID 1); the command's status once it has one."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == command:
            status = code


def _init(req: Request, sock: socket.socket, root: str) -> None:
    try:
        _layout(req, root)
        os.chdir(root)
        if _LIBC.syscall(_PIVOT_ROOT, b".", b".old") != 0:
            _fail_errno("pivot_root")
        os.chdir("/")
        if _LIBC.umount2(b"/.old", MNT_DETACH) != 0:
            _fail_errno("cannot detach this machine's root")
        layered = _after_pivot(req)
        watch = _watch(req) if req["track"] and not layered else None
    except (SetupError, OSError) as exc:
        _frame(sock, ("error", str(exc)))
        return
    if not req["command"]:  # the probe: the sandbox can be made
        _frame(sock, ("done", 0, False, False, False, {}, None))
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    status, timed_out, flooded = None, False, False
    try:
        command = _spawn_command(req)
    except (SetupError, OSError):
        command, status = 0, 71 << 8  # the bounds could not be set (the shell's `ulimit ... || exit 71`)
    if command in (126, 127) and status is None:
        command, status = 0, command << 8
    ticks, tick = req["ticks"], 0
    next_tick = _monotonic() + _TICK_S
    while True:
        status = _reap(command, status)
        if status is not None:
            break
        remaining = next_tick - _monotonic()
        if remaining > 0:
            signal.sigtimedwait({signal.SIGCHLD}, remaining)
            continue
        tick += 1
        next_tick += _TICK_S
        if flooded or timed_out:
            continue
        if not _can_fork():
            flooded = True
            _quiet(os.kill, -1, signal.SIGKILL)
        elif tick >= ticks:
            timed_out = True
            _quiet(os.kill, -1, signal.SIGKILL)
    rc = os.waitstatus_to_exitcode(status)
    rc = 128 - rc if rc < 0 else rc
    # A full scratch: 64 KiB no longer fit.
    full = not _quiet(_write, "/.fg/probe", b" " * 65536)
    _quiet(_write, "/.fg/probe", b"")
    # Every process of the namespace but this one: background children, daemons.
    _quiet(os.kill, -1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    files = {}
    limit = req["limit"]
    try:
        entries = list(os.scandir("/run/fleetgate/out"))
    except OSError:
        entries = []
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                if size > limit:
                    os.lseek(fd, size - limit, os.SEEK_SET)
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                files[entry.name] = b"".join(chunks)[-limit:]
            finally:
                os.close(fd)
        except OSError:
            continue
    opened = _opened(watch) if watch is not None else None
    _frame(sock, ("done", rc, timed_out, flooded, full, files, opened))


def _monotonic() -> float:
    return _TIME.monotonic()


# --- Outside: the manager and the unsharer. --------------------------------------------------------------------

def _unsharer(req: Request, sock: socket.socket, ready_w: int, mapped_r: int) -> NoReturn:
    """Fresh namespaces, mapped by the parent; then the init, PID 1 of the new PID namespace. A session (``jobs``)
    makes the user, UTS and network namespaces once, and each job a mount and PID namespace and an init of its own."""
    if req["cpu"] is not None:
        _quiet(os.sched_setaffinity, 0, {req["cpu"]})
    if req["repo"] is not None:
        os.chdir(req["repo"])  # before unshare: the working directory follows into the new mount namespace
    jobs = req.get("jobs")
    flags = CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWNET
    if jobs is None:
        flags |= CLONE_NEWNS | CLONE_NEWPID
    if _LIBC.unshare(flags) != 0:
        number = ctypes.get_errno()
        _frame(sock, ("error", f"unshare failed: {os.strerror(number)}"))
        os._exit(0)
    os.write(ready_w, b"u")
    os.close(ready_w)
    if os.read(mapped_r, 1) != b"m":
        _frame(sock, ("error", "the user namespace could not be mapped"))
        os._exit(0)
    os.close(mapped_r)
    if req["mapped"]:
        # When fleetgate runs as root, uid 0 here is an unprivileged host user and the host's root is uid 1 here:
        # become uid 0 here at once, without supplementary groups.
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(0)
    if jobs is None:
        init = _fork_init(req, sock)
        sock.close()
        os.waitpid(init, 0)
        os._exit(0)
    for job in jobs:
        # One job at a time, each in a process of its own: its mount and PID namespaces (and so its tmpfs, its
        # processes and its init) end with it, and the next job starts from this process's clean state.
        child = os.fork()
        if child == 0:
            try:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if _LIBC.unshare(CLONE_NEWNS | CLONE_NEWPID) != 0:
                    _fail_errno("unshare a job's mount and PID namespaces")
                init = _fork_init(job, sock)
                _frame(sock, ("job-end", _wait_for(init, job["deadline"])))
            except BaseException as exc:
                _quiet(_frame, sock, ("error", f"{type(exc).__name__}: {exc}"))
                _quiet(_frame, sock, ("job-end", False))
            os._exit(0)
        os.waitpid(child, 0)
    sock.close()
    os._exit(0)


def _fork_init(req: Request, sock: socket.socket) -> int:
    """The init of one run (PID 1 of the PID namespace this process made); its pid."""
    init = os.fork()
    if init == 0:
        try:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            prctl(PR_SET_DUMPABLE, 0)
            # The run's root is mounted over a directory of this machine, in this mount namespace only.
            mount(None, "/", None, MS_REC | MS_PRIVATE)
            _init(req, sock, req["mnt"])
        except SetupError as exc:
            _frame(sock, ("error", str(exc)))
        except BaseException as exc:
            _quiet(_frame, sock, ("error", f"{type(exc).__name__}: {exc}"))
        os._exit(0)
    return init


def _wait_for(init: int, deadline: float) -> bool:
    """Wait for a job's init; killed (and with it its PID namespace) at the job's deadline. Whether it was killed."""
    fd = os.pidfd_open(init)
    try:
        ended, _, _ = select.select([fd], [], [], deadline)
    finally:
        os.close(fd)
    if not ended:
        _quiet(os.kill, init, signal.SIGKILL)
    os.waitpid(init, 0)
    return not ended


def _start(req: Request, sock: socket.socket, control: socket.socket) -> int:
    """Fork the run's unsharer and write its user namespace's id maps; its pid."""
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            control.close()
            os.close(ready_r)
            os.close(mapped_w)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            _unsharer(req, sock, ready_w, mapped_r)
        except BaseException as exc:
            _quiet(_frame, sock, ("error", f"{type(exc).__name__}: {exc}"))
        os._exit(0)
    os.close(ready_w)
    os.close(mapped_r)
    if os.read(ready_r, 1) == b"u":
        try:
            uid, gid = os.geteuid(), os.getegid()
            if uid == 0:
                # root may write any map: uid 0 inside -> an unprivileged host user, uid 1 inside -> root.
                uid_map = gid_map = f"0 {req['root_runs_as']} 1\n1 0 1\n"
            else:
                _write(f"/proc/{child}/setgroups", b"deny")
                uid_map, gid_map = f"0 {uid} 1\n", f"0 {gid} 1\n"
            _write(f"/proc/{child}/uid_map", uid_map.encode())
            _write(f"/proc/{child}/gid_map", gid_map.encode())
            os.write(mapped_w, b"m")
        except OSError as exc:
            _quiet(_frame, sock, ("error", f"cannot map the user namespace: {exc.strerror}"))
    os.close(mapped_w)
    os.close(ready_r)
    return child


def _serve(control: socket.socket) -> None:
    """Start a run for every socket the client sends, end each at its deadline, and wait for every one (so that
    the CPU time of each run adds up in this process, and in its owner once the owner waits for it). Ends when
    the client goes."""
    runs: dict[int, list[Any]] = {}  # pid -> [socket, deadline, killed]
    open_ = True
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    while open_ or runs:
        now = _monotonic()
        for pid, run in runs.items():
            if not run[2] and run[1] <= now:
                run[2] = True  # its init follows (its parent-death signal), then the whole namespace
                _quiet(os.kill, pid, signal.SIGKILL)
        while runs:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in runs:
                ended = runs.pop(pid)
                _quiet(_frame, ended[0], ("end", ended[2]))
                ended[0].close()
        wait = min((run[1] for run in runs.values() if not run[2]), default=now + 60) - now
        if not open_:
            select.select([wake_r], [], [], max(0.0, min(wait, 0.5)))
            _quiet(os.read, wake_r, 4096)
            continue
        readable, _, _ = select.select([control.fileno(), wake_r], [], [], max(0.0, min(wait, 60)))
        if wake_r in readable:
            _quiet(os.read, wake_r, 4096)
        if control.fileno() not in readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 64, 4)
        except OSError:
            message = b""
        if not message:
            open_ = False
            continue
        for fd in fds:
            sock = socket.socket(fileno=fd)
            sock.set_inheritable(False)
            try:
                sock.setblocking(True)
                size = struct.unpack("!Q", _read_exactly(sock, 8))[0]
                req = marshal.loads(_read_exactly(sock, size))
                runs[_start(req, sock, control)] = [sock, _monotonic() + req["deadline"], False]
            except (OSError, EOFError, ValueError) as exc:
                _quiet(_frame, sock, ("error", f"{type(exc).__name__}: {exc}"))
                sock.close()


import resource as _RESOURCE  # noqa: E402
import time as _TIME  # noqa: E402

if __name__ == "__main__":
    # argv: -c OWNER-PID CONTROL-FD. The parent ends with its owner.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir("/")
    # Every run is a fork of this process: no collector walking (and so copying) the heap in them.
    gc.disable()
    gc.freeze()
    if os.getppid() != int(sys.argv[1]):
        os._exit(0)
    _control = socket.socket(fileno=int(sys.argv[2]))
    _control.set_inheritable(False)
    _serve(_control)
    os._exit(0)
