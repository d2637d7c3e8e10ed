"""The runner: which subjects a check runs on, and running a check on one of them. No pytest here.

The plugin (``fleetgate.plugin``) and the catalogue (``fleetgate.incidents``) both call it, so "which
subjects a check runs on" is decided in one place:

- a seam runs on every service of its engines (a skip with the reason where it cannot apply, or where the
  service did not render: ``serve-script-renders`` alone judges the attempt itself), on every timeout
  chain (a chain that holds a variable of a service that did not render skips naming it), or on the fleet;
  a seam with no subject at all in the fleet is one skip named ``fleet``, never an empty set; a seam whose
  policy the fleet does not keep is one skip named ``fleet``;
- a live check runs on every chosen endpoint, a host check on every chosen endpoint's host.

``run(check, subject)`` calls the check and says what came of it (an ``Outcome``); a failure cites the
check's rules when it names none of its own, and names the catalogue's incidents its code guards.
``run_seams`` runs every seam of a fleet in this process (what ``pytest seams/`` runs), ``reproduce`` a
catalogue entry's mutation (``tests/test_catalogue.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from fleetgate.checks import REGISTRY, Check, NotApplicable, load_checks
from fleetgate.failure import Failure, format_failure
from fleetgate.fleet import Fleet
from fleetgate.incidents import Entry, apply, guarding
from fleetgate.manifest import load_fleet
from fleetgate.policies import policy_off
from fleetgate.rendered import ServiceAttempt, attempt_services, run_attempts
from fleetgate.timeouts import ResolvedChain, resolve_chains

__all__ = [
    "RENDERS",
    "FleetInputs",
    "NotASeam",
    "Outcome",
    "SeamInputs",
    "Subject",
    "host_subjects",
    "live_subjects",
    "reproduce",
    "run",
    "run_seams",
    "seam_subjects",
]

RENDERS = "serve-script-renders"
"""The seam that judges a service's render itself: it runs on the attempt, rendered or not."""


@dataclass(frozen=True)
class Subject:
    """One subject of a check: its name (the test id), the value the check is called with, and why the check
    is not run on it (None: it runs)."""

    name: str
    value: Any
    skip_reason: str | None = None
    policy_off: bool = False
    """The skip is a policy the fleet does not keep (the plugin reports it once per policy, at fleet.toml)."""
    made_attempts: Callable[[], Mapping[str, ServiceAttempt] | None] | None = field(default=None, compare=False, repr=False)
    """A fleet seam's: the renders its run has made so far (None while none), which the check reads rather than
    rendering a service again (``fleetgate.rendered.run_attempt``)."""


@dataclass(frozen=True)
class Outcome:
    """One check on one subject: ``passed``, ``skipped`` (with its reason) or ``failed`` (with its failure)."""

    check: str
    subject: str
    outcome: str
    code: str | None = None
    text: str = ""
    failure: Failure | None = field(default=None, compare=False, repr=False)


class NotASeam(Exception):
    """A check that is not a seam was asked for its seam subjects (a live or host check in a seam test)."""


class SeamInputs(Protocol):
    """What a seam's subjects are chosen from: the fleet, every service's render attempt, the timeout chains.

    The plugin keeps them in its run state (each made once per run, its error too); ``FleetInputs`` makes them
    in this process. The renders and chains are asked for only by the checks that need them."""

    @property
    def fleet(self) -> Fleet: ...

    def attempts(self) -> Mapping[str, ServiceAttempt]: ...

    def chains(self) -> Sequence[ResolvedChain]: ...


