"""`fleetgate fit` and `fleetgate profile`: what an operator reads, the JSON, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetgate.cli import main
from fleetgate.models.profile import load_profile
from tests.ledger.tiny_models import Qwen35Shape, write_qwen35
from tests.test_misses_round3 import PINNED_FLOOR, _fleet, _with_coder

FLEET = str(Path(__file__).resolve().parents[2] / "fixtures" / "fleet" / "fleet.toml")
GiB = 1 << 30


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_fit_service_reads_at_a_glance(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "frank-medium", "--fleet", FLEET)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("frank-medium on dankserver: 393216 tokens = 2 slots x 196608")
    assert lines[1].split() == ["GiB", "ROCm0", "ROCm1", "host", "RAM"]
    assert lines[2].split()[1:] == ["0-35", "36-64", "+out", "input"]
    row = {line.split()[0]: line.split()[1:] for line in lines[3:14] if line.strip()}
    assert row["KV"][:2] == ["13.50", "10.50"]  # 9 and 7 attention blocks x 4096 B x 393216 (E.37)
    assert row["free"] == ["1.02", "3.00"]  # E.29's measured headroom, which the calibration reproduces
    assert "floor 1.00 GiB: ok" in out and "gap 1.98 GiB, slack 2.00 GiB: ok" in out
    assert "E.29 rocm-smi 2026-09-17 part 3" in out and "c = calibrated" in out


def test_sweep_prints_each_step_and_marks_failing_gates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "frank-medium", "--sweep-ts", "--fleet", FLEET)
    assert code == 0
    steps = {line.split()[0]: line for line in out.splitlines() if "," in line.split()[0]}
    current = next(line for line in out.splitlines() if line.lstrip().startswith(">"))
    assert current.split()[1] == "35,30" and "ok" in current and "this service" in current
    assert "36,29" in steps and "FAILS floor on ROCm0, slack" in steps["36,29"]
    assert steps["34,31"].split()[1:4] == ["2.95", "1.07", "1.88"] and steps["34,31"].endswith("ok")
    # 34 -> 35 moves attention block 35 (0.43 + 1.50 GiB at 393216); 35 -> 36 a DeltaNet block
    free0 = {k: float(v.split()[1]) for k, v in steps.items() if k in ("34,31", "36,29")}
    assert round(free0["34,31"] - 1.02, 2) == 1.93 and round(1.02 - free0["36,29"], 2) == 0.41


def test_fit_json_gives_every_term_in_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "frank-medium", "--json", "--fleet", FLEET)
    assert code == 0
    data = json.loads(out)
    rocm0, rocm1 = data["devices"]
    assert (rocm0["device"], rocm1["device"]) == ("ROCm0", "ROCm1")
    # the seeds' state law: 4 kv heads x 256 x 2 (K, V) x 2 B = 4096 B per position per attention block
    assert rocm0["terms"]["kv"] == 9 * 4096 * 393216 and rocm1["terms"]["kv"] == 7 * 4096 * 393216
    mtp_kv = [b for b in rocm1["buffers"] if b["context"] == "mtp" and b["buffer"] == "KV"]
    assert [b["bytes"] for b in mtp_kv] == [4096 * 393216]  # B-FIT-6: one nextn layer of KV
    for device in (rocm0, rocm1):
        buffers = sum(b["bytes"] for b in device["buffers"])
        assert sum(device["terms"].values()) == device["total_bytes"] == buffers
        assert device["vram_bytes"] - device["total_bytes"] == device["free_bytes"]
        assert {b["name"].split(" ", 1)[1] for b in device["buffers"]} <= {
            "model buffer", "KV buffer", "RS buffer", "compute buffer"}
    assert data["slot_state"]["total"] > 8192 << 20 and data["floor_bytes"] == GiB


def test_fit_a_bare_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf", Qwen35Shape(nextn=1))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "fit", "--json", "--card", "RPC0=1GiB", "--card", "RPC1=512M", "--",
                       "llama-server", "-m", str(model), "--rpc", "127.0.0.1:50052,127.0.0.1:50053",
                       "-ngl", "999", "-c", "4096", "-np", "2", "-ts", "1,1")
    assert code == 0
    data = json.loads(out)
    assert [(d["device"], d["buffer_name"], d["vram_bytes"]) for d in data["devices"]] == [
        ("RPC0", "RPC0[127.0.0.1:50052]", GiB), ("RPC1", "RPC0[127.0.0.1:50053]", 512 << 20)]
    code, out, _ = run(capsys, "fit", "--", "llama-server", "-m", str(model), "-c", "4096")
    assert code == 0 and out.splitlines()[1].split()[0] == "MiB"


def test_a_declared_service_named_llama_server_is_fitted_as_that_service(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    # a unit llama-server.service gives a service of that name: the name the fleet declares wins over the argv
    from tests.fleet_edits import edited_fleet

    fleet = edited_fleet(tmp_path, [("fleet.toml", "[services.frank-medium]\n", "[services.llama-server]\n")])
    text = fleet.read_text(encoding="utf-8").replace("services.frank-medium.", "services.llama-server.")
    text = text.replace('service = "frank-medium"', 'service = "llama-server"')  # its waiver
    fleet.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "fit", "llama-server", "--fleet", str(fleet))
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("llama-server on dankserver")


def test_llama_server_alone_with_no_fleet_is_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "fit", "llama-server")
    assert (code, out) == (2, "")
    assert err == ("fleetgate: llama-server: no model: no -m MODEL.gguf, --model-url or -hf/-hff; expected the model "
                   "(or --profile FILE.toml)\n")


@pytest.mark.parametrize(("argv", "message"), [
    (("fit", "frank-nope", "--fleet", FLEET), "no service 'frank-nope'"),
    (("fit", "frank-dragoon", "--fleet", FLEET), "frank-dragoon runs openai; fleetgate's ledgers are llama.cpp's and vLLM's"),
    (("fit", "--", "llama-server", "-m", "x.gguf", "--bogus", "1"), "--bogus (argument 3): invalid argument"),
    (("fit", "--", "llama-server", "-c", "4096"), "no -m MODEL.gguf"),
    (("fit", "--", "llama-server", "-m", "absent.gguf"), "the model is not here"),
    (("fit", "--profile"), "expected one argument"),
    (("fit", "--", "llama-server", "--sweep"), "--sweep (argument 1): invalid argument"),
    (("fit", "--sweep-ts", "--", "llama-server", "-m", "x.gguf"), "--sweep-ts needs a SERVICE"),
    (("profile", "absent.gguf"), "cannot read the GGUF"),
])
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str,
                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code, _, err = run(capsys, *argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code, err = int(exit_.code or 0), capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(("fleetgate: ", "fleetgate fit: error"))
    assert message in err
    if not err.startswith("usage"):
        assert len(lines) == 1, err


def test_card_size_is_read_or_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf")
    code, _, err = run(capsys, "fit", "--card", "ROCm0=lots", "--", "llama-server", "-m", str(model),
                       "--device", "ROCm0")
    assert code == 2 and "'lots' is not a size" in err and len(err.strip().splitlines()) == 1


def test_profile_writes_what_load_profile_reads(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf", Qwen35Shape(nextn=1))
    out = tmp_path / "tiny.toml"
    assert main(["profile", str(model), "-o", str(out)]) == 0
    written, direct = load_profile(out), load_profile(model)
    assert written.pattern == direct.pattern == "RRRARRRAN"
    assert written.weight_bytes == direct.weight_bytes and len(written.weights) == len(direct.weights)
    assert out.read_text(encoding="utf-8").startswith("# written by `fleetgate profile tiny.gguf`")


@pytest.mark.parametrize(("cards", "extra", "message"), [
    (("RPC0=24G",), (), "--card RPC0: the command line has 0 RPC device(s)"),
    (("CPU=24G",), (), "the host is not a card; expected --host-ram 24G"),
    (("CUDA0=10G",), ("--device", "ROCm0"), "--card CUDA0: --device names ROCm0"),
    (("Foo0=1G",), (), "'Foo0' is no llama.cpp device name"),
    (("CUDA0=..G",), (), "'..G' is not a size"),
    (("RPC0=1G:TPU",), ("--rpc", "127.0.0.1:1"), "unknown kind 'TPU'"),
])
def test_a_card_naming_no_device_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            cards: tuple[str, ...], extra: tuple[str, ...], message: str) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf")
    argv = [a for c in cards for a in ("--card", c)]
    code, out, err = run(capsys, "fit", *argv, "--", "llama-server", "-m", str(model), *extra)
    assert (code, out) == (2, "")
    assert message in err and len(err.strip().splitlines()) == 1


def test_host_ram_kinds_and_cpu_features_on_a_bare_command_line(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf", Qwen35Shape(matrix_type="Q4_0"))
    code, out, _ = run(capsys, "fit", "--json", "--host-ram", "64G", "--card", "RPC0=80G:CUDA",
                       "--cpu-features", "avx2", "--", "llama-server", "-m", str(model), "--rpc", "127.0.0.1:1",
                       "-ngl", "2", "-c", "2048", "-np", "1")
    assert code == 0
    data = json.loads(out)
    assert data["host"]["ram_bytes"] == 64 * GiB
    (rpc,) = data["devices"]
    assert rpc["vram_bytes"] == 80 * GiB
    # an RPC device serving a GPU gets the GPU's padding but no pinned host buffer: host layers repack
    names = {b["name"] for b in data["host"]["buffers"]}
    assert "CPU_REPACK model buffer" in names and "CPU_Mapped model buffer" in names, names
    code, out, _ = run(capsys, "fit", "--json", "--cpu-features", "none", "--", "llama-server", "-m",
                       str(model), "--rpc", "127.0.0.1:1", "-ngl", "2", "-c", "2048", "-np", "1")
    assert not any("CPU_REPACK" in b["name"] for b in json.loads(out)["host"]["buffers"])


def test_profile_to_a_bad_path_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf")
    code, out, err = run(capsys, "profile", str(model), "-o", str(tmp_path / "no" / "such" / "dir.toml"))
    assert (code, out) == (2, "")
    assert "cannot write the profile" in err and len(err.strip().splitlines()) == 1


def test_a_reader_that_stops_early_is_no_error(tmp_path: Path) -> None:
    """`fleetgate fit X | head -1`: the pipe closes after one line; no traceback, exit 0."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "fleetgate.cli", "fit", "frank-medium", "--fleet", FLEET],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0
    assert first.startswith(b"frank-medium on dankserver") and err == b""


