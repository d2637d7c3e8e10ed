"""``fleetgate init --probe``: the cards and RAM of the machine it runs on, read from ``nvidia-smi`` (or
``rocm-smi``) and ``/proc/meminfo``, only when asked."""

from __future__ import annotations

import csv
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fleetgate.host import ROCM_SMI, parse_rocm_smi
from fleetgate.host import meminfo as read_meminfo

__all__ = ["Card", "HostFacts", "probe_host"]


@dataclass(frozen=True)
class Card:
    name: str
    vram_bytes: int
    model: str


@dataclass(frozen=True)
class HostFacts:
    """What ``--probe`` read on this machine."""

    cards: tuple[Card, ...]
    ram_gib: float | None
    source: str


# --- the host, when asked ----------------------------------------------------------------------------------------


def probe_host(*, meminfo: Path = Path("/proc/meminfo"), timeout: float = 10.0) -> tuple[HostFacts, list[str]]:
    """The cards of this machine from ``nvidia-smi`` (else ``rocm-smi``, read as the host checks read it) and its
    RAM from ``meminfo`` (``fleetgate.host.meminfo``).

    Returns the facts and one line per tool that could not answer. Device names are the engine's
    (``CUDA0``, ``ROCm0``), in the order the tool lists the cards.
    """
    problems: list[str] = []
    cards: tuple[Card, ...] = ()
    source = ""
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"], timeout, problems)
        if out is not None:
            parsed: list[Card] = []
            for number, row in enumerate(csv.reader(out.splitlines()), start=1):
                if not row:
                    continue
                try:
                    mib = int(float(row[-1].strip()))
                except (ValueError, IndexError):
                    problems.append(f"nvidia-smi line {number}: {','.join(row)!r}; expected NAME, MEMORY_MIB")
                    parsed = []
                    break
                parsed.append(Card(f"CUDA{len(parsed)}", mib << 20, ",".join(row[:-1]).strip()))
            cards = tuple(parsed)
            source = "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
    elif shutil.which("rocm-smi"):
        out = _run(ROCM_SMI.split(), timeout, problems)
        if out is not None:
            try:
                cards = tuple(Card(f"ROCm{i}", c.total, f"card{c.index}") for i, c in enumerate(parse_rocm_smi(out)))
                source = ROCM_SMI
            except ValueError as exc:
                problems.append(f"--probe: {ROCM_SMI}: {exc}")
    else:
        problems.append("--probe: neither nvidia-smi nor rocm-smi is on PATH; the cards stay TODO")

    ram_gib = None
    try:
        total = read_meminfo(meminfo.read_text(encoding="utf-8")).get("MemTotal")
        ram_gib = round(total / (1 << 30), 1) if total else None
    except (OSError, UnicodeDecodeError):
        pass
    if ram_gib is None:
        problems.append(f"--probe: cannot read MemTotal from {meminfo}; ram_gib stays TODO")
    return HostFacts(cards=cards, ram_gib=ram_gib, source=source), problems


def _run(argv: list[str], timeout: float, problems: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"--probe: {argv[0]} did not answer ({exc})")
        return None
    if done.returncode != 0:
        problems.append(f"--probe: {argv[0]} exited {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}")
        return None
    return done.stdout
