"""Generation: a real completion, a well-formed stream, greedy determinism (C-L-3, C-PF-1, C-SP-6).

A green /health says nothing about the first real request (INC-01 died on it; INC-33 answered NaNs);
a stream that loses its finish chunk or its [DONE] hangs clients that wait for it, and a stream that a
proxy buffers is no stream at all.

What the model says is never judged beyond what the request forces: a grammar that admits one answer
(llama.cpp) makes its length the engine's, so a shorter one was cut by the server; an answer with no
letter at all is garbage (INC-33: ``'!!!!!!!!'``), whatever words a healthy model picks.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from fleetgate.checks import NotJudged, live_check
from fleetgate.live.activity import Activity, source_for, wait_quiet, watching
from fleetgate.live.client import StreamReply, shorten
from fleetgate.live.endpoint import (
    OVERHEAD_FLOOR_S,
    LiveEndpoint,
    finish_reason_of,
    message_of,
    timings_of,
    usage_of,
)

__all__: list[str] = []

CHAT = "live-chat"
STREAM = "live-stream"
DETERMINISM = "live-determinism"

CHAT_TOKENS = 16
STREAM_TOKENS = 12
STREAM_AGAIN_TOKENS = 4
TIMING_MARGIN = 2.0
"""Timing bounds without a contract value are the overhead floor plus this many times what the engine
reports spending on the same answer: load slows the engine and its own figures alike."""
DETERMINISM_TOKENS = 16
BUFFERED_FRACTION = 0.25
"""A stream whose tokens arrive within this fraction of the time the engine spent generating them was
held back and released at once (a buffering proxy: about 0; a healthy stream: about 1)."""
_LETTER = re.compile(r"[^\W\d_]")


def _text(message: Any, field: str | None) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    text = content if isinstance(content, str) else ""
    if field and isinstance(message, dict) and isinstance(message.get(field), str):
        text += message[field]
    return text


@live_check(
    cites=("C-L-3", "C-H-9", "C-PF-1", "INC-01", "INC-33", "INC-55"),
    summary="a real chat completion answers 200 with generated text (not garbage) and usage; a request "
    "without max_tokens whose grammar admits one answer gets all of it (a server-side cap fails); decode rate "
    "from timings",
    codes={
        "slower-than-bound": "the one-token readiness request took longer than its bound: something holds every request",
        "empty-answer": "the completion carries no text (content or the reasoning field) or no completion_tokens",
        "cut-by-server": "a request without max_tokens got less than the one answer its grammar admits: a server-side cap",
        "garbage": "the completion has not a single letter (INC-33)",
    },
)
def live_chat(endpoint: LiveEndpoint) -> None:
    # The readiness probe's one-token request: held beyond its bound outside the engine, it stops the run.
    halt = endpoint.prepare()
    if halt is not None and halt.check == CHAT:
        raise halt.failure
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
    finish = finish_reason_of(reply.json)
    if not text.strip() or not isinstance(completion, int) or completion < 1:
        raise live_chat.fail(endpoint, "empty-answer",
                              where=reply.url,
                              cites=("C-L-3", "INC-33"),
                              observed=f"finish_reason {finish!r}, text {shorten(text, 80)!r}, "
                              f"usage.completion_tokens {completion!r}",
                              expected="generated text (content, or the declared reasoning field) and "
                              "usage.completion_tokens >= 1",
                              fix="an empty answer from a healthy server: check the payload (NaNs) and the chat template")
    fixed = endpoint.dialect.fixed_answer
    if fixed is not None:
        # No max_tokens: the grammar ends the answer. A server-side cap (which applies only to requests
        # that do not say max_tokens) cuts it.
        fields, answer = fixed
        capped = endpoint.chat(
            CHAT,
            {
                "messages": [{"role": "user", "content": "Write one short sentence about the sea."}],
                "temperature": 0,
                **endpoint.thinking(False),
                **fields,
            },
            forced=True,
        )
        endpoint.require_ok(CHAT, capped, expected="200 with the one answer the grammar admits", cites=("C-L-3",))
        got = message_of(capped.json).get("content")
        if finish_reason_of(capped.json) != "stop" or got != answer:
            raise live_chat.fail(endpoint, "cut-by-server",
                                  where=endpoint.where_flag("n_predict"),
                                  cites=("C-L-3",),
                                  observed=f"a request without max_tokens whose grammar admits only {answer!r} got "
                                  f"{shorten(str(got), 60)!r} ({usage_of(capped.json).get('completion_tokens')} tokens, "
                                  f"finish_reason {finish_reason_of(capped.json)!r})",
                                  expected=f"{answer!r}, finish_reason 'stop'",
                                  fix="the server caps generation for clients that send no max_tokens (llama.cpp --n-predict / "
                                  "-n): their answers are truncated; drop the cap or raise it above any answer")
    if not _LETTER.search(text):
        raise live_chat.fail(endpoint, "garbage",
                              where=reply.url,
                              cites=("INC-33",),
                              observed=f"{completion} tokens without a single letter: {shorten(text, 80)!r}",
                              expected="text: an answer to 'Write one short sentence about the sea' has letters in any language",
                              fix="the model computes garbage (INC-33: NaNs from a broken payload, a kernel or a sampler "
                              "setting such as a server-wide logit bias): check the payload and the engine's flags")
    timings = timings_of(reply.json)
    decode = timings.get("predicted_per_second")
    if isinstance(decode, int | float):
        endpoint.measure("decode_tok_s", float(decode))
    endpoint.measure("chat_s", reply.elapsed)
    rate = (
        f", decode {decode:.0f} tok/s (engine timings, ignore_eos)" if isinstance(decode, int | float) else ""
    )
    endpoint.note(f"{completion} tokens in {reply.elapsed:.2f} s{rate}")


def _token_times(stream: StreamReply) -> list[float]:
    """Arrival time of every chunk that carries generated text."""
    return [
        t
        for c, t in zip(stream.events, stream.times, strict=True)
        if isinstance(c, dict)
        and any(
            isinstance(ch, dict)
            and isinstance(ch.get("delta"), dict)
            and (ch["delta"].get("content") or ch["delta"].get("reasoning_content") or ch["delta"].get("reasoning"))
            for ch in c.get("choices") or []
        )
    ]


@live_check(
    cites=("C-L-3", "C-PF-1"),
    summary="a stream keeps one id, opens with the assistant role, has exactly one finish chunk, usage when "
    "asked, and ends with [DONE]; its first token comes within the TTFT bound, no gap exceeds the chunk bound, "
    "and its tokens arrive as the engine makes them, not all at once",
    codes={
        "malformed": "a stream broke the shape: more than one id, no role first, not one finish chunk, no usage or no [DONE]",
        "no-tokens": "a stream finished without any chunk carrying generated text",
        "too-slow": "a stream's first token or a gap between its chunks went over its bound (ttft_s, chunk_gap_s, else timings)",
        "held": "without a declared ttft_s, a stream's first token came late twice while the engine sat idle for the "
        "overhead floor of the wait (its own requests in progress, /metrics or /slots): something between holds it",
        "buffered": "a stream the engine made in three or more steps arrived within 25 % of its generation time: held back "
        "and released at once",
    },
)
def live_stream(endpoint: LiveEndpoint) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Count from one to five in words."}],
        "max_tokens": STREAM_TOKENS,
        "temperature": 0,
        "stream_options": {"include_usage": True},
        **endpoint.thinking(False),
        **endpoint.dialect.decode_rate_fields,
    }
    note = _stream_judged(endpoint, body, "the stream")
    # Again, shorter: a fault that lets one stream through (a proxy that cuts or buffers every other one, a
    # pool whose second connection goes elsewhere) hides behind a single request.
    _stream_judged(endpoint, {**body, "max_tokens": STREAM_AGAIN_TOKENS}, "the second stream")
    endpoint.note(note + "; again: well-formed")


class _LateFirstToken(Exception):
    """A first token later than the bound that the engine's own timings (or the measured rate) set, where the
    contract declares no ttft_s: late on the gate's clock, which the engine's activity during a second try judges."""

    def __init__(self, which: str, ttft: float, bound: float, why: str) -> None:
        super().__init__(f"{which}: the first token came after {ttft:.2f} s (bound {bound:.1f} s: {why})")
        self.ttft = ttft


QUIET_WAIT_S = 30.0
"""How long a stream that came late behind other requests waits for the engine to have none before it is sent
again: the gate's own checks on other xdist workers are such requests, and end."""
QUIET_TRIES = 2


