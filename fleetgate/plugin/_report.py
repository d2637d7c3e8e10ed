"""The reporting side of the pytest plugin: properties per test, waivers, selection, summaries, the report.

- Every test of a check (seam or live) carries ``fleetgate.*`` properties (``fleetgate.report``) in
  its ``user_properties``: they travel through xdist and land in JUnit and pytest-reportlog's JSON lines.
  pytest's default JUnit family, xunit2, has no properties inside a test case: under it the
  properties of each test case are written to its test suite's ``<properties>``, as one property
  ``fleetgate[NODEID]`` holding a JSON object, and the file stays valid. Under ``junit_family = xunit1``
  (or legacy) they stay on the test case, where Jenkins and GitLab show them.
- ``--check NAME`` (repeatable) runs only the tests of that check; a failure code selects its check.
- ``[[waivers]]`` in fleet.toml turn a failure with that code on that service into an expected one
  (xfail) until the waiver's date; after it the failure fails again and names the expired waiver. The verdict is
  the runner's (``fleetgate.runner.run``: ``waived``, an expired or unused waiver, the figures): this module only
  says it in pytest's words, so ``pytest seams/``, the catalogue and ``run_seams`` agree.
- No hook here lets an exception escape: a bug of a reporting hook is one line in the summary (and a
  ``fleetgate.error`` property on the test it concerns), never pytest's INTERNALERROR.
- ``--fleetgate-report PATH`` writes the per-service document of ``schema/report.schema.json``.
- The seams end with one block per service: outcomes, headroom per card, the tightest margin.

PYTEST_DONT_REWRITE: the package imports this module before pytest registers it (for its one-line error on a
missing requirement), and it holds no test's assert.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.checks import Check, find_check
from fleetgate.failure import Failure
from fleetgate.fleet import gib
from fleetgate.plugin import _state
from fleetgate.plugin._item import CheckParam
from fleetgate.replay import RequestLog, curl, transcript
from fleetgate.report import JSON_PROPERTIES, PREFIX, FleetReport, case_properties, live_properties, redact, redact_json
from fleetgate.runner import Outcome, recorded, waiver_day

__all__: list[str] = []

_OUTCOMES = pytest.StashKey[list[Outcome]]()
"""The outcomes the runner gave while an item's test ran (its call phase): the verdict its reports say."""
_ERRORS = _state.ERRORS
ERROR_PROPERTY = _state.ERROR_PROPERTY
_guarded = _state.guarded


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fleetgate")
    group.addoption("--check", action="append", default=[], metavar="NAME|CODE", dest="fleetgate_checks",
                    help="run only the tests of this check (a failure code selects its check); repeatable")
    group.addoption("--fleetgate-report", metavar="PATH", default=None,
                    help="write per-service results (outcomes, codes, headroom, margins, live measurements) as JSON")
    group.addoption("--live-progress", metavar="SECONDS", type=float, default=10.0,
                    help="while a live check waits, print a progress line this often (0: never); default 10")
    # Not pytest's own --strict (its strict_* ini options): a fleet may want one without the other.
    group.addoption("--fleetgate-strict", action="store_true", default=False, dest="fleetgate_strict",
                    help="a check that applies but lacks a fact ('not judged: ...') fails instead of skipping")
    parser.addini("fleetgate_strict", "a 'not judged' outcome fails instead of skipping (as --fleetgate-strict)",
                  type="bool", default=False)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if not _is_worker(config):
        config.pluginmanager.register(_Collector(config), "fleetgate-report-collector")
    for name in config.getoption("fleetgate_checks") or []:
        try:
            find_check(name.split("/", 1)[0])
        except KeyError as exc:
            raise pytest.UsageError(f"--check {name}: {exc.args[0]}") from None
    try:
        waiver_day()  # the runner reads it for every waiver; a bad value is said once, before anything runs
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


# -- selection -------------------------------------------------------------------------------------


def _check_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("check")
    return str(marker.args[0]) if marker is not None and marker.args else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = {name.split("/", 1)[0] for name in config.getoption("fleetgate_checks") or []}
    if not wanted:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if _check_of(item) in wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# -- live checks: the requests they make (for the replay), progress while they wait --------------


