"""The live gate without pytest: live and host checks on one endpoint of a fleet, in this process.

The plugin (``fleetgate.plugin``) runs each check as a test item; ``run_gate`` runs the same checks one after
another and returns what came of each. Both go through the functions here, so what a halt does to the checks after
it, where the readiness probe's tokens are billed, how a host is reached and what a summary line says are decided
in one place:

- ``run_live``: a live check on its endpoint, after the readiness probe; a check that a halt does not concern is
  skipped with the halt's reason, and a check that timed out halts the endpoint for those after it;
- ``host_target``: the host of an endpoint, read through testinfra (the engine looked for where the files say it
  listens);
- ``live_note`` and ``host_note``: what the per-service summary says of a check.

Importing this module imports the live stack (httpx, testinfra): the plugin imports it only with ``--endpoint``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import testinfra

from fleetgate.checks import REGISTRY, Check, load_checks
from fleetgate.fleet import LOOPBACK, Fleet
from fleetgate.host import HostTarget, default_spec
from fleetgate.live import LiveEndpoint, LocalRender, connect, declared_port
from fleetgate.live.endpoint import BUDGET_TOKENS, HEALTH, CheckRecord, Halt, fmt_measured
from fleetgate.runner import Outcome, Subject, host_subjects, live_subjects, run

__all__ = ["GateRun", "LiveStack", "host_note", "host_target", "live_note", "run_gate", "run_host", "run_live", "summary_word"]


def summary_word(outcome: str) -> str:
    """How the per-service summary says an outcome: PASS, FAIL, SKIPPED."""
    return {"passed": "PASS", "failed": "FAIL"}.get(outcome, outcome.upper())


def run_live(check: Check[Any], subject: Subject) -> tuple[Outcome, CheckRecord | None]:
    """A live check on its endpoint (``subject.value``), and what it measured and spent (None: it did not run).

    The readiness probe runs before the first check; when it failed, the check it concerns carries the failure and
    every other check is skipped with the halt's reason. A check whose request got no answer within its bound
    halts the endpoint likewise for the checks after it."""
    if subject.skip_reason:
        return run(check, subject), None
    endpoint: LiveEndpoint = subject.value
    halt = endpoint.prepare()
    if halt is not None and halt.check != check.name and check.name != HEALTH and not (halt.generating_only
                                                                                       and check.reads_only):
        return Outcome(check.name, subject.name, "skipped", text=halt.reason), None
    with endpoint.recording(check.name) as record:
        endpoint.bill_preflight(record)
        outcome = run(check, subject)  # the check that a halt concerns raises it itself
        late = (f"{check.name}/timeout", f"{check.name}/out-of-time", f"{check.name}/server-cap")
        if outcome.failure is not None and outcome.code in late and endpoint.halt is None:
            # The endpoint stopped answering within the bound (--live-timeout, or one derived from the run's rates):
            # said once, here; the checks after it are not run rather than each failing on the same silence.
            capped = outcome.code == f"{check.name}/server-cap"
            why = "cuts answers short of the max_tokens asked" if capped else "stopped answering within the bound"
            endpoint.halt = Halt(check.name, outcome.failure, f"not run: {endpoint.name} {why} (see {check.name})",
                                 generating_only=capped)
    return outcome, record


def run_host(check: Check[Any], subject: Subject) -> tuple[Outcome, float]:
    """A host check on its host (``subject.value``, a ``HostTarget``), and the seconds it took."""
    started = time.monotonic()
    outcome = run(check, subject)
    return outcome, time.monotonic() - started


def live_note(record: CheckRecord | None, failure: BaseException | None) -> str:
    """The summary's note of a live check: what was observed when it failed, else what the check noted."""
    if failure is not None:
        observed = getattr(failure, "observed", None)
        return str(observed) if observed else str(failure).splitlines()[0]
    return record.note if record is not None else ""


def host_note(target: HostTarget, check: str, failure: BaseException | None, skip_reason: str | None) -> str:
    """The summary's note of a host check: the code and what was observed, the skip's reason, or what it noted."""
    if failure is not None:
        code = getattr(failure, "code", None)
        return f"{code}: {getattr(failure, 'observed', '')}" if code else str(failure).splitlines()[0]
    if skip_reason is not None:
        return skip_reason or "skipped"
    return target.notes.get(check, f"on {target.spec}")


def host_target(fleet: Fleet, endpoint: LiveEndpoint, spec: str | None = None,
                options: Mapping[str, Any] | None = None) -> HostTarget:
    """The host of ``endpoint``, read through testinfra at ``spec`` (default: the fleet's address for its host).

    The engine is looked for where the files say it listens, never at the URL's port as such (a proxy or a tunnel
    may hold that one); the URL's port counts only on this same host. The endpoint must have rendered."""
    service = fleet.services[endpoint.name]
    if endpoint.config is None:
        raise ValueError(f"{endpoint.name} did not render, so its host has nothing to be held to")
    address = fleet.host_of(service).address
    spec = spec or default_spec(address)
    port = declared_port(endpoint.config)
    reached = urlsplit(endpoint.url)
    local = spec == "local://" and reached.hostname in LOOPBACK
    # The live checks talked to whatever answers the URL: a host the URL names that is neither this host's address
    # nor the one the spec reads (nor loopback, a tunnel's end) holds a process the host checks cannot read.
    host_of_spec = urlsplit(spec).hostname if "://" in spec else None
    known = {address, host_of_spec, *LOOPBACK} - {None}
    elsewhere = (f"the live checks reached {endpoint.url} (--base-url), and {reached.hostname} is not the host "
                 f"{spec} reads (fleet.toml address {address or 'none'}): the process they tested cannot be read there; "
                 f"pass --host-url {endpoint.name}=ssh://{reached.hostname} to read it"
                 if reached.hostname and reached.hostname not in known else None)
    return HostTarget(config=endpoint.config, host=testinfra.get_host(spec, **dict(options or {})), spec=spec,
                      port=port, reached_port=(reached.port or port) if local else None, elsewhere=elsewhere)


