"""Alert rules and dashboards offline; no retired name anywhere (B-OB-1/2/3/5, B-DOC-10, INC-16, INC-24)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("rules-exported")
def test_rules_exported(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("rules-drafter-alert")
def test_rules_drafter_alert(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("retired-names")
def test_retired_names(seam: Seam) -> None:
    seam.run()
