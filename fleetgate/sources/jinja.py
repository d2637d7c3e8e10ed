"""Jinja2 as an Ansible role's template is rendered here: its sandbox bounded against a template that would fill
memory before any output bound is reached, and the errors the reader turns into one line. Imported only where a
template is rendered (``fleetgate.sources.ansible``; ``fleetgate.chat_template`` for a chat template): Jinja2 costs
about 45 ms to import, which no other seam pays."""

from __future__ import annotations

from typing import Any

from jinja2 import StrictUndefined, TemplateAssertionError, TemplateSyntaxError, Undefined, UndefinedError
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

__all__ = ["Bounded", "Jinja"]


class Bounded(SandboxedEnvironment):
    """Jinja2's sandbox, refusing a repetition longer than ``max_output`` items and an exponent over 64."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, max_output: int, **options: Any) -> None:
        super().__init__(**options)
        self.max_output = max_output

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        # 'a' * 10**9 or 10 ** 10**6 would fill memory or hang before any output bound is reached.
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise SecurityError("an exponent over 64")
        if operator == "*":
            sized, count = (left, right) if isinstance(left, (str, list)) else (right, left)
            if isinstance(sized, (str, list)) and isinstance(count, int) and len(sized) * count > self.max_output:
                raise SecurityError(f"a repetition over {self.max_output} items")
        return super().call_binop(context, operator, left, right)


class Jinja:
    """What the Ansible reader uses of Jinja2, as one typed name for the one lazy import that reaches it."""

    Bounded = Bounded
    StrictUndefined = StrictUndefined
    Undefined = Undefined
    ImmutableSandboxedEnvironment = ImmutableSandboxedEnvironment
    SecurityError = SecurityError
    TemplateAssertionError = TemplateAssertionError
    TemplateSyntaxError = TemplateSyntaxError
    TemplateError = TemplateError
    UndefinedError = UndefinedError
