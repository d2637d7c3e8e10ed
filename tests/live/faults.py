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

MODES = (
    "hang",
    "garbage",
    "truncate",
    "error",
    "echo-auth",
    "nondeterministic",
    "accept-anything",
    "empty-answer",
    "bad-stream",
    "stream-refused",
    "stream-empty",
    "tools-call-despite-none",
    "tools-none-refused",
    "vision-unbilled",
    "refuse-unexplained",
    "vllm-as-declared",
    "vllm-other-payload",
    "login-page",
    "hang-streams",
    "hang-oversized",
    "hang-tools",
    "tools-auto-refused",
    "tools-auto-as-text",
    "vllm-other-name",
    "speculative-burst",
    "burst-of-many-steps",
    "capped-at-4",
    "vllm-healthy",
    "vllm-one-at-a-time",
    "vllm-apart",
    "vllm-other-tokenizer",
    "vllm-other-sampler",
    "vllm-sampler-blind",
    "schema-refused",
    "schema-500",
    "parallel-refused",
    "parallel-500",
)
# A vLLM for the vllm-reference fixture fleet's declared copy (tests/live/vllm_reference.py ``declare``), each mode
# breaking one thing vLLM reports nowhere: it decodes one sequence at a time (--max-num-seqs 1), detokenizes through
# another vocabulary (--tokenizer), samples a seeded request without sampler fields otherwise than with the declared
# ones (--override-generation-config), or samples the same whatever the sampler says (the probe cannot see it).
VLLM_REFERENCE_MODES = ("vllm-healthy", "vllm-one-at-a-time", "vllm-apart", "vllm-other-tokenizer",
                        "vllm-other-sampler", "vllm-sampler-blind")
# vLLM answers tool_choice auto apart from required and none (vllm/renderers/online_renderer.py: a 400 without
# --enable-auto-tool-choice; through --tool-call-parser with it): these modes fake a vLLM whose required and none
# work while auto is refused, or leaves the call as text in the content (a parser of another format).
AUTO_TOOL_MODES = ("tools-auto-refused", "tools-auto-as-text")
# Rates the hang-* modes' answers report (timings): a fast engine, so the bounds derived from them are short.
FAST_TIMINGS = {"prompt_n": 50, "prompt_ms": 5.0, "predicted_n": 10, "predicted_ms": 50.0}
# A stream sent whole at once, and what the engine reports making it: 4 tokens in one speculative step (3 drafts
# accepted with the step's own token: a healthy engine sends them together), and 12 tokens in 6 steps (held back).
BURSTS = {
    "speculative-burst": (4, {"prompt_n": 9, "prompt_ms": 5.0, "predicted_n": 4, "predicted_ms": 46.0,
                              "predicted_per_second": 87.0, "draft_n": 3, "draft_n_accepted": 3}),
    "burst-of-many-steps": (12, {"prompt_n": 9, "prompt_ms": 5.0, "predicted_n": 12, "predicted_ms": 400.0,
                                 "predicted_per_second": 30.0, "draft_n": 8, "draft_n_accepted": 6}),
}
# What vLLM's /v1/models says about the loaded model (vllm/entrypoints/openai: ModelCard root and
# max_model_len), for frank-archon as its files declare it, and after another payload was loaded.
VLLM_MODELS = {
    "vllm-as-declared": ("/models/Swift-Qwen3.8-27B-PARO-MXFP6", 262144),
    "vllm-other-payload": ("/models/Qwen3.8-27B-AWQ", 131072),
}


