"""The contract's sampler defaults, reasoning and KV precision are what the argv passes (B-UN-8/9/10)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("contract-pins")
def test_contract_pins(seam: Seam) -> None:
    seam.run()
