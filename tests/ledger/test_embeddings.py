"""Embedding and reranking services (``--embedding``, ``--rerank``, ``--pooling``) against the real llama-server
(build 11434) on the host CPU and one ggml-rpc-server device.

What the engine does differently (fleetgate/ledger/context.py cites the source): every token of a batch is an
output, so the graph is reserved with the logits of a whole ubatch on the output layer's device; ``--embedding``
keeps ``n_embd`` floats per output beside the logits in the output buffer; the batch is cut to the ubatch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.build import build_ledger
from fleetgate.models.profile import load_profile
from tests.ledger.compare import compare, table
from tests.ledger.engine import Engine, run_server

PRINTED = (1 << 20) // 200
CASES = (
    # --embedding with a batch above the ubatch: the engine cuts the batch to 512
    ("smollm2-cpu-embedding-last", "smollm2", ("-c", "4096", "-np", "2", "--embedding", "--pooling", "last",
                                               "-b", "1024", "-ub", "512"), 0, 2, 512),
    # the issue's GPU shape on an RPC device: every one of 1024 tokens' logits over gemma's 262,144-token vocabulary
    ("gemma3-1dev-embedding", "gemma3", ("-c", "8192", "-np", "2", "-ngl", "999", "--embedding", "--pooling", "last",
                                         "-b", "1024", "-ub", "1024"), 1, 2, 1024),
    ("smollm2-cpu-rerank", "smollm2", ("-c", "2048", "-np", "1", "--rerank"), 0, 1, 512),
    # a pooling type without --embedding: every token an output, but no embeddings kept and the batch not cut
    ("smollm2-cpu-pooling-mean", "smollm2", ("-c", "2048", "-np", "2", "--pooling", "mean", "-b", "2048",
                                             "-ub", "256"), 0, 2, 256),
)


@pytest.mark.parametrize(("ident", "model", "args", "n_rpc", "n_seq", "n_ubatch"), CASES, ids=[c[0] for c in CASES])
def test_embedding_services_are_sized_as_the_engine_sizes_them(
        ident: str, model: str, args: tuple[str, ...], n_rpc: int, n_seq: int, n_ubatch: int, engine: Engine,
        models: dict[str, Path], tmp_path: Path) -> None:
    observed = run_server(engine, tmp_path, models[model], list(args), n_rpc=n_rpc)
    profile = load_profile(models[model])
    ledger = build_ledger(parse_llama_server(observed.argv), profile)
    assert ledger.n_ubatch == n_ubatch
    rows = compare(observed, ledger)
    assert all(r.ok for r in rows), table(rows)
    # the output buffer at boot: n_seq x n_vocab logits, and with --embedding n_seq x n_embd embeddings beside them
    embedding = "--embedding" in args or "--rerank" in args
    output = compare(observed, ledger, buffers=("output",))
    assert [r.predicted for r in output] == [n_seq * (profile.n_vocab + (profile.n_embd if embedding else 0)) * 4]
    assert all(r.ok for r in output), table(output)
    compute = compare(observed, ledger, buffers=("compute",))
    assert [r for r in compute if r.predicted < r.observed - PRINTED] == [], table(compute)
    # the engine's output-layer device holds a whole ubatch of logits: what the ledger now books there
    head = max(compute, key=lambda r: r.observed)
    assert head.observed > n_ubatch * profile.n_vocab * 4
