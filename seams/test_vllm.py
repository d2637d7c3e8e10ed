"""vLLM memory knobs (B-VL-1..5, INC-30, INC-31, INC-42)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("vllm-memory-knobs")
def test_vllm_memory_knobs(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("vllm-starts")
def test_vllm_starts(seam: Seam) -> None:
    seam.run()
