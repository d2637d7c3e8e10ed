"""Speculative decoding is wired the way the engine can load it (B-SP-1..8, INC-13, INC-15, INC-16)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("speculative-wiring")
def test_speculative_wiring(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("engine-build-minimum")
def test_engine_build_minimum(seam: Seam) -> None:
    seam.run()
