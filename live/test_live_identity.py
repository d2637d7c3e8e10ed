"""Liveness and identity: health, alias, payload, slots, sampler defaults (C.1, C-CAP-1, INC-53)."""

import pytest

from fleetgate.plugin import Live


@pytest.mark.check("live-health")
def test_health(live: Live) -> None:
    live.run()


@pytest.mark.check("live-alias")
def test_alias(live: Live) -> None:
    live.run()


@pytest.mark.check("live-payload")
def test_payload(live: Live) -> None:
    live.run()


@pytest.mark.check("live-slots")
def test_slots(live: Live) -> None:
    live.run()


@pytest.mark.check("live-sampler-defaults")
def test_sampler_defaults(live: Live) -> None:
    live.run()