# -- fleetgate fit as a gate (issue 19, item 2) ------------------------------------------------------------------

# A profile written by hand (docs/ledger.md, "A profile by hand"): a 32B-class dense model at ~4.8 bits per
# weight, 24.4 GB (22.7 GiB), the shape of the two-card case.
DENSE = """\
[model]
name = "dense-32b-q4_k_m"
source = "reconstructed"
architecture = "qwen2"
file_bytes = 24360020480
block_count = 48
n_embd = 5120
n_vocab = 152064
n_ff = 27648
n_head = 40
n_ctx_train = 32768

[attention]
head_count_kv = 8
key_length = 128
value_length = 128

[weights]
token_embd = 850000000
output = 850000000
output_norm = 20480
attention_block = 472000000
"""


def _laptop(capsys: pytest.CaptureFixture[str], tmp_path: Path, split: str, *extra: str) -> tuple[int, str, str]:
    profile = tmp_path / "dense.toml"
    profile.write_text(DENSE, encoding="utf-8")
    return run(capsys, "fit", "--card", "CUDA0=24GiB", "--card", "CUDA1=8GiB", "--profile", str(profile), *extra,
               "--", "llama-server", "-m", "/models/dense-32b-q4_k_m.gguf", "--device", "CUDA0,CUDA1",
               "-ts", split, "-ngl", "99", "-c", "16384")


