"""The recorded GPU dataset (tests/ledger/data/gpu-h200.json) next to the ledger, offline.

Each recorded boot's command line is parsed as fleetgate parses any llama-server command line, the ledger
is built from the model's profile (tests/ledger/data/profiles/, written by ``fleetgate profile`` from the
same GGUFs) on the machine's devices, and every buffer the engine printed is paired with the ledger's.
``python -m tests.ledger.gpu_dataset`` prints the comparison.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.ledger.accounts import Ledger
from fleetgate.ledger.build import build_ledger
from fleetgate.ledger.devices import Card
from fleetgate.models.profile import load_profile

DATA = Path(__file__).parent / "data"
DATASET = DATA / "gpu-h200.json"
MiB = 1 << 20


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATASET.read_text())
    return data


def argv_of(boot: dict[str, Any]) -> list[str]:
    argv = ["llama-server", "-m", f"{boot['model']}.gguf", "-lv", "4", "--fit", "off"]
    if boot["n_rpc"]:
        argv += ["--rpc", ",".join(f"127.0.0.1:{50052 + i}" for i in range(boot["n_rpc"]))]
    return argv + boot["args"].split()


# What the recorded engines' CPU backend was compiled for, as /proc/cpuinfo names it: run.sh builds with
# GGML_NATIVE=OFF (ggml's portable default: AVX, AVX2, FMA, F16C, BMI2) and tox.ini for x86-64-v3; neither compiles
# AVX-512 or AMX, so a machine's AMX flags (the H200 host's Xeon, the 2-core host) give no AMX buffer type here.
ENGINE_CPU_FLAGS = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})


def ledger_of(boot: dict[str, Any], machine: dict[str, Any]) -> Ledger:
    config = parse_llama_server(argv_of(boot))
    cards: list[Card] = []
    total: int | None = None
    for name, seen in sorted(boot.get("devices_at_start_mib", {}).items()):
        total = seen["total_mib"] * MiB  # the total the engine sees: what a --card gives
        cards.append(Card(name=name, vram_bytes=total))
    cards += [Card(name=f"RPC{i}", vram_bytes=total, buffer_name=f"RPC{i}", endpoint=f"127.0.0.1:{50052 + i}",
                   kind=boot["rpc_backend"]) for i in range(boot["n_rpc"])]
    draft = load_profile(DATA / "profiles" / f"{boot['draft']}.toml") if boot.get("draft") else None
    projector = load_profile(DATA / "profiles" / f"{boot['projector']}.toml") if boot.get("projector") else None
    return build_ledger(config, load_profile(DATA / "profiles" / f"{boot['model']}.toml"), cards=cards,
                        draft=draft, projector=projector,
                        cpu_features=frozenset(machine["cpu_features"]) & ENGINE_CPU_FLAGS)


@dataclass(frozen=True)
class Row:
    boot: str
    device: str
    buffer: str
    context: str
    predicted: int | None
    mib: str | None
    exact: int | None

    @property
    def observed(self) -> float | None:
        if self.exact is not None:
            return float(self.exact)
        return None if self.mib is None else float(self.mib) * MiB

    @property
    def equal(self) -> bool:
        if self.predicted is None or self.mib is None:
            return False
        if self.exact is not None:
            return self.predicted == self.exact
        return f"{self.predicted / MiB:.2f}" == self.mib

    @property
    def error(self) -> float:
        observed = self.observed
        if self.predicted is None or not observed:
            return float("inf")
        return (self.predicted - observed) / observed


def rows(boot: dict[str, Any], ledger: Ledger) -> Iterator[Row]:
    predicted: dict[tuple[str, str, str], int] = {}
    for device in (*ledger.devices, ledger.host):
        for b in device.buffers:
            key = (b.device_label, b.buffer, b.context)
            predicted[key] = predicted.get(key, 0) + b.bytes
    seen = set()
    for b in boot["buffers"]:
        key = (b["device"], b["buffer"], b["context"])
        seen.add(key)
        yield Row(boot["id"], *key, predicted.get(key), b["mib"], b["bytes"])
    for key, nbytes in predicted.items():
        # the engine prints no buffer for its runtime, for what grows later, nor for the mmproj's weights
        if key not in seen and key[1] not in ("output growth", "runtime", "runtime growth") \
                and key[1:] != ("model", "projector"):
            yield Row(boot["id"], *key, nbytes, None, None)


CPU_DATASET = DATA / "cpu-rpc.json"
TWO_GPU_DATASET = DATA / "gpu-h200-x2.json"


def compute_under(boots: list[dict[str, Any]], machine: dict[str, Any]) -> tuple[dict[tuple[str, str], tuple[float, float]], int]:
    """Every compute buffer of ``boots`` the ledger books under the engine, (boot, device) -> (ledger MiB, engine MiB),
    and how many compute buffers were compared."""
    found = {}
    compared = 0
    for boot in boots:
        for r in rows(boot, ledger_of(boot, machine)):
            if r.buffer != "compute":
                continue
            assert r.predicted is not None and r.observed is not None, (boot["id"], r.device)
            compared += 1
            if r.predicted < r.observed:
                found[(r.boot, r.device)] = (round(r.predicted / MiB, 2), round(r.observed / MiB, 2))
    return found, compared


def buffers_off_but_compute(boots: list[dict[str, Any]], machine: dict[str, Any]) -> tuple[dict[str, int], int]:
    """Every buffer of ``boots`` but compute that the ledger does not give to the byte, as boot -> how many, with the
    boots whose ledger names another number of such buffers than the engine allocated; and how many were compared."""
    off: dict[str, int] = {}
    compared = 0
    for boot in boots:
        found = [r for r in rows(boot, ledger_of(boot, machine)) if r.buffer != "compute"]
        unequal = sum(1 for r in found if not r.equal)
        if unequal or len(found) != sum(1 for b in boot["buffers"] if b["buffer"] != "compute"):
            off[boot["id"]] = unequal
        compared += len(found)
    return off, compared


def datasets() -> list[dict[str, Any]]:
    """The GPU, the CPU/RPC and the two-GPU datasets, in that order."""
    return [json.loads(path.read_text()) for path in (DATASET, CPU_DATASET, TWO_GPU_DATASET)]


@dataclass(frozen=True)
class ComputeRow:
    boot: str
    device: str
    context: str
    role: str
    estimate: int
    observed: float

    @property
    def ratio(self) -> float:
        return self.estimate / self.observed


def compute_rows() -> Iterator[ComputeRow]:
    """Every compute buffer of every recorded boot next to the ledger's estimate and the kind of buffer."""
    for data in datasets():
        for boot in data["boots"]:
            if not boot["healthy"]:
                continue
            ledger = ledger_of(boot, data["machine"])
            roles = {(b.device_label, b.context): b.source.split("(", 1)[1].split(")", 1)[0]
                     for d in (*ledger.devices, ledger.host) for b in d.buffers
                     if b.buffer == "compute" and b.basis == "estimate"}
            for r in rows(boot, ledger):
                if r.buffer == "compute" and r.observed and r.predicted is not None:
                    yield ComputeRow(r.boot, r.device, r.context, roles.get((r.device, r.context), "?"),
                                     r.predicted, r.observed)


