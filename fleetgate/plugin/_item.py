"""The one parameter of every test of a check: a check on one subject, run through ``fleetgate.runner``.

A seam test takes ``seam``, a live test ``live``, a host test ``host_check``: each is a ``CheckParam`` whose
``run()`` passes, skips with the reason the check cannot judge its subject, or raises the check's ``Failure``.
A check that applies but lacks a fact is not judged: a skip whose reason begins ``not judged: `` (pytest counts it
among the skips; the per-service summary and the report count it apart), or a failure of that one line where the run
is strict (``--fleetgate-strict``, ini ``fleetgate_strict``).
A live or host check waits for its endpoint's readiness probe first, and its measurements are recorded for the
per-service summary. ``Seam``, ``Live`` and ``HostCheck`` are its names in the test modules' annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from fleetgate.checks import NOT_JUDGED, Check
from fleetgate.plugin._state import live_stack
from fleetgate.runner import Outcome, Subject, run

__all__ = ["NO_ENDPOINT", "SKIPPED_EXPLICITLY", "CheckParam", "HostCheck", "Live", "Seam"]

SKIPPED_EXPLICITLY = "live tests skipped: --skip-live was given (pass --endpoint NAME to check an endpoint)"
NO_ENDPOINT = "no endpoint to check: pass --endpoint NAME (repeatable, or --endpoint all)"


@dataclass
class CheckParam:
    """One check on one subject; ``check`` and ``subject`` are None for the one placeholder of a live or host test
    run without an endpoint (it skips, naming the flag)."""

    check: Check[Any] | None
    subject: Subject | None
    none_reason: str = NO_ENDPOINT
    """The placeholder's skip reason."""
    endpoint: Any = field(default=None, repr=False)
    """The ``LiveEndpoint`` a live or host check concerns."""
    record: Any = field(default=None, repr=False)
    """What a live check measured and spent (a ``CheckRecord``), once it ran."""
    elapsed: float = field(default=0.0, repr=False)
    skip_reason: str | None = None
    """Why it was not run, once it skipped (the host summary's note)."""
    strict: bool = False
    """A not-judged outcome fails (``--fleetgate-strict``) instead of skipping."""

    def __repr__(self) -> str:
        # pytest shows a failing test's arguments by repr (and truncates it only after building it): the generated
        # repr held the whole fleet, and building it was a tenth of a failing seam's report.
        return f"CheckParam({self.check.name if self.check is not None else None!r}, {self.name!r})"

    @property
    def name(self) -> str:
        """The test id: the subject's name (a service, a chain, the fleet), ``no-endpoint`` for the placeholder."""
        return self.subject.name if self.subject is not None else "no-endpoint"

    @property
    def value(self) -> Any:
        """What the check is called with (a rendered service, a chain, the fleet, an endpoint, a host)."""
        return self.subject.value if self.subject is not None else None

    @property
    def policy_off(self) -> bool:
        return self.subject is not None and self.subject.policy_off

    def run(self) -> None:
        __tracebackhide__ = True
        if self.check is None or self.subject is None:
            pytest.skip(self.none_reason)
        if self.check.kind == "live":
            outcome = self._live(self.check, self.subject)
        elif self.check.kind == "host":
            outcome, self.elapsed = live_stack().run_host(self.check, self.subject)
        else:
            outcome = run(self.check, self.subject)
        self._report(outcome)

    def _live(self, check: Check[Any], subject: Subject) -> Outcome:
        outcome, self.record = live_stack().run_live(check, subject)
        return outcome

    def _report(self, outcome: Outcome) -> None:
        __tracebackhide__ = True
        if outcome.failure is not None:
            if outcome.outcome == "waived" and outcome.waiver is not None and outcome.code is not None:
                # pytest builds a report of the exception, and a waived failure's is shown as its waiver's reason
                # (xfail): the failure's own text (a deferred where: a re-render) is left for who reads the outcome.
                outcome.failure.args = (f"{self.name}: {outcome.waiver.reason(outcome.code)}",)
            raise outcome.failure
        if outcome.outcome == "not-judged":
            self.skip_reason = line = self._named(outcome.text)
            if self.strict:
                pytest.fail(line, pytrace=False)
            pytest.skip(line)
        if outcome.outcome == "skipped":
            self.skip_reason = outcome.text
            # -rs lists reasons by file:line only: each names its subject.
            pytest.skip(outcome.text if outcome.text.startswith(f"{self.name} ") or self.check is None
                        or self.check.kind != "seam" else f"{self.name}: {outcome.text}")


    def _named(self, text: str) -> str:
        """A not-judged line that names its subject (``-rs`` lists reasons by file:line only), still beginning
        ``not judged: ``."""
        if self.name in text:
            return text
        return f"{NOT_JUDGED}{self.name}: {text.removeprefix(NOT_JUDGED)}"


Seam = CheckParam
Live = CheckParam
HostCheck = CheckParam