def test_the_two_card_case_fails_first_with_a_fix_that_fits(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    """-ts 35,65 puts 65 % of a 22.7 GiB model on an 8 GiB card: exit 1, that card first, and a split that fits."""
    code, out, _ = _laptop(capsys, tmp_path, "35,65")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "FAILS: CUDA1 keeps -8.77 GiB free, below its floor of 0.00 GiB (none declared)"
    assert lines[1].startswith("fix: -ts 72,28 clears every card's floor (0.00 GiB, none declared): free 4.92 / 0.27 GiB")
    assert lines[3].startswith("dense-32b-q4_k_m.gguf: 16384 tokens")
    assert "floor 0.00 GiB (none declared): FAILS on CUDA1" in out
    # the fix fits, and it is the nearest split that does: one step toward the small card fails again
    assert _laptop(capsys, tmp_path, "72,28")[0] == 0
    code, out, _ = _laptop(capsys, tmp_path, "71,29")
    assert code == 1 and out.startswith("FAILS: CUDA1 keeps -0.23 GiB free") and "fix: -ts 72,28 " in out
    code, out, _ = _laptop(capsys, tmp_path, "35,65", "--json")
    verdict = json.loads(out)["verdict"]
    assert (verdict["fits"], verdict["exit_code"], [d["device"] for d in verdict["failing"]]) == (False, 1, ["CUDA1"])
    assert verdict["failing"][0]["free_bytes"] < 0 and verdict["fix"].startswith("-ts 72,28 ")


def test_a_shape_no_split_can_fit_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    profile = tmp_path / "dense.toml"
    profile.write_text(DENSE, encoding="utf-8")
    code, out, _ = run(capsys, "fit", "--card", "CUDA0=12GiB", "--card", "CUDA1=8GiB", "--profile", str(profile),
                       "--", "llama-server", "-m", "/models/d.gguf", "--device", "CUDA0,CUDA1", "-ts", "1,1",
                       "-ngl", "99", "-c", "16384")
    assert code == 1
    assert out.splitlines()[:3] == [  # 20 GiB of cards for a 22.7 GiB model: both fail, the worst first
        "FAILS: CUDA1 keeps -5.25 GiB free, below its floor of 0.00 GiB (none declared)",
        "FAILS: CUDA0 keeps -1.56 GiB free, below its floor of 0.00 GiB (none declared)",
        "fix: no -ts split of these two cards clears every card's floor (0.00 GiB, none declared) at this shape: "
        "lower -c, the KV type, -ub or -ngl (--json gives every figure)",
    ]


@pytest.mark.parametrize(("edits", "argv", "code", "first"), [
    ((), ("frank-medium",), 0, "frank-medium on dankserver: 393216 tokens"),
    ((("scripts/frank-medium.env", "TENSOR_SPLIT=35,30", "TENSOR_SPLIT=36,29"),), ("frank-medium",), 1,
     "FAILS: ROCm0 keeps 0.61 GiB free, below its floor of 1.00 GiB"),
    # no floor declared: a floor of 0, and the fix is a split that clears it, not the failing one
    ((("scripts/frank-medium.env", "CTX_SIZE=393216", "CTX_SIZE=524288"),
      ("fleet.toml", "card_floor_gib = 1.0\n", "")), ("frank-medium",), 1,
     "FAILS: ROCm0 keeps -3.48 GiB free, below its floor of 0.00 GiB (none declared)"),
    ((("scripts/frank-medium.env", "TENSOR_SPLIT=35,30", "TENSOR_SPLIT=36,29"),), ("frank-medium", "--sweep-ts"), 1,
     "FAILS: ROCm0 keeps 0.61 GiB free, below its floor of 1.00 GiB"),
], ids=["fits", "below-floor", "below-zero-no-floor", "sweep-below-floor"])
def test_fit_service_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path, edits: tuple[tuple[str, str, str], ...],
                                argv: tuple[str, ...], code: int, first: str) -> None:
    from tests.fleet_edits import edited_fleet

    fleet = edited_fleet(tmp_path, list(edits))
    got, out, err = run(capsys, "fit", *argv, "--fleet", str(fleet))
    assert (got, err) == (code, "")
    assert out.splitlines()[0].startswith(first), out
    if code:
        fix = next(line for line in out.splitlines() if line.startswith("fix: "))
        assert fix.startswith("fix: -ts 35,30 clears") if "36,29" in str(edits) else fix.startswith("fix: ")
        assert "-ts 36,29" not in fix


