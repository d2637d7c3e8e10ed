"""Prometheus text from /metrics, and the series a fleet's alert rules name.

/metrics is read with prometheus_client's own text parser; rule expressions are read with a PromQL
parser (promql-parser), never with regular expressions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleetgate.errors import InputError

__all__ = ["RuleSelector", "parse_metrics", "rule_selectors"]


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name -> value, summed over label sets. Raises ValueError on text that does not parse."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


@dataclass(frozen=True)
class RuleSelector:
    series: str
    alert: str
    where: str
    """rules-file:line of the rule."""
    job: str | None
    """The value of an equality ``job`` matcher, if the selector has one."""

    @property
    def namespace(self) -> str | None:
        return self.series.split(":", 1)[0] if ":" in self.series else None


def rule_selectors(paths: Iterable[Path]) -> list[RuleSelector]:
    """Every series named by a vector selector in the rules' expressions."""
    found: list[RuleSelector] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            root = yaml.compose(text)
        except OSError as exc:
            raise InputError(path, None, f"cannot read rules file: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError(path, mark.line + 1 if mark else None, f"not valid YAML: {exc}") from None
        for name, expr, line in _rules(root, path):
            try:
                ast = promql_parser.parse(expr)
            except Exception as exc:
                raise InputError(
                    path, line, f"rule {name}: not valid PromQL: {' '.join(str(exc).split())}"
                ) from None
            for selector in _selectors(ast):
                series, job = _name_and_job(selector)
                if series:
                    found.append(RuleSelector(series=series, alert=name, where=f"{path}:{line}", job=job))
    return found


def _rules(root: yaml.Node | None, path: Path) -> Iterable[tuple[str, str, int]]:
    if not isinstance(root, yaml.MappingNode):
        raise InputError(path, 1, "expected a Prometheus rules file: a mapping with 'groups'")
    groups = _get(root, "groups")
    if not isinstance(groups, yaml.SequenceNode):
        raise InputError(path, root.start_mark.line + 1, "expected 'groups:' with a list of rule groups")
    for group in groups.value:
        rules = _get(group, "rules") if isinstance(group, yaml.MappingNode) else None
        if not isinstance(rules, yaml.SequenceNode):
            raise InputError(path, group.start_mark.line + 1, "expected 'rules:' with a list in every group")
        for rule in rules.value:
            if not isinstance(rule, yaml.MappingNode):
                raise InputError(path, rule.start_mark.line + 1, "expected a rule mapping")
            name_node = _get(rule, "alert") or _get(rule, "record")
            expr = _get(rule, "expr")
            if not isinstance(expr, yaml.ScalarNode):
                raise InputError(path, rule.start_mark.line + 1, "rule without 'expr'")
            name = str(name_node.value) if isinstance(name_node, yaml.ScalarNode) else "(unnamed)"
            yield name, str(expr.value), expr.start_mark.line + 1


def _get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.Node):
            return v
    return None


def _selectors(ast: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(ast, visit)
    return found


def _name_and_job(selector: promql_parser.VectorSelector) -> tuple[str | None, str | None]:
    name = selector.name
    job: str | None = None
    for matcher in selector.matchers.matchers:
        equal = matcher.op == promql_parser.MatchOp.Equal
        if matcher.name == "__name__" and equal and name is None:
            name = matcher.value
        elif matcher.name == "job" and equal:
            job = matcher.value
    return name, job
