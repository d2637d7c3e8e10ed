"""The ledger against the seeds' measured tables (seed-extract E.5-E.9, E.29, E.37), cell by cell.

    python -m tests.ledger.seed_tables        # the markdown tables of docs/ledger.md

Each row runs frank-medium's rendered command line with that boot's context, split, batch, drafter and
projector, through the same ledger as the seams, and prints predicted against measured VRAM per card.
Rows at ubatch 512 use the calibrations fleet.toml declares (set A); the ubatch-1536 rows use set B,
measured on one row of E.6 (its 36,29, deployed at the time) and named below.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.accounts import Calibration, Ledger
from fleetgate.ledger.build import build_ledger
from fleetgate.ledger.devices import Card
from fleetgate.manifest import load_fleet
from fleetgate.models.profile import load_profile
from fleetgate.render.rendered import load_service

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "fixtures" / "fleet" / "fleet.toml"
GiB = 1 << 30
DSPARK = "/home/dank/models/Qwen3.8-27B-DSpark/Qwen3.8-27B-DSpark-Q8_0.gguf"
DFLASH2 = "/home/dank/models/Qwen3.8-27B-DFlash2-GGUF/Qwen3.8-27B-DFlash2-Q8_0.gguf"


@dataclass(frozen=True)
class Row:
    source: str
    ts: str
    ctx: int
    ubatch: int
    drafter: str
    """mtp, dflash2 or dspark."""
    mmproj: bool
    measured: tuple[float, float]
    """GiB per card as the seed gives it."""
    kind: str = "free"
    """free (31.86 - used) or used."""
    slots: int = 2


ROWS: tuple[Row, ...] = (
    Row("E.5", "38,27", 262144, 1536, "dspark", False, (3.78, 0.08)),
    Row("E.5", "41,24", 262144, 1536, "dspark", False, (1.47, 2.38)),
    Row("E.5", "40,25", 262144, 1536, "dspark", False, (1.88, 1.88)),
    Row("E.6", "39,26", 262144, 1536, "dflash2", False, (2.42, 7.20)),
    Row("E.6", "38,27", 262144, 1536, "dflash2", False, (3.85, 5.77)),
    Row("E.6", "37,28", 262144, 1536, "dflash2", False, (4.28, 5.34)),
    Row("E.6", "36,29", 262144, 1536, "dflash2", False, (4.71, 4.91)),
    Row("E.6", "35,30", 262144, 1536, "dflash2", False, (5.14, 4.48)),
    Row("E.6", "34,31", 262144, 1536, "dflash2", False, (6.57, 3.05)),
    Row("E.7", "36,29", 262144, 512, "dflash2", False, (6.01, 7.32)),
    Row("E.7", "35,30", 262144, 512, "dflash2", False, (6.44, 6.90)),
    Row("E.8", "36,29", 327680, 512, "dflash2", True, (28.40, 26.66), "used"),
    Row("E.9", "34,31", 393216, 512, "mtp", True, (28.91, 30.78), "used"),
    Row("E.29", "35,30", 393216, 512, "mtp", True, (30.84, 28.86), "used"),
)

# Set B: ubatch 1536, from E.6's 36,29 row (rocm-smi free 4.71 / 4.91 GiB). Filled in by calibrate_b().
SET_B_BOOT = "E.6 rocm-smi 2026-09-16: -ts 36,29 at 262144/2, b/ub 6144/1536, DFlash2 n7, no mmproj"


def _argv(base: Sequence[str], changes: Mapping[str, str | None]) -> list[str]:
    argv = list(base)
    for flag, value in changes.items():
        if flag in argv:
            i = argv.index(flag)
            del argv[i: i + 2]
        if value is not None:
            argv += [flag, value]
    return argv


DRAFTERS: Mapping[str, tuple[str | None, str | None, str | None]] = {
    "none": (None, None, None),
    "mtp": ("draft-mtp", "3", None),
    "dflash2": ("draft-dflash", "7", DFLASH2),
    "dspark": ("draft-dspark", "6", DSPARK),
}


def ledger_for(row: Row, calibrations: Sequence[Calibration]) -> Ledger:
    fleet = load_fleet(FLEET)
    config = load_service(fleet, fleet.services["frank-medium"])
    assert config.llama is not None and config.profile is not None
    spec, n_max, model = DRAFTERS[row.drafter]
    argv = _argv(config.rendered.argv, {
        "--tensor-split": row.ts, "--ctx-size": str(row.ctx), "--ubatch-size": str(row.ubatch),
        "--parallel": str(row.slots), "--spec-type": spec, "--spec-draft-n-max": n_max,
        "--spec-draft-model": model, "--spec-draft-device": "ROCm1" if spec else None,
        "--mmproj": config.llama.mmproj if row.mmproj else None,
    })
    profiles = ROOT / "fixtures" / "fleet" / "profiles"
    draft = load_profile(profiles / ("dspark-qwen3.8-27b.toml" if row.drafter == "dspark"
                                     else "qwen3.8-27b-dflash2.toml")) if model else None
    projector = load_profile(profiles / "mmproj-bf16-swift-qwen3.8-27b.toml")
    cards = [Card(name=d.name, vram_bytes=d.vram_bytes) for d in config.host.cards]
    return build_ledger(parse_llama_server(argv), config.profile, cards=cards, draft=draft,
                        projector=projector, calibrations=calibrations)


def _measured_used(row: Row, card: int) -> float:
    value = row.measured[card]
    return value if row.kind == "used" else 31.86 - value


def _derived(ledger: Ledger, card: int) -> int:
    """Everything the ledger derives on a card: all but the compute buffers."""
    return sum(b.bytes for b in ledger.cards[card].buffers if b.buffer != "compute")


# E.14, card 1 (GB, as printed): the same binary at 262144 / 1 slot, b/ub 2048/512, no mmproj; the era's
# split is not stated, 38,27 (balanced at that batch, E.5) is assumed.
E14 = {"none": 26.07, "mtp": 29.35, "dflash2": 29.42}
E14_ROW = Row("E.14", "38,27", 262144, 512, "none", False, (0.0, 0.0), "used", slots=1)


def derive_set_a() -> list[Calibration]:
    """The ubatch-512 calibrations of fleet.toml, derived from the boots they name.

    MTP and DFlash2 compute: E.14's card-1 difference against the drafterless run, less what the ledger
    derives for the drafter there (weights, KV, the extra recurrent rows). Target compute: E.29's rocm-smi
    used, less everything else the ledger holds on the card (ROCm1: and the MTP compute).
    """
    base = ledger_for(dataclasses.replace(E14_ROW, drafter="none"), [])
    found = []
    for drafter, context in (("mtp", "mtp"), ("dflash2", "draft")):
        armed = ledger_for(dataclasses.replace(E14_ROW, drafter=drafter), [])
        difference = round((E14[drafter] - E14["none"]) * 1e9)
        compute = difference - (_derived(armed, 1) - _derived(base, 1))
        found.append(Calibration(device="ROCm1", context=context, bytes=compute, ubatch=512,
                                 boot=f"E.14 spec A/B, card 1, {drafter} vs none"))
    anchor = next(r for r in ROWS if r.source == "E.29")
    ledger = ledger_for(anchor, [])
    mtp = found[0].bytes
    for i, device in enumerate(ledger.cards):
        used = round(_measured_used(anchor, i) * GiB)
        compute = used - _derived(ledger, i) - (mtp if device.card.name == "ROCm1" else 0)
        found.append(Calibration(device=device.card.name, context="target", bytes=compute, ubatch=512,
                                 boot=f"E.29 rocm-smi part 3, {device.card.name}"))
    return found


def calibrate_b() -> list[Calibration]:
    """Compute at ubatch 1536 per card: E.6 36,29's used VRAM minus everything else the ledger holds."""
    anchor = next(r for r in ROWS if r.source == "E.6" and r.ts == "36,29")
    ledger = ledger_for(anchor, [])
    found = []
    for i, device in enumerate(ledger.cards):
        residual = round(_measured_used(anchor, i) * GiB) - _derived(ledger, i)
        found.append(Calibration(device=device.card.name, context="target", bytes=residual, ubatch=1536,
                                 boot=SET_B_BOOT))
        # the drafter's own compute is inside this figure: zero it so it is not counted twice
        found.append(Calibration(device=device.card.name, context="draft", bytes=0, ubatch=1536,
                                 boot=SET_B_BOOT))
    return found


