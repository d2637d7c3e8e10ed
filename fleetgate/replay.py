"""Replay a live check's requests by hand, and keep what each was answered: the check's transcript.

``RequestLog.watching(client)`` records what a live check asks of its endpoint through the client's
public methods (``get``, ``post``, ``stream``) for the duration of the check, and what came back (the
reply, every event of a stream with its time, or the client's error); ``curl()`` writes one request as
a command line, ``transcript()`` the whole exchange as a JSON document. The API key is written as
``$VARIABLE`` (the variable it was read from), never as its value; the caller scrubs the text it writes
(``fleetgate.report.redact``) of every other secret.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Exchange", "Request", "RequestLog", "curl", "transcript"]


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    body: Mapping[str, Any] | None
    stream: bool
    timeout: float | None


@dataclass
class Exchange:
    """One request and what came of it: the client's reply (``Reply`` or ``StreamReply``), or its error."""

    request: Request
    reply: Any = None
    error: str | None = None


@dataclass
class RequestLog:
    requests: list[Request] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)

    @property
    def last(self) -> Request | None:
        return self.requests[-1] if self.requests else None

    @contextmanager
    def watching(self, client: Any) -> Iterator[RequestLog]:
        """Record every request ``client`` makes until the block ends (its methods are restored then).

        Only the methods the client has are watched (``get``, ``post``, ``stream``); a client with none
        of them is left alone and nothing is recorded.
        """
        kinds = {"get": ("GET", False), "post": ("POST", False), "stream": ("POST", True)}
        originals = {name: getattr(client, name) for name in kinds if callable(getattr(client, name, None))}

        def url_of(path: str) -> str:
            url = getattr(client, "url", None)
            return str(url(path)) if callable(url) else path

        def watch(name: str) -> Any:
            method, stream = kinds[name]
            original = originals[name]

            def wrapper(path: str, *args: Any, **kwargs: Any) -> Any:
                body = args[0] if args else kwargs.get("body")
                request = Request(method, url_of(path), dict(body) if isinstance(body, Mapping) else None,
                                  stream, kwargs.get("timeout"))
                exchange = Exchange(request)
                self.requests.append(request)
                self.exchanges.append(exchange)
                try:
                    exchange.reply = original(path, *args, **kwargs)
                except Exception as exc:
                    exchange.error = f"{type(exc).__name__}: {exc}"
                    raise
                return exchange.reply

            return wrapper

        for name in originals:
            setattr(client, name, watch(name))
        try:
            yield self
        finally:
            for name in originals:
                # The instance attribute goes; the class's method shows through again.
                delattr(client, name)


def curl(request: Request, *, key_env: str | None, timeout: float | None = None) -> str:
    """``curl ...`` that sends ``request`` again; the key as ``$key_env`` when that variable is set."""
    parts = ["curl", "-sS"]
    if request.stream:
        parts.append("-N")
    limit = request.timeout if request.timeout is not None else timeout
    if limit is not None:
        parts += ["--max-time", f"{limit:g}"]
    if request.method != "GET" or request.body is not None:
        parts += ["-X", request.method]
    parts.append(shlex.quote(request.url))
    header = ""
    if key_env and os.environ.get(key_env):
        # Double quotes: the shell expands the variable when the command is pasted.
        header = f' -H "Authorization: Bearer ${key_env}"'
    body = ""
    if request.body is not None:
        body = " -H 'Content-Type: application/json' -d " + shlex.quote(json.dumps(request.body, separators=(",", ":")))
    return " ".join(parts) + header + body


def _reply(reply: Any) -> dict[str, Any]:
    """What a reply said, as the client kept it (its key already scrubbed): status, time, body or stream events."""
    if reply is None:
        return {}
    if hasattr(reply, "events"):  # a StreamReply
        return {"status": reply.status, "elapsed_s": round(float(reply.elapsed), 4), "done": reply.done,
                "events": list(reply.events), "times_s": [round(float(t), 4) for t in reply.times],
                "after_done": reply.after_done, "error_text": reply.error_text, "retries": reply.retries}
    body = reply.json if getattr(reply, "json", None) is not None else getattr(reply, "text", None)
    return {"status": getattr(reply, "status", None), "elapsed_s": round(float(getattr(reply, "elapsed", 0.0)), 4),
            "body": body, "retries": getattr(reply, "retries", 0)}


def transcript(log: RequestLog, *, key_env: str | None, timeout: float | None = None,
               about: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every exchange of ``log`` in order: the request (method, URL, headers, body), the ``curl`` that sends it again,
    and the reply (a stream's every event with the seconds it came at) or the client's error. ``about`` (service,
    check, outcome, ...) heads the document. The key is ``$key_env`` in the headers and the replays; every other
    secret is the caller's to scrub from the text it writes."""
    keyed = bool(key_env and os.environ.get(key_env))
    entries = []
    for exchange in log.exchanges:
        request = exchange.request
        headers = {"Accept": "application/json"}
        if keyed:
            headers["Authorization"] = f"Bearer ${key_env}"
        if request.body is not None:
            headers["Content-Type"] = "application/json"
        entry: dict[str, Any] = {
            "request": {"method": request.method, "url": request.url, "headers": headers, "body": request.body,
                        "stream": request.stream},
            "replay": curl(request, key_env=key_env, timeout=timeout),
        }
        if exchange.error is not None:
            entry["error"] = exchange.error
        else:
            entry["stream" if request.stream else "response"] = _reply(exchange.reply)
        entries.append(entry)
    return {**dict(about or {}), "exchanges": entries}
