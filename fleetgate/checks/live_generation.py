"""Generation: a real completion, a well-formed stream, greedy determinism (C-L-3, C-PF-1, C-SP-6).

A green /health says nothing about the first real request (INC-01 died on it; INC-33 answered NaNs);
a stream that loses its finish chunk or its [DONE] hangs clients that wait for it.
"""

from __future__ import annotations

from typing import Any

from fleetgate.checks import check
from fleetgate.live.client import shorten
from fleetgate.live.endpoint import LiveEndpoint, finish_reason_of, message_of, timings_of, usage_of

CHAT = "live-chat"
STREAM = "live-stream"
DETERMINISM = "live-determinism"

CHAT_TOKENS = 16
STREAM_TOKENS = 12
DETERMINISM_TOKENS = 16


def _text(message: Any, field: str | None) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    text = content if isinstance(content, str) else ""
    if field and isinstance(message, dict) and isinstance(message.get(field), str):
        text += message[field]
    return text


@check(
    CHAT,
    kind="live",
    subject="endpoint",
    cites=("C-L-3", "C-H-9", "C-PF-1", "INC-01", "INC-33", "INC-55"),
    summary="a real chat completion answers 200 with generated text and usage; decode rate from engine "
    "timings",
)
def live_chat(endpoint: LiveEndpoint) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Write one short sentence about the sea."}],
        "max_tokens": CHAT_TOKENS,
        "temperature": 0,
        **endpoint.thinking(False),
        **endpoint.dialect.decode_rate_fields,
    }
    reply = endpoint.chat(CHAT, body)
    endpoint.require_ok(
        CHAT,
        reply,
        expected="200 with a completion",
        fix="the engine is up but cannot generate: read its log for the first request "
            "after startup (missing kernels, out of memory, a template error)",
        cites=("C-L-3",),
    )
    message = message_of(reply.json)
    text = _text(message, endpoint.contract.reasoning_field)
    completion = usage_of(reply.json).get("completion_tokens")
    if not text.strip() or not isinstance(completion, int) or completion < 1:
        raise endpoint.fail(
            CHAT,
            where=reply.url,
            cites=("C-L-3", "INC-33"),
            observed=f"finish_reason {finish_reason_of(reply.json)!r}, text {shorten(text, 80)!r}, "
            f"usage.completion_tokens {completion!r}",
            expected="generated text (content, or the declared reasoning field) and "
            "usage.completion_tokens >= 1",
            fix="an empty answer from a healthy server: check the payload (NaNs) and the chat template",
        )
    timings = timings_of(reply.json)
    decode = timings.get("predicted_per_second")
    if isinstance(decode, int | float):
        endpoint.measure("decode_tok_s", float(decode))
    endpoint.measure("chat_s", reply.elapsed)
    rate = (
        f", decode {decode:.0f} tok/s (engine timings, ignore_eos)" if isinstance(decode, int | float) else ""
    )
    endpoint.note(f"{completion} tokens in {reply.elapsed:.2f} s{rate}")


@check(
    STREAM,
    kind="live",
    subject="endpoint",
    cites=("C-L-3", "C-PF-1"),
    summary="a stream keeps one id, opens with the assistant role, has exactly one finish chunk, usage when "
    "asked, and ends with [DONE]",
)
def live_stream(endpoint: LiveEndpoint) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Count from one to five in words."}],
        "max_tokens": STREAM_TOKENS,
        "temperature": 0,
        "stream_options": {"include_usage": True},
        **endpoint.thinking(False),
    }
    stream = endpoint.stream_chat(STREAM, body)
    if stream.status != 200:
        raise endpoint.fail(
            STREAM,
            where=stream.url,
            observed=f"HTTP {stream.status}: {shorten(stream.error_text, 200)}",
            expected="200 and an event stream",
            fix="read the engine log for the refused stream",
        )
    problems: list[str] = []
    chunks = [e for e in stream.events if isinstance(e, dict)]
    ids = {c.get("id") for c in chunks}
    if len(ids) != 1:
        problems.append(f"{len(ids)} distinct ids across {len(chunks)} chunks: {sorted(map(str, ids))[:3]}")
    first_delta = next(
        (
            c["choices"][0].get("delta", {})
            for c in chunks
            if isinstance(c.get("choices"), list) and c["choices"]
        ),
        None,
    )
    if not isinstance(first_delta, dict) or first_delta.get("role") != "assistant":
        problems.append(f"the first delta does not carry role=assistant: {first_delta!r}")
    finishes = [
        c["choices"][0].get("finish_reason")
        for c in chunks
        if isinstance(c.get("choices"), list) and c["choices"] and c["choices"][0].get("finish_reason")
    ]
    if len(finishes) != 1:
        problems.append(f"{len(finishes)} chunks carry a finish_reason ({finishes})")
    usage = [c["usage"] for c in chunks if isinstance(c.get("usage"), dict)]
    if not usage:
        problems.append("no chunk carries usage although stream_options.include_usage was sent")
    if not stream.done:
        problems.append(f"the stream ended after {len(stream.events)} events without [DONE]")
    elif stream.after_done:
        problems.append(f"{stream.after_done} events after [DONE]")
    if problems:
        raise endpoint.fail(
            STREAM,
            where=stream.url,
            cites=("C-L-3",),
            observed="; ".join(problems),
            expected="one id, role=assistant first, exactly one finish_reason, a usage chunk, then [DONE]",
            fix="clients (and proxies) wait for the finish chunk and [DONE]: check the engine build and "
            "any proxy "
            "between the client and the engine",
        )
    first_token = next(
        (
            t
            for c, t in zip(stream.events, stream.times, strict=True)
            if isinstance(c, dict)
            and any(
                isinstance(ch, dict)
                and isinstance(ch.get("delta"), dict)
                and (
                    ch["delta"].get("content")
                    or ch["delta"].get("reasoning_content")
                    or ch["delta"].get("reasoning")
                )
                for ch in c.get("choices") or []
            )
        ),
        None,
    )
    if first_token is not None:
        endpoint.measure("ttft_ms", first_token * 1000)
    ttft = f", TTFT {first_token * 1000:.0f} ms" if first_token is not None else ""
    endpoint.note(f"{len(chunks)} chunks, one finish, usage, [DONE]{ttft}")


@check(
    DETERMINISM,
    kind="live",
    subject="endpoint",
    cites=("C-SP-6", "B-H-7"),
    summary="the same prompt at temperature 0 gives the same text twice (speculation must be lossless)",
)
def live_determinism(endpoint: LiveEndpoint) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "List the first five prime numbers."}],
        "max_tokens": DETERMINISM_TOKENS,
        "temperature": 0,
        "seed": 7,
        **endpoint.thinking(False),
    }
    texts = []
    for _ in range(2):
        reply = endpoint.chat(DETERMINISM, body)
        endpoint.require_ok(DETERMINISM, reply)
        texts.append(_text(message_of(reply.json), endpoint.contract.reasoning_field))
    if texts[0] != texts[1]:
        raise endpoint.fail(
            DETERMINISM,
            where=endpoint.url,
            cites=("C-SP-6", "B-H-7"),
            observed=f"first {shorten(texts[0], 80)!r}, then {shorten(texts[1], 80)!r}",
            expected="identical text at temperature 0",
            fix="greedy decoding must not depend on the drafter or on batching: compare with speculation "
            "off; "
            "a kernel or drafter that changes greedy text is a correctness bug",
        )
    endpoint.note(f"identical twice: {shorten(texts[0], 48)!r}")
