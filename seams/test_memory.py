"""The ledger holds the floors: cards, balance, drafter, prompt cache (B-FIT-1/2/7, B-PC-1..3)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("card-floor")
def test_card_floor(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("card-balance")
def test_card_balance(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("drafter-kv-fits")
def test_drafter_kv_fits(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("prompt-cache-holds-slot")
def test_prompt_cache_holds_slot(seam: Seam) -> None:
    seam.run()
