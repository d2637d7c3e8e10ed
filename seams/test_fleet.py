"""Fleet-level findings: duplicate host:port, a rendered port that is not the declared one, inf/nan."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("fleet-numbers-finite")
def test_fleet_numbers_finite(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("service-ports-unique")
def test_service_ports_unique(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("rendered-port-matches")
def test_rendered_port_matches(seam: Seam) -> None:
    seam.run()
