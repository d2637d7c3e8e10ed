"""Faults of the network between the gate and a real endpoint: a fault proxy in front of the reference.

Each case asserts every check's exact outcome. The readiness cases (401, a server still loading, a
proxy that holds every request) stop the run with their cause: one check says it, every other check is
not run -- not fifteen remedies, not five minutes of blame elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fleetgate.reference import ReferenceServer

from .conftest import GateHere, expected_outcomes, server_port, variants_for
from .faults import FaultProxy

NOT_RUN = "skipped"

# mode -> (proxy delay, the outcome of every check that does not pass, whether every live check but the named ones
# is not run)
PROXIES: dict[str, tuple[float, dict[str, str], bool]] = {
    "freeze-metrics": (0, {"live-drafter": "live-drafter/counters-frozen"}, False),
    "strip-spec-metrics": (
        0,
        # the rules name the spec series too: live-metrics sees them missing as well
        {"live-drafter": "live-drafter/counter-missing", "live-metrics": "live-metrics/rule-series-missing"},
        False,
    ),
    "zero-acceptance": (0, {"live-drafter": "live-drafter/acceptance-below-floor"}, False),
    # no ttft_s declared: late twice while the engine sat idle (tests/live/test_stream_wait.py has the other branches)
    "stall-stream": (20, {"live-stream": "live-stream/held"}, False),
    "buffer": (0, {"live-stream": "live-stream/buffered"}, False),
    "slow-refusal": (4, {"live-capacity": "live-capacity/slow-refusal"}, False),
    # one refusal held as a queue holds it (behind another client's generation): asked again, it passes
    "slow-refusal-once": (4, {}, False),
    "unauthorized-images": (0, {"live-vision": "live-vision/foreign-refusal"}, False),
    "unauthorized": (0, {"live-health": "live-health/unauthorized"}, True),
    "loading": (60, {"live-health": "live-health/loading"}, True),
    "delay": (20, {"live-health": "passed", "live-chat": "live-chat/slower-than-bound"}, True),
    # one 429 with Retry-After: 1 is waited out within the request's bound: nothing fails
    "rate-limit-once": (0, {}, False),
    # a rate limit that persists is said once, as such
    "rate-limited": (0, {"live-health": "passed", "live-chat": "live-chat/rate-limited"}, True),
    # every event stream answered 429 with Retry-After: 1 (other requests pass): named as rate limiting, by every check
    # that streams (the streamed tool call, parallel calls, schema and reasoning too, the nested call and the call with
    # reasoning on, each after its blocking request)
    "rate-limit-streams": (0, {"live-stream": "live-stream/rate-limited", "live-tool-calls": "live-tool-calls/rate-limited",
                               "live-parallel-tool-calls": "live-parallel-tool-calls/rate-limited",
                               "live-structured-output": "live-structured-output/rate-limited",
                               "live-reasoning": "live-reasoning/rate-limited",
                               "live-tool-schema": "live-tool-schema/rate-limited",
                               "live-tool-reasoning": "live-tool-reasoning/rate-limited"}, False),
    # the first stream passes whole, the second is cut: the gate streams twice
    "cut-second-stream": (0, {"live-stream": "live-stream/truncated"}, False),
}
PROXY_CODES = {code for _, failing, _ in PROXIES.values() for code in failing.values() if "/" in code}


def _halted(failing: dict[str, str]) -> dict[str, str]:
    """Every live check not run but the failing ones; the host checks, which read the host, still run."""
    outcomes = {check: NOT_RUN if check.startswith("live-") else outcome
                for check, outcome in expected_outcomes({}).items()}
    outcomes.update(failing)
    return outcomes


# A proxy injects its fault whatever words the model picks: every case runs once, under the shipped numerics
# (conftest.variants_for; the variant stays in the test's id).
@pytest.mark.parametrize(("variant", "mode"), [("shipped", m) for m in PROXIES], ids=[f"shipped-{m}" for m in PROXIES],
                         indirect=["variant"])
def test_proxy(
    mode: str,
    variant: str,
    reference_in: ReferenceServer,
    gate: Callable[..., GateHere],
    no_api_key: None,
) -> None:
    delay, failing, halted = PROXIES[mode]
    assert variants_for(failing) == [variant], "a proxy's fault that generated text decides: run it under every variant"
    with FaultProxy(reference_in.url, mode, delay=delay) as proxy:
        # the engine is declared at its own port: the host checks judge it, not the proxy (said once)
        run = gate(proxy.url, port=server_port(reference_in.url), variant=variant)
    expected = _halted(failing) if halted else expected_outcomes(failing)
    assert run.outcomes == expected, run.output
    if mode in ("stall-stream", "delay"):
        # late twice, the engine seen idle meanwhile: held between the gate and the engine, not queued in it
        assert "had no request in progress or waiting for" in run.output, run.output
    if mode == "rate-limit-once":
        assert proxy.limited == 1, proxy.limited
    if mode == "slow-refusal-once":
        assert proxy.refusals_held == 1, proxy.refusals_held
        assert "on attempt 2 (refused after " in run.note("live-capacity"), run.note("live-capacity")
    if mode == "rate-limited":
        # the readiness probe waited out Retry-After three times, then said so; no other request was sent
        assert proxy.limited == 4, proxy.limited
    if mode == "unauthorized":
        # said once, naming where the key comes from
        assert run.output.count("--api-key-env") == 1, run.output
    if halted:
        # stopped with the cause: the one held request, not a run of the whole gate at that pace -- as the gate
        # measures its checks (test_faults.py says why not the run's wall clock)
        took = run.checks_took()
        # (the held probe is sent twice: the second time while the engine is watched)
        assert took < 2 * delay + 30 if mode == "delay" else took < 30, run.output


def test_wait_ready_waits_for_a_loading_server(
    reference: ReferenceServer, gate: Callable[..., GateHere], no_api_key: None
) -> None:
    with FaultProxy(reference.url, "loading", delay=3) as proxy:
        run = gate(proxy.url, wait_ready=30, only=("live-health", "live-alias", "live-slots"),
                   port=server_port(reference.url))
    assert run.outcomes == {"live-health": "passed", "live-alias": "passed", "live-slots": "passed"}, run.output