def main(argv: list[str]) -> int:
    if "--no-rollback" in argv:
        # hypothesis: a build that keeps no recurrent rollback rows for drafters (n_rs_seq = 0)
        import fleetgate.ledger.recurrent

        fleetgate.ledger.recurrent.ROLLBACK_DRAFTERS = frozenset()
    set_a = derive_set_a()
    set_b = calibrate_b()
    print("| source | -ts | ctx | ub | drafter | mmproj | card | measured | ledger | residual | basis |")
    print("|---|---|---:|---:|---|---|---|---:|---:|---:|---|")
    for row in ROWS:
        calibrations = set_a if row.ubatch == 512 else set_b
        ledger = ledger_for(row, calibrations)
        anchor = (row.source == "E.29") or (row.source == "E.6" and row.ts == "36,29")
        for i, device in enumerate(ledger.cards):
            used = device.total / GiB
            predicted = used if row.kind == "used" else 31.86 - used
            measured = row.measured[i]
            basis = "calibration row" if anchor else ("set A" if row.ubatch == 512 else "set B")
            print(f"| {row.source} | {row.ts} | {row.ctx} | {row.ubatch} | {row.drafter} | "
                  f"{'BF16' if row.mmproj else 'no'} | {device.card.name} {row.kind} | {measured:.2f} | "
                  f"{predicted:.2f} | {predicted - measured:+.2f} | {basis} |")
    print()
    for cal in (*set_a, *set_b):
        if cal.bytes:
            print(f"- {cal.device} {cal.context} ubatch {cal.ubatch}: {cal.bytes:,} B "
                  f"({cal.bytes / GiB:.2f} GiB), {cal.boot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

