"""The host side of the live gate's hooks: host checks per chosen endpoint, read through testinfra.

A test marked ``@pytest.mark.check(NAME)`` that takes a ``host_check`` argument runs the registered host
check NAME once per service chosen with ``--endpoint`` (test id: the service's name). The service's host
is the fleet's ``hosts.NAME.address`` read through testinfra (loopback: ``local://``; else
``ssh://ADDRESS``); ``--host-url [NAME=]SPEC`` overrides it with any testinfra host spec
(``ssh://user@host``, ``paramiko://...``, ``docker://container``, ``local://``), like testinfra's
``--hosts``. testinfra's own ``--ssh-config``, ``--ssh-identity-file`` and ``--sudo`` apply. Results join
the live gate's per-service summary.

PYTEST_DONT_REWRITE: the package imports this module before pytest registers it (for its one-line error on a
missing requirement), and it holds no test's assert.
"""

from __future__ import annotations

import json
from collections.abc import Generator

import pytest

from fleetgate.checks import find_check
from fleetgate.plugin import _state
from fleetgate.plugin._item import NO_ENDPOINT, CheckParam
from fleetgate.runner import host_subjects

__all__: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(_state.LIVE)
    group.addoption(
        "--host-url",
        action="append",
        default=[],
        metavar="[NAME=]SPEC",
        help="read a service's host through this testinfra host spec (local://, ssh://user@host, docker://NAME, ...) "
        "instead of its fleet.toml address (NAME= when several endpoints)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_check" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("check")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test taking 'host_check' needs @pytest.mark.check(NAME)")
    try:
        check = find_check(marker.args[0])
    except KeyError as exc:
        raise pytest.UsageError(f"fleetgate: {exc.args[0]}") from None
    if check.kind != "host":
        raise pytest.UsageError(f"fleetgate: {check.name} is a {check.kind} check; host tests take host checks")
    chosen = _state.endpoints(metafunc.config)
    hosts = _state.targets(metafunc.config)
    values = [CheckParam(check, subject, endpoint=chosen[subject.name], strict=_state.strict(metafunc.config))
              for subject in host_subjects(check, hosts)]
    values = values or [CheckParam(None, None, none_reason=NO_ENDPOINT)]
    metafunc.parametrize("host_check", values, ids=[v.name for v in values])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    with _state.guarded_report(item, report):
        _host_properties(item, call, report)
    return report


def _host_properties(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """A host check's result on its report, in the live gate's shape: it joins the per-service summary."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("host_check") if callspec is not None else None
    if call.when == "call" and isinstance(value, CheckParam) and value.subject is not None and value.check is not None:
        target = value.value
        failure = call.excinfo.value if report.failed and call.excinfo is not None else None
        note = _state.live_stack().host_note(target, value.check.name, failure, (value.skip_reason or "") if report.skipped else None)
        report.user_properties.append((_state.LIVE, json.dumps({
            "service": target.name, "url": value.endpoint.url, "engine": value.endpoint.engine, "check": value.check.name,
            "note": note, "spent": 0, "requests": 0, "elapsed": value.elapsed, "measured": {},
        })))
