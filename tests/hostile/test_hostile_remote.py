"""Hostile servers for `fleetgate profile URL` / `hf://...`: credentials, redirects, bodies and time, all bounded.

Every server here is a real HTTP/1.1 listener on 127.0.0.1, in threads that end when the test does (each
endless loop stops at a count, at the test's end, or when the reader hangs up). The assertions are on what
the servers received (the Authorization header of every request, whether a connection came at all) and on
the one line the reader ends with.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetgate.cli import main
from fleetgate.errors import InputError
from fleetgate.models.gguf_remote import read_remote_header
from tests.secrets_used import SECRETS

TOKEN = SECRETS["HUB_TOKEN"]


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


# the smallest GGUF the header reader takes: v3, no tensors, one key; padded to the default alignment (32)
_HEADER = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string(b"general.architecture") + struct.pack("<I", 8) \
    + _string(b"llama")
GGUF = _HEADER + b"\0" * (-len(_HEADER) % 32)

Behaviour = Callable[["_Handler"], None]


@dataclass
class Origin:
    """One hostile server: ``routes`` maps a path to what the server does; every request is recorded."""

    routes: dict[str, Behaviour]
    stop: threading.Event
    port: int = 0
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    """(path, Authorization) of every request, in order."""
    body_bytes: int = 0

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 5  # a write the reader never takes ends here, not at the suite's end
    origin: Origin

    def log_message(self, *args: object) -> None:
        return

    def do_GET(self) -> None:
        self.origin.seen.append((self.path, self.headers.get("Authorization")))
        behaviour = self.origin.routes.get(self.path)
        if behaviour is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        try:
            behaviour(self)
        except OSError:  # the reader hung up, as it should
            self.close_connection = True

    def body(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        self.origin.body_bytes += len(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler: nothing outlives the test

    def handle_error(self, request: object, client_address: object) -> None:
        """A reader that hangs up mid-body is the expected case here."""


@contextmanager
def serving(routes: dict[str, Behaviour]) -> Iterator[Origin]:
    origin = Origin(routes=routes, stop=threading.Event())

    class Handler(_Handler):
        pass

    Handler.origin = origin
    server = _Server(("127.0.0.1", 0), Handler)
    origin.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield origin
    finally:
        origin.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive()


@pytest.fixture
def origins() -> Iterator[Callable[[dict[str, Behaviour]], Origin]]:
    """Start as many servers as a test needs; all are closed at its end."""
    with ExitStack() as stack:
        yield lambda routes: stack.enter_context(serving(routes))


def gguf(handler: _Handler) -> None:
    handler.send_response(200)  # Range ignored: the reader takes a whole small body as well
    handler.send_header("Content-Length", str(len(GGUF)))
    handler.end_headers()
    handler.body(GGUF)


def redirect(location: Callable[[], str], *, endless: bool = False) -> Behaviour:
    def behaviour(handler: _Handler) -> None:
        handler.send_response(302)
        handler.send_header("Location", location())
        if not endless:
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.end_headers()  # no length: the body runs until the server closes, which it never does
        for _ in range(1 << 14):  # 1 GiB at most
            if handler.origin.stop.is_set():
                return
            handler.body(b"\0" * (64 << 10))

    return behaviour


def trickle(*, in_headers: bool) -> Behaviour:
    """One byte every 0.3 s: each comes well within any per-read timeout; only a deadline ends the read."""

    def behaviour(handler: _Handler) -> None:
        handler.send_response(200)
        if in_headers:
            handler.flush_headers()
            handler.wfile.write(b"X-Slow: ")
        else:
            handler.send_header("Content-Length", str(1 << 20))
            handler.end_headers()
        for _ in range(200):  # 60 s at most
            if handler.origin.stop.wait(0.3):
                return
            handler.body(b"a")

    return behaviour


@pytest.fixture
def hf(monkeypatch: pytest.MonkeyPatch, origins: Callable[[dict[str, Behaviour]], Origin]) -> Callable[..., Origin]:
    """A Hub at HF_ENDPOINT with HF_TOKEN set: its resolve URL of o/r/m.gguf does what the test says."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)

    def start(behaviour: Behaviour, **routes: Behaviour) -> Origin:
        hub = origins({"/o/r/resolve/main/m.gguf": behaviour, **{f"/{k}": v for k, v in routes.items()}})
        monkeypatch.setenv("HF_ENDPOINT", hub.url(""))
        return hub

    return start


SOURCE = "hf://o/r/m.gguf"


# -- 1. credentials only to the exact origin ------------------------------------------------------------------

