"""Tool calls of the shapes agent clients send beyond one flat call: nested arguments with a long text, and a call
made with reasoning on (C.2, issue 34).

Both hold the engine to what its grammar forces, never to the words a model picks. ``tool_choice: required`` makes
the engine constrain the answer with a grammar built from the tool's JSON Schema (llama.cpp:
common/json-schema-to-grammar.cpp; vLLM: structured outputs from vllm/tool_parsers/utils.py
``get_json_schema_from_tools``). Where every value of the schema is an enum, a fixed-length array or one fixed
text, each answer the grammar admits is a whole, valid call: an engine, template, parser or proxy that mangles
nesting, escapes or a long string is what makes the arguments fail the schema, whatever the model chose between the
enums. Streamed, the deltas must assemble into the blocking answer's call.

vLLM's hermes parser (and every tool parser with a structural tag) constrains the call's envelope under ``required``
and the arguments only of a tool marked ``strict``: there the probes mark their tool so, as a client that needs the
schema held does (``Dialect.strict_tools``).

With reasoning on, the engine's reasoning budget ends the trace and the required grammar then admits the call:
llama.cpp's ``--reasoning-budget`` (common/reasoning-budget.cpp forces the end tag), vLLM's per-request
``thinking_token_budget`` wherever a ``--reasoning-parser`` runs (``Dialect.trace_budget_field``). Where no budget
ends the trace (llama.cpp without one, or -1; vLLM without a reasoning parser) whether a call follows the trace is the
model's, and the check is not judged.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from fleetgate.checks import NOT_JUDGED, live_check
from fleetgate.checks.live_capabilities import TOOL_EXAMPLE, WEATHER_TOOL
from fleetgate.live.client import Reply, shorten
from fleetgate.live.deltas import assemble, same_calls
from fleetgate.live.endpoint import LiveEndpoint, OutOfTime, finish_reason_of, message_of, prompt_tokens_at_most

__all__: list[str] = []

SCHEMA = "live-tool-schema"
REASONING_CALL = "live-tool-reasoning"

LONG_TEXT = 'def report(city):\n\t"""The weather, in one line."""\n\treturn f"{city}: 17 \u00b0C \\\\ {{\'rain\': True}}"\n'
"""A code snippet as an argument: newlines, a tab, double and single quotes, a backslash, braces and a character of
two UTF-8 bytes (a stream that splits it between chunks, a parser that escapes twice or not at all, a proxy that
re-encodes it, each changes the text)."""

PLAN_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "plan_trip",
        "description": "Plan a trip: a forecast per day and a note",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Berlin"]},
                "days": {
                    "type": "array",
                    "minItems": 2,
                    "maxItems": 2,
                    "items": {
                        "type": "object",
                        "properties": {
                            "day": {"type": "string", "enum": ["monday", "tuesday"]},
                            "forecast": {
                                "type": "object",
                                "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                "required": ["unit"],
                                "additionalProperties": False,
                            },
                        },
                        "required": ["day", "forecast"],
                        "additionalProperties": False,
                    },
                },
                "note": {"type": "string", "enum": [LONG_TEXT]},
            },
            "required": ["city", "days", "note"],
            "additionalProperties": False,
        },
    },
}
_PLAN_QUESTION = {"role": "user", "content": "Plan a trip to Paris for monday and tuesday."}
SCHEMA_TOKENS = 160
"""The answer's bound: the call took 118 tokens on the reference (the text 51 of them); the rest is room for a model
that picks shorter tokens for the same characters (the grammar admits any tokenization)."""
SCHEMA_WINDOW = 1024
"""The window the probe needs: its prompt took 483 tokens on the reference (the tool's schema, with the text, is in
it), and its answer up to SCHEMA_TOKENS; a tokenizer that splits code more finely needs more."""


def _schema_undeclared(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.tools is not True:
        return f"{SCHEMA} does not apply to {endpoint.name}: its contract does not promise tool calls (contract.tools)"
    window = endpoint.contract.window
    if window is not None and window < SCHEMA_WINDOW:
        return (f"{NOT_JUDGED}{endpoint.name}'s window of {window} tokens cannot hold the nested-schema probe (its "
                f"prompt and answer take up to {SCHEMA_WINDOW}): a call of that shape is not tried")
    return None


def _tool(endpoint: LiveEndpoint, tool: dict[str, Any]) -> dict[str, Any]:
    """The tool as the probe sends it: marked ``strict`` where the engine holds only strict tools' arguments to their
    schema."""
    if endpoint.dialect.strict_tools:
        return {**tool, "function": {**tool["function"], "strict": True}}
    return tool


def _bounded(endpoint: LiveEndpoint, check: Any, name: str, body: dict[str, Any]) -> Reply:
    bound = endpoint.bound(prompt_tokens_at_most(body), int(body["max_tokens"]))
    try:
        return endpoint.chat(name, body, bound=bound)
    except OutOfTime as late:
        raise check.fail(endpoint, "out-of-time", where=late.url, cites=("C-CAP-2",), observed=late.observed,
                         expected=late.expected,
                         fix="the engine took longer than its own rates allow: read its log for this request") from None


def _stream(endpoint: LiveEndpoint, name: str, body: dict[str, Any], fix: str) -> Any:
    bound = endpoint.bound(prompt_tokens_at_most(body), int(body["max_tokens"]))
    stream = endpoint.stream_chat(name, {**body, "stream_options": {"include_usage": True}}, timeout=bound.seconds)
    endpoint.require_stream_ok(name, stream, expected="200 and an event stream of the call", fix=fix, cites=("C-CAP-2",))
    return stream


def _arguments(call: Any) -> tuple[str | None, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    text = function.get("arguments") if isinstance(function, dict) else None
    try:
        return name, json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return name, text


@live_check(
    cites=("C-CAP-2",),
    summary="tool_choice required with a nested schema (an array of objects holding an object, enums throughout) and "
    "a long text with escapes as one argument: the call's arguments validate and carry the text exactly, blocking and "
    "streamed alike",
    requires=_schema_undeclared,
    codes={
        "no-call": "`tool_choice: required` with the nested tool gave no call to it",
        "long-text-differs": "the long text argument (newlines, a tab, quotes, a backslash, braces, a two-byte "
        "character) came back other than the one text the schema admits: escapes or characters mangled, or cut",
        "nested-invalid": "the call's arguments are not a JSON object valid against the nested schema (nesting "
        "flattened, an array of another length, a value outside its enum)",
        "stream-differs": "the same request streamed: the deltas, assembled as a client assembles them, are not the "
        "blocking answer's call",
        "out-of-time": "the nested-schema request got no answer within the bound this run's measured rates derive",
    },
)
def live_tool_schema(endpoint: LiveEndpoint) -> None:
    body: dict[str, Any] = {
        "messages": [*TOOL_EXAMPLE, _PLAN_QUESTION],
        "tools": [_tool(endpoint, PLAN_TOOL)],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": SCHEMA_TOKENS,
        "temperature": 0,
        **endpoint.thinking(False),
    }
    fix = ("the engine builds the call's grammar from the tool's schema and parses the call back (llama.cpp: --jinja and "
           "a template whose tool-call format its parser recognises; vLLM: --enable-auto-tool-choice and the model's "
           "--tool-call-parser); a proxy that rewrites tool calls, or re-encodes their arguments, breaks them on the way")
    reply = _bounded(endpoint, live_tool_schema, SCHEMA, body)
    endpoint.require_ok(SCHEMA, reply, expected="200 with a call to plan_trip", fix=fix, cites=("C-CAP-2",))
    message = message_of(reply.json)
    calls = message.get("tool_calls") or []
    name = PLAN_TOOL["function"]["name"]
    first = calls[0] if isinstance(calls, list) and calls else None
    called, arguments = _arguments(first)
    if called != name:
        raise live_tool_schema.fail(endpoint, "no-call", where=reply.url, cites=("C-CAP-2",),
                                observed=f"{len(calls) if isinstance(calls, list) else calls!r} call(s), the first "
                                f"naming {called!r}; finish_reason {finish_reason_of(reply.json)!r}; content "
                                f"{shorten(str(message.get('content')), 80)!r}",
                                expected=f"a call to {name}", fix=fix)
    note = arguments.get("note") if isinstance(arguments, dict) else None
    if isinstance(arguments, dict) and note != LONG_TEXT:
        raise live_tool_schema.fail(endpoint, "long-text-differs", where=reply.url, cites=("C-CAP-2",),
                                observed=f"note {json.dumps(note)[:160]}",
                                expected=f"note {json.dumps(LONG_TEXT)} ({len(LONG_TEXT)} characters: the one text the "
                                "schema admits)",
                                fix=fix + "; compare the escapes: a text decoded twice loses its backslashes, one "
                                "encoded twice keeps them literally")
    try:
        jsonschema.validate(arguments, PLAN_TOOL["function"]["parameters"])
    except jsonschema.ValidationError as exc:
        raise live_tool_schema.fail(endpoint, "nested-invalid", where=reply.url, cites=("C-CAP-2",),
                                observed=f"arguments {shorten(json.dumps(arguments), 160)} fail the schema at "
                                f"{'/'.join(str(p) for p in exc.absolute_path) or 'the top'}: {exc.message[:100]}",
                                expected="arguments valid against the nested schema (city, two days each with a "
                                "forecast object, the note)",
                                fix=fix) from None
    stream = _stream(endpoint, SCHEMA, body, fix)
    got = assemble(stream.events)
    # the blocking answer's calls may be followed by the start of another that max_tokens cut (llama.cpp admits one or
    # more calls): only the whole ones are compared
    differences = same_calls(calls[:1], got.calls[:1]) + got.problems
    if not got.calls:
        differences.append("no call streamed")
    if differences:
        raise live_tool_schema.fail(endpoint, "stream-differs", where=stream.url, cites=("C-CAP-2",),
                                observed="streamed: " + "; ".join(differences)[:300],
                                expected="the deltas assemble (by index: id, name and arguments appended) into the "
                                "blocking answer's call, the long text exact",
                                fix="the stream carries the call otherwise than the blocking answer: a fragment lost or "
                                "re-encoded (escapes, a character split between chunks), a proxy that rewrites the stream")
    endpoint.note(f"{name}: nested arguments valid ({len(arguments['days'])} days, each with its forecast object), the "
                  f"{len(LONG_TEXT)}-character text exact; streamed: {got.call_chunks} delta chunks assemble into the "
                  "same call")


REASONING_CALL_TOKENS = 48
"""The trace the reference's budget allows (8) and a whole call (38 tokens) with room to spare."""
TRACE_BUDGET = 8
"""The trace a request allows where the engine takes a budget per request (vLLM ``thinking_token_budget``): as
llama.cpp's reference budget, within REASONING_CALL_TOKENS."""
_TAGS = re.compile(r"</?think>|<\|channel\|>|</?reasoning>", re.I)
# an agent between two calls: the user asked for two cities, the first call went out with its trace and came back;
# the trace of that turn is in the history, where templates that render traces after the last user message show it
_BOTH = {"role": "user", "content": "What is the weather in Berlin in fahrenheit, and then in Paris in celsius?"}
_FIRST_TRACE = "Berlin first, then Paris."
_FIRST_CALL = {"id": "call_0", "type": "function",
               "function": {"name": "get_weather", "arguments": json.dumps({"city": "Berlin", "unit": "fahrenheit"})}}
