"""`fleetgate fit` and `fleetgate profile`: what an operator reads, the JSON, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetgate.cli import main
from fleetgate.profile import load_profile
from tests.ledger.tiny_models import Qwen35Shape, write_qwen35

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


@pytest.mark.parametrize(("argv", "message"), [
    (("fit", "frank-nope", "--fleet", FLEET), "no service 'frank-nope'"),
    (("fit", "frank-archon", "--fleet", FLEET), "the ledger is llama.cpp's"),
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
