"""Speculation, caches and capacity (C.3, C.4): the promises a client cannot see until they break.

A drafter that loaded but never drafts (INC-16, llama.cpp#25345) only shows as counters that do
not move; a prompt cache that does not hit only shows as re-prefill; a window other than the one
clients are told only shows when a long prompt is refused (INC-83).
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fleetgate.checks import NotJudged, live_check
from fleetgate.live.client import Reply
from fleetgate.live.endpoint import (
    TEMPLATE_ALLOWANCE_TOKENS,
    LiveEndpoint,
    OutOfTime,
    cached_tokens_of,
    prompt_tokens_at_most,
    timings_of,
    usage_of,
)

__all__: list[str] = []

DRAFTER = "live-drafter"
PREFIX = "live-prefix-cache"
CAPACITY = "live-capacity"

DRAFT_TOKENS = 24
REFUSAL_FLOOR_S = 1.0
REFUSAL_ATTEMPTS = 3
REFUSAL_RETRY_PAUSE_S = 0.5
"""A refusal before prefill is a tokenizer pass: milliseconds. A refusal slower than this (or than half
the prefill at the measured rate, when that is shorter) beyond a one-token request sent at the same
instant -- which waits in the same queue for a slot -- did work it should not have, whatever the rate."""


def _no_drafter(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.speculative is None:
        return (f"{DRAFTER} does not apply to {endpoint.name}: fleetgate reads no command line of its engine "
                f"({endpoint.engine}) to say whether it drafts")
    if endpoint.dialect.drafts_metric is None:
        return f"{DRAFTER} does not apply to {endpoint.name}: its engine ({endpoint.engine}) exports no drafting counter"
    return None


def _slot_types(endpoint: LiveEndpoint) -> set[str] | None:
    """The speculative types the slots' last tasks ran with (/slots params, llama.cpp), None if not served."""
    if not endpoint.dialect.has_props:
        return None
    reply = endpoint.get("/slots")
    if not reply.ok or not isinstance(reply.json, list):
        return None
    types: set[str] = set()
    for slot in reply.json:
        params = slot.get("params") if isinstance(slot, dict) else None
        value = params.get("speculative.types") if isinstance(params, dict) else None
        if isinstance(value, str):
            types |= {t.strip() for t in value.split(",") if t.strip() and t.strip() != "none"}
    return types


def _acceptance_floor(endpoint: LiveEndpoint) -> tuple[float | None, str]:
    """The contract's draft_acceptance_min, else the threshold of the fleet's own acceptance alert rule."""
    if endpoint.contract.draft_acceptance_min is not None:
        return endpoint.contract.draft_acceptance_min, "contract draft_acceptance_min"
    dialect = endpoint.dialect
    for rule in endpoint.rule_thresholds:
        if rule.numerator == dialect.accepted_metric and rule.denominator == dialect.draft_tokens_metric:
            return rule.threshold, f"alert {rule.alert} ({rule.where})"
    return None, "no floor declared (contract draft_acceptance_min) and no acceptance alert rule"


