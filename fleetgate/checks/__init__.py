"""The one registry of checks, each declaring its subject, when it cannot apply, and its failure codes.

A check is a plain typed function of one subject (a service's rendered config, a timeout chain, the fleet,
a live endpoint, an endpoint's host) that returns nothing when the contract holds and raises a ``Failure``
when it does not. The decorator of its subject's kind is its declaration, and the function's name its name
(``contract_pins`` is the check ``contract-pins``; ``name=`` only where an established name cannot be spelled so):

    @service_seam(cites=(...), summary="...", requires=_no_pins, engines=("llama.cpp",),
                  codes={"sampler-differs": "the argv's sampler default is not the contract's"})
    def contract_pins(config: RenderedService) -> None:
        ...
        raise contract_pins.fail(config, "sampler-differs", where=..., observed=..., expected=..., fix=...)

The decorated name is the ``Check`` (calling it judges a subject), so the function names its own failures.

- **Subject**: one factory per kind (``service_seam``, ``attempt_seam``, ``chain_seam``, ``fleet_seam``,
  ``live_check``, ``host_check``), so the type checker holds the function, ``requires`` and ``fail`` to the subject's type.
- **Engines**: a service seam's ``engines=`` is the one place that says which engines it is about: the services of
  other engines are not its subjects at all (``config.llama`` is set exactly for llama.cpp's services, ``config.vllm``
  for vLLM's), so no ``requires`` says it again.
- **Policy**: a house rule of one fleet names its policy (``fleetgate.policies``) on its declaration: ``policy=`` for
  a check that runs only under it, ``policy_codes={branch: policy}`` for a branch of a universal check that fires
  only under it (the check consults ``policy_on`` before that branch).
- **Applicability, one way**: ``requires(subject)`` is why the check cannot judge a subject (naming what to
  declare so that it can), or None. The runner (``fleetgate.runner``) turns a reason into a skip; a check that
  finds out only while it runs that it cannot see part of its subject raises ``NotApplicable`` with the reason,
  which the runner turns into the same skip. A check that applies but lacks a fact (a profile, a pinned release)
  is not judged: its reason begins ``NOT_JUDGED`` (a ``requires`` reason) or is a ``NotJudged`` (raised), and the
  runner's outcome is ``not-judged``, never a skip of a check that does not apply and never a failure.
- **A value the check needs**: where ``requires`` would only say that a subject lacks something the function then
  takes from it (the service's build script, its unit), ``@service_seam(...).needing(needs)`` declares both at once:
  ``needs(subject)`` returns the value, or ``Lacks(reason)``; the function is called with the subject and the value,
  already narrowed (no ``assert value is not None`` after a ``requires``). A check may use either form.
- **Codes**: every failure branch is declared with what fired (``codes``); ``fail`` refuses a branch the check
  did not declare, and the runner refuses a ``Failure`` whose code its check did not declare. The docs' code
  tables, the coverage gate and the catalogue read ``Check.codes``. Every live check also declares
  ``TRANSPORT_CODES``: the endpoint client's own failures (no answer, a refusal, a rate limit).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from fleetgate.failure import Deferred, Failure
from fleetgate.policies import POLICIES
from fleetgate.secrets import scrub

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet
    from fleetgate.host import HostTarget
    from fleetgate.live.endpoint import LiveEndpoint
    from fleetgate.render.rendered import Probe, RenderedService, ServiceAttempt
    from fleetgate.timeouts import ResolvedChain

__all__ = [
    "NOT_JUDGED",
    "REGISTRY",
    "TRANSPORT_CODES",
    "Check",
    "Declaration",
    "Lacks",
    "NotApplicable",
    "NotJudged",
    "UndeclaredCode",
    "attempt_seam",
    "chain_seam",
    "find_check",
    "fleet_seam",
    "get_check",
    "host_check",
    "live_check",
    "load_all",
    "load_checks",
    "policy_checks",
    "policy_codes",
    "service_seam",
]

Kind = Literal["seam", "live", "host"]
SubjectKind = Literal["service", "timeout-chain", "fleet", "endpoint", "host"]


class Named(Protocol):
    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Named)
N = TypeVar("N")


@dataclass(frozen=True)
class Lacks:
    """What a check's ``needs`` returns for a subject it cannot judge: why (what to declare so that it can)."""

    reason: str

