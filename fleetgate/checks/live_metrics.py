"""Observability: /metrics answers, and every series the fleet's alert rules name is exported (B.11).

After the llama.cpp cutover the rules still watched vllm: series and things llama.cpp never exports
(INC-24): alerts that cannot fire look exactly like a healthy fleet.
"""

from __future__ import annotations

from fleetgate.checks import check
from fleetgate.live.endpoint import LiveEndpoint

METRICS = "live-metrics"


def _declares_metrics(endpoint: LiveEndpoint) -> bool:
    return endpoint.contract.metrics


@check(
    METRICS,
    kind="live",
    subject="endpoint",
    cites=("B-OB-1", "B-OB-2", "B-OB-3", "INC-24"),
    applies=_declares_metrics,
    summary="/metrics is served where the files turn it on, and exports every series the fleet's rules name "
    "for this engine",
)
def live_metrics(endpoint: LiveEndpoint) -> None:
    values = endpoint.metrics(METRICS)
    if values is None:
        reply = endpoint.get("/metrics")
        raise endpoint.fail(
            METRICS,
            where=endpoint.where_flag("metrics"),
            cites=("B-OB-1",),
            observed=f"GET /metrics: {reply.brief()}",
            expected="Prometheus text: the rendered config turns metrics on",
            fix="the process runs without --metrics (llama.cpp answers 501): restart it from the serve "
            "script; "
            "every alert on this endpoint is blind until then",
        )
    namespace = endpoint.dialect.namespace
    watched = [
        s
        for s in endpoint.rules
        if s.namespace is not None and s.namespace == namespace and s.job in (None, endpoint.name)
    ]
    missing = []
    for selector in watched:
        if selector.series not in values and f"{selector.alert}: {selector.series}" not in missing:
            missing.append(f"{selector.alert}: {selector.series} ({selector.where})")
    if missing:
        raise endpoint.fail(
            METRICS,
            where=missing[0].rsplit("(", 1)[-1].rstrip(")"),
            cites=("B-OB-1", "INC-24"),
            observed=f"{len(missing)} series named by the rules are not exported",
            details=tuple(missing),
            expected=f"every {namespace}: series the rules name is in /metrics ({len(values)} series "
            "exported)",
            fix="rewrite the rule on a series this engine exports, or retire it: a rule on a missing "
            "series never fires",
        )
    names = sorted({s.series for s in watched})
    endpoint.note(f"{len(values)} series exported; all {len(names)} the rules name are there")
