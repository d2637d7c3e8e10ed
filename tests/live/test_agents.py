"""What agent clients build on, at depth: streamed tool calls, structured output, the reasoning of earlier turns.

A fault proxy in front of the real reference breaks exactly one thing of a real answer (faults.py, AGENT_MODES); a
real misconfigured server (a template that keeps every trace) or the real reference against a fleet copy that
declares something else shows the rest. Each case runs only the checks it concerns and asserts their exact outcome.
The faults are injected by the proxy whatever words the model picks, so each runs under the shipped numerics (the
reference gate runs every check passing under both: test_reference_gate.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgate.live.deltas import assemble, same_calls
from fleetgate.reference import ReferenceServer

from .conftest import FLEET_DIR, VARIANTS, Edit, GateHere, server_port, set_value
from .faults import AGENT_MODES, FaultProxy, FaultServer

TOOLS, REASONING = "live-tool-calls", "live-reasoning"
STRUCTURED, TURNS = "live-structured-output", "live-reasoning-turns"
PARALLEL = "live-parallel-tool-calls"
SCHEMA, TOOL_REASONING = "live-tool-schema", "live-tool-reasoning"

# mode -> the checks run, and the outcome of each
AGENT_PROXIES: dict[str, dict[str, str]] = {
    # the call held back to the finish chunk, assembled there: the same call, too late
    "tool-calls-at-finish": {TOOLS: "live-tool-calls/calls-only-at-finish"},
    # the name in every delta: a client appends it to itself
    "tool-name-every-delta": {TOOLS: "live-tool-calls/stream-differs"},
    # every arguments fragment split into one-character deltas: a finer healthy stream assembles all the same
    "split-tool-arguments": {TOOLS: "passed"},
    # the trace stripped from the history (reasoning_content, or vLLM's reasoning): the call's trace never reaches the
    # prompt after its result
    "drop-reasoning-history": {TURNS: "live-reasoning-turns/after-tool-result"},
    "break-json-schema": {STRUCTURED: "live-structured-output/not-honoured"},
    "break-json-schema-stream": {STRUCTURED: "live-structured-output/stream-not-honoured"},
    "reasoning-as-content-stream": {REASONING: "live-reasoning/stream-no-trace"},
    "think-tags-stream": {REASONING: "live-reasoning/stream-tags-in-content"},
    # the tool message's content blanked on its way: the loop's result never reaches the model
    "drop-tool-results": {TOOLS: "live-tool-calls/result-not-rendered"},
    # only the first of several calls kept (a proxy or parser that reads one)
    "first-call-only": {PARALLEL: "live-parallel-tool-calls/not-parallel"},
    # every call's deltas under index 0: the single call passes, the parallel ones merge
    "tool-index-zero": {TOOLS: "passed", PARALLEL: "live-parallel-tool-calls/stream-differs"},
    # the nested call's array of days flattened to its first day; its long text escaped twice; a fragment of its
    # stream lost: each breaks the nested call alone (the flat call of live-tool-calls passes through the same proxy)
    "schema-days-flattened": {TOOLS: "passed", SCHEMA: "live-tool-schema/nested-invalid"},
    "schema-text-double-escaped": {SCHEMA: "live-tool-schema/long-text-differs"},
    "schema-stream-fragment-lost": {TOOLS: "passed", SCHEMA: "live-tool-schema/stream-differs"},
    # with thinking on and tools: the trace written into the content too, the trace dropped, the trace streamed as
    # content; live-reasoning (thinking on, no tools) passes through the same proxies
    "tool-trace-in-content": {REASONING: "passed", TOOL_REASONING: "live-tool-reasoning/trace-leaked"},
    "tool-trace-dropped": {TOOL_REASONING: "live-tool-reasoning/no-trace"},
    "tool-trace-stream-as-content": {REASONING: "passed", TOOL_REASONING: "live-tool-reasoning/stream-differs"},
    # tool_choice auto only: its call left as text blocking, or streamed as text; required and none pass first
    "auto-call-as-text": {TOOLS: "live-tool-calls/call-as-text"},
    "auto-stream-as-text": {TOOLS: "live-tool-calls/auto-stream-differs"},
}
assert set(AGENT_PROXIES) == set(AGENT_MODES)
# every code this module reproduces: the proxies', the control's and the declared-absent cases' below
AGENT_CODES = {code for failing in AGENT_PROXIES.values() for code in failing.values() if "/" in code} | {
    "live-reasoning-turns/after-user-message", "live-structured-output/not-refused",
    "live-structured-output/unclean-refusal", "live-parallel-tool-calls/not-refused",
    "live-parallel-tool-calls/unclean-refusal", "live-parallel-tool-calls/out-of-time",
    "live-tool-schema/out-of-time", "live-tool-reasoning/out-of-time"}


@pytest.mark.parametrize(("variant", "mode"), [("shipped", m) for m in AGENT_PROXIES],
                         ids=[f"shipped-{m}" for m in AGENT_PROXIES], indirect=["variant"])
def test_agent_proxy(
    mode: str, variant: str, reference_in: ReferenceServer, gate: Callable[..., GateHere], no_api_key: None
) -> None:
    expected = AGENT_PROXIES[mode]
    with FaultProxy(reference_in.url, mode) as proxy:
        run = gate(proxy.url, only=expected, port=server_port(reference_in.url), variant=variant)
    assert run.outcomes == expected, run.output
    if mode == "split-tool-arguments":
        # the proxy really split the stream: far more delta chunks than the engine's own (15 for this call)
        match = re.search(r"streamed: (\d+) delta chunks", run.note(TOOLS))
        assert match and int(match.group(1)) > 30, run.note(TOOLS)


def _template_keeping_every_trace(target: Path) -> Path:
    """The reference's chat template as it was before it declared after-last-user: every trace rendered back."""
    text = (FLEET_DIR / "scripts" / "reference-chat.jinja").read_text(encoding="utf-8")
    kept = text.replace("message.reasoning_content and loop.index0 > turns.last_user", "message.reasoning_content")
    assert kept != text
    target.write_text(kept, encoding="utf-8")
    return target


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)
def test_a_template_that_keeps_every_trace(
    variant: str, control: Callable[[Edit | str], ReferenceServer], gate: Callable[..., GateHere], tmp_path: Path,
    no_api_key: None,
) -> None:
    template = _template_keeping_every_trace(tmp_path / "keeps-every-trace.jinja")
    server = control(lambda argv: set_value(argv, "--chat-template-file", str(template)))
    run = gate(server.url, only=(TURNS, REASONING, TOOLS), variant=variant)
    # the trace of the call's turn still reaches the prompt after its result; the reasoning and calls of this turn
    # are the same template's as before
    assert run.outcomes == {TURNS: "live-reasoning-turns/after-user-message", REASONING: "passed", TOOLS: "passed"}, \
        run.output


