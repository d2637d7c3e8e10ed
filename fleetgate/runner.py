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
check's rules when it names none of its own, and names the catalogue's incidents its code guards. The verdict is
the runner's, waivers included (``[[waivers]]`` in fleet.toml, each subject carries those that name it): a failure a
waiver covers is ``waived`` until the waiver's date, then fails again naming it; a waiver of a check that passes is
reported unused. The figures a check derives for reports are computed here too, with the outcome; one that cannot
be derived is a note on the outcome. The plugin maps the verdict to pytest's words (``waived`` is ``xfailed``) and
reads it through ``recorded``; the catalogue and ``run_seams`` read the outcomes themselves, so all three agree.
``run_seams`` runs every seam of a fleet in this process (what ``pytest seams/`` runs), ``reproduce`` a
catalogue entry's mutation (``tests/test_catalogue.py``).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol, overload

from fleetgate.checks import NOT_JUDGED, REGISTRY, Check, NotApplicable, NotJudged, load_checks
from fleetgate.errors import InputError
from fleetgate.failure import Failure, FailureText, format_failure, waived_here
from fleetgate.fleet import Fleet, Waiver
from fleetgate.incidents import Entry, apply, guarding
from fleetgate.manifest import load_fleet
from fleetgate.policies import policy_off
from fleetgate.render.rendered import Probe, RenderedService, Renderer, ServiceAttempt, attempt_services, run_attempts
from fleetgate.secrets import scrub
from fleetgate.timeouts import ResolvedChain, resolve_chains

__all__ = [
    "RENDERS",
    "TODAY_ENV",
    "FleetInputs",
    "NotASeam",
    "Outcome",
    "SeamInputs",
    "Subject",
    "WaiverUse",
    "chains_of",
    "host_subjects",
    "live_subjects",
    "plan_scope",
    "planned_probes",
    "planned_renderer",
    "recorded",
    "reproduce",
    "run",
    "run_seams",
    "seam_subjects",
    "waiver_day",
]

RENDERS = "serve-script-renders"
"""The seam that judges a service's render itself: it runs on the attempt, rendered or not."""
TODAY_ENV = "FLEETGATE_TODAY"
"""An ISO date that stands for today when waivers are judged (for rehearsing an expiry); default: today."""


def waiver_day() -> datetime.date:
    """The day waivers are judged on: ``FLEETGATE_TODAY`` when set, else today. A value that is no date raises a
    ``ValueError`` whose text is one line naming the variable."""
    value = os.environ.get(TODAY_ENV)
    if not value:
        return datetime.date.today()
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{TODAY_ENV}={value!r}: expected a date YYYY-MM-DD") from None


@dataclass(frozen=True)
class WaiverUse:
    """What one waiver of fleet.toml did to one outcome: ``applied`` (the failure is waived), ``expired`` (the
    failure counts again) or ``unused`` (the check passes)."""

    waiver: Waiver
    state: Literal["applied", "expired", "unused"]

    @property
    def where(self) -> str:
        return f"fleet.toml:{self.waiver.line}" if self.waiver.line else "fleet.toml"

    @property
    def note(self) -> str:
        """The report's ``waiver`` property."""
        if self.state == "expired":
            return f"expired: {self.waiver.describe()} ({self.where})"
        if self.state == "unused":
            return f"unused: {self.waiver.describe()} ({self.where}): the check passes; drop the waiver"
        return f"{self.waiver.describe()} ({self.where})"

    def reason(self, code: str) -> str:
        """Why a waived failure is expected (pytest's xfail reason)."""
        return f"{code} waived until {self.waiver.expires.isoformat()} ({self.where}): {self.waiver.reason}"

    def expiry(self, subject: str, code: str) -> str:
        """The line an expired waiver puts before its failure."""
        return (f"{subject}: {code}: the {self.waiver.describe()} expired on {self.waiver.expires.isoformat()} "
                f"({self.where}): the failure counts again")


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
    rendering a service again (``fleetgate.render.rendered.run_attempt``)."""
    waivers: tuple[Waiver, ...] = field(default=(), compare=False, repr=False)
    """The fleet's waivers that name this subject (``run`` judges the outcome with them)."""


