"""vLLM's speculative depth within its drafter's block and at a measured depth (B-SP-11, B-SP-4, B-SP-1)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("vllm-speculative-depth")
def test_vllm_speculative_depth(seam: Seam) -> None:
    seam.run()