def _stream_judged(endpoint: LiveEndpoint, body: dict[str, Any], which: str) -> str:
    """Stream ``body`` and judge it; a late first token is sent once more while the engine is watched, and where
    other requests were ahead of it, again once the engine has none (at most QUIET_TRIES times)."""
    try:
        return _judge_stream(endpoint, endpoint.stream_chat(STREAM, body), which=which)
    except _LateFirstToken as late:
        first = late
    get = endpoint.sample
    source = source_for(endpoint.engine, endpoint.dialect.has_props, get)
    quiet_waits: list[float] = []
    while True:
        with watching(source, get) as activity:
            retry = endpoint.stream_chat(STREAM, body)
        try:
            note = _judge_stream(endpoint, retry, which=f"{which}, sent again")
        except _LateFirstToken as again:
            verdict = _late_twice(endpoint, first, again, activity)
            if not isinstance(verdict, NotJudged) or source is None or len(quiet_waits) >= QUIET_TRIES:
                raise verdict from None
            waited = wait_quiet(source, get, QUIET_WAIT_S)
            if waited is None:
                raise verdict from None
            quiet_waits.append(waited)
            continue
        quiet = f"; sent once the engine had no request, after {', '.join(f'{w:.1f} s' for w in quiet_waits)}" \
            if quiet_waits else ""
        return f"{note} (sent again: {first}{quiet})"