class _Text:
    """``Outcome.text``: a string, or a failure's text made when first read (the string ``run`` would have made at
    once)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> str: ...

    @overload
    def __get__(self, obj: Outcome, owner: type | None = None) -> str: ...

    def __get__(self, obj: Outcome | None, owner: type | None = None) -> str:
        if obj is None:
            return ""  # the dataclass's default
        value = obj.__dict__[self._slot]
        if not isinstance(value, str):
            value = str(value)
            obj.__dict__[self._slot] = value
        return value

    def __set__(self, obj: Outcome, value: str | FailureText) -> None:
        obj.__dict__[self._slot] = value


def _text_as_stored(outcome: Outcome) -> str | FailureText:
    """``outcome``'s text without making it (for ``replace``, which reads every field it is not given)."""
    stored: str | FailureText = outcome.__dict__["_text"]
    return stored


@dataclass(frozen=True)
class Outcome:
    """One check on one subject: ``passed``, ``skipped`` (with its reason: the check does not apply), ``not-judged``
    (the check applies but lacks a fact; ``text`` is the one line that names what to declare, beginning
    ``not judged: ``), ``failed`` (with its failure) or ``waived`` (a failure that a waiver of fleet.toml covers until
    its date: its code, text and failure as a failure's)."""

    check: str
    subject: str
    outcome: str
    code: str | None = None
    text: _Text = _Text()
    failure: Failure | None = field(default=None, compare=False, repr=False)
    waiver: WaiverUse | None = None
    """The waiver that applied, expired (the failure counts again; ``text`` begins with it) or was not needed."""
    figures: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """What the check derived for reports (``Check.figures``), passed or failed."""
    notes: tuple[str, ...] = ()
    """What the run could not do besides the verdict (figures that could not be derived), one line each."""


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


_CHECKING: ContextVar[str | None] = ContextVar("fleetgate_checking", default=None)


def plan_scope() -> str | None:
    """The check this thread is running (its failure's text included), or None."""
    return _CHECKING.get()


def planned_probes(config: RenderedService, scope: object = None) -> list[Probe]:
    """The renders the seams that will judge ``config`` declare they will ask of it (``probes=``): the ones on by the
    fleet's policies that can judge it; for a scope (``plan_scope``: a check's name), that check's alone."""
    found: list[Probe] = []
    for check in [REGISTRY[scope]] if isinstance(scope, str) and scope in REGISTRY else list(REGISTRY.values()):
        if (check.probes is None or check.kind != "seam" or check.subject != "service" or check.on_attempt
                or policy_off(config.fleet, check.policy) is not None):
            continue
        try:
            if check.why_not(config) is None:
                found.extend(check.probes(config))
        except Exception:  # the check meets the same error when it runs, and says it there
            continue
    return found


def planned_renderer() -> Renderer:
    """A run's renderer that makes each service's declared probes together (``planned_probes``)."""
    return Renderer(planner=planned_probes, scope=plan_scope)


class FleetInputs:
    """The seams' inputs of one fleet, made in this process once each (the catalogue's reproductions)."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self.renderer = planned_renderer()
        """Every render of this run, the checks' probes included, made once and counted."""

    @property
    def fleet(self) -> Fleet:
        return self._fleet

    @cached_property
    def _attempts(self) -> dict[str, ServiceAttempt]:
        return attempt_services(self._fleet, renderer=self.renderer)

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


def _waived(subjects: list[Subject], fleet: Fleet | None) -> list[Subject]:
    """The subjects, each with the fleet's waivers that name it."""
    if fleet is None or not fleet.waivers:
        return subjects
    return [replace(s, waivers=tuple(w for w in fleet.waivers if w.service == s.name)) for s in subjects]


def seam_subjects(check: Check[Any], inputs: SeamInputs) -> list[Subject]:
    """Every subject the seam could concern: a subject the seam cannot judge is a skip, it never vanishes."""
    return _waived(_seam_subjects(check, inputs), inputs.fleet)


