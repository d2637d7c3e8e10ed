"""The host side of the live gate: host checks per chosen endpoint, read through testinfra.

A test marked ``@pytest.mark.check(NAME)`` that takes a ``host_check`` argument runs the registered host
check NAME once per service chosen with ``--endpoint`` (test id: the service's name). The service's host
is the fleet's ``hosts.NAME.address`` read through testinfra (loopback: ``local://``; else
``ssh://ADDRESS``); ``--host-url [NAME=]SPEC`` overrides it with any testinfra host spec
(``ssh://user@host``, ``paramiko://...``, ``docker://container``, ``local://``), like testinfra's
``--hosts``. testinfra's own ``--ssh-config``, ``--ssh-identity-file`` and ``--sudo`` apply. Results join
the live gate's per-service summary. Registered by ``fleetgate.plugin_live``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from fleetgate.checks import Check, get_check
from fleetgate.host import LOOPBACK, HostTarget, default_spec
from fleetgate.live import declared_port

__all__ = ["HostCheck"]

_TARGETS = pytest.StashKey[dict[str, HostTarget]]()
_PROPERTY = "fleetgate-live"
NO_ENDPOINT = "no endpoint to check: pass --endpoint NAME (repeatable, or --endpoint all)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fleetgate-live")
    group.addoption(
        "--host-url",
        action="append",
        default=[],
        metavar="[NAME=]SPEC",
        help="read a service's host through this testinfra host spec (local://, ssh://user@host, docker://NAME, ...) "
        "instead of its fleet.toml address (NAME= when several endpoints)",
    )


def _specs(config: pytest.Config, names: list[str]) -> dict[str, str]:
    specs: dict[str, str] = {}
    for raw in config.getoption("--host-url") or []:
        name, sep, spec = raw.partition("=")
        if sep and "://" not in name:
            if name not in names:
                raise pytest.UsageError(f"--host-url {raw}: {name} is not among the --endpoint services")
            specs[name] = spec
        elif len(names) == 1:
            specs[names[0]] = raw
        else:
            raise pytest.UsageError(f"--host-url {raw}: with several endpoints say which: --host-url NAME=SPEC")
    return specs


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
    if _TARGETS not in config.stash:
        import testinfra

        from fleetgate.plugin import _fleet
        from fleetgate.plugin_live import endpoints

        chosen = endpoints(config)
        specs = _specs(config, list(chosen))
        fleet = _fleet(config)
        options = _testinfra_options(config)
        found: dict[str, HostTarget] = {}
        for name, endpoint in chosen.items():
            service = fleet.services[name]
            if endpoint.config is None:
                raise pytest.UsageError(f"--endpoint {name}: {service.name} did not render, so its host has nothing to be held to")
            spec = specs.get(name) or default_spec(fleet.host_of(service).address)
            # The engine is looked for where the files say it listens, never at the --base-url port as such
            # (a proxy or a tunnel may hold that one); the --base-url port counts only on this same host.
            port = declared_port(endpoint.config)
            reached = urlsplit(endpoint.url)
            local = spec == "local://" and reached.hostname in LOOPBACK
            found[name] = HostTarget(config=endpoint.config, host=testinfra.get_host(spec, **options), spec=spec,
                                     port=port, reached_port=(reached.port or port) if local else None)
        config.stash[_TARGETS] = found
    return config.stash[_TARGETS]


@dataclass
class HostCheck:
    """One host check on one service's host; ``run()`` raises ``Failure`` when the host disagrees with the files."""

    check: Check | None
    target: HostTarget | None
    url: str = ""
    engine: str = ""
    skip_reason: str | None = None
    elapsed: float = field(default=0.0, repr=False)

    @property
    def name(self) -> str:
        return self.target.name if self.target else "no-endpoint"

    def run(self) -> None:
        __tracebackhide__ = True
        if self.target is None or self.check is None:
            pytest.skip(NO_ENDPOINT)
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        from fleetgate.checks import NotApplicable

        started = time.monotonic()
        try:
            self.check(self.target)
        except NotApplicable as reason:
            # The host itself says the check cannot see its subject (no SMI tool): a skip that names why.
            self.skip_reason = str(reason)
            pytest.skip(str(reason))
        finally:
            self.elapsed = time.monotonic() - started


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_check" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("check")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test taking 'host_check' needs @pytest.mark.check(NAME)")
    try:
        check = get_check(marker.args[0])
    except KeyError as exc:
        raise pytest.UsageError(f"fleetgate: {exc.args[0]}") from None
    if check.kind != "host":
        raise pytest.UsageError(f"fleetgate: {check.name} is a {check.kind} check; host tests take host checks")
    from fleetgate.plugin_live import endpoints

    chosen = endpoints(metafunc.config)
    hosts = targets(metafunc.config) if chosen else {}
    values = [
        HostCheck(check, target, url=chosen[name].url, engine=chosen[name].engine,
                  skip_reason=check.why_not(target))
        for name, target in hosts.items()
    ] or [HostCheck(None, None)]
    metafunc.parametrize("host_check", values, ids=[v.name for v in values])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("host_check") if callspec is not None else None
    if call.when == "call" and isinstance(value, HostCheck) and value.target is not None and value.check is not None:
        if report.failed and call.excinfo is not None:
            observed = getattr(call.excinfo.value, "code", None)
            note = f"{observed}: {getattr(call.excinfo.value, 'observed', '')}" if observed else str(call.excinfo.value).splitlines()[0]
        elif report.skipped:
            note = value.skip_reason or "skipped"
        else:
            note = value.target.notes.get(value.check.name, f"on {value.target.spec}")
        report.user_properties.append((_PROPERTY, json.dumps({
            "service": value.target.name, "url": value.url, "engine": value.engine, "check": value.check.name,
            "note": note, "spent": 0, "requests": 0, "elapsed": value.elapsed, "measured": {},
        })))
    return report