def _late_twice(endpoint: LiveEndpoint, first: _LateFirstToken, again: _LateFirstToken, activity: Activity) -> Exception:
    """A first token late twice: held between the engine and the client where the engine sat idle for the
    overhead floor of the wait; otherwise the engine's own queue, which no bound of the gate's clock judges."""
    both = f"{first}; {again}"
    if activity.source is None or not activity.seen:
        why = activity.unreadable or "neither /metrics with its requests in progress nor /slots is served"
        return NotJudged(f"{both}. Whether the engine was busy with other requests meanwhile cannot be read ({why}): "
                         "serve /metrics (llama-server --metrics) or /slots, or declare ttft_s in the contract to "
                         "bound the wait on the gate's clock")
    idle, busy, unseen = activity.split(again.ttft)
    seen = f"the engine ({activity.source.path}) had no request in progress or waiting for {idle:.1f} s of the " \
        f"{again.ttft:.1f} s, had some for {busy:.1f} s, and was not seen for {unseen:.1f} s"
    if idle >= OVERHEAD_FLOOR_S:
        return live_stream.fail(endpoint, "held",
                                cites=("C-PF-1",),
                                observed=f"{both}; {seen}",
                                expected="the first token as soon as the engine has made it: the engine idle while a "
                                "stream's first token has not come means something between them holds it",
                                fix="something between the client and the engine holds the stream (a proxy's buffering "
                                "or queueing, a tunnel): find it on the path from the client to the engine's port")
    return NotJudged(f"{both}; {seen}: other requests were ahead of it, so the wait is the endpoint's load, not "
                     "something holding the stream. Run the gate when the endpoint is not busy, or declare ttft_s in "
                     "the contract to bound the wait on the gate's clock")


