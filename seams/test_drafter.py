"""The draft context runs on the card it was sized for (B-FIT-13, B-FIT-7, INC-03, INC-10, INC-58)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("drafter-placement")
def test_drafter_placement(seam: Seam) -> None:
    seam.run()
