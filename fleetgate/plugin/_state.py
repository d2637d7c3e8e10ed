"""The plugin's run state: every stash key, and what is made once per run -- the fleet, its renders, its timeout
chains, the chosen endpoints and their hosts. An error is remembered like a result (a malformed manifest is read
once, a fleet whose renders cannot be made is not rendered again per test function).

The hook modules read the run through these functions and nothing else; none of them keeps state of its own.
The live stack (fleetgate.live, httpx, testinfra) is imported here only when an endpoint is chosen
(``--endpoint``). What the engine's machine gives a serve script beyond its files (a model directory that differs
per machine) comes from a conftest.py's ``pytest_fleetgate_live_render``, never from a guess of the plugin's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pytest

from fleetgate.checks import load_checks
from fleetgate.errors import InputError
from fleetgate.fleet import Fleet, Service
from fleetgate.manifest import load_fleet
from fleetgate.plugin._missing import missing_requirement
from fleetgate.render.rendered import ServiceAttempt, attempt_services, unshare_attempts
from fleetgate.replay import RequestLog
from fleetgate.report import PREFIX
from fleetgate.runner import chains_of, plan_scope, planned_probes, planned_renderer
from fleetgate.timeouts import ResolvedChain

if TYPE_CHECKING:
    from fleetgate.gate import LiveStack
    from fleetgate.host import HostTarget
    from fleetgate.live import LiveEndpoint, LocalRender

__all__ = [
    "ERRORS",
    "ERROR_PROPERTY",
    "LIVE",
    "REQUESTS",
    "SETUP_ERROR",
    "SHARED",
    "Inputs",
    "attempts",
    "chains",
    "endpoints",
    "fleet",
    "fleet_if_loaded",
    "fleet_path",
    "guarded",
    "guarded_report",
    "live_stack",
    "strict",
    "targets",
]

T = TypeVar("T")

ERRORS = pytest.StashKey[list[str]]()
"""The controller's lines for reporting hooks that failed (a bug of fleetgate's, said once each in the summary)."""
ERROR_PROPERTY = f"{PREFIX}error"
"""The user property that carries a reporting hook's error line from the process that ran the test to the controller."""
SETUP_ERROR = pytest.StashKey[str]()
"""The first error met while the seams were parametrised: reported once, as one line, when collection ends."""
REQUESTS = pytest.StashKey[RequestLog]()
"""A live test's requests (an item's stash), for the replay line of its failure."""
SHARED = "fleetgate_attempts"
"""The xdist controller's renders, in each worker's workerinput."""
LIVE = "fleetgate-live"
"""The live gate's name: its option group (``--endpoint`` and the rest, ``--host-url``), the user property that
carries a live or host result to the controller's per-service summary, and that summary's plugin."""


@dataclass(frozen=True)
class _Memo(Generic[T]):
    value: T | None = None
    error: Exception | None = None


_FLEET = pytest.StashKey[_Memo[Fleet]]()
_ATTEMPTS = pytest.StashKey[_Memo[dict[str, ServiceAttempt]]]()
_CHAINS = pytest.StashKey[_Memo[list[ResolvedChain]]]()
_ENDPOINTS = pytest.StashKey[_Memo[dict[str, "LiveEndpoint"]]]()
_TARGETS = pytest.StashKey[_Memo[dict[str, "HostTarget"]]]()


def _once(config: pytest.Config, key: pytest.StashKey[_Memo[T]], make: Callable[[], T]) -> T:
    """``make()`` once per run; its error (one line for the operator) is remembered and raised again likewise."""
    memo = config.stash.get(key, None)
    if memo is None:
        try:
            memo = _Memo(value=make())
        except (InputError, pytest.UsageError) as error:
            memo = _Memo(error=error)
        config.stash[key] = memo
    if memo.error is not None:
        raise memo.error
    return memo.value  # type: ignore[return-value]


def strict(config: pytest.Config) -> bool:
    """Whether a not-judged outcome fails the run: ``--fleetgate-strict``, else the ``fleetgate_strict`` ini key."""
    return bool(config.getoption("fleetgate_strict", False) or config.getini("fleetgate_strict"))


def fleet_path(config: pytest.Config) -> Path:
    option = config.getoption("--fleet")
    if option:
        return Path(option).expanduser().resolve()
    ini = config.getini("fleetgate_fleet")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / str(ini)).resolve()
    raise pytest.UsageError("fleetgate: no fleet to check: pass --fleet PATH/fleet.toml or set fleetgate_fleet in the ini file")


