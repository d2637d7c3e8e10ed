"""Bench harnesses measure what they claim: llama-bench's separators, depth and cells, the transient unit's limits,
vllm bench's tokenizer and --ignore-eos (B-H-1..5, B-H-8)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("bench-harness")
def test_bench_harness(seam: Seam) -> None:
    seam.run()