def _judge_stream(endpoint: LiveEndpoint, stream: StreamReply, *, which: str = "the stream") -> str:
    """Fail the check on a refused, malformed, empty, slow or buffered stream; the note for a good one."""
    if stream.rate_limited:
        raise live_stream.fail(endpoint, "rate-limited",
                                where=stream.url,
                                observed=f"HTTP {stream.status}: {shorten(stream.error_text, 160)}; Retry-After "
                                f"{stream.retry_after:g} s, still after {stream.retries} retries within the request's bound",
                                expected="an event stream once the endpoint's Retry-After has passed",
                                fix="the endpoint, or a proxy in front of it, rate-limits the gate: run the gate when it is not "
                                "saturated, or give the gate's key a limit that admits its requests")
    if stream.status != 200:
        raise live_stream.fail(endpoint, "refused",
                                where=stream.url,
                                observed=f"HTTP {stream.status}: {shorten(stream.error_text, 200)}",
                                expected="200 and an event stream",
                                fix="read the engine log for the refused stream")
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
        raise live_stream.fail(endpoint, "malformed",
                                where=stream.url,
                                cites=("C-L-3",),
                                observed=f"{which}: " + "; ".join(problems),
                                expected="one id, role=assistant first, exactly one finish_reason, a usage chunk, then [DONE]",
                                fix="clients (and proxies) wait for the finish chunk and [DONE]: check the engine build and "
                                "any proxy between the client and the engine")
    times = _token_times(stream)
    if not times:
        raise live_stream.fail(endpoint, "no-tokens",
                                where=stream.url,
                                observed=f"{len(chunks)} chunks, none carrying generated text",
                                expected="the generated tokens as deltas",
                                fix="read the engine log: the stream finished without generating")
    timings: dict[str, Any] = next(
        (c["timings"] for c in reversed(chunks) if isinstance(c.get("timings"), dict)), {}
    )
    prompt_tokens = usage[-1].get("prompt_tokens")
    ttft_bound, ttft_why = _ttft_bound(endpoint, prompt_tokens, timings)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    gap_bound, gap_why = _gap_bound(endpoint, timings)
    slow = []
    late = times[0] > ttft_bound
    if late:
        slow.append(f"the first token came after {times[0]:.2f} s (bound {ttft_bound:.1f} s: {ttft_why})")
    if gaps and max(gaps) > gap_bound:
        slow.append(f"a gap of {max(gaps):.2f} s between chunks (bound {gap_bound:.1f} s: {gap_why})")
    if late and len(slow) == 1 and endpoint.contract.ttft_s is None:
        # No declared bound: whether the wait was the engine's own queue is asked of the engine (_stream_judged).
        raise _LateFirstToken(which, times[0], ttft_bound, ttft_why)
    if slow:
        raise live_stream.fail(endpoint, "too-slow",
                                where=stream.url,
                                cites=("C-PF-1",),
                                observed=f"{which}: " + "; ".join(slow),
                                expected="the first token and every next chunk within the contract's bounds (ttft_s, chunk_gap_s), "
                                "else within what the engine itself reports spending on this answer (timings) plus the margin",
                                fix="something holds the stream between the engine and the client (a proxy, a saturated host), or "
                                "the engine is slower than the contract promises")
    engine_ms = timings.get("predicted_ms")
    span = times[-1] - times[0]
    steps = _emitting_steps(timings, len(times))
    if (isinstance(engine_ms, int | float) and len(times) >= 3 and steps >= 3
            and span < BUFFERED_FRACTION * engine_ms / 1000):
        raise live_stream.fail(endpoint, "buffered",
                                where=stream.url,
                                cites=("C-L-3", "C-PF-1"),
                                observed=f"{len(times)} token chunks arrived within {span * 1000:.0f} ms, after {times[0]:.2f} s; "
                                f"the engine reports {engine_ms:.0f} ms generating them in {steps} steps (timings)",
                                expected=f"tokens as they are generated: spread over at least {BUFFERED_FRACTION:.0%} of the "
                                "engine's generation time",
                                fix="a proxy buffers the event stream (nginx: proxy_buffering off; X-Accel-Buffering: no): "
                                "clients see nothing until the answer is complete")
    if which in ("the stream", "the stream, sent again"):
        endpoint.measure("ttft_ms", times[0] * 1000)
    spread = f", spread over {span * 1000:.0f} ms" if len(times) > 1 else ""
    return (
        f"{len(chunks)} chunks, one finish, usage, [DONE], TTFT {times[0] * 1000:.0f} ms{spread} "
        f"(bounds {ttft_bound:.1f} s / {gap_bound:.1f} s)"
    )


