"""A routing proxy pins only continuations by a 4 KiB window (B-UN-14), and its load fits a card's pool (INC-39/40)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("proxy-routing")
def test_proxy_routing(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("proxy-capacity")
def test_proxy_capacity(seam: Seam) -> None:
    seam.run()
