"""The held-out issue-35 boots (tests/ledger/data/gpu-h100-holdout35.json: the 38 configurations of
tests/ledger/gpu/boots.py ``HOLDOUT_35``, committed before any of them was booted, then booted once on an H100 with
llama-server 11434 for CUDA) next to the ledger, offline.

They test the compute floors (``attention_floor``, ``host_inputs``, the V copy), the override placement and the
embedding terms, all set before these boots existed. What they found is asserted as found: every miss below is in
docs/ledger.md ("found on the held-out set"), and none of them was fitted away.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ledger.gpu.boots import HOLDOUT_35
from tests.ledger.gpu_dataset import DATA, compute_under, ledger_of, rows
from tests.ledger.test_datasets import _device_totals, _smi

DATASET = json.loads((DATA / "gpu-h100-holdout35.json").read_text(encoding="utf-8"))
BOOTS = DATASET["boots"]
HEALTHY = [b for b in BOOTS if b["healthy"]]

# (boot, device, buffer, context): (ledger, engine) in bytes, every buffer but compute that differs
# (found on the held-out set: ho-moe-ot-twice's CUDA0 weights, 118272000 against 103521536, while fleetgate's argv
# parser kept only the last of two -ot flags; common/arg.cpp appends both)
NOT_EQUAL: dict[tuple[str, str, str, str], tuple[int, int]] = {}
# (boot, device): (ledger, engine) in MiB, every compute buffer the ledger puts below the engine (found on the
# held-out set and fixed since: ho-gemma3-embd-last-ngl0's CUDA0, 26.89 against 687.01, its total -54 %: the
# op-offload GPU computes an embedding context's logits at -ngl 0; the K and V views a flash attention on the GPU
# copies in from a cache on the host, compute.host_cache_copies: ho-smollm2-q8-32k-ngl20's CUDA0 62.81 against
# 75.50, ho-gemma3-ngl8-c16k's 33.13 against 34.01, ho-smollm2-nkvo-q8-16k's 32.63 against 40.04; the host's copy
# of an untransposed V under --no-kv-offload: ho-qwen35-np8-nkvo-ub32's CUDA_Host 0.67 against 0.85; the later
# cache's mask allocated above an offloaded FFN, compute.late_mask_floor: ho-gemma3-ncffn12-q8-16k's CUDA0 46.03
# against 52.28; the host's copies for a flash attention the GPU has no kernel for, compute.host_attention_copies:
# ho-qwen35-ngl0-np4's CUDA_Host 1.53 against 1.90)
COMPUTE_UNDER: dict[tuple[str, str], tuple[float, float]] = {}
# (boot, reading): the ledger's GPU total / nvidia-smi's used memory - 1, where it is beyond 5 %
TOTALS_BEYOND_5 = {
    ("ho-smollm2-rerank-ub1024-nofa", "smi_healthy"): 0.076,
    ("ho-moe-cpu-moe-ub16", "smi_after_request"): 0.176,
}


def test_the_boots_are_the_committed_held_out_list() -> None:
    assert [(b["id"], b["model"], b["args"], b["n_rpc"], bool(b["nvidia_smi"].get("smi_after_request")))
            for b in BOOTS] == HOLDOUT_35
    assert all(b["held_out"] and b["series"] == "holdout35" for b in BOOTS)
    assert DATASET["machine"]["gpu"].startswith("0, NVIDIA H100 80GB HBM3, 81559 MiB")
    assert len(HEALTHY) == 37 and [b["id"] for b in BOOTS if not b["healthy"]] == ["ho-smollm2-q5_1v-nofa"]
    assert all((DATA / "profiles" / f"{b['model']}.toml").exists() for b in BOOTS)


def test_every_buffer_but_compute() -> None:
    compared = 0
    missed = {}
    for boot in HEALTHY:
        found = [r for r in rows(boot, ledger_of(boot, DATASET["machine"])) if r.buffer != "compute"]
        assert len(found) == sum(1 for b in boot["buffers"] if b["buffer"] != "compute"), boot["id"]
        compared += len(found)
        missed.update({(r.boot, r.device, r.buffer, r.context): (r.predicted, r.exact) for r in found if not r.equal})
    assert compared == 161
    assert missed == NOT_EQUAL


def test_compute_under_the_engine_is_what_the_held_out_set_found() -> None:
    found, compared = compute_under(HEALTHY, DATASET["machine"])
    assert compared == 74
    assert found == COMPUTE_UNDER


@pytest.mark.parametrize("boot", [b for b in BOOTS if not b["healthy"]], ids=lambda b: b["id"])
def test_the_refusal_is_the_ledgers(boot: dict[str, Any]) -> None:
    ledger = ledger_of(boot, DATASET["machine"])
    assert boot["error"] == "llama_init_from_model: quantized V cache requires flash_attn to be enabled"
    assert [r.reason for r in ledger.refusals] == ["quantized V cache was requested, but this requires Flash Attention"]


def test_device_totals_against_nvidia_smi() -> None:
    errors: dict[tuple[str, str], float] = {}
    for boot in HEALTHY:
        ledger = ledger_of(boot, DATASET["machine"])
        for key in ("smi_healthy", "smi_after_request"):
            if key in boot["nvidia_smi"]:
                predicted = _device_totals(boot, ledger, after=key == "smi_after_request")
                errors[(boot["id"], key)] = predicted[0] / _smi(boot, key)[0] - 1
    assert len(errors) == 37 + 22
    assert {k: round(e, 3) for k, e in errors.items() if abs(e) > 0.05} == TOTALS_BEYOND_5