def test_sweep_covers_the_whole_range_and_no_row_below_zero_is_ok(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    from tests.fleet_edits import edited_fleet

    fleet = edited_fleet(tmp_path, [("fleet.toml", "card_floor_gib = 1.0\n", ""),
                                    ("fleet.toml", "balance_slack_gib = 2.0\n", "")])
    code, out, _ = run(capsys, "fit", "frank-medium", "--sweep-ts", "--fleet", str(fleet))
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit() or line.lstrip().startswith(">")]
    splits = [r[1] if r[0] == ">" else r[0] for r in rows]
    assert splits == [f"{a},{65 - a}" for a in range(1, 65)]  # every step, 1,64 .. 64,1
    assert "floor 0.00 GiB (none declared)" in out
    for row in rows:
        cells = row[1:] if row[0] == ">" else row
        free = [float(cells[1]), float(cells[2] if cells[2] != "!" else cells[3])]
        negative = any(value < 0 for value in free)
        assert ("ok" in cells) != negative, row
    assert sum("ok" in r for r in rows) > 0 and sum("FAILS" in r for r in rows) > 0


def test_a_card_of_unknown_size_is_not_judged(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = write_qwen35(tmp_path / "tiny.gguf")
    code, out, err = run(capsys, "fit", "--", "llama-server", "-m", str(model), "--device", "CUDA0", "-c", "2048")
    assert code == 3 and not out.startswith("FAILS")
    assert err == "fleetgate fit: not judged: no size for CUDA0; expected --card CUDA0=SIZE\n"
    code, _, _ = run(capsys, "fit", "--card", "CUDA0=8G", "--", "llama-server", "-m", str(model), "--device", "CUDA0",
                     "-c", "2048")
    assert code == 0


@pytest.mark.parametrize(("words", "message"), [
    (("-hf", "owner/repo:Q4_K_M"), "-hf owner/repo:Q4_K_M names a repository and a quant, not a file"),
    (("-m", ""), "-m is empty; expected the model's path"),
    (("-m", "absent.gguf", "-c", "4096"), "absent.gguf: the model is not here"),
])
def test_the_refusal_names_what_the_argv_has(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...],
                                             message: str) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "fit", "--", "llama-server", *words)
    assert (code, out) == (2, "") and message in err and "no -m MODEL.gguf" not in err
    assert len(err.strip().splitlines()) == 1