def needed_factors() -> dict[tuple[str, str, str], tuple[str, float]]:
    """Per compute buffer (boot, device, context): its kind and the factor that puts its estimate exactly at the
    engine's buffer. An estimate is linear in its factor (the structural peak times the factor, plus the fixed
    COMPUTE_MARGIN), so the ledger is built with every factor at 0 and at 1 and the line is solved."""
    from fleetgate.ledger import compute
    kept = compute.COMPUTE_FACTORS
    floors = compute.attention_floor, compute.host_inputs
    built: list[dict[tuple[str, str, str], ComputeRow]] = []
    try:
        # the floors traced from the source are not scaled by any factor: the factors are fitted without them
        compute.attention_floor = compute.host_inputs = lambda *a, **k: 0  # type: ignore[assignment]
        for factor in (0.0, 1.0):
            compute.COMPUTE_FACTORS = {key: factor for key in kept}  # type: ignore[misc]
            built.append({(r.boot, r.device, r.context): r for r in compute_rows()})
    finally:
        compute.COMPUTE_FACTORS = kept  # type: ignore[misc]
        compute.attention_floor, compute.host_inputs = floors  # type: ignore[assignment]
    at_0, at_1 = built
    return {key: (row.role, (row.observed - at_0[key].estimate) / (row.estimate - at_0[key].estimate))
            for key, row in at_1.items() if row.estimate > at_0[key].estimate}


