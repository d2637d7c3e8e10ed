"""The live side of the pytest plugin: ``--endpoint``, parametrisation per service, the terminal summary.

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
is not run. Registered by ``fleetgate.plugin``.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from fleetgate.checks import Check, get_check
from fleetgate.errors import InputError
from fleetgate.failure import Failure
from fleetgate.live import BUDGET_TOKENS, CheckRecord, LiveEndpoint, connect
from fleetgate.live.endpoint import HEALTH, Halt, fmt_measured

__all__ = ["Live", "endpoint"]

# The host checks (fleetgate.plugin_host) run per chosen endpoint too, and report in the same summary.
pytest_plugins = ["fleetgate.plugin_host"]

_ENDPOINTS = pytest.StashKey[dict[str, LiveEndpoint]]()
SKIPPED_EXPLICITLY = "live tests skipped: --skip-live was given (pass --endpoint NAME to check an endpoint)"
_PROPERTY = "fleetgate-live"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "fleetgate-live", "fleetgate live gate: check running endpoints against their contract"
    )
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


def _selected(config: pytest.Config) -> list[str]:
    from fleetgate.plugin import _fleet

    names: list[str] = config.getoption("--endpoint") or []
    if not names:
        return []
    fleet = _fleet(config)
    chosen: list[str] = []
    for name in names:
        if name == "all":
            chosen += [
                s.name for s in fleet.services.values() if s.state == "active" and s.name not in chosen
            ]
        elif name not in fleet.services:
            raise pytest.UsageError(
                f"--endpoint {name}: no such service in {fleet.path}; "
                f"expected one of: {', '.join(fleet.services)}, all"
            )
        elif name not in chosen:
            chosen.append(name)
    return chosen


def _base_urls(config: pytest.Config, names: list[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for raw in config.getoption("--base-url") or []:
        name, sep, url = raw.partition("=")
        if sep and "://" not in name:
            if name not in names:
                raise pytest.UsageError(f"--base-url {raw}: {name} is not among the --endpoint services")
            urls[name] = url
        elif len(names) == 1:
            urls[names[0]] = raw
        else:
            raise pytest.UsageError(
                f"--base-url {raw}: with several endpoints say which: --base-url NAME=URL"
            )
    return urls


def endpoints(config: pytest.Config) -> dict[str, LiveEndpoint]:
    """The chosen endpoints, connected once per process (rendering only: no request is made here)."""
    if _ENDPOINTS not in config.stash:
        from fleetgate.plugin import _fleet
        from fleetgate.reference import render_overrides

        names = _selected(config)
        urls = _base_urls(config, names)
        fleet = _fleet(config)
        local = render_overrides()
        found: dict[str, LiveEndpoint] = {}
        for name in names:
            try:
                found[name] = connect(
                    fleet,
                    fleet.services[name],
                    base_url=urls.get(name),
                    api_key_env=config.getoption("--api-key-env"),
                    timeout=config.getoption("--live-timeout"),
                    wait_ready=config.getoption("--wait-ready"),
                    overrides=local.overrides,
                    present=local.payload,
                )
            except InputError as exc:
                raise pytest.UsageError(str(exc)) from None
        config.stash[_ENDPOINTS] = found
    return config.stash[_ENDPOINTS]


@dataclass
class Live:
    """One live check on one endpoint; ``run()`` raises ``Failure`` when the contract does not hold."""

    check: Check | None
    endpoint: LiveEndpoint | None
    skip_reason: str | None = None
    record: CheckRecord | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.endpoint.name if self.endpoint else "no-endpoint"

    def run(self) -> None:
        __tracebackhide__ = True
        if self.endpoint is None or self.check is None:
            pytest.skip(SKIPPED_EXPLICITLY)
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        halt = self.endpoint.prepare()
        if halt is not None and halt.check != self.check.name and self.check.name != HEALTH:
            pytest.skip(halt.reason)
        with self.endpoint.recording(self.check.name) as record:
            self.record = record
            self.endpoint.bill_preflight(record)
            try:
                self.check(self.endpoint)  # the check that a halt concerns raises it itself
            except Failure as failure:
                late = (f"{self.check.name}/timeout", f"{self.check.name}/out-of-time")
                if failure.code in late and self.endpoint.halt is None:
                    # The endpoint stopped answering within the bound (--live-timeout, or one derived from the
                    # run's rates): said once, here; the checks after it are not run rather than each failing
                    # on the same silence.
                    self.endpoint.halt = Halt(
                        self.check.name,
                        failure,
                        f"not run: {self.endpoint.name} stopped answering within the bound "
                        f"(see {self.check.name})",
                    )
                raise


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "live" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("check")
        if marker is None:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: a test taking 'live' needs @pytest.mark.check(NAME)"
            )
        try:
            check = get_check(marker.args[0])
        except KeyError as exc:
            raise pytest.UsageError(f"fleetgate: {exc.args[0]}") from None
        if check.kind != "live":
            raise pytest.UsageError(
                f"fleetgate: {check.name} is a {check.kind} check; live tests take live checks"
            )
        chosen = endpoints(metafunc.config)
        lives = [
            Live(
                check,
                e,
                skip_reason=None
                if check.applies(e)
                else f"{check.name} does not apply to {e.name}: "
                f"nothing in its rendered config or contract is what this check holds an endpoint to",
            )
            for e in chosen.values()
        ] or [Live(None, None)]
        metafunc.parametrize("live", lives, ids=[live.name for live in lives])
    elif "endpoint" in metafunc.fixturenames:
        chosen = endpoints(metafunc.config)
        values: list[LiveEndpoint | None] = list(chosen.values()) or [None]
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
    callspec = getattr(item, "callspec", None)
    live = callspec.params.get("live") if callspec is not None else None
    if (
        call.when == "call"
        and isinstance(live, Live)
        and live.record is not None
        and live.endpoint is not None
    ):
        record = live.record
        if report.failed and call.excinfo is not None:
            observed = getattr(call.excinfo.value, "observed", None)
            record.note = str(observed) if observed else str(call.excinfo.value).splitlines()[0]
        report.user_properties.append(
            (
                _PROPERTY,
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
    return report


@dataclass
class _Result:
    outcome: str
    data: dict[str, Any]


class _Summary:
    """Collects every live result (from xdist workers too: they travel as user_properties) and prints
    one block per service at the end: each check's result, what was measured, what was spent."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, _Result]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == _PROPERTY:
                data = json.loads(str(value))
                self.results.setdefault(data["service"], {})[data["check"]] = _Result(report.outcome, data)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
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
                word = {"passed": "PASS", "failed": "FAIL"}.get(result.outcome, result.outcome.upper())
                terminalreporter.write_line(f"  {word:4} {name:24} {data['note']}"[:220])
            if fmt_measured(measured):
                terminalreporter.write_line(f"  measured: {fmt_measured(measured)}")
            over = " -- OVER BUDGET" if spent > BUDGET_TOKENS else ""
            terminalreporter.write_line(
                f"  spent: {spent} generated tokens (budget {BUDGET_TOKENS}) in {requests} "
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
    config.pluginmanager.register(_Summary(), "fleetgate-live-summary")
    if config.getoption("--endpoint"):
        endpoints(config)  # a bad --endpoint / --base-url is a usage error before anything is collected
