"""What differs between engines on the wire: surfaces, metric names, error shapes, reasoning knobs.

llama.cpp (tools/server, build 11434), vLLM (vllm/entrypoints/openai, vllm/v1) and the generic
OpenAI subset every other engine is held to. Each fact names where it comes from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetgate.fleet import Engine

__all__ = ["DIALECTS", "Dialect", "OverWindow", "dialect_for"]


@dataclass(frozen=True)
class OverWindow:
    """An engine's refusal of a prompt longer than its window, as numbers."""

    prompt_tokens: int | None
    window: int | None


@dataclass(frozen=True)
class Dialect:
    engine: Engine
    namespace: str | None
    """Prefix of the engine's Prometheus series (``llamacpp``, ``vllm``)."""
    has_props: bool
    """llama-server's /props and /slots (tools/server/server-context.cpp)."""
    health_path: str | None
    drafts_metric: str | None
    draft_tokens_metric: str | None
    accepted_metric: str | None
    prompt_tokens_metric: str | None
    prompt_seconds_metric: str | None
    thinking_on: Mapping[str, Any] = field(default_factory=dict)
    thinking_off: Mapping[str, Any] = field(default_factory=dict)
    """Request fields that switch the template's thinking; the generic subset sends none."""
    decode_rate_fields: Mapping[str, Any] = field(default_factory=dict)
    """Extra request fields for a decode-rate probe (ignore_eos, C-PF-1)."""
    prefix_probe_tokens: int = 128
    """About how long the repeated prompt is: over two vLLM blocks where that matters (INC-43)."""
    over_window_patterns: tuple[re.Pattern[str], ...] = ()
    image_refusal: tuple[int, re.Pattern[str]] | None = None
    """The status and message with which the engine itself refuses an image it cannot see; None when the
    dialect cannot tell its own refusal from anyone else's."""
    speculation_fixed_why: str = ""
    """Why a request cannot turn speculation off (so determinism compares two speculative runs)."""
    fixed_answer: tuple[Mapping[str, Any], str] | None = None
    """Request fields that force one exact answer (and its end) without max_tokens, and that answer: what
    a server-side generation cap (llama.cpp --n-predict applies only to requests without max_tokens)
    cuts. None where the engine has no such constraint."""
    no_think_close: Mapping[str, Any] = field(default_factory=dict)
    """Request fields that keep the model from writing a closing think tag itself (a finite negative
    logit bias: the engine's own forced close still wins, every other token being -inf then)."""
    auto_tool_parse: bool = False
    """The gate also asks with ``tool_choice: auto``, as a client that sends tools without a ``tool_choice`` does.
    vLLM parses the model's own call only under auto (a flag turns that on), while ``required`` and named choices go
    through structured output and never reach the parser; llama.cpp answers auto with a lazy grammar that the
    call's opening tag triggers, so where the model calls, the call and its stream are the engine's to parse."""
    calls_in_markup: bool = False
    """A request may hold the answer to a regex (vLLM's ``structured_outputs``), and under auto the engine's tool
    parser reads the calls out of the model's own markup: several calls can be asked for in that markup, so their
    count is the regex's and their parsing the engine's (vllm/tool_parsers/abstract_tool_parser.py leaves a client's
    structured outputs in place under auto)."""
    required_admits_words: bool = False
    """``tool_choice: required`` lets the model write words before the call opens: llama.cpp's grammar for a template's
    tool-call format is optional content up to the call's opening, then the call (common/chat-auto-parser-generator.cpp,
    ``build_tool_parser_json_native``). Such an engine ends no answer before a call, but an answer that ran to
    ``max_tokens`` in words never opened one, and that was the model's choice, not the engine's."""
    strict_tools: bool = False
    """A probe that holds a call's arguments to its tool's schema marks the tool ``strict``, as a client that needs
    them held does: vLLM's tool parsers with a structural tag (hermes among them) constrain the call's envelope for
    every tool under ``tool_choice: required``, and its arguments only for a tool whose ``strict`` is true
    (vllm/tool_parsers/structural_tag_registry.py, ``resolve_tool_strictness``: "its arguments stay free unless the
    server level is PARAMETER")."""
    trace_budget_field: str | None = None
    """The request field that caps a trace, the engine forcing its end tag when the budget is spent: vLLM's
    ``thinking_token_budget`` (vllm/v1/sample/thinking_budget_state.py), honoured wherever a ``--reasoning-parser``
    runs (vllm/engine/arg_utils.py gives it a reasoning config; without one the request is refused)."""
    trace_end_as_rendered: Mapping[str, Any] = field(default_factory=dict)
    """Request fields that make the engine's forced end of a trace read as the template renders one (llama.cpp's
    ``reasoning_budget_message`` is put before the forced end tag: tools/server/server-schema.cpp), so that what
    follows a trace ended by the budget is what the model has seen follow a trace in the history."""
    health_body: str = "json-or-empty"
    """What the engine's own health answer carries: ``status-ok`` (a JSON object with ``"status": "ok"``),
    ``empty`` (no body), or ``json-or-empty`` (the generic subset: anything but a page)."""

    def health_problem(self, path: str, body: Any, text: str) -> str | None:
        """None when a 200 health answer has this engine's own shape; else the shape it should have had."""
        if path == "/v1/models":
            if isinstance(body, dict) and isinstance(body.get("data"), list):
                return None
            return 'a JSON model list ({"object": "list", "data": [...]})'
        if self.health_body == "status-ok":
            return None if isinstance(body, dict) and body.get("status") == "ok" else '{"status": "ok"}'
        if self.health_body == "empty":
            return None if not text.strip() else "an empty body"
        return None if body is not None or not text.strip() else "JSON or an empty body"

    def over_window(self, status: int, body: Any, message: str) -> OverWindow | None:
        """The numbers of an over-window refusal, or None if this answer is not one."""
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            error = body["error"]
            # tools/server/server-common.cpp: exceed_context_size_error carries both numbers.
            if error.get("type") == "exceed_context_size_error":
                return OverWindow(_int(error.get("n_prompt_tokens")), _int(error.get("n_ctx")))
        for pattern in self.over_window_patterns:
            match = pattern.search(message)
            if match:
                return OverWindow(_int(match.group("prompt")), _int(match.group("window")))
        return None