def fleet(config: pytest.Config) -> Fleet:
    """The fleet, loaded once per run."""
    return _once(config, _FLEET, lambda: load_fleet(fleet_path(config)))


def fleet_if_loaded(config: pytest.Config) -> Fleet | None:
    """The fleet when it has been loaded, else None (reports of a run that never read it)."""
    memo = config.stash.get(_FLEET, None)
    return memo.value if memo is not None else None


def attempts(config: pytest.Config) -> dict[str, ServiceAttempt]:
    """Every service rendered once per run: by the xdist controller for all its workers, else here.

    A service whose files are broken is an attempt like any other (``serve-script-renders`` reports it).
    """

    def make() -> dict[str, ServiceAttempt]:
        shared = getattr(config, "workerinput", {}).get(SHARED)
        if shared is None:
            return attempt_services(fleet(config), renderer=planned_renderer())
        made = unshare_attempts(shared)
        rendered = [attempt.config for attempt in made.values() if attempt.config is not None]
        for one in rendered:
            # a worker's renderer (one for all its attempts) plans its probes the way the controller's would
            one.renderer.planner, one.renderer.scope = planned_probes, plan_scope
        if rendered:
            rendered[0].renderer.expect(rendered)
        if made and _FLEET not in config.stash:
            config.stash[_FLEET] = _Memo(value=next(iter(made.values())).fleet)
        return made

    return _once(config, _ATTEMPTS, make)


def chains(config: pytest.Config) -> list[ResolvedChain]:
    return _once(config, _CHAINS, lambda: chains_of(fleet(config), attempts(config)))


