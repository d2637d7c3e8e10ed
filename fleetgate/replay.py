"""Replay a live check's request by hand: the last request it made, as a ``curl`` command to paste.

``RequestLog.watching(client)`` records what a live check asks of its endpoint through the client's
public methods (``get``, ``post``, ``stream``) for the duration of the check; ``curl()`` writes one
request as a command line. The API key is written as ``$VARIABLE`` (the variable it was read from),
never as its value.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Request", "RequestLog", "curl"]


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    body: Mapping[str, Any] | None
    stream: bool
    timeout: float | None


@dataclass
class RequestLog:
    requests: list[Request] = field(default_factory=list)

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
                self.requests.append(Request(method, url_of(path), dict(body) if isinstance(body, Mapping) else None,
                                             stream, kwargs.get("timeout")))
                return original(path, *args, **kwargs)

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
