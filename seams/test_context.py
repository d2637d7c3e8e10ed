"""--parallel divides the context; every slot stays within the trained window (B-CTX-1..5, INC-07)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("slots-divide-context")
def test_slots_divide_context(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("slot-within-trained-window")
def test_slot_within_trained_window(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("slots-divide-pool")
def test_slots_divide_pool(seam: Seam) -> None:
    seam.run()
