"""The one registry of checks.

A check is a plain typed function of one subject (a service's config, a timeout chain, a live
endpoint) that returns nothing when the contract holds and raises ``Failure`` when it does not.
A seam is parametrised over every subject it could concern (every service of the engines it names,
every timeout chain), with the subject's name as the test id, so a seam never vanishes from a run:
``requires`` says why a check cannot apply to a subject (naming what to declare), and the test skips
with that reason; a check that can see only part of its subject raises ``NotApplicable`` for the rest.
Live checks select their endpoints with ``applies``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fleetgate.failure import Failure, format_failure

__all__ = ["REGISTRY", "Check", "NotApplicable", "check", "find_check", "get_check", "load_checks"]

Kind = Literal["seam", "live", "host"]
F = TypeVar("F", bound=Callable[..., None])


class NotApplicable(Exception):
    """The check cannot judge this subject; the message names what to declare so that it can."""


@dataclass(frozen=True)
class Check:
    name: str
    kind: Kind
    subject: str
    """``service``, ``timeout-chain`` or ``fleet`` (the repository as a whole) for seams; ``endpoint`` for live
    checks; ``host`` for host checks."""
    cites: tuple[str, ...]
    summary: str
    func: Callable[[Any], None]
    applies: Callable[[Any], bool]
    engines: tuple[str, ...] | None = None
    """Engines the check can apply to at all (known without rendering); None for any."""
    figures: Callable[[Any], Mapping[str, Any]] | None = None
    """The figures the check derives for a subject, for reports (``fleetgate.report``): pass or fail."""
    requires: Callable[[Any], str | None] | None = None
    """Why the check cannot apply to a subject (what to declare so it can), or None when it can."""

    def why_not(self, subject: Any) -> str | None:
        """None when the check applies to ``subject``; otherwise the reason it cannot."""
        if self.requires is not None:
            return self.requires(subject)
        return None if self.applies(subject) else f"{self.name} does not apply to this subject"

    def __call__(self, subject: Any) -> None:
        __tracebackhide__ = True
        try:
            self.func(subject)
        except Failure as failure:
            if not failure.cites:
                # A failure that names no rule of its own cites the check's rules.
                failure.cites = self.cites
                failure.args = (format_failure(failure),)
            raise


REGISTRY: dict[str, Check] = {}


def _always(_: Any) -> bool:
    return True


def check(
    name: str,
    *,
    kind: Kind,
    subject: str,
    cites: tuple[str, ...],
    summary: str,
    applies: Callable[[Any], bool] = _always,
    engines: tuple[str, ...] | None = None,
    figures: Callable[[Any], Mapping[str, Any]] | None = None,
    requires: Callable[[Any], str | None] | None = None,
) -> Callable[[F], F]:
    if kind == "seam" and engines is not None:
        # A seam is about its engines' services only: another engine's service is a reason, like any other.
        selects = applies
        needs = requires if requires is not None or applies is _always else (
            lambda s: None if selects(s) else f"{name} does not apply to {getattr(s, 'name', 'this subject')}")
        applies = _always

        def requires(subject: Any) -> str | None:
            engine = getattr(getattr(subject, "service", None), "engine", None)
            if engine is not None and engine not in engines:
                return f"{getattr(subject, 'name', 'this service')} runs {engine}; {name} is about {', '.join(engines)}"
            return needs(subject) if needs is not None else None

    if requires is not None:
        if applies is not _always:
            raise ValueError(f"check {name!r}: give requires or applies, not both")
        reason = requires

        def applies(subject: Any) -> bool:
            return reason(subject) is None

    def register(func: F) -> F:
        existing = REGISTRY.get(name)
        # A module imported again (pytester, importlib.reload) re-registers its own checks; two
        # different functions under one name is a bug.
        if existing is not None and existing.func.__qualname__ != func.__qualname__:
            raise ValueError(f"check {name!r} registered twice: {existing.func.__module__} and {func.__module__}")
        REGISTRY[name] = Check(name=name, kind=kind, subject=subject, cites=cites, summary=summary,
                               func=func, applies=applies, engines=engines, figures=figures,
                               requires=requires)
        return func

    return register


def get_check(name: str) -> Check:
    """The check named ``name``, every check module imported."""
    load_checks()
    return _registered(name)


def find_check(name: str) -> Check:
    """The check named ``name``, importing only the seam modules when it is a seam: the live and host modules
    (httpx, testinfra) are imported for a name the seams do not register."""
    load_checks("seam")
    if name not in REGISTRY:
        load_checks()
    return _registered(name)


def _registered(name: str) -> Check:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no check named {name!r}; registered: {', '.join(sorted(REGISTRY))}") from None


def load_checks(*kinds: Kind) -> None:
    """Import the check modules of these kinds (``seam_*``, ``live_*``, ``host_*``; all when none is named):
    importing one registers its checks."""
    prefixes = tuple(f"{kind}_" for kind in kinds or ("seam", "live", "host"))
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith(prefixes):
            importlib.import_module(f"{__name__}.{module.name}")


def _load_all() -> None:
    """Import every check module (``seam_*``, ``live_*``, ``host_*``)."""
    load_checks()