def factors() -> None:
    """The smallest factor per kind of buffer that keeps every estimate at or above the engine."""
    by_role: dict[str, list[ComputeRow]] = {}
    for row in compute_rows():
        by_role.setdefault(row.role, []).append(row)
    needed = needed_factors()
    for role, found in sorted(by_role.items()):
        need = max((f for r, f in needed.values() if r == role), default=float("nan"))
        print(f"{role:12s} n={len(found):3d} factor needed {need:.4f}; ratios {min(r.ratio for r in found):.2f}"
              f"..{max(r.ratio for r in found):.2f}")
        for r in sorted(found, key=lambda r: r.ratio):
            print(f"    {r.boot:28s} {r.device:10s} {r.context:6s} est {r.estimate / MiB:8.2f} obs "
                  f"{r.observed / MiB:8.2f} {r.ratio - 1:+.0%}")


def markdown() -> None:
    """The tables of docs/ledger.md's GPU section."""
    print("| boot | dataset | buffers equal (in bytes) | compute: estimate / engine (MiB) |")
    print("|---|---|---|---|")
    names = ("H200", "CPU/RPC", "2xH200")
    for name, data in zip(names, datasets(), strict=True):
        for boot in data["boots"]:
            if not boot["healthy"]:
                print(f"| {boot['id']} | {name} | refused by the engine (the ledger notes it) | - |")
                continue
            found = list(rows(boot, ledger_of(boot, data["machine"])))
            exact = [r for r in found if r.buffer != "compute"]
            ok = sum(r.equal for r in exact)
            in_bytes = sum(r.exact is not None for r in exact)
            compute = ", ".join(f"{r.device} {(r.predicted or 0) / MiB:.2f}/{(r.observed or 0) / MiB:.2f}"
                                for r in found if r.buffer == "compute" and r.context == "target")
            held = " (held out)" if boot.get("held_out") else ""
            print(f"| {boot['id']}{held} | {name} | {ok}/{len(exact)} ({in_bytes}) | {compute} |")
    print()
    print("| kind of buffer | buffers | factor | estimate / engine: min | median | max |")
    print("|---|---:|---:|---:|---:|---:|")
    by_role: dict[str, list[float]] = {}
    for row in compute_rows():
        by_role.setdefault(row.role, []).append(row.ratio)
    from fleetgate.ledger.compute import COMPUTE_FACTORS
    for role, ratios in sorted(by_role.items()):
        ratios.sort()
        factor = COMPUTE_FACTORS.get(tuple(role.split("/")))  # type: ignore[arg-type]
        shown = "-" if factor is None else f"{factor:.2f}"  # the mmproj's buffers take no factor
        print(f"| {role} | {len(ratios)} | {shown} | {ratios[0] - 1:+.0%} | "
              f"{ratios[len(ratios) // 2] - 1:+.0%} | {ratios[-1] - 1:+.0%} |")
    print()
    print("| boot | device | llama-fit-params model / context / compute | engine (breakdown) model / context "
          "/ compute | ledger model / context / compute |")
    print("|---|---|---|---|---|")
    for data in datasets():
        for boot in data["boots"]:
            fit = boot.get("fit_params_mib")
            if not fit or not boot["healthy"]:
                continue
            ledger = ledger_of(boot, data["machine"])
            engine = {b["dev"]: b for b in boot["breakdown_mib"]}
            for device, (model, context, compute) in fit.items():
                d = ledger.host if device == "Host" else next(x for x in ledger.devices if x.card.name == device)
                ctx = d.term("kv") + d.term("recurrent")
                mdl = d.term("model") + (d.term("output") if device != "Host" else 0)
                e = engine.get(device, {})
                print(f"| {boot['id']} | {device} | {model} / {context} / {compute} | {e.get('model', '-')} / "
                      f"{e.get('context', '-')} / {e.get('compute', '-')} | {mdl / MiB:.0f} / {ctx / MiB:.0f} / "
                      f"{d.term('compute') / MiB:.0f} |")


def main() -> None:
    import sys
    if "--factors" in sys.argv:
        factors()
        return
    if "--markdown" in sys.argv:
        markdown()
        return
    for data in datasets():
        for boot in data["boots"]:
            if not boot["healthy"]:
                print(f"{boot['id']}: refused by the engine: {boot['error']}")
                continue
            for r in rows(boot, ledger_of(boot, data["machine"])):
                mark = "=" if r.equal else ("+" if r.error >= 0 else "-")
                print(f"{r.boot:26s} {r.device:10s} {r.buffer:9s} {r.context:6s} {r.predicted!s:>11s} "
                      f"{r.exact if r.exact is not None else r.mib!s:>11s} {mark} {r.error:+.1%}")


if __name__ == "__main__":
    main()
