"""What agent clients build on beyond one call: structured output, the reasoning of earlier turns, parallel calls (C.2).

Each is judged by what the engine and its template do, never by the words a model picks. A JSON schema in
``response_format`` becomes a grammar that admits only valid documents, so the answer is held to the schema,
blocking and streamed. Whether a trace sent back in the history reaches the prompt is read from the prompt's token
count, with and without the trace: a one-token request, whatever the model would have said. Parallel calls are asked
with the answer kept from ending: after the first call, a grammar that admits another must be followed; on vLLM, whose
grammar leaves the count to the model, two calls are asked in the tool parser's own markup through a regex.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from fleetgate.checks import NOT_JUDGED, NotJudged, live_check
from fleetgate.checks.live_capabilities import TOOL_EXAMPLE, TOOL_QUESTION, WEATHER_TOOL
from fleetgate.live.client import shorten
from fleetgate.live.deltas import assemble, same_calls
from fleetgate.live.endpoint import (
    LiveEndpoint,
    OutOfTime,
    finish_reason_of,
    message_of,
    prompt_tokens_at_most,
    usage_of,
)

__all__: list[str] = []

STRUCTURED = "live-structured-output"
TURNS = "live-reasoning-turns"

STRUCTURED_TOKENS = 40
"""The answer's bound: the schema's documents take about 20 tokens on the reference, and the grammar lets the model put
whitespace at five places (llama.cpp: common/json-schema-to-grammar.cpp, SPACE_RULE, one or two newlines and up to 20
blanks), which the model has not been seen to fill."""

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": VERDICT_SCHEMA}}


def _structured_undeclared(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.structured_output is not None:
        return None
    return (f"{NOT_JUDGED}{endpoint.name} runs an engine fleetgate does not know to honour response_format JSON schemas: "
            "declare contract.structured_output (true, or false where the engine must refuse them)")


def _schema_problem(content: Any) -> str | None:
    """Why ``content`` is not a document valid against the verdict schema; None when it is."""
    if not isinstance(content, str):
        return f"content is {content!r}"
    try:
        document = json.loads(content)
    except ValueError:
        return f"content {shorten(content, 100)!r} is not JSON"
    try:
        jsonschema.validate(document, VERDICT_SCHEMA)
    except jsonschema.ValidationError as exc:
        return f"{json.dumps(document)[:100]} fails the schema: {exc.message}"
    return None


@live_check(
    cites=("C-CAP-2",),
    summary="a response_format JSON schema is honoured, blocking and streamed (the answer validates against it); "
    "where the contract says the engine has no grammar support, the request is refused cleanly (4xx)",
    requires=_structured_undeclared,
    codes={
        "not-honoured": "a `response_format` json_schema request was answered with content that is not a document "
        "valid against the schema",
        "stream-not-honoured": "the same request streamed: the content deltas assemble into no document valid "
        "against the schema",
        "not-refused": "the contract says the engine has no grammar support (structured_output = false), yet it "
        "answered a json_schema request with 200: clients get unconstrained text",
        "unclean-refusal": "the contract says the engine has no grammar support, and the json_schema request got "
        "something other than a clean 4xx refusal (a 5xx, a dropped connection's status)",
    },
)
def live_structured_output(endpoint: LiveEndpoint) -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Is seven a prime number? Answer in JSON."}],
        "response_format": RESPONSE_FORMAT,
        "max_tokens": STRUCTURED_TOKENS,
        "temperature": 0,
        **endpoint.thinking(False),
    }
    reply = endpoint.chat(STRUCTURED, body)
    if endpoint.contract.structured_output is False:
        where = endpoint.where_contract("structured_output")
        if reply.ok:
            raise live_structured_output.fail(endpoint, "not-refused",
                                        where=where,
                                        cites=("C-CAP-2",),
                                        observed=f"HTTP {reply.status}: content "
                                        f"{shorten(str(message_of(reply.json).get('content')), 80)!r}",
                                        expected="a 4xx refusal: the contract says the engine has no grammar support",
                                        fix="the engine honours (or silently ignores) response_format: if the answer "
                                        "validates, declare structured_output = true; if not, clients get free text "
                                        "where they asked for JSON")
        if not 400 <= reply.status < 500:
            raise live_structured_output.fail(endpoint, "unclean-refusal",
                                        where=reply.url,
                                        cites=("C-CAP-2",),
                                        observed=reply.brief(),
                                        expected="a 4xx refusal naming response_format",
                                        fix="the request broke something (a 5xx is the engine's or a proxy's fault, "
                                        "not a refusal): read the engine log")
        endpoint.note(f"no grammar support, as declared: refused cleanly ({shorten(reply.brief(), 60)})")
        return
    fix = ("llama.cpp turns response_format json_schema into a grammar (tools/server: json_schema_to_grammar); vLLM "
           "into structured output (--structured-outputs-config); an answer that does not validate means the "
           "schema never reached the sampler: a proxy that drops response_format, or an engine that ignores it")
    endpoint.require_ok(STRUCTURED, reply, expected="200 with a document valid against the schema", fix=fix,
                        cites=("C-CAP-2",))
    problem = _schema_problem(message_of(reply.json).get("content"))
    if problem:
        raise live_structured_output.fail(endpoint, "not-honoured",
                                    where=reply.url,
                                    cites=("C-CAP-2",),
                                    observed=problem,
                                    expected=f"a JSON document valid against {json.dumps(VERDICT_SCHEMA)}",
                                    fix=fix)
    stream = endpoint.stream_chat(STRUCTURED, {**body, "stream_options": {"include_usage": True}})
    endpoint.require_stream_ok(STRUCTURED, stream, expected="200 and an event stream", fix=fix, cites=("C-CAP-2",))
    streamed = assemble(stream.events).content
    problem = _schema_problem(streamed)
    if problem:
        raise live_structured_output.fail(endpoint, "stream-not-honoured",
                                    where=stream.url,
                                    cites=("C-CAP-2",),
                                    observed=f"streamed: {problem}",
                                    expected=f"the content deltas assemble into a JSON document valid against "
                                    f"{json.dumps(VERDICT_SCHEMA)}",
                                    fix=fix)
    document = json.loads(streamed)
    endpoint.note(f"json_schema honoured: {json.dumps(json.loads(message_of(reply.json)['content']))} blocking, "
                  f"{json.dumps(document)} streamed")


def _replay_undeclared(endpoint: LiveEndpoint) -> str | None:
    contract = endpoint.contract
    if contract.reasoning_field is None:
        return f"{TURNS} does not apply to {endpoint.name}: its contract declares no reasoning field (contract.reasoning_field)"
    if contract.reasoning_replay is None:
        return (f"{NOT_JUDGED}{endpoint.name} declares a reasoning field but not which earlier traces its template "
                "renders back: declare contract.reasoning_replay (after-last-user, always, never)")
    return None


_REPLAY_FIX = ("the template decides which traces go back to the model: an agent loses its plan when the trace of its "
               "call is dropped before the tool result, and a window fills with old reasoning when every trace is kept; a "
               "proxy or client that strips or rewrites the reasoning field in the history does the first. Fix the "
               "template, or declare what it does")
_TRACE = "The user asks for Berlin in fahrenheit, so I call get_weather with those two arguments."
_ASKED = {"role": "user", "content": "What is the weather in Berlin in fahrenheit?"}
_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "call_0", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Berlin", "unit": "fahrenheit"})}}],
}
_RESULT = {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"temperature": 50})}
_ANSWER = {"role": "assistant", "content": "It is 50 F in Berlin."}
_NEXT = {"role": "user", "content": "And in Paris?"}


def _prompt_tokens(endpoint: LiveEndpoint, messages: list[dict[str, Any]]) -> int:
    # no tools listed: the history's call renders without them, and the verdict does not wait on tool support (vLLM
    # refuses a request with tools and no --enable-auto-tool-choice: measured, HTTP 400)
    reply = endpoint.chat(TURNS, {
        "messages": messages,
        "max_tokens": 1,
        "temperature": 0,
        **endpoint.thinking(False),
    })
    endpoint.require_ok(TURNS, reply, expected="200", fix="a conversation with a tool call and its result, as every "
                        "agent client sends, was refused: read the engine log (a template that cannot render it)",
                        cites=("C-CAP-8",))
    tokens = usage_of(reply.json).get("prompt_tokens")
    if not isinstance(tokens, int):
        raise NotJudged(f"{endpoint.name} reports no usage.prompt_tokens: whether a trace reaches the prompt is read "
                        "from it")
    return tokens


@live_check(
    cites=("C-CAP-8",),
    summary="a reasoning trace sent back in the history reaches the prompt where the template is declared to render "
    "it (after a tool result) and stays out where it is declared not to (once the user speaks again), read from "
    "the prompt's token count with and without the trace",
    requires=_replay_undeclared,
    codes={
        "after-tool-result": "continuing from a tool result, the trace of the call's turn was rendered into the "
        "prompt, or not, against contract.reasoning_replay (a client or proxy that drops reasoning_content; a "
        "template that never renders it)",
        "after-user-message": "with the user's message last, the earlier turn's trace was rendered into the prompt, "
        "or not, against contract.reasoning_replay (a template that keeps every trace fills the window with old "
        "reasoning)",
    },
)
def live_reasoning_turns(endpoint: LiveEndpoint) -> None:
    field, replay = endpoint.contract.reasoning_field, endpoint.contract.reasoning_replay
    assert field is not None and replay is not None
    thought = {**_CALL, field: _TRACE}
    expect = {"after-tool-result": replay in ("after-last-user", "always"), "after-user-message": replay == "always"}
    # what follows the call's turn: its tool result (the agent goes on), then the answer and the user's next message
    seen: dict[str, tuple[int, int]] = {}
    for case, after in (("after-tool-result", [_RESULT]), ("after-user-message", [_RESULT, _ANSWER, _NEXT])):
        seen[case] = (_prompt_tokens(endpoint, [_ASKED, _CALL, *after]),
                      _prompt_tokens(endpoint, [_ASKED, thought, *after]))
    where = endpoint.where_contract("reasoning_replay")

    def observed(case: str, words: str) -> str:
        without, with_trace = seen[case]
        return (f"{words}: {without} prompt tokens without the earlier trace, {with_trace} with it in {field}: the "
                f"trace was {'rendered' if with_trace != without else 'not rendered'}")

    def expected(case: str) -> str:
        return f"the trace {'rendered' if expect[case] else 'left out'} (reasoning_replay = {replay!r})"

    if (seen["after-tool-result"][0] != seen["after-tool-result"][1]) != expect["after-tool-result"]:
        raise live_reasoning_turns.fail(endpoint, "after-tool-result", where=where, cites=("C-CAP-8",),
                               observed=observed("after-tool-result", "continuing from a tool result"),
                               expected=expected("after-tool-result"), fix=_REPLAY_FIX)
    if (seen["after-user-message"][0] != seen["after-user-message"][1]) != expect["after-user-message"]:
        raise live_reasoning_turns.fail(endpoint, "after-user-message", where=where, cites=("C-CAP-8",),
                               observed=observed("after-user-message", "with the user's next message last"),
                               expected=expected("after-user-message"), fix=_REPLAY_FIX)
    tool, user = seen["after-tool-result"], seen["after-user-message"]

    def said(case: str) -> str:
        return "rendered" if expect[case] else "left out"

    endpoint.note(f"an earlier trace, as {replay!r} declares: after a tool result {said('after-tool-result')} "
                  f"({tool[0]} -> {tool[1]} prompt tokens), after the user's message {said('after-user-message')} "
                  f"({user[0]} -> {user[1]})")


PARALLEL = "live-parallel-tool-calls"
PARALLEL_TOKENS = 88
"""Room for two whole calls (38 tokens each for the reference's template, every argument an enum) and the start of a
third."""
# get_weather with every argument pinned to the cities and units of the conversation: each call the grammar admits is
# one of four of the same length, so two whole calls fit the bound whatever the model picks.
PINNED_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        **WEATHER_TOOL["function"],
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Berlin"]},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


# The markup each vLLM --tool-call-parser reads under auto (vllm/tool_parsers/hermes_tool_parser.py:
# <tool_call>{"name", "arguments"}</tool_call>): the regex of two whole pinned calls in it.
_CALL_MARKUP = {"hermes": ('<tool_call>\n{"name": "get_weather", "arguments": ', "}\n</tool_call>")}
_PINNED_ARGUMENTS = r'\{"city": "(Paris|Berlin)", "unit": "(celsius|fahrenheit)"\}'


def _markup_regex(parser: str) -> str:
    head, tail = _CALL_MARKUP[parser]
    one = re.escape(head) + _PINNED_ARGUMENTS + re.escape(tail)
    return f"{one}\n{one}"


def _parallel_undeclared(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.tools is not True:
        return f"{PARALLEL} does not apply to {endpoint.name}: its contract does not promise tool calls (contract.tools)"
    if endpoint.contract.parallel_tool_calls is None:
        return (f"{NOT_JUDGED}{endpoint.name} promises tool calls but not whether several come in one answer: declare "
                "contract.parallel_tool_calls (true, or false where a request for them must be refused or answered "
                "with one call)")
    parser = endpoint.contract.tool_call_parser
    if endpoint.dialect.calls_in_markup and parser not in _CALL_MARKUP:
        return (f"{NOT_JUDGED}{endpoint.name}'s --tool-call-parser is {parser!r}: the gate writes two calls in the markup "
                f"the parser reads, and knows {', '.join(sorted(_CALL_MARKUP))}'s")
    return None


def _whole_calls(calls: Any) -> list[str]:
    """Why the calls are not each a whole get_weather call valid against its schema with an id of its own."""
    problems: list[str] = []
    if not isinstance(calls, list):
        return [f"tool_calls is {calls!r}"]
    schema = PINNED_TOOL["function"]["parameters"]
    ids = [c.get("id") for c in calls if isinstance(c, dict)]
    if len(set(ids)) != len(calls) or not all(ids):
        problems.append(f"ids {ids} are not one per call")
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        try:
            text = function.get("arguments") if isinstance(function, dict) else None
            arguments = json.loads(text) if isinstance(text, str) else None
            jsonschema.validate(arguments, schema)
        except (TypeError, ValueError, jsonschema.ValidationError) as exc:
            problems.append(f"call {i} ({name}): arguments fail the schema: {str(exc).splitlines()[0][:80]}")
        if name != WEATHER_TOOL["function"]["name"]:
            problems.append(f"call {i} names {name!r}")
    return problems


@live_check(
    cites=("C-CAP-2",),
    summary="where parallel calls are declared, `parallel_tool_calls: true` gets several whole, schema-valid calls "
    "with their own ids, blocking and streamed alike; where they are not, it is refused cleanly or answered with one",
    requires=_parallel_undeclared,
    codes={
        "not-parallel": "parallel calls are declared, yet a request for them, kept from ending after its first call, got "
        "fewer than two whole, schema-valid calls with distinct ids",
        "stream-differs": "the same parallel request streamed: the deltas, assembled by index as a client assembles "
        "them, are not the blocking answer's calls",
        "not-refused": "parallel calls are declared absent, yet a request for them got several calls (the engine "
        "ignores parallel_tool_calls for this template)",
        "unclean-refusal": "parallel calls are declared absent, and the request for them got something other than a "
        "4xx or a single call",
        "out-of-time": "the request for parallel calls got no answer within the bound this run's measured rates derive",
    },
)
def live_parallel_tool_calls(endpoint: LiveEndpoint) -> None:
    allowed = endpoint.contract.parallel_tool_calls
    body: dict[str, Any] = {
        "messages": [*TOOL_EXAMPLE, TOOL_QUESTION],
        "tools": [PINNED_TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": True,
        "max_tokens": PARALLEL_TOKENS,
        "temperature": 0,
        **endpoint.thinking(False),
        # the answer cannot end after its first call: where the grammar admits another call the model must write one,
        # where it admits none the engine must have refused the request or end it there, whatever words it picks
        **endpoint.dialect.decode_rate_fields,
    }
    if endpoint.dialect.calls_in_markup and endpoint.contract.tool_call_parser in _CALL_MARKUP:
        # vLLM's required grammar admits one call or more and leaves the count to the model; under auto a regex of two
        # whole calls in the parser's own markup makes the count the request's and the parsing the engine's
        body = {**{k: v for k, v in body.items() if k not in endpoint.dialect.decode_rate_fields},
                "tool_choice": "auto",
                "structured_outputs": {"regex": _markup_regex(str(endpoint.contract.tool_call_parser))}}
    bound = endpoint.bound(prompt_tokens_at_most(body), PARALLEL_TOKENS)
    try:
        reply = endpoint.chat(PARALLEL, body, bound=bound)
    except OutOfTime as late:
        raise live_parallel_tool_calls.fail(endpoint, "out-of-time",
                                  where=late.url, cites=("C-CAP-2",), observed=late.observed, expected=late.expected,
                                  fix="the engine took longer than its own rates allow: read its log for this request") from None
    message = message_of(reply.json)
    calls = message.get("tool_calls") or []
    where = endpoint.where_contract("parallel_tool_calls")
    if not allowed:
        if reply.ok and isinstance(calls, list) and len(calls) > 1:
            raise live_parallel_tool_calls.fail(endpoint, "not-refused",
                                      where=where,
                                      cites=("C-CAP-2",),
                                      observed=f"parallel_tool_calls true got {len(calls)} calls",
                                      expected="a 4xx refusal, or one call: the contract says parallel calls are not "
                                      "allowed",
                                      fix="the engine does not hold the template to one call (llama.cpp build 11434 "
                                      "admits one or more calls whatever parallel_tool_calls says): clients that cannot "
                                      "run several calls must send parallel_tool_calls false and still check; or "
                                      "declare parallel_tool_calls = true")
        if not (400 <= reply.status < 500 or (reply.ok and len(calls) == 1)):
            raise live_parallel_tool_calls.fail(endpoint, "unclean-refusal",
                                      where=reply.url,
                                      cites=("C-CAP-2",),
                                      observed=f"{reply.brief() if not reply.ok else f'{len(calls)} calls'}",
                                      expected="a 4xx refusal, or one call",
                                      fix="read the engine log: a request for parallel calls broke something")
        endpoint.note(f"parallel calls not allowed, as declared: "
                      f"{'refused ' + shorten(reply.brief(), 60) if not reply.ok else 'answered with one call'}")
        return
    fix = ("the grammar or the parser keeps one call: llama.cpp derives parallel support from the template (it must "
           "render several tool_calls); vLLM's --tool-call-parser must read several; a proxy may keep only the first")
    endpoint.require_ok(PARALLEL, reply, expected="200 with several calls", fix=fix, cites=("C-CAP-2",))
    problems = _whole_calls(calls)
    if len(calls) < 2 or problems:
        raise live_parallel_tool_calls.fail(endpoint, "not-parallel",
                                  where=reply.url,
                                  cites=("C-CAP-2",),
                                  observed=f"{len(calls)} call(s), finish_reason {finish_reason_of(reply.json)!r}"
                                  + (f"; {'; '.join(problems)}" if problems else ""),
                                  expected="two or more whole get_weather calls, each valid against its schema, each "
                                  "with its own id",
                                  fix=fix)
    stream = endpoint.stream_chat(PARALLEL, {**body, "stream_options": {"include_usage": True}}, timeout=bound.seconds)
    endpoint.require_stream_ok(PARALLEL, stream, expected="200 and an event stream", fix=fix, cites=("C-CAP-2",))
    got = assemble(stream.events)
    # the answer is cut at max_tokens inside a further call: the blocking answer drops that part, a stream has already
    # sent it, so only the whole calls are compared
    differences = same_calls(calls, got.calls[: len(calls)]) + got.problems
    if len(got.calls) < len(calls):
        differences.append(f"{len(got.calls)} call(s) streamed, {len(calls)} blocking")
    if differences:
        raise live_parallel_tool_calls.fail(endpoint, "stream-differs",
                                  where=stream.url,
                                  cites=("C-CAP-2",),
                                  observed="streamed: " + "; ".join(differences),
                                  expected="the deltas assemble by index into the blocking answer's calls",
                                  fix="each call's deltas must carry its own index (a proxy or an engine that sends every "
                                  "fragment under index 0 merges the calls into one)")
    endpoint.note(f"{len(calls)} whole calls with their own ids; streamed: the same {len(calls)} by index")
