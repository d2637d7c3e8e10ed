"""The series llama-server exports on /metrics, captured from the real server (llama_server_metrics.json).

``python -m tools.llama_metrics URL BUILD > fleetgate/engines/llama_server_metrics.json`` (a maintainer's tool,
not in the wheel) reads /metrics of a running llama-server with every feature that adds series on (``--metrics``,
speculative decoding after at least one drafted request: the per-position acceptance series appears only then) and
stores the sample names with the build they came from. tests/host/test_llama_metrics.py re-captures them
from the reference server and compares.
"""

from __future__ import annotations

import json
from importlib import resources

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["exported_series", "load_llama_metrics"]


def exported_series(text: str) -> list[str]:
    """Every sample name of a Prometheus text exposition, as Prometheus stores it.

    The exposition is parsed with prometheus_client's parser first (so malformed text fails); the names
    are then read from the sample lines themselves, because that parser renames a counter whose name
    lacks ``_total`` and Prometheus does not."""
    list(text_string_to_metric_families(text))
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(None, 1)[0])
    return sorted(names)


def load_llama_metrics() -> tuple[str, frozenset[str]]:
    """(build, series) of the committed capture."""
    data = json.loads(resources.files("fleetgate.engines").joinpath("llama_server_metrics.json").read_text(encoding="utf-8"))
    return str(data["build"]), frozenset(data["series"])
