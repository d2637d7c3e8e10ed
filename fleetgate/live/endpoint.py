"""One running endpoint as the live checks see it: its contract, its client, and what was measured.

Every request goes through here, so the gate knows what it spent (generated tokens, seconds) and
what it measured (TTFT, prefill and decode rates, draft acceptance, cached tokens) per check. One module
for one object: the readiness probe, the bounds derived from the run's own rates, the budget and the failures
all read and write the same ``LiveEndpoint`` (the probe's requests are billed, bounded and halted like any
check's), so splitting it would split one object's state across modules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fleetgate.failure import Failure
from fleetgate.live.activity import Activity, source_for, watching
from fleetgate.live.client import Client, EndpointError, Reply, StreamReply, shorten
from fleetgate.live.contract import LiveContract
from fleetgate.live.dialects import Dialect
from fleetgate.live.metrics import RuleSelector, RuleThreshold, parse_metrics
from fleetgate.render.rendered import RenderedService

__all__ = ["BUDGET_TOKENS", "HEALTH", "OVERHEAD_FLOOR_S", "TEMPLATE_ALLOWANCE_TOKENS", "Baseline", "Bound", "CheckRecord",
           "Halt", "LiveEndpoint", "OutOfTime", "cached_tokens_of", "finish_reason_of", "fmt_measured", "message_of",
           "prompt_tokens_at_most", "timings_of", "usage_of"]

BUDGET_TOKENS = 1100
"""Generated tokens the whole gate may spend on one service."""

HEALTH = "live-health"
CHAT = "live-chat"
ALIAS = "live-alias"

OVERHEAD_FLOOR_S = 5.0
"""Seconds a request may spend outside the engine (network, proxy, queue) before the gate stops: far
above a healthy endpoint's milliseconds even on a loaded two-core machine, far below the 20 s of a
proxy that holds every request."""
NO_TIMINGS_BOUND_S = 15.0
"""Bound on a one-token request to an engine that does not report its own timings."""
RATE_MARGIN = 3.0
"""A whole request's bound (live-capacity, live-tool-calls) is the overhead floor plus this many times what its
tokens take at the prefill and decode rates the engine reported (timings) on this run's earlier answers: a loaded
machine lowers those rates, and the bound grows with them. --live-timeout stays the least a request waits (a
queue for a slot is no part of the engine's rates); the bound only extends it."""
REQUEST_CEILING_S = 600.0
"""No request waits longer than this (or --live-timeout, when that is longer), whatever the rates say."""
TEMPLATE_ALLOWANCE_TOKENS = 512
"""Tokens a chat template adds around the messages and tools it renders (role markers, a tool preamble)."""


def prompt_tokens_at_most(body: Mapping[str, Any]) -> int:
    """An upper bound on the prompt tokens of a chat request of ASCII text: a BPE token covers at least one
    character of what it encodes, so the JSON of the messages and tools, plus the template's allowance."""
    text = json.dumps([body.get("messages", []), body.get("tools", [])])
    return len(text) + TEMPLATE_ALLOWANCE_TOKENS


@dataclass(frozen=True)
class Bound:
    """How long one request may take, and why."""

    seconds: float
    why: str


class OutOfTime(Exception):
    """A request bounded by ``LiveEndpoint.bound`` that got no answer within it."""

    def __init__(self, url: str, bound: Bound, elapsed: float) -> None:
        self.url = url
        self.bound = bound
        self.elapsed = elapsed
        super().__init__(f"no answer within {bound.seconds:.1f} s")

    @property
    def observed(self) -> str:
        return f"no answer after {self.elapsed:.1f} s"

    @property
    def expected(self) -> str:
        return f"an answer within {self.bound.seconds:.1f} s: {self.bound.why}"


_MEASURES = (
    ("ttft_ms", "TTFT", "{:.0f} ms"),
    ("prefill_tok_s", "prefill", "{:.0f} tok/s"),
    ("decode_tok_s", "decode", "{:.0f} tok/s"),
    ("draft_acceptance", "draft acceptance", "{:.2f}"),
    ("cached_tokens", "cached", "{:.0f} tokens"),
    ("image_tokens", "image", "{:.0f} tokens"),
    ("refusal_ms", "over-window refusal", "{:.0f} ms"),
)


def fmt_measured(measured: Mapping[str, float]) -> str:
    """The measurements of a run in words, in a fixed order."""
    return ", ".join(
        f"{label} {fmt.format(measured[key])}" for key, label, fmt in _MEASURES if key in measured
    )


@dataclass
class CheckRecord:
    check: str
    spent_tokens: int = 0
    requests: int = 0
    elapsed: float = 0.0
    note: str = ""
    measured: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Baseline:
    """What the readiness probe measured before any check ran."""

    health_s: float
    request_s: float
    """Wall time of a one-token chat request."""
    engine_s: float | None
    """The part of it the engine reports it computed (timings), when it reports it."""
    prefill_tok_s: float | None

    @property
    def overhead_s(self) -> float | None:
        return self.request_s - self.engine_s if self.engine_s is not None else None


def _model_ids(body: Any) -> list[str]:
    """The ids a /v1/models answer lists (empty when it is not a model list)."""
    data = body.get("data") if isinstance(body, dict) else None
    return [e["id"] for e in data if isinstance(e, dict) and isinstance(e.get("id"), str)] if isinstance(data, list) else []


@dataclass(frozen=True)
class Halt:
    """Why no (further) check runs on an endpoint: one check carries the failure, the others skip."""

    check: str
    failure: Failure
    reason: str
    generating_only: bool = False
    """Only checks that generate are stopped (a server that cuts answers short): reading ones still run."""


@dataclass
class LiveEndpoint:
    """The subject of every live check."""

    name: str
    url: str
    contract: LiveContract
    dialect: Dialect
    client: Client
    config: RenderedService | None
    rules: tuple[RuleSelector, ...] = ()
    rule_thresholds: tuple[RuleThreshold, ...] = ()
    timeout: float = 60.0
    api_key_variable: str = "FLEETGATE_API_KEY"
    wait_ready: float = 0.0
    """Seconds the readiness probe waits for health to hold (0: one try)."""
    records: list[CheckRecord] = field(default_factory=list)
    halt: Halt | None = None
    baseline: Baseline | None = None
    _current: CheckRecord | None = None
    _prepared: bool = False
    _unbilled: int = 0
    _engine: dict[str, float] = field(default_factory=dict)
    """What the engine reported spending on this run's answers (timings): prompt_n, prompt_ms, predicted_n,
    predicted_ms, summed."""

    @property
    def engine(self) -> str:
        return self.contract.engine

    # -- readiness --------------------------------------------------------------------------------------

    def prepare(self) -> Halt | None:
        """Once per process, before any check: health holds (within --wait-ready), the gate's credentials
        are accepted, and a one-token request is not held outside the engine beyond its bound. Whatever
        fails here is said once, by the check it concerns; every other check is not run."""
        if not self._prepared:
            self._prepared = True
            self.halt = self._readiness()
        return self.halt

    def bill_preflight(self, record: CheckRecord) -> None:
        """The readiness probe's generated tokens, billed to the first check that runs after it."""
        record.spent_tokens += self._unbilled
        self._unbilled = 0

    def _health_path(self) -> str:
        path = self.dialect.health_path
        if path is None:
            path = "/health" if "/health" in self.contract.endpoints else "/v1/models"
        return path

    def _unauthorized(self, reply: Reply) -> Halt:
        key = "set" if self.client.has_api_key else "not set"
        failure = Failure(
            service=self.name,
            check=HEALTH,
            code=f"{HEALTH}/unauthorized",
            where=reply.url,
            observed=reply.brief(),
            expected="the gate's requests accepted with the API key",
            fix=f"put the endpoint's API key in ${self.api_key_variable} (now {key}): the contract's "
            "api_key_env names the variable, else --api-key-env VAR (default FLEETGATE_API_KEY)",
        )
        return Halt(HEALTH, failure, f"not run: {self.name} refused the gate's credentials (see {HEALTH})")

    def _readiness(self) -> Halt | None:
        path = self._health_path()
        deadline = time.monotonic() + max(self.wait_ready, 0.0)
        waited = time.monotonic()
        while True:
            try:
                reply: Reply | EndpointError = self.client.get(path, timeout=min(self.timeout, 10.0))
            except EndpointError as error:
                reply = error
            if isinstance(reply, Reply) and reply.status == 200:
                break
            if time.monotonic() >= deadline:
                return self._not_ready(path, reply, time.monotonic() - waited)
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
        assert isinstance(reply, Reply)
        shape = self.dialect.health_problem(path, reply.json, reply.text)
        if shape is not None:
            failure = Failure(
                service=self.name,
                check=HEALTH,
                code=f"{HEALTH}/not-engine-health",
                where=reply.url,
                cites=("C-L-1",),
                observed=f"HTTP 200 with {shorten(reply.text, 120)!r}" if reply.text.strip() else "HTTP 200, empty",
                expected=f"GET {path} answers as {self.engine} does: {shape}",
                fix="something other than the engine answers on this address (a login page, a proxy's own page, "
                "another service): point --base-url at the engine, or let the proxy pass health through",
            )
            return Halt(HEALTH, failure, f"not run: what answers {self.url} is not {self.name}'s engine "
                        f"(see {HEALTH})")
        health_s = reply.elapsed
        try:
            models = self.client.get("/v1/models", timeout=min(self.timeout, 15.0))
        except EndpointError:
            models = None
        if models is not None and models.status in (401, 403):
            return self._unauthorized(models)
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "Say yes."}],
            "max_tokens": 1,
            "temperature": 0,
            **self.thinking(False),
        }
        try:
            probe = self.client.post(
                "/v1/chat/completions", {"model": self.contract.alias or self.name, **body}
            )
        except EndpointError as error:
            return Halt(
                CHAT,
                self.unreachable(CHAT, error),
                f"not run: a one-token request to {self.name} got no answer (see {CHAT})",
            )
        if probe.status in (401, 403):
            return self._unauthorized(probe)
        if probe.rate_limited:
            return Halt(CHAT, self.rate_limited(CHAT, probe),
                        f"not run: {self.name} rate-limits the gate (see {CHAT})")
        if not probe.ok:
            alias = self.contract.alias or self.name
            served = _model_ids(models.json if models is not None else None)
            if served and alias not in served:
                # vLLM answers 404 for a model it does not serve (llama-server serves any name): every request
                # the gate would send names the declared alias, so live-alias says it once and nothing else runs
                failure = Failure(
                    service=self.name,
                    check=ALIAS,
                    code=f"{ALIAS}/not-listed",
                    where=probe.url,
                    observed=f"a request for {alias!r} got {probe.brief()}; /v1/models lists "
                    f"{', '.join(repr(s) for s in served)}",
                    expected=f"{alias!r} served",
                    fix="see live-alias",
                )
                return Halt(ALIAS, failure, f"not run: {self.name} does not serve {alias!r}, the model every "
                            f"request names (see {ALIAS})")
            return None  # every generating check shows the refusal in its own words
        slow = self._slow_probe(probe)
        if slow is not None:
            first = usage_of(probe.json).get("completion_tokens")
            if isinstance(first, int):
                self._unbilled += first  # the token of the probe sent again is billed below
            # Late on the gate's clock: asked once more while the engine is watched. Other requests ahead of it are
            # the endpoint's load, which each check's own bound then meets; an idle engine means something between
            # the gate and the engine holds every request.
            with self.watching_engine() as activity:
                try:
                    again = self.client.post(
                        "/v1/chat/completions", {"model": self.contract.alias or self.name, **body}
                    )
                except EndpointError as error:
                    return Halt(CHAT, self.unreachable(CHAT, error),
                                f"not run: a one-token request to {self.name} got no answer (see {CHAT})")
            if again.ok:
                probe = again
                slow = self._slow_probe(probe)
            if slow is not None:
                observed, expected = slow
                idle = activity.split(probe.elapsed)[0]
                if activity.seen and idle < OVERHEAD_FLOOR_S:
                    slow = None  # the engine's own queue: not something that holds every request
                elif activity.seen:
                    observed += (f"; asked again, the engine ({activity.source.path if activity.source else ''}) had "
                                 f"no request in progress or waiting for {idle:.1f} s of its {probe.elapsed:.1f} s")
                else:
                    observed += "; whether the engine was busy meanwhile cannot be read (no /metrics, no /slots)"
                slow = None if slow is None else (observed, expected)
        usage = usage_of(probe.json)
        if isinstance(usage.get("completion_tokens"), int):
            self._unbilled += usage["completion_tokens"]
        timings = timings_of(probe.json)
        self._observe(probe.json)
        engine_s = _engine_seconds(timings)
        rate = timings.get("prompt_per_second")
        self.baseline = Baseline(
            health_s=health_s,
            request_s=probe.elapsed,
            engine_s=engine_s,
            prefill_tok_s=float(rate) if isinstance(rate, int | float) and rate > 0 else None,
        )
        if slow is not None:
            observed, expected = slow
            failure = Failure(
                service=self.name,
                check=CHAT,
                code=f"{CHAT}/slower-than-bound",
                where=probe.url,
                observed=observed,
                expected=expected,
                fix="something between the gate and the engine holds every request (a proxy, a queue, "
                "a saturated host): fix that first; the gate stops here instead of blaming each check",
            )
            return Halt(CHAT, failure, f"not run: {self.name} is slower than its bound (see {CHAT})")
        return None

    def _slow_probe(self, probe: Reply) -> tuple[str, str] | None:
        """What was observed and expected where the readiness probe took longer than its bound; None within it."""
        engine_s = _engine_seconds(timings_of(probe.json))
        if engine_s is not None:
            bound = OVERHEAD_FLOOR_S + 2 * engine_s
            outside = probe.elapsed - engine_s
            if outside <= bound:
                return None
            return (f"a one-token request took {probe.elapsed:.1f} s, of which the engine reports "
                    f"{engine_s * 1000:.0f} ms (timings): {outside:.1f} s were spent outside the engine",
                    f"at most {bound:.1f} s outside the engine ({OVERHEAD_FLOOR_S:g} s + twice its own time)")
        bound = self.contract.ttft_s or NO_TIMINGS_BOUND_S
        if probe.elapsed <= bound:
            return None
        return (f"a one-token request took {probe.elapsed:.1f} s",
                f"at most {bound:.1f} s (contract ttft_s, else {NO_TIMINGS_BOUND_S:g} s)")

    def _not_ready(self, path: str, last: Reply | EndpointError, waited: float) -> Halt:
        if isinstance(last, EndpointError):
            return Halt(
                HEALTH,
                self.unreachable(HEALTH, last, cites=("C-L-1", "INC-48")),
                f"not run before health holds: {self.name} is unreachable (see {HEALTH})",
            )
        if last.status in (401, 403):
            return self._unauthorized(last)
        loading = last.status == 503
        waiting = f"after waiting {waited:.0f} s (--wait-ready)" if self.wait_ready > 0 else "on the first try"
        failure = Failure(
            service=self.name,
            check=HEALTH,
            code=f"{HEALTH}/loading" if loading else f"{HEALTH}/unhealthy",
            where=last.url,
            cites=("C-L-1",),
            observed=f"{last.brief()} {waiting}",
            expected=f"GET {path} answers 200 before any check runs",
            fix=(
                "the engine is still loading its model: pass --wait-ready SECONDS to wait for it "
                "(bounded), or run the gate after 'model loaded' in its log"
                if loading
                else "read the engine's log: a health answer other than 200 means it is up but not serving"
            ),
        )
        return Halt(HEALTH, failure, f"not run before health holds: {self.name} answered HTTP {last.status} "
                    f"(see {HEALTH})")

    # -- bookkeeping -------------------------------------------------------------------------------

    @contextmanager
    def recording(self, check: str) -> Iterator[CheckRecord]:
        record = CheckRecord(check)
        self._current = record
        start = time.monotonic()
        try:
            yield record
        finally:
            record.elapsed = time.monotonic() - start
            self._current = None
            self.records.append(record)

    def note(self, text: str) -> None:
        if self._current is not None:
            self._current.note = text

    def measure(self, key: str, value: float) -> None:
        if self._current is not None:
            self._current.measured[key] = value

    def _observe(self, reply_json: Any) -> None:
        """Add an answer's own timings to the run's rates."""
        timings = timings_of(reply_json)
        keys = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms")
        values = [timings.get(k) for k in keys]
        numbers = [float(v) for v in values if isinstance(v, int | float) and v >= 0]
        if len(numbers) == len(keys):
            prompt_n, prompt_ms, predicted_n, predicted_ms = numbers
            self._engine["prompt_n"] = self._engine.get("prompt_n", 0.0) + prompt_n
            self._engine["prompt_ms"] = self._engine.get("prompt_ms", 0.0) + prompt_ms
            if predicted_n >= 2:  # one token comes with the prefill's last step: its predicted_ms is no decode
                self._engine["predicted_n"] = self._engine.get("predicted_n", 0.0) + predicted_n
                self._engine["predicted_ms"] = self._engine.get("predicted_ms", 0.0) + predicted_ms

    def rates(self) -> tuple[float | None, float | None]:
        """Prefill and decode tok/s over every answer of this run whose timings the engine reported."""
        engine = self._engine

        def rate(tokens: str, ms: str) -> float | None:
            n, spent = engine.get(tokens, 0.0), engine.get(ms, 0.0)
            return n / spent * 1000 if n > 0 and spent > 0 else None

        return rate("prompt_n", "prompt_ms"), rate("predicted_n", "predicted_ms")

    def bound(self, prompt_tokens: int, max_tokens: int) -> Bound:
        """How long a request of ``prompt_tokens`` asking ``max_tokens`` may take: at least --live-timeout; longer
        where the rates this run measured say its tokens need longer (RATE_MARGIN over the floor); never past
        REQUEST_CEILING_S."""
        prefill, decode = self.rates()
        steps = max(max_tokens - 1, 0)  # the first token comes with the prefill
        if prefill is None or (steps and decode is None):
            missing = "prefill" if prefill is None else "decode"
            return Bound(self.timeout, f"--live-timeout {self.timeout:g} s (no {missing} rate reported yet in this "
                         "run)")
        own = prompt_tokens / prefill + (steps / decode if steps and decode else 0.0)
        derived = OVERHEAD_FLOOR_S + RATE_MARGIN * own
        decoding = f" and {steps} more generated at {decode:.0f} tok/s" if steps and decode else ""
        why = (f"{OVERHEAD_FLOOR_S:g} s + {RATE_MARGIN:g} x the {own:.1f} s that {prompt_tokens} prompt tokens at "
               f"{prefill:.0f} tok/s{decoding} take (the engine's rates on this run's earlier answers)")
        ceiling = max(self.timeout, REQUEST_CEILING_S)
        if derived <= self.timeout:
            return Bound(self.timeout, f"--live-timeout {self.timeout:g} s, longer than the {derived:.1f} s of "
                         f"{why}")
        if derived >= ceiling:
            return Bound(ceiling, f"the {ceiling:g} s ceiling, shorter than the {derived:.1f} s of {why}")
        return Bound(derived, why)

    def _spend(self, reply_json: Any) -> None:
        if self._current is None:
            return
        self._current.requests += 1
        usage = reply_json.get("usage") if isinstance(reply_json, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self._current.spent_tokens += usage["completion_tokens"]

    # -- requests -------------------------------------------------------------------------------------

    def _fail(
        self,
        check: str,
        *,
        code: str,
        observed: str,
        expected: str,
        fix: str,
        where: str | None = None,
        cites: tuple[str, ...] = (),
        details: tuple[str, ...] = (),
    ) -> Failure:
        """A failure of the client's own (``fleetgate.checks.TRANSPORT_CODES``), or of a branch the calling check
        declares and passes (``require_ok(code=...)``): the check's run refuses an undeclared one."""
        return Failure(
            service=self.name,
            check=check,
            code=f"{check}/{code}",
            where=where or self.url,
            observed=observed,
            expected=expected,
            fix=fix,
            cites=cites,
            details=details,
        )

    def require_ok(
        self,
        check: str,
        reply: Reply,
        *,
        expected: str = "200",
        fix: str = "see live-chat",
        cites: tuple[str, ...] = (),
        code: str = "refused",
    ) -> None:
        """Fail the check with the reply's status and body when the request did not succeed."""
        if reply.rate_limited:
            raise self.rate_limited(check, reply)
        if not reply.ok:
            raise self._fail(
                check, code=code, where=reply.url, cites=cites, observed=reply.brief(), expected=expected, fix=fix
            )

    def require_stream_ok(self, check: str, stream: StreamReply, *, expected: str, fix: str,
                          cites: tuple[str, ...] = ()) -> None:
        """Fail the check with the stream's status and error text when it was not answered with an event stream."""
        if stream.rate_limited:
            raise self._fail(
                check,
                code="rate-limited",
                where=stream.url,
                observed=f"HTTP {stream.status}: {shorten(stream.error_text, 160)}; Retry-After {stream.retry_after:g} s, "
                f"still after {stream.retries} retries within the request's bound",
                expected="an event stream once the endpoint's Retry-After has passed",
                fix="the endpoint, or a proxy in front of it, rate-limits the gate: run the gate when it is not saturated",
            )
        if stream.status != 200:
            raise self._fail(check, code="refused", where=stream.url, cites=cites,
                             observed=f"HTTP {stream.status}: {shorten(stream.error_text, 240)}", expected=expected, fix=fix)

    def rate_limited(self, check: str, reply: Reply) -> Failure:
        """A 429/503 with ``Retry-After`` that still stood after the retries the request's bound allowed."""
        return self._fail(
            check,
            code="rate-limited",
            where=reply.url,
            observed=f"{reply.brief()}; Retry-After {reply.retry_after:g} s, still after {reply.retries} "
            f"retr{'y' if reply.retries == 1 else 'ies'} within the request's {self.timeout:g} s bound",
            expected="an answer once the endpoint's Retry-After has passed",
            fix="the endpoint, or a proxy in front of it, rate-limits the gate: run the gate when it is not "
            "saturated, give the gate's key a limit that admits its ~20 requests, or raise --live-timeout so "
            "the waits fit",
        )

    def unreachable(self, check: str, error: EndpointError, *, cites: tuple[str, ...] = ()) -> Failure:
        fixes = {
            "down": "is the service running and listening on this address? (systemctl status / journalctl "
            "of its unit)",
            "timeout": "the endpoint accepted the connection but did not answer in time: a hung engine, a "
            "stuck slot, or a proxy in front of it; read its log",
            "not-json": "something other than the engine answers on this port, or the engine crashed "
            "mid-answer",
            "truncated": "the engine or a proxy cut the stream: read the engine log for a crash or a timeout",
            "protocol": "the endpoint does not speak the OpenAI HTTP API",
        }
        return Failure(
            service=self.name,
            check=check,
            code=f"{check}/{error.kind}",
            where=error.url,
            observed=f"{error.kind}: {error.message} (after {error.elapsed:.1f} s)",
            expected="an HTTP JSON answer within the bound",
            fix=fixes[error.kind],
            cites=cites,
        )

    def get(self, path: str, *, timeout: float | None = None) -> Reply:
        return self.client.get(path, timeout=timeout or min(self.timeout, 15.0))

    def get_json(self, check: str, path: str, *, cites: tuple[str, ...] = ()) -> Any:
        """GET a JSON document that must be there (a 2xx JSON answer), else fail the check."""
        try:
            reply = self.get(path)
            body = self.client.json_or_raise(reply)
        except EndpointError as error:
            raise self.unreachable(check, error, cites=cites) from None
        if not reply.ok:
            raise self._fail(
                check,
                code="not-served",
                where=reply.url,
                cites=cites,
                observed=reply.brief(),
                expected=f"GET {path} answers 200 with JSON",
                fix=f"{path} is part of this engine's surface; is this the engine the files declare?",
            )
        return body

    def chat(
        self,
        check: str,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
        forced: bool = False,
        bound: Bound | None = None,
    ) -> Reply:
        """POST /v1/chat/completions; ``max_tokens`` is mandatory (the gate's token budget), unless the
        request itself forces the answer's length (``forced``: a grammar that admits one string). With a
        ``bound`` (``LiveEndpoint.bound``) the request waits that long and raises ``OutOfTime`` past it."""
        if "max_tokens" not in body and not forced:
            raise ValueError("every generation request carries max_tokens")
        payload = {"model": self.contract.alias or self.name, **body}
        try:
            reply = self.client.post("/v1/chat/completions", payload,
                                     timeout=bound.seconds if bound is not None else timeout)
        except EndpointError as error:
            if bound is not None and error.kind == "timeout":
                raise OutOfTime(error.url, bound, error.elapsed) from None
            raise self.unreachable(check, error) from None
        if reply.ok and reply.json is None:
            raise self.unreachable(
                check,
                EndpointError(
                    reply.url,
                    "not-json",
                    f"HTTP {reply.status} with a body that is not JSON: {shorten(reply.text, 120)!r}",
                    reply.elapsed,
                ),
            )
        self._spend(reply.json)
        self._observe(reply.json)
        if reply.ok:
            self._cap(check, body, finish_reason_of(reply.json), usage_of(reply.json), reply.url)
        return reply

    def _cap(self, check: str, body: Mapping[str, Any], finish: str | None, usage: Mapping[str, Any], url: str) -> None:
        """Fail ``check`` when an answer stopped at ``length`` short of its ``max_tokens`` and of the window: the
        server cut it (vLLM applies the generation config's ``max_new_tokens`` as a ceiling on every request's
        max_tokens: vllm/entrypoints/utils.py, get_max_tokens). Every check after it would blame its own subject (a
        parser, a reasoning budget) for answers the cap cut, so the run halts there (``fleetgate.gate.run_live``)."""
        asked, got, prompt = body.get("max_tokens"), usage.get("completion_tokens"), usage.get("prompt_tokens")
        if finish != "length" or not isinstance(asked, int) or not isinstance(got, int) or got >= asked:
            return
        window = self.contract.window
        if window is not None and isinstance(prompt, int) and prompt + got >= window:
            return  # the window ended it, not a cap
        where_window = f" of a {window}-token window" if window is not None else ""
        fix = ("vLLM caps every request's max_tokens at the max_new_tokens of the model's generation_config.json "
               "(--generation-config auto, the default) or of --override-generation-config: drop it, or raise it above "
               "what clients ask" if self.engine == "vllm" else
               "something between the client and the model (the engine's own limit, a proxy) cuts answers short of "
               "the max_tokens they ask: find that limit and raise it above what clients ask")
        raise self._fail(check, code="server-cap", where=url,
                         observed=f"an answer that asked max_tokens {asked} stopped at {got} tokens with finish_reason "
                         f"'length', its {prompt} prompt tokens far inside{where_window or ' the window'}",
                         expected=f"finish_reason 'length' only at max_tokens ({asked}) or at the window",
                         fix=fix)

    def stream_chat(
        self, check: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> StreamReply:
        if "max_tokens" not in body:
            raise ValueError("every generation request carries max_tokens")
        payload = {"model": self.contract.alias or self.name, **body, "stream": True}
        try:
            reply = self.client.stream("/v1/chat/completions", payload, timeout=timeout)
        except EndpointError as error:
            raise self.unreachable(check, error) from None
        usage: Mapping[str, Any] = {}
        for event in reply.events:
            if isinstance(event, dict) and isinstance(event.get("usage"), dict):
                self._spend(event)
                usage = event["usage"]
                break
        for event in reversed(reply.events):
            if isinstance(event, dict) and isinstance(event.get("timings"), dict):
                self._observe(event)
                break
        finishes = [c.get("finish_reason") for e in reply.events if isinstance(e, dict)
                    for c in e.get("choices") or [] if isinstance(c, dict) and c.get("finish_reason")]
        if reply.status == 200 and finishes:
            self._cap(check, body, str(finishes[-1]), usage, reply.url)
        return reply

    def metrics(self, check: str) -> dict[str, float] | None:
        """The parsed /metrics, or None when the endpoint does not serve it (501/404)."""
        try:
            reply = self.get("/metrics")
        except EndpointError as error:
            raise self.unreachable(check, error) from None
        if not reply.ok:
            return None
        try:
            return parse_metrics(reply.text)
        except ValueError as exc:
            raise self._fail(
                check,
                code="metrics-unparsable",
                where=reply.url,
                observed=f"/metrics does not parse as Prometheus text: {exc}",
                expected="the Prometheus text exposition format",
                fix="something other than the engine answers /metrics",
            ) from None

    def sample(self, path: str, timeout: float) -> tuple[int, str, Any]:
        """One GET as the engine watchers read it (fleetgate.live.activity): status, text, JSON."""
        reply = self.client.get(path, timeout=timeout)
        return reply.status, reply.text, reply.json

    @contextmanager
    def watching_engine(self) -> Iterator[Activity]:
        """The engine's own count of requests in progress, sampled while the block runs (fleetgate.live.activity):
        whether a wait the gate saw was the engine's queue or something between them."""
        source = source_for(self.engine, self.dialect.has_props, self.sample)
        with watching(source, self.sample) as activity:
            yield activity

    def thinking(self, on: bool) -> dict[str, Any]:
        """Request fields that turn the template's thinking on or off (none for the generic subset)."""
        return dict(self.dialect.thinking_on if on else self.dialect.thinking_off)

    def where_flag(self, dest: str) -> str:
        """file:line of the setting behind a rendered flag, for failures about what the files declare."""
        config = self.config
        if config is None:
            return self.url
        if config.llama is not None:
            return str(config.where_flag(config.llama.use(dest)))
        if config.vllm is not None:
            return str(config.where_flag(config.vllm.use(dest)))
        return str(config.rendered.script)

    def where_contract(self, *keys: str) -> str:
        if self.config is None:
            return self.url
        return self.config.fleet.where("services", self.name, "contract", *keys)


def _engine_seconds(timings: Mapping[str, Any]) -> float | None:
    """What the engine reports spending on an answer (prefill and generation), None where it reports neither."""
    spent = [timings.get(k) for k in ("prompt_ms", "predicted_ms")]
    if not any(isinstance(v, int | float) for v in spent):
        return None
    return sum(float(v) for v in spent if isinstance(v, int | float)) / 1000


def message_of(reply_json: Any) -> Mapping[str, Any]:
    """choices[0].message of a chat completion (empty mapping when absent)."""
    if isinstance(reply_json, dict):
        choices = reply_json.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict):
                return message
    return {}


def finish_reason_of(reply_json: Any) -> str | None:
    if isinstance(reply_json, dict):
        choices = reply_json.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reason = choices[0].get("finish_reason")
            return str(reason) if reason is not None else None
    return None


def usage_of(reply_json: Any) -> Mapping[str, Any]:
    if isinstance(reply_json, dict) and isinstance(reply_json.get("usage"), dict):
        return reply_json["usage"]  # type: ignore[no-any-return]
    return {}


def cached_tokens_of(reply_json: Any) -> int | None:
    """usage.prompt_tokens_details.cached_tokens, else llama.cpp's timings.cache_n."""
    details = usage_of(reply_json).get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    timings = reply_json.get("timings") if isinstance(reply_json, dict) else None
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        return int(timings["cache_n"])
    return None


def timings_of(reply_json: Any) -> Mapping[str, Any]:
    if isinstance(reply_json, dict) and isinstance(reply_json.get("timings"), dict):
        return reply_json["timings"]  # type: ignore[no-any-return]
    return {}
