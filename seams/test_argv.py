"""llama-server accepts every flag the serve script passes."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("engine-accepts-argv")
def test_engine_accepts_argv(seam: Seam) -> None:
    seam.run()
