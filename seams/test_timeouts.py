"""Timeouts nest inside-out with strict > (B-TO-1..4, INC-45, INC-46)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("timeouts-nest")
def test_timeouts_nest(seam: Seam) -> None:
    seam.run()
