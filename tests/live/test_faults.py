"""Faults a real server will not produce on demand: each gives a clear failure within its bound.

The endpoint is down, hangs, answers garbage, truncates its stream, answers 500, is not
deterministic, or accepts a prompt over its window. The fault server is a fake, used for faults only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from fleetgate.reference import free_port

from .conftest import Gate
from .faults import FaultServer

# mode -> (checks run, the message every one of them must carry)
FAULTS: dict[str, tuple[tuple[str, ...], str]] = {
    "down": (("live-health", "live-chat"), "down: cannot connect"),
    "hang": (("live-health", "live-chat", "live-stream"), "within the 2 s bound"),
    "garbage": (("live-alias", "live-chat"), "not JSON"),
    "truncate": (("live-stream",), "without [DONE]"),
    "error": (("live-health", "live-chat"), "HTTP 500: backend exploded"),
    "nondeterministic": (("live-determinism",), "first 'answer number"),
    "accept-anything": (("live-capacity",), "was accepted and prefilled"),
}
FAULT_CHECKS = {check for checks, _ in FAULTS.values() for check in checks}
_TESTS = {
    "live-health": "health",
    "live-chat": "chat",
    "live-stream": "stream",
    "live-alias": "alias",
    "live-determinism": "determinism",
    "live-capacity": "capacity",
}


@pytest.mark.parametrize("mode", list(FAULTS))
def test_fault(mode: str, gate: Callable[..., Gate], no_api_key: None) -> None:
    checks, message = FAULTS[mode]
    selection = " or ".join(f"test_{_TESTS[c]}" for c in checks)
    start = time.monotonic()
    if mode == "down":
        run = gate(f"http://127.0.0.1:{free_port()}", "-k", selection, "--live-timeout", "2")
    else:
        with FaultServer(mode) as server:
            run = gate(server.url, "-k", selection, "--live-timeout", "2")
    elapsed = time.monotonic() - start
    assert run.failed == set(checks), run.output
    for check in checks:
        assert message in run.note(check), (check, run.note(check))
    # bounded: each hanging request gives up at the 2 s bound (plus the gate's own start-up)
    assert elapsed < 10 + 3 * len(checks), elapsed


def test_an_echoed_api_key_never_reaches_the_output(
    gate: Callable[..., Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-fleetgate-test-0123456789"
    monkeypatch.setenv("FLEETGATE_API_KEY", secret)
    with FaultServer("echo-auth") as server:
        run = gate(server.url, "-k", "test_chat or test_alias")
    assert run.failed == {"live-chat", "live-alias"}
    assert "rejected credentials Bearer ***" in run.output
    assert secret not in run.output
