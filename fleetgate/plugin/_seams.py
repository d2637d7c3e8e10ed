"""The seams' hooks: ``--fleet``, ``--incident``, the ``check`` marker, a seam test parametrised per subject,
operator-facing failures, hermetic seams.

A test marked ``@pytest.mark.check(NAME)`` that takes a ``seam`` argument is parametrised over every subject the
registered check could concern (``fleetgate.runner.seam_subjects``: the services of its engines, the timeout
chains, the fleet), with the subject's name as the test id; ``seam.run()`` runs the check, or skips with the
reason it cannot apply (what to declare).

PYTEST_DONT_REWRITE: the package imports this module before pytest registers it (for its one-line error on a
missing requirement), and it holds no test's assert.
"""

from __future__ import annotations

import socket
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.checks import NOT_JUDGED, REGISTRY, find_check, load_checks
from fleetgate.errors import InputError
from fleetgate.failure import Failure
from fleetgate.fleet import LOOPBACK
from fleetgate.incidents import load_catalogue
from fleetgate.plugin import _state
from fleetgate.plugin._item import CheckParam
from fleetgate.render.rendered import share_attempts
from fleetgate.runner import NotASeam, seam_subjects

__all__: list[str] = []


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


class _ShareRenders:
    """xdist: the controller renders every service once and hands the results to each worker, instead
    of every worker rendering the whole fleet again while it collects."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        config: pytest.Config = node.config
        try:
            attempts = _state.attempts(config)
        except (InputError, pytest.UsageError):
            return  # each worker meets the error while it collects, and reports it as one line
        node.workerinput[_state.SHARED] = share_attempts(attempts)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("check")
    if marker is None or "seam" not in metafunc.fixturenames:
        return
    try:
        check = find_check(marker.args[0])
    except KeyError as exc:
        raise pytest.UsageError(f"fleetgate: {exc.args[0]}") from None
    try:
        strict = _state.strict(metafunc.config)
        seams = [CheckParam(check, subject, strict=strict)
                 for subject in seam_subjects(check, _state.Inputs(metafunc.config))]
    except NotASeam as exc:
        metafunc.config.stash.setdefault(_state.SETUP_ERROR, str(exc))
        seams = []
    except (InputError, pytest.UsageError) as exc:
        # Reported once, as one line, when collection ends (pytest_collection_modifyitems).
        metafunc.config.stash.setdefault(_state.SETUP_ERROR, str(exc).removeprefix("fleetgate: "))
        seams = []
    metafunc.parametrize("seam", seams, ids=[s.name for s in seams])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    error = config.stash.get(_state.SETUP_ERROR, None)
    if error is not None:
        raise pytest.UsageError(f"fleetgate: {error}")
    incident = config.getoption("--incident")
    if incident:
        _select_incident(config, items, incident)


def _select_incident(config: pytest.Config, items: list[pytest.Item], incident: str) -> None:
    """Keep the tests of the checks whose failure codes catch the incident; deselect the rest."""
    load_checks()
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
    with _state.guarded_report(item, report):
        _operator_words(item, call, report)
    return report


def _operator_words(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """A failure as its operator message (no traceback), a policy's skips folded into one line."""
    excinfo = call.excinfo
    if report.skipped and isinstance(report.longrepr, tuple):
        _fold_policy_skip(item, report)
    if excinfo is not None and report.failed:
        if isinstance(excinfo.value, Failure):
            report.longrepr = _relative(item.config, str(excinfo.value))
        elif isinstance(excinfo.value, InputError):
            report.longrepr = _relative(item.config, f"fleetgate: {excinfo.value}")


def _fold_policy_skip(item: pytest.Item, report: pytest.TestReport) -> None:
    """Every skip of one policy that is off shares one location (fleet.toml's [fleet] table), so ``-rs`` folds them
    into one line per policy instead of one per check. Likewise every not-judged skip of a service shares its
    table in fleet.toml: one missing declaration that blinds several checks is one ``-rs`` line."""
    seam = getattr(item, "callspec", None) and item.callspec.params.get("seam")  # type: ignore[attr-defined]
    fleet = _state.fleet_if_loaded(item.config)
    if not isinstance(seam, CheckParam) or fleet is None or not isinstance(report.longrepr, tuple):
        return
    if seam.policy_off:
        where = fleet.where("fleet", "policies")
    elif (seam.skip_reason or "").startswith(NOT_JUDGED) and seam.name in fleet.services:
        where = fleet.where("services", seam.name)
    else:
        return
    file, _, line = where.rpartition(":")
    location = (file, int(line), report.longrepr[2]) if line.isdigit() else (where, 1, report.longrepr[2])
    report.longrepr = (str(Path(location[0]).relative_to(item.config.rootpath)) if Path(location[0]).is_relative_to(
        item.config.rootpath) else location[0], location[1], location[2])


def _relative(config: pytest.Config, text: str) -> str:
    """Paths inside the fleet read relative to its fleet.toml, the way an operator names them."""
    fleet = _state.fleet_if_loaded(config)
    return text.replace(f"{fleet.root}/", "") if fleet is not None else text


class OfflineError(OSError):
    """A seam tried to leave the machine (an OSError, so socket helpers clean up as for any refusal)."""


_UNPATCHED_CONNECT = pytest.StashKey[Any]()


# Hooks, not an autouse fixture: a fixture is set up for every test of every project that has fleetgate installed,
# and with its monkeypatch it doubled pytest's own cost of a trivial test (docs/speed.md, "What the goals cannot get
# below"). From the seam's setup to the end of its teardown, so its fixtures are offline too.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Seams are offline: any connection that leaves the machine is a bug in a seam."""
    current = socket.socket.connect
    if item.get_closest_marker("seam") is not None and not getattr(current, "fleetgate_offline", False):
        item.stash[_UNPATCHED_CONNECT] = current
        socket.socket.connect = _offline(current)  # type: ignore[method-assign]
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        original = item.stash.get(_UNPATCHED_CONNECT, None)
        if original is not None:
            socket.socket.connect = original  # type: ignore[method-assign]
            del item.stash[_UNPATCHED_CONNECT]


def _offline(original: Any) -> Any:
    def connect(sock: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in LOOPBACK and not host.startswith("/"):
            raise OfflineError(f"fleetgate seams are offline: refused a connection to {address!r}")
        return original(sock, address)

    connect.fleetgate_offline = True  # type: ignore[attr-defined]
    return connect