def _seam_subjects(check: Check[Any], inputs: SeamInputs) -> list[Subject]:
    fleet = inputs.fleet
    off = policy_off(fleet, check.policy)
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


def _fleet_of(value: Any) -> Fleet | None:
    """The fleet of a live or host subject: its rendered config's (an endpoint that did not render has none)."""
    fleet = getattr(getattr(value, "config", None), "fleet", None)
    return fleet if isinstance(fleet, Fleet) else None


def live_subjects(check: Check[Any], endpoints: Mapping[str, Any]) -> list[Subject]:
    """Every chosen endpoint (a ``LiveEndpoint``); one the check does not apply to is a skip that says so."""
    return [_waived([Subject(name, endpoint, skip_reason=check.why_not(endpoint))], _fleet_of(endpoint))[0]
            for name, endpoint in endpoints.items()]


def host_subjects(check: Check[Any], targets: Mapping[str, Any]) -> list[Subject]:
    """Every chosen endpoint's host (a ``HostTarget``); one the check cannot judge is a skip naming why."""
    return [_waived([Subject(name, target, skip_reason=check.why_not(target))], _fleet_of(target))[0]
            for name, target in targets.items()]


_RECORDS: ContextVar[list[Outcome] | None] = ContextVar("fleetgate_outcomes", default=None)


@contextmanager
def recorded() -> Iterator[list[Outcome]]:
    """Every outcome ``run`` gives inside the block, in order: how the plugin reads the verdict (and the figures) of
    the check its test ran, whatever ran it (a seam, a live check behind its readiness probe, a host check)."""
    outcomes: list[Outcome] = []
    token = _RECORDS.set(outcomes)
    try:
        yield outcomes
    finally:
        _RECORDS.reset(token)


def run(check: Check[Any], subject: Subject, *, today: datetime.date | None = None) -> Outcome:
    """Run ``check`` on ``subject``: passed, skipped (the reason), not-judged (the line naming what to declare),
    failed (the failure, its code and its text) or
    waived (a failure that one of ``subject.waivers`` covers on ``today``, by default ``waiver_day()``).

    Any other exception is a bug of the check, or a file it cannot read (``InputError``), and is raised as it is.
    """
    __tracebackhide__ = True
    outcome = _judged(_run(check, subject, today), subject.waivers, today)
    records = _RECORDS.get()
    if records is not None:
        records.append(outcome)
    return outcome


def _run(check: Check[Any], subject: Subject, today: datetime.date | None = None) -> Outcome:
    __tracebackhide__ = True
    token = _CHECKING.set(check.name)
    try:
        return _run_checking(check, subject, today)
    finally:
        _CHECKING.reset(token)


def _waived_now(subject: Subject, code: str, today: datetime.date | None) -> bool:
    """Whether ``_judged`` will waive a failure of ``code`` on ``subject`` (the first waiver that covers it, not
    expired)."""
    waiver = next((w for w in subject.waivers if w.covers(subject.name, code)), None)
    return waiver is not None and not waiver.expired(today or waiver_day())


def _run_checking(check: Check[Any], subject: Subject, today: datetime.date | None = None) -> Outcome:
    __tracebackhide__ = True
    if subject.skip_reason:
        reason = scrub(subject.skip_reason)
        return Outcome(check.name, subject.name, "not-judged" if reason.startswith(NOT_JUDGED) else "skipped", text=reason)
    try:
        with run_attempts(subject.made_attempts), waived_here(
                lambda service, code: service == subject.name and _waived_now(subject, code, today)):
            check(subject.value)
    except NotJudged as reason:
        return Outcome(check.name, subject.name, "not-judged", text=str(reason))
    except NotApplicable as reason:
        return Outcome(check.name, subject.name, "skipped", text=str(reason))
    except Failure as failure:
        if not failure.cites:
            # A failure that names no rule of its own cites the check's rules.
            failure.cites = check.cites
        # Every failure names the catalogue's incidents that its code guards.
        failure.incidents = guarding(failure.code)
        text: str | FailureText
        if _waived_now(subject, failure.code, today):
            # Shown as its waiver (pytest's xfail reason): its text, and a deferred where in it (a re-render), are
            # made when someone reads them, not for every waived failure of a run.
            failure.reformat()
            text = failure.args[0] if isinstance(failure.args[0], FailureText) else FailureText(failure)
        else:
            failure.args = (format_failure(failure),)
            text = str(failure)
        figures, notes = _figures(check, subject)
        return Outcome(check.name, subject.name, "failed", failure.code, text, failure=failure,
                       figures=figures, notes=notes)
    figures, notes = _figures(check, subject)
    return Outcome(check.name, subject.name, "passed", figures=figures, notes=notes)