def _live_endpoint(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    live = callspec.params.get("live") if callspec is not None else None
    return live.endpoint if isinstance(live, CheckParam) and live.check is not None else None


class _Progress:
    """A line every ``interval`` seconds while a live check runs: it is waiting, not stuck."""

    def __init__(self, item: pytest.Item, log: RequestLog, interval: float) -> None:
        self.item = item
        self.log = log
        self.interval = interval
        self.stop = threading.Event()
        self.start = time.monotonic()
        self.thread = threading.Thread(target=self._run, name=f"{_state.LIVE}-progress", daemon=True)

    def _run(self) -> None:
        config = self.item.config
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        while not self.stop.wait(self.interval):
            last = self.log.last
            doing = f" ({last.method} {last.url})" if last else ""
            line = (f"  ... {self.item.name}: waiting {time.monotonic() - self.start:.0f} s, "
                    f"{len(self.log.requests)} request(s) so far{doing}")
            if terminal is None:
                continue
            if capture is not None:
                with capture.global_and_fixture_disabled():
                    terminal.write_line(line)
            else:
                terminal.write_line(line)

    def __enter__(self) -> _Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with recorded() as outcomes:
        try:
            endpoint = _live_endpoint(item)
            if endpoint is None:
                return (yield)
            log = RequestLog()
            item.stash[_state.REQUESTS] = log
            interval = float(item.config.getoption("--live-progress") or 0)
            with log.watching(getattr(endpoint, "client", None)):
                if interval > 0 and not _is_worker(item.config):
                    with _Progress(item, log, interval):
                        return (yield)
                return (yield)
        finally:
            item.stash[_OUTCOMES] = list(outcomes)


def _key_env(item: pytest.Item, endpoint: Any) -> str | None:
    """The variable the endpoint's key is read from (what the client was given: ``fleetgate.live.connect``)."""
    variable = getattr(endpoint, "api_key_variable", None)
    if isinstance(variable, str) and variable:
        return variable
    contract = getattr(endpoint, "contract", None)
    named = getattr(contract, "api_key_env", None) or item.config.getoption("--api-key-env", None)
    return str(named) if named else None


def _replay(item: pytest.Item) -> str | None:
    """The curl that repeats the last request of a live check (the key as $VARIABLE)."""
    endpoint = _live_endpoint(item)
    log = item.stash.get(_state.REQUESTS, None)
    if endpoint is None or log is None or log.last is None:
        return None
    key_env = _key_env(item, endpoint)
    command = curl(log.last, key_env=key_env, timeout=getattr(endpoint.client, "timeout", None))
    return redact(command, _secret_names(item.config, key_env))


def transcripts_dir(report: Path) -> Path:
    """Where a run that writes the fleetgate report at ``report`` keeps its live checks' transcripts: beside it, named
    after it (two reports in one directory keep theirs apart)."""
    return report.parent / f"{report.stem}-transcripts"


def _write_transcript(item: pytest.Item, service: str, check: str, outcome: str, code: str | None) -> str | None:
    """The live check's every request and answer (stream events too), with a curl per request, as
    ``transcripts/SERVICE/CHECK.json`` beside the report; its path relative to the report's directory, or None where
    no report is written or the check made no request. Every secret is scrubbed from the text before it is written."""
    report = item.config.getoption("--fleetgate-report")
    endpoint = _live_endpoint(item)
    log = item.stash.get(_state.REQUESTS, None)
    if not report or endpoint is None or log is None or not log.exchanges:
        return None
    key_env = _key_env(item, endpoint)
    document = transcript(log, key_env=key_env, timeout=getattr(endpoint.client, "timeout", None),
                          about={"service": service, "check": check, "test": item.nodeid, "outcome": outcome,
                                 "code": code, "url": getattr(endpoint, "url", None)})
    safe = redact_json(json.loads(json.dumps(document, default=str)), _secret_names(item.config, key_env))
    text = json.dumps(safe, indent=1) + "\n"
    target = transcripts_dir(Path(report)) / service / f"{check}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return str(target.relative_to(Path(report).parent))


# -- properties and waivers (in the process that runs the test: an xdist worker) -------------------


def _subject(item: pytest.Item) -> tuple[Check[Any], str, Any] | None:
    """(check, service, subject) of a test parametrised by the plugin, else None."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    # Host checks run beside the live ones on the same --endpoint: they count in the service's summary line,
    # carry the same properties and honour the same waivers, so "0 failed" never hides a failing host check.
    for name in ("seam", "live", "host_check"):
        param = callspec.params.get(name)
        if isinstance(param, CheckParam) and param.check is not None:
            return param.check, param.name, param.value
    return None


def _verdict(item: pytest.Item, check: Check[Any], subject: str) -> Outcome | None:
    """The runner's outcome of this test's check on its subject (the last, should the test run it twice)."""
    outcomes = item.stash.get(_OUTCOMES, [])
    return next((o for o in reversed(outcomes) if o.check == check.name and o.subject == subject), None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield

    def tell(line: str) -> None:
        report.user_properties.append((ERROR_PROPERTY, line))

    with _guarded(item.config, "pytest_runtest_makereport", item.nodeid, tell):
        _report_test(item, call, report)
    return report


def _report_test(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """Say the runner's verdict in pytest's words, and put the test's properties on its reports."""
    decisive = call.when == "call" or (call.when == "setup" and not report.passed)
    if not decisive:
        return
    found = _subject(item)
    if found is None:
        return
    check, service, _ = found
    outcome = _verdict(item, check, service) if call.when == "call" else None
    failure = call.excinfo.value if call.excinfo is not None and isinstance(call.excinfo.value, Failure) else None
    code = failure.code if failure is not None and report.failed else None
    cites = tuple(dict.fromkeys([*check.cites, *(failure.cites if failure is not None else ())]))
    use = outcome.waiver if outcome is not None else None
    if outcome is not None and use is not None and outcome.code is not None and report.failed:
        if outcome.outcome == "waived":
            report.outcome = "skipped"
            report.wasxfail = use.reason(outcome.code)
        elif use.state == "expired":
            report.longrepr = f"{use.expiry(service, outcome.code)}\n{report.longrepr}"
    notes = outcome.notes if outcome is not None else ()
    unjudged = _not_judged(item, outcome)
    props = case_properties(service=service, check=check.name, cites=cites, code=code,
                            figures=outcome.figures if outcome is not None else None,
                            waiver=use.note if use is not None else None, note="; ".join(notes) or None,
                            not_judged=unjudged)
    for note in notes:
        report.sections.append(("fleetgate", note))
    record = getattr(getattr(item, "callspec", None), "params", {}).get("live")
    record = getattr(record, "record", None)
    if record is not None and call.when == "call":
        props += live_properties(measured=record.measured, spent_tokens=record.spent_tokens,
                                 requests=record.requests, elapsed=record.elapsed)
    if report.failed and call.when == "call":
        replay = _replay(item)
        if replay is not None:
            report.longrepr = f"{report.longrepr}\n  replay:   {replay}"
            props.append((f"{PREFIX}replay", replay))
    if record is not None and call.when == "call":
        kept = _write_transcript(item, service, check.name, report.outcome, code)
        if kept is not None:
            props.append((f"{PREFIX}transcript", kept))
    # The call report is already built: it and the teardown report (JUnit reads that one) both carry them.
    item.user_properties.extend(props)
    report.user_properties.extend(props)


def _not_judged(item: pytest.Item, outcome: Outcome | None) -> str | None:
    """The line a not-judged outcome said (its skip's reason, or its failure's under --fleetgate-strict), else None."""
    if outcome is None or outcome.outcome != "not-judged":
        return None
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    said = next((p.skip_reason for p in params if isinstance(p, CheckParam) and p.skip_reason), None)
    return said or outcome.text


# -- the controller: JUnit under xunit2, the summary, the report -----------------------------------


def _fleetgate_property(name: str) -> bool:
    return name.startswith(PREFIX) or name == _state.LIVE


class _Collector:
    """Gathers every test's fleetgate properties where the reports arrive (the xdist controller)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.report = FleetReport()
        self._xml: Any = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        with _guarded(self.config, "pytest_runtest_logreport", report.nodeid):
            self._logreport(report)

    def _logreport(self, report: pytest.TestReport) -> None:
        errors = self.config.stash.setdefault(_ERRORS, [])
        errors += [str(v) for k, v in report.user_properties if k == ERROR_PROPERTY and str(v) not in errors]
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome: str = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            elif report.when == "setup" and report.failed:
                outcome = "error"
            self.report.add(report.nodeid, outcome, report.user_properties)
        if report.when == "teardown":
            self._junit_xunit2(report)

    def _junit_xunit2(self, report: pytest.TestReport) -> None:
        """xunit2 has no <properties> in a test case: move fleetgate's to the suite, one JSON per case."""
        if not self.config.getoption("xmlpath", None) or self.config.getini("junit_family") != "xunit2":
            return
        xml = self._junit_writer()
        if xml is None:
            return
        ours = [(str(k), v) for k, v in report.user_properties if _fleetgate_property(str(k))]
        if not ours:
            return
        report.user_properties = [(k, v) for k, v in report.user_properties if not _fleetgate_property(str(k))]
        value: dict[str, Any] = {}
        for key, raw in ours:
            name = key.removeprefix(PREFIX)
            value[name] = json.loads(str(raw)) if key == _state.LIVE or name in JSON_PROPERTIES else str(raw)
        xml.add_global_property(f"fleetgate[{report.nodeid}]", json.dumps(value, sort_keys=True))

    def _junit_writer(self) -> Any:
        """pytest's JUnit writer, found among the registered plugins (the object behind the public
        ``record_testsuite_property`` fixture: its ``add_global_property``), once."""
        if self._xml is None:
            self._xml = next((plugin for plugin in self.config.pluginmanager.get_plugins()
                              if callable(getattr(plugin, "add_global_property", None))), None)
        return self._xml

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        with _guarded(self.config, "pytest_terminal_summary"):
            self._summary(terminalreporter)
        errors = self.config.stash.get(_ERRORS, [])
        if errors:
            # Written last, and without anything that could fail again: these lines are the report of a bug.
            terminalreporter.section("fleetgate: reporting errors", sep="-")
            for line in errors:
                terminalreporter.write_line(line)

    def _summary(self, terminalreporter: Any) -> None:
        services = self.report.services
        if not services:
            return
        terminalreporter.section("fleetgate: per service", sep="-")
        for name in sorted(services):
            result = services[name]
            counts = ", ".join(f"{result.outcomes.get(k, 0)} {k}" for k in ("passed", "failed", "skipped"))
            extra = "".join(f", {result.outcomes[k]} {k}" for k in ("xfailed", "xpassed", "error") if k in result.outcomes)
            unjudged = f", {result.unjudged} not judged" if result.unjudged else ""
            terminalreporter.write_line(f"{name}: {counts}{unjudged}{extra}")
            # Each reason once: one missing declaration blinds several checks of a service, and says so once.
            for reason in result.not_judged:
                terminalreporter.write_line(f"  {reason}")
            if result.headroom:
                cards = ", ".join(f"{card} {gib(value)}" for card, value in sorted(result.headroom.items()))
                terminalreporter.write_line(f"  headroom above the floor: {cards}")
            tightest = result.tightest()
            if tightest is not None:
                terminalreporter.write_line(f"  tightest margin: {gib(tightest[1])} ({tightest[0]})")
            for entry in result.checks:
                if "waiver" in entry:
                    terminalreporter.write_line(f"  {entry['check']}: {entry['waiver']}")
                if "note" in entry:
                    terminalreporter.write_line(f"  {entry['note']}")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        with _guarded(self.config, "pytest_sessionfinish"):
            self._write_report(exitstatus)

    def _write_report(self, exitstatus: int) -> None:
        path = self.config.getoption("--fleetgate-report")
        if not path:
            return
        try:
            manifest = _state.fleet_path(self.config)
        except pytest.UsageError:
            fleet = ""
        else:
            here = self.config.invocation_params.dir
            fleet = str(manifest.relative_to(here) if manifest.is_relative_to(here) else manifest)
        document = self.report.document(fleet=fleet, exit_status=int(exitstatus))
        text = json.dumps(document, indent=2) + "\n"
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(redact(text, _secret_names(self.config)), encoding="utf-8")


def _secret_names(config: pytest.Config, *more: str | None) -> list[str]:
    names = {"FLEETGATE_API_KEY", *(name for name in more if name)}
    option = config.getoption("--api-key-env", None)
    if option:
        names.add(str(option))
    return sorted(names)
