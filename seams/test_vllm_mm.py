"""A vLLM vision endpoint keeps its multimodal limits (B-MM-6, B-VL-3)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("vllm-mm-limits")
def test_vllm_mm_limits(seam: Seam) -> None:
    seam.run()