class FaultServer:
    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        self.mode = mode
        self.model_root = ""
        """What /v1/models says the loaded model is (VLLM_REFERENCE_MODES: the declared copy's model directory)."""
        self.detokenized = ""
        """What /detokenize answers (VLLM_REFERENCE_MODES: the declared tokenizer's text, unless the mode breaks it)."""
        self.one_at_a_time = threading.Lock()
        self.steps = {1.0: 0, 8.0: 0}
        """vLLM's vllm:iteration_tokens_total buckets (steps of at most 1 and 8 tokens): requests decoded together make
        steps of several tokens; ``vllm-one-at-a-time`` decodes each token in a step of its own, and so does
        ``vllm-apart``, a vLLM whose steps show the sequences neither decoded together nor waiting (the probe cannot
        tell what it runs)."""
        self.queued = 0.0
        self.ran = 0.0
        """The sums of vllm:request_queue_time_seconds and vllm:request_inference_time_seconds: a step counts 10 ms;
        one at a time, a request sent with others waits for the runs of those served before it."""
        self.ran_since_metrics = 0.0
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
        if mode == "hang" or (mode == "hang-streams" and body is not None and body.get("stream")):
            self.stopping.wait(30)
            return
        if mode == "login-page":
            # a reverse proxy's sign-in page where the engine should be: 200 for every path
            self._send(handler, 200, b"<!doctype html><html><body><form action=/login>Sign in</form></body></html>",
                       "text/html")
            return
        if mode == "garbage" and handler.path != "/health":
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
                # vLLM's health() is a 200 with no body; llama-server's is {"status": "ok"}
                vllm = (mode in VLLM_MODELS or mode in AUTO_TOOL_MODES or mode == "vllm-other-name"
                        or mode in VLLM_REFERENCE_MODES)
                self._send(handler, 200, b"" if vllm else b'{"status":"ok"}')
            elif handler.path == "/v1/models" and mode == "vllm-other-name":
                card = {"id": "another-name", "object": "model", "root": VLLM_MODELS["vllm-as-declared"][0],
                        "max_model_len": VLLM_MODELS["vllm-as-declared"][1]}
                self._send(handler, 200, json.dumps({"object": "list", "data": [card]}).encode())
            elif handler.path == "/v1/models" and mode in VLLM_MODELS:
                root, window = VLLM_MODELS[mode]
                card = {"id": "frank-archon", "object": "model", "root": root, "max_model_len": window}
                self._send(handler, 200, json.dumps({"object": "list", "data": [card]}).encode())
            elif handler.path == "/metrics" and (mode in VLLM_REFERENCE_MODES or mode in VLLM_MODELS):
                name = "vllm:iteration_tokens_total"
                lines = [f"# TYPE {name} histogram", f'{name}_bucket{{le="1.0"}} {self.steps[1.0]}',
                         f'{name}_bucket{{le="8.0"}} {self.steps[8.0]}', f'{name}_bucket{{le="+Inf"}} {self.steps[8.0]}',
                         f"{name}_count {self.steps[8.0]}", f"{name}_sum {self.steps[8.0]}"]
                for timing, total in (("vllm:request_queue_time_seconds", self.queued),
                                      ("vllm:request_inference_time_seconds", self.ran)):
                    lines += [f"# TYPE {timing} histogram", f'{timing}_bucket{{le="+Inf"}} 0', f"{timing}_count 0",
                              f"{timing}_sum {total}"]
                self.ran_since_metrics = 0.0
                self._send(handler, 200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")
            elif handler.path == "/v1/models" and mode in VLLM_REFERENCE_MODES:
                card = {"id": "fleetgate-vllm-reference", "object": "model", "root": self.model_root, "max_model_len": 1024}
                self._send(handler, 200, json.dumps({"object": "list", "data": [card]}).encode())
            elif handler.path == "/v1/models" and mode == "capped-at-4":
                card = {"id": "fleetgate-reference", "object": "model"}
                self._send(handler, 200, json.dumps({"object": "list", "data": [card]}).encode())
            elif handler.path == "/props" and mode == "vision-unbilled":
                self._send(handler, 200, b'{"modalities":{"vision":true}}')
            else:
                self._send(handler, 404, b'{"error":{"message":"not found"}}')
            return
        if mode == "vllm-other-name":
            # vllm/entrypoints/openai/engine/serving.py: a request naming a model the server does not serve
            message = f"The model `{body.get('model')}` does not exist. Valid aliases: another-name."
            self._send(handler, 404, json.dumps({"error": {"message": message, "type": "NotFoundError",
                                                           "param": "model", "code": 404}}).encode())
            return
        if (mode in VLLM_REFERENCE_MODES or mode in VLLM_MODELS) and handler.path == "/v1/chat/completions":
            tokens = int(body.get("max_tokens") or 1)
            sequences = int(body.get("n") or 1)
            with self.one_at_a_time:
                run = tokens * 0.01
                if mode == "vllm-one-at-a-time":
                    # the sequences of one request one after another: the k-th waits the runs of the k before it
                    self.steps[1.0] += tokens * sequences
                    self.steps[8.0] += tokens * sequences
                    self.queued += self.ran_since_metrics * sequences + run * sequences * (sequences - 1) / 2
                elif mode == "vllm-apart":
                    self.steps[1.0] += tokens * sequences
                    self.steps[8.0] += tokens * sequences
                else:
                    self.steps[8.0] += tokens if sequences > 1 else 1  # decoded beside the others
                self.ran += run * sequences
                self.ran_since_metrics += run * sequences
        if mode in VLLM_REFERENCE_MODES or (mode in VLLM_MODELS and body.get("stream")):
            self._vllm(handler, mode, body)
            return
        if mode == "refuse-unexplained":
            self._send(handler, 400, b'{"error":{"code":400,"message":"bad request"}}')
            return
        if mode in ("parallel-refused", "parallel-500") and body.get("parallel_tool_calls"):
            status, message = (400, "parallel_tool_calls is not supported") if mode == "parallel-refused" else (
                500, "tool parser crashed")
            self._send(handler, status, json.dumps({"error": {"code": status, "message": message}}).encode())
            return
        if mode in ("schema-refused", "schema-500") and body.get("response_format"):
            # an engine without grammar support: a clean refusal, or an error of the engine's own
            status, message = (400, "response_format is not supported") if mode == "schema-refused" else (
                500, "grammar backend crashed")
            self._send(handler, status, json.dumps({"error": {"code": status, "message": message}}).encode())
            return
        if body.get("stream") and mode in ("bad-stream", "stream-refused", "stream-empty", *BURSTS):
            self._stream(handler, mode, int(body.get("max_tokens") or 0))
            return
        if (mode == "hang-tools" and body.get("tools")) or (mode == "hang-oversized" and len(json.dumps(body)) > 4096):
            self.stopping.wait(30)  # an engine that took the request and never answers it
            return
        if mode.startswith("tools-") and body.get("tools"):
            self._tools(handler, mode, body)
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
        if mode == "capped-at-4":
            # a server whose own ceiling (vLLM: max_new_tokens of its generation config) cuts every answer at 4 tokens
            asked = int(body.get("max_tokens") or 4)
            got = min(asked, 4)
            reply = {"id": f"c{n}", "object": "chat.completion",
                     "choices": [{"index": 0, "finish_reason": "length",
                                  "message": {"role": "assistant", "content": "one two three four"[: 4 * got]}}],
                     "usage": {"prompt_tokens": 20, "completion_tokens": got, "total_tokens": 20 + got}}
            self._send(handler, 200, json.dumps(reply).encode())
            return
        text = f"answer number {n}" if mode == "nondeterministic" else "the same answer"
        if mode == "empty-answer":
            text = ""
        reply = {
            "id": f"c{n}",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
            "usage": {"prompt_tokens": 5000, "completion_tokens": 1, "total_tokens": 5001},
        }
        if mode in ("hang-oversized", "hang-tools"):
            reply["timings"] = FAST_TIMINGS
        self._send(handler, 200, json.dumps(reply).encode())

    def _vllm(self, handler: BaseHTTPRequestHandler, mode: str, body: dict[str, Any]) -> None:
        """A vLLM that answers /detokenize, streams every token of max_tokens 10 ms apart, and samples by the fields a
        seeded request carries."""
        if handler.path == "/detokenize":
            text = "some other words" if mode == "vllm-other-tokenizer" else self.detokenized
            self._send(handler, 200, json.dumps({"prompt": text}).encode())
            return
        tokens = int(body.get("max_tokens") or 1)
        if body.get("stream"):
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()

            def send(event: Any) -> None:
                data = f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
                handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                handler.wfile.flush()

            send({"id": "s", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            for _ in range(tokens):
                self.stopping.wait(0.01)
                send({"id": "s", "choices": [{"index": 0, "delta": {"content": " word"}, "finish_reason": None}]})
            send({"id": "s", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            send({"id": "s", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": tokens}})
            send("[DONE]")
            handler.wfile.write(b"0\r\n\r\n")
            return
        text = "the same answer"
        if "seed" in body and mode != "vllm-sampler-blind":
            # sampled by the temperature the request sends; without one, the server's default: the declared 1.5, or
            # (vllm-other-sampler) greedy
            temperature = body.get("temperature", 0.0 if mode == "vllm-other-sampler" else 1.5)
            text = f"sampled at temperature {temperature:g}"
        reply = {"id": "c", "object": "chat.completion",
                 "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": text}}],
                 "usage": {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens}}
        self._send(handler, 200, json.dumps(reply).encode())

    def _stream(self, handler: BaseHTTPRequestHandler, mode: str, asked: int) -> None:
        """A complete event stream whose content is wrong in the way ``mode`` says (``asked``: its max_tokens)."""
        if mode == "stream-refused":
            self._send(handler, 500, b'{"error":{"code":500,"message":"streaming is broken"}}')
            return
        delta: dict[str, Any] = {"role": "assistant", "content": "" if mode == "stream-empty" else "one"}
        events: list[Any] = [{"id": "a", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
        if mode in BURSTS:
            tokens, timings = BURSTS[mode]
            events += [{"id": "a", "choices": [{"index": 0, "delta": {"content": " more"}, "finish_reason": None}]}
                       for _ in range(tokens - 1)]
            # an answer shorter than asked ended at the model's end of text, not at a length
            finish = "length" if tokens >= asked else "stop"
            events.append({"id": "a", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                           "timings": timings})
            events.append({"id": "a", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": tokens}})
        elif mode == "bad-stream":
            # another id, no role first, two finish chunks, no usage chunk
            events = [
                {"id": "a", "choices": [{"index": 0, "delta": {"content": "one"}, "finish_reason": None}]},
                {"id": "b", "choices": [{"index": 0, "delta": {"content": " two"}, "finish_reason": "length"}]},
                {"id": "b", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
        else:
            events.append({"id": "a", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            events.append({"id": "a", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}})
        payload = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        self._send(handler, 200, payload, "text/event-stream")

    def _tools(self, handler: BaseHTTPRequestHandler, mode: str, body: dict[str, Any]) -> None:
        """A valid call for tool_choice required; for none, a call anyway or a refusal; auto (vLLM) refused or
        answered with the call as text."""
        choice = body.get("tool_choice")
        if mode in AUTO_TOOL_MODES and choice != "required":
            if choice == "auto" and mode == "tools-auto-refused":
                self._send(handler, 400, json.dumps({"error": {"code": 400, "type": "BadRequestError", "message": (
                    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')}}
                ).encode())
                return
            text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n'
                    "</tool_call>") if choice == "auto" else "It is sunny in Paris."
            reply = {"id": "t", "object": "chat.completion",
                     "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": len(json.dumps(body.get("messages"))) // 4, "completion_tokens": 20}}
            self._send(handler, 200, json.dumps(reply).encode())
            return
        if body.get("tool_choice") == "none" and mode == "tools-none-refused":
            self._send(handler, 400, b'{"error":{"code":400,"message":"tool_choice none is not supported"}}')
            return
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})},
        }
        if body.get("stream"):
            # the call in two fragments, before the finish chunk, as llama-server streams it
            arguments = call["function"]["arguments"]
            parts = [{"index": 0, "id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": arguments[:9]}},
                     {"index": 0, "function": {"arguments": arguments[9:]}}]
            events: list[Any] = [{"id": "t", "choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                                          "finish_reason": None}]}]
            events += [{"id": "t", "choices": [{"index": 0, "delta": {"tool_calls": [p]}, "finish_reason": None}]}
                       for p in parts]
            events.append({"id": "t", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            self._send(handler, 200, sse([*events, "[DONE]"]), "text/event-stream")
            return
        reply = {
            "id": "t",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
            # a prompt as long as its messages: a longer tool result is billed more, as a template renders it
            "usage": {"prompt_tokens": len(json.dumps(body.get("messages"))) // 4, "completion_tokens": 20},
        }
        self._send(handler, 200, json.dumps(reply).encode())


# Faults of what agent clients build on, each breaking one thing of a real answer (DeltaFaults says which).
AGENT_MODES = (
    "tool-calls-at-finish",
    "tool-name-every-delta",
    "split-tool-arguments",
    "drop-reasoning-history",
    "break-json-schema",
    "break-json-schema-stream",
    "reasoning-as-content-stream",
    "think-tags-stream",
    "drop-tool-results",
    "first-call-only",
    "tool-index-zero",
    "schema-days-flattened",
    "schema-text-double-escaped",
    "schema-stream-fragment-lost",
    "tool-trace-in-content",
    "tool-trace-dropped",
    "tool-trace-stream-as-content",
    "auto-call-as-text",
    "auto-stream-as-text",
)


def _delta(event: Any) -> dict[str, Any] | None:
    choices = event.get("choices") if isinstance(event, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and isinstance(choices[0].get("delta"), dict):
        return choices[0]["delta"]  # type: ignore[no-any-return]
    return None


def rewrite_request(mode: str, body: dict[str, Any]) -> dict[str, Any]:
    """``drop-reasoning-history``: every message's trace stripped, under either engine's field (``_TRACE_KEYS``: a
    client or proxy that keeps only the OpenAI fields of the history); ``drop-tool-results``: the results sent back
    for the call being answered (the tool messages after the last user message) blanked -- the loop's result never
    reaches the model, while the few-shot history before the question stays whole (the vLLM fixture model, trained on
    that history, writes no call for a request whose example lost its result: measured)."""
    if mode == "drop-reasoning-history":
        body = {**body, "messages": [{k: v for k, v in m.items() if k not in _TRACE_KEYS}
                                     for m in body.get("messages", [])]}
    if mode == "drop-tool-results":
        messages = body.get("messages", [])
        asked = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        body = {**body, "messages": [{**m, "content": ""} if m.get("role") == "tool" and i > asked else m
                                     for i, m in enumerate(messages)]}
    return body


def _tool_names(request: dict[str, Any]) -> set[str]:
    return {t.get("function", {}).get("name") for t in request.get("tools") or [] if isinstance(t, dict)}


def _thinking_with_tools(request: dict[str, Any]) -> bool:
    return bool(request.get("tools")) and bool((request.get("chat_template_kwargs") or {}).get("enable_thinking"))


_TRACE_KEYS = ("reasoning_content", "reasoning")
"""The fields a trace is sent and answered under: llama.cpp's, vLLM 0.32's."""


def _trace_key(message: dict[str, Any]) -> str:
    """Where a message carries its trace: llama.cpp's ``reasoning_content``, vLLM 0.32's ``reasoning``."""
    return "reasoning" if isinstance(message.get("reasoning"), str) else "reasoning_content"


def _rewrite_plan_arguments(mode: str, arguments: str) -> str:
    """``schema-days-flattened``: the array of days becomes its first day (a parser or proxy that flattens nesting);
    ``schema-text-double-escaped``: the note's escapes written once more (a text encoded twice)."""
    parsed = json.loads(arguments)
    if mode == "schema-days-flattened":
        parsed["days"] = parsed["days"][0]
    else:
        parsed["note"] = json.dumps(parsed["note"])[1:-1]
    return json.dumps(parsed)


def rewrite_answer(mode: str, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """``break-json-schema``: a response_format answer loses its last character (a document cut short);
    ``first-call-only``: an answer to a request for parallel calls keeps only its first; ``schema-*``: the
    nested-schema call's arguments rewritten (``_rewrite_plan_arguments``); ``tool-trace-in-content``: with thinking
    on and tools, the trace also written into the content in think tags; ``tool-trace-dropped``: the trace's field
    dropped from such an answer; ``auto-call-as-text``: an auto answer's calls turned back into their markup in the
    content (a parser or proxy that leaves calls as text)."""
    if mode in ("schema-days-flattened", "schema-text-double-escaped") and "plan_trip" in _tool_names(request):
        for call in reply["choices"][0]["message"].get("tool_calls") or []:
            call["function"]["arguments"] = _rewrite_plan_arguments(mode, call["function"]["arguments"])
    if mode in ("tool-trace-in-content", "tool-trace-dropped") and _thinking_with_tools(request):
        message = reply["choices"][0]["message"]
        key = _trace_key(message)
        trace = message.pop(key, None) if mode == "tool-trace-dropped" else message.get(key)
        if mode == "tool-trace-in-content":
            message["content"] = f"<think>\n{trace}\n</think>\n" + (message.get("content") or "")
    if mode == "auto-call-as-text" and request.get("tool_choice") == "auto":
        message = reply["choices"][0]["message"]
        calls = message.pop("tool_calls", None) or []
        message["content"] = "".join(f'<tool_call>\n{{"name": "{c["function"]["name"]}", "arguments": '
                                     f'{c["function"]["arguments"]}}}\n</tool_call>' for c in calls)
        reply["choices"][0]["finish_reason"] = "stop"
    if mode == "break-json-schema" and request.get("response_format"):
        message = reply["choices"][0]["message"]
        message["content"] = message["content"].rstrip()[:-1]
    if mode == "first-call-only" and request.get("parallel_tool_calls"):
        message = reply["choices"][0]["message"]
        message["tool_calls"] = (message.get("tool_calls") or [])[:1]
    return reply


def rewrite_stream(mode: str, request: dict[str, Any], events: list[Any]) -> list[Any]:
    """One fault of a whole stream's events (``[DONE]`` kept as the string):

    ``tool-calls-at-finish`` moves every tool-call delta, assembled into one, into the finish chunk;
    ``tool-name-every-delta`` repeats the call's name in each of its deltas (what a client appends twice);
    ``split-tool-arguments`` splits each arguments fragment into one-character deltas (a healthy stream, finer);
    ``tool-index-zero`` sends every call's deltas under index 0 (several calls merge into one);
    ``break-json-schema-stream`` drops the last content delta of a response_format stream;
    ``reasoning-as-content-stream`` sends the reasoning deltas as content, ``think-tags-stream`` the same wrapped in
    think tags (a streaming parser that does not split the trace out)."""
    if mode in ("tool-calls-at-finish", "tool-name-every-delta", "split-tool-arguments", "tool-index-zero") and request.get(
            "tools"):
        return _rewrite_calls(mode, events)
    if mode == "schema-stream-fragment-lost" and "plan_trip" in _tool_names(request):
        # one arguments fragment from the middle of the call lost on the way
        fragments = [i for i, e in enumerate(events) if any(
            (p.get("function") or {}).get("arguments") for p in (_delta(e) or {}).get("tool_calls") or [])]
        lost = fragments[len(fragments) // 2] if fragments else None
        return [e for i, e in enumerate(events) if i != lost]
    if mode == "tool-trace-stream-as-content" and _thinking_with_tools(request):
        for event in events:
            delta = _delta(event)
            key = _trace_key(delta) if delta is not None else ""
            if delta is not None and isinstance(delta.get(key), str):
                delta["content"] = (delta.get("content") or "") + delta.pop(key)
        return events
    if mode == "auto-stream-as-text" and request.get("tool_choice") == "auto":
        # every call delta's name and arguments sent as content (a streaming parser that does not see the call)
        for event in events:
            delta = _delta(event)
            parts = delta.get("tool_calls") if delta is not None else None
            if delta is not None and isinstance(parts, list):
                text = "".join((p.get("function") or {}).get("name") or "" for p in parts) + "".join(
                    (p.get("function") or {}).get("arguments") or "" for p in parts)
                del delta["tool_calls"]
                delta["content"] = (delta.get("content") or "") + text
        return events
    if mode == "break-json-schema-stream" and request.get("response_format"):
        last = max((i for i, e in enumerate(events) if (_delta(e) or {}).get("content")), default=None)
        return [e for i, e in enumerate(events) if i != last]
    thinking = (request.get("chat_template_kwargs") or {}).get("enable_thinking")
    if mode in ("reasoning-as-content-stream", "think-tags-stream") and thinking:
        out, opened, closed = [], False, False
        for event in events:
            delta = _delta(event)
            key = _trace_key(delta) if delta is not None else ""
            if delta is not None and isinstance(delta.get(key), str):
                text = delta.pop(key)
                if mode == "think-tags-stream" and not opened:
                    text, opened = "<think>" + text, True
                delta["content"] = (delta.get("content") or "") + text
            elif delta is not None and isinstance(delta.get("content"), str) and opened and not closed:
                delta["content"], closed = "</think>" + delta["content"], True
            out.append(event)
        return out
    return events


def _rewrite_calls(mode: str, events: list[Any]) -> list[Any]:
    out: list[Any] = []
    held: dict[int, dict[str, Any]] = {}
    for event in events:
        delta = _delta(event)
        parts = delta.get("tool_calls") if delta is not None else None
        if delta is None or not isinstance(parts, list):
            if mode == "tool-calls-at-finish" and held and delta is not None and event["choices"][0].get("finish_reason"):
                event["choices"][0]["delta"] = {"tool_calls": list(held.values())}
            out.append(event)
            continue
        for part in parts:
            function = part.setdefault("function", {})
            if mode == "tool-calls-at-finish":
                call = held.setdefault(part["index"], {"index": part["index"], "function": {"arguments": ""}})
                for key in ("id", "type"):
                    if key in part:
                        call[key] = part[key]
                if "name" in function:
                    call["function"]["name"] = function["name"]
                call["function"]["arguments"] += function.get("arguments", "")
            elif mode == "tool-name-every-delta":
                function["name"] = "get_weather"
            elif mode == "tool-index-zero":
                part["index"] = 0
        if mode == "tool-calls-at-finish":
            if event["choices"][0].get("finish_reason"):
                # the engine's own finish chunk carried the last fragment: the assembled calls take its place there
                event["choices"][0]["delta"] = {**delta, "tool_calls": list(held.values())}
                out.append(event)
            continue
        if mode == "split-tool-arguments":
            for part in parts:
                arguments = part.get("function", {}).get("arguments") or ""
                head = {**part, "function": {**part["function"], "arguments": arguments[:1]}}
                out.append({**event, "choices": [{**event["choices"][0], "delta": {"tool_calls": [head]}}]})
                for char in arguments[1:]:
                    piece = {"index": part["index"], "function": {"arguments": char}}
                    out.append({**event, "choices": [{**event["choices"][0], "delta": {"tool_calls": [piece]}}]})
            continue
        out.append(event)
    return out


def _plain(request: dict[str, Any]) -> bool:
    """A stream of text alone: no tools, no schema, thinking not asked for (what live-stream sends)."""
    thinking = (request.get("chat_template_kwargs") or {}).get("enable_thinking")
    return not (request.get("tools") or request.get("response_format") or thinking)


def sse(events: list[Any]) -> bytes:
    return b"".join(f"data: {e if e == '[DONE]' else json.dumps(e)}\n\n".encode() for e in events)


PROXY_MODES = (
    "freeze-metrics",
    "strip-spec-metrics",
    "zero-acceptance",
    "stall-stream",
    "buffer",
    "delay",
    "slow-refusal",
    "slow-refusal-once",
    "unauthorized",
    "unauthorized-images",
    "loading",
    "rate-limit-once",
    "rate-limited",
    "rate-limit-streams",
    "cut-second-stream",
    *AGENT_MODES,
)


class FaultProxy:
    """A forwarding proxy in front of a real endpoint that injects one fault of the network between them.

    ``freeze-metrics`` serves the first /metrics it saw forever (a stale exporter); ``strip-spec-metrics``
    drops the speculative-decoding series from /metrics (an exporter that filters them);
    ``zero-acceptance`` reports every answer's drafts as rejected (``timings.draft_n_accepted`` 0: what a
    drafter that never agrees with the target reports); ``stall-stream`` holds an event stream
    ``delay`` seconds before its first byte; ``buffer`` holds an
    event stream until it is complete and sends it at once; ``delay`` holds every POST ``delay`` seconds;
    ``slow-refusal`` holds every 4xx answer ``delay`` seconds, ``slow-refusal-once`` only the first (a
    request queued behind another client's); ``unauthorized`` answers 401 to all but
    /health; ``unauthorized-images`` answers 401 to a chat request that carries an image; ``loading``
    answers 503 ``Loading model`` for the first ``delay`` seconds; ``rate-limit-once`` answers the second chat
    request 429 with ``Retry-After: 1`` (then passes everything), ``rate-limited`` every chat request,
    ``rate-limit-streams`` every streaming one;
    ``cut-second-stream`` cuts the second of live-stream's plain event streams after its first chunk (the first one passes whole).
    Listens on 127.0.0.1 only; every upstream call is bounded.
    """

    def __init__(self, upstream: str, mode: str, *, delay: float = 0.0) -> None:
        if mode not in PROXY_MODES:
            raise ValueError(mode)
        self.upstream = upstream.rstrip("/")
        self.mode = mode
        self.delay = delay
        self.stopping = threading.Event()
        self.frozen: bytes | None = None
        self.started = 0.0
        self.chats = 0
        self.streams = 0
        self.limited = 0
        """429s answered."""
        self.refusals_held = 0
        """4xx answers held (``slow-refusal-once``)."""
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.handle(self, "GET", b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                proxy.handle(self, "POST", self.rfile.read(length))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        import time

        self.started = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        kind: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        import time

        import httpx

        mode, path = self.mode, handler.path
        if mode == "loading" and time.monotonic() - self.started < self.delay:
            # tools/server/server-http.cpp: what llama-server answers while it loads
            self._send(handler, 503, b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}')
            return
        if mode == "unauthorized" and path != "/health":
            self._send(handler, 401, b'{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}')
            return
        if mode == "unauthorized-images" and method == "POST" and b'"image_url"' in body:
            self._send(handler, 401, b'{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}')
            return
        if mode == "freeze-metrics" and path == "/metrics" and self.frozen is not None:
            self._send(handler, 200, self.frozen, "text/plain; version=0.0.4")
            return
        if mode == "delay" and method == "POST":
            self.stopping.wait(self.delay)
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("authorization", "content-type")}
        streaming = method == "POST" and (b'"stream": true' in body or b'"stream":true' in body)
        if mode in AGENT_MODES and method == "POST" and path == "/v1/chat/completions":
            self._agent(handler, mode, json.loads(body), streaming, headers)
            return
        if method == "POST" and path == "/v1/chat/completions":
            with self.lock:
                self.chats += 1
                # live-stream's own streams: the streams of tool calls, schemas and reasoning are other checks'
                plain = streaming and _plain(json.loads(body))
                self.streams += plain
                chat, stream = self.chats, self.streams if plain else 0
            if (mode == "rate-limited" or (mode == "rate-limit-once" and chat == 2)
                    or (mode == "rate-limit-streams" and streaming)):
                with self.lock:
                    self.limited += 1
                self._send(handler, 429, b'{"error":{"code":429,"message":"Too Many Requests","type":"rate_limit"}}',
                           headers={"Retry-After": "1"})
                return
        else:
            stream = 0
        with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0)) as client:
            request = client.build_request(method, self.upstream + path, content=body or None, headers=headers)
            response = client.send(request, stream=True)
            try:
                kind = response.headers.get("content-type", "application/json")
                if streaming and response.status_code == 200 and mode != "buffer":
                    if mode == "stall-stream":
                        self.stopping.wait(self.delay)
                    handler.send_response(200)
                    handler.send_header("Content-Type", kind)
                    handler.send_header("Transfer-Encoding", "chunked")
                    handler.end_headers()
                    for chunk in response.iter_raw():
                        handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        handler.wfile.flush()
                        if mode == "cut-second-stream" and stream == 2:
                            handler.close_connection = True  # no terminating chunk: the stream is cut
                            return
                    handler.wfile.write(b"0\r\n\r\n")
                    return
                data = response.read()
            finally:
                response.close()
        if mode == "freeze-metrics" and path == "/metrics" and response.status_code == 200:
            self.frozen = data
        if mode == "strip-spec-metrics" and path == "/metrics":
            data = b"\n".join(line for line in data.split(b"\n") if b"spec_decode" not in line) + b"\n"
        if mode == "zero-acceptance" and path == "/v1/chat/completions" and response.status_code == 200:
            reply = json.loads(data)
            if isinstance(reply.get("timings"), dict) and "draft_n_accepted" in reply["timings"]:
                reply["timings"]["draft_n_accepted"] = 0
                data = json.dumps(reply).encode()
        if mode == "slow-refusal" and 400 <= response.status_code < 500:
            self.stopping.wait(self.delay)
        if mode == "slow-refusal-once" and 400 <= response.status_code < 500 and not self.refusals_held:
            self.refusals_held += 1
            self.stopping.wait(self.delay)
        self._send(handler, response.status_code, data, kind)

    def _agent(self, handler: BaseHTTPRequestHandler, mode: str, request: dict[str, Any], streaming: bool,
               headers: dict[str, str]) -> None:
        """A chat request forwarded whole, its answer (or its stream, read to its end) rewritten by ``mode``."""
        import httpx

        request = rewrite_request(mode, request)
        with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0)) as client:
            response = client.post(self.upstream + "/v1/chat/completions", json=request, headers=headers)
        if response.status_code != 200:
            self._send(handler, response.status_code, response.content)
            return
        if not streaming:
            self._send(handler, 200, json.dumps(rewrite_answer(mode, request, response.json())).encode())
            return
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        parsed = [e if e == "[DONE]" else json.loads(e) for e in events]
        self._send(handler, 200, sse(rewrite_stream(mode, request, parsed)), "text/event-stream")
