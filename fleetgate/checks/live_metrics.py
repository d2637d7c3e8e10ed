"""Observability: /metrics answers, and every series the fleet's alert rules name is exported (B.11).

After the llama.cpp cutover the rules still watched vllm: series and things llama.cpp never exports
(INC-24): alerts that cannot fire look exactly like a healthy fleet.
"""

from __future__ import annotations

from fleetgate.checks import live_check
from fleetgate.live.endpoint import LiveEndpoint
from fleetgate.live.metrics import PROMETHEUS_SERIES, RuleSelector

__all__: list[str] = []

METRICS = "live-metrics"


def _no_metrics(endpoint: LiveEndpoint) -> str | None:
    if endpoint.contract.metrics:
        return None
    return (f"{METRICS} does not apply to {endpoint.name}: its rendered command line does not turn /metrics on "
            "(--metrics) and its contract lists no /metrics endpoint")


@live_check(
    reads_only=True,
    cites=("B-OB-1", "B-OB-2", "B-OB-3", "INC-24"),
    summary="/metrics is served where the files turn it on, and exports every series of every rule that names "
    "this service (a job matcher), whatever its namespace, and of every unscoped rule in the engine's namespace",
    requires=_no_metrics,
    codes={
        "not-served": "/metrics answers an error status (llama.cpp: 501) although the rendered config turns metrics on",
        "rule-series-missing": "a series that a rule naming this service (or an unscoped one of its namespace) watches is not exported",
    },
)
def live_metrics(endpoint: LiveEndpoint) -> None:
    values = endpoint.metrics(METRICS)
    if values is None:
        reply = endpoint.get("/metrics")
        raise live_metrics.fail(endpoint, "not-served",
                                 where=endpoint.where_flag("metrics"),
                                 cites=("B-OB-1",),
                                 observed=f"GET /metrics: {reply.brief()}",
                                 expected="Prometheus text: the rendered config turns metrics on",
                                 fix="something in front of vLLM does not pass /metrics (vLLM always serves it): let it "
                                 "through; every alert on this endpoint is blind until then" if endpoint.engine == "vllm" else
                                 "the process runs without --metrics (llama.cpp answers 501): restart it from the serve "
                                 "script; every alert on this endpoint is blind until then")
    namespace = endpoint.dialect.namespace
    watched = _watched(endpoint)
    missing = []
    for selector in watched:
        if selector.series not in values and f"{selector.alert}: {selector.series}" not in missing:
            missing.append(f"{selector.alert}: {selector.series} ({selector.where})")
    if missing:
        raise live_metrics.fail(endpoint, "rule-series-missing",
                                 where=missing[0].rsplit("(", 1)[-1].rstrip(")"),
                                 cites=("B-OB-1", "INC-24"),
                                 observed=f"{len(missing)} series named by the rules are not exported",
                                 details=tuple(missing),
                                 expected=f"every series of the rules that name {endpoint.name} (and of the unscoped {namespace}: "
                                 f"rules) is in /metrics ({len(values)} series exported)",
                                 fix="rewrite the rule on a series this engine exports, or retire it: a rule on a missing "
                                 "series never fires")
    names = sorted({s.series for s in watched})
    endpoint.note(f"{len(values)} series exported; all {len(names)} the rules name are there")


def _watched(endpoint: LiveEndpoint) -> list[RuleSelector]:
    """The selectors this endpoint must satisfy: every selector of a rule that names this service through
    a job matcher (any namespace: INC-24 was vllm: series watching a llama.cpp job), and the selectors
    of the engine's own namespace in rules that name no job at all."""
    by_rule: dict[str, list[RuleSelector]] = {}
    for selector in endpoint.rules:
        by_rule.setdefault(selector.rule or selector.where, []).append(selector)
    watched: list[RuleSelector] = []
    for selectors in by_rule.values():
        names_us = any(s.names_job(endpoint.name) for s in selectors)
        scoped = any(s.job is not None or s.job_pattern is not None for s in selectors)
        for s in selectors:
            if s.series in PROMETHEUS_SERIES:
                continue
            if names_us or (not scoped and s.namespace is not None and s.namespace == endpoint.dialect.namespace):
                watched.append(s)
    return watched
