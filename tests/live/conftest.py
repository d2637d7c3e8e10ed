"""The live gate's own tests: the real reference llama-server, misconfigured copies of it, a fault server.

The reference is started once per xdist worker on a port of its own. A missing engine or model is a
failure with the install command, never a silent skip: CI installs both (tox env ``tests``).
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from fleetgate.checks import REGISTRY, get_check
from fleetgate.fleet import Fleet
from fleetgate.gate import GateRun
from fleetgate.gate import run_gate as run_gate_here
from fleetgate.manifest import load_fleet
from fleetgate.plugin._modules import MODULES
from fleetgate.reference import (
    ReferenceError,
    ReferenceServer,
    launch,
    llama_bin_dir,
    model_dir,
    on_free_port,
    render_overrides,
    render_reference,
    start,
)

REPO = Path(__file__).resolve().parents[2]
FLEET_DIR = REPO / "fixtures" / "fleet"
LIVE = REPO / "live"
_LINE = re.compile(r"^\s+(PASS|FAIL)\s+((?:live|host)-[a-z-]+)\s+(.*)$")
_CODE = re.compile(r"\b((?:live|host)-[a-z-]+/[a-z-]+)\b")

# Two numerically different runs of the same configuration: another micro-batch (prefill is cut
# into other matrix shapes) and a q4_0 K cache. Greedy text differs between them (and between CPUs);
# every verdict must not.
VARIANTS: dict[str, tuple[str, ...]] = {
    "shipped": (),
    "numerics-b": ("--ubatch-size", "32", "--cache-type-k", "q4_0"),
}


# The failure codes whose branch is decided by the text the model generates (the letters of an answer, a tool
# call in it, where its reasoning lands, a colour named): a run that reproduces one of them runs under every
# variant, since another micro-batch or K cache type makes greedy decoding pick other words. Every other
# verdict rests on what the engine reports (status, /props, /slots, /metrics, timings, counters, the stream's
# shape) or what a fault proxy injects, and is judged once, under the shipped numerics; the reference gate
# itself (every check passing, the text-reading ones too) runs under every variant.
TEXT_DECIDED_CODES = frozenset({
    "live-chat/garbage",
    "live-chat/cut-by-server",
    "live-parallel-tool-calls/not-parallel",
    "live-reasoning/no-trace",
    "live-reasoning/tags-in-content",
    "live-reasoning/no-answer",
    "live-vision-colour/colour-not-named",
    # the model opens the call (llama.cpp's required grammar admits free content first), and where its trace lands
    "live-tool-schema/no-call",
    "live-tool-reasoning/no-call",
    "live-tool-reasoning/no-trace",
})


def variants_for(failing: Mapping[str, str]) -> list[str]:
    """The numerics variants a run whose failing outcomes are ``failing`` is judged under: every variant where
    generated text decides one of them, else the shipped numerics alone."""
    return list(VARIANTS) if TEXT_DECIDED_CODES & set(failing.values()) else ["shipped"]


def live_checks() -> set[str]:
    get_check("live-health")  # imports every check module
    return {name for name, check in REGISTRY.items() if check.kind == "live"}


# The host checks on the reference's host (this machine, local://): no unit, no pin gate, no cards.
HOST_OUTCOMES: dict[str, str] = {
    "host-unit-state": "skipped",
    "host-unit-drop-ins": "skipped",
    "host-unit-limits": "skipped",
    "host-boot-persistence": "skipped",
    "host-process-argv": "passed",
    "host-process-env": "passed",
    "host-exposure": "passed",
    "host-runtime-libs": "passed",
    "host-payload": "passed",
    "host-memavailable": "skipped",
    "host-vram-vs-ledger": "skipped",
}


def expected_outcomes(failing: dict[str, str], *, vision: bool = False) -> dict[str, str]:
    """Every live and host check's outcome on the reference, with ``failing`` overriding it."""
    outcomes = {name: "passed" for name in live_checks()}
    if not vision:
        outcomes["live-vision-colour"] = "skipped"  # applies only where vision is declared
    return {**outcomes, **HOST_OUTCOMES, **failing}


