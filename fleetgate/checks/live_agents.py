"""What agent clients build on beyond one call: structured output and the reasoning of earlier turns (C.2).

Both are judged by what the engine and its template do, never by the words a model picks. A JSON schema in
``response_format`` becomes a grammar that admits only valid documents, so the answer is held to the schema,
blocking and streamed. Whether a trace sent back in the history reaches the prompt is read from the prompt's token
count, with and without the trace: a one-token request, whatever the model would have said.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from fleetgate.checks import NOT_JUDGED, NotJudged, live_check
from fleetgate.checks.live_capabilities import WEATHER_TOOL
from fleetgate.live.client import shorten
from fleetgate.live.deltas import assemble
from fleetgate.live.endpoint import LiveEndpoint, message_of, usage_of

STRUCTURED = "live-structured-output"
TURNS = "live-reasoning-turns"

STRUCTURED_TOKENS = 40
"""The answer's bound: the schema's shortest document is about 10 tokens, and the grammar lets the model put
whitespace between its tokens (at most a newline and 20 blanks at each of five places)."""

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


STRUCTURED_CHECK = live_check(
    STRUCTURED,
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


@STRUCTURED_CHECK.register
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
            raise STRUCTURED_CHECK.fail(endpoint, "not-refused",
                                        where=where,
                                        cites=("C-CAP-2",),
                                        observed=f"HTTP {reply.status}: content "
                                        f"{shorten(str(message_of(reply.json).get('content')), 80)!r}",
                                        expected="a 4xx refusal: the contract says the engine has no grammar support",
                                        fix="the engine honours (or silently ignores) response_format: if the answer "
                                        "validates, declare structured_output = true; if not, clients get free text "
                                        "where they asked for JSON")
        if not 400 <= reply.status < 500:
            raise STRUCTURED_CHECK.fail(endpoint, "unclean-refusal",
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
        raise STRUCTURED_CHECK.fail(endpoint, "not-honoured",
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
        raise STRUCTURED_CHECK.fail(endpoint, "stream-not-honoured",
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


TURNS_CHECK = live_check(
    TURNS,
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

_TRACE = "The user asks for Berlin in fahrenheit, so I call get_weather with those two arguments."
_QUESTION = {"role": "user", "content": "What is the weather in Berlin in fahrenheit?"}
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
    reply = endpoint.chat(TURNS, {
        "messages": messages,
        "tools": [WEATHER_TOOL],
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


@TURNS_CHECK.register
def live_reasoning_turns(endpoint: LiveEndpoint) -> None:
    field, replay = endpoint.contract.reasoning_field, endpoint.contract.reasoning_replay
    assert field is not None and replay is not None
    thought = {**_CALL, field: _TRACE}
    expect = {"after-tool-result": replay in ("after-last-user", "always"), "after-user-message": replay == "always"}
    seen: dict[str, tuple[int, int]] = {}
    # what follows the call's turn: its tool result (the agent goes on), then the answer and the user's next message
    for case, after in (("after-tool-result", [_RESULT]), ("after-user-message", [_RESULT, _ANSWER, _NEXT])):
        seen[case] = (_prompt_tokens(endpoint, [_QUESTION, _CALL, *after]),
                      _prompt_tokens(endpoint, [_QUESTION, thought, *after]))
        without, with_trace = seen[case]
        rendered = with_trace != without
        if rendered == expect[case]:
            continue
        words = ("continuing from a tool result" if case == "after-tool-result"
                 else "with the user's next message last")
        raise TURNS_CHECK.fail(endpoint, case,
                               where=endpoint.where_contract("reasoning_replay"),
                               cites=("C-CAP-8",),
                               observed=f"{words}: {without} prompt tokens without the earlier trace, {with_trace} with "
                               f"it in {field}: the trace was {'rendered' if rendered else 'not rendered'}",
                               expected=f"the trace {'rendered' if expect[case] else 'left out'} (reasoning_replay = "
                               f"{replay!r})",
                               fix="the template decides which traces go back to the model: an agent loses its plan "
                               "when the trace of its call is dropped before the tool result, and a window fills with "
                               "old reasoning when every trace is kept; a proxy or client that strips or rewrites "
                               f"{field} in the history does the first. Fix the template, or declare what it does")
    tool, user = seen["after-tool-result"], seen["after-user-message"]

    def said(case: str) -> str:
        return "rendered" if expect[case] else "left out"

    endpoint.note(f"an earlier trace, as {replay!r} declares: after a tool result {said('after-tool-result')} "
                  f"({tool[0]} -> {tool[1]} prompt tokens), after the user's message {said('after-user-message')} "
                  f"({user[0]} -> {user[1]})")
