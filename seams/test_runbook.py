"""What a service's runbook requires of its engine is what it is started with (B-UN-12, B-CTX-8)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("runbook-settings")
def test_runbook_settings(seam: Seam) -> None:
    seam.run()