def _declaring(fleet_copy: Callable[..., Path], line: str) -> Path:
    return fleet_copy({"fleet.toml": lambda t: t.replace(
        "[services.reference.contract]\nvision = false", f"[services.reference.contract]\nvision = false\n{line}")})


@pytest.mark.parametrize("variant", ["shipped"], indirect=True)
def test_structured_output_declared_absent_but_honoured(
    variant: str, reference_in: ReferenceServer, gate: Callable[..., GateHere], fleet_copy: Callable[..., Path],
    no_api_key: None,
) -> None:
    fleet_toml = _declaring(fleet_copy, "structured_output = false")
    run = gate(reference_in.url, only=(STRUCTURED,), fleet_toml=fleet_toml, variant=variant)
    assert run.outcomes == {STRUCTURED: "live-structured-output/not-refused"}, run.output


@pytest.mark.parametrize(("mode", "outcome"), [("schema-refused", "passed"),
                                               ("schema-500", "live-structured-output/unclean-refusal")])
def test_structured_output_refusals(
    mode: str, outcome: str, gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], no_api_key: None
) -> None:
    fleet_toml = _declaring(fleet_copy, "structured_output = false")
    with FaultServer(mode) as server:
        run = gate(server.url, only=(STRUCTURED,), fleet_toml=fleet_toml, live_timeout=2)
    assert run.outcomes == {STRUCTURED: outcome}, run.output


def test_replay_undeclared_is_not_judged(
    gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], no_api_key: None
) -> None:
    fleet_toml = fleet_copy({"fleet.toml": lambda t: t.replace('reasoning_replay = "after-last-user"\n', "")})
    with FaultServer("schema-refused") as server:
        run = gate(server.url, only=(TURNS,), fleet_toml=fleet_toml, live_timeout=2)
    assert run.outcomes == {TURNS: "not-judged"}, run.output
    assert "declare contract.reasoning_replay" in run.note(TURNS), run.output


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


