"""A streamed chat completion put back together the way a client does it.

OpenAI's client libraries accumulate ``choices[0].delta`` chunk by chunk: strings are appended (content, a
reasoning field, a tool call's ``id``, ``function.name`` and ``function.arguments``), a tool call is keyed by its
``index``, and ``index`` and ``type`` are replaced rather than appended. A stream that a client assembles into
something else than the blocking answer (a name sent twice, a fragment under another index, a call without an
index) is what a client sees, so the gate assembles by the same rule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Assembled", "assemble", "same_calls"]


@dataclass
class Assembled:
    """What a client holds at the end of a stream."""

    content: str = ""
    reasoning: dict[str, str] = field(default_factory=dict)
    """Reasoning text per field it arrived in (``reasoning_content``, ``reasoning``)."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls in index order: ``id``, ``type``, ``name``, ``arguments`` (strings as assembled)."""
    finish: str | None = None
    call_chunks: int = 0
    """Chunks that carried a tool-call delta."""
    call_chunks_with_finish: int = 0
    """Of those, the chunks that also carried the ``finish_reason``."""
    problems: list[str] = field(default_factory=list)
    """Deltas a client cannot place (a tool-call delta without an integer index)."""


def _append(target: dict[str, Any], key: str, value: Any) -> None:
    if isinstance(value, str):
        target[key] = (target.get(key) or "") + value


def assemble(events: Sequence[Any], reasoning_fields: Sequence[str] = ("reasoning_content", "reasoning")) -> Assembled:
    """The content, reasoning, tool calls and finish reason a client assembles from a stream's events."""
    out = Assembled()
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        delta = choice.get("delta")
        finish = choice.get("finish_reason")
        if finish:
            out.finish = str(finish)
        if not isinstance(delta, dict):
            continue
        if isinstance(delta.get("content"), str):
            out.content += delta["content"]
        for name in reasoning_fields:
            if isinstance(delta.get(name), str):
                out.reasoning[name] = out.reasoning.get(name, "") + delta[name]
        tool_calls = delta.get("tool_calls")
        if not isinstance(tool_calls, list) or not tool_calls:
            continue
        out.call_chunks += 1
        out.call_chunks_with_finish += bool(finish)
        for part in tool_calls:
            index = part.get("index") if isinstance(part, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                out.problems.append(f"a tool-call delta without an integer index: {str(part)[:80]}")
                continue
            call = calls.setdefault(index, {})
            _append(call, "id", part.get("id"))
            if isinstance(part.get("type"), str):
                call["type"] = part["type"]
            function = part.get("function")
            if isinstance(function, dict):
                _append(call, "name", function.get("name"))
                _append(call, "arguments", function.get("arguments"))
    out.calls = [calls[i] for i in sorted(calls)]
    return out


def _parsed(arguments: Any) -> Any:
    try:
        return ("json", json.loads(arguments)) if isinstance(arguments, str) else ("raw", arguments)
    except ValueError:
        return ("raw", arguments)


def same_calls(blocking: Sequence[Any], streamed: Sequence[dict[str, Any]]) -> list[str]:
    """How the streamed calls differ from the blocking answer's (name and parsed arguments, call by call): empty
    when they are the same calls. Ids are the engine's to choose per request and are not compared."""
    differences = []
    if len(blocking) != len(streamed):
        differences.append(f"{len(streamed)} call(s) streamed, {len(blocking)} in the blocking answer")
    for i, (whole, parts) in enumerate(zip(blocking, streamed, strict=False)):
        function = whole.get("function") if isinstance(whole, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if parts.get("name") != name:
            differences.append(f"call {i}: name {parts.get('name')!r} streamed, {name!r} blocking")
        if _parsed(parts.get("arguments")) != _parsed(arguments):
            differences.append(f"call {i}: arguments {str(parts.get('arguments'))[:100]!r} streamed, "
                               f"{str(arguments)[:100]!r} blocking")
        if not parts.get("id") or parts.get("type") != "function":
            differences.append(f"call {i}: streamed without an id or type=function (id {parts.get('id')!r}, type "
                               f"{parts.get('type')!r})")
    return differences
