"""Tensor overrides and the engine's refusals, held to the real llama-server (build 11434) on ggml-rpc-server
devices: every tensor the overrides match lands where the loader puts it, and the model buffers of every device
equal the engine's (RPC devices in bytes, the host at the log's two decimals).

The MoE model is tests/ledger/tiny_models.py's qwen3moe (4 blocks, 8 experts, the three expert matrices per block
that ``--cpu-moe`` matches); ``-ncffn`` is proven on SmolLM2's dense FFN. ``{RPC0}`` stands for the first RPC
device's buffer type (its name carries the port the device got).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.build import build_ledger
from fleetgate.models.profile import load_profile
from tests.ledger.compare import compare, table
from tests.ledger.engine import Engine, refused, run_server

# the suite's engine is built for x86-64-v3 (tox.ini CMAKE_ARGS): AVX2 decides CPU_REPACK, AVX-512 is off
ENGINE_CPU = frozenset({"avx2"})
PRINTED = (1 << 20) // 200
EXPERTS = ("ffn_gate_exps", "ffn_down_exps", "ffn_up_exps")


@dataclass(frozen=True)
class OverrideCase:
    id: str
    model: str
    args: tuple[str, ...]
    n_rpc: int
    moved: dict[str, tuple[str, ...]]
    """Where each moved tensor goes ("CPU" or "RPC<i>"), by tensor name: derived from the flags by hand."""
    host_buffers: tuple[str, ...]
    """The host's model buffer types the engine must print."""


def _experts(blocks: range) -> tuple[str, ...]:
    return tuple(f"blk.{il}.{name}.weight" for il in blocks for name in EXPERTS)


def _all(names: tuple[str, ...], device: str) -> dict[str, tuple[str, ...]]:
    return {device: names}


