"""The live gate's HTTP client: every call has a timeout, every answer is kept as evidence.

An endpoint that is down, hangs, answers garbage or truncates a stream raises ``EndpointError`` with
the URL, what happened and how long it took; an HTTP error status is not an exception (a refusal is
often the contract). The API key goes in the ``Authorization`` header only and is scrubbed from
everything the client keeps, so no failure message can carry it.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import httpx

__all__ = ["RETRY_STATUSES", "Client", "EndpointError", "Reply", "StreamReply", "retry_after", "shorten"]

Kind = Literal["down", "timeout", "not-json", "truncated", "protocol"]
REDACTED = "***"


class EndpointError(Exception):
    """The endpoint did not answer as an HTTP JSON API does."""

    def __init__(self, url: str, kind: Kind, message: str, elapsed: float) -> None:
        self.url = url
        self.kind = kind
        self.message = message
        self.elapsed = elapsed
        super().__init__(f"{url}: {message} (after {elapsed:.1f} s)")


@dataclass(frozen=True)
class Reply:
    url: str
    status: int
    text: str
    """The body, with the API key scrubbed."""
    json: Any
    """The parsed body; None when it is not JSON."""
    elapsed: float
    retry_after: float | None = None
    """The ``Retry-After`` seconds of a 429/503 that still stood after the retries the bound allowed."""
    retries: int = 0
    """How many times a 429/503 with ``Retry-After`` was waited out and the request sent again."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def rate_limited(self) -> bool:
        """The endpoint (or something in front of it) still asks the gate to come back later."""
        return self.status in RETRY_STATUSES and self.retry_after is not None

    def error_message(self) -> str:
        """The engine's error text (OpenAI shape ``{"error": {"message": ...}}``), else the body."""
        body = self.json
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])
            if isinstance(error, str):
                return error
            if isinstance(body.get("message"), str):
                return str(body["message"])
            if isinstance(body.get("detail"), str):
                return str(body["detail"])
        return self.text[:300]

    def brief(self) -> str:
        """``HTTP 400: message`` for failure messages."""
        return f"HTTP {self.status}: {shorten(self.error_message(), 240)}"


@dataclass
class StreamReply:
    url: str
    status: int
    events: list[Any] = field(default_factory=list)
    """Parsed ``data:`` payloads in order (``"[DONE]"`` kept as the string)."""
    times: list[float] = field(default_factory=list)
    """Seconds from the request to each event."""
    done: bool = False
    after_done: int = 0
    """Events that arrived after ``[DONE]``."""
    error_text: str = ""
    elapsed: float = 0.0
    retry_after: float | None = None
    retries: int = 0

    @property
    def rate_limited(self) -> bool:
        return self.status in RETRY_STATUSES and self.retry_after is not None


