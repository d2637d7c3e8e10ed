"""Speculation, caches and capacity (C.3, C.4): the promises a client cannot see until they break.

A drafter that loaded but never drafts (INC-16, llama.cpp#25345) only shows as counters that do
not move; a prompt cache that does not hit only shows as re-prefill; a window other than the one
clients are told only shows when a long prompt is refused (INC-83).
"""

from __future__ import annotations

import secrets
from typing import Any

from fleetgate.checks import check
from fleetgate.live.endpoint import LiveEndpoint, cached_tokens_of, timings_of, usage_of

DRAFTER = "live-drafter"
PREFIX = "live-prefix-cache"
CAPACITY = "live-capacity"

DRAFT_TOKENS = 24


def _knows_drafter(endpoint: LiveEndpoint) -> bool:
    return endpoint.contract.speculative is not None and endpoint.dialect.drafts_metric is not None


def _slots_speculative(endpoint: LiveEndpoint) -> list[bool] | None:
    if not endpoint.dialect.has_props:
        return None
    reply = endpoint.get("/slots")
    if not reply.ok or not isinstance(reply.json, list):
        return None
    return [bool(slot.get("speculative")) for slot in reply.json if isinstance(slot, dict)]


@check(
    DRAFTER,
    kind="live",
    subject="endpoint",
    cites=("C-SP-1", "C-SP-5", "B-OB-2", "INC-16"),
    applies=_knows_drafter,
    summary="spec_decode_num_drafts_total moves across a request built to draft where a drafter is declared "
    "(acceptance reported), and does not move where none is",
)
def live_drafter(endpoint: LiveEndpoint) -> None:
    dialect, contract = endpoint.dialect, endpoint.contract
    assert dialect.drafts_metric is not None
    before = endpoint.metrics(DRAFTER)
    # Counting is the most predictable continuation there is: every drafter proposes on it.
    reply = endpoint.chat(
        DRAFTER,
        {
            "messages": [{"role": "user", "content": "Count from 1 to 30, separated by commas."}],
            "max_tokens": DRAFT_TOKENS,
            "temperature": 0,
            **endpoint.thinking(False),
        },
    )
    endpoint.require_ok(DRAFTER, reply)
    after = endpoint.metrics(DRAFTER)
    timings = timings_of(reply.json)
    drafted = timings.get("draft_n")
    accepted = timings.get("draft_n_accepted")
    moved: float | None = None
    if before is not None and after is not None:
        moved = after.get(dialect.drafts_metric, 0.0) - before.get(dialect.drafts_metric, 0.0)
        if dialect.draft_tokens_metric and dialect.accepted_metric and not isinstance(drafted, int):
            drafted = int(
                after.get(dialect.draft_tokens_metric, 0.0) - before.get(dialect.draft_tokens_metric, 0.0)
            )
            accepted = int(after.get(dialect.accepted_metric, 0.0) - before.get(dialect.accepted_metric, 0.0))
    slots = _slots_speculative(endpoint)
    evidence = []
    if moved is not None:
        evidence.append(f"{dialect.drafts_metric} moved by {moved:g}")
    else:
        evidence.append("/metrics not served")
    if isinstance(drafted, int):
        evidence.append(f"{drafted} draft tokens, {accepted} accepted in this answer")
    if slots is not None:
        evidence.append(f"/slots speculative {slots}")
    drafting = (moved is not None and moved > 0) or (isinstance(drafted, int) and drafted > 0)
    if contract.speculative and not drafting:
        raise endpoint.fail(
            DRAFTER,
            where=endpoint.where_flag("spec_type"),
            cites=("C-SP-1", "INC-16"),
            observed="no drafting across a counting request: " + "; ".join(evidence),
            expected=f"drafts on a request built to draft: the rendered config runs --spec-type "
            f"{','.join(contract.spec_types)}",
            fix="the drafter is declared but not running: read the load log for the draft model and "
            "'adding speculative implementation'; without --spec-type nothing drafts even with a draft model",
        )
    if not contract.speculative and drafting:
        raise endpoint.fail(
            DRAFTER,
            where=endpoint.where_flag("spec_type"),
            cites=("C-SP-1",),
            observed="drafting on an endpoint whose files declare no drafter: " + "; ".join(evidence),
            expected="no speculative decoding (no --spec-type in the rendered config)",
            fix="the process was started with flags the files do not have: restart it from the env file",
        )
    if contract.speculative and isinstance(drafted, int) and isinstance(accepted, int) and drafted > 0:
        endpoint.measure("draft_acceptance", accepted / drafted)
        endpoint.note(
            f"drafting: {accepted}/{drafted} accepted ({accepted / drafted:.2f}); " + "; ".join(evidence[:1])
        )
    else:
        endpoint.note("; ".join(evidence))


def _caches(endpoint: LiveEndpoint) -> bool:
    return endpoint.contract.prefix_caching is True


