"""Whole-request bounds from the rates the gate measured in the same run (live-capacity, live-tool-calls).

--live-timeout is the least a request waits; where the prefill and decode rates the engine reported on the
run's earlier answers say its tokens need longer (fleetgate/live/endpoint.py RATE_MARGIN over the 5 s floor),
the request waits that long, so a loaded machine lowers the rates and raises the bound together. A request
that runs out of its bound fails its own check, once, as ``out-of-time``.

The runs here set --live-timeout 3 s, under what the oversized prompt takes to prefill on this machine: a
fixed bound gave ``live-capacity/timeout`` there, which the same control gave as ``accepted`` with time
to spare (issue 16). The real llama-server shows the bound growing past --live-timeout; a fault server that
takes a request and never answers shows it ending, at the bound its reported rates give.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from fleetgate.reference import ReferenceServer

from .conftest import Edit, GateHere
from .faults import FaultServer

SHORT_S = 3.0


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)  # a refusal or a prefill: no generated text decides it
def test_an_oversized_window_is_accepted_past_a_short_live_timeout(
    control: Callable[[Edit | str], ReferenceServer],
    gate: Callable[..., GateHere],
    variant: str,
    no_api_key: None,
) -> None:
    """A 4096-token slot where 2048 is declared: the oversized prompt is prefilled, not refused; the request
    waits what its prefill takes at the measured rate, not the 3 s --live-timeout."""
    server = control("ctx-size-8192")  # conftest.SHARED_EDITS: test_under_load.py starts the same server
    run = gate(server.url, live_timeout=SHORT_S, only=("live-capacity",), variant=variant)
    assert run.outcomes == {"live-capacity": "live-capacity/accepted"}, run.output


# A request the engine took and never answers: the fault server reports fast rates (faults.FAST_TIMINGS) on its
# other answers, so the bound derived from them (about 6 s) is longer than --live-timeout 2 s and far shorter
# than the 30 s hang.
BOUND_FAULTS = {
    "hang-oversized": {"live-capacity": "live-capacity/out-of-time"},
    "hang-tools": {"live-tool-calls": "live-tool-calls/out-of-time"},
}
BOUND_CODES = {code for outcomes in BOUND_FAULTS.values() for code in outcomes.values()}


@pytest.mark.parametrize("mode", list(BOUND_FAULTS))
def test_a_request_never_answered_runs_out_of_its_derived_bound_once(
    mode: str, gate: Callable[..., GateHere], no_api_key: None
) -> None:
    expected = BOUND_FAULTS[mode]
    with FaultServer(mode) as server:
        run = gate(server.url, only=expected, live_timeout=2)
    assert run.outcomes == expected, run.output
    (check,) = expected
    failure = run.note(check)
    # the bound is the derived one (5 s + 3 x the request's tokens at the reported rates), not --live-timeout
    assert re.fullmatch(r".*no answer after (\d+\.\d) s.*", failure), failure
    waited = float(re.sub(r".*no answer after (\d+\.\d) s.*", r"\1", failure))
    assert 5.0 < waited < 8.0, failure
    # nothing waited out the 30 s hang: measured by the gate over its checks (test_faults.py says why not the
    # run's wall clock)
    assert run.checks_took() < 30, run.output
