"""The host checks' own tests: the real reference llama-server, and real processes started wrong."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetgate.gate import run_gate
from fleetgate.manifest import load_fleet
from fleetgate.reference import (
    ReferenceError,
    free_port,
    llama_bin_dir,
    model_dir,
    render_overrides,
    render_reference,
    start,
)
from tests.live.conftest import GATE_ORDER

REPO = Path(__file__).resolve().parents[2]
FLEET_DIR = REPO / "fixtures" / "fleet"
HOST_TESTS = REPO / "live" / "test_host.py"
_LINE = re.compile(r"^\s+(PASS|FAIL|SKIPPED)\s+(host-[a-z-]+)\s+(.*)$")


@pytest.fixture(scope="session")
def engine() -> None:
    try:
        llama_bin_dir()
        model_dir()
    except ReferenceError as exc:
        pytest.fail(f"the host checks' tests need the real engine: {exc}", pytrace=False)


def fleet_copy(target: Path, port: int, edits: Mapping[str, Callable[[str], str]] = {}) -> Path:
    """The example fleet with the reference on ``port`` (and more edits); returns the copy's fleet.toml."""
    shutil.copytree(FLEET_DIR, target)
    env = target / "scripts" / "reference.env"
    text = env.read_text(encoding="utf-8")
    env.write_text(re.sub(r"(?m)^PORT=.*$", f"PORT={port}", text), encoding="utf-8")
    for relative, edit in edits.items():
        path = target / relative
        before = path.read_text(encoding="utf-8")
        after = edit(before)
        assert after != before, f"the edit of {relative} changed nothing"
        path.write_text(after, encoding="utf-8")
    return target / "fleet.toml"


def healthy(port: int) -> bool:
    """GET /health answers 200 (urllib: plain sockets, nothing cached between pytester runs)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


UNIT = "reference.service"


def unit_text(fleet_dir: Path) -> str:
    return f"""[Unit]
Description=fleetgate reference under a real systemd
DefaultDependencies=no

[Service]
User=nobody
Environment=PATH={llama_bin_dir()}:/usr/bin:/bin
Environment=REFERENCE_MODELS={model_dir()}
ExecStart={fleet_dir}/scripts/serve-reference.sh
Restart=on-failure
RestartSec=200ms
LimitMEMLOCK=infinity

[Install]
WantedBy=multi-user.target
"""



def unit_fleet_copy(fleet_dir: Path, port: int) -> tuple[Path, str]:
    """The example fleet with the reference as a systemd unit (scripts/reference.service): deploy_root is the
    copy itself, so the unit's ExecStart= and the render name the same script. Returns (fleet.toml, unit)."""
    model = str(model_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf")

    def manifest(text: str) -> str:
        text = re.sub(r'deploy_root = ".*"', f'deploy_root = "{fleet_dir}"', text)
        return text.replace('payload = ["/opt/fleetgate/models/SmolLM2-135M-Instruct.Q4_1.gguf"]',
                            f'unit = "scripts/{UNIT}"\npayload = ["{model}"]')

    fleet_toml = fleet_copy(fleet_dir, port, {"fleet.toml": manifest})
    text = unit_text(fleet_dir)
    (fleet_dir / "scripts" / UNIT).write_text(text, encoding="utf-8")
    return fleet_toml, text


@dataclass
class HostGate:
    checks: dict[str, tuple[str, str]]
    """check -> (PASS, FAIL or SKIPPED, the summary's note)."""
    output: str
    result: pytest.RunResult | None = None
    """The plugin's run (``run_host_gate_plugin``); None for a run in this process."""

    @property
    def plugin_result(self) -> pytest.RunResult:
        assert self.result is not None, "a run in this process has no pytest result: use run_host_gate_plugin"
        return self.result

    def outcomes(self) -> dict[str, str]:
        """check -> PASS / SKIPPED / the failure code."""
        return {name: (note.split(":", 1)[0] if word == "FAIL" else word) for name, (word, note) in self.checks.items()}


# The host checks in the order pytest runs live/test_host.py.
HOST_ORDER = [name for name in GATE_ORDER if name.startswith("host-")]


def run_host_gate(fleet_toml: Path, *, only: Iterable[str] | None = None, base_url: str | None = None,
                  host_url: str | None = None, endpoint: str = "reference") -> HostGate:
    """The host checks (every one of live/test_host.py, else ``only`` of them) on ``endpoint``'s host, in this process
    (``fleetgate.gate.run_gate``), with the render this machine gives the reference (the root conftest.py's)."""
    wanted = set(only) if only is not None else set(HOST_ORDER)
    assert wanted <= set(HOST_ORDER), wanted - set(HOST_ORDER)
    run = run_gate(load_fleet(fleet_toml), endpoint, [c for c in HOST_ORDER if c in wanted], base_url=base_url,
                   host_spec=host_url, local=render_overrides())
    return HostGate(run.checks, run.text())


def run_host_gate_plugin(pytester: pytest.Pytester, fleet_toml: Path, *args: str, endpoint: str = "reference") -> HostGate:
    """The host checks through the plugin: ``pytest live/test_host.py --endpoint ENDPOINT`` in a subprocess."""
    # fleetgate supplies live/test_host.py (not on disk): its directory, and the module by name
    result = pytester.runpytest_subprocess(str(HOST_TESTS.parent), "-k", HOST_TESTS.name, "--endpoint", endpoint,
                                           "--fleet", str(fleet_toml),
                                           "-p", "no:cacheprovider", *args, timeout=120)
    checks = {}
    for line in result.stdout.lines:
        match = _LINE.match(line)
        if match:
            checks[match.group(2)] = (match.group(1), match.group(3))
    return HostGate(checks, result.stdout.str() + result.stderr.str(), result)


@dataclass
class Process:
    process: subprocess.Popen[bytes]
    port: int

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _wait_healthy(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"llama-server exited {process.returncode}: {log.read_text(errors='replace')[-800:]}")
        if healthy(port):
            return
        time.sleep(0.1)
    raise AssertionError(f"llama-server not healthy in 60 s: {log.read_text(errors='replace')[-800:]}")


@pytest.fixture
def processes(engine: None, tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start a real llama-server: the reference's rendered argv (edited), with an environment of the test's choosing."""
    started: list[Process] = []

    def run(fleet_toml: Path, *, edit: Callable[[list[str]], list[str]] = list, env: Mapping[str, str] = {},
            binary: Path | None = None) -> Process:
        fleet = load_fleet(fleet_toml)
        rendered = render_reference(fleet)
        argv: Sequence[str] = edit(list(rendered.argv))
        port = int(argv[list(argv).index("--port") + 1])
        log = tmp_path / f"llama-server-{len(started)}.log"
        base = {"PATH": f"{llama_bin_dir()}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
        with log.open("wb") as out:
            process = subprocess.Popen([str(binary or llama_bin_dir() / argv[0]), *argv[1:]], env={**base, **env},
                                       stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        handle = Process(process, port)
        started.append(handle)
        _wait_healthy(process, port, log)
        return handle

    yield run
    for handle in started:
        handle.stop()


@pytest.fixture
def reference_on(engine: None, tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """Run a fleet copy's reference serve script for real (fleetgate.reference.start)."""
    servers = []

    def run(fleet_toml: Path) -> None:
        servers.append(start(load_fleet(fleet_toml), log=tmp_path / f"reference-{len(servers)}.log"))

    yield run
    for server in servers:
        server.stop()


@pytest.fixture
def port() -> int:
    return free_port()