@check(
    PREFIX,
    kind="live",
    subject="endpoint",
    cites=("C-CA-1", "C-CA-5", "INC-11", "INC-43"),
    applies=_caches,
    summary="the same prompt sent twice is served from cache the second time (cached tokens reported)",
)
def live_prefix_cache(endpoint: LiveEndpoint) -> None:
    # A salt makes the prompt new to this server; the repeat must then come from the cache.
    salt = secrets.token_hex(4)
    # A pangram is ten tokens in the vocabularies of this fleet.
    words = "The quick brown fox jumps over the lazy dog. " * (endpoint.dialect.prefix_probe_tokens // 10)
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Reference {salt}. Repeat the last word: {words}"}],
        "max_tokens": 1,
        "temperature": 0,
        **endpoint.thinking(False),
    }
    first = endpoint.chat(PREFIX, body)
    second = endpoint.chat(PREFIX, body)
    for reply in (first, second):
        endpoint.require_ok(PREFIX, reply)
    prompt = usage_of(second.json).get("prompt_tokens")
    cached = cached_tokens_of(second.json)
    cold_rate = timings_of(first.json).get("prompt_per_second")
    if isinstance(cold_rate, int | float):
        endpoint.measure("prefill_tok_s", float(cold_rate))
    if not isinstance(prompt, int) or cached is None or cached < prompt // 2:
        raise endpoint.fail(
            PREFIX,
            where=second.url,
            cites=("C-CA-1",),
            observed=f"the repeat of a {prompt}-token prompt reused {cached} cached tokens "
            f"(first request {first.elapsed:.2f} s, repeat {second.elapsed:.2f} s)",
            expected="at least half the prompt served from cache on the repeat",
            fix="llama.cpp: keep cache_prompt on and a prompt cache (--cache-ram > 0) so a prompt "
            "survives its slot "
            "moving on; vLLM: --enable-prefix-caching (reuse is per block: INC-43)",
        )
    endpoint.measure("cached_tokens", cached)
    endpoint.note(
        f"repeat reused {cached}/{prompt} tokens ({first.elapsed:.2f} s cold, {second.elapsed:.2f} s warm)"
    )


def _has_window(endpoint: LiveEndpoint) -> bool:
    return endpoint.contract.window is not None


@check(
    CAPACITY,
    kind="live",
    subject="endpoint",
    cites=("C-CAP-13", "C-CA-8", "INC-83"),
    applies=_has_window,
    summary="a prompt just over the per-slot window is refused before prefill, naming its token count",
)
def live_capacity(endpoint: LiveEndpoint) -> None:
    contract = endpoint.contract
    window = contract.window
    assert window is not None
    # " the" is one token in every BPE vocabulary of this fleet; the template adds its own few.
    filler = " the" * (window + 16)
    metrics = endpoint.metrics(CAPACITY) if contract.metrics else None
    rate = None
    if metrics and endpoint.dialect.prompt_tokens_metric and endpoint.dialect.prompt_seconds_metric:
        seconds = metrics.get(endpoint.dialect.prompt_seconds_metric, 0.0)
        if seconds > 0:
            rate = metrics.get(endpoint.dialect.prompt_tokens_metric, 0.0) / seconds
    reply = endpoint.chat(
        CAPACITY,
        {
            "messages": [{"role": "user", "content": filler}],
            "max_tokens": 1,
            "temperature": 0,
            **endpoint.thinking(False),
        },
    )
    where = (
        endpoint.where_flag("ctx_size")
        if contract.slot_ctx is not None
        else endpoint.where_contract("context_window")
    )
    if reply.ok:
        prompt = usage_of(reply.json).get("prompt_tokens")
        raise endpoint.fail(
            CAPACITY,
            where=where,
            cites=("C-CAP-13",),
            observed=f"a prompt of {prompt} tokens was accepted and prefilled in {reply.elapsed:.1f} s",
            expected=f"a refusal: the window is {window} tokens",
            fix="the process holds a larger window than the files declare: restart from the env file, or "
            "declare it",
        )
    refusal = endpoint.dialect.over_window(reply.status, reply.json, reply.error_message())
    if refusal is None or refusal.prompt_tokens is None:
        raise endpoint.fail(
            CAPACITY,
            where=reply.url,
            cites=("C-CA-8",),
            observed=reply.brief(),
            expected="a refusal that names the prompt's token count (the free calibration of C-CA-8)",
            fix="the engine refuses without saying why: clients cannot tell an oversized prompt from an "
            "outage",
        )
    problems = []
    if refusal.prompt_tokens <= window:
        problems.append(
            f"the refusal names {refusal.prompt_tokens} tokens, not more than the {window}-token window"
        )
    if refusal.window is not None and refusal.window != window:
        problems.append(f"the engine's window is {refusal.window} tokens, not {window}")
    bound = refusal.prompt_tokens / rate if rate else None
    if bound is not None and reply.elapsed > bound / 2:
        problems.append(
            f"the refusal took {reply.elapsed:.2f} s, as long as prefilling it would "
            f"({bound:.1f} s at {rate:.0f} tok/s)"
        )
    if problems:
        raise endpoint.fail(
            CAPACITY,
            where=where,
            cites=("C-CAP-13", "C-CA-8", "INC-83"),
            observed="; ".join(problems),
            expected=f"a refusal before prefill at the {window}-token window clients are told "
            f"(fleet.toml context_window {contract.context_window})",
            fix="--parallel divides --ctx-size: the process runs another per-slot window than the files "
            "declare",
        )
    endpoint.measure("refusal_ms", reply.elapsed * 1000)
    before = f"; prefilling it would take {bound:.1f} s" if bound else ""
    endpoint.note(
        f"{refusal.prompt_tokens} tokens refused at the {refusal.window or window} window "
        f"in {reply.elapsed * 1000:.0f} ms{before}"
    )