def _figures(check: Check[Any], subject: Subject) -> tuple[Mapping[str, Any] | None, tuple[str, ...]]:
    """The check's figures for reports, and the note that says why they are missing when they cannot be derived.

    Figures are an extra: the verdict is the check's, so whatever keeps them from being derived (a file the ledger
    cannot read, a bug of the figures' own code) is said in one line and never changes the verdict."""
    if check.figures is None:
        return None, ()
    try:
        with run_attempts(subject.made_attempts):
            return dict(check.figures(subject.value)), ()
    except InputError as exc:
        return None, (f"{check.name}: no figures: {exc}",)
    except Exception as exc:
        said = " ".join(str(exc).split()) or "no message"
        return None, (f"{check.name}: no figures: {type(exc).__name__}: {said}",)


def _judged(outcome: Outcome, waivers: Sequence[Waiver], today: datetime.date | None) -> Outcome:
    """The outcome as the fleet's waivers make it: the first waiver that covers a failure's code waives it until its
    date (inclusive) and then fails it again, naming itself; a waiver of a check that passes is unused."""
    if not waivers:
        return outcome
    if outcome.outcome == "failed" and outcome.code is not None:
        waiver = next((w for w in waivers if w.covers(outcome.subject, outcome.code)), None)
        if waiver is None:
            return outcome
        if waiver.expired(today or waiver_day()):
            use = WaiverUse(waiver, "expired")
            return replace(outcome, waiver=use, text=f"{use.expiry(outcome.subject, outcome.code)}\n{outcome.text}")
        return replace(outcome, outcome="waived", waiver=WaiverUse(waiver, "applied"), text=_text_as_stored(outcome))
    if outcome.outcome == "passed":
        unused = next((w for w in waivers if w.service == outcome.subject and w.code.split("/", 1)[0] == outcome.check),
                      None)
        if unused is not None:
            return replace(outcome, waiver=WaiverUse(unused, "unused"))
    return outcome


def run_seams(fleet_toml: Path, checks: Iterable[str] | None = None, *, today: datetime.date | None = None) -> list[Outcome]:
    """Every seam (or those named) on every subject it could concern, in this process: what ``pytest seams/`` runs,
    on the same subjects, with failure texts relative to the fleet's root as the plugin prints them. Waivers are
    judged on ``today`` (by default ``waiver_day()``, read once)."""
    load_checks("seam")
    today = today or waiver_day()
    inputs = FleetInputs(load_fleet(fleet_toml))
    wanted = set(checks) if checks is not None else None
    outcomes: list[Outcome] = []
    for check in sorted(REGISTRY.values(), key=lambda c: c.name):
        if check.kind != "seam" or (wanted is not None and check.name not in wanted):
            continue
        for subject in seam_subjects(check, inputs):
            outcome = run(check, subject, today=today)
            if outcome.failure is not None:
                outcome = replace(outcome, text=outcome.text.replace(f"{inputs.fleet.root}/", ""))
            outcomes.append(outcome)
    return outcomes


def reproduce(entry: Entry, fleet_dir: Path, workdir: Path, *, today: datetime.date | None = None) -> list[Outcome]:
    """Apply a mutation entry to a copy of the fleet and run every seam on it (its waivers judged on ``today``)."""
    return run_seams(apply(entry, fleet_dir, workdir / "fleet"), today=today)
