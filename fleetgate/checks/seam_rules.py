"""Alert rules and dashboards offline (B-OB-1/2/3/5, INC-16, INC-24), and no retired name anywhere (B-DOC-10).

Every series a rule or a dashboard query names must be one the engine of the job it names exports. The
exported sets come from the engines: llama.cpp's captured from the real reference server
(fleetgate/engines/llama_server_metrics.json, with its build), vLLM's from the pinned release's metric
definitions (fleetgate/engines/vllm_releases.json, read from its sdist). Expressions are read with a
PromQL parser (promql-parser), rules files with a YAML parser, dashboards as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import promql_parser
import yaml

from fleetgate.checks import fleet_seam, service_seam
from fleetgate.engines.llama_metrics import load_llama_metrics
from fleetgate.engines.vllm import load_release
from fleetgate.errors import InputError
from fleetgate.fleet import Fleet, Service
from fleetgate.render.rendered import RenderedService

__all__ = ["Selector", "exported", "selectors"]

NAMESPACE = {"llama.cpp": "llamacpp", "vllm": "vllm"}


@dataclass(frozen=True)
class Selector:
    series: str
    job: tuple[str, str] | None
    """(operator, value) of the selector's job matcher, if it has one."""
    owner: str
    """The alert (or recording rule) or dashboard panel that names it."""
    where: str
    expr: str

    @property
    def namespace(self) -> str | None:
        return self.series.split(":", 1)[0] if ":" in self.series else None

    def names_job(self, job: str) -> bool:
        if self.job is None:
            return True
        op, value = self.job
        if op == "=":
            return job == value
        if op == "!=":
            return job != value
        matched = re.fullmatch(value, job) is not None
        return matched if op == "=~" else not matched


@cache
def exported(namespace: str) -> tuple[str, frozenset[str]]:
    """(provenance, series) an engine namespace exports."""
    if namespace == "llamacpp":
        build, series = load_llama_metrics()
        return f"llama-server build {build}'s /metrics (fleetgate/engines/llama_server_metrics.json)", series
    release = load_release()
    return f"vLLM {release.version}'s metric definitions (fleetgate/engines/vllm_releases.json)", release.exported_series()


def _parse(expr: str, where: str, owner: str) -> Iterator[Selector]:
    try:
        ast = promql_parser.parse(expr)
    except Exception as exc:
        path, _, line = where.rpartition(":")
        raise InputError(Path(path), int(line) if line.isdigit() else None,
                         f"{owner}: not valid PromQL: {' '.join(str(exc).split())}") from None
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(ast, visit)
    ops = ((promql_parser.MatchOp.Equal, "="), (promql_parser.MatchOp.NotEqual, "!="),
           (promql_parser.MatchOp.Re, "=~"), (promql_parser.MatchOp.NotRe, "!~"))
    for selector in found:
        name = selector.name
        job = None
        for matcher in selector.matchers.matchers:
            if matcher.name == "__name__" and matcher.op == promql_parser.MatchOp.Equal and name is None:
                name = matcher.value
            elif matcher.name == "job":
                job = (next(text for op, text in ops if matcher.op == op), matcher.value)
        if name:
            yield Selector(series=name, job=job, owner=owner, where=where, expr=expr)


def _rule_exprs(path: Path, text: str) -> Iterator[tuple[str, str, int]]:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, mark.line + 1 if mark else None, f"not valid YAML: {exc}") from None
    groups = _get(root, "groups") if isinstance(root, yaml.MappingNode) else None
    if not isinstance(groups, yaml.SequenceNode):
        raise InputError(path, 1, "expected a Prometheus rules file: a mapping with 'groups'")
    for group in groups.value:
        rules = _get(group, "rules") if isinstance(group, yaml.MappingNode) else None
        for rule in rules.value if isinstance(rules, yaml.SequenceNode) else []:
            if not isinstance(rule, yaml.MappingNode):
                continue
            name = _get(rule, "alert") or _get(rule, "record")
            expr = _get(rule, "expr")
            if isinstance(expr, yaml.ScalarNode):
                label = str(name.value) if isinstance(name, yaml.ScalarNode) else "(unnamed rule)"
                yield label, str(expr.value), expr.start_mark.line + 1


