"""After a swap every consumer names the same payload at its size (B-SW-1/2/3, INC-02, INC-68, INC-76)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("payload-consistency")
def test_payload_consistency(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("payload-defaults")
def test_payload_defaults(seam: Seam) -> None:
    seam.run()