def _emitting_steps(timings: dict[str, Any], chunks: int) -> int:
    """How many times the engine emitted tokens for this answer: each token is its own step, but the drafts a
    speculative step accepts come out together with it (timings.draft_n_accepted), so a stream whose tokens were
    mostly accepted drafts arrives in a few bursts however it is served. Without timings, one step per chunk."""
    generated = timings.get("predicted_n")
    if not isinstance(generated, int) or isinstance(generated, bool) or generated < 1:
        return chunks
    accepted = timings.get("draft_n_accepted")
    if isinstance(accepted, int) and not isinstance(accepted, bool) and 0 < accepted < generated:
        return generated - accepted
    return generated


def _ttft_bound(endpoint: LiveEndpoint, prompt_tokens: Any, timings: Any) -> tuple[float, str]:
    """The contract's ttft_s, else the floor plus the margin times what the engine reports this very answer's
    prefill and first step took (so a loaded machine moves the time and its bound together), else the floor
    plus three times the prefill at the rate measured before the checks."""
    if endpoint.contract.ttft_s is not None:
        return endpoint.contract.ttft_s, "contract ttft_s"
    prompt_ms = timings.get("prompt_ms") if isinstance(timings, dict) else None
    step = timings.get("predicted_per_second") if isinstance(timings, dict) else None
    if isinstance(prompt_ms, int | float) and isinstance(step, int | float) and step > 0:
        own = prompt_ms / 1000 + 1 / step
        return (
            OVERHEAD_FLOOR_S + TIMING_MARGIN * own,
            f"{OVERHEAD_FLOOR_S:g} s + {TIMING_MARGIN:g} x the {own:.2f} s of prefill and first step the engine "
            "reports for this answer",
        )
    base = endpoint.baseline
    if base is not None and base.prefill_tok_s and isinstance(prompt_tokens, int):
        prefill = prompt_tokens / base.prefill_tok_s
        return OVERHEAD_FLOOR_S + 3 * prefill, f"{OVERHEAD_FLOOR_S:g} s + 3 x {prefill:.2f} s of prefill measured"
    if base is not None:
        return OVERHEAD_FLOOR_S + 3 * base.request_s, f"{OVERHEAD_FLOOR_S:g} s + 3 x a one-token request"
    return 2 * OVERHEAD_FLOOR_S, "no rate measured"


def _gap_bound(endpoint: LiveEndpoint, timings: Any) -> tuple[float, str]:
    """The contract's chunk_gap_s, else the floor plus the margin times the whole generation the engine reports
    for this answer (timings.predicted_ms): no pause of the engine's own, however loaded the machine, is longer
    than all of its generating; only something outside it holds a chunk that long."""
    if endpoint.contract.chunk_gap_s is not None:
        return endpoint.contract.chunk_gap_s, "contract chunk_gap_s"
    engine_ms = timings.get("predicted_ms") if isinstance(timings, dict) else None
    if isinstance(engine_ms, int | float) and engine_ms > 0:
        return (
            OVERHEAD_FLOOR_S + TIMING_MARGIN * engine_ms / 1000,
            f"{OVERHEAD_FLOOR_S:g} s + {TIMING_MARGIN:g} x the {engine_ms / 1000:.2f} s the engine reports "
            "generating this answer",
        )
    return OVERHEAD_FLOOR_S, "no generation time reported"


@live_check(
    cites=("C-SP-6", "B-H-7"),
    summary="the same prompt at temperature 0 gives the same text twice (speculation must be lossless)",
    codes={
        "differs": "the same prompt at temperature 0 gave different text twice",
    },
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
        raise live_determinism.fail(endpoint, "differs",
                                     where=endpoint.url,
                                     cites=("C-SP-6", "B-H-7"),
                                     observed=f"first {shorten(texts[0], 80)!r}, then {shorten(texts[1], 80)!r}",
                                     expected="identical text at temperature 0",
                                     fix="greedy decoding must not depend on the drafter or on batching: compare with speculation "
                                     "off; a kernel or drafter that changes greedy text is a correctness bug")
    why = endpoint.dialect.speculation_fixed_why if endpoint.contract.speculative else ""
    endpoint.note(f"identical twice: {shorten(texts[0], 48)!r}" + (f"; {why}" if why else ""))