def test_fit_a_vllm_service(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.fleet_edits import edited_fleet

    code, out, _ = run(capsys, "fit", "frank-archon", "--fleet", FLEET)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "frank-archon on dankserver: vLLM, TP 2, --max-model-len 262144, --max-num-seqs 8, KV auto"
    table = {line[2:18].strip(): line[18:27].strip() for line in lines[2:8]}
    # E.31's budget, A.4's weights per card, the boot's pool (docs/ledger.md, "vLLM")
    assert table == {"budget": "31.22", "weights": "12.58", "drafter": "1.05", "profiled peak": "3.17",
                     "KV pool": "14.42", "one sequence": "8.04"}
    assert lines[8].startswith("  starts: the pool holds 1.79 sequences of 262,144 tokens (--max-num-seqs 8)")
    fleet = edited_fleet(tmp_path, [("dankserver/frank-archon/frank-archon.env", "MAXLEN=262144", "MAXLEN=524288")])
    code, out, _ = run(capsys, "fit", "frank-archon", "--fleet", str(fleet))
    assert code == 1
    # twice the model's max_position_embeddings: vLLM refuses at config, before any pool is sized
    assert out.splitlines()[0] == ("FAILS: will not start: vLLM refuses at config: User-specified max_model_len "
                                   "(524288) is greater than the derived max_model_len (max_position_embeddings="
                                   "262144.0 or model_max_length=None in model's config.json).")
    code, out, _ = run(capsys, "fit", "frank-archon", "--json", "--fleet", str(fleet))
    data = json.loads(out)
    assert (code, data["exit_code"], data["starts"], data["pool_bytes"]) == (1, 1, False, 15483357102)


def test_fit_a_pinned_service_on_the_card_it_is_shown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # start-scripts' llama-server exports CUDA_VISIBLE_DEVICES=1: the ledger is the host's CUDA1 alone, which the
    # engine calls CUDA0 (here with Qwen2.5-Coder-14B's profile on 8 GiB cards, where it does not fit).
    fleet_toml = _fleet(tmp_path, "start-scripts", PINNED_FLOOR["cuda-one-card"][0])
    (fleet_toml.parent / "profiles").mkdir()
    code, out, _ = run(capsys, "fit", "gemma", "--fleet", str(_with_coder(fleet_toml)))
    assert code == 1
    assert out.splitlines()[0] == ("FAILS: CUDA1 (the engine's CUDA0) keeps -2.30 GiB free, below its floor of 0.00 GiB "
                                  "(none declared)")
    assert out.splitlines()[4].split() == ["GiB", "CUDA1", "(the", "engine's", "CUDA0)", "host", "RAM"]


def test_fit_says_which_reading_the_total_is(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35 item 7: the total books the runtime's growth on the first request that fills a ubatch; a reading
    after a request of 4-5 tokens was 5-19 % under it. fit names the total's moment and prints the reading at
    health beside it, less exactly the runtime growth (held against nvidia-smi in tests/ledger/test_datasets.py)."""
    profiles = Path(__file__).parent / "data" / "profiles"
    argv = ("fit", "--profile", str(profiles / "smollm2.toml"), "--card", "CUDA0=143155MiB", "--cpu-features",
            "avx2", "--", "llama-server", "-m", "smollm2.gguf", "-c", "4096", "-np", "2", "-ngl", "999")
    code, out, _ = run(capsys, *argv)
    assert code == 0
    rows = {line[:21].strip(): line[21:].split() for line in out.splitlines()[3:12]}
    assert list(rows)[-4:] == ["total", "at health", "card", "free"]
    assert rows["at health"][1] == "-"  # the host's RAM has no runtime growth and no nvidia-smi reading
    assert ("  total = after the first request that fills a ubatch (the runtime's growth booked in full: a bound; a "
            "shorter first request grows less);\n  at health = once /health answers, before any request\n") in out
    code, out, _ = run(capsys, *argv[:1], "--json", *argv[1:])
    data = json.loads(out)
    assert data["total_reading"].startswith("after the first request that fills a ubatch")
    (cuda0,) = data["devices"]
    growth = [b["bytes"] for b in cuda0["buffers"] if b["buffer"] == "runtime growth"]
    # llama.cpp 11434 on an H200: 599 MiB at health, up to 619 after a first request with no cuBLAS or op offload
    assert growth == [20 << 20] and cuda0["total_bytes"] - cuda0["at_health_bytes"] == 20 << 20
    assert f"{cuda0['total_bytes'] / GiB:.2f}" == rows["total"][0]
    assert f"{cuda0['at_health_bytes'] / GiB:.2f}" == rows["at health"][0]
    # a card with nothing that grows prints no second reading: a CPU-only service
    code, out, _ = run(capsys, "fit", "--profile", str(profiles / "smollm2.toml"), "--cpu-features", "avx2", "--",
                       "llama-server", "-m", "smollm2.gguf", "-c", "4096", "--device", "none")
    assert code == 0 and "at health" not in out and "total = after" not in out


def test_a_device_the_host_has_no_card_for_is_the_engines_refusal(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    """llama-server exits at its argument parsing on a --device name no backend registered (booted on one H100:
    hb-smollm2-device-cuda1, tests/ledger/data/gpu-h100-holdout35b.json): fit says so in the engine's words."""
    from tests.fleet_edits import edited_fleet

    fleet = edited_fleet(tmp_path, [("scripts/frank-medium.env", "DEVICE=ROCm0,ROCm1", "DEVICE=ROCm0,ROCm7")])
    code, out, err = run(capsys, "fit", "frank-medium", "--fleet", str(fleet))
    assert (code, out) == (2, "")
    assert err.strip().endswith("--device names 'ROCm7'; host dankserver has no such card, so llama-server will not "
                                "start ('error while handling argument \"--device\": invalid device: ROCm7')"), err
    assert len(err.strip().splitlines()) == 1
