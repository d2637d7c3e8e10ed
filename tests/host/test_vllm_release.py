"""The committed vLLM release data (fleetgate/engines/vllm_releases.json) and the argparse reading built on it.

The data is what ``python -m tools.extract_vllm_args`` reads from each release's sdist; when a wheel is
at hand (FLEETGATE_VLLM_WHEEL=PATH, from ``pip download --no-deps vllm==0.13.0``) it is read and must give the
release's options, speculative schema and metrics as the committed data holds them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetgate.engines.vllm import RADIANCE, load_release, read_as_vllm
from tools.vllm_wheel import read_wheel


def test_the_release_is_the_pinned_one_with_its_own_flags_and_metrics() -> None:
    release = load_release()
    assert release.version == "0.13.0"
    names = {n for o in release.options for n in o.names}
    assert {"--max-num-batched-tokens", "--speculative-config", "--kv-cache-memory-bytes", "--no-enable-prefix-caching",
            "--tool-call-parser", "--reasoning-parser", "-tp"} <= names
    assert "--expert-precise-memory" not in names and "--override-sampling-effects" not in names
    assert "dflash" not in release.speculative_methods and "eagle3" in release.speculative_methods
    series = release.exported_series()
    assert {"vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:prefix_cache_hits_total",
            "vllm:spec_decode_num_drafts_total", "vllm:time_to_first_token_seconds_bucket"} <= series
    assert "vllm:gpu_cache_usage_perc" not in series


@pytest.mark.skipif(not os.environ.get("FLEETGATE_VLLM_WHEEL"), reason="FLEETGATE_VLLM_WHEEL names no vLLM wheel")
def test_the_committed_file_is_what_the_wheel_says() -> None:
    read = read_wheel(Path(os.environ["FLEETGATE_VLLM_WHEEL"]))
    release = load_release(read["release"])
    assert sorted(tuple(o["names"]) for o in read["options"]) == sorted(o.names for o in release.options)
    assert sorted(read["speculative_config"]["methods"]) == sorted(release.speculative_methods)
    assert {m["name"]: m["type"] for m in read["metrics"]} == dict(release.metrics)


@pytest.mark.parametrize(("argv", "kinds"), [
    (["vllm", "serve", "/m", "--max-num-seqs", "8"], []),
    (["vllm", "serve", "/m", "--max_num_seqs=8"], []),                       # underscores read as dashes
    (["vllm", "serve", "/m", "--max-model-len", "25.6k"], []),              # human_readable_int
    (["vllm", "serve", "/m", "--kv-cache-memory", "0"], []),                # a unique prefix of --kv-cache-memory-bytes
    (["vllm", "serve", "/m", "--max-num", "8"], ["ambiguous-flag"]),
    (["vllm", "serve", "/m", "--max-num-seqs", "eight"], ["bad-value"]),
    (["vllm", "serve", "/m", "--gpu-memory-utilization"], ["missing-value"]),
    (["vllm", "serve", "/m", "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": "3"}'],
     ["speculative-config"]),
    (["vllm", "serve", "/m", "--speculative-config", '{"methd": "eagle3"}'], ["speculative-config"]),
])
def test_argv_read_as_the_release_reads_it(argv: list[str], kinds: list[str]) -> None:
    _, problems = read_as_vllm(argv, load_release())
    assert [p.kind for p in problems] == kinds


def test_the_fork_adds_its_flags_and_drafter() -> None:
    argv = ["vllm", "serve", "/m", "--override-sampling-effects", "--speculative-config", '{"method": "dflash"}']
    assert [p.kind for p in read_as_vllm(argv, load_release())[1]] == ["unknown-flag", "speculative-config"]
    assert read_as_vllm(argv, load_release().with_fork(RADIANCE))[1] == []
