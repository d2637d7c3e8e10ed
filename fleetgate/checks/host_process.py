"""Host checks on the engine's running process (INC-53, B-DV-1..3, B-UN-3, INC-01).

The process is systemd's MainPID of the unit, or for a service without a unit the process that listens on
the service's port. What it runs is read from ``/proc`` through testinfra and compared with the rendered
config: the files declare what the process must be, the host says what it is.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from fleetgate.checks import check
from fleetgate.failure import Failure
from fleetgate.host import HostReadError, HostTarget, runpath

__all__: list[str] = []

ARGV = "host-process-argv"
ENV = "host-process-env"
LIBS = "host-runtime-libs"
_SYSTEM_LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib32", "/usr/lib32")


@dataclass(frozen=True)
class _Process:
    pid: int
    how: str
    cmdline: tuple[str, ...] = ()
    environ: tuple[str, ...] = ()
    exe: str = ""
    maps: str = ""


def _process(target: HostTarget, name: str, *, cmdline: bool = False, environ: bool = False,
             libraries: bool = False) -> _Process:
    """The engine's process and what the check reads of it; any read the host refuses is one failure."""
    __tracebackhide__ = True
    try:
        pid, how = target.main_pid()
        if pid is not None:
            return _Process(
                pid, how,
                cmdline=target.proc_words(pid, "cmdline") if cmdline else (),
                environ=target.proc_words(pid, "environ") if environ else (),
                exe=target.executable(pid) if libraries else "",
                maps=target.proc_text(pid, "maps") if libraries else "",
            )
    except HostReadError as exc:
        raise Failure(service=target.name, check=name, code=f"{name}/process-unreadable", where=target.spec,
                      observed=str(exc), expected=f"{target.name}'s engine process, read through systemctl and /proc",
                      fix="run the check as root on the host (testinfra's --sudo), where systemctl reaches the manager") from None
    raise Failure(service=target.name, check=name, code=f"{name}/no-process", where=f"{target.spec} {how}",
                  observed=f"no process found as {how}",
                  expected=f"{target.name}'s engine running on {target.spec}",
                  fix="start the service (or point --host-url at the host it runs on)")


@check(ARGV, kind="host", subject="host", cites=("INC-53", "C-ID-1", "C-ID-2"),
       summary="/proc/<MainPID>/cmdline is exactly the argv the files render")
def host_process_argv(target: HostTarget) -> None:
    process = _process(target, ARGV, cmdline=True)
    pid, running = process.pid, process.cmdline
    rendered = target.config.rendered.argv
    seen = (running[0].rsplit("/", 1)[-1], *running[1:]) if running else ()
    if seen != rendered:
        extra = [w for w in seen if w not in rendered]
        missing = [w for w in rendered if w not in seen]
        raise Failure(service=target.name, check=ARGV, code=f"{ARGV}/argv-differs",
                      where=f"{target.spec} /proc/{pid}/cmdline",
                      observed=f"PID {pid} runs {shlex.join(running)}",
                      details=[f"not rendered: {shlex.join(extra)}" if extra else "not rendered: (none)",
                               f"rendered, not running: {shlex.join(missing)}" if missing else "rendered, not running: (none)"],
                      expected=f"{shlex.join(rendered)} (rendered from {target.config.rendered.script.name})",
                      fix=("the process is not what the files declare: find what started it (a drop-in, a hand start, "
                           "a stale unit) and restart the service from the repository"))


def _visibility(names: object) -> bool:
    return isinstance(names, str) and names.endswith("_VISIBLE_DEVICES")


@check(ENV, kind="host", subject="host", cites=("B-DV-1", "B-DV-2", "B-DV-3", "INC-19", "INC-29"),
       summary="the process environment carries exactly the device-visibility variables the files declare")
