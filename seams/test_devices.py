"""The engine sees exactly its cards (B-DV-1..4, INC-19, INC-29)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("device-visibility")
def test_device_visibility(seam: Seam) -> None:
    seam.run()