@dataclass
class GateRun:
    """One run of the gate on one endpoint: every check's outcome and summary note, in the order they ran."""

    endpoint: LiveEndpoint
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    elapsed: float = 0.0
    """Seconds the checks took together (the summary's ``checks took``)."""

    @property
    def verdicts(self) -> dict[str, str]:
        """check -> ``passed``, ``skipped``, or the failure code that fired."""
        return {name: o.code if o.code is not None else o.outcome for name, o in self.outcomes.items()}

    @property
    def spent(self) -> int:
        """Generated tokens the run spent (the readiness probe's included)."""
        return sum(record.spent_tokens for record in self.endpoint.records)

    @property
    def checks(self) -> dict[str, tuple[str, str]]:
        """check -> (PASS, FAIL or SKIPPED, its note): the per-service summary's lines."""
        return {name: (summary_word(o.outcome), self.notes[name]) for name, o in self.outcomes.items()}

    def text(self) -> str:
        """Every outcome with its note, and every failure's whole text: what a failed assertion shows."""
        lines = [f"{word:7} {name:24} {note}" for name, (word, note) in self.checks.items()]
        lines += [o.text for o in self.outcomes.values() if o.failure is not None]
        return "\n".join(lines)


def run_gate(
    fleet: Fleet,
    name: str,
    checks: Sequence[str],
    *,
    base_url: str | None = None,
    host_spec: str | None = None,
    api_key_env: str | None = None,
    timeout: float = 60.0,
    wait_ready: float = 0.0,
    local: LocalRender | None = None,
) -> GateRun:
    """The live and host ``checks`` (registered names, run in this order) on the service ``name`` of ``fleet``:
    what ``pytest live/ --endpoint NAME`` runs, with the same options. Bad files raise ``InputError``."""
    load_checks("live", "host")
    local = local or LocalRender()
    endpoint = connect(fleet, fleet.services[name], base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                       wait_ready=wait_ready, overrides=local.overrides, present=local.payload)
    gate = GateRun(endpoint)
    target: HostTarget | None = None
    try:
        for check_name in checks:
            check = REGISTRY[check_name]
            if check.kind == "live":
                subject = live_subjects(check, {name: endpoint})[0]
                outcome, record = run_live(check, subject)
                gate.elapsed += record.elapsed if record is not None else 0.0
                # a check that ran and found it could not judge says why, as a skipped one does
                judged = record is not None and outcome.outcome not in ("skipped", "not-judged")
                gate.notes[check_name] = live_note(record, outcome.failure) if judged else outcome.text
            else:
                target = target or host_target(fleet, endpoint, host_spec)
                subject = host_subjects(check, {name: target})[0]
                outcome, took = run_host(check, subject)
                gate.elapsed += took
                gate.notes[check_name] = host_note(target, check_name, outcome.failure,
                                                   outcome.text if outcome.outcome in ("skipped", "not-judged") else None)
            gate.outcomes[check_name] = outcome
    finally:
        endpoint.client.close()
    return gate


class LiveStack:
    """The live gate as the plugin calls it: the one name its one lazy import takes (``plugin._state.live_stack``), so
    that ``pytest seams/`` imports neither httpx nor testinfra and the plugin still calls typed functions. Each one is
    looked up in this module when it is called, as the plugin's imports inside its hooks did: a test replaces
    ``fleetgate.gate.live_note`` and the plugin calls the replacement (tests/test_plugin.py)."""

    connect = staticmethod(connect)
    local_render = LocalRender
    fmt_measured = staticmethod(fmt_measured)
    budget_tokens = BUDGET_TOKENS

    @staticmethod
    def host_target(fleet: Fleet, endpoint: LiveEndpoint, spec: str | None = None,
                    options: Mapping[str, Any] | None = None) -> HostTarget:
        return host_target(fleet, endpoint, spec, options)

    @staticmethod
    def run_live(check: Check[Any], subject: Subject) -> tuple[Outcome, CheckRecord | None]:
        return run_live(check, subject)

    @staticmethod
    def run_host(check: Check[Any], subject: Subject) -> tuple[Outcome, float]:
        return run_host(check, subject)

    @staticmethod
    def live_note(record: CheckRecord | None, failure: BaseException | None) -> str:
        return live_note(record, failure)

    @staticmethod
    def host_note(target: HostTarget, check: str, failure: BaseException | None, skip_reason: str | None) -> str:
        return host_note(target, check, failure, skip_reason)

    @staticmethod
    def summary_word(outcome: str) -> str:
        return summary_word(outcome)