@live_check(
    cites=("C-SP-1", "C-SP-5", "B-OB-2", "INC-16"),
    summary="where a drafter is declared: the declared spec type runs (/slots), it drafts on a request built "
    "to draft, acceptance clears the floor (contract, else the fleet's alert rule), and every spec counter "
    "exists and moves by what the response reports; where none is declared, nothing drafts",
    requires=_no_drafter,
    codes={
        "counter-missing": "a speculative-decoding counter the drafter alerts watch is not in /metrics (B-OB-2, INC-16)",
        "other-type": "the slots run another `--spec-type` than the rendered one (/slots)",
        "not-drafting": "a drafter is declared, but a counting request drafts nothing: no counter moves, timings show no draft (INC-16)",
        "undeclared-drafter": "the endpoint drafts although its files declare no drafter",
        "counters-frozen": "the spec counters in /metrics moved less than the answer's own timings report (INC-16)",
        "acceptance-below-floor": "draft acceptance on a counting request is below the floor (contract, else the fleet's alert rule)",
    },
)
def live_drafter(endpoint: LiveEndpoint) -> None:
    dialect, contract = endpoint.dialect, endpoint.contract
    assert dialect.drafts_metric is not None
    before = endpoint.metrics(DRAFTER) if contract.metrics else None
    # Counting is the most predictable continuation there is: every drafter proposes on it.
    reply = endpoint.chat(
        DRAFTER,
        {
            "messages": [{"role": "user", "content": "Count from 1 to 30, separated by commas."}],
            "max_tokens": DRAFT_TOKENS,
            "temperature": 0,
            **endpoint.thinking(False),
            **dialect.decode_rate_fields,
        },
    )
    endpoint.require_ok(DRAFTER, reply)
    after = endpoint.metrics(DRAFTER) if contract.metrics else None
    timings = timings_of(reply.json)
    drafted = timings.get("draft_n") if isinstance(timings.get("draft_n"), int) else None
    accepted = timings.get("draft_n_accepted") if isinstance(timings.get("draft_n_accepted"), int) else None
    running = _slot_types(endpoint) if contract.speculative else None
    counters = [m for m in (dialect.drafts_metric, dialect.draft_tokens_metric, dialect.accepted_metric) if m]
    moved: dict[str, float] = {}
    if before is not None and after is not None:
        missing = [m for m in counters if m not in after]
        if contract.speculative and missing:
            raise live_drafter.fail(endpoint, "counter-missing",
                                     where=endpoint.url + "/metrics",
                                     cites=("B-OB-2", "INC-16"),
                                     observed=f"/metrics has no {', '.join(missing)}",
                                     expected="the engine's speculative-decoding counters, which the drafter alert rules watch",
                                     fix="a counter that is not exported cannot move: the drafter-off alert can never fire; check the "
                                     "engine build and whatever serves /metrics")
        moved = {m: after.get(m, 0.0) - before.get(m, 0.0) for m in counters}
    evidence = []
    if moved:
        evidence.append(f"{dialect.drafts_metric} moved by {moved[dialect.drafts_metric]:g}")
    else:
        evidence.append("/metrics not read")
    if drafted is not None:
        evidence.append(f"{drafted} draft tokens, {accepted} accepted in this answer")
    if running is not None:
        evidence.append(f"/slots spec type {', '.join(sorted(running)) or 'none'}")
    if contract.speculative and running and running != set(contract.spec_types):
        raise live_drafter.fail(endpoint, "other-type",
                                 where=endpoint.where_flag("spec_type"),
                                 cites=("C-SP-1",),
                                 observed=f"the slots run --spec-type {','.join(sorted(running))}: " + "; ".join(evidence),
                                 expected=f"--spec-type {','.join(contract.spec_types)}, as rendered",
                                 fix="the process was started with another drafter than the files declare: restart it from the env "
                                 "file")
    drafting = moved.get(dialect.drafts_metric, 0.0) > 0 or (drafted or 0) > 0
    if contract.speculative and not drafting:
        raise live_drafter.fail(endpoint, "not-drafting",
                                 where=endpoint.where_flag("spec_type"),
                                 cites=("C-SP-1", "INC-16"),
                                 observed="no drafting across a counting request: " + "; ".join(evidence),
                                 expected=f"drafts on a request built to draft: the rendered config runs --spec-type "
                                 f"{','.join(contract.spec_types)}",
                                 fix="the drafter is declared but not running: read the load log for the draft model and "
                                 "'adding speculative implementation'; without --spec-type nothing drafts even with a draft model")
    if not contract.speculative and drafting:
        raise live_drafter.fail(endpoint, "undeclared-drafter",
                                 where=endpoint.where_flag("spec_type"),
                                 cites=("C-SP-1",),
                                 observed="drafting on an endpoint whose files declare no drafter: " + "; ".join(evidence),
                                 expected="no speculative decoding (no --spec-type in the rendered config)",
                                 fix="the process was started with flags the files do not have: restart it from the env file")
    if not contract.speculative:
        endpoint.note("; ".join(evidence))
        return
    if moved and drafted is not None and accepted is not None and dialect.draft_tokens_metric and dialect.accepted_metric:
        counted = (moved[dialect.draft_tokens_metric], moved[dialect.accepted_metric])
        if counted[0] < drafted or counted[1] < accepted:
            raise live_drafter.fail(endpoint, "counters-frozen",
                                     where=endpoint.url + "/metrics",
                                     cites=("B-OB-2", "INC-16"),
                                     observed=f"the answer reports {drafted} draft tokens and {accepted} accepted; "
                                     f"{dialect.draft_tokens_metric} moved by {counted[0]:g} and {dialect.accepted_metric} by "
                                     f"{counted[1]:g}",
                                     expected="the counters move at least by what the answer reports",
                                     fix="what Prometheus scrapes is not what the engine counts (a caching proxy, a stale exporter): "
                                     "the drafter alerts watch frozen numbers")
    if drafted is None and moved and dialect.draft_tokens_metric and dialect.accepted_metric:
        drafted = int(moved[dialect.draft_tokens_metric])
        accepted = int(moved[dialect.accepted_metric])
    floor, floor_why = _acceptance_floor(endpoint)
    if drafted and accepted is not None:
        acceptance = accepted / drafted
        endpoint.measure("draft_acceptance", acceptance)
        if floor is not None and acceptance < floor:
            raise live_drafter.fail(endpoint, "acceptance-below-floor",
                                     where=endpoint.where_flag("spec_type"),
                                     cites=("C-SP-5", "B-OB-2"),
                                     observed=f"{accepted} of {drafted} draft tokens accepted ({acceptance:.2f}) on a counting "
                                     f"request: " + "; ".join(evidence),
                                     expected=f"acceptance at least {floor:g} ({floor_why})",
                                     fix="the drafter costs more than it saves: check that it is the declared draft model and type, "
                                     "and that its vocabulary matches the target's")
        endpoint.note(
            f"drafting: {accepted}/{drafted} accepted ({acceptance:.2f}, floor "
            f"{floor if floor is not None else 'none'}); " + "; ".join(evidence)
        )
    else:
        endpoint.note("; ".join(evidence))


