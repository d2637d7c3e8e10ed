"""A small fault-injecting HTTP server: the faults a real llama-server will not produce on demand.

Fakes are for faults only (hangs, garbage, truncated streams, 500s); every check's proof of working
is the real reference server. Bounded: a hanging handler gives up when the server stops or after
30 s; it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("hang", "garbage", "truncate", "error", "echo-auth", "nondeterministic", "accept-anything")


class FaultServer:
    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        self.mode = mode
        self.stopping = threading.Event()
        self.counter = itertools.count()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.handle(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.handle(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    def _send(
        self, handler: BaseHTTPRequestHandler, status: int, body: bytes, kind: str = "application/json"
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def handle(self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        mode = self.mode
        if mode == "hang":
            self.stopping.wait(30)
            return
        if mode == "garbage":
            self._send(handler, 200, b"<html>this is not JSON{", "application/json")
            return
        if mode == "error":
            self._send(
                handler,
                500,
                json.dumps(
                    {"error": {"code": 500, "message": "backend exploded", "type": "server_error"}}
                ).encode(),
            )
            return
        if mode == "echo-auth":
            echoed = handler.headers.get("Authorization", "")
            self._send(
                handler, 500, json.dumps({"error": {"message": f"rejected credentials {echoed}"}}).encode()
            )
            return
        if body is None:
            if handler.path == "/health":
                self._send(handler, 200, b'{"status":"ok"}')
            else:
                self._send(handler, 404, b'{"error":{"message":"not found"}}')
            return
        if mode == "truncate" and body.get("stream"):
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            chunk = {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "one"}}]}
            data = f"data: {json.dumps(chunk)}\n\n".encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()
            handler.close_connection = True  # the connection ends without [DONE] and without the last chunk
            return
        n = next(self.counter)
        text = f"answer number {n}" if mode == "nondeterministic" else "the same answer"
        reply = {
            "id": f"c{n}",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
            "usage": {"prompt_tokens": 5000, "completion_tokens": 1, "total_tokens": 5001},
        }
        self._send(handler, 200, json.dumps(reply).encode())