def test_a_same_origin_redirect_keeps_the_token(hf: Callable[..., Origin]) -> None:
    hub = hf(redirect(lambda: "/files/m.gguf"), **{"files/m.gguf": gguf})
    _, read = read_remote_header(SOURCE)
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}"), ("/files/m.gguf", f"Bearer {TOKEN}")]
    assert (read.transferred, read.connections) == (len(GGUF), 1)


def test_a_redirect_to_another_port_of_the_same_host_gets_no_token(
        hf: Callable[..., Origin], origins: Callable[[dict[str, Behaviour]], Origin]) -> None:
    other = origins({"/files/m.gguf": gguf})
    hub = hf(redirect(lambda: other.url("/files/m.gguf")))
    _, read = read_remote_header(SOURCE)
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}")]
    assert other.seen == [("/files/m.gguf", None)]
    assert (read.transferred, read.connections) == (len(GGUF), 2)


def test_a_redirect_to_another_host_name_on_the_same_port_gets_no_token(hf: Callable[..., Origin]) -> None:
    hub: Origin
    hub = hf(redirect(lambda: hub.url("/files/m.gguf", host="localhost")), **{"files/m.gguf": gguf})
    read_remote_header(SOURCE)
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}"), ("/files/m.gguf", None)]


def test_a_plain_url_never_gets_the_token(monkeypatch: pytest.MonkeyPatch,
                                          origins: Callable[[dict[str, Behaviour]], Origin]) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    server = origins({"/m.gguf": gguf})
    read_remote_header(server.url("/m.gguf"))
    assert server.seen == [("/m.gguf", None)]


# -- 2. redirects: http(s) only, bounded, never printed with the token --------------------------------------

@pytest.mark.parametrize("scheme", ["gopher", "ftp", "file"])
def test_a_redirect_to_another_scheme_is_one_line_and_connects_nowhere(scheme: str, hf: Callable[..., Origin]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        target = f"{scheme}://127.0.0.1:{listener.getsockname()[1]}/m.gguf"
        hub = hf(redirect(lambda: target))
        with pytest.raises(InputError) as caught:
            read_remote_header(SOURCE)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected to the other scheme's address
    assert str(caught.value) == (f"{SOURCE}: HTTP 302 redirects to {target}, which has the scheme {scheme}://; "
                                 "expected an http(s) URL (no other scheme is followed)")
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}")]


@pytest.mark.parametrize(("location", "what"), [
    ("http://127.0.0.1:99999/m.gguf", "a malformed host or port (Port out of range 0-65535)"),
    ("http://[::1/m.gguf", "a malformed host or port (Invalid IPv6 URL)"),
    ("http://127.0.0.1/\u00e9.gguf", "a space or a character that is not printable ASCII"),
])
def test_a_malformed_redirect_is_one_line(location: str, what: str, hf: Callable[..., Origin]) -> None:
    hf(redirect(lambda: location))
    with pytest.raises(InputError) as caught:
        read_remote_header(SOURCE)
    shown = location.replace("\u00e9", "\\xe9")  # http.client reads a header as latin-1; shown escaped
    assert str(caught.value) == (f"{SOURCE}: HTTP 302 redirects to {shown}, which has {what}; expected an http(s) "
                                 "URL (no other scheme is followed)")


def test_redirects_are_bounded(hf: Callable[..., Origin]) -> None:
    hub = hf(redirect(lambda: "/o/r/resolve/main/m.gguf"))
    with pytest.raises(InputError) as caught:
        read_remote_header(SOURCE)
    assert str(caught.value) == f"{SOURCE}: more than 5 redirects; expected the file"
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}")] * 6


def test_the_token_is_never_shown(hf: Callable[..., Origin], capsys: pytest.CaptureFixture[str]) -> None:
    """A server that knows the token (the Hub itself) echoes it into its redirect: the line shows a placeholder."""
    hf(redirect(lambda: f"gopher://127.0.0.1:1/{TOKEN}"))
    assert main(["profile", SOURCE]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"fleetgate: {SOURCE}: HTTP 302 redirects to gopher://127.0.0.1:1/<HF_TOKEN>, which has "
                            "the scheme gopher://; expected an http(s) URL (no other scheme is followed)\n")


