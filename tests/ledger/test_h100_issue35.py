"""The issue-35 CUDA boots (tests/ledger/data/gpu-h100-issue35.json: llama-server 11434 for CUDA on an H100, recorded
by tests/ledger/gpu/run.sh issue35) next to the ledger, offline: none of them was used to set any term here.

Weights, KV, recurrent state and output buffers must equal the engine's on every boot whose model has a profile in
tests/ledger/data/profiles (the qwen3moe header of the MoE boots has none in this repository yet: those boots are
listed, not judged); every refusal the engine printed must be the ledger's first refusal, in its words.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ledger.gpu_dataset import DATA, ledger_of, rows

DATASET = json.loads((DATA / "gpu-h100-issue35.json").read_text(encoding="utf-8"))
BOOTS = DATASET["boots"]
PROFILED = [b for b in BOOTS if (DATA / "profiles" / f"{b['model']}.toml").exists()]


def test_the_boots_without_a_profile_are_the_moe_ones() -> None:
    assert sorted({b["model"] for b in BOOTS if b not in PROFILED}) == ["qwen3moe"]
    assert len(BOOTS) == 42 and len(PROFILED) == 30 and sum(1 for b in PROFILED if b["healthy"]) == 27


@pytest.mark.parametrize("boot", [b for b in PROFILED if b["healthy"]], ids=lambda b: b["id"])
def test_every_buffer_but_compute_is_exact(boot: dict[str, Any]) -> None:
    found = [r for r in rows(boot, ledger_of(boot, DATASET["machine"])) if r.buffer != "compute"]
    assert [r for r in found if not r.equal] == []
    assert len(found) == sum(1 for b in boot["buffers"] if b["buffer"] != "compute")


@pytest.mark.parametrize("boot", [b for b in PROFILED if not b["healthy"]], ids=lambda b: b["id"])
def test_every_refusal_is_the_ledgers(boot: dict[str, Any]) -> None:
    ledger = ledger_of(boot, DATASET["machine"])
    engine = boot["error"].split(": ", 1)[1] if boot["error"].startswith("llama_model_load: ") else boot["error"]
    assert ledger.refusals and ledger.refusals[0].reason.startswith(engine), (engine, ledger.refusals)
