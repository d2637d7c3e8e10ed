"""The pytest plugin: ``--fleet``, the ``check`` marker, parametrisation per subject, operator-facing failures.

This is the only module of fleetgate that imports pytest. A test marked ``@pytest.mark.check(NAME)``
that takes a ``seam`` argument is parametrised over every subject the registered check could concern
(the services of its engines, the timeout chains), with the subject's name as the test id;
``seam.run()`` runs the check, or skips with the reason it cannot apply (what to declare).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

try:
    # The plugins pytest_plugins names below are imported here first, with the rest of fleetgate, so that a
    # requirement missing from this Python (fleetgate found on its path, its dependencies installed elsewhere)
    # is one line instead of pytest's traceback.
    import fleetgate.plugin_live
    import fleetgate.plugin_report  # noqa: F401
    from fleetgate.checks import Check, NotApplicable, get_check
    from fleetgate.config import ServiceAttempt, attempt_services, share_attempts, unshare_attempts
    from fleetgate.errors import InputError
    from fleetgate.failure import Failure
    from fleetgate.fleet import Fleet
    from fleetgate.manifest import load_fleet
    from fleetgate.policies import policy_off
    from fleetgate.timeouts import ResolvedChain, resolve_chains
except ModuleNotFoundError as missing:
    if not missing.name or missing.name.partition(".")[0] == "fleetgate":
        raise
    raise pytest.UsageError(
        f"fleetgate needs the {missing.name.partition('.')[0]} package, which this Python ({sys.executable}) does not "
        "have: run the pytest of the environment the README's set-up command made (.venv/bin/pytest), or install "
        "fleetgate into this one (pip install -e .)") from None

__all__ = ["Seam", "fleet_path"]

pytest_plugins = ["fleetgate.plugin_live", "fleetgate.plugin_report"]

_FLEET = pytest.StashKey[Fleet]()
_ATTEMPTS = pytest.StashKey[dict[str, ServiceAttempt]]()
_CHAINS = pytest.StashKey[list[ResolvedChain]]()
_SETUP_ERROR = pytest.StashKey[str]()
_FLEET_ERROR = pytest.StashKey[Exception]()
_ATTEMPTS_ERROR = pytest.StashKey[Exception]()
_CHAINS_ERROR = pytest.StashKey[Exception]()
RENDERS = "serve-script-renders"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fleetgate", "fleetgate: seams and live checks for an LLM serving fleet")
    group.addoption("--fleet", action="store", metavar="PATH", default=None,
                    help="the fleet manifest (fleet.toml) to check; default: the fleetgate_fleet ini option")
    parser.addini("fleetgate_fleet", "path of the fleet manifest, relative to the ini file", type="string", default="")
    group.addoption("--incident", action="store", metavar="ID", default=None,
                    help="run only the checks that guard this catalogue incident (fleetgate incidents --id ID)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "check(name): run the registered fleetgate check NAME once per subject it applies to")
    config.addinivalue_line("markers", "seam: an offline check over the fleet's files (no network)")
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_ShareRenders(), "fleetgate-share-renders")


def fleet_path(config: pytest.Config) -> Path:
    option = config.getoption("--fleet")
    if option:
        return Path(option).expanduser().resolve()
    ini = config.getini("fleetgate_fleet")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / str(ini)).resolve()
    raise pytest.UsageError("fleetgate: no fleet to check: pass --fleet PATH/fleet.toml or set fleetgate_fleet in the ini file")


def _fleet(config: pytest.Config) -> Fleet:
    """The fleet, loaded once per run; a manifest that cannot be read is remembered too, not read again per test."""
    if _FLEET not in config.stash:
        failed = config.stash.get(_FLEET_ERROR, None)
        if failed is not None:
            raise failed
        try:
            config.stash[_FLEET] = load_fleet(fleet_path(config))
        except (InputError, pytest.UsageError) as error:
            config.stash[_FLEET_ERROR] = error
            raise
    return config.stash[_FLEET]


def _attempts(config: pytest.Config) -> dict[str, ServiceAttempt]:
    """Every service rendered once per run: by the xdist controller for all its workers, else here.

    A service whose files are broken is an attempt like any other (``serve-script-renders`` reports it);
    an error that stops every render (no sandbox) is remembered, so that no seam test function renders again.
    """
    if _ATTEMPTS not in config.stash:
        failed = config.stash.get(_ATTEMPTS_ERROR, None)
        if failed is not None:
            raise failed
        try:
            shared = getattr(config, "workerinput", {}).get(_SHARED)
            if shared is not None:
                attempts = unshare_attempts(shared)
                config.stash[_FLEET] = next(iter(attempts.values())).fleet if attempts else _fleet(config)
            else:
                attempts = attempt_services(_fleet(config))
        except (InputError, pytest.UsageError) as error:
            config.stash[_ATTEMPTS_ERROR] = error
            raise
        config.stash[_ATTEMPTS] = attempts
    return config.stash[_ATTEMPTS]


_SHARED = "fleetgate_attempts"


class _ShareRenders:
    """xdist: the controller renders every service once and hands the results to each worker, instead
    of every worker rendering the whole fleet again while it collects."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        config: pytest.Config = node.config
        try:
            attempts = _attempts(config)
        except (InputError, pytest.UsageError):
            return  # each worker meets the error while it collects, and reports it as one line
        node.workerinput[_SHARED] = share_attempts(attempts)


