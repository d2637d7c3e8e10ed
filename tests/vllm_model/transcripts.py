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

__all__ = ["CHAT_PROMPTS", "REASONING_QUESTION", "TOKENIZER_EXTRA", "TOOL_EXAMPLE", "TOOL_QUESTION", "WEATHER_TOOL", "Sample", "samples"]

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
    out.append(([{"role": "user", "content": REASONING_QUESTION}], None, True, "Seven has no divisor but one.\n</think>\n\nYes.", False))
    nine = "Is nine a prime number? Answer yes or no."
    out.append(([{"role": "user", "content": nine}], None, True, "Nine is three times three.\n</think>\n\nNo.", False))
    for prompt, answer in CHAT_PROMPTS.items():
        out.append(([{"role": "user", "content": prompt}], None, False, answer, False))
        out.append(([{"role": "user", "content": prompt}], None, True, "A short answer.\n</think>\n\n" + answer, False))
    return out
