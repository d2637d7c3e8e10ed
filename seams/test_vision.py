"""Vision needs an explicit --mmproj the service declares (B-MM-1, B-MM-2, INC-08)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("vision-mmproj")
def test_vision_mmproj(seam: Seam) -> None:
    seam.run()