_FIRST_RESULT = {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"temperature": 50})}


def _reasoning_call_undeclared(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.tools is not True:
        return (f"{REASONING_CALL} does not apply to {endpoint.name}: its contract does not promise tool calls "
                "(contract.tools)")
    if endpoint.contract.reasoning_field is None:
        return (f"{REASONING_CALL} does not apply to {endpoint.name}: its contract declares no reasoning field "
                "(contract.reasoning_field)")
    if endpoint.dialect.trace_budget_field is not None:
        if endpoint.contract.reasoning_parser is None:
            return (f"{NOT_JUDGED}{endpoint.name} runs no --reasoning-parser, so it honours no "
                    f"{endpoint.dialect.trace_budget_field} and ends a trace only where the model writes its end tag: "
                    "whether a call follows the trace is the model's")
        return None
    budget = endpoint.contract.reasoning_budget
    if budget is None or budget < 0:
        return (f"{NOT_JUDGED}{endpoint.name} ends a trace only where the model writes its end tag ("
                + ("--reasoning-budget -1" if budget is not None else "no reasoning budget in its files")
                + "), and the required grammar starts after it: whether a call follows the trace is the model's. "
                "A budget the engine enforces (llama.cpp --reasoning-budget N) makes it the engine's")
    return None


@live_check(
    cites=("C-CAP-2", "C-CAP-8"),
    summary="tool_choice required with thinking on: the trace lands in the declared field, the call is whole and "
    "valid, and no trace or think tag reaches the content or the arguments, blocking and streamed alike",
    requires=_reasoning_call_undeclared,
    codes={
        "no-call": "with thinking on, `tool_choice: required` gave no whole, schema-valid call after the trace ended",
        "no-trace": "with thinking on, the call came without a trace in the declared reasoning field",
        "trace-leaked": "with thinking on, the trace (or a think tag) reached the content or the call's arguments",
        "stream-differs": "the same request streamed: the deltas assemble into other calls than the blocking answer's, "
        "or the trace did not stream in the declared field, or a think tag streamed in the content",
        "out-of-time": "the request got no answer within the bound this run's measured rates derive",
    },
)
def live_tool_reasoning(endpoint: LiveEndpoint) -> None:
    field = endpoint.contract.reasoning_field
    assert field is not None
    body: dict[str, Any] = {
        "messages": [_BOTH, {"role": "assistant", "content": "", field: _FIRST_TRACE, "tool_calls": [_FIRST_CALL]},
                     _FIRST_RESULT],
        "tools": [_tool(endpoint, WEATHER_TOOL)],
        "tool_choice": "required",
        "max_tokens": REASONING_CALL_TOKENS,
        "temperature": 0,
        **endpoint.thinking(True),
        **endpoint.dialect.trace_end_as_rendered,
    }
    if endpoint.dialect.trace_budget_field is not None:
        body[endpoint.dialect.trace_budget_field] = TRACE_BUDGET
    fix = ("the engine must parse the trace out before the call (llama.cpp: --reasoning-format deepseek and a "
           "--reasoning-budget that ends it; vLLM: --reasoning-parser of the model's format, which thinking_token_budget "
           "ends), and the grammar must start after the trace")
    reply = _bounded(endpoint, live_tool_reasoning, REASONING_CALL, body)
    endpoint.require_ok(REASONING_CALL, reply, expected="200 with a trace and a call", fix=fix, cites=("C-CAP-2",))
    message = message_of(reply.json)
    calls = message.get("tool_calls") or []
    trace = str(message.get(field) or "") if isinstance(message.get(field), str) else ""
    content = str(message.get("content") or "") if isinstance(message.get("content"), str) else ""
    schema = WEATHER_TOOL["function"]["parameters"]
    called, arguments = _arguments(calls[0] if isinstance(calls, list) and calls else None)
    problem = None
    if called != WEATHER_TOOL["function"]["name"]:
        problem = f"{len(calls) if isinstance(calls, list) else calls!r} call(s), the first naming {called!r}"
    else:
        try:
            jsonschema.validate(arguments, schema)
        except jsonschema.ValidationError as exc:
            problem = f"arguments {shorten(json.dumps(arguments), 100)} fail the schema: {exc.message[:80]}"
    if problem:
        raise live_tool_reasoning.fail(endpoint, "no-call", where=reply.url, cites=("C-CAP-2",),
                                        observed=f"{problem}; finish_reason {finish_reason_of(reply.json)!r}; trace "
                                        f"{shorten(trace, 60)!r}; content {shorten(content, 60)!r}",
                                        expected="a whole get_weather call valid against its schema after the trace",
                                        fix=fix)
    if not (trace or "").strip():
        raise live_tool_reasoning.fail(endpoint, "no-trace", where=endpoint.where_contract("reasoning_field"),
                                        cites=("C-CAP-8",),
                                        observed=f"message.{field} is {shorten(repr(message.get(field)), 40)}; content "
                                        f"{shorten(content or '', 80)!r}",
                                        expected=f"the trace in message.{field}, then the call",
                                        fix=fix)
    leaks = _leaks(trace, content, json.dumps(arguments))
    if leaks:
        raise live_tool_reasoning.fail(endpoint, "trace-leaked", where=reply.url, cites=("C-CAP-8",),
                                        observed="; ".join(leaks),
                                        expected=f"the trace in message.{field} alone: no trace and no think tag in "
                                        "the content or the arguments",
                                        fix=fix + "; a client that shows the content shows the model's reasoning, and "
                                        "one that runs the call runs it with the trace in its arguments")
    stream = _stream(endpoint, REASONING_CALL, body, fix)
    got = assemble(stream.events)
    differences = same_calls(calls[:1], got.calls[:1]) + got.problems
    if not got.calls:
        differences.append("no call streamed")
    if not got.reasoning.get(field, "").strip():
        differences.append(f"no {field} delta" + (f" (the trace came in {', '.join(got.reasoning)})"
                                                  if got.reasoning else ""))
    differences += _leaks(got.reasoning.get(field, ""), got.content, "")
    if differences:
        raise live_tool_reasoning.fail(endpoint, "stream-differs", where=stream.url, cites=("C-CAP-2", "C-CAP-8"),
                                        observed="streamed: " + "; ".join(differences)[:300],
                                        expected=f"the trace in {field} deltas, then the deltas of the blocking "
                                        "answer's call; the content free of trace and tags",
                                        fix="the stream is parsed apart from the blocking answer: a proxy that rewrites "
                                        "streamed deltas, or an engine build whose streaming parser differs")
    endpoint.note(f"trace in {field} ({len(trace)} chars), then get_weather({arguments and json.dumps(arguments)}); "
                  f"nothing of it in the content or arguments; streamed: the same call, the trace in {field} deltas")


def _leaks(trace: str, content: str, arguments: str) -> list[str]:
    """Where the trace or a think tag shows outside the reasoning field."""
    found = []
    core = (trace or "").strip()
    for where, text in (("content", content or ""), ("arguments", arguments)):
        tags = sorted(set(_TAGS.findall(text)))
        if tags:
            found.append(f"the {where} carries {', '.join(tags)}: {shorten(text, 80)!r}")
        elif len(core) >= 8 and core in text:
            found.append(f"the {where} carries the trace {shorten(core, 40)!r}")
    return found