def _get(node: yaml.Node, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v if isinstance(v, yaml.Node) else None
    return None


def _dashboard_exprs(path: Path, text: str) -> Iterator[tuple[str, str, int]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"not valid JSON: {exc.msg}") from None

    def walk(node: object, title: str) -> Iterator[tuple[str, str]]:
        if isinstance(node, dict):
            title = str(node.get("title", title))
            expr = node.get("expr")
            if isinstance(expr, str) and expr.strip():
                yield title, expr
            for value in node.values():
                yield from walk(value, title)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item, title)

    for title, expr in walk(data, path.name):
        encoded = json.dumps(expr)[1:-1]
        offset = text.find(encoded)
        yield f"panel {title!r}", expr, text.count("\n", 0, offset) + 1 if offset >= 0 else 1


def selectors(fleet: Fleet, *, dashboards: bool = True) -> list[Selector]:
    """Every series named by the fleet's rules files (and dashboards)."""
    found: list[Selector] = []
    for path in fleet.rules:
        found += _selectors_of(path, path.read_text(encoding="utf-8"), dashboard=False)
    for path in fleet.dashboards if dashboards else ():
        found += _selectors_of(path, path.read_text(encoding="utf-8"), dashboard=True)
    return found


@lru_cache(maxsize=256)
def _selectors_of(path: Path, text: str, *, dashboard: bool) -> tuple[Selector, ...]:
    # Keyed by the file's text: every service's drafter-alert check asks for the same files, and parsing
    # them once per service made the seams quadratic in the fleet's size.
    exprs = _dashboard_exprs(path, text) if dashboard else _rule_exprs(path, text)
    return tuple(selector for owner, expr, line in exprs for selector in _parse(expr, f"{path}:{line}", owner))


def _deployed(fleet: Fleet) -> list[Service]:
    return [s for s in fleet.services.values() if s.state != "undeployed"]


def _has_rules(fleet: Fleet) -> str | None:
    if not fleet.rules and not fleet.dashboards:
        return (f"{fleet.path.name} names no rules or dashboards: declare rules = [PATH] (Prometheus rule files) or "
                "dashboards = [PATH] (Grafana JSON) to hold their series to what the engines export")
    return None


@fleet_seam(
    cites=("B-OB-1", "B-OB-3", "INC-24"),
    summary="every series a rule or dashboard names is exported by the engine of the job it names",
    requires=_has_rules,
    codes={
        "wrong-engine": "a series read from a job whose engine exports another namespace",
        "unknown-namespace": "a series of an engine no service of the fleet runs or ever could",
        "engine-not-deployed": "rules on an engine no deployed service runs any more",
        "not-exported": "a rule or dashboard names a series its engine does not export (INC-24, B-OB-3)",
    },
)
def rules_exported(fleet: Fleet) -> None:
    services = _deployed(fleet)
    engines = {NAMESPACE[s.engine] for s in services if s.engine in NAMESPACE}
    for selector in selectors(fleet):
        namespace = selector.namespace
        if namespace is None:
            continue
        jobs = [s for s in services if selector.names_job(s.name)]
        if selector.job is not None and selector.job[0] in ("=", "=~"):
            wrong = [s for s in jobs if NAMESPACE.get(s.engine) != namespace]
            if wrong:
                raise rules_exported.fail(
                    fleet, "wrong-engine",
                    where=selector.where,
                    observed=(f"{selector.owner} reads {selector.series} from job {selector.job[1]!r}, which is "
                              + ", ".join(f"{s.name} ({s.engine})" for s in wrong)),
                    expected=f"{namespace}: series only from jobs whose engine exports them",
                    fix="re-cut the rule for the engine the job runs now (a cutover changes the metric namespace)",
                )
        if namespace not in NAMESPACE.values():
            raise rules_exported.fail(
                fleet, "unknown-namespace",
                where=selector.where,
                observed=f"{selector.owner} names {selector.series}: no engine of this fleet exports {namespace}:*",
                expected=f"series of {', '.join(sorted(engines))}",
                fix="retire the rule, or re-cut it on the engine that serves the job now",
            )
        if namespace not in engines:
            raise rules_exported.fail(
                fleet, "engine-not-deployed",
                where=selector.where,
                observed=f"{selector.owner} names {selector.series}, but no deployed service runs {namespace}",
                expected=f"series of the engines the fleet runs: {', '.join(sorted(engines))}",
                fix="re-cut the rules after the cutover: the old engine's series no longer exist (INC-24)",
            )
        provenance, series = exported(namespace)
        if selector.series not in series:
            close = sorted(s for s in series if s.rsplit("_", 1)[0] in selector.series or selector.series.rsplit("_", 1)[0] in s)
            raise rules_exported.fail(
                fleet, "not-exported",
                where=selector.where,
                observed=f"{selector.owner} names {selector.series}, which the engine does not export: the rule can never fire",
                expected=f"a series of {provenance}" + (f"; similar: {', '.join(close[:4])}" if close else ""),
                fix="watch a series the engine exports, or retire the rule",
            )


