"""Profiles from GGUF headers and from TOML: what they resolve to, round trips, and bad input as one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.errors import InputError
from fleetgate.ledger.accounts import summarize
from fleetgate.ledger.build import build_ledger
from fleetgate.ledger.placement import placement
from fleetgate.models.gguf import KV_CACHE_TYPES, profile_data, profile_toml, read_header
from fleetgate.models.profile import load_profile
from tests.ledger.tiny_models import DflashShape, Qwen35Shape, write_dflash, write_qwen35

FLEET = Path(__file__).resolve().parents[2] / "fixtures" / "fleet"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {
        "qwen35-mtp": write_qwen35(root / "q35-mtp.gguf", Qwen35Shape(nextn=1)),
        "qwen35-i3": write_qwen35(root / "q35-i3.gguf", Qwen35Shape(n_layer=6, interval=3, tied_output=True)),
        "dflash-swa": write_dflash(root / "dflash-swa.gguf", DflashShape(sliding_window=64, block_size=8)),
    }


def test_header_resolves_layers_recurrent_and_drafter(tiny: dict[str, Path]) -> None:
    mtp = load_profile(tiny["qwen35-mtp"])
    assert (mtp.block_count, mtp.nextn_layers, mtp.n_layer) == (9, 1, 8)
    assert mtp.pattern == "RRRARRRAN"  # full_attention_interval 4; the nextn block last
    assert mtp.recurrent is not None and mtp.recurrent.rollback
    # conv (4-1) x (inner 64 + 2 x 2 groups x 16) + ssm 16 x 64, as F32
    assert mtp.recurrent.row_bytes == 4 * (3 * (64 + 2 * 2 * 16) + 16 * 64)
    assert load_profile(tiny["qwen35-i3"]).pattern == "RRARRA"
    drafter = load_profile(tiny["dflash-swa"])
    assert drafter.drafter is not None and drafter.drafter.block_size == 8
    assert drafter.sliding_window == 64 and drafter.pattern == "SS"


def test_written_profile_gives_the_same_ledger_as_the_gguf(tiny: dict[str, Path], tmp_path: Path) -> None:
    mtp = "--spec-type draft-mtp --spec-draft-n-max 3"
    for key, argv in (("qwen35-mtp", f"-c 4096 -np 2 -ngl 999 -ts 2,1 {mtp}"),
                      ("qwen35-i3", "-c 2048 -np -1 -ngl 4 -ctk q8_0 -ctv q8_0")):
        text = profile_toml(profile_data(read_header(tiny[key])))
        written = tmp_path / f"{key}.toml"
        written.write_text(text, encoding="utf-8")
        config = parse_llama_server(["llama-server", "-m", str(tiny[key]), "--rpc", "127.0.0.1:1,127.0.0.1:2",
                                     *argv.split()])
        direct = summarize(build_ledger(config, load_profile(tiny[key])))
        from_toml = summarize(build_ledger(config, load_profile(written)))
        assert from_toml == direct


def test_kv_cache_type_table_matches_the_gguf_package() -> None:
    from gguf import GGML_QUANT_SIZES

    by_name = {qtype.name: sizes for qtype, sizes in GGML_QUANT_SIZES.items()}
    for name, sizes in KV_CACHE_TYPES.items():
        assert by_name[name] == sizes, name


@pytest.mark.parametrize(("n_layer_all", "split", "first_on_device_1"), [
    (64, (35, 30), 35),  # ENGINE-FACTS' worked example: blocks 0-34 on device 0
    (65, (35, 30), 36),  # block_count 65: ts0 = k puts blocks 0..k on device 0 (seed-extract E.37)
    (65, (36, 29), 37),
    (65, (34, 31), 35),
])
def test_layer_placement(n_layer_all: int, split: tuple[int, int], first_on_device_1: int) -> None:
    devices = placement(n_layer_all, 999, split, 2)
    assert devices.index(1) == first_on_device_1
    assert devices[-1] == 1  # the output layer goes last
    assert set(devices[:first_on_device_1]) == {0}


def test_partial_offload_keeps_the_first_blocks_on_the_host() -> None:
    devices = placement(30, 20, (1, 1), 2)  # i_gpu_start = 30 + 1 - 20 = 11
    assert devices[:11] == [-1] * 11 and -1 not in devices[11:]


BAD_PROFILES = [
    ("[model\nname = 'x'\n", 1, "not valid TOML"),
    ("[other]\nx = 1\n", None, "expected a [model] table"),
    ("[model]\nname = 'x'\narchitecture = 'llama'\nblock_count = 2\n[layers]\npattern = 'AAA'\n", 6,
     "has 3 letters"),
    ("[model]\nname = 'x'\narchitecture = 'llama'\nblock_count = 2\n[attention]\n"
     "head_count_kv = [1, 2, 3]\n", 6, "head_count_kv has 3 entries"),
    ("[model]\nname = 'x'\narchitecture = 'qwen35'\nblock_count = 2\n[layers]\npattern = 'RA'\n", 6,
     "no [recurrent] table"),
    ("[model]\nname = 'x'\narchitecture = 'llama'\nblock_count = -1\n", 4, "expected an integer >= 0"),
    ("[model]\nname = 'x'\narchitecture = 'llama'\nblock_count = 1\n[weights]\n"
     "tensors = [{ name = 'blk.0.w', type = 'Q9_9', shape = [32] }]\n", 6, "unknown ggml type 'Q9_9'"),
    ("[model]\nname = 'x'\narchitecture = 'llama'\nblock_count = 2\n[weights]\nattention_block = 10\n"
     "blocks = [1]\n", 7, "blocks has 1 entries"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD_PROFILES, ids=[m for _, _, m in BAD_PROFILES])
def test_bad_profile_is_one_line_naming_file_and_line(text: str, line: int | None, message: str,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_profile(path)
    error = caught.value
    assert "\n" not in str(error)
    assert error.path == path and error.line == line, str(error)
    assert message in str(error)


def test_bad_gguf_is_one_line(tmp_path: Path, tiny: dict[str, Path]) -> None:
    text = tmp_path / "model.gguf"
    text.write_text("not a model\n", encoding="utf-8")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny["qwen35-mtp"].read_bytes()[:4096])
    for path, message in ((text, "not a GGUF file"), (truncated, "more than the file's 4096 bytes can hold"),
                          (tmp_path / "absent.gguf", "cannot read")):
        with pytest.raises(InputError) as caught:
            load_profile(path)
        assert "\n" not in str(caught.value) and message in str(caught.value), str(caught.value)


def test_fleet_profiles_load_and_mark_their_source() -> None:
    sources = {}
    for path in sorted((FLEET / "profiles").glob("*.toml")):
        profile = load_profile(path)
        sources[path.stem] = profile.source
        assert profile.reconstructed == (profile.source in ("reconstructed", "checkpoint")), path
    # the seeds' models are reconstructed from their figures; the reference model's is read off its GGUF;
    # frank-archon's vLLM checkpoints (weights and config.json keys, for vLLM's ledger) are reconstructed too
    assert sources.pop("smollm2-135m-instruct-q4_1") == "gguf"
    assert {k for k, v in sources.items() if v == "checkpoint"} == {"swift-qwen3.8-27b-paro-mxfp6",
                                                                    "qwen3.8-27b-dflash2-fp8"}
    assert set(sources.values()) == {"reconstructed", "checkpoint"}
    medium = load_profile(FLEET / "profiles" / "swift-qwen3.8-27b-mtp.toml")
    # the seeds: 16 x (3 Gated DeltaNet + 1 Gated Attention) + the nextn block; the file's bytes
    assert medium.pattern == "RRRA" * 16 + "N" and medium.block_count == 65
    assert medium.weight_bytes + 8_000_000 == 31_457_990_112
