"""The load claim: the reference gate and misconfigured servers give the same verdicts while every core of
the machine is busy.

One bounded busy-loop process per core (pinned to it where the kernel allows), started before the gate and
killed by its PID after it: the timing bounds follow what the engine reports for the same answers, or the
rates it reported on the run's earlier answers, so a loaded machine slows the engine and its bounds alike and
no verdict moves.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from fleetgate.reference import ReferenceServer

from .conftest import Edit, GateHere, expected_outcomes

HOG_SECONDS = 280
"""Each busy loop ends by itself after this long (the gate's own subprocess bound is 300 s)."""
_LOOP = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def _cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 2))


@pytest.fixture
def cpu_hog() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One busy loop per core, each bounded by HOG_SECONDS and killed by its PID after the test."""
    hogs: list[subprocess.Popen[bytes]] = []
    for core in _cores():
        hog = subprocess.Popen(
            [sys.executable, "-c", _LOOP.format(seconds=HOG_SECONDS)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        hogs.append(hog)
        with contextlib.suppress(OSError):  # not pinned: one busy loop per core still keeps every core busy
            os.sched_setaffinity(hog.pid, {core})
    try:
        yield hogs
    finally:
        for hog in hogs:
            if hog.poll() is None:
                hog.kill()
        for hog in hogs:
            hog.wait(10)


def test_the_reference_gate_holds_under_a_cpu_hog(
    reference: ReferenceServer, gate: Callable[..., GateHere], cpu_hog: list[subprocess.Popen[bytes]], no_api_key: None
) -> None:
    assert all(hog.poll() is None for hog in cpu_hog)  # the machine is busy while the gate runs
    run = gate(reference.url)
    assert all(hog.poll() is None for hog in cpu_hog), "a busy loop ended before the gate did"
    assert run.outcomes == expected_outcomes({}), run.output


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)  # slots and a refusal: no generated text decides them
def test_a_control_gives_its_verdict_under_a_cpu_hog(
    control: Callable[[Edit | str], ReferenceServer],
    gate: Callable[..., GateHere],
    variant: str,
    cpu_hog: list[subprocess.Popen[bytes]],
    no_api_key: None,
) -> None:
    """The control whose verdicts rest on timing (the capacity refusal, the stream, the readiness bound) and on
    a window: a 1024-token slot (the window-other control's server, conftest.SHARED_EDITS)."""
    server = control("ctx-size-2048")
    run = gate(server.url, variant=variant)
    assert run.outcomes == expected_outcomes(
        {
            "live-slots": "live-slots/other-shape",
            "live-capacity": "live-capacity/other-window",
            "host-process-argv": "host-process-argv/argv-differs",
        }
    ), run.output


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)  # a prefill: no generated text decides it
def test_an_oversized_window_is_accepted_under_a_cpu_hog(
    control: Callable[[Edit | str], ReferenceServer],
    gate: Callable[..., GateHere],
    variant: str,
    cpu_hog: list[subprocess.Popen[bytes]],
    no_api_key: None,
) -> None:
    """A 4096-token slot where 2048 is declared, with --live-timeout 3 s: under a fixed bound the prefill of the
    oversized prompt ran out of time on a loaded machine (``live-capacity/timeout``) where idle it was
    ``accepted``; bounded by the prefill rate measured in the same run, it is ``accepted`` under load too
    (tests/live/test_bounds.py holds the idle run)."""
    server = control("ctx-size-8192")  # test_bounds.py's server (conftest.SHARED_EDITS)
    run = gate(server.url, live_timeout=3, only=("live-capacity",), variant=variant)
    assert all(hog.poll() is None for hog in cpu_hog), "a busy loop ended before the gate did"
    assert run.outcomes == {"live-capacity": "live-capacity/accepted"}, run.output
