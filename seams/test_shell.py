"""An explicitly empty variable omits its flag (B-SH-1, INC-57)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("empty-means-omit")
def test_empty_means_omit(seam: Seam) -> None:
    seam.run()
