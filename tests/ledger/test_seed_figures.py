"""The ledger reproduces the figures the seeds state, from their own arithmetic (seed-extract B.2, B.3, E.*).

Every expected value below is a number printed in the seeds; none is taken from fleetgate's output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.accounts import Ledger
from fleetgate.ledger.build import build_ledger
from fleetgate.ledger.devices import Card
from fleetgate.ledger.service import calibrations_of, service_ledger
from fleetgate.manifest import load_fleet
from fleetgate.models.profile import load_profile
from fleetgate.render.rendered import RenderedService, load_service
from tests.ledger.seed_tables import ROWS, Row, calibrate_b, derive_set_a, ledger_for

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "fixtures" / "fleet"
MiB, GiB = 1 << 20, 1 << 30


def _service(name: str) -> RenderedService:
    fleet = load_fleet(FLEET / "fleet.toml")
    return load_service(fleet, fleet.services[name])


def _with(config: RenderedService, *extra: str) -> Ledger:
    assert config.profile is not None
    cards = [Card(d.name, d.vram_bytes) for d in config.host.cards]
    return build_ledger(parse_llama_server([*config.rendered.argv, *extra]), config.profile, cards=cards)


def test_zealot_kv_and_recurrent_state_match_e34() -> None:
    zealot = _service("frank-zealot")
    cuda = service_ledger(zealot).devices[0]
    assert cuda.term("kv") == 13_056 * MiB  # E.34: "KV 13,056.00 MiB" at 786432 / 3, q8_0 K + V
    assert cuda.term("recurrent") == round(150.75 * MiB)  # E.34: "RS 150.75 MiB (3 cells)" spec off
    armed = _with(zealot, "--spec-type", "draft-mtp", "--spec-draft-n-max", "2").devices[0]
    assert armed.term("recurrent") == round(452.25 * MiB)  # INC-54: 452.25 MiB with MTP depth 2 armed
    mtp_kv = sum(b.bytes for b in armed.buffers if b.context == "mtp" and b.buffer == "KV")
    assert mtp_kv == 3_072 * MiB  # B-FIT-18: the MTP draft's f16 KV over the whole pool
    f16 = _with(zealot, "-ctk", "f16", "-ctv", "f16").devices[0]
    assert f16.term("kv") == 24_576 * MiB  # F.2-9: an 8-layer f16 pair is 24,576 MiB, not 2 x 13,056


def test_medium_state_law_and_prompt_cache_match_b2() -> None:
    state = service_ledger(_service("frank-medium")).slot_state
    # B.2: 64 KiB/token target KV + 4096 B/token MTP draft = 68 KiB, over the 196608-token slot
    kv_only = 196_608 * 69_632
    metadata = 196_608 * 12 * 2  # pos, n_seq_id and seq_id per saved cell, target and draft caches
    assert state.target_kv + state.draft == kv_only + metadata
    assert round(kv_only / GiB, 2) == 12.75  # B-PC-1: "12.75 GiB"
    # INC-11: 'prompt state size 11388.990 MiB exceeds ... 8192' lost conversations "past ~170k tokens"
    tokens = (11_388.990 * MiB - state.recurrent) / ((state.target_kv + state.draft) / state.tokens)
    assert 165_000 < tokens < 175_000


def test_dspark_draft_kv_covers_the_whole_window() -> None:
    medium = _service("frank-medium")
    dspark = load_profile(FLEET / "profiles" / "dspark-qwen3.8-27b.toml")
    assert medium.profile is not None
    argv = [*medium.rendered.argv, "--ctx-size", "262144", "--spec-type", "draft-dspark",
            "--spec-draft-model", "/models/dspark.gguf"]
    ledger = build_ledger(parse_llama_server(argv), medium.profile, draft=dspark,
                          cards=[Card(d.name, d.vram_bytes) for d in medium.host.cards])
    draft_kv = sum(b.bytes for d in ledger.devices for b in d.buffers
                   if b.context == "draft" and b.buffer == "KV")
    assert draft_kv == 5 * GiB  # B-FIT-7 / INC-03: 20 KiB per position, 5.0 GiB at 262144


def test_e9_is_predicted_from_the_e29_calibration() -> None:
    """One -ts step apart, two boots: calibrated on part 3, the ledger predicts part 2 (E.9)."""
    row = next(r for r in ROWS if r.source == "E.9")
    fleet = load_fleet(FLEET / "fleet.toml")
    ledger = ledger_for(row, calibrations_of(fleet.services["frank-medium"]))
    used = [d.total / GiB for d in ledger.cards]
    for predicted, measured in zip(used, row.measured, strict=True):
        assert abs(predicted - measured) <= 0.02, (used, row.measured)


@pytest.mark.parametrize("row", [r for r in ROWS if r.source == "E.6"], ids=lambda r: r.ts)
def test_e6_sweep_from_one_calibrated_row(row: Row) -> None:
    """E.6: block placement over 65 blocks explains every measured step (0.43 DeltaNet, 1.43 attention)."""
    ledger = ledger_for(row, calibrate_b())
    free = [31.86 - d.total / GiB for d in ledger.cards]
    for predicted, measured in zip(free, row.measured, strict=True):
        assert abs(predicted - measured) <= 0.01, (row.ts, free, row.measured)


def test_fleet_calibrations_are_derived_from_the_boots_they_name() -> None:
    """fleet.toml's compute calibrations are E.29 / E.14 minus what the ledger derives, not typed figures."""
    fleet = load_fleet(FLEET / "fleet.toml")
    declared = {(c.device, c.context): c.bytes for c in calibrations_of(fleet.services["frank-medium"])}
    derived = {(c.device, c.context): c.bytes for c in derive_set_a()}
    assert declared == derived
