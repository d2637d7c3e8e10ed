"""Observability: /metrics and the series the fleet's rules name (B.11, INC-24)."""

import pytest

from fleetgate.plugin import Live


@pytest.mark.check("live-metrics")
def test_metrics(live: Live) -> None:
    live.run()