CASES = (
    # experts on the host, mapped from the file (Q8_0 is not repacked on x86); the layers on two devices
    OverrideCase("moe-2dev-ot-exps-cpu", "moe", ("-c", "2048", "-np", "2", "-ngl", "999", "-ts", "1,1",
                                                 "-ot", "exps=CPU"), 2,
                 _all(_experts(range(4)), "CPU"), ("CPU_Mapped",)),
    # --cpu-moe with Q4_0 experts: the CPU override considers the CPU's extra buffer types, so they are repacked
    OverrideCase("moe-q4-2dev-cpu-moe", "moe-q4", ("-c", "2048", "-np", "2", "-ngl", "999", "-ts", "1,1",
                                                   "--cpu-moe"), 2,
                 _all(_experts(range(4)), "CPU"), ("CPU_Mapped", "CPU_REPACK")),
    # first match wins: blk.3's up experts go to RPC0 (the earlier -ot), the rest of the first 4 blocks' to the host;
    # blocks 3 and the output are RPC1's, so blk.3.ffn_up_exps moves across devices
    OverrideCase("moe-2dev-ot-then-ncmoe", "moe", ("-c", "2048", "-np", "2", "-ngl", "999", "-ts", "1,1",
                                                   "-ot", r"blk\.3\.ffn_up_exps={RPC0}", "--n-cpu-moe", "4"), 2,
                 {"CPU": tuple(n for n in _experts(range(4)) if n != "blk.3.ffn_up_exps.weight"),
                  "RPC0": ("blk.3.ffn_up_exps.weight",)}, ("CPU_Mapped",)),
    # whole blocks to the host by a hand-written pattern, comma-separated with a second one; one device. The
    # engine searches, it does not match whole names: "output\." also takes every block's attn_output.weight
    OverrideCase("moe-1dev-ot-blocks", "moe", ("-c", "2048", "-np", "1", "-ngl", "999",
                                               "-ot", r"blk\.[0-1]\.=CPU,output\.=CPU"), 1,
                 {"CPU": (*(f"blk.{il}.{t}.weight" for il in range(2) for t in (
                     "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                     "ffn_norm", "ffn_gate_inp", *EXPERTS)),
                     "blk.2.attn_output.weight", "blk.3.attn_output.weight", "output.weight")}, ("CPU_Mapped",)),
    # a dense model's FFN of the first 10 blocks (SmolLM2, 30 blocks on one device)
    OverrideCase("smollm2-1dev-ncffn10", "smollm2", ("-c", "2048", "-np", "1", "-ngl", "999", "--n-cpu-ffn", "10"),
                 1, _all(tuple(f"blk.{il}.ffn_{t}.weight" for il in range(10) for t in ("gate", "down", "up")), "CPU"),
                 ("CPU_Mapped",)),
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_overridden_tensors_land_where_the_engine_puts_them(case: OverrideCase, engine: Engine,
                                                            models: dict[str, Path], tmp_path: Path) -> None:
    observed = run_server(engine, tmp_path, models[case.model], list(case.args), n_rpc=case.n_rpc)
    ledger = build_ledger(parse_llama_server(observed.argv), load_profile(models[case.model]), cpu_features=ENGINE_CPU)
    names = {d.card.label: d.card.name for d in ledger.devices} | {"CPU": "CPU"}
    moved: dict[str, list[str]] = {}
    for m in ledger.moved:
        moved.setdefault(names[m.target], []).append(m.tensor)
    assert {k: sorted(v) for k, v in moved.items()} == {k: sorted(v) for k, v in case.moved.items()}
    rows = compare(observed, ledger)
    host = {r.device for r in rows if r.buffer == "model" and not r.device.startswith("RPC")}
    assert host == set(case.host_buffers), table(rows)
    assert all(r.ok for r in rows), "ledger != llama-server:\n" + table(rows)
    assert any(r.exact for r in rows if r.buffer == "model")
    # compute: never below the engine's buffer (a tensor override turns pipeline parallelism off)
    compute = compare(observed, ledger, buffers=("compute",))
    assert compute and all(r.observed_mib is not None for r in compute), table(compute)
    assert [r for r in compute if r.predicted < r.observed - PRINTED] == [], table(compute)


def test_without_overrides_the_moe_keeps_every_expert_on_its_layer(engine: Engine, models: dict[str, Path],
                                                                   tmp_path: Path) -> None:
    """The baseline the overrides are measured against: every expert on its block's device, nothing on the host
    but the token embeddings, and pipeline parallelism's larger compute buffers."""
    args = ["-c", "2048", "-np", "2", "-ngl", "999", "-ts", "1,1"]
    observed = run_server(engine, tmp_path, models["moe"], args, n_rpc=2)
    ledger = build_ledger(parse_llama_server(observed.argv), load_profile(models["moe"]), cpu_features=ENGINE_CPU)
    assert ledger.moved == ()
    rows = compare(observed, ledger)
    assert all(r.ok for r in rows), table(rows)
    host = [r for r in rows if r.device == "CPU_Mapped"]
    embd = next(w for w in load_profile(models["moe"]).weights if w.name == "token_embd.weight")
    assert [r.predicted for r in host] == [embd.nbytes]


REFUSALS = (
    # build 11434 offers split buffers on no RPC (nor CUDA, ROCm, Vulkan) device: the load stops at the first
    ("sm-row-2dev", "moe", ("-c", "2048", "-ngl", "999", "-sm", "row"), 2,
     "error loading model: device RPC0 does not support split buffers"),
    ("sm-row-1dev-ngl0", "moe", ("-c", "2048", "-ngl", "0", "-sm", "row"), 1,
     "error loading model: device RPC0 does not support split buffers"),
    ("ot-unknown-buffer-type", "moe", ("-c", "2048", "-ngl", "999", "-ot", "exps=RPC7"), 1,
     'error while handling argument "-ot": unknown buffer type'),
)


@pytest.mark.parametrize(("ident", "model", "args", "n_rpc", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_what_the_engine_refuses_the_ledger_refuses(ident: str, model: str, args: tuple[str, ...], n_rpc: int,
                                                    words: str, engine: Engine, models: dict[str, Path],
                                                    tmp_path: Path) -> None:
    log = refused(engine, tmp_path, models[model], list(args), n_rpc=n_rpc)
    assert words in log
    argv = ["llama-server", "-m", str(models[model]), "--rpc",
            ",".join(f"127.0.0.1:{50052 + i}" for i in range(n_rpc)), *args]
    ledger = build_ledger(parse_llama_server(argv), load_profile(models[model]))
    assert len(ledger.refusals) == 1 and ledger.refusals[0].reason.startswith(words), ledger.refusals


def test_row_split_on_the_host_alone_starts(engine: Engine, models: dict[str, Path], tmp_path: Path) -> None:
    """With no device the engine builds no GPU buffer list, so -sm row changes nothing and the server starts."""
    observed = run_server(engine, tmp_path, models["moe"], ["-c", "2048", "-sm", "row"], n_rpc=0)
    ledger = build_ledger(parse_llama_server(observed.argv), load_profile(models["moe"]))
    assert ledger.refusals == ()
    assert all(r.ok for r in compare(observed, ledger))


def _fit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from fleetgate.cli import main; sys.exit(main())",
                           "fit", *args], capture_output=True, text=True, timeout=120, check=False)


def test_fit_prints_the_moved_tensors_and_refuses_a_row_split(models: dict[str, Path]) -> None:
    rpc = ["--rpc", "127.0.0.1:50052,127.0.0.1:50053"]
    model = str(models["moe"])
    done = _fit("--card", "RPC0=1G", "--card", "RPC1=1G", "--cpu-features", "avx2", "--", "llama-server", "-m", model,
                *rpc, "-ngl", "999", "-c", "2048", "-np", "2", "--fit", "off", "--n-cpu-moe", "2")
    assert done.returncode == 0, done.stderr
    assert ("    --n-cpu-moe 2: 6 from RPC0[127.0.0.1:50052] to CPU (0.20 MiB): " + ", ".join(_experts(range(2)))
            in done.stdout.splitlines()), done.stdout
    assert "  tensor overrides moved 6 tensors (0.20 MiB):" in done.stdout.splitlines()
    done = _fit("--card", "RPC0=1G", "--card", "RPC1=1G", "--", "llama-server", "-m", model, *rpc, "-ngl", "999",
                "--fit", "off", "-sm", "row")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == ("FAILS: will not start: llama-server refuses: error loading model: device "
                                           "RPC0 does not support split buffers (src/llama-model.cpp make_gpu_buft_list)")