def declare(source: Path, target: Path, *, port: int, variant: str) -> Path:
    """A copy of the fleet at ``source`` (a directory) at ``target`` whose reference declares what the suite runs:
    its port, and the numerics variant's flags (appended by the serve script). Returns the copy's fleet.toml.

    The suite runs every server on a free port, from the render of such a copy at one fixed path per session,
    and checks it against a copy at that same path: the host checks then find the engine at its declared port
    and hold it to the argv the files declare (the chat template's path included)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    env = target / "scripts" / "reference.env"
    text = env.read_text(encoding="utf-8")
    env.write_text(re.sub(r"(?m)^PORT=.*$", f"PORT={port}", text), encoding="utf-8")
    flags = VARIANTS[variant]
    if flags:
        script = target / "scripts" / "serve-reference.sh"
        text = script.read_text(encoding="utf-8")
        line = 'exec llama-server "${args[@]}"'
        assert line in text, script
        script.write_text(text.replace(line, f"{line} {' '.join(flags)}"), encoding="utf-8")
    return target / "fleet.toml"


@pytest.fixture(scope="session")
def declared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one path per session (per xdist worker) where the declared fleet copies live."""
    return tmp_path_factory.mktemp("declared") / "fleet"


def server_port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port



@pytest.fixture(scope="session")
def engine() -> None:
    try:
        llama_bin_dir()
        model_dir()
    except ReferenceError as exc:
        pytest.fail(f"the live gate's tests need the real engine: {exc}", pytrace=False)


@pytest.fixture(autouse=True)
def unclosed_resources_warn_in_their_own_test() -> Iterator[None]:
    """A socket, file or process this test leaves unclosed warns in this test's teardown (and fails it:
    filterwarnings = error), not in whichever later test the garbage collector happens to run in."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    return load_fleet(FLEET_DIR / "fleet.toml")


@pytest.fixture(scope="session")
def reference(
    engine: None, declared_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReferenceServer]:
    """The reference endpoint, started by running its serve script for real (one per xdist worker)."""
    log = tmp_path_factory.mktemp("reference") / "llama-server.log"

    def run(port: int) -> ReferenceServer:
        fleet = load_fleet(declare(FLEET_DIR, declared_home, port=port, variant="shipped"))
        return start(fleet, port=port, log=log)

    try:
        server = on_free_port(run)
    except ReferenceError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def declared_argv(home: Path, port: int, variant: str) -> list[str]:
    """The reference's rendered argv on ``port`` in ``variant``, as a declared copy at ``home`` renders it."""
    return list(render_reference(load_fleet(declare(FLEET_DIR, home, port=port, variant=variant)), port=port).argv)


@pytest.fixture(scope="session")
def reference_b(
    engine: None, declared_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReferenceServer]:
    """The reference's rendered argv under the second numerics (started only when a test needs it)."""
    log = tmp_path_factory.mktemp("reference-b") / "llama-server.log"
    server = on_free_port(
        lambda port: launch(declared_argv(declared_home, port, "numerics-b"), log=log, port=port)
    )
    with server:
        yield server


@pytest.fixture
def reference_in(variant: str, request: pytest.FixtureRequest) -> ReferenceServer:
    """The shared reference server of this test's numerics variant."""
    name = "reference" if variant == "shipped" else "reference_b"
    server: ReferenceServer = request.getfixturevalue(name)
    return server


@dataclass
class Gate:
    """One run of ``pytest live/ --endpoint reference``: each check's outcome (from JUnit) and summary note."""

    result: pytest.RunResult
    checks: dict[str, tuple[str, str]]
    outcomes: dict[str, str]
    """check -> ``passed``, ``skipped``, or the failure code that fired."""

    @property
    def failed(self) -> set[str]:
        return {name for name, (word, _) in self.checks.items() if word == "FAIL"}

    @property
    def passed(self) -> set[str]:
        return {name for name, (word, _) in self.checks.items() if word == "PASS"}

    @property
    def output(self) -> str:
        return self.result.stdout.str() + self.result.stderr.str()

    def note(self, check: str) -> str:
        return self.checks[check][1]

    def spent(self) -> int:
        match = re.search(r"spent: (\d+) generated tokens", self.result.stdout.str())
        assert match, self.result.stdout.str()
        return int(match.group(1))

    def checks_took(self) -> float:
        """The seconds the gate itself measured its checks to take (its summary's ``checks took``): the run's
        time less the pytest process's start-up, collection and the fleet's render, which load stretches."""
        match = re.search(r"checks took (\d+\.\d) s", self.result.stdout.str())
        assert match, self.result.stdout.str()
        return float(match.group(1))