def _chains(config: pytest.Config) -> list[ResolvedChain]:
    if _CHAINS not in config.stash:
        failed = config.stash.get(_CHAINS_ERROR, None)
        if failed is not None:
            raise failed
        attempts = _attempts(config)

        def variables(name: str) -> dict[str, Any]:
            attempt = attempts[name]
            return dict(attempt.config.variables) if attempt.config else {}

        try:
            config.stash[_CHAINS] = resolve_chains(_fleet(config), variables)
        except (InputError, pytest.UsageError) as error:
            config.stash[_CHAINS_ERROR] = error
            raise
    return config.stash[_CHAINS]


@dataclass(frozen=True)
class Seam:
    """One check on one subject; ``run()`` raises ``Failure`` when the contract does not hold.

    A seam that cannot judge its subject skips with the reason, which names what to declare.
    """

    check: Check
    subject: Any
    name: str
    skip_reason: str | None = None
    policy_off: bool = False
    """The skip is a policy the fleet does not keep: reported once per policy, at fleet.toml."""

    def run(self) -> None:
        __tracebackhide__ = True
        if self.skip_reason:
            self._skip(self.skip_reason)
        try:
            self.check(self.subject)
        except NotApplicable as reason:
            self._skip(str(reason))

    def _skip(self, reason: str) -> None:
        __tracebackhide__ = True
        # -rs lists reasons by file:line only: each names its subject.
        pytest.skip(reason if reason.startswith(f"{self.name} ") else f"{self.name}: {reason}")


def _unrendered(config: pytest.Config, chain: ResolvedChain) -> str | None:
    """A chain that holds a variable of a service that did not render cannot be judged: its budget is unknown."""
    attempts = _attempts(config)
    for ref in chain.chain.chain:
        attempt = attempts.get(ref.owner) if ref.owner is not None else None
        if attempt is not None and attempt.config is None:
            return f"{chain.name} holds {ref.owner}:{ref.variable}, and {ref.owner} did not render: see {RENDERS}[{ref.owner}]"
    return None


def _seams_for(config: pytest.Config, check: Check) -> list[Seam]:
    """Every subject the check could concern: a seam that cannot apply skips, it never vanishes."""
    off = policy_off(_fleet(config), check.name)
    if off is not None:
        # A house rule the fleet does not keep: one skip for the whole fleet, naming how to turn it on.
        return [Seam(check, None, "fleet", skip_reason=off, policy_off=True)]
    if check.subject == "timeout-chain":
        chains = [Seam(check, chain, chain.name, skip_reason=_unrendered(config, chain) or check.why_not(chain))
                  for chain in _chains(config)]
        return chains or [Seam(check, None, "fleet", skip_reason=(
            f"{_fleet(config).path.name} declares no [[timeouts]] chain: declare the budgets that must nest"))]
    if check.subject == "fleet":
        fleet = _fleet(config)
        return [Seam(check, fleet, fleet.name, skip_reason=check.why_not(fleet))]
    if check.subject != "service":
        raise pytest.UsageError(f"fleetgate: check {check.name!r} is a {check.kind} check on {check.subject!r}, not a seam")
    seams = []
    for name, attempt in _attempts(config).items():
        if check.engines is not None and attempt.service.engine not in check.engines:
            continue
        if check.name == RENDERS:
            seams.append(Seam(check, attempt, name))
        elif attempt.config is None:
            seams.append(Seam(check, None, name, skip_reason=f"{name} did not render: see {RENDERS}[{name}]"))
        else:
            seams.append(Seam(check, attempt.config, name, skip_reason=check.why_not(attempt.config)))
    if not seams:
        kind = f"{' or '.join(check.engines)} service" if check.engines else "service"
        seams.append(Seam(check, None, "fleet", skip_reason=f"the fleet declares no {kind}"))
    return seams


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("check")
    if marker is None or "seam" not in metafunc.fixturenames:
        return
    try:
        check = get_check(marker.args[0])
    except KeyError as exc:
        raise pytest.UsageError(f"fleetgate: {exc.args[0]}") from None
    try:
        seams = _seams_for(metafunc.config, check)
    except (InputError, pytest.UsageError) as exc:
        # Reported once, as one line, when collection ends (pytest_collection_modifyitems).
        metafunc.config.stash.setdefault(_SETUP_ERROR, str(exc).removeprefix("fleetgate: "))
        seams = []
    metafunc.parametrize("seam", seams, ids=[s.name for s in seams])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    error = config.stash.get(_SETUP_ERROR, None)
    if error is not None:
        raise pytest.UsageError(f"fleetgate: {error}")
    incident = config.getoption("--incident")
    if incident:
        _select_incident(config, items, incident)