TRANSPORT_CODES: Mapping[str, str] = {
    "down": "nothing answers at the endpoint's address: no connection",
    "timeout": "the endpoint took the connection but did not answer within the request's bound",
    "not-json": "the answer is not the JSON the OpenAI API sends: something else listens, or the engine crashed mid-answer",
    "truncated": "the answer stopped before its end: the engine or a proxy cut the stream",
    "protocol": "the answer does not speak HTTP as the OpenAI API does",
    "refused": "the endpoint answered the check's request with an error status",
    "rate-limited": "a 429 or 503 with Retry-After still stood after the retries the request's bound allowed",
    "not-served": "a document the check reads (/props, /v1/models) is not served as JSON with 200",
    "metrics-unparsable": "/metrics answers, but not in the Prometheus text format",
    "server-cap": "an answer stopped with finish_reason 'length' before the max_tokens asked and inside the window: the "
    "server caps generation (vLLM: max_new_tokens of the generation config); said once, the checks after it not run",
}
"""The endpoint client's own failures, which any live check that makes a request can raise (fleetgate.live)."""


class NotApplicable(Exception):
    """The check cannot judge this subject; the message names what to declare so that it can."""

    def __init__(self, reason: object = "") -> None:
        # a reason quotes what it could not judge (an argv, an env line): no secret of it is kept or shown
        super().__init__(scrub(str(reason)))


NOT_JUDGED = "not judged: "
"""How every not-judged reason begins: a ``requires`` reason that begins so is the runner's ``not-judged`` outcome too."""


class NotJudged(NotApplicable):
    """The check applies to this subject but lacks a fact to judge it (a build between recorded ones, a profile it
    cannot fetch, a shape it cannot read, a version nothing pins): "not judged", never a failure dressed as a
    finding and never a pass. The message names what to declare so that it can judge, and begins ``not judged: ``
    (added where the reason does not)."""

    def __init__(self, reason: object = "") -> None:
        text = str(reason)
        super().__init__(text if text.startswith(NOT_JUDGED) else f"{NOT_JUDGED}{text}")


class UndeclaredCode(Exception):
    """A check raised a failure code it does not declare: a bug of the check, never a verdict."""