class Inputs:
    """The seams' inputs (``fleetgate.runner.SeamInputs``) read from this run's state."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @property
    def fleet(self) -> Fleet:
        return fleet(self.config)

    def attempts(self) -> Mapping[str, ServiceAttempt]:
        return attempts(self.config)

    def made_attempts(self) -> Mapping[str, ServiceAttempt] | None:
        """The renders, when this run has made them (or been given them); None before."""
        memo = self.config.stash.get(_ATTEMPTS, None)
        return memo.value if memo is not None else None

    def chains(self) -> Sequence[ResolvedChain]:
        return chains(self.config)


def live_stack() -> type[LiveStack]:
    """The live gate (``fleetgate.gate``: the endpoint client over httpx, testinfra's hosts, the live and host checks),
    imported on first use: a Python without one of its requirements is told so in one line."""
    try:
        # Lazy, the plugin's one import of the live stack: only with --endpoint, so that `pytest seams/` never imports
        # httpx or testinfra (tests/test_import_graph.py, LAZY).
        from fleetgate.gate import LiveStack as stack

        load_checks("live", "host")
    except ModuleNotFoundError as missing:
        error = missing_requirement(missing)
        if error is None:
            raise
        raise error from None
    return stack


def _selected(config: pytest.Config) -> list[str]:
    names: list[str] = config.getoption("--endpoint") or []
    if not names:
        return []
    services = fleet(config).services
    chosen: list[str] = []
    for name in names:
        if name == "all":
            chosen += [s.name for s in services.values() if s.state == "active" and s.name not in chosen]
        elif name not in services:
            raise pytest.UsageError(f"--endpoint {name}: no such service in {fleet(config).path}; "
                                    f"expected one of: {', '.join(services)}, all")
        elif name not in chosen:
            chosen.append(name)
    return chosen


def _named(config: pytest.Config, option: str, names: list[str], what: str) -> dict[str, str]:
    """``--OPTION [NAME=]VALUE`` per chosen endpoint (the NAME may be left out when one endpoint is chosen)."""
    values: dict[str, str] = {}
    for raw in config.getoption(option) or []:
        name, sep, value = raw.partition("=")
        if sep and "://" not in name:
            if name not in names:
                raise pytest.UsageError(f"{option} {raw}: {name} is not among the --endpoint services")
            values[name] = value
        elif len(names) == 1:
            values[names[0]] = raw
        else:
            raise pytest.UsageError(f"{option} {raw}: with several endpoints say which: {option} NAME={what}")
    return values


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _local_render(config: pytest.Config, chosen: Fleet, service: Service) -> LocalRender:
    """What the engine's machine gives this service's serve script beyond its files, as a conftest.py says through
    ``pytest_fleetgate_live_render`` (nothing, where none does); a value of another shape is one line."""
    local_render = live_stack().local_render
    given = config.hook.pytest_fleetgate_live_render(config=config, fleet=chosen, service=service)
    if given is None:
        return local_render()
    if (not isinstance(given, local_render) or not isinstance(given.overrides, Mapping)
            or not all(isinstance(k, str) and _VARIABLE.fullmatch(k) and isinstance(v, str)
                       for k, v in given.overrides.items())
            or not isinstance(given.payload, tuple)
            or not all(isinstance(p, str) and p.startswith("/") for p in given.payload)):
        raise pytest.UsageError(
            f"pytest_fleetgate_live_render returned {given!r} for {service.name}; expected None or "
            "fleetgate.live.LocalRender(overrides={VARIABLE: 'value'}, payload=('/absolute/path', ...))")
    return given


def endpoints(config: pytest.Config) -> dict[str, LiveEndpoint]:
    """The chosen endpoints, connected once per run (rendering only: no request is made here); none without
    ``--endpoint``, and then the live stack is not imported."""

    def make() -> dict[str, LiveEndpoint]:
        names = _selected(config)
        if not names:
            return {}
        urls = _named(config, "--base-url", names, "URL")
        connect = live_stack().connect
        chosen = fleet(config)
        found: dict[str, LiveEndpoint] = {}
        for name in names:
            local = _local_render(config, chosen, chosen.services[name])
            try:
                found[name] = connect(chosen, chosen.services[name], base_url=urls.get(name),
                                      api_key_env=config.getoption("--api-key-env"),
                                      timeout=config.getoption("--live-timeout"),
                                      wait_ready=config.getoption("--wait-ready"),
                                      overrides=local.overrides, present=local.payload)
            except InputError as exc:
                raise pytest.UsageError(str(exc)) from None
        return found

    return _once(config, _ENDPOINTS, make)


def _testinfra_options(config: pytest.Config) -> dict[str, Any]:
    """testinfra's own connection options, when its plugin is loaded."""
    options: dict[str, Any] = {}
    for option, key in (("--ssh-config", "ssh_config"), ("--ssh-identity-file", "ssh_identity_file"),
                        ("--sudo", "sudo"), ("--sudo-user", "sudo_user")):
        try:
            value = config.getoption(option)
        except ValueError:
            continue
        if value:
            options[key] = value
    return options


def targets(config: pytest.Config) -> dict[str, HostTarget]:
    """The host of every chosen endpoint, read through testinfra (once per run)."""

    def make() -> dict[str, HostTarget]:
        chosen = endpoints(config)
        if not chosen:
            return {}
        host_target = live_stack().host_target
        specs = _named(config, "--host-url", list(chosen), "SPEC")
        served = fleet(config)
        options = _testinfra_options(config)
        found: dict[str, HostTarget] = {}
        for name, endpoint in chosen.items():
            if endpoint.config is None:
                raise pytest.UsageError(f"--endpoint {name}: {name} did not render, so its host has nothing to be held to")
            found[name] = host_target(served, endpoint, specs.get(name), options)
        return found

    return _once(config, _TARGETS, make)


def _error_line(hook: str, error: BaseException, nodeid: str | None = None) -> str:
    said = " ".join(str(error).split()) or "no message"
    return f"fleetgate: {hook}{f' ({nodeid})' if nodeid else ''} failed: {type(error).__name__}: {said}"


@contextmanager
def guarded(config: pytest.Config, hook: str, nodeid: str | None = None,
            also: Callable[[str], None] | None = None) -> Iterator[None]:
    """The body of a reporting hook (every hook that runs per report or at the summary, in every hook module): an
    exception in it becomes one line under "fleetgate: reporting errors" (and ``also`` is told it), never an exception
    out of the hook, which pytest makes an INTERNALERROR. Only ``Exception``: KeyboardInterrupt still ends the run."""
    try:
        yield
    except Exception as error:
        line = _error_line(hook, error, nodeid)
        if also is not None:
            also(line)  # a test's report carries it to the controller (an xdist worker's stash stays there)
        else:
            config.stash.setdefault(ERRORS, []).append(line)


def guarded_report(item: pytest.Item, report: pytest.TestReport) -> AbstractContextManager[None]:
    """``guarded`` for a ``pytest_runtest_makereport`` wrapper: the line travels on the report it was making."""

    def tell(line: str) -> None:
        report.user_properties.append((ERROR_PROPERTY, line))

    return guarded(item.config, "pytest_runtest_makereport", item.nodeid, tell)
