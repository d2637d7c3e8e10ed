"""``fleetgate reference``: runs the reference serve script for real, serves until told to stop."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fleetgate.reference import free_port

from .conftest import FLEET_DIR, LIVE, expected_outcomes, junit_outcomes


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


def test_fleetgate_reference_then_its_suggested_gate_is_green(
    engine: None, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None
) -> None:
    """``fleetgate reference --port P``, then the command it suggests: every live and host check that applies
    passes. Nothing listens on the port the files declare (a copy declares a free one, so that no other
    reference on this machine's 8178 is taken for this one): the host checks find the engine where --base-url
    points, on this host, and allow its port as the one difference."""
    declared, port = free_port(), free_port()
    fleet_dir = tmp_path / "fleet"
    shutil.copytree(FLEET_DIR, fleet_dir)
    env = fleet_dir / "scripts" / "reference.env"
    text = env.read_text(encoding="utf-8")
    moved = text.replace("PORT=${REFERENCE_PORT:-8178}", f"PORT=${{REFERENCE_PORT:-{declared}}}")
    assert moved != text
    env.write_text(moved, encoding="utf-8")
    fleet_toml = fleet_dir / "fleet.toml"
    command = [sys.executable, "-m", "fleetgate.cli", "reference", "--fleet", str(fleet_toml), "--port", str(port),
               "--log", str(tmp_path / "llama-server.log")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]  # bounded by the command's own --wait (60 s)
        suggested = lines[2].strip()
        url = f"http://127.0.0.1:{port}"
        assert suggested == f"check it: pytest live/ --endpoint reference --base-url {url}", lines
        junit = tmp_path / "junit.xml"
        words = suggested.removeprefix("check it: pytest ").split()
        assert words[0] == "live/"
        result = pytester.runpytest_subprocess(str(LIVE), *words[1:], "--fleet", str(fleet_toml), "-p",
                                               "no:cacheprovider", f"--junitxml={junit}", timeout=300)
        assert junit_outcomes(junit) == expected_outcomes({}), result.stdout.str()
        result.assert_outcomes(passed=26, skipped=7)
        result.stdout.fnmatch_lines([f"*PASS host-process-argv*listens on port {port}, not the declared {declared} "
                                     "(--base-url)*"])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
