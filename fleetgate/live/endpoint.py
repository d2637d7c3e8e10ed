"""One running endpoint as the live checks see it: its contract, its client, and what was measured.

Every request goes through here, so the gate knows what it spent (generated tokens, seconds) and
what it measured (TTFT, prefill and decode rates, draft acceptance, cached tokens) per check.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fleetgate.config import ServiceConfig
from fleetgate.failure import Failure
from fleetgate.live.client import Client, EndpointError, Reply, StreamReply, shorten
from fleetgate.live.contract import LiveContract
from fleetgate.live.dialects import Dialect
from fleetgate.live.metrics import RuleSelector, parse_metrics

__all__ = ["BUDGET_TOKENS", "CheckRecord", "LiveEndpoint", "fmt_measured"]

BUDGET_TOKENS = 300
"""Generated tokens the whole gate may spend on one service."""


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


@dataclass
class LiveEndpoint:
    """The subject of every live check."""

    name: str
    url: str
    contract: LiveContract
    dialect: Dialect
    client: Client
    config: ServiceConfig | None
    rules: tuple[RuleSelector, ...] = ()
    timeout: float = 60.0
    records: list[CheckRecord] = field(default_factory=list)
    _current: CheckRecord | None = None

    @property
    def engine(self) -> str:
        return self.contract.engine

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

    def _spend(self, reply_json: Any) -> None:
        if self._current is None:
            return
        self._current.requests += 1
        usage = reply_json.get("usage") if isinstance(reply_json, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self._current.spent_tokens += usage["completion_tokens"]

    # -- requests -------------------------------------------------------------------------------------

    def fail(
        self,
        check: str,
        *,
        observed: str,
        expected: str,
        fix: str,
        where: str | None = None,
        cites: tuple[str, ...] = (),
        details: tuple[str, ...] = (),
    ) -> Failure:
        return Failure(
            service=self.name,
            check=check,
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
    ) -> None:
        """Fail the check with the reply's status and body when the request did not succeed."""
        if not reply.ok:
            raise self.fail(check, where=reply.url, cites=cites, observed=reply.brief(), expected=expected, fix=fix)

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
            raise self.fail(
                check,
                where=reply.url,
                cites=cites,
                observed=reply.brief(),
                expected=f"GET {path} answers 200 with JSON",
                fix=f"{path} is part of this engine's surface; is this the engine the files declare?",
            )
        return body

    def chat(self, check: str, body: Mapping[str, Any], *, timeout: float | None = None) -> Reply:
        """POST /v1/chat/completions; ``max_tokens`` is mandatory (the gate's token budget)."""
        if "max_tokens" not in body:
            raise ValueError("every generation request carries max_tokens")
        payload = {"model": self.contract.alias or self.name, **body}
        try:
            reply = self.client.post("/v1/chat/completions", payload, timeout=timeout)
        except EndpointError as error:
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
        return reply

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
        for event in reply.events:
            if isinstance(event, dict) and isinstance(event.get("usage"), dict):
                self._spend(event)
                break
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
            raise self.fail(
                check,
                where=reply.url,
                observed=f"/metrics does not parse as Prometheus text: {exc}",
                expected="the Prometheus text exposition format",
                fix="something other than the engine answers /metrics",
            ) from None

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