def run_gate(
    pytester: pytest.Pytester,
    url: str,
    *args: str,
    home: Path,
    fleet_toml: Path | None = None,
    port: int | None = None,
    variant: str = "shipped",
) -> Gate:
    """The gate (live and host checks) at ``url``, against a declared copy of the fleet (``fleet_toml``'s, else
    the example's) whose reference listens on ``port`` (default: the URL's; a proxy's test names the engine's)."""
    source = fleet_toml.parent if fleet_toml else FLEET_DIR
    declared = declare(source, home, port=port or server_port(url), variant=variant)
    fleet_args = ("--fleet", str(declared))
    junit = pytester.path / f"junit-{len(list(pytester.path.glob('junit-*.xml')))}.xml"
    result = pytester.runpytest_subprocess(
        str(LIVE),
        "--endpoint",
        "reference",
        "--base-url",
        url,
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *fleet_args,
        *args,
        timeout=300,
    )
    checks: dict[str, tuple[str, str]] = {}
    for line in result.stdout.lines:
        match = _LINE.match(line)
        if match:
            checks[match.group(2)] = (match.group(1), match.group(3))
    return Gate(result, checks, junit_outcomes(junit) if junit.exists() else {})


def junit_outcomes(path: Path) -> dict[str, str]:
    """check -> passed / skipped / the failure code, from the gate's JUnit report."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "").split("[", 1)[0]
        kind = "host" if case.get("classname", "").rsplit(".", 1)[-1] == "test_host" else "live"
        check = f"{kind}-" + name.removeprefix("test_").replace("_", "-")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            match = _CODE.search(failure.get("message", "") + (failure.text or ""))
            outcomes[check] = match.group(1) if match else "failed-without-code"
        elif case.find("skipped") is not None:
            outcomes[check] = "skipped"
        else:
            outcomes[check] = "passed"
    return outcomes


@pytest.fixture
def plugin_gate(pytester: pytest.Pytester, declared_home: Path) -> Callable[..., Gate]:
    """The gate as an operator runs it: ``pytest live/ --endpoint reference`` in a subprocess (its summary, JUnit,
    xdist, the replay line). For what only the plugin does; a check's verdict is ``gate``'s to prove."""

    def run(
        url: str, *args: str, fleet_toml: Path | None = None, port: int | None = None, variant: str = "shipped"
    ) -> Gate:
        return run_gate(
            pytester, url, *args, home=declared_home, fleet_toml=fleet_toml, port=port, variant=variant
        )

    return run


def _gate_order() -> tuple[str, ...]:
    """The checks of ``live/``'s test modules in the order pytest runs them: module by module (sorted by name), each
    test in the order the table fleetgate supplies them from lists it, so a check added there is run here too."""
    return tuple(check for module in sorted(MODULES, key=lambda m: m.path) if module.directory == "live"
                 for check in module.checks)


GATE_ORDER = _gate_order()


@dataclass
class GateHere:
    """One run of the gate in this process (``fleetgate.gate.run_gate``): the same outcomes and notes ``Gate``
    reads from a subprocess run, without the subprocess."""

    run: GateRun

    @property
    def outcomes(self) -> dict[str, str]:
        """check -> ``passed``, ``skipped``, or the failure code that fired."""
        return self.run.verdicts

    @property
    def checks(self) -> dict[str, tuple[str, str]]:
        return self.run.checks

    @property
    def output(self) -> str:
        return self.run.text()

    def note(self, check: str) -> str:
        return self.run.notes[check]

    def spent(self) -> int:
        return self.run.spent

    def checks_took(self) -> float:
        return self.run.elapsed


@pytest.fixture
def gate(declared_home: Path) -> Callable[..., GateHere]:
    """The gate's live and host checks at ``url`` in this process (every check of ``live/``, else ``only`` of them
    in that order), against a declared copy of the fleet (``fleet_toml``'s, else the example's) whose reference
    listens on ``port`` (default: the URL's), with the render this machine gives the reference (root conftest.py)."""

    def run(
        url: str, *, only: Iterable[str] | None = None, live_timeout: float = 60.0, wait_ready: float = 0.0,
        fleet_toml: Path | None = None, port: int | None = None, variant: str = "shipped",
    ) -> GateHere:
        source = fleet_toml.parent if fleet_toml else FLEET_DIR
        declared = load_fleet(declare(source, declared_home, port=port or server_port(url), variant=variant))
        wanted = set(only) if only is not None else set(GATE_ORDER)
        assert wanted <= set(GATE_ORDER), wanted - set(GATE_ORDER)
        checks = [name for name in GATE_ORDER if name in wanted]
        return GateHere(run_gate_here(declared, "reference", checks, base_url=url, timeout=live_timeout,
                                      wait_ready=wait_ready, local=render_overrides()))

    return run


# -- misconfigured reference servers: the rendered argv with one edit ------------------------------------


def set_value(argv: list[str], flag: str, value: str) -> list[str]:
    index = argv.index(flag)
    return [*argv[: index + 1], value, *argv[index + 2 :]]


def drop(argv: list[str], flag: str, values: int = 1) -> list[str]:
    index = argv.index(flag)
    return [*argv[:index], *argv[index + 1 + values :]]


Edit = Callable[[list[str]], list[str]]

# Argv edits that more than one test starts a server with, by name: one server per (variant, edit) and xdist
# worker, started by the first test that asks for it and stopped at the session's end. A test that changes
# files under the running process, or whose edit no other test makes, starts its own (``control`` with a
# function) and stops it after the test.
SHARED_EDITS: dict[str, Edit] = {
    # the window-other control (test_negative_controls.py) and its run under a CPU hog (test_under_load.py)
    "ctx-size-2048": lambda a: set_value(a, "--ctx-size", "2048"),
    # an oversized window past a short --live-timeout, idle (test_bounds.py) and under a CPU hog
    "ctx-size-8192": lambda a: set_value(a, "--ctx-size", "8192"),
}


@pytest.fixture(scope="session")
def shared_controls(
    engine: None, declared_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str, str], ReferenceServer]]:
    """The server of one of SHARED_EDITS in one variant, started once per session (per xdist worker)."""
    servers: dict[tuple[str, str], ReferenceServer] = {}

    def shared(edit: str, variant: str) -> ReferenceServer:
        server = servers.get((variant, edit))
        if server is None:
            log = tmp_path_factory.mktemp(f"control-{edit}-{variant}") / "llama-server.log"
            server = on_free_port(
                lambda port: launch(SHARED_EDITS[edit](declared_argv(declared_home, port, variant)), log=log,
                                    port=port)
            )
            servers[(variant, edit)] = server
        return server

    yield shared
    for server in servers.values():
        server.stop()


