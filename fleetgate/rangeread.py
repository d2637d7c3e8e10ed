"""Reading the head of a remote file by HTTP range requests: bounded, one connection, resumable.

``fleetgate profile URL`` needs a GGUF's header (and vLLM's ledger a safetensors header), never its
tensors. ``RangeReader`` reads a file front to back in growing ranges (``Range: bytes=a-b``) over one
keep-alive connection at a time, with a timeout on every socket operation and a deadline for the whole
read. It never holds more than one window of the file, and never reads past ``limit`` bytes from the
start (the header cap): a caller that asks for more gets one ``InputError`` line, before anything is
allocated for it.

- A server that ignores ``Range`` and answers ``200`` with the whole body is read as a stream, only as far
  as the header goes, and the connection is then closed: the body is never drained.
- A connection that drops (a reset, a short body, a timeout) is opened again and the read resumes at the
  first byte not yet held (``retries`` times).
- Redirects (the Hugging Face resolve URL answers 302 to its CDN) are followed, at most five.
- ``hf://OWNER/REPO/PATH`` is ``{HF_ENDPOINT or https://huggingface.co}/OWNER/REPO/resolve/main/PATH``
  (``hf://OWNER/REPO@REVISION/PATH`` for another revision); ``HF_TOKEN`` is sent to that endpoint's host
  only, never to a redirect's, and never printed.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import time
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from fleetgate.errors import InputError

__all__ = ["DEFAULT_LIMIT", "RangeReader", "RemoteError", "hf_url", "is_remote", "resolve_url", "split_parts"]

DEFAULT_LIMIT = 64 << 20
"""No header is read past 64 MiB (a 262k-token vocabulary's header is about 6 MiB)."""
FIRST_RANGE = 256 << 10
MAX_RANGE = 8 << 20
MAX_REDIRECTS = 5
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class RemoteError(InputError):
    """An ``InputError`` about a URL: ``str()`` is ``URL: message`` on one line."""

    def __init__(self, url: str, message: str) -> None:
        self.url = url
        super().__init__(url, None, message)

    def __str__(self) -> str:
        return f"{self.url}: {self.message}"


def is_remote(source: str) -> bool:
    return source.startswith(("hf://", "http://", "https://"))


def hf_url(source: str) -> str:
    """``hf://OWNER/REPO[@REVISION]/PATH`` -> the Hub's resolve URL (``HF_ENDPOINT`` as huggingface_hub reads it)."""
    rest = source[len("hf://"):]
    parts = rest.split("/", 2)
    if len(parts) < 3 or not all(parts):
        raise RemoteError(source, "expected hf://OWNER/REPO/FILE.gguf (or hf://OWNER/REPO@REVISION/FILE.gguf)")
    owner, repo, path = parts
    repo, _, revision = repo.partition("@")
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{endpoint}/{owner}/{repo}/resolve/{quote(revision or 'main', safe='')}/{quote(path)}"


def resolve_url(source: str) -> str:
    """The http(s) URL a source names (``hf://`` resolved); anything else is one line."""
    url = hf_url(source) if source.startswith("hf://") else source
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(source, "expected an http(s) URL or hf://OWNER/REPO/FILE")
    return url


def split_parts(source: str) -> list[str]:
    """Every part of a split GGUF (``NAME-00001-of-00003.gguf``) named by any one part; else the source."""
    head, sep, tail = source.rpartition("/")
    match = _SPLIT.match(tail)
    if not match:
        return [source]
    count = int(match.group("count"))
    if not 1 <= count <= 9999:
        raise RemoteError(source, f"a split of {count} parts; expected 1 to 9999")
    return [f"{head}{sep}{match.group('stem')}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


@dataclass
class _Response:
    conn: http.client.HTTPConnection
    response: http.client.HTTPResponse
    start: int
    """The file offset of the response body's first byte."""
    remaining: int | None
    """Body bytes not yet read (None: unknown)."""


class RangeReader:
    """A remote file read front to back, a window at a time.

    ``read(n)`` returns the next ``n`` bytes (fewer only at the file's end); ``skip(n)`` steps over bytes
    without keeping them (a range server is not asked for them). ``position`` is the offset from the start,
    ``size`` the file's length once a response has said it, ``transferred`` the body bytes received.
    """

    def __init__(self, source: str, *, limit: int = DEFAULT_LIMIT, timeout: float = 20.0, deadline: float = 300.0,
                 retries: int = 3) -> None:
        self.source = source
        self.url = resolve_url(source)
        self.limit = limit
        self.timeout = timeout
        self.deadline = time.monotonic() + deadline
        self.retries = retries
        self.size: int | None = None
        self.position = 0
        self.transferred = 0
        self.requests = 0
        self.connections = 0
        self.ignores_range = False
        self._buffer = bytearray()
        self._buffer_start = 0
        self._conn: http.client.HTTPConnection | None = None
        self._conn_key: tuple[str, str, int | None] | None = None
        self._response: _Response | None = None
        self._next_range = FIRST_RANGE
        self._token_host = urlsplit(hf_url("hf://a/b/c")).hostname if source.startswith("hf://") else None

    # -- the public reads ---------------------------------------------------------------------------------------

    def error(self, message: str) -> RemoteError:
        return RemoteError(self.source, message)

    def read(self, n: int) -> bytes:
        if n < 0:
            raise self.error(f"a read of {n} bytes; expected a whole header")
        self._check_limit(self.position + n)
        self._fill(self.position + n)
        at = self.position - self._buffer_start
        out = bytes(self._buffer[at:at + n])
        self.position += len(out)
        if at + n > (1 << 20):  # drop what was consumed, so the window stays small
            del self._buffer[:at + len(out)]
            self._buffer_start = self.position
        return out

    def skip(self, n: int) -> None:
        self._check_limit(self.position + n)
        end = self._buffer_start + len(self._buffer)
        target = self.position + n
        if target <= end:
            self.position = target
            return
        response = self._response
        gap = target - end
        if response is not None and response.start == end and (response.remaining is None or gap <= response.remaining):
            # the bytes are on their way in this response: read through them (the connection stays open)
            try:
                self._discard(response, target)
            except (OSError, http.client.HTTPException):
                self.close()  # dropped: the next read asks for a range from the target, on a new connection
        elif response is not None and response.remaining is not None and response.remaining <= (1 << 20):
            try:
                self._discard(response, response.start + response.remaining)
                self._close_response(reuse=True)
            except (OSError, http.client.HTTPException):
                self.close()
        else:
            self._close_response()
        self._buffer = bytearray()
        self._buffer_start = self.position = target

    def close(self) -> None:
        self._close_response()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- filling the window -------------------------------------------------------------------------------------

    def _check_limit(self, end: int) -> None:
        if end > self.limit:
            raise self.error(f"the header runs past {self.limit} bytes (byte {end} asked); expected a header "
                             f"within {self.limit >> 20} MiB: not a GGUF, or a hostile one")
        if self.size is not None and end > self.size:
            raise self.error(f"the header runs past the file's end ({end} of {self.size} bytes); expected a "
                             "whole, unaltered file")

    def _fill(self, end: int) -> None:
        attempts = 0
        while self._buffer_start + len(self._buffer) < end:
            if time.monotonic() > self.deadline:
                raise self.error("no header within the deadline; expected a server that answers ranges promptly")
            have = self._buffer_start + len(self._buffer)
            try:
                chunk = self._next_chunk(have, end)
            except (OSError, http.client.HTTPException) as exc:
                self._close_response()
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                attempts += 1
                if attempts > self.retries:
                    what = "timed out" if isinstance(exc, socket.timeout | TimeoutError) else type(exc).__name__
                    raise self.error(f"the connection failed {attempts} times at byte {have} ({what}: {exc}); "
                                     "expected a reachable server") from None
                continue
            if not chunk:
                if self.size is not None and have >= self.size:
                    return  # the file's end: read() returns what there is
                if self.size is None:
                    self.size = have
                raise self.error(f"the file ends at byte {have}, inside its header (byte {end} needed); expected "
                                 "a whole, unaltered file")
            self._buffer += chunk
            self.transferred += len(chunk)

    def _next_chunk(self, have: int, end: int) -> bytes:
        response = self._response
        if response is not None and (response.start != have or response.remaining == 0):
            self._close_response(reuse=response.remaining == 0)
            response = None
        if response is None:
            if self.size is not None and have >= self.size:
                return b""
            size = max(self._next_range, end - have)
            self._next_range = min(self._next_range * 2, MAX_RANGE)
            stop = min(have + size, self.limit)
            if self.size is not None:
                stop = min(stop, self.size)
            response = self._response = self._request(have, stop - 1)
        want = max(end - have, 64 << 10)
        if response.remaining is not None:
            want = min(want, response.remaining)
        if want <= 0:
            return b""
        try:
            data = response.response.read(want)
        except http.client.IncompleteRead as exc:
            data = exc.partial
        if response.remaining is not None and len(data) < want:
            # keep what did arrive: the next request resumes at the first byte not held
            self._buffer += data
            self.transferred += len(data)
            raise http.client.IncompleteRead(data, want - len(data))
        if response.remaining is not None:
            response.remaining -= len(data)
        response.start += len(data)
        return data

    def _close_response(self, *, reuse: bool = False) -> None:
        response, self._response = self._response, None
        if response is None:
            return
        if reuse and response.remaining == 0:
            response.response.read()  # a finished body: the connection stays open for the next range
            return
        response.response.close()
        # an unfinished body: never drain it; the connection goes with it
        if self._conn is response.conn:
            self._conn.close()
            self._conn = None

    def _connection(self, url: str) -> http.client.HTTPConnection:
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "", parts.port)
        if self._conn is not None and self._conn_key == key:
            return self._conn
        if self._conn is not None:
            self._conn.close()
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._conn = cls(parts.hostname or "", parts.port, timeout=self.timeout)
        self._conn_key = key
        self.connections += 1
        return self._conn

    def _request(self, start: int, stop: int) -> _Response:
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            conn = self._connection(url)
            headers = {"Range": f"bytes={start}-{stop}", "User-Agent": "fleetgate", "Accept-Encoding": "identity"}
            token = os.environ.get("HF_TOKEN")
            if token and parts.hostname == self._token_host:
                headers["Authorization"] = f"Bearer {token}"
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            self.requests += 1
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            status = response.status
            if status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                response.read()
                if not location:
                    raise self.error(f"HTTP {status} without a Location; expected the file or a redirect to it")
                url = urljoin(url, location)
                continue
            if status == 206:
                match = _CONTENT_RANGE.match(response.getheader("Content-Range", "") or "")
                if not match or int(match.group(1)) != start:
                    response.close()
                    raise self.error(f"HTTP 206 with Content-Range {response.getheader('Content-Range')!r} for "
                                     f"bytes={start}-{stop}; expected the range asked for")
                if match.group(3) != "*":
                    self.size = int(match.group(3))
                length = int(match.group(2)) - start + 1
                return _Response(conn, response, start, length)
            if status == 200:
                # Range ignored: the whole body follows. Read it as a stream from byte 0, as far as needed.
                self.ignores_range = True
                length_header = response.getheader("Content-Length")
                if length_header and length_header.isdigit():
                    self.size = int(length_header)
                body = _Response(conn, response, 0, self.size)
                if start:
                    self._discard(body, start)
                return body
            if status == 416:
                response.read()
                raise self.error(f"HTTP 416 for bytes={start}-{stop}: the file is shorter than its header says; "
                                 "expected a whole, unaltered file")
            response.close()
            self.close()
            hint = " (a gated or private repository needs HF_TOKEN)" if status in (401, 403) else ""
            raise self.error(f"HTTP {status} {response.reason}{hint}; expected the file")
        raise self.error(f"more than {MAX_REDIRECTS} redirects; expected the file")

    def _discard(self, body: _Response, upto: int) -> None:
        """Step a streamed (Range-ignoring) body forward to ``upto``: bounded by the header cap."""
        while body.start < upto:
            data = body.response.read(min(upto - body.start, 1 << 20))
            if not data:
                raise http.client.IncompleteRead(b"", upto - body.start)
            body.start += len(data)
            self.transferred += len(data)
            if body.remaining is not None:
                body.remaining -= len(data)
