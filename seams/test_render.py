"""The serve script starts the engine from this repository's files (B-SH-3, B-SH-4, INC-53)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("serve-script-renders")
def test_serve_script_renders(seam: Seam) -> None:
    seam.run()
