"""The AMX buffer type of ggml-cpu (build 11434): the suite's engine is built for x86-64-v3 and compiles no AMX, so the
rules come from the source and one recorded native build (tests/ledger/data/cpu-amx.json; docs/ledger.md says what
was proven how).

ggml/src/ggml-cpu/amx/amx.cpp takes a host weight when the engine was compiled with AMX INT8 and AVX512-VNNI and the
CPU has them, the weight is read by a plain MUL_MAT, its type has a kernel, K (ne0) is a multiple of the type's block
and N (ne1) of 32; it is listed before CPU_REPACK, and packs Q8_0 rows with 4 B of compensation per 32-value block
(amx/mmq.cpp ``get_row_size``). The sizes below are worked by hand from those rules for the tiny qwen3moe, and a
native build on an AMX host (the device tool's Xeon) is held to them at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetgate.cli import main
from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.build import build_ledger
from fleetgate.models.profile import load_profile
from tests.ledger.gpu_dataset import DATA, rows
from tests.ledger.tiny_models import Qwen3MoeShape, write_qwen3moe

AMX_HOST = frozenset({"avx2", "amx_int8", "avx512_vnni"})


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # attention in Q8_0 (AMX), experts in Q4_0 (3-D, read by MUL_MAT_ID: AMX never, CPU_REPACK yes), output in F16
    # with 260 rows (not a multiple of 32: neither)
    return write_qwen3moe(tmp_path_factory.mktemp("amx") / "moe-amx.gguf",
                          Qwen3MoeShape(expert_type="Q4_0", matrix_type="Q8_0"))


def _host(model: Path, features: frozenset[str], *args: str) -> dict[str, int]:
    ledger = build_ledger(parse_llama_server(["llama-server", "-m", str(model), "-c", "2048", *args]),
                          load_profile(model), cpu_features=features)
    found: dict[str, int] = {}
    for b in ledger.host.buffers:
        if b.buffer == "model":
            found[b.buffer_type] = found.get(b.buffer_type, 0) + b.bytes
    return found


def test_amx_takes_the_attention_matrices_before_cpu_repack(moe: Path) -> None:
    # per block: q 64 x 128 -> 128 rows x 2 blocks x (34 + 4) B = 9,728; k and v 64 x 64 -> 4,864 each; o 128 x 64 ->
    # 64 x 4 x 38 = 9,728; four blocks
    amx = 4 * (9_728 + 4_864 + 4_864 + 9_728)
    # the experts: 12 tensors of 8 x 64 rows x 2 blocks x 18 B (Q4_0), repacked as they are without AMX
    repack = 12 * 8 * 64 * 2 * 18
    found = _host(moe, AMX_HOST)
    assert (found["AMX"], found["CPU_REPACK"]) == (amx, repack)
    # without AMX the Q8_0 attention stays in the mapped file (Q8_0 has no x86 repack), the experts repack alike
    plain = _host(moe, frozenset({"avx2"}))
    assert "AMX" not in plain and plain["CPU_REPACK"] == repack


def test_amx_needs_both_features_and_the_host_holding_the_weights(moe: Path) -> None:
    assert "AMX" not in _host(moe, frozenset({"avx2", "amx_int8"}))
    assert "AMX" not in _host(moe, frozenset({"avx2", "avx512_vnni"}))
    # --no-repack turns every extra buffer type off (use_extra_bufts), AMX included
    assert "AMX" not in _host(moe, AMX_HOST, "--no-repack")


def test_fit_names_the_amx_buffer_from_the_declared_cpu(moe: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["fit", "--json", "--cpu-features", "avx2,amx_int8,avx512_vnni", "--", "llama-server", "-m", str(moe),
                 "-c", "2048", "--fit", "off"]) in (0, 3)
    names = [b["name"] for b in json.loads(capsys.readouterr().out)["host"]["buffers"]]
    assert "AMX model buffer" in names and "CPU_REPACK model buffer" in names, names


def test_a_host_declares_the_cpu_its_engine_uses(tmp_path: Path) -> None:
    """hosts.NAME.cpu_features: the reference's SmolLM2 (Q4_1 matrices, every K and N a multiple of 32) goes to AMX on a
    host that declares amx_int8 and avx512_vnni, and stays in the mapped file where the host declares none."""
    from fleetgate.ledger.service import service_ledger
    from fleetgate.manifest import load_fleet
    from fleetgate.render.rendered import load_service
    from tests.fleet_edits import edited_fleet

    def host_model(edits: list[tuple[str, str, str]]) -> dict[str, int]:
        fleet = load_fleet(edited_fleet(tmp_path / str(len(edits)), edits))
        ledger = service_ledger(load_service(fleet, fleet.services["reference"]))
        return {b.buffer_type: b.bytes for b in ledger.host.buffers if b.buffer == "model"}

    undeclared = host_model([])
    assert set(undeclared) == {"CPU_Mapped"}
    declared = host_model([("fleet.toml", 'ram_gib = 24\ndevices = []',
                            'ram_gib = 24\ndevices = []\ncpu_features = ["avx2", "amx_int8", "avx512_vnni"]')])
    assert set(declared) == {"AMX", "CPU_Mapped"}
    # the AMX copies are allocated beside the mapping, which still spans the file from its first host tensor to its
    # last (src/llama-model-loader.cpp get_mapping_range), as with CPU_REPACK
    assert declared["AMX"] > 0 and declared["CPU_Mapped"] == undeclared["CPU_Mapped"]


# -- a native build on an AMX host: tests/ledger/data/cpu-amx.json (the device tool's Xeon, docs/ledger.md) ----------

def _amx_dataset() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = json.loads((DATA / "cpu-amx.json").read_text(encoding="utf-8"))
    return data, data["boots"]


@pytest.mark.parametrize("ident", [b["id"] for b in _amx_dataset()[1]])
def test_a_native_build_on_an_amx_host_is_exact(ident: str) -> None:
    """Every buffer the AMX build printed (AMX, CPU_Mapped, KV, output) equals the ledger at the log's two decimals,
    with the host's flags as the engine's (a native build compiles what the CPU has); compute is not under. The tied
    output layer is the AMX copy beyond the matrices: SmolLM2's 28.69 MiB of Q8_0 embeddings take 32.06 MiB there
    (4 B of compensation per 34-byte block), gemma-3-270m's 170.00 take 190.00."""
    data, boots = _amx_dataset()
    boot = next(b for b in boots if b["id"] == ident)
    assert "AMX_INT8 = 1" in boot["system_info"] and "AVX512_VNNI = 1" in boot["system_info"]
    config = parse_llama_server(["llama-server", "-m", f"{boot['model']}.gguf", "--fit", "off", *boot["args"].split()])
    ledger = build_ledger(config, load_profile(DATA / "profiles" / f"{boot['model']}.toml"),
                          cpu_features=frozenset(data["machine"]["cpu_features"]))
    found = list(rows(boot, ledger))
    exact = [r for r in found if r.buffer != "compute"]
    assert [r for r in exact if not r.equal] == [] and len(exact) == sum(1 for b in boot["buffers"]
                                                                         if b["buffer"] != "compute")
    assert [r for r in found if r.buffer == "compute" and (r.predicted or 0) < (r.observed or 0)] == []
    amx = [r for r in exact if r.device == "AMX"]
    assert [r.mib for r in amx] == ([] if "norepack" in ident else [{"smollm2": "95.34", "gemma3": "213.91"}[boot["model"]]])
