"""The runbooks' index agrees with the pages and with what is deployed (B-DOC-1..6)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("docs-index")
def test_docs_index(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("docs-shapes")
def test_docs_shapes(seam: Seam) -> None:
    seam.run()