def _select_incident(config: pytest.Config, items: list[pytest.Item], incident: str) -> None:
    """Keep the tests of the checks whose failure codes catch the incident; deselect the rest."""
    from fleetgate.checks import REGISTRY, _load_all
    from fleetgate.incidents import load_catalogue

    _load_all()
    entries = {e.id: e for e in load_catalogue()}
    entry = entries.get(incident)
    if entry is None:
        raise pytest.UsageError(f"fleetgate: --incident {incident}: no such entry in the catalogue (fleetgate incidents lists them)")
    guards = {code.split("/", 1)[0] for code in entry.codes}
    if entry.reproduction.check in REGISTRY:
        guards.add(entry.reproduction.check)
    guards &= set(REGISTRY)
    if not guards:
        r = entry.reproduction
        why = r.reason if r.kind == "none" else f"pending {r.check}: {r.pending}"
        raise pytest.UsageError(f"fleetgate: --incident {incident}: no registered check guards it ({why})")
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("check")
        (keep if marker is not None and marker.args and marker.args[0] in guards else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if report.skipped and isinstance(report.longrepr, tuple):
        _fold_policy_skip(item, report)
    if excinfo is not None and report.failed:
        if isinstance(excinfo.value, Failure):
            report.longrepr = _relative(item.config, str(excinfo.value))
        elif isinstance(excinfo.value, InputError):
            report.longrepr = _relative(item.config, f"fleetgate: {excinfo.value}")
    return report


def _fold_policy_skip(item: pytest.Item, report: pytest.TestReport) -> None:
    """Every skip of one policy that is off shares one location (fleet.toml's [fleet] table), so ``-rs`` folds them
    into one line per policy instead of one per check."""
    seam = getattr(item, "callspec", None) and item.callspec.params.get("seam")  # type: ignore[attr-defined]
    fleet = item.config.stash.get(_FLEET, None)
    if not isinstance(seam, Seam) or not seam.policy_off or fleet is None or not isinstance(report.longrepr, tuple):
        return
    where = fleet.where("fleet", "policies")
    file, _, line = where.rpartition(":")
    location = (file, int(line), report.longrepr[2]) if line.isdigit() else (where, 1, report.longrepr[2])
    report.longrepr = (str(Path(location[0]).relative_to(item.config.rootpath)) if Path(location[0]).is_relative_to(
        item.config.rootpath) else location[0], location[1], location[2])


def _relative(config: pytest.Config, text: str) -> str:
    """Paths inside the fleet read relative to its fleet.toml, the way an operator names them."""
    fleet = config.stash.get(_FLEET, None)
    return text.replace(f"{fleet.root}/", "") if fleet is not None else text


_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class OfflineError(OSError):
    """A seam tried to leave the machine (an OSError, so socket helpers clean up as for any refusal)."""


@pytest.fixture(autouse=True)
def _fleetgate_hermetic_seams(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seams are offline: any connection that leaves the machine is a bug in a seam."""
    if request.node.get_closest_marker("seam") is None:
        return
    original = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in _LOOPBACK and not host.startswith("/"):
            raise OfflineError(f"fleetgate seams are offline: refused a connection to {address!r}")
        return original(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
