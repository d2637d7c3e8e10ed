"""The chat transcripts the vLLM reference model is overfit on (pure data: no torch, no transformers).

The gate's own probes (the tool-call conversation, the reasoning question, the chat prompts) are among
them, so the 0.4M-parameter model answers them the way the engine's parsers expect: a call in Hermes
form when tools are free, the same call as vLLM's structured output forces it for ``tool_choice``
required (a JSON array of ``{"name", "parameters"}``) and named (the arguments alone), a short trace
closed by ``</think>`` when thinking is on. ``tests/live/test_vllm_real.py`` checks that the probes
here are still the gate's. What the checks judge stays the engine's work: the parsers, the structured
output, the counters, the refusals.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["CHAT_PROMPTS", "LONG_TEXT", "PLAN_QUESTION", "PLAN_TOOL", "REASONING_QUESTION", "TOKENIZER_EXTRA", "TOOL_EXAMPLE",
           "TOOL_QUESTION", "TRACE_TURNS", "WEATHER_TOOL", "Sample", "samples", "strict"]

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
TOOL_QUESTION: dict[str, Any] = {"role": "user", "content": "What is the weather in Paris in celsius?"}
REASONING_QUESTION = "Is seven a prime number? Answer yes or no."
CHAT_PROMPTS: dict[str, str] = {
    "Write one short sentence about the sea.": "The sea is wide, deep and blue.",
    "Count from one to five in words.": "One, two, three, four, five.",
    "List the first five prime numbers.": "The first five prime numbers are two, three, five, seven and eleven.",
    "Say yes.": "Yes.",
    "Say hello.": "Hello there.",
}

# live-tool-schema's probe (fleetgate/checks/live_tool_shapes.py): a nested tool whose one text argument is a code
# snippet. Its prompt (the schema, with the text, in the system turn) is why the window is 1024 tokens.
LONG_TEXT = 'def report(city):\n\t"""The weather, in one line."""\n\treturn f"{city}: 17 \u00b0C \\\\ {{\'rain\': True}}"\n'
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
PLAN_QUESTION: dict[str, Any] = {"role": "user", "content": "Plan a trip to Paris for monday and tuesday."}
# live-tool-reasoning's probe: an agent between two calls, thinking on (the trace of the first call's turn is in the
# history under the reasoning field; this template renders no earlier trace).
TRACE_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Berlin in fahrenheit, and then in Paris in celsius?"},
    {"role": "assistant", "content": "", "reasoning": "Berlin first, then Paris.", "tool_calls": [{
        "id": "call_0", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Berlin", "unit": "fahrenheit"})}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"temperature": 50})},
]


def strict(tool: dict[str, Any]) -> dict[str, Any]:
    """The tool as the gate sends it to vLLM: ``strict`` makes vLLM hold the arguments to the schema (its structural
    tag leaves a tool's arguments free without it: vllm/tool_parsers/structural_tag_registry.py)."""
    return {**tool, "function": {**tool["function"], "strict": True}}


# Text the gate sends besides the transcripts, so that the vocabulary holds it in the few tokens the checks
# assume: the prefix-cache pangram ("ten tokens in the vocabularies of this fleet"), the capacity filler
# (" the" is one token).
TOKENIZER_EXTRA = [
    "Reference 0a1b2c3d. Repeat the last word: " + "The quick brown fox jumps over the lazy dog. " * 4,
    "Unrelated 0a1b2c3d-0: " + "one two three four five " * 8,
    " the" * 64,
]

# The (city, unit) pairs the tool conversation is trained on: the gate's own. With four cities 19 answer tokens
# were still mispredicted after 225 steps (measured); with one the model converges.
_CITIES = [("Paris", "celsius")]


def _tool_targets(city: str, unit: str) -> list[str]:
    arguments = {"city": city, "unit": unit}
    hermes = "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": arguments}) + "\n</tool_call>"
    # vLLM's tool_choice required: a JSON array of {"name", "parameters"} under structured output;
    # named: the arguments object alone (vllm/entrypoints/openai/protocol.py, _get_json_schema_from_tool).
    required = json.dumps([{"name": "get_weather", "parameters": arguments}])
    named = json.dumps(arguments)
    # Hermes twice: a free choice (tool_choice auto) starts with <tool_call>.
    return [hermes, hermes, required, named]


Sample = tuple[list[dict[str, Any]], list[dict[str, Any]] | None, bool, str, bool]


def samples() -> list[Sample]:
    """(messages, tools, enable_thinking, the assistant's answer, whether its first token is the engine's
    choice: structured output forces it, so the model is not expected to predict it) for every transcript."""
    out: list[Sample] = []
    for city, unit in _CITIES:
        question = {"role": "user", "content": f"What is the weather in {city} in {unit}?"}
        for target in _tool_targets(city, unit):
            forced = not target.startswith("<tool_call>")
            out.append(([*TOOL_EXAMPLE, question], [WEATHER_TOOL], False, target, forced))
    # the structural tag of vLLM's hermes parser admits the call right after the trace (or at once), its arguments
    # any whitespace xgrammar allows and the degree sign raw, never escaped (xgrammar admits the enum's text only so)
    plan = {"city": "Paris", "days": [{"day": "monday", "forecast": {"unit": "celsius"}},
                                      {"day": "tuesday", "forecast": {"unit": "celsius"}}], "note": LONG_TEXT}
    plan_call = ('<tool_call>\n{"name": "plan_trip", "arguments": ' + json.dumps(plan, ensure_ascii=False)
                 + "}\n</tool_call>")
    out.append(([*TOOL_EXAMPLE, PLAN_QUESTION], [strict(PLAN_TOOL)], False, plan_call, False))
    paris = '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps({"city": "Paris", "unit": "celsius"}) + "}\n</tool_call>"
    out.append((TRACE_TURNS, [strict(WEATHER_TOOL)], True, "Now Paris.\n</think>" + paris, False))
    out.append(([{"role": "user", "content": REASONING_QUESTION}], None, True, "Seven has no divisor but one.\n</think>\n\nYes.", False))
    nine = "Is nine a prime number? Answer yes or no."
    out.append(([{"role": "user", "content": nine}], None, True, "Nine is three times three.\n</think>\n\nNo.", False))
    for prompt, answer in CHAT_PROMPTS.items():
        out.append(([{"role": "user", "content": prompt}], None, False, answer, False))
        out.append(([{"role": "user", "content": prompt}], None, True, "A short answer.\n</think>\n\n" + answer, False))
    return out
