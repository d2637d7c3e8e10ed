"""Whether one llama-server build's handler takes a value: the grammar its arg.cpp declares, as data.

The grammar of each option variant is read from the build's own common/arg.cpp by extract_llama_args (choices
a handler compares against before it throws, the number it parses, the conditions on that number under which it
throws, a list's separator and its items' choices); nothing here is a list of one build's values. What the C++
conversions accept is mirrored in ``stoi``/``stof``/``stoul``. Beyond arg.cpp, the server binds its socket before
it loads a model: a negative port stops it at every build (llama_server_value_rules.json, probed on a real
binary).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["FLT_MAX", "INT_MAX", "INT_MIN", "LLAMA_MAX_DEVICES", "Variant", "refusal", "server_rule", "stof", "stoi", "stoul"]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
ULONG_MAX = (1 << 64) - 1
FLT_MAX = 3.4028234663852886e38
LLAMA_MAX_DEVICES = 16
"""``llama_max_devices()`` (include/llama.h, LLAMA_MAX_DEVICES), the bound ``-ts`` counts its items against."""

_STOI = re.compile(r"^[ \t\n\v\f\r]*[+-]?\d+")
_STOF = re.compile(r"^\s*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)


@dataclass(frozen=True)
class Variant:
    names: tuple[str, ...]
    neg: tuple[str, ...]
    value: str
    """``none`` (a switch), ``bool`` (a switch with negative names), ``int``, ``string``, ``string2`` (two values)."""
    env: str | None
    enum: tuple[str, ...]
    removed: str | None
    """The build knows the name only to refuse it: ``arg_removed(MESSAGE)``."""
    seen: tuple[tuple[int, int], ...]
    grammar: tuple[tuple[str, Any], ...] = ()
    """The handler's value grammar beyond ``enum`` (extract_llama_args: or_number, number, refuse, message,
    split, items, items_stop, items_below, needs_item, partial), as sorted (key, value) pairs."""

    def rule(self, key: str) -> Any:
        return next((v for k, v in self.grammar if k == key), None)

    @property
    def all_names(self) -> tuple[str, ...]:
        return (*self.names, *self.neg)

    @property
    def takes_value(self) -> bool:
        return self.value in ("int", "string", "string2")



def stoi(text: str) -> int:
    """C++ std::stoi, as the engine converts integer flags: the leading integer, the rest ignored;
    no digits is ``invalid_argument``, a value outside a 32-bit int is ``out_of_range`` (both refused)."""
    match = _STOI.match(text)
    if match is None:
        raise ValueError(f"expected an integer, got {text!r}")
    value = int(match.group(0))
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"{text!r} is out of the range of an int ({INT_MIN}..{INT_MAX})")
    return value


def stoul(text: str) -> int:
    """C++ std::stoul: the leading integer (a minus sign wraps it), out of range beyond an unsigned long."""
    match = _STOI.match(text)
    if match is None:
        raise ValueError(f"expected an integer, got {text!r}")
    value = int(match.group(0))
    if abs(value) > ULONG_MAX:
        raise ValueError(f"{text!r} is out of the range of an unsigned long")
    return value


def stof(text: str) -> float:
    """C++ std::stof: the leading floating-point number, the rest ignored; a value beyond a float's
    range is ``out_of_range`` (refused)."""
    match = _STOF.match(text)
    if match is None:
        raise ValueError(f"expected a number, got {text!r}")
    value = float(match.group(0))
    if math.isfinite(value) and abs(value) > FLT_MAX:
        raise ValueError(f"{text!r} is out of the range of a float")
    return value


_PARSE = {"int": stoi, "long": stoi, "ulong": stoul, "float": stof}


def _holds(atom: tuple[Any, ...], number: float) -> bool:
    """Whether one throwing condition of a handler holds for the parsed value."""
    if atom[0] == "nonfinite":
        return not math.isfinite(number)
    if atom[0] == "reciprocal-nonfinite":
        return number == 0 or not math.isfinite(1.0 / number) or abs(number) < 1 / FLT_MAX
    op, bound = str(atom[0]), float(atom[1])
    if math.isnan(number):
        return op == "!="
    return {"<": number < bound, "<=": number <= bound, ">": number > bound, ">=": number >= bound,
            "==": number == bound, "!=": number != bound}[op]


def _refused_by(variant: Variant, number: float, value: str) -> str | None:
    for atom in variant.rule("refuse") or ():
        if _holds(atom, number):
            message = variant.rule("message") or "invalid value"
            return str(message).replace("%d", value).replace("%s", value).replace("%f", value)
    return None


def _split(value: str, separator: str) -> list[str]:
    return re.split(separator, value) if len(separator) > 1 else value.split(separator)


def refusal(variant: Variant, value: str, build: int) -> str | None:
    """Why build ``build``'s handler of ``variant`` throws on ``value``; None when it takes it."""
    try:
        if variant.value == "int":
            return _refused_by(variant, stoi(value), value)
        if variant.value != "string":
            return None
        if variant.enum:
            if value in variant.enum:
                return None
            fallback = variant.rule("or_number")
            if fallback is not None:
                _PARSE.get(fallback, stoi)(value)
                return None
            return f"invalid value {value!r}; build {build} takes one of {', '.join(c if c else repr(c) for c in variant.enum)}"
        number = variant.rule("number")
        if number is not None:
            parsed = _PARSE.get(number, stof)(value)
            return _refused_by(variant, parsed, value)
        separator = variant.rule("split")
        if separator is None:
            return None
        items = _split(value, separator)
        if variant.rule("needs_item") and not any(item.strip() for item in items):
            return str(variant.rule("message") or "expected at least one item")
        below = variant.rule("items_below")
        if below is not None and len(items) >= LLAMA_MAX_DEVICES:
            return f"got {len(items)} input configs, but system only has {LLAMA_MAX_DEVICES} devices"
        if variant.rule("items_number") == "float":
            for item in items:
                stof(item)
        choices = variant.rule("items")
        if choices:
            for item in items:
                if item == variant.rule("items_stop"):
                    return None
                if item not in choices:
                    within = f" in {value!r}" if len(items) > 1 else ""
                    return (f"unknown value {item!r}{within}; build {build} takes a {separator!r}-separated list of "
                            f"{', '.join(choices)}")
    except ValueError as exc:
        return str(exc)
    return None


@cache
def _server_rules() -> tuple[tuple[frozenset[str], int, str], ...]:
    text = resources.files("fleetgate.engines").joinpath("llama_server_value_rules.json").read_text(encoding="utf-8")
    return tuple((frozenset(r["names"]), int(r["at_least"]), str(r["message"])) for r in json.loads(text)["rules"])


def server_rule(names: set[str] | frozenset[str], value: str) -> str | None:
    """Why the server itself (not arg.cpp) stops on ``value`` for an option of these names; None when it does not."""
    for rule_names, at_least, message in _server_rules():
        if rule_names & names:
            try:
                if stoi(value) < at_least:
                    return message
            except ValueError:
                return None
    return None
