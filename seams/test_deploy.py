"""The deploy script's readiness probes can succeed (B-TO-6, B-UN-6)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("deploy-probes")
def test_deploy_probes(seam: Seam) -> None:
    seam.run()
