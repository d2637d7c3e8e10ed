"""The ledger against the recorded boots, offline: tests/ledger/data/gpu-h200.json (llama-server 11434 built
for CUDA on an NVIDIA H200, one GPU and a GPU split with an RPC device serving the same GPU) and
tests/ledger/data/cpu-rpc.json (the CPU backend and ggml-rpc-server devices). Each file names the command
that produced it; tests/ledger/gpu_dataset.py pairs every buffer the engine printed with the ledger's.

Weights, KV, recurrent state and output buffers must be equal (to the byte where the engine's allocation was
logged in bytes: cudaMalloc/cudaMallocHost and RPC allocations; else at the log's two decimals); every
compute estimate must be at or above the engine's buffer.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.fit import COMPUTE_FACTORS, RUNTIMES, output_buffer
from fleetgate.profile import load_profile
from tests.ledger.gpu_dataset import DATA, MiB, compute_rows, datasets, ledger_of, rows

DATA_SETS = datasets()
BOOTS = [(data, boot) for data in DATA_SETS for boot in data["boots"]]
HEALTHY = [(data, boot) for data, boot in BOOTS if boot["healthy"]]


def test_the_datasets_hold_what_the_issue_asks() -> None:
    gpu, cpu, two = DATA_SETS
    assert [b["id"] for b in gpu["boots"] if not b["healthy"]] == ["smollm2-cuda-q8-nofa"]
    assert all(b["healthy"] for b in (*cpu["boots"], *two["boots"]))
    assert (len(cpu["boots"]), len(two["boots"])) == (17, 8)
    assert len(HEALTHY) == 25 + 13 + 17 + 8
    assert sum(1 for b in (*gpu["boots"], *two["boots"]) if b["held_out"]) == 13 + 8
    assert all(set(b["devices_at_start_mib"]) == {"CUDA0", "CUDA1"} for b in two["boots"])
    ids = {b["id"] for _, b in HEALTHY}
    # a hybrid with recurrent state on the GPU, a two-device GPU split, partial offload, flash attention off
    assert {"qwen35-cuda", "qwen35-mtp-split", "smollm2-split-ts1,1", "gemma3-cuda-ngl10",
            "gemma3-cuda-nofa", "smollm2-2gpu-ts1,1", "qwen35-mtp-2gpu", "gemma3-2gpu-ngl10"} <= ids
    assert sorted({b["args"].split("-ub ")[1].split()[0] for _, b in HEALTHY if "-ub " in b["args"]}) == \
        ["1024", "128", "2048", "256"]


@pytest.mark.parametrize(("data", "boot"), HEALTHY, ids=[b["id"] for _, b in HEALTHY])
def test_every_buffer_but_compute_is_exact(data: dict[str, Any], boot: dict[str, Any]) -> None:
    found = [r for r in rows(boot, ledger_of(boot, data["machine"])) if r.buffer != "compute"]
    assert [r for r in found if not r.equal] == []
    # every buffer the engine printed has its prediction and the other way round
    assert len(found) == sum(1 for b in boot["buffers"] if b["buffer"] != "compute")
    exact = [r for r in found if r.exact is not None]
    assert all(r.predicted == r.exact for r in exact)
    if data["machine"].get("gpu") and "--device none" not in boot["args"] and "-ngl 0" not in boot["args"]:
        assert exact, "a GPU boot with no buffer compared in bytes"


@pytest.mark.parametrize(("data", "boot"), HEALTHY, ids=[b["id"] for _, b in HEALTHY])
def test_compute_estimate_is_never_below_the_engine(data: dict[str, Any], boot: dict[str, Any]) -> None:
    found = [r for r in rows(boot, ledger_of(boot, data["machine"])) if r.buffer == "compute"]
    assert found and all(r.predicted is not None and r.observed is not None for r in found)
    assert [(r.device, r.context, r.predicted, r.observed) for r in found
            if r.predicted is not None and r.observed is not None and r.predicted < r.observed] == []


def test_compute_factors_are_the_least_that_hold() -> None:
    """Each factor is the smallest that keeps its kind of buffer at or above the engine (within 1 %): not a
    margin picked by hand."""
    need: dict[str, float] = {}
    for row in compute_rows():
        need[row.role] = max(need.get(row.role, 0.0), 1 / row.ratio)
    assert sorted(need) == sorted("/".join(k) for k in COMPUTE_FACTORS)
    assert all(0.98 <= n <= 1.0 for n in need.values()), need


def test_refused_configuration_is_said() -> None:
    gpu = DATA_SETS[0]
    boot = next(b for b in gpu["boots"] if b["id"] == "smollm2-cuda-q8-nofa")
    ledger = ledger_of(boot, gpu["machine"])
    assert any("refuses to start" in n for n in ledger.notes)


def test_mtp_output_buffer_grows_while_drafting() -> None:
    """The MTP question (issue 11): at boot the target's output buffer is n_seq x n_vocab x 4 B; on the first
    drafted request the engine reallocates it for 1 + n_max outputs plus n_embd x n_batch nextn embeddings.
    The ledger reports the grown figure (boot + growth); the boot's figure is the buffer it prints."""
    gpu = DATA_SETS[0]
    profile = load_profile(DATA / "profiles" / "qwen35-mtp.toml")
    for ident, n_seq in (("qwen35-mtp-cuda", 2), ("qwen35-mtp-split", 2), ("qwen35-mtp-cuda-np1", 1)):
        boot = next(b for b in gpu["boots"] if b["id"] == ident)
        grown = [a["bytes"] for a in boot["pinned_allocations_after_request"]]
        boot_size, one_drafting = output_buffer(profile, n_seq=n_seq, n_batch=2048, n_max=3, mtp=True,
                                                drafting=1)
        assert boot_size == n_seq * profile.n_vocab * 4 == boot["pinned_allocations"][0]
        assert max(grown) == one_drafting == 4 * profile.n_vocab * 4 + profile.n_embd * 2048 * 4
        ledger = ledger_of(boot, gpu["machine"])
        reported = sum(b.bytes for b in ledger.host.buffers if b.context == "target"
                       and b.buffer in ("output", "output growth"))
        assert reported == output_buffer(profile, n_seq=n_seq, n_batch=2048, n_max=3, mtp=True)[1] >= max(grown)
        if n_seq == 1:  # every slot drafting: the ledger's figure is what the engine reached
            assert reported == max(grown)
        # the MTP context's own output buffer, once its backend sampler is set up (before any request)
        mtp = sum(b.bytes for b in ledger.host.buffers if b.context == "mtp"
                  and b.buffer in ("output", "output growth"))
        assert boot["pinned_allocations"][-1] == mtp == n_seq * (4 * profile.n_vocab + 1 + profile.n_embd) * 4


def test_runtime_outside_buffers_is_the_measured_one() -> None:
    gpu = DATA_SETS[0]
    single = [x["unaccounted"] for b in gpu["boots"] if b["healthy"] and not b["n_rpc"]
              and "-ngl 0" not in b["args"] and "--device none" not in b["args"] and "mtp" not in b["id"]
              for x in b["breakdown_mib"] if x["dev"] == "CUDA0"]
    assert len(single) == 25 and min(single) == 595 and max(single) * MiB == RUNTIMES["CUDA"].first_context
    two = [x["unaccounted"] for b in gpu["boots"] if b["healthy"] and not b["n_rpc"] and "mtp" in b["id"]
           for x in b["breakdown_mib"] if x["dev"] == "CUDA0"]
    assert sorted(two) == [805, 815]
    assert max(two) * MiB == RUNTIMES["CUDA"].first_context + RUNTIMES["CUDA"].further_context
    smi = [int(b["nvidia_smi"]["smi_healthy"]["gpus"].split(",")[2]) for b in gpu["boots"] if b["healthy"]]
    engine_total = {b["devices_at_start_mib"]["CUDA0"]["total_mib"] for b in gpu["boots"] if b["healthy"]}
    assert set(smi) == {143771} and engine_total == {143155}
