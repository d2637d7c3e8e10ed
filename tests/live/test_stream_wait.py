"""A late first token is judged on the engine's clock, not on the gate host's (fleetgate.live.activity).

Where the contract declares no ``ttft_s``, a stream whose first token comes after the bound the engine's own timings
set is sent once more while the engine's requests in progress are sampled: idle for the overhead floor of the wait,
something between holds the stream (``live-stream/held``: the ``stall-stream`` proxy, test_proxies.py); busy
with other clients' requests, the wait is the endpoint's load ("not judged"); not watchable, "not judged" naming
what to serve. Each branch here runs against a real llama-server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from fleetgate.live.activity import Activity, WatchSource, requests_in
from fleetgate.reference import ReferenceServer

from .conftest import Edit, GateHere, drop, server_port, set_value
from .faults import FaultProxy

STREAM_WAIT_CODES = {"live-stream/too-slow"}
"""What this module reproduces that no control, fault or proxy does (test_negative_controls.py)."""

NEIGHBOUR_RUN_S = 8.0
"""How long each of another client's generations keeps the one slot busy: over twice the stream's TTFT bound
(5 s plus twice the engine's own prefill and first step), on any machine, as its length follows the rate measured."""
NEIGHBOURS = 2
"""One generating and one waiting: the gate's stream always has at least one whole generation ahead of it."""


class Neighbours:
    """Other clients of the endpoint: NEIGHBOURS threads that each send generations of NEIGHBOUR_RUN_S back to
    back until stopped (each bounded by ``deadline``)."""

    def __init__(self, url: str, deadline: float = 300.0) -> None:
        self.url = url
        self.stop = threading.Event()
        self.end = time.monotonic() + deadline
        self.sent = 0
        with httpx.Client(timeout=60.0) as client:
            probe = client.post(f"{url}/v1/chat/completions", json=self._body(64)).json()
        rate = float(probe["timings"]["predicted_per_second"])
        self.tokens = max(64, min(int(rate * NEIGHBOUR_RUN_S), 3500))
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(NEIGHBOURS)]

    @staticmethod
    def _body(tokens: int) -> dict[str, object]:
        return {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": tokens,
                "ignore_eos": True, "temperature": 0}

    def _loop(self) -> None:
        with httpx.Client(timeout=120.0) as client:
            while not self.stop.is_set() and time.monotonic() < self.end:
                try:
                    client.post(f"{self.url}/v1/chat/completions", json=self._body(self.tokens))
                except httpx.HTTPError:
                    return  # the server is gone: the test is over
                self.sent += 1

    def __enter__(self) -> Neighbours:
        for thread in self.threads:
            thread.start()
            time.sleep(0.2)  # in order: one takes the slot, the others wait behind it
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()


@pytest.fixture
def one_slot(control: Callable[[Edit | str], ReferenceServer]) -> Iterator[ReferenceServer]:
    server = control(lambda argv: set_value(argv, "--parallel", "1"))
    yield server


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)  # nothing the model writes decides a wait
def test_a_stream_queued_behind_other_clients_is_not_judged(
    one_slot: ReferenceServer, gate: Callable[..., GateHere], variant: str, no_api_key: None
) -> None:
    with Neighbours(one_slot.url):
        run = gate(one_slot.url, only=("live-stream",), live_timeout=180.0, variant=variant)
    # the neighbours end when the server stops (their requests fail), at the fixture's teardown
    assert run.outcomes == {"live-stream": "not-judged"}, run.output
    reason = run.checks["live-stream"][1]
    assert reason.startswith("not judged: the stream: the first token came after"), reason
    assert "the stream, sent again: the first token came after" in reason, reason
    assert "(/metrics) had no request in progress or waiting for 0.0 s" in reason, reason
    assert "other requests were ahead of it" in reason, reason


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)
def test_a_held_stream_from_an_engine_that_cannot_be_watched_is_not_judged(
    control: Callable[[Edit | str], ReferenceServer], gate: Callable[..., GateHere], variant: str, no_api_key: None
) -> None:
    server = control(lambda argv: [*drop(argv, "--metrics", values=0), "--no-slots"])
    with FaultProxy(server.url, "stall-stream", delay=8) as proxy:
        run = gate(proxy.url, only=("live-stream",), port=server_port(server.url), variant=variant)
    assert run.outcomes == {"live-stream": "not-judged"}, run.output
    reason = run.checks["live-stream"][1]
    assert "cannot be read" in reason and "serve /metrics (llama-server --metrics) or /slots" in reason, reason


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)
def test_a_declared_ttft_bounds_the_wait_on_the_gates_clock(
    reference_in: ReferenceServer, gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], variant: str,
    no_api_key: None,
) -> None:
    """With ttft_s declared the contract promises the wait itself: a stream held past it fails at once, whatever the
    engine was doing, and is not sent again."""
    fleet_toml = fleet_copy({"fleet.toml": lambda t: t.replace(
        "[services.reference.contract]\nvision = false", "[services.reference.contract]\nvision = false\nttft_s = 2.0")})
    with FaultProxy(reference_in.url, "stall-stream", delay=4) as proxy:
        run = gate(proxy.url, only=("live-stream",), fleet_toml=fleet_toml, port=server_port(reference_in.url),
                   variant=variant)
    assert run.outcomes == {"live-stream": "live-stream/too-slow"}, run.output
    assert "(bound 2.0 s: contract ttft_s)" in run.output and "sent again" not in run.output, run.output


def _metrics(processing: int, deferred: int) -> str:
    return (f"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {processing}\n"
            f"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {deferred}\n")


def test_requests_in_reads_each_engines_own_count() -> None:
    llama = WatchSource("metrics", "/metrics", ("llamacpp:requests_processing", "llamacpp:requests_deferred"))
    assert requests_in(llama, 200, _metrics(1, 2), None) == 3
    assert requests_in(llama, 200, _metrics(0, 0), None) == 0
    assert requests_in(llama, 501, "", None) is None
    assert requests_in(llama, 200, "# TYPE other gauge\nother 4\n", None) is None  # served, but not the count
    vllm = WatchSource("metrics", "/metrics", ("vllm:num_requests_running", "vllm:num_requests_waiting"))
    text = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
            '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n')
    assert requests_in(vllm, 200, text, None) == 3
    slots = WatchSource("slots", "/slots")
    assert requests_in(slots, 200, "", [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}]) == 1
    assert requests_in(slots, 200, "", {"error": "not a list"}) is None


def test_a_stretch_counts_only_between_samples_taken_close_together() -> None:
    activity = Activity(WatchSource("slots", "/slots"),
                        samples=[(0.0, 1), (0.5, 1), (1.0, 0), (1.5, 0), (2.0, 0),
                                 (6.0, 0),  # 4 s after the last: the gate's host could not ask on time
                                 (6.5, 0), (7.0, None), (7.5, 0), (8.0, 2)])
    idle, busy, unseen = activity.split(7.9)
    assert (idle, busy) == (1.5, 0.5)  # 1.0-2.0 and 6.0-6.5 idle; 0.0-0.5 busy; 0.5-1.0 changed: neither
    assert unseen == pytest.approx(7.9 - 2.0)