class FleetInputs:
    """The seams' inputs of one fleet, made in this process once each (the catalogue's reproductions)."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    @property
    def fleet(self) -> Fleet:
        return self._fleet

    @cached_property
    def _attempts(self) -> dict[str, ServiceAttempt]:
        return attempt_services(self._fleet)

    def made_attempts(self) -> Mapping[str, ServiceAttempt] | None:
        """The renders, when they have been made; None before (nothing is rendered for asking)."""
        return self.__dict__.get("_attempts")

    @cached_property
    def _chains(self) -> list[ResolvedChain]:
        return chains_of(self._fleet, self._attempts)

    def attempts(self) -> Mapping[str, ServiceAttempt]:
        return self._attempts

    def chains(self) -> Sequence[ResolvedChain]:
        return self._chains


def chains_of(fleet: Fleet, attempts: Mapping[str, ServiceAttempt]) -> list[ResolvedChain]:
    """The fleet's timeout chains, resolved against the rendered services' variables."""

    def variables(name: str) -> dict[str, Any]:
        attempt = attempts[name]
        return dict(attempt.config.variables) if attempt.config else {}

    return resolve_chains(fleet, variables)


def _unrendered(chain: ResolvedChain, attempts: Mapping[str, ServiceAttempt]) -> str | None:
    """A chain that holds a variable of a service that did not render cannot be judged: its budget is unknown."""
    for ref in chain.chain.chain:
        attempt = attempts.get(ref.owner) if ref.owner is not None else None
        if attempt is not None and attempt.config is None:
            return f"{chain.name} holds {ref.owner}:{ref.variable}, and {ref.owner} did not render: see {RENDERS}[{ref.owner}]"
    return None


def seam_subjects(check: Check[Any], inputs: SeamInputs) -> list[Subject]:
    """Every subject the seam could concern: a subject the seam cannot judge is a skip, it never vanishes."""
    fleet = inputs.fleet
    off = policy_off(fleet, check.name)
    if off is not None:
        # A house rule the fleet does not keep: one skip for the whole fleet, naming how to turn it on.
        return [Subject("fleet", None, skip_reason=off, policy_off=True)]
    if check.subject == "timeout-chain":
        attempts = inputs.attempts()
        chains = [Subject(chain.name, chain, skip_reason=_unrendered(chain, attempts) or check.why_not(chain))
                  for chain in inputs.chains()]
        return chains or [Subject("fleet", None, skip_reason=(
            f"{fleet.path.name} declares no [[timeouts]] chain: declare the budgets that must nest"))]
    if check.subject == "fleet":
        return [Subject(fleet.name, fleet, skip_reason=check.why_not(fleet),
                        made_attempts=getattr(inputs, "made_attempts", None))]
    if check.kind != "seam" or check.subject != "service":
        raise NotASeam(f"check {check.name!r} is a {check.kind} check on {check.subject!r}, not a seam")
    subjects: list[Subject] = []
    for name, attempt in inputs.attempts().items():
        if check.engines is not None and attempt.service.engine not in check.engines:
            continue
        if check.on_attempt:
            subjects.append(Subject(name, attempt))
        elif attempt.config is None:
            subjects.append(Subject(name, None, skip_reason=f"{name} did not render: see {RENDERS}[{name}]"))
        else:
            subjects.append(Subject(name, attempt.config, skip_reason=check.why_not(attempt.config)))
    if not subjects:
        kind = f"{' or '.join(check.engines)} service" if check.engines else "service"
        subjects.append(Subject("fleet", None, skip_reason=f"the fleet declares no {kind}"))
    return subjects


def live_subjects(check: Check[Any], endpoints: Mapping[str, Any]) -> list[Subject]:
    """Every chosen endpoint (a ``LiveEndpoint``); one the check does not apply to is a skip that says so."""
    return [Subject(name, endpoint, skip_reason=check.why_not(endpoint)) for name, endpoint in endpoints.items()]


def host_subjects(check: Check[Any], targets: Mapping[str, Any]) -> list[Subject]:
    """Every chosen endpoint's host (a ``HostTarget``); one the check cannot judge is a skip naming why."""
    return [Subject(name, target, skip_reason=check.why_not(target)) for name, target in targets.items()]


def run(check: Check[Any], subject: Subject) -> Outcome:
    """Run ``check`` on ``subject``: passed, skipped (the reason) or failed (the failure, its code and its text).

    Any other exception is a bug of the check, and is raised as it is.
    """
    __tracebackhide__ = True
    if subject.skip_reason:
        return Outcome(check.name, subject.name, "skipped", text=subject.skip_reason)
    try:
        with run_attempts(subject.made_attempts):
            check(subject.value)
    except NotApplicable as reason:
        return Outcome(check.name, subject.name, "skipped", text=str(reason))
    except Failure as failure:
        if not failure.cites:
            # A failure that names no rule of its own cites the check's rules.
            failure.cites = check.cites
        # Every failure names the catalogue's incidents that its code guards.
        failure.incidents = guarding(failure.code)
        failure.args = (format_failure(failure),)
        return Outcome(check.name, subject.name, "failed", failure.code, str(failure), failure=failure)
    return Outcome(check.name, subject.name, "passed")


def run_seams(fleet_toml: Path, checks: Iterable[str] | None = None) -> list[Outcome]:
    """Every seam (or those named) on every subject it could concern, in this process: what ``pytest seams/`` runs,
    on the same subjects, with failure texts relative to the fleet's root as the plugin prints them."""
    load_checks("seam")
    inputs = FleetInputs(load_fleet(fleet_toml))
    wanted = set(checks) if checks is not None else None
    outcomes: list[Outcome] = []
    for check in sorted(REGISTRY.values(), key=lambda c: c.name):
        if check.kind != "seam" or (wanted is not None and check.name not in wanted):
            continue
        for subject in seam_subjects(check, inputs):
            outcome = run(check, subject)
            if outcome.failure is not None:
                outcome = replace(outcome, text=outcome.text.replace(f"{inputs.fleet.root}/", ""))
            outcomes.append(outcome)
    return outcomes


def reproduce(entry: Entry, fleet_dir: Path, workdir: Path) -> list[Outcome]:
    """Apply a mutation entry to a copy of the fleet and run every seam on it."""
    return run_seams(apply(entry, fleet_dir, workdir / "fleet"))
