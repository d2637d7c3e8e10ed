"""The live gate's hooks: ``--endpoint``, a live test parametrised per chosen service, the terminal summary.

``--endpoint NAME`` works like testinfra's ``--hosts``: repeat it (or pass ``all``) to choose the
services to check; every test marked ``@pytest.mark.check(NAME)`` that takes a ``live`` argument runs
once per chosen service the check applies to, with the service's name as the test id. Collecting live
tests without ``--endpoint`` is a usage error (exit 4: a CI step that lost its argument must not go
green) unless ``--skip-live`` says so explicitly; then they skip with a reason naming the flag. A test
that takes ``endpoint`` (the public fixture: a ``LiveEndpoint``) runs once per chosen service.

The service's address is its host's ``address`` (``--base-url [NAME=]URL`` overrides it, to reach a
service from elsewhere; a host without an address needs it); an API key is read from the environment
variable the contract names (``api_key_env``), else from ``--api-key-env`` (default
``FLEETGATE_API_KEY``), and is never printed. Before the first check, a readiness probe (bounded by
``--wait-ready SECONDS``) makes sure health holds, the credentials are accepted and a request is not
held beyond its bound; when one of these fails, the check it concerns says so once and every other check
is not run. The live stack (``fleetgate.live``, httpx, the live checks) is imported only when an endpoint
is chosen.

A service is held to its files as the machine that runs its engine renders them. What that machine gives the serve
script beyond the files (a model directory that differs per machine, a file that exists only there) is said by a
conftest.py's ``pytest_fleetgate_live_render`` hook (below); without one, the files alone.

PYTEST_DONT_REWRITE: the package imports this module before pytest registers it (for its one-line error on a
missing requirement), and it holds no test's assert.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from fleetgate.checks import find_check
from fleetgate.plugin import _state
from fleetgate.plugin._item import SKIPPED_EXPLICITLY, CheckParam
from fleetgate.runner import live_subjects

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet, Service
    from fleetgate.live import LiveEndpoint, LocalRender

__all__ = ["endpoint"]


class _Hooks:
    """The live gate's hook, for a conftest.py to implement."""

    @pytest.hookspec(firstresult=True)
    def pytest_fleetgate_live_render(self, config: pytest.Config, fleet: Fleet, service: Service) -> LocalRender | None:
        """What the machine that runs ``service``'s engine gives its serve script beyond its files, for the live
        render (a ``fleetgate.live.LocalRender``: variables, and files present there besides the declared payload);
        None: the files alone. Called once per chosen endpoint, before anything is collected."""
        raise NotImplementedError  # a specification: pluggy calls the implementations, never this


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(_Hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(_state.LIVE, "fleetgate live gate: check running endpoints against their contract")
    group.addoption(
        "--endpoint",
        action="append",
        default=[],
        metavar="NAME",
        help="a service of the fleet to check live (repeatable; 'all' = every active service)",
    )
    group.addoption(
        "--base-url",
        action="append",
        default=[],
        metavar="[NAME=]URL",
        help="reach a service at URL instead of where its files say it listens (NAME= when several)",
    )
    group.addoption(
        "--api-key-env",
        default="FLEETGATE_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (a contract's api_key_env wins); never printed",
    )
    group.addoption(
        "--wait-ready",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for each endpoint's health to hold before any check runs (default 0: one "
        "try); a service still loading then fails live-health once and nothing else runs",
    )
    group.addoption(
        "--skip-live",
        action="store_true",
        default=False,
        help="skip the live tests when no --endpoint is given (without it that is a usage error)",
    )
    group.addoption(
        "--live-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="bound of every generation request (quick probes use at most 15 s); default 60",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "live" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("check")
        if marker is None:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: a test taking 'live' needs @pytest.mark.check(NAME)"
            )
        try:
            check = find_check(marker.args[0])
        except KeyError as exc:
            raise pytest.UsageError(f"fleetgate: {exc.args[0]}") from None
        if check.kind != "live":
            raise pytest.UsageError(
                f"fleetgate: {check.name} is a {check.kind} check; live tests take live checks"
            )
        chosen = _state.endpoints(metafunc.config)
        lives = [CheckParam(check, subject, endpoint=chosen[subject.name], strict=_state.strict(metafunc.config))
                 for subject in live_subjects(check, chosen)]
        lives = lives or [CheckParam(None, None, none_reason=SKIPPED_EXPLICITLY)]
        metafunc.parametrize("live", lives, ids=[live.name for live in lives])
    elif "endpoint" in metafunc.fixturenames:
        found = _state.endpoints(metafunc.config)
        values: list[LiveEndpoint | None] = list(found.values()) or [None]
        metafunc.parametrize(
            "_fleetgate_endpoint", values, ids=[e.name if e else "no-endpoint" for e in values], indirect=True
        )


@pytest.fixture
def _fleetgate_endpoint(request: pytest.FixtureRequest) -> LiveEndpoint:
    value: LiveEndpoint | None = request.param
    if value is None:
        pytest.skip(SKIPPED_EXPLICITLY)
    value.prepare()
    return value


@pytest.fixture
def endpoint(_fleetgate_endpoint: LiveEndpoint) -> LiveEndpoint:
    """The running endpoint of one chosen service: its contract, a bounded client, what was measured."""
    return _fleetgate_endpoint


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    with _state.guarded_report(item, report):
        _live_properties(item, call, report)
    return report


def _live_properties(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """A live test's record (what it measured and spent) on its report, for the summary and the JSON report."""
    callspec = getattr(item, "callspec", None)
    live = callspec.params.get("live") if callspec is not None else None
    if (
        call.when == "call"
        and isinstance(live, CheckParam)
        and live.record is not None
        and live.endpoint is not None
    ):
        record = live.record
        if report.failed and call.excinfo is not None:
            record.note = _state.live_stack().live_note(record, call.excinfo.value)
        report.user_properties.append(
            (
                _state.LIVE,
                json.dumps(
                    {
                        "service": live.endpoint.name,
                        "url": live.endpoint.url,
                        "engine": live.endpoint.engine,
                        "check": record.check,
                        "note": record.note,
                        "spent": record.spent_tokens,
                        "requests": record.requests,
                        "elapsed": record.elapsed,
                        "measured": record.measured,
                    }
                ),
            )
        )


@dataclass
class _Result:
    outcome: str
    data: dict[str, Any]


class _Summary:
    """Collects every live result (from xdist workers too: they travel as user_properties) and prints
    one block per service at the end: each check's result, what was measured, what was spent."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: dict[str, dict[str, _Result]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        with _state.guarded(self.config, "pytest_runtest_logreport", report.nodeid):
            self._add(report)

    def _add(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == _state.LIVE:
                data = json.loads(str(value))
                self.results.setdefault(data["service"], {})[data["check"]] = _Result(report.outcome, data)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        with _state.guarded(self.config, "pytest_terminal_summary"):
            self._summary(terminalreporter)

    def _summary(self, terminalreporter: Any) -> None:
        if not self.results:
            return
        # there are live results only when endpoints were checked: the live stack is imported
        stack = _state.live_stack()
        for service, checks in self.results.items():
            first = next(iter(checks.values())).data
            terminalreporter.section(
                f"fleetgate live: {service} ({first['engine']}, {first['url']})", sep="-"
            )
            spent = requests = 0
            elapsed = 0.0
            measured: dict[str, float] = {}
            for name in sorted(checks):
                result = checks[name]
                data = result.data
                spent += int(data["spent"])
                requests += int(data["requests"])
                elapsed += float(data["elapsed"])
                measured.update(data["measured"])
                word = stack.summary_word(result.outcome)
                terminalreporter.write_line(f"  {word:4} {name:24} {data['note']}"[:220])
            if stack.fmt_measured(measured):
                terminalreporter.write_line(f"  measured: {stack.fmt_measured(measured)}")
            over = " -- OVER BUDGET" if spent > stack.budget_tokens else ""
            terminalreporter.write_line(
                f"  spent: {spent} generated tokens (budget {stack.budget_tokens}) in {requests} "
                f"requests; checks took {elapsed:.1f} s{over}"
            )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--endpoint") or config.getoption("--skip-live"):
        return
    live = [item for item in items if {"live", "endpoint"} & set(getattr(item, "fixturenames", ()))]
    if live:
        raise pytest.UsageError(
            f"{len(live)} live test(s) collected but no endpoint to check: pass --endpoint NAME (repeatable, "
            "or --endpoint all), or --skip-live to skip them on purpose"
        )


def pytest_configure(config: pytest.Config) -> None:
    # Live results come only from checked endpoints: a seams run does not pay a report hook per test for none.
    if config.getoption("--endpoint"):
        config.pluginmanager.register(_Summary(config), f"{_state.LIVE}-summary")
        _state.endpoints(config)  # a bad --endpoint / --base-url is a usage error before anything is collected
