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
- Redirects (the Hugging Face resolve URL answers 302 to its CDN) are followed, at most five, to http(s)
  only: a ``Location`` of any other scheme (``gopher://``, ``ftp://``, ``file://``) is one line, and nothing
  is connected to. A redirect's body is never read: an empty one keeps the connection, any other closes it.
- ``deadline`` holds for the whole read however the bytes trickle: a per-operation socket timeout alone
  lets a server that sends a byte every few seconds keep a read alive for ever, so a timer shuts the
  socket down when the deadline passes, whichever call (headers, body, a redirect) is waiting on it.
- ``hf://OWNER/REPO/PATH`` is ``{HF_ENDPOINT or https://huggingface.co}/OWNER/REPO/resolve/main/PATH``
  (``hf://OWNER/REPO@REVISION/PATH`` for another revision). ``HF_TOKEN`` goes to that endpoint's origin
  only: scheme, host and port all equal (a default port counts as written). A redirect to another origin
  gets no ``Authorization``, the Hub's own CDN included: the Hub signs the CDN URL it redirects to, and
  huggingface_hub likewise sends the token only to the Hub and drops it on a cross-host redirect. The
  token is never printed: every message shows it as ``<HF_TOKEN>``, and a URL's user and password as ``***``.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from fleetgate.errors import InputError

__all__ = ["DEFAULT_DEADLINE", "DEFAULT_LIMIT", "RangeReader", "RemoteError", "hf_url", "is_remote", "redact",
           "resolve_url", "split_parts"]

DEFAULT_LIMIT = 64 << 20
"""No header is read past 64 MiB (a 262k-token vocabulary's header is about 6 MiB)."""
FIRST_RANGE = 256 << 10
MAX_RANGE = 8 << 20
MAX_READ = 1 << 20
"""No one socket read asks for more than 1 MiB: the window grows read by read, each bounded."""
MAX_REDIRECTS = 5
DEFAULT_DEADLINE = 300.0
"""Seconds one file's read may take in all (connections, redirects, headers and body together)."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class RemoteError(InputError):
    """An ``InputError`` about a URL: ``str()`` is ``URL: message`` on one line."""

    def __init__(self, url: str, message: str) -> None:
        self.url = redact(url)
        super().__init__(self.url, None, redact(message))

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


def redact(text: str) -> str:
    """``text`` as it may be shown: ``HF_TOKEN``'s value as ``<HF_TOKEN>``, a URL's user and password as ``***``."""
    token = os.environ.get("HF_TOKEN")
    if token:
        text = text.replace(token, "<HF_TOKEN>")
    return _USERINFO.sub(r"\g<scheme>***@", text)


def _origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, the default port filled in; ValueError names what is wrong."""
    if not url.isascii() or not url.isprintable() or " " in url:
        raise ValueError("a space or a character that is not printable ASCII")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"a malformed host or port ({exc})") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise ValueError(f"the scheme {parts.scheme + '://' if parts.scheme else 'none'}")
    if not parts.hostname:
        raise ValueError("no host")
    return parts.scheme, parts.hostname, _DEFAULT_PORTS[parts.scheme] if port is None else port


def _join(url: str, location: str) -> str:
    """A redirect's target; ValueError (as ``_origin``'s) when the Location cannot be parsed at all."""
    try:
        return urljoin(url, location)
    except ValueError as exc:
        raise ValueError(f"a malformed host or port ({exc})") from None


def resolve_url(source: str) -> str:
    """The http(s) URL a source names (``hf://`` resolved); anything else is one line."""
    url = hf_url(source) if source.startswith("hf://") else source
    try:
        _origin(url)
    except ValueError as exc:
        if source.startswith("hf://"):
            raise RemoteError(source, f"HF_ENDPOINT makes it {_shown(url)}, which has {exc}; expected an "
                                      "http(s) endpoint such as https://huggingface.co") from None
        raise RemoteError(source, f"the URL has {exc}; expected an http(s) URL or hf://OWNER/REPO/FILE") from None
    return url


def _hf_token(source: str) -> str | None:
    """``HF_TOKEN`` for an ``hf://`` source, checked before it goes into a header (never shown)."""
    token = os.environ.get("HF_TOKEN") if source.startswith("hf://") else None
    if token and not all("!" <= c <= "~" for c in token):
        raise RemoteError(source, "HF_TOKEN holds a space or a character that is not printable ASCII; "
                                  "expected the token as the Hub shows it (hf_...)")
    return token or None


def _shown(text: str, limit: int = 200) -> str:
    """A server's text (a reason phrase, a Location) as one printable line, at most ``limit`` characters."""
    return ascii(text[:limit])[1:-1] + ("..." if len(text) > limit else "")


class _Watched(http.client.HTTPConnection):
    """A connection that hands its socket to ``watch`` as soon as it exists: before a TLS handshake, so that
    the deadline's watchdog reaches that too."""

    watch: Callable[[socket.socket], None]

    def connect(self) -> None:
        super().connect()
        self.watch(self.sock)


class _WatchedTLS(http.client.HTTPSConnection, _Watched):
    """``HTTPSConnection.connect`` calls ``_Watched.connect`` (the MRO) for the TCP socket, then wraps it."""


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
    ``timeout`` bounds each socket operation, ``deadline`` the whole read (seconds from construction).
    """

    def __init__(self, source: str, *, limit: int = DEFAULT_LIMIT, timeout: float = 20.0,
                 deadline: float = DEFAULT_DEADLINE, retries: int = 3) -> None:
        self.source = source
        self.url = resolve_url(source)
        self._token = _hf_token(source)
        self._token_origin = _origin(self.url) if self._token else None
        self.limit = limit
        self.timeout = timeout
        self.deadline_s = deadline
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
        self._conn_key: tuple[str, str, int] | None = None
        self._response: _Response | None = None
        self._next_range = FIRST_RANGE
        # the watchdog: shuts down the socket in use once the deadline passes (see the module's docstring)
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        """The watchdog's own descriptor of the connection's socket: a shutdown through it ends any wait on it,
        and http.client closing its descriptor never leaves the watchdog one that a new file reuses."""
        self._expired = False
        self._timer: threading.Timer | None = None

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
        self._drop_connection()
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
            self._timer = None

    def _drop_connection(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._watch(None)
        if conn is not None:
            conn.close()

    def _watch(self, sock: socket.socket | None) -> None:
        """Under the lock: the socket the watchdog shuts down from now on (a copy of its descriptor)."""
        if self._sock is not None:
            self._sock.close()
        self._sock = sock.dup() if sock is not None else None
        if self._expired:
            self._shutdown()

    def _watch_new(self, sock: socket.socket) -> None:
        with self._lock:
            self._watch(sock)

    def _expire(self) -> None:
        """The timer's end: whatever waits on the socket (a header line, a body byte) returns at once."""
        with self._lock:
            self._expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):  # the peer has gone already: nothing waits on it
                self._sock.shutdown(socket.SHUT_RDWR)

    def _past_deadline(self) -> bool:
        with self._lock:
            return self._expired or time.monotonic() > self.deadline

    def _deadline_error(self) -> RemoteError:
        return self.error(f"no header within the {self.deadline_s:g} s deadline; expected a server that sends it "
                          "promptly (this one stalls or trickles)")

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
            if self._past_deadline():
                self.close()
                raise self._deadline_error()
            have = self._buffer_start + len(self._buffer)
            try:
                chunk = self._next_chunk(have, end)
            except (OSError, http.client.HTTPException) as exc:
                self._close_response()
                self._drop_connection()
                if self._past_deadline():
                    self.close()
                    raise self._deadline_error() from None
                attempts += 1
                if attempts > self.retries:
                    what = "timed out" if isinstance(exc, socket.timeout | TimeoutError) else type(exc).__name__
                    raise self.error(f"the connection failed {attempts} times at byte {have} ({what}: {exc}); "
                                     "expected a reachable server") from None
                continue
            if not chunk and self._past_deadline():  # the watchdog ended the body, not the server
                self.close()
                raise self._deadline_error()
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
        want = min(max(end - have, 64 << 10), MAX_READ)
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
        self._end_body(response.conn, response.response, reuse=reuse and response.remaining == 0)

    def _end_body(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, *,
                  reuse: bool = True) -> None:
        """Done with a response: the connection stays only when its framing says the body is over (nothing
        left to read); any body still coming -- an unread redirect's, a range's past what was asked, an
        endless one -- is never drained: the connection goes with it."""
        if reuse and response.length == 0 and not response.chunked:
            response.read()  # reads nothing; marks the response done so the connection takes the next request
            return
        response.close()
        if self._conn is conn:
            self._drop_connection()

    def _connection(self, origin: tuple[str, str, int]) -> http.client.HTTPConnection:
        if self._conn is not None and self._conn_key == origin:
            return self._conn
        self._drop_connection()
        if self._timer is None:
            self._timer = threading.Timer(max(self.deadline - time.monotonic(), 0.0), self._expire)
            self._timer.daemon = True
            self._timer.start()
        scheme, host, port = origin
        cls = _WatchedTLS if scheme == "https" else _Watched
        # a connect waits no longer than the deadline leaves: the watchdog has no socket to shut down yet
        timeout = max(min(self.timeout, self.deadline - time.monotonic()), 0.001)
        conn = cls(host, port, timeout=timeout)
        conn.watch = self._watch_new
        self._conn = conn
        self._conn_key = origin
        self.connections += 1
        return self._conn

    def _request(self, start: int, stop: int) -> _Response:
        url = self.url
        origin = _origin(url)
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            conn = self._connection(origin)
            headers = {"Range": f"bytes={start}-{stop}", "User-Agent": "fleetgate", "Accept-Encoding": "identity"}
            if self._token is not None and origin == self._token_origin:
                headers["Authorization"] = f"Bearer {self._token}"
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            self.requests += 1
            if self._past_deadline():
                raise TimeoutError("the deadline passed")  # _fill turns it into the deadline's line
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            status = response.status
            if status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                self._end_body(conn, response)
                if not location:
                    raise self.error(f"HTTP {status} without a Location; expected the file or a redirect to it")
                try:
                    url = _join(url, location)
                    origin = _origin(url)
                except ValueError as exc:
                    self.close()
                    raise self.error(f"HTTP {status} redirects to {_shown(location)}, which has {exc}; expected "
                                     "an http(s) URL (no other scheme is followed)") from None
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
                self._end_body(conn, response)
                raise self.error(f"HTTP 416 for bytes={start}-{stop}: the file is shorter than its header says; "
                                 "expected a whole, unaltered file")
            response.close()
            self.close()
            hint = " (a gated or private repository needs HF_TOKEN)" if status in (401, 403) else ""
            raise self.error(f"HTTP {status} {_shown(response.reason, 80)}{hint}; expected the file")
        raise self.error(f"more than {MAX_REDIRECTS} redirects; expected the file")

    def _discard(self, body: _Response, upto: int) -> None:
        """Step a streamed (Range-ignoring) body forward to ``upto``: bounded by the header cap."""
        while body.start < upto:
            data = body.response.read(min(upto - body.start, MAX_READ))
            if not data:
                raise http.client.IncompleteRead(b"", upto - body.start)
            body.start += len(data)
            self.transferred += len(data)
            if body.remaining is not None:
                body.remaining -= len(data)
