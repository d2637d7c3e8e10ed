"""An installed wheel and a fleet's repository are all a fleet needs: the plugin supplies the seams' and the live gate's
test modules (fleetgate/plugin/_modules.py), with the node ids and outcomes of the checkout's run (issue 31).

The fleet is what a new user has: a copy of a fixture fleet without its fleet.toml, which the wheel's own ``fleetgate
init`` writes; the one hand edit is the host's RAM and cards (tests/test_init.py's), and the run is the command init
printed, as printed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.test_init import HOSTS, NAMES, _declare_host

REPO = Path(__file__).resolve().parents[1]
NAME = "unit-script"
FLEET = REPO / "fixtures" / "fleets" / NAME
SERVICE = NAMES[NAME]
"""What init names the fleet's one service."""


def _env(path: Path) -> dict[str, str]:
    """fleetgate from ``path`` only; the test environment's own entries (its dependencies) stay."""
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), *kept])}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(cwd: Path, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=_env(path),
                          capture_output=True, text=True, timeout=300, check=False)


def _outcomes(junit: Path) -> dict[str, str]:
    table: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        table[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    return table


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fleetgate's wheel, built from this checkout and installed alone into a directory of its own."""
    where = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(where / "dist"), str(REPO)], capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stderr
    (wheel,) = (where / "dist").glob("fleetgate-*.whl")
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(where / "site"),
                              str(wheel)], capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stderr
    return where / "site"


@pytest.fixture(scope="module")
def initialised(site: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A fleet's repository whose fleet.toml the wheel's ``fleetgate init`` wrote, its host declared by hand; and the
    command init printed to run it."""
    fleet = tmp_path_factory.mktemp("repository") / NAME
    shutil.copytree(FLEET, fleet, ignore=shutil.ignore_patterns("__pycache__", "expected*", "fleet.toml"))
    command = site / "bin" / "fleetgate"
    init = subprocess.run([str(command), "init", str(fleet)], cwd=fleet.parent, env=_env(site), capture_output=True,
                          text=True, timeout=120, check=False)
    assert (init.returncode, init.stderr) == (0, ""), init.stdout + init.stderr
    lines = init.stdout.splitlines()
    assert lines[0] == f"wrote {fleet / 'fleet.toml'}: 1 service(s) from 1 units: {SERVICE} (llama.cpp, port 8080)", lines
    printed = lines[-1].rpartition("then: ")[2]
    assert printed == f"cd {shlex.quote(str(fleet))} && pytest --fleet fleet.toml", lines
    _declare_host(fleet / "fleet.toml", HOSTS[NAME])
    return fleet, printed


def _run_printed(printed: str, site: Path, *addopts: str) -> subprocess.CompletedProcess[str]:
    """The command init printed, run by a shell whose ``pytest`` is this Python's, with only the wheel's fleetgate;
    what the test adds (its JUnit file) comes through PYTEST_ADDOPTS, not into the command."""
    env = _env(site)
    env["PATH"] = os.pathsep.join([str(site / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTEST_ADDOPTS"] = shlex.join(["-p", "no:cacheprovider", *addopts])
    return subprocess.run(["bash", "-c", printed], env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_wheel_alone_runs_every_seam_as_the_checkout_does(site: Path, initialised: tuple[Path, str],
                                                                tmp_path: Path) -> None:
    fleet, printed = initialised
    probe = subprocess.run([sys.executable, "-c", "import fleetgate.plugin; print(fleetgate.plugin.__file__)"], cwd=fleet,
                           env=_env(site), capture_output=True, text=True, timeout=60, check=True)
    assert Path(probe.stdout.strip()).is_relative_to(site), probe.stdout
    alone = _run_printed(printed, site, f"--junitxml={tmp_path / 'alone.xml'}")
    checkout = _pytest(REPO, REPO, "seams/", f"--fleet={fleet / 'fleet.toml'}", f"--junitxml={tmp_path / 'checkout.xml'}")
    assert alone.returncode == checkout.returncode == 1, (alone.stdout, alone.stderr, checkout.stdout)
    # the hand-written fleet's two failures (tests/test_init.py): its unit runs the engine as root, on 0.0.0.0 with
    # no key
    assert alone.stdout.splitlines()[-1].strip("= ").split(" in ")[0] == "2 failed, 12 passed, 45 skipped", alone.stdout
    assert f"FAILED seams/test_units.py::test_unit_user[{SERVICE}]" in alone.stdout
    assert f"FAILED seams/test_security.py::test_engine_auth[{SERVICE}]" in alone.stdout
    assert _outcomes(tmp_path / "alone.xml") == _outcomes(tmp_path / "checkout.xml")


def test_the_wheel_alone_collects_the_live_gate(site: Path, initialised: tuple[Path, str]) -> None:
    fleet, _ = initialised
    gate = ("--endpoint", SERVICE, "--base-url", "http://127.0.0.1:9", "--collect-only", "-q")
    alone = _pytest(fleet, site, "--fleet", "fleet.toml", "live/", *gate)
    checkout = _pytest(REPO, REPO, "live/", f"--fleet={fleet / 'fleet.toml'}", *gate)
    ids = [line for line in alone.stdout.splitlines() if "::" in line]
    assert alone.returncode == checkout.returncode == 0, (alone.stdout, alone.stderr)
    assert ids == [line for line in checkout.stdout.splitlines() if "::" in line]
    assert len(ids) == 33 and ids[0] == f"live/test_host.py::test_unit_state[{SERVICE}]", ids


def test_the_table_supplies_every_registered_check_once() -> None:
    from fleetgate.checks import REGISTRY, load_checks
    from fleetgate.plugin._modules import MODULES

    load_checks()
    supplied = [check for module in MODULES for check in module.checks]
    assert sorted(supplied) == sorted(REGISTRY)
