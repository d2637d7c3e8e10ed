"""The one failure type every check raises, and the one formatter that renders it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from fleetgate.secrets import scrub

__all__ = ["Deferred", "Failure", "FailureText", "format_failure", "waived_here"]


def _nothing_waived(service: str, code: str) -> bool:
    return False


_WAIVED: ContextVar[Callable[[str, str], bool]] = ContextVar("fleetgate_waived", default=_nothing_waived)


@contextmanager
def waived_here(waived: Callable[[str, str], bool]) -> Iterator[None]:
    """While a check runs: which (service, code) failures the run will waive (``fleetgate.runner.run``). Such a
    failure's deferred ``where`` (a re-render) is found only if its text is read; every other is found when the
    failure is built."""
    token = _WAIVED.set(waived)
    try:
        yield
    finally:
        _WAIVED.reset(token)


class Deferred:
    """A ``where`` that is costly to find (re-rendering a script), found only if a failure shows it.

    Checks name their ``where`` before they know whether they fail; most do not, so the search runs
    at most once, when a ``Failure`` is built or the value is formatted; a failure the run will waive
    (``waived_here``) leaves it to whoever reads the failure's text.
    """

    __slots__ = ("_compute", "_value")

    def __init__(self, compute: Callable[[], str]) -> None:
        self._compute: Callable[[], str] | None = compute
        self._value = ""

    def __str__(self) -> str:
        if self._compute is not None:
            compute, self._compute = self._compute, None
            try:
                self._value = compute()
            except Exception as exc:  # read late (a waived failure's text, in a report hook): never raise there
                self._value = f"(its file:line could not be found: {type(exc).__name__}: {exc})"
        return self._value

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"Deferred({str(self)!r})"


class Failure(AssertionError):
    """A check that did not hold, in the words an operator acts on.

    Fields are keyword-only so every raise site names what it fills in. ``where`` is a
    ``file:line`` or a URL; ``fix`` is the usual remedy, phrased as an instruction. ``code`` is the
    stable name of the branch that fired (``check/what-went-wrong``, one per raise site): what tests
    assert, users select and silence, and the JUnit report carries.
    """

    def __init__(
        self,
        *,
        service: str,
        check: str,
        observed: str,
        expected: str,
        where: str | Deferred,
        fix: str,
        code: str | None = None,
        cites: Sequence[str] = (),
        details: Sequence[str] = (),
    ) -> None:
        if code is not None and not code.startswith(f"{check}/"):
            raise ValueError(f"failure code {code!r} must start with its check's name {check!r} and a slash")
        self.service = service
        self.check = check
        self.code = code or check
        # A failure quotes what it saw (an argv, an env file's line, a response), which may hold a secret the fleet
        # never gave fleetgate: none is kept, so none reaches a report, JUnit or the terminal.
        self.observed = scrub(observed)
        self.expected = scrub(expected)
        # A failure the run will waive keeps a deferred where unread (``waived_here``): it is shown as its waiver.
        self._where: str | Deferred = where if _WAIVED.get()(service, self.code) else scrub(str(where))
        self.fix = scrub(fix)
        self.cites = tuple(cites)
        self.details = tuple(scrub(detail) for detail in details)
        self.incidents: tuple[str, ...] = ()
        """The catalogue's incidents this failure code guards (set by the registry when the check raises)."""
        super().__init__(FailureText(self) if isinstance(self._where, Deferred) else format_failure(self))

    @property
    def where(self) -> str:
        """The file:line or URL, scrubbed; a ``Deferred`` one is found here, when first read."""
        where = self._where
        if not isinstance(where, str):
            where = self._where = scrub(str(where))
        return where

    def reformat(self) -> None:
        """Make the failure's text again from its fields (cites or incidents set after it was built); a deferred
        ``where`` stays unread, its text made when first read."""
        self.args = (FailureText(self) if isinstance(self._where, Deferred) else format_failure(self),)

    def __reduce__(self) -> tuple[object, ...]:
        # xdist ships failures between processes; keyword-only __init__ needs this to pickle. A deferred where is
        # found first: what finds it stays in this process.
        fields = self.__dict__.copy()
        fields["_where"] = self.where
        return (_rebuild, (fields,))


class FailureText:
    """A failure's text (its ``args``), formatted when first read: building a failure finds no deferred ``where``."""

    __slots__ = ("_failure", "_text")

    def __init__(self, failure: Failure) -> None:
        self._failure = failure
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = format_failure(self._failure)
        return self._text

    def __repr__(self) -> str:
        return repr(str(self))


def _rebuild(fields: dict[str, object]) -> Failure:
    failure = Failure.__new__(Failure)
    failure.__dict__.update(fields)
    AssertionError.__init__(failure, format_failure(failure))
    return failure


def format_failure(failure: Failure) -> str:
    cites = f" [{', '.join(failure.cites)}]" if failure.cites else ""
    lines = [
        f"{failure.service}: {failure.code}{cites}",
        f"  where:    {failure.where}",
        f"  observed: {failure.observed}",
    ]
    lines += [f"            {detail}" for detail in failure.details]
    lines.append(f"  expected: {failure.expected}")
    lines.append(f"  fix:      {failure.fix}")
    incidents = getattr(failure, "incidents", ())
    if incidents:
        lines.append(f"  guards:   {', '.join(incidents)} (fleetgate incidents --id {incidents[0]})")
    return "\n".join(lines)