@dataclass(eq=False)
class Check(Generic[S]):
    """One check: what it judges, when it cannot, the codes it may fail with, and (once registered) its function."""

    name: str
    kind: Kind
    subject: SubjectKind
    """``service``, ``timeout-chain`` or ``fleet`` (the repository as a whole) for seams; ``endpoint`` for live
    checks; ``host`` for host checks."""
    cites: tuple[str, ...]
    summary: str
    codes: Mapping[str, str]
    """Every failure code the check can raise (``check/branch``), with what fired."""
    requires: Callable[[S], str | None] | None = None
    """Why the check cannot judge a subject (what to declare so it can), or None when it can."""
    engines: tuple[str, ...] | None = None
    """A seam's engines: only their services are its subjects (known without rendering); None for any."""
    figures: Callable[[S], Mapping[str, Any]] | None = None
    """The figures the check derives for a subject, for reports (``fleetgate.report``): pass or fail."""
    on_attempt: bool = False
    """A seam that judges the render itself: it runs on every service's attempt, rendered or not."""
    reads_only: bool = False
    """A live check that generates nothing (health, the model list, /metrics): a server that cuts answers short
    (``server-cap``) does not stop it."""
    probes: Callable[[S], Sequence[Probe]] | None = None
    """The renders the check will ask of its subject (``config.probe``), declared so that the run's renderer makes
    them together, in one sandbox session per service, before the first is asked for: each must be exactly one the
    check asks (an ask nobody declared is still answered, by a session of its own)."""
    policy: str | None = None
    """The policy (``fleetgate.policies``) the check runs under: off unless the fleet keeps it; None for a check of
    every fleet."""
    policy_codes: Mapping[str, str] = field(default_factory=dict)
    """Codes of this universal check that fire only under a policy: code -> the policy's name."""
    func: Callable[[S], None] | None = field(default=None, repr=False)

    def register(self, func: Callable[[S], None]) -> Callable[[S], None]:
        """The decorator that gives the check its function and puts it in the registry."""
        existing = REGISTRY.get(self.name)
        # A module imported again (pytester, importlib.reload) registers its own checks again; two different
        # functions under one name is a bug.
        if existing is not None and existing.func is not None and existing.func.__qualname__ != func.__qualname__:
            raise ValueError(f"check {self.name!r} registered twice: {existing.func.__module__} and {func.__module__}")
        self.func = func
        REGISTRY[self.name] = self
        return func

    def needing(self, needs: Callable[[S], N | Lacks]) -> Callable[[Callable[[S, N], None]], Callable[[S], None]]:
        """The decorator that registers a function of the subject and of the value ``needs`` finds in it; ``needs``
        is the check's ``requires`` too (a ``Lacks`` is the reason the check cannot judge the subject)."""
        if self.requires is not None:
            raise ValueError(f"check {self.name!r} declares requires= and needs: one says when it cannot judge")

        def requires(subject: S) -> str | None:
            found = needs(subject)
            return found.reason if isinstance(found, Lacks) else None

        self.requires = requires

        def register(func: Callable[[S, N], None]) -> Callable[[S], None]:
            @functools.wraps(func)
            def judge(subject: S) -> None:
                __tracebackhide__ = True
                found = needs(subject)
                if isinstance(found, Lacks):
                    # a caller that did not ask why_not first (the runner does) gets the same reason, as the same outcome
                    raise NotJudged(found.reason) if found.reason.startswith(NOT_JUDGED) else NotApplicable(found.reason)
                func(subject, found)

            return self.register(judge)

        return register

    def why_not(self, subject: S) -> str | None:
        """None when the check can judge ``subject``; otherwise the reason it cannot (what to declare). A service of
        an engine the seam is not about is a reason too, for a caller that did not choose its subjects by engine."""
        if self.engines is not None:
            engine = getattr(getattr(subject, "service", None), "engine", None)
            if engine is not None and engine not in self.engines:
                return f"{subject.name} runs {engine}; {self.name} is about {', '.join(self.engines)}"
        return self.requires(subject) if self.requires is not None else None

    def code(self, branch: str) -> str:
        """The full code of one of the check's declared branches."""
        code = f"{self.name}/{branch}"
        if code not in self.codes:
            raise UndeclaredCode(f"check {self.name!r} does not declare the failure code {code!r}; it declares "
                                 f"{', '.join(sorted(self.codes))}")
        return code

    def fail(
        self,
        subject: S | str,
        branch: str,
        *,
        observed: str,
        expected: str,
        fix: str,
        where: str | Deferred | None = None,
        cites: Sequence[str] = (),
        details: Sequence[str] = (),
    ) -> Failure:
        """The failure of one declared branch on ``subject`` (or on the service named so, for a fleet-wide check).

        ``where`` defaults to the subject's URL for an endpoint; every other subject names its file:line."""
        if where is None:
            where = getattr(subject, "url", None)
            if where is None:
                raise ValueError(f"check {self.name!r}: a failure on {subject!r} needs a where")
        return Failure(service=subject if isinstance(subject, str) else subject.name, check=self.name,
                       code=self.code(branch), where=where, observed=observed, expected=expected, fix=fix,
                       cites=cites, details=details)

    def verify(self, failure: Failure) -> None:
        """Refuse a failure whose code this check does not declare (one built outside ``fail``)."""
        if failure.code not in self.codes:
            raise UndeclaredCode(f"check {self.name!r} raised the failure code {failure.code!r}, which it does not "
                                 f"declare; it declares {', '.join(sorted(self.codes))}")

    def __call__(self, subject: S) -> None:
        """Judge ``subject``: return when the contract holds, raise its ``Failure`` when it does not."""
        __tracebackhide__ = True
        if self.func is None:
            raise RuntimeError(f"check {self.name!r} is declared but has no registered function")
        try:
            self.func(subject)
        except Failure as failure:
            self.verify(failure)
            if not failure.cites:
                # A failure that names no rule of its own cites the check's rules.
                failure.cites = self.cites
                failure.reformat()
            raise