BLOCKING = [{"id": "x", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]


def test_deltas_assemble_as_a_client_does() -> None:
    head = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Pa'}}
    tail = {"index": 0, "function": {"arguments": 'ris", "unit": "celsius"}'}}
    events = [_chunk({"role": "assistant", "content": None}), _chunk({"tool_calls": [head]}),
              _chunk({"tool_calls": [tail]}), _chunk({}, "tool_calls"), "[DONE]"]
    got = assemble(events)
    assert (got.calls, got.finish, got.call_chunks, got.call_chunks_with_finish, got.problems) == (
        [{"id": "call_9", "type": "function", "name": "get_weather",
          "arguments": '{"city": "Paris", "unit": "celsius"}'}], "tool_calls", 2, 0, [])
    assert same_calls(BLOCKING, got.calls) == []
    # the name sent again is appended, as OpenAI's clients append it; a delta without an index has no call to join
    again = assemble([_chunk({"tool_calls": [head]}), _chunk({"tool_calls": [{**tail, "function": {
        **tail["function"], "name": "get_weather"}}]}), _chunk({"tool_calls": [{"function": {"arguments": "}"}}]})])
    assert same_calls(BLOCKING, again.calls) == ["call 0: name 'get_weatherget_weather' streamed, 'get_weather' blocking"]
    assert again.problems == ["a tool-call delta without an integer index: {'function': {'arguments': '}'}}"]


# the first call is the model's to start (the worked example makes it, as for live-tool-calls): every variant
@pytest.mark.parametrize("variant", list(VARIANTS), indirect=True)
def test_parallel_calls_declared_absent(
    variant: str, reference_in: ReferenceServer, gate: Callable[..., GateHere], fleet_copy: Callable[..., Path],
    no_api_key: None,
) -> None:
    """llama.cpp build 11434 admits one or more calls for this template whatever parallel_tool_calls says (the call
    rule is one_or_more: common/chat-auto-parser-generator.cpp, build_tool_parser_json_native): a contract that says
    clients get one call at most is not what the engine does."""
    fleet_toml = fleet_copy({"fleet.toml": lambda t: t.replace("parallel_tool_calls = true", "parallel_tool_calls = false")})
    run = gate(reference_in.url, only=(PARALLEL,), fleet_toml=fleet_toml, variant=variant)
    assert run.outcomes == {PARALLEL: "live-parallel-tool-calls/not-refused"}, run.output


@pytest.mark.parametrize(("mode", "outcome"), [("parallel-refused", "passed"),
                                               ("parallel-500", "live-parallel-tool-calls/unclean-refusal")])
def test_parallel_refusals(
    mode: str, outcome: str, gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], no_api_key: None
) -> None:
    fleet_toml = fleet_copy({"fleet.toml": lambda t: t.replace("parallel_tool_calls = true", "parallel_tool_calls = false")})
    with FaultServer(mode) as server:
        run = gate(server.url, only=(PARALLEL,), fleet_toml=fleet_toml, live_timeout=2)
    assert run.outcomes == {PARALLEL: outcome}, run.output


@pytest.mark.parametrize("check", [PARALLEL, SCHEMA, TOOL_REASONING])
def test_tool_requests_out_of_time(check: str, gate: Callable[..., GateHere], no_api_key: None) -> None:
    """An engine that takes a request with tools and never answers it: said by the bound the run's rates derive."""
    with FaultServer("hang-tools") as server:
        run = gate(server.url, only=(check,), live_timeout=2)
    assert run.outcomes == {check: f"{check}/out-of-time"}, run.output


def test_a_call_with_reasoning_is_not_judged_without_a_budget(
    gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], no_api_key: None
) -> None:
    """Where nothing ends a trace but the model, whether a call follows it is the model's: not judged, naming why."""
    fleet_toml = fleet_copy({"scripts/reference.env": lambda t: t.replace("REASONING_BUDGET=8", "REASONING_BUDGET=-1")})
    with FaultServer("hang-tools") as server:
        run = gate(server.url, only=(TOOL_REASONING,), fleet_toml=fleet_toml, live_timeout=2)
    assert run.outcomes == {TOOL_REASONING: "not-judged"}, run.output
    assert "ends a trace only where the model writes its end tag (--reasoning-budget -1)" in run.note(TOOL_REASONING)


def test_a_window_too_small_for_the_nested_call_is_not_judged(
    gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], no_api_key: None
) -> None:
    fleet_toml = fleet_copy({"scripts/reference.env": lambda t: t.replace("CTX_SIZE=4096", "CTX_SIZE=1024")})
    with FaultServer("hang-tools") as server:
        run = gate(server.url, only=(SCHEMA,), fleet_toml=fleet_toml, live_timeout=2)
    assert run.outcomes == {SCHEMA: "not-judged"}, run.output
    assert "window of 512 tokens cannot hold the nested-schema probe" in run.note(SCHEMA), run.note(SCHEMA)
