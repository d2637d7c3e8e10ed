"""``fleetgate reference``: runs the reference serve script for real, serves until told to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from fleetgate.reference import free_port

from .conftest import FLEET_DIR


def test_fleetgate_reference_serves_until_sigterm(engine: None, tmp_path: Path) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "fleetgate.cli",
        "reference",
        "--fleet",
        str(FLEET_DIR / "fleet.toml"),
        "--port",
        str(port),
        "--log",
        str(tmp_path / "llama-server.log"),
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # bounded by the command's own --wait (60 s)
        assert first.startswith(f"reference: http://127.0.0.1:{port} (pid "), first
        runs = process.stdout.readline()
        assert "llama-server --model " in runs and "--spec-type draft-simple" in runs
        assert f"--port {port}" in runs
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json() == {"status": "ok"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            except httpx.TransportError:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("llama-server still answers after fleetgate reference stopped")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