def host_process_env(target: HostTarget) -> None:
    process = _process(target, ENV, environ=True)
    pid = process.pid
    environ = dict(word.partition("=")[::2] for word in process.environ)
    declared = {k: v for k, v in target.config.rendered.env.items() if _visibility(k)}
    running = {k: v for k, v in environ.items() if _visibility(k)}
    where = f"{target.spec} /proc/{pid}/environ"
    for name, value in declared.items():
        if running.get(name) != value:
            raise Failure(service=target.name, check=ENV, code=f"{ENV}/visibility-differs", where=where,
                          observed=f"{name}={running[name]}" if name in running else f"no {name} in the process environment",
                          expected=f"{name}={value} ({target.config.where_variable(name)})",
                          fix="the engine sees other cards than the files say: restart it from the unit")
    undeclared = sorted(set(running) - set(declared))
    if undeclared:
        raise Failure(service=target.name, check=ENV, code=f"{ENV}/undeclared-visibility", where=where,
                      observed=", ".join(f"{n}={running[n]}" for n in undeclared),
                      expected=("only " + ", ".join(f"{k}={v}" for k, v in declared.items())) if declared
                      else "no device-visibility variable (the files set none)",
                      fix="a variable the repository does not set reached the engine: find the drop-in or shell that set it")


@check(LIBS, kind="host", subject="host", cites=("B-UN-3", "INC-01", "C-H-9"),
       summary="bundled runtime libraries are loaded from the depth the binary's RUNPATH names ($ORIGIN/...)")
def host_runtime_libs(target: HostTarget) -> None:
    process = _process(target, LIBS, libraries=True)
    pid, binary = process.pid, process.exe
    result = target.host.run(f"readelf -d {shlex.quote(str(binary))}")
    if result.rc != 0:
        raise Failure(service=target.name, check=LIBS, code=f"{LIBS}/readelf-failed", where=f"{target.spec} readelf -d {binary}",
                      observed=f"readelf exited {result.rc}: {result.stderr.strip()[:200]}",
                      expected="the binary's dynamic section", fix="install binutils on the host")
    needed, paths = runpath(result.stdout)
    origin = str(binary).rsplit("/", 1)[0]
    expected_dirs = {p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin).rstrip("/") for p in paths}
    expected_dirs = {_normal(d) for d in expected_dirs}
    loaded: dict[str, str] = {}
    for line in process.maps.splitlines():
        words = line.split()
        if len(words) >= 6 and words[5].startswith("/"):
            name = words[5].rsplit("/", 1)[-1]
            loaded.setdefault(name, words[5])
    for lib in needed:
        path = loaded.get(lib)
        if path is None or path.startswith(tuple(d + "/" for d in _SYSTEM_LIB_DIRS)):
            continue
        directory = path.rsplit("/", 1)[0]
        if _normal(directory) not in expected_dirs:
            raise Failure(service=target.name, check=LIBS, code=f"{LIBS}/not-at-depth", where=f"{target.spec} /proc/{pid}/maps",
                          observed=f"{lib} is loaded from {directory}",
                          expected=(f"the bundled copy at the binary's RUNPATH: {', '.join(sorted(expected_dirs))}"
                                    if expected_dirs else f"{binary} to carry a RUNPATH ($ORIGIN/...) for its bundled libraries"),
                          fix=("copy the build's lib directory with its structure (cp -r SRC/. DST/, never into a missing "
                               "DST): the loader and rocBLAS/hipBLASLt look at a fixed depth under the binary"))
        if lib.startswith("librocblas"):
            tensile = f"{directory}/rocblas/library/TensileLibrary.dat"
            if not target.host.file(tensile).exists:
                raise Failure(service=target.name, check=LIBS, code=f"{LIBS}/tensile-missing", where=f"{target.spec} {tensile}",
                              observed=f"{tensile} does not exist: the first request dies in rocBLAS after /health is green",
                              expected="rocBLAS's device code at rocblas/library/ under the bundled lib directory",
                              fix="copy rocblas/library/ (and hipblaslt/library/) to the depth the loader expects")


def _normal(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)