REGISTRY: dict[str, Check[Any]] = {}


class Declaration(Generic[S]):
    """What a factory returns: the decorator that makes the function it decorates a check, named after it."""

    def __init__(self, kind: Kind, subject: SubjectKind, codes: Mapping[str, str], name: str | None,
                 policy: str | None, policy_codes: Mapping[str, str] | None, fields: dict[str, Any]) -> None:
        self.kind, self.subject, self.codes, self.name, self.fields = kind, subject, codes, name, fields
        self.policy, self.policy_codes = policy, dict(policy_codes or {})

    def __call__(self, func: Callable[[S], None]) -> Check[S]:
        check = self.declare(func.__name__)
        check.register(func)
        return check

    def needing(self, needs: Callable[[S], N | Lacks]) -> Callable[[Callable[[S, N], None]], Check[S]]:
        """The declaration of a function of the subject and of the value ``needs`` finds in it (``Check.needing``)."""

        def declare(func: Callable[[S, N], None]) -> Check[S]:
            check = self.declare(func.__name__)
            check.needing(needs)(func)
            return check

        return declare

    def declare(self, function: str) -> Check[S]:
        """The check, named ``self.name`` or after ``function`` (``contract_pins``: ``contract-pins``)."""
        name = self.name if self.name is not None else function.replace("_", "-")
        # A live check's own description of a transport branch (live-metrics' not-served) wins over the client's.
        shared = TRANSPORT_CODES if self.kind == "live" else {}
        full = {f"{name}/{branch}": what for branch, what in {**shared, **self.codes}.items()}
        for code, what in full.items():
            if not what.strip():
                raise ValueError(f"check {name!r}: the failure code {code!r} declares no 'what fired'")
        for policy in [self.policy, *self.policy_codes.values()]:
            if policy is not None and policy not in POLICIES:
                raise ValueError(f"check {name!r}: no policy named {policy!r}; policies: {', '.join(sorted(POLICIES))}")
        undeclared = sorted(set(self.policy_codes) - set(self.codes))
        if undeclared:
            raise ValueError(f"check {name!r}: policy_codes names branches it does not declare: {undeclared}")
        return Check(name=name, kind=self.kind, subject=self.subject, codes=full, policy=self.policy,
                     policy_codes={f"{name}/{branch}": policy for branch, policy in self.policy_codes.items()},
                     **self.fields)


def service_seam(
    *,
    cites: tuple[str, ...],
    summary: str,
    codes: Mapping[str, str],
    name: str | None = None,
    requires: Callable[[RenderedService], str | None] | None = None,
    engines: tuple[str, ...] | None = None,
    figures: Callable[[RenderedService], Mapping[str, Any]] | None = None,
    probes: Callable[[RenderedService], Sequence[Probe]] | None = None,
    policy: str | None = None,
    policy_codes: Mapping[str, str] | None = None,
) -> Declaration[RenderedService]:
    """A seam on every rendered service (of ``engines``, when given)."""
    return Declaration("seam", "service", codes, name, policy, policy_codes,
                       {"cites": cites, "summary": summary, "requires": requires, "engines": engines,
                        "figures": figures, "probes": probes})