def _int(value: object) -> int | None:
    try:
        return int(str(value).replace(",", ""))
    except (TypeError, ValueError):
        return None


_LLAMA_OVER = re.compile(
    r"request \((?P<prompt>[\d,]+) tokens\) exceeds the available context size "
    r"\((?P<window>[\d,]+) tokens\)"
)
# vllm/v1/engine/input_processor.py and the OpenAI-compatible serving layer word it two ways.
_VLLM_DECODER = re.compile(
    r"decoder prompt \(length (?P<prompt>[\d,]+)\) is longer than the maximum model "
    r"length of (?P<window>[\d,]+)"
)
_OPENAI_MAX = re.compile(
    r"maximum context length is (?P<window>[\d,]+) tokens.*?(?P<prompt>[\d,]+) "
    r"(?:input )?tokens",
    re.S,
)

_THINK = {"chat_template_kwargs": {"enable_thinking": True}}
_NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}

DIALECTS: Mapping[str, Dialect] = {
    "llama.cpp": Dialect(
        engine="llama.cpp",
        namespace="llamacpp",
        has_props=True,
        health_path="/health",
        # tools/server/server-task.cpp, to_metrics(): counters with a _total suffix.
        drafts_metric="llamacpp:spec_decode_num_drafts_total",
        draft_tokens_metric="llamacpp:spec_decode_num_draft_tokens_total",
        accepted_metric="llamacpp:spec_decode_num_accepted_tokens_total",
        prompt_tokens_metric="llamacpp:prompt_tokens_total",
        prompt_seconds_metric="llamacpp:prompt_seconds_total",
        thinking_on=_THINK,
        thinking_off=_NO_THINK,
        decode_rate_fields={"ignore_eos": True},
        over_window_patterns=(_LLAMA_OVER,),
        # tools/server/server-common.cpp: "image input is not supported - hint: ... provide the mmproj",
        # a runtime_error the HTTP layer answers 500.
        image_refusal=(500, re.compile(r"^image input is not supported")),
        # tools/server/server-schema.cpp "grammar": a GBNF that admits one string, after which only an
        # end-of-generation token is allowed.
        fixed_answer=({"grammar": 'root ::= "The sea is wide, deep and blue."'}, "The sea is wide, deep and blue."),
        speculation_fixed_why="llama.cpp build 11434 cannot turn speculation off per request (the speculative.* "
        "request fields are compiled out: tools/server/server-schema.cpp), so both runs draft and a lossy "
        "drafter that is lossy the same way twice is not seen here",
        # common/sampling.cpp applies the reasoning budget first (forcing sets every other logit to -inf),
        # then the logit bias: -100 keeps the model from opening a tag, never the engine's forced close.
        # String keys are tokenized by the server (tools/server/server-schema.cpp, logit_bias).
        no_think_close={"logit_bias": {"<": -100, " <": -100, "</": -100, " </": -100, "\n</": -100}},
        # templates render a trace as "<think>\nTRACE\n</think>\n": the forced "</think>" then follows a newline as
        # there (without it the reference's 135M model wrote a second "</think>" into the content, measured)
        trace_end_as_rendered={"reasoning_budget_message": "\n"},
        auto_tool_parse=True,
        required_admits_words=True,
        # tools/server/server-context.cpp: the health handler answers {"status": "ok"} once loaded
        health_body="status-ok",
    ),
    "vllm": Dialect(
        engine="vllm",
        namespace="vllm",
        has_props=False,
        health_path="/health",
        drafts_metric="vllm:spec_decode_num_drafts_total",
        draft_tokens_metric="vllm:spec_decode_num_draft_tokens_total",
        accepted_metric="vllm:spec_decode_num_accepted_tokens_total",
        prompt_tokens_metric="vllm:prompt_tokens_total",
        prompt_seconds_metric=None,
        thinking_on=_THINK,
        thinking_off=_NO_THINK,
        decode_rate_fields={"ignore_eos": True},
        prefix_probe_tokens=4096,
        over_window_patterns=(_VLLM_DECODER, _OPENAI_MAX),
        # A text-only model refuses image parts with a 400 that names images or multimodality (the exact
        # wording varies across vLLM releases: not verified against one build, unlike llama.cpp's).
        image_refusal=(400, re.compile(r"image|multimodal|multi-modal|modalit", re.I)),
        speculation_fixed_why="vLLM fixes the speculative config at start-up (no per-request switch), so both "
        "runs draft",
        # vllm/entrypoints/openai/api_server.py: health() returns Response(status_code=200), no body
        health_body="empty",
        # vllm/renderers/online_renderer.py: "auto" without --enable-auto-tool-choice is a 400; required and named
        # choices are decoded by structured output (vllm/parser/abstract_parser.py) and bypass --tool-call-parser,
        # which reads the model's own markup only under auto (vllm/entrypoints/openai/chat_completion/serving.py)
        auto_tool_parse=True,
        calls_in_markup=True,
        strict_tools=True,
        trace_budget_field="thinking_token_budget",
    ),
    "openai": Dialect(
        engine="openai",
        namespace=None,
        has_props=False,
        health_path=None,
        drafts_metric=None,
        draft_tokens_metric=None,
        accepted_metric=None,
        prompt_tokens_metric=None,
        prompt_seconds_metric=None,
        over_window_patterns=(_OPENAI_MAX, _LLAMA_OVER, _VLLM_DECODER),
        image_refusal=(400, re.compile(r"image|multimodal|multi-modal|modalit", re.I)),
    ),
}


def dialect_for(engine: Engine) -> Dialect:
    return DIALECTS[engine]
