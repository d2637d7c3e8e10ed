"""The engine's build targets the host's GPU architecture and bundles its runtime at the loader's depth (B-DV-5, B-UN-3)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("build-script")
def test_build_script(seam: Seam) -> None:
    seam.run()
