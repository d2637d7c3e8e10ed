"""The deploy script's readiness probes can succeed (B-TO-6, B-UN-6); its payload gate names what the units load (B-MM-4)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("deploy-probes")
def test_deploy_probes(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("deploy-payload")
def test_deploy_payload(seam: Seam) -> None:
    seam.run()
