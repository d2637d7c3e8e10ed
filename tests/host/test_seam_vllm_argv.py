"""The vLLM argv seam and the forbidden-flags seam fail on their mutations of the example fleet, each with
its failure code; the flag list they read is the pinned wheel's (tests/host/test_vllm_release.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.harness import Mutation, edit, failures

SCRIPT = "dankserver/frank-archon/serve-frank-archon.sh"
ENV = "dankserver/frank-archon/frank-archon.env"

CASES: dict[str, tuple[list[Mutation], set[tuple[str, str]]]] = {
    "a misspelt flag": (
        [edit(SCRIPT, "--tensor-parallel-size", "--tensor-paralel-size")],
        {("frank-archon", "vllm-argv/unknown-flag")}),
    "--speculative-config that is not JSON": (
        [edit(SCRIPT, ':$SPEC}"', ':$SPEC"')],
        {("frank-archon", "vllm-argv/bad-value")}),
    "a drafter method the release does not have": (
        [edit(ENV, "SPEC_METHOD=dflash", "SPEC_METHOD=dflash2")],
        {("frank-archon", "vllm-argv/speculative-config")}),
    "a value vLLM cannot parse": (
        [edit(ENV, "KV_DTYPE=auto", "KV_DTYPE=fp16")],
        # fp16 also names a KV pool that was never measured
        {("frank-archon", "vllm-argv/bad-value"), ("frank-archon", "vllm-memory-knobs")}),
    "INC-88 --expert-precise-memory deployed": (
        [edit(SCRIPT, "    --override-sampling-effects\n", "    --override-sampling-effects\n    --expert-precise-memory\n")],
        {("frank-archon", "forbidden-flags/expert-precise-memory")}),
    "B-FIT-12 --fit on": (
        [edit("scripts/frank-medium.env", "FIT=off", "FIT=on")],
        {("frank-medium", "forbidden-flags/fit-on")}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_vllm_argv_seams_fail_on_their_mutation(case: str, pytester: pytest.Pytester, tmp_path: Path) -> None:
    mutations, expected = CASES[case]
    found = failures(pytester, tmp_path, *mutations)
    assert set(found) == expected, "\n\n".join(found.values())