def attempt_seam(
    *,
    cites: tuple[str, ...],
    summary: str,
    codes: Mapping[str, str],
    name: str | None = None,
    policy: str | None = None,
    policy_codes: Mapping[str, str] | None = None,
) -> Declaration[ServiceAttempt]:
    """A seam on every service's render attempt, the services that did not render included: the render's own judge."""
    return Declaration("seam", "service", codes, name, policy, policy_codes,
                       {"cites": cites, "summary": summary, "on_attempt": True})


def chain_seam(
    *,
    cites: tuple[str, ...],
    summary: str,
    codes: Mapping[str, str],
    name: str | None = None,
    requires: Callable[[ResolvedChain], str | None] | None = None,
    policy: str | None = None,
    policy_codes: Mapping[str, str] | None = None,
) -> Declaration[ResolvedChain]:
    """A seam on every timeout chain fleet.toml declares, resolved against the rendered services."""
    return Declaration("seam", "timeout-chain", codes, name, policy, policy_codes,
                       {"cites": cites, "summary": summary, "requires": requires})


def fleet_seam(
    *,
    cites: tuple[str, ...],
    summary: str,
    codes: Mapping[str, str],
    name: str | None = None,
    requires: Callable[[Fleet], str | None] | None = None,
    policy: str | None = None,
    policy_codes: Mapping[str, str] | None = None,
) -> Declaration[Fleet]:
    """A seam on the repository as a whole."""
    return Declaration("seam", "fleet", codes, name, policy, policy_codes,
                       {"cites": cites, "summary": summary, "requires": requires})


def live_check(
    *,
    cites: tuple[str, ...],
    summary: str,
    codes: Mapping[str, str],
    name: str | None = None,
    requires: Callable[[LiveEndpoint], str | None] | None = None,
    reads_only: bool = False,
) -> Declaration[LiveEndpoint]:
    """A check of a running endpoint; it declares ``TRANSPORT_CODES`` besides its own. ``reads_only``: it generates
    nothing, so a server's cap on answers does not stop it."""
    return Declaration("live", "endpoint", codes, name, None, None,
                       {"cites": cites, "summary": summary, "requires": requires, "reads_only": reads_only})


def host_check(
    *,
    cites: tuple[str, ...],
    summary: str,
    codes: Mapping[str, str],
    name: str | None = None,
    requires: Callable[[HostTarget], str | None] | None = None,
) -> Declaration[HostTarget]:
    """A check of a chosen endpoint's host (its unit, process and memory, read through testinfra)."""
    return Declaration("host", "host", codes, name, None, None,
                       {"cites": cites, "summary": summary, "requires": requires})


def policy_checks(policy: str) -> tuple[str, ...]:
    """The checks that run only under ``policy``, every check module imported."""
    load_checks()
    return tuple(sorted(name for name, check in REGISTRY.items() if check.policy == policy))


def policy_codes(policy: str) -> tuple[str, ...]:
    """The codes of universal checks that fire only under ``policy``, every check module imported."""
    load_checks()
    return tuple(sorted(code for check in REGISTRY.values() for code, named in check.policy_codes.items()
                        if named == policy))


def get_check(name: str) -> Check[Any]:
    """The check named ``name``, every check module imported."""
    load_checks()
    return _registered(name)


def find_check(name: str) -> Check[Any]:
    """The check named ``name``, importing only the seam modules when it is a seam: the live and host modules
    (httpx, testinfra) are imported for a name the seams do not register."""
    load_checks("seam")
    if name not in REGISTRY:
        load_checks()
    return _registered(name)


def _registered(name: str) -> Check[Any]:
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


def load_all() -> None:
    """Import every check module (``seam_*``, ``live_*``, ``host_*``)."""
    load_checks()
