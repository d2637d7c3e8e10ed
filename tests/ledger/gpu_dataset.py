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
from fleetgate.fit import Card, Ledger, build_ledger
from fleetgate.profile import load_profile

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


def ledger_of(boot: dict[str, Any], machine: dict[str, Any]) -> Ledger:
    config = parse_llama_server(argv_of(boot))
    total = boot["devices_at_start_mib"].get("CUDA0", {}).get("total_mib", 143155) * MiB
    cards = [Card(name="CUDA0", vram_bytes=total)]
    cards += [Card(name=f"RPC{i}", vram_bytes=total, buffer_name=f"RPC{i}", endpoint=f"127.0.0.1:{50052 + i}",
                   kind=boot["rpc_backend"]) for i in range(boot["n_rpc"])]
    return build_ledger(config, load_profile(DATA / "profiles" / f"{boot['model']}.toml"), cards=cards,
                        cpu_features=frozenset(machine["cpu_features"]))


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
        if key not in seen and key[1] not in ("output growth",):
            yield Row(boot["id"], *key, nbytes, None, None)


def main() -> None:
    data = load()
    for boot in data["boots"]:
        if not boot["healthy"]:
            print(f"{boot['id']}: refused by the engine: {boot['error']}")
            continue
        ledger = ledger_of(boot, data["machine"])
        for r in rows(boot, ledger):
            mark = "=" if r.equal else ("+" if r.error >= 0 else "-")
            print(f"{r.boot:26s} {r.device:10s} {r.buffer:9s} {r.context:6s} {r.predicted!s:>11s} "
                  f"{r.exact if r.exact is not None else r.mib!s:>11s} {mark} {r.error:+.1%}")


if __name__ == "__main__":
    main()