@pytest.fixture
def control(
    engine: None, declared_home: Path, tmp_path: Path, variant: str,
    shared_controls: Callable[[str, str], ReferenceServer],
) -> Iterator[Callable[[Edit | str], ReferenceServer]]:
    """llama-server from the reference's rendered argv (in this test's numerics variant) after one edit: the
    session's server of a named edit (SHARED_EDITS), or one started for this test from a function and stopped
    after it."""
    servers: list[ReferenceServer] = []

    def launch_edited(edit: Edit | str) -> ReferenceServer:
        if isinstance(edit, str):
            return shared_controls(edit, variant)
        log = tmp_path / f"control-{len(servers)}.log"
        server = on_free_port(
            lambda port: launch(edit(declared_argv(declared_home, port, variant)), log=log, port=port)
        )
        servers.append(server)
        return server

    yield launch_edited
    for server in servers:
        server.stop()


@pytest.fixture
def fleet_copy(tmp_path: Path) -> Callable[[dict[str, Callable[[str], str]]], Path]:
    """A copy of the example fleet with text edits to some of its files; returns the copy's fleet.toml."""

    def copy(edits: dict[str, Callable[[str], str]]) -> Path:
        target = tmp_path / "fleet"
        shutil.copytree(FLEET_DIR, target)
        for relative, edit in edits.items():
            path = target / relative
            before = path.read_text(encoding="utf-8")
            after = edit(before)
            assert after != before, f"the edit of {relative} changed nothing"
            path.write_text(after, encoding="utf-8")
        return target / "fleet.toml"

    return copy


@pytest.fixture
def no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETGATE_API_KEY", raising=False)
    assert "FLEETGATE_API_KEY" not in os.environ
