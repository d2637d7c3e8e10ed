"""Every llama.cpp service declares its model's profile (the ledger's and the context seams' input)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("profile-declared")
def test_profile_declared(seam: Seam) -> None:
    seam.run()
