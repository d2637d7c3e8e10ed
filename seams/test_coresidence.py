"""Co-residence: services that can hold one card at once (llama-swap groups, two units on one host) fit it together."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("co-residence-fits")
def test_co_residence_fits(seam: Seam) -> None:
    seam.run()