RETRY_STATUSES = (429, 503)
MAX_RETRIES = 3
"""A 429 or 503 with ``Retry-After`` is waited out and sent again at most this often, and only while the wait
fits in the request's own bound: a rate limit that persists is then said as such, not as a refusal."""


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date: RFC 9110 10.2.3), or None."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Client:
    """One endpoint's base URL, bounded timeouts and optional API key."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._api_key = api_key or None
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # No keep-alive: an engine may close an idle connection just as the next request reuses it, and
        # a gate must not read that race as an outage. A loopback connect costs nothing.
        self._http = httpx.Client(
            headers=headers, follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0)
        )

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, api_key={'set' if self._api_key else 'unset'})"

    @property
    def has_api_key(self) -> bool:
        return self._api_key is not None

    def close(self) -> None:
        self._http.close()

    def url(self, path: str) -> str:
        return self.base_url + path

    def scrub(self, text: str) -> str:
        return text.replace(self._api_key, REDACTED) if self._api_key else text

    def _down(self, url: str, exc: httpx.TransportError, start: float) -> EndpointError:
        reason = self.scrub(str(exc)) or type(exc).__name__
        return EndpointError(url, "down", f"cannot connect: {reason}", time.monotonic() - start)

    def _timeouts(self, timeout: float | None) -> httpx.Timeout:
        total = self.timeout if timeout is None else timeout
        return httpx.Timeout(total, connect=min(self.connect_timeout, total))

    def get(self, path: str, *, timeout: float | None = None) -> Reply:
        return self._request("GET", path, None, timeout)

    def post(self, path: str, body: Mapping[str, Any], *, timeout: float | None = None) -> Reply:
        return self._request("POST", path, body, timeout)

    def _request(
        self, method: str, path: str, body: Mapping[str, Any] | None, timeout: float | None
    ) -> Reply:
        url = self.url(path)
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        retries = 0
        while True:
            remaining = max(limit - (time.monotonic() - start), 0.001)
            attempt = time.monotonic()
            try:
                response = self._http.request(method, url, json=body, timeout=self._timeouts(remaining))
            except httpx.TimeoutException:
                raise EndpointError(
                    url, "timeout", f"no answer within the {limit:.0f} s bound", time.monotonic() - start
                ) from None
            except httpx.TransportError as exc:
                raise self._down(url, exc, start) from None
            wait = self._wait(
                response.status_code, retry_after(response.headers.get("retry-after")), start, limit, retries
            )
            if wait is None:
                break
            time.sleep(wait)
            retries += 1
        elapsed = time.monotonic() - attempt  # the answer's own time: a Retry-After wait is no part of it
        text = self.scrub(response.text)
        try:
            parsed = json.loads(text) if text.strip() else None
        except ValueError:
            parsed = None
        return Reply(
            url=url,
            status=response.status_code,
            text=text,
            json=parsed,
            elapsed=elapsed,
            retry_after=retry_after(response.headers.get("retry-after"))
            if response.status_code in RETRY_STATUSES
            else None,
            retries=retries,
        )

    @staticmethod
    def _wait(status: int, seconds: float | None, start: float, limit: float, retries: int) -> float | None:
        """Seconds to wait before sending again; None when the answer stands (no retry asked, or none left)."""
        if status not in RETRY_STATUSES or seconds is None or retries >= MAX_RETRIES:
            return None
        if time.monotonic() - start + seconds >= limit:
            return None  # the wait does not fit in the request's bound: the rate limit stands
        return seconds

    def json_or_raise(self, reply: Reply) -> Any:
        """The JSON body of a 2xx answer; a 2xx that is not JSON is garbage."""
        if reply.ok and reply.json is None:
            raise EndpointError(
                reply.url,
                "not-json",
                f"HTTP {reply.status} with a body that is not JSON: {shorten(reply.text, 120)!r}",
                reply.elapsed,
            )
        return reply.json

    def stream(self, path: str, body: Mapping[str, Any], *, timeout: float | None = None) -> StreamReply:
        """POST and read a server-sent event stream to its end, within the bound as a whole."""
        url = self.url(path)
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        result = StreamReply(url=url, status=0)
        while True:
            result = self._stream_once(url, body, start, limit, result.retries)
            wait = self._wait(result.status, result.retry_after, start, limit, result.retries)
            if wait is None:
                return result
            time.sleep(wait)
            result.retries += 1

    def _stream_once(self, url: str, body: Mapping[str, Any], start: float, limit: float, retries: int) -> StreamReply:
        result = StreamReply(url=url, status=0, retries=retries)
        remaining = max(limit - (time.monotonic() - start), 0.001)
        deadline = start + limit
        start = time.monotonic()  # this attempt's times: a wait for Retry-After is no part of the stream's TTFT
        try:
            with self._http.stream("POST", url, json=body, timeout=self._timeouts(remaining)) as response:
                result.status = response.status_code
                if response.status_code != 200:
                    result.error_text = self.scrub(response.read().decode("utf-8", "replace"))
                    if response.status_code in RETRY_STATUSES:
                        result.retry_after = retry_after(response.headers.get("retry-after"))
                    result.elapsed = time.monotonic() - start
                    return result
                for data in _sse_data(response.iter_lines(), deadline=deadline, url=url, start=start):
                    now = time.monotonic() - start
                    if result.done:
                        result.after_done += 1
                        continue
                    if data == "[DONE]":
                        result.done = True
                        result.events.append(data)
                        result.times.append(now)
                        continue
                    try:
                        result.events.append(json.loads(self.scrub(data)))
                    except ValueError:
                        raise EndpointError(
                            url,
                            "not-json",
                            f"event {len(result.events) + 1} of the stream is "
                            f"not JSON: {shorten(self.scrub(data), 120)!r}",
                            now,
                        ) from None
                    result.times.append(now)
        except httpx.TimeoutException:
            raise EndpointError(
                url,
                "timeout",
                f"the stream stalled: {len(result.events)} event(s), then nothing "
                f"within the {limit:.0f} s bound",
                time.monotonic() - start,
            ) from None
        except httpx.RemoteProtocolError:
            raise EndpointError(
                url,
                "truncated",
                f"the connection closed mid-stream after {len(result.events)} event(s), without [DONE]",
                time.monotonic() - start,
            ) from None
        except httpx.TransportError as exc:
            raise self._down(url, exc, start) from None
        result.elapsed = time.monotonic() - start
        return result


def _sse_data(lines: Iterator[str], *, deadline: float, url: str, start: float) -> Iterator[str]:
    """The ``data:`` payloads of an event stream (multi-line data joined), bounded by a deadline."""
    buffer: list[str] = []
    for line in lines:
        if time.monotonic() > deadline:
            raise EndpointError(
                url, "timeout", "the stream did not finish within its bound", time.monotonic() - start
            )
        if not line.strip():
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith(":"):
            continue
        if line.startswith("data:"):
            buffer.append(line[5:].lstrip(" "))
        elif line.startswith("error:"):
            buffer.append(line)
    if buffer:
        yield "\n".join(buffer)