def test_a_password_in_a_url_is_never_shown(origins: Callable[[dict[str, Behaviour]], Origin],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    server = origins({})
    assert main(["profile", f"http://user:secret@127.0.0.1:{server.port}/absent.gguf"]) == 2
    assert capsys.readouterr().err == (f"fleetgate: http://***@127.0.0.1:{server.port}/absent.gguf: HTTP 404 Not "
                                       "Found; expected the file\n")


def test_a_token_that_would_break_the_header_is_refused_before_any_connection(
        hf: Callable[..., Origin], monkeypatch: pytest.MonkeyPatch) -> None:
    hub = hf(gguf)
    monkeypatch.setenv("HF_TOKEN", "hf_abc\r\nX-Injected: 1")
    with pytest.raises(InputError) as caught:
        read_remote_header(SOURCE)
    assert str(caught.value) == (f"{SOURCE}: HF_TOKEN holds a space or a character that is not printable ASCII; "
                                 "expected the token as the Hub shows it (hf_...)")
    assert hub.seen == []


# -- 3. bodies: a redirect's is never read, any other only as far as the header cap ----------------------------

def test_an_endless_redirect_body_is_never_read(hf: Callable[..., Origin]) -> None:
    hub = hf(redirect(lambda: "/files/m.gguf", endless=True), **{"files/m.gguf": gguf})
    began = time.monotonic()
    _, read = read_remote_header(SOURCE, deadline=20)
    assert time.monotonic() - began < 10
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}"), ("/files/m.gguf", f"Bearer {TOKEN}")]
    # the redirect's connection went with its body: the file came over a second one
    assert (read.transferred, read.connections) == (len(GGUF), 2)
    # what the server pushed before the hang-up: socket buffers, never the 1 GiB it had to send
    assert hub.body_bytes < 32 << 20


def test_an_endless_200_body_ends_at_the_header_cap(origins: Callable[[dict[str, Behaviour]], Origin]) -> None:
    """A GGUF of 1000 keys of 64 KiB each, then more for ever: the reader stops where the 1 MiB cap falls."""
    cap = 1 << 20
    prefix = b"GGUF" + struct.pack("<IQQ", 3, 0, 1000)
    value = 64 << 10
    key = _string(b"k") + struct.pack("<I", 8) + struct.pack("<Q", value) + b"v" * value

    def endless(handler: _Handler) -> None:
        handler.send_response(200)
        handler.end_headers()
        handler.body(prefix)
        for _ in range(1 << 14):
            if handler.origin.stop.is_set():
                return
            handler.body(key)

    server = origins({"/m.gguf": endless})
    began = time.monotonic()
    with pytest.raises(InputError) as caught:
        read_remote_header(server.url("/m.gguf"), limit=cap, deadline=20)
    assert time.monotonic() - began < 10
    over = next(i for i in range(1000) if len(prefix) + (i + 1) * len(key) > cap)  # the first value past the cap
    at = len(prefix) + over * len(key) + len(key) - value
    assert str(caught.value) == (f"{server.url('/m.gguf')}: key 'k' claims {value} bytes at byte {at}, past the "
                                 f"header cap ({cap} bytes); expected a whole, unaltered GGUF")
    assert server.body_bytes < cap + (32 << 20)


# -- 4. time: one deadline for the whole read, however the bytes trickle ---------------------------------------

@pytest.mark.parametrize("in_headers", [True, False], ids=["headers", "body"])
def test_a_trickling_server_meets_the_deadline(in_headers: bool, origins: Callable[[dict[str, Behaviour]], Origin]) -> None:
    server = origins({"/m.gguf": trickle(in_headers=in_headers)})
    began = time.monotonic()
    with pytest.raises(InputError) as caught:
        read_remote_header(server.url("/m.gguf"), timeout=20, deadline=2)
    elapsed = time.monotonic() - began
    assert str(caught.value) == (f"{server.url('/m.gguf')}: no header within the 2 s deadline; expected a server "
                                 "that sends it promptly (this one stalls or trickles)")
    assert 2 <= elapsed < 5, elapsed  # the timer at 2 s, then one close: slack for a loaded 2-core machine
    assert server.seen == [("/m.gguf", None)]  # the deadline is not retried away


def test_the_deadline_spans_redirects(hf: Callable[..., Origin]) -> None:
    """A redirect on the way changes nothing: the deadline holds for the whole read, over the reused connection."""
    hub = hf(redirect(lambda: "/files/m.gguf"), **{"files/m.gguf": trickle(in_headers=False)})
    began = time.monotonic()
    with pytest.raises(InputError) as caught:
        read_remote_header(SOURCE, deadline=2)
    assert 2 <= time.monotonic() - began < 5
    assert str(caught.value) == (f"{SOURCE}: no header within the 2 s deadline; expected a server that sends it "
                                 "promptly (this one stalls or trickles)")
    assert hub.seen == [("/o/r/resolve/main/m.gguf", f"Bearer {TOKEN}"), ("/files/m.gguf", f"Bearer {TOKEN}")]
