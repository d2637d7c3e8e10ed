"""A range-serving HTTP server on 127.0.0.1 for the remote-header tests: a real socket, real HTTP/1.1.

It serves the files of one directory with single ``Range: bytes=a-b`` requests (206 and Content-Range),
keep-alive, and counts what it sends. Misbehaviours the reader must survive, switched per test:
``ignore_range`` (200 with the whole body), ``drop_after`` (close the socket after that many body bytes
of the next response, once), and ``/OWNER/REPO/resolve/REV/PATH`` redirected (302) to ``/files/PATH`` the
way the Hub redirects to its CDN.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_RESOLVE = re.compile(r"^/[^/]+/[^/]+/resolve/[^/]+/(.+)$")


@dataclass
class Served:
    root: Path
    port: int = 0
    ignore_range: bool = False
    drop_after: int | None = None
    body_bytes: int = 0
    requests: list[str] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)
    connections: int = 0
    authorization: list[str | None] = field(default_factory=list)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/files/{name}"


def _handler(state: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            state.connections += 1

        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            state.requests.append(self.path)
            state.authorization.append(self.headers.get("Authorization"))
            resolve = _RESOLVE.match(self.path)
            if resolve:
                self.send_response(302)
                self.send_header("Location", f"/files/{resolve.group(1)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not self.path.startswith("/files/"):
                self._status(404)
                return
            path = state.root / self.path[len("/files/"):]
            if not path.is_file():
                self._status(404)
                return
            size = path.stat().st_size
            wanted = self.headers.get("Range")
            state.ranges.append(wanted or "")
            match = _RANGE.match(wanted or "")
            if state.ignore_range or not match:
                start, stop = 0, size - 1
                self.send_response(200)
            else:
                start = int(match.group(1))
                stop = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
                if start >= size:
                    self._status(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{stop}/{size}")
            self.send_header("Content-Length", str(stop - start + 1))
            self.end_headers()
            drop, state.drop_after = state.drop_after, None
            with path.open("rb") as handle:
                handle.seek(start)
                left = stop - start + 1
                sent = 0
                try:
                    while left > 0:
                        chunk = handle.read(min(left, 64 << 10))
                        if drop is not None and sent + len(chunk) > drop:
                            chunk = chunk[:drop - sent]
                            self.wfile.write(chunk)
                            state.body_bytes += len(chunk)
                            self.close_connection = True
                            return
                        self.wfile.write(chunk)
                        sent += len(chunk)
                        state.body_bytes += len(chunk)
                        left -= len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        def _status(self, code: int) -> None:
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that closes mid-body (the reader, once it has the header) is expected: no traceback."""


@contextmanager
def serve(root: Path) -> Iterator[Served]:
    state = Served(root=root)
    server = _Server(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


if __name__ == "__main__":  # pragma: no cover - `python -m tests.ledger.range_server DIR`: serve DIR until ^C
    import sys
    import time

    with serve(Path(sys.argv[1])) as served:
        print(f"serving {sys.argv[1]} at http://127.0.0.1:{served.port}/files/", flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