def _drafts(config: RenderedService) -> str | None:
    if config.service.state == "undeployed":
        return f"{config.name} is not deployed: nothing to alert on"
    if config.llama is not None and any(t and t != "none" for t in config.llama.spec_types):
        return None
    if config.vllm is not None and config.vllm.speculative_config is not None:
        return None
    return f"{config.name} decodes without a drafter: there is no drafter to lose"


@service_seam(
    policy="drafter-alert",
    cites=("B-OB-2", "INC-16"),
    summary="a spec-decoding service has an alert on its drafter going quiet",
    requires=_drafts,
    engines=("llama.cpp", "vllm"),
    codes={
        "missing": "a spec-decoding service without a drafter-off alert (B-OB-2)",
    },
)
def rules_drafter_alert(config: RenderedService) -> None:
    namespace = "llamacpp" if config.llama is not None else "vllm"
    series = f"{namespace}:spec_decode_num_drafts_total"
    for selector in selectors(config.fleet, dashboards=False):
        if selector.series == series and selector.names_job(config.name):
            return
    rules = ", ".join(str(p.relative_to(config.fleet.root)) for p in config.fleet.rules) or "no rules files"
    raise rules_drafter_alert.fail(
        config, "missing",
        where=config.fleet.where("rules") if config.fleet.rules else str(config.fleet.path),
        observed=f"no rule in {rules} watches {series} for {config.name}",
        expected=f"a drafter-off alert: rate({series}[10m]) == 0 while tokens flow (LlmSpecDecodeOff)",
        fix="a lost drafter is the failure no client sees (tokens flow, drafts do not): add the alert",
    )


def _live_files(fleet: Fleet) -> Iterator[Path]:
    for path in sorted(fleet.root.rglob("*")):
        if not path.is_file() or path == fleet.path:
            continue
        relative = path.relative_to(fleet.root)
        if relative.parts[0] in ("docs", "history") or path.suffix in (".gguf", ".png"):
            continue
        yield path


_COMMENT = ("#", ";", "//", "{#")


def _has_retired(fleet: Fleet) -> str | None:
    if not fleet.retired_names:
        return (f"{fleet.path.name} names no retired names: declare [fleet] retired_names = [...] (old service, job "
                "or variable names) to keep them out of the live files")
    return None


@fleet_seam(
    policy="retired-names",
    cites=("B-OB-5", "B-DOC-10"),
    summary="no retired service, job or variable name in the repository's live files (history and comments excepted)",
    requires=_has_retired,
    codes={
        "found": "a retired name in a live file of the repository (B-OB-5, B-DOC-10)",
    },
)
def retired_names(fleet: Fleet) -> None:
    for path in _live_files(fleet):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(lines, start=1):
            if line.strip().startswith(_COMMENT):
                continue
            for name in fleet.retired_names:
                if name in line:
                    raise retired_names.fail(
                        fleet, "found",
                        where=f"{path}:{number}",
                        observed=f"{name!r} in {line.strip()[:160]!r}",
                        expected=f"no retired name ({', '.join(fleet.retired_names)}) outside history and comments",
                        fix="finish the rename: units, scripts, env files, jobs, rules and dashboards move in lockstep",
                    )
