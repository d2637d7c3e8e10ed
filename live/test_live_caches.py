"""Speculation, prefix cache, capacity (C.3, C.4, INC-16, INC-83)."""

import pytest

from fleetgate.plugin import Live


@pytest.mark.check("live-drafter")
def test_drafter(live: Live) -> None:
    live.run()


@pytest.mark.check("live-prefix-cache")
def test_prefix_cache(live: Live) -> None:
    live.run()


@pytest.mark.check("live-capacity")
def test_capacity(live: Live) -> None:
    live.run()
