"""Prometheus text from /metrics, and the series a fleet's alert rules name.

/metrics is read with prometheus_client's own text parser; rule expressions are read with a PromQL
parser (promql-parser), never with regular expressions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleetgate.errors import InputError

__all__ = ["PROMETHEUS_SERIES", "RuleSelector", "RuleThreshold", "histogram_buckets", "parse_metrics", "rule_selectors",
           "rule_thresholds"]

PROMETHEUS_SERIES = frozenset(
    {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
     "scrape_series_added"}
)
"""Series Prometheus writes itself for every target: no endpoint exports them."""


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name -> value, summed over label sets. Raises ValueError on text that does not parse."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """The cumulative bucket counts of histogram ``name`` (upper bound -> count, summed over its other labels).
    Raises ValueError on text that does not parse."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_bucket" and "le" in sample.labels:
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + float(sample.value)
    return buckets


@dataclass(frozen=True)
class RuleSelector:
    series: str
    alert: str
    where: str
    """rules-file:line of the rule."""
    job: str | None
    """The value of an equality ``job`` matcher, if the selector has one."""
    job_pattern: str | None = None
    """The regular expression of a ``job=~`` matcher, if the selector has one."""
    rule: str = ""
    """Which rule the selector belongs to (rules-file:line of its expression)."""

    @property
    def namespace(self) -> str | None:
        return self.series.split(":", 1)[0] if ":" in self.series else None

    def names_job(self, job: str) -> bool:
        """Whether this selector's job matcher selects ``job`` (PromQL regexes are fully anchored)."""
        if self.job is not None and self.job == job:
            return True
        if self.job_pattern is not None:
            try:
                return re.fullmatch(self.job_pattern, job) is not None
            except re.error:
                return False
        return False


@dataclass(frozen=True)
class RuleThreshold:
    """A rule that alerts when ``rate(numerator) / rate(denominator)`` falls under a number."""

    alert: str
    where: str
    numerator: str
    denominator: str
    threshold: float


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
                series, job, pattern = _name_and_job(selector)
                if series:
                    found.append(
                        RuleSelector(
                            series=series,
                            alert=name,
                            where=f"{path}:{line}",
                            job=job,
                            job_pattern=pattern,
                            rule=f"{path}:{line}",
                        )
                    )
    return found


def rule_thresholds(paths: Iterable[Path]) -> list[RuleThreshold]:
    """Every ``A / B < number`` (or ``<=``) comparison in the rules, with the series A and B name."""
    found: list[RuleThreshold] = []
    for path in paths:
        try:
            root = yaml.compose(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue  # rule_selectors reports it, with its line
        for name, expr, line in _rules(root, path):
            try:
                ast = promql_parser.parse(expr)
            except Exception:
                continue

            def visit(node: promql_parser.Expr, name: str = name, where: str = f"{path}:{line}") -> bool:
                if (
                    isinstance(node, promql_parser.BinaryExpr)
                    and str(node.op) in ("<", "<=")
                    and isinstance(node.rhs, promql_parser.NumberLiteral)
                    and isinstance(node.lhs, promql_parser.BinaryExpr)
                    and str(node.lhs.op) == "/"
                ):
                    top = [_name_and_job(s)[0] for s in _selectors(node.lhs.lhs)]
                    bottom = [_name_and_job(s)[0] for s in _selectors(node.lhs.rhs)]
                    if len(top) == 1 and len(bottom) == 1 and top[0] and bottom[0]:
                        found.append(
                            RuleThreshold(name, where, top[0], bottom[0], float(node.rhs.val))
                        )
                return True

            promql_parser.walk(ast, visit)
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


def _name_and_job(selector: promql_parser.VectorSelector) -> tuple[str | None, str | None, str | None]:
    name = selector.name
    job: str | None = None
    pattern: str | None = None
    for matcher in selector.matchers.matchers:
        equal = matcher.op == promql_parser.MatchOp.Equal
        if matcher.name == "__name__" and equal and name is None:
            name = matcher.value
        elif matcher.name == "job" and equal:
            job = matcher.value
        elif matcher.name == "job" and matcher.op == promql_parser.MatchOp.Re:
            pattern = matcher.value
    return name, job, pattern
