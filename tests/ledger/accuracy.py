"""Print the ledger's accuracy against the real llama-server for every case in tests/ledger/cases.py.

    python -m tests.ledger.accuracy            # markdown tables for docs/ledger.md
    python -m tests.ledger.accuracy --three-stage
    python -m tests.ledger.accuracy --round3      # tensor overrides and embedding services (issue 35)

The same runs and comparisons as tests/ledger/test_engine.py, printed instead of asserted. ``--three-stage``
runs three-device pipelines (three ggml-rpc-server devices) that no dataset holds, to test the compute
factors on a shape they were not set on, and prints each compute buffer.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.build import build_ledger
from fleetgate.models.profile import load_profile
from tests.ledger.cases import CASES, Case
from tests.ledger.compare import compare
from tests.ledger.engine import find_engine, model_paths, run_server
from tests.ledger.tiny_models import DflashShape, Qwen35Shape, write_dflash, write_qwen35

THREE_STAGE: tuple[Case, ...] = (
    Case("smollm2-3dev", "smollm2", ("-c", "4096", "-np", "2", "-ngl", "999", "-ts", "1,1,1"), 3),
    Case("smollm2-3dev-nofa-ub256", "smollm2",
         ("-c", "4096", "-np", "2", "-ngl", "999", "-ts", "1,1,1", "-fa", "off", "-ub", "256"), 3),
    Case("gemma3-3dev-ts1,2,1", "gemma3", ("-c", "4096", "-np", "2", "-ngl", "999", "-ts", "1,2,1"), 3),
)


def three_stage() -> int:
    engine = find_engine()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = model_paths(root)
        print("| case | device | estimate (MiB) | llama-server (MiB) | error |")
        print("|---|---|---:|---:|---:|")
        for case in THREE_STAGE:
            observed = run_server(engine, root / case.id, models[case.model], list(case.args), n_rpc=case.n_rpc)
            ledger = build_ledger(parse_llama_server(observed.argv), load_profile(models[case.model]))
            names = {d.card.label: d.card.name for d in ledger.devices}
            for r in sorted(compare(observed, ledger, buffers=("compute",)),
                            key=lambda r: names.get(r.device, r.device)):
                print(f"| {case.id} | {names.get(r.device, r.device)} | {r.predicted / 2**20:.2f} "
                      f"| {r.observed / 2**20:.2f} | {r.error:+.1%} |")
    return 0


def round3() -> int:
    """The tensor-override and embedding boots of tests/ledger/test_overrides.py and test_embeddings.py: per boot, the
    weights, KV and output buffers compared (equal or not) and each compute buffer against its estimate."""
    from tests.ledger.test_embeddings import CASES as EMBEDDINGS
    from tests.ledger.test_overrides import CASES as OVERRIDES
    from tests.ledger.test_overrides import ENGINE_CPU
    from tests.ledger.tiny_models import Qwen3MoeShape, write_qwen3moe

    engine = find_engine()
    runs = [(c.id, c.model, c.args, c.n_rpc) for c in OVERRIDES] + [(e[0], e[1], e[2], e[3]) for e in EMBEDDINGS]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = model_paths(root)
        models["moe"] = write_qwen3moe(root / "tiny-qwen3moe.gguf")
        models["moe-q4"] = write_qwen3moe(root / "tiny-qwen3moe-q4.gguf", Qwen3MoeShape(expert_type="Q4_0"))
        print("| boot | moved tensors | weights, KV, output: equal / compared (in bytes) | compute: estimate / engine "
              "(MiB) |")
        print("|---|---:|---|---|")
        for ident, model, args, n_rpc in runs:
            observed = run_server(engine, root / ident, models[model], list(args), n_rpc=n_rpc)
            ledger = build_ledger(parse_llama_server(observed.argv), load_profile(models[model]),
                                  cpu_features=ENGINE_CPU)
            names = {d.card.label: d.card.name for d in ledger.devices}
            rows = compare(observed, ledger, buffers=("model", "KV", "KV (SWA)", "RS", "output"))
            compute = ", ".join(f"{names.get(r.device, r.device)} {r.predicted / 2**20:.2f}/{r.observed / 2**20:.2f}"
                                for r in compare(observed, ledger, buffers=("compute",)))
            print(f"| {ident} | {len(ledger.moved)} | {sum(r.ok for r in rows)}/{len(rows)} "
                  f"({sum(r.exact for r in rows)}) | {compute} |")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--three-stage"]:
        return three_stage()
    if argv == ["--round3"]:
        return round3()
    engine = find_engine()
    wanted = set(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = model_paths(root)
        models["qwen35"] = write_qwen35(root / "tiny-qwen35.gguf")
        models["qwen35-mtp"] = write_qwen35(root / "tiny-qwen35-mtp.gguf", Qwen35Shape(nextn=1))
        models["dflash"] = write_dflash(root / "tiny-dflash.gguf")
        models["dflash-swa"] = write_dflash(root / "tiny-dflash-swa.gguf", DflashShape(sliding_window=64))
        summary = ["| case | model | KV | KV (SWA) | RS | compared in | result |",
                   "|---|---:|---:|---:|---:|---|---|"]
        exact_lines = ["| case | device | context | buffer | predicted (B) | llama-server | match |",
                       "|---|---|---|---|---:|---:|---|"]
        compute_lines = ["| case | device | context | estimate (MiB) | llama-server (MiB) | error |",
                         "|---|---|---|---:|---:|---:|"]
        worst = 0.0
        for case in CASES:
            if wanted and case.id not in wanted:
                continue
            args = list(case.args)
            if case.draft:
                args += ["--spec-draft-model", str(models[case.draft])]
            observed = run_server(engine, root / case.id, models[case.model], args, n_rpc=case.n_rpc,
                                  second_context=case.second_context)
            ledger = build_ledger(parse_llama_server(observed.argv), load_profile(models[case.model]),
                                  draft=load_profile(models[case.draft]) if case.draft else None)
            names = {d.card.label: d.card.name for d in ledger.devices}
            names["CPU_Mapped"] = "CPU (mapped)"
            rows = compare(observed, ledger)
            kinds = ("model", "KV", "KV (SWA)", "RS")
            counts = {kind: sum(1 for r in rows if r.buffer == kind) for kind in kinds}
            how = "bytes (RPC) and 2 decimals (host)" if any(r.exact for r in rows) else "2 decimals (host)"
            verdict = "all equal" if all(r.ok for r in rows) else "DIFFERENT"
            summary.append(f"| {case.id} | {counts['model']} | {counts['KV']} | {counts['KV (SWA)']} | "
                           f"{counts['RS']} | {how} | {verdict} |")
            for r in rows:
                seen = f"{r.observed_exact:,}" if r.exact else f"{r.observed_mib} MiB"
                device = names.get(r.device, r.device)
                exact_lines.append(f"| {case.id} | {device} | {r.context} | {r.buffer} | {r.predicted:,} "
                                   f"| {seen} | {'equal' if r.ok else 'DIFFERENT'} |")
            for r in compare(observed, ledger, buffers=("compute",)):
                worst = max(worst, abs(r.error))
                device = names.get(r.device, r.device)
                compute_lines.append(f"| {case.id} | {device} | {r.context} | {r.predicted / 2**20:.2f} "
                                     f"| {r.observed / 2**20:.2f} | {r.error:+.0%} |")
        for block in (summary, compute_lines, exact_lines):
            print("\n".join(block))
            print()
        print(f"worst compute error: {worst:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