def _no_prefix_cache(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.prefix_caching is True:
        return None
    return (f"{PREFIX} does not apply to {endpoint.name}: its rendered command line turns no prefix cache on "
            "(vLLM: --enable-prefix-caching), or fleetgate reads none for its engine")


def _move_slots_on(endpoint: LiveEndpoint, salt: str) -> int:
    """Give every slot another conversation at once (busy slots are never reused), so that a returning
    prompt can only come back from the host-RAM prompt cache. Returns how many were sent."""
    n_slots = endpoint.contract.n_slots
    if not endpoint.dialect.has_props or not n_slots or n_slots > 16:
        return 0

    def other(index: int) -> Any:
        return endpoint.chat(
            PREFIX,
            {
                "messages": [
                    {"role": "user", "content": f"Unrelated {salt}-{index}: " + "one two three four five " * 8}
                ],
                "max_tokens": 1,
                "temperature": 0,
                **endpoint.thinking(False),
            },
        )

    with ThreadPoolExecutor(max_workers=n_slots) as pool:
        for reply in pool.map(other, range(n_slots)):
            endpoint.require_ok(PREFIX, reply)
    return n_slots


@live_check(
    cites=("C-CA-1", "C-CA-5", "INC-11", "INC-43"),
    summary="a conversation that returns after every slot has moved on is served from the prompt cache "
    "(cached tokens reported)",
    requires=_no_prefix_cache,
    codes={
        "not-reused": "a conversation returning after every slot moved on had under half its prompt served from cache",
    },
)
def live_prefix_cache(endpoint: LiveEndpoint) -> None:
    # A salt makes the prompt new to this server; the return must then come from the cache.
    salt = secrets.token_hex(4)
    # A pangram is ten tokens in the vocabularies of this fleet.
    # At most three quarters of the window: a probe over it is refused (measured on vLLM 0.32 at a 512-token
    # window: a 400 before tokenising, by characters), never cached.
    probe = endpoint.dialect.prefix_probe_tokens
    if endpoint.contract.window is not None:
        probe = min(probe, endpoint.contract.window * 3 // 4)
    words = "The quick brown fox jumps over the lazy dog. " * (probe // 10)
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Reference {salt}. Repeat the last word: {words}"}],
        "max_tokens": 1,
        "temperature": 0,
        **endpoint.thinking(False),
    }
    first = endpoint.chat(PREFIX, body)
    endpoint.require_ok(PREFIX, first)
    moved = _move_slots_on(endpoint, salt)
    second = endpoint.chat(PREFIX, body)
    endpoint.require_ok(PREFIX, second)
    prompt = usage_of(second.json).get("prompt_tokens")
    cached = cached_tokens_of(second.json)
    cold_rate = timings_of(first.json).get("prompt_per_second")
    if isinstance(cold_rate, int | float):
        endpoint.measure("prefill_tok_s", float(cold_rate))
    away = f"after {moved} other conversations took every slot" if moved else "repeated at once"
    if cached is None:
        # No count is no evidence either way: "reused None cached tokens" blamed a cache that was on.
        how = ("vLLM counts them in usage.prompt_tokens_details.cached_tokens only when started with "
               "--enable-prompt-tokens-details" if endpoint.engine == "vllm" else
               "its answers carry neither usage.prompt_tokens_details.cached_tokens nor timings.cache_n")
        raise NotJudged(f"{endpoint.name} reports no cached tokens ({how}): add that flag to its serve script to "
                        "judge its prefix cache" if endpoint.engine == "vllm" else
                        f"{endpoint.name} reports no cached tokens ({how}): the prefix cache cannot be seen")
    if not isinstance(prompt, int) or cached < prompt // 2:
        raise live_prefix_cache.fail(endpoint, "not-reused",
                                where=endpoint.where_flag("cache_ram") if endpoint.dialect.has_props else second.url,
                                cites=("C-CA-1",),
                                observed=f"a {prompt}-token prompt {away} reused {cached} cached tokens "
                                f"(first request {first.elapsed:.2f} s, return {second.elapsed:.2f} s)",
                                expected="at least half the prompt served from cache when the conversation returns",
                                fix="start vLLM with --enable-prefix-caching (on by default; --no-enable-prefix-caching "
                                "turns it off), and a prompt reuses only whole blocks of it (INC-43)"
                                if endpoint.engine == "vllm" else
                                "keep cache_prompt on and a prompt cache (--cache-ram > 0) so a prompt survives its slot "
                                "moving on")
    endpoint.measure("cached_tokens", cached)
    endpoint.note(
        f"returned {away}: reused {cached}/{prompt} tokens ({first.elapsed:.2f} s cold, "
        f"{second.elapsed:.2f} s warm)"
    )


def _no_window(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.window is not None:
        return None
    return f"{CAPACITY} does not apply to {endpoint.name}: neither its rendered config nor its contract gives a context window"


def _refusal_attempt(endpoint: LiveEndpoint, bodies: list[dict[str, Any]], prompt_tokens: int) -> tuple[Reply, Reply]:
    """The oversized prompt and its one-token companion, sent at the same instant."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        reply, companion = pool.map(lambda body: _capacity_chat(endpoint, body, prompt_tokens), bodies)
    return reply, companion


def _capacity_chat(endpoint: LiveEndpoint, body: dict[str, Any], prompt_tokens: int) -> Reply:
    """One capacity request, bounded by what prefilling its tokens takes at the rates this run measured: an
    engine that holds a larger window than declared takes the oversized prompt and prefills it, and under
    load that takes longer, and so does its bound."""
    bound = endpoint.bound(prompt_tokens, int(body["max_tokens"]))
    try:
        return endpoint.chat(CAPACITY, body, bound=bound)
    except OutOfTime as late:
        raise live_capacity.fail(endpoint, "out-of-time",
                                  where=late.url,
                                  cites=("C-CAP-13",),
                                  observed=f"{late.observed} (of at most {prompt_tokens} prompt tokens sent), neither "
                                           "refused nor answered",
                                  expected=late.expected,
                                  fix="a refusal comes before prefill, an accepted prompt within its prefill at this run's rates: "
                                  "something holds the request (a stuck slot, a queue, a proxy); read the engine's log for it") from None


@live_check(
    cites=("C-CAP-13", "C-CA-8", "INC-83"),
    summary="a prompt just over the per-slot window is refused before prefill, naming its token count",
    requires=_no_window,
    codes={
        "out-of-time": "the over-window prompt was neither refused nor answered within the bound this run's rates derive",
        "accepted": "a prompt just over the per-slot window was accepted and prefilled: the process holds a larger window",
        "unexplained-refusal": "the over-window prompt was refused without naming its token count (C-CA-8)",
        "other-window": "the refusal names another window than the declared per-slot one, or a count not over it (INC-83)",
        "slow-refusal": "the over-window prompt was refused later than a refusal before prefill takes (1 s, or half the prefill)",
    },
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
    # A one-token request sent at the same instant waits in the same queue for a slot: the refusal is
    # timed against it, so a busy endpoint (other clients, the gate under xdist) is not blamed.
    bodies = [
        {"messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0, **endpoint.thinking(False)}
        for text in (filler, "Say yes.")
    ]
    # The oversized prompt is the window and its filler (one token per " the") plus the template's own tokens; an
    # engine that takes it prefills the companion's in the same batches, so both wait for both.
    tokens = window + 16 + TEMPLATE_ALLOWANCE_TOKENS + prompt_tokens_at_most(bodies[1])
    reply, companion = _refusal_attempt(endpoint, bodies, tokens)
    where = (
        endpoint.where_flag("ctx_size")
        if contract.slot_ctx is not None
        else endpoint.where_contract("context_window")
    )
    if reply.ok:
        prompt = usage_of(reply.json).get("prompt_tokens")
        raise live_capacity.fail(endpoint, "accepted",
                                  where=where,
                                  cites=("C-CAP-13",),
                                  observed=f"a prompt of {prompt} tokens was accepted and prefilled in {reply.elapsed:.1f} s",
                                  expected=f"a refusal: the window is {window} tokens",
                                  fix="the process holds a larger window than the files declare: restart from the env file, or "
                                  "declare it")
    refusal = endpoint.dialect.over_window(reply.status, reply.json, reply.error_message())
    if refusal is None or refusal.prompt_tokens is None:
        raise live_capacity.fail(endpoint, "unexplained-refusal",
                                  where=reply.url,
                                  cites=("C-CA-8",),
                                  observed=reply.brief(),
                                  expected="a refusal that names the prompt's token count (the free calibration of C-CA-8)",
                                  fix="the engine refuses without saying why: clients cannot tell an oversized prompt from an "
                                  "outage")
    problems = []
    if refusal.prompt_tokens <= window:
        problems.append(
            f"the refusal names {refusal.prompt_tokens} tokens, not more than the {window}-token window"
        )
    if refusal.window is not None and refusal.window != window:
        problems.append(f"the engine's window is {refusal.window} tokens, not {window}")
    if problems:
        raise live_capacity.fail(endpoint, "other-window",
                                  where=where,
                                  cites=("C-CAP-13", "C-CA-8", "INC-83"),
                                  observed="; ".join(problems),
                                  expected=f"a refusal at the {window}-token window clients are told "
                                  f"(fleet.toml context_window {contract.context_window})",
                                  fix="the process runs another window than the files declare (--max-model-len): restart it "
                                  "from the serve script, or declare the window it runs" if endpoint.engine == "vllm" else
                                  "--parallel divides --ctx-size: the process runs another per-slot window than the files "
                                  "declare")
    prefill = refusal.prompt_tokens / rate if rate else None
    base, base_why = REFUSAL_FLOOR_S, f"{REFUSAL_FLOOR_S:g} s"
    if prefill is not None and prefill / 2 < base:
        base, base_why = prefill / 2, f"half the {prefill:.1f} s prefilling it would take at {rate:.0f} tok/s"
    overhead = max(endpoint.baseline.overhead_s or 0.0, 0.0) if endpoint.baseline else 0.0

    def bound_of(companion: Reply) -> tuple[float, str]:
        if companion.ok:
            return base + companion.elapsed, f"{base_why} + the {companion.elapsed:.2f} s of a one-token request sent with it"
        return base + overhead, f"{base_why} + {overhead:.2f} s request overhead measured"

    # llama-server judges a prompt's length only when a slot takes it: behind another client's generation
    # (the gate's own checks under xdist) a refusal before prefill still waits for that slot while the
    # companion takes the free one. A refusal after prefill is late on every attempt; a queue is not.
    elapsed = [reply.elapsed]
    bound, bound_why = bound_of(companion)
    for _ in range(REFUSAL_ATTEMPTS - 1):
        if reply.elapsed <= bound:
            break
        time.sleep(REFUSAL_RETRY_PAUSE_S)
        reply, companion = _refusal_attempt(endpoint, bodies, tokens)
        if reply.ok or endpoint.dialect.over_window(reply.status, reply.json, reply.error_message()) is None:
            break
        elapsed.append(reply.elapsed)
        bound, bound_why = bound_of(companion)
    if reply.elapsed > bound:
        tries = " s, ".join(f"{e:.2f}" for e in elapsed)
        raise live_capacity.fail(endpoint, "slow-refusal",
                                  where=reply.url,
                                  cites=("C-CAP-13", "C-CA-8"),
                                  observed=f"the {refusal.prompt_tokens}-token prompt was refused after {tries} s "
                                           f"({len(elapsed)} attempt{'s' if len(elapsed) > 1 else ''})",
                                  expected=f"a refusal before prefill: within {bound:.2f} s ({bound_why})",
                                  fix="the refusal comes after work it should not need (prefill, a queue, a proxy that holds "
                                  "errors): clients wait that long for every oversized prompt")
    before = f"; prefilling it would take {prefill:.1f} s" if prefill else ""
    queued = ""
    if len(elapsed) > 1:
        late = " s, ".join(f"{e:.2f}" for e in elapsed[:-1])
        queued = f" on attempt {len(elapsed)} (refused after {late} s before: a queue, not prefill)"
    endpoint.measure("refusal_ms", reply.elapsed * 1000)
    endpoint.note(
        f"{refusal.prompt_tokens} tokens refused at the {refusal.window or window} window "
        f"in {reply.elapsed * 1000:.0f} ms{queued}{before}"
    )
