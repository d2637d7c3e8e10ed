"""vLLM argv as the pinned release reads it; flags the fleet's rules forbid (INC-88, B-VL-8, B-FIT-12)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("vllm-argv")
def test_vllm_argv(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("forbidden-flags")
def test_forbidden_flags(seam: Seam) -> None:
    seam.run()
