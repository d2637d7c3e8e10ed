"""``fleetgate init --probe``: the cards and RAM of the machine it runs on, read from ``nvidia-smi`` (or
``rocm-smi``, or ``vulkaninfo`` where neither is there) and ``/proc/meminfo``, only when asked."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fleetgate.host import ROCM_SMI, parse_rocm_smi
from fleetgate.host import meminfo as read_meminfo

__all__ = ["VULKANINFO", "VULKANINFO_SUMMARY", "Card", "HostFacts", "parse_vulkaninfo", "probe_host"]

VULKANINFO_SUMMARY = "vulkaninfo --summary"
VULKANINFO = "vulkaninfo --text"


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
    """The cards of this machine from ``nvidia-smi`` (else ``rocm-smi``, read as the host checks read it; else
    ``vulkaninfo``, read as llama.cpp's Vulkan backend lists its devices) and its RAM from ``meminfo``
    (``fleetgate.host.meminfo``).

    Returns the facts and one line per tool that could not answer. Device names are the engine's
    (``CUDA0``, ``ROCm0``, ``Vulkan0``), in the order the tool lists the cards.
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
    elif shutil.which("vulkaninfo"):
        summary = _run(VULKANINFO_SUMMARY.split(), timeout, problems)
        full = _run(VULKANINFO.split(), timeout, problems) if summary is not None else None
        if summary is not None and full is not None:
            try:
                cards = parse_vulkaninfo(summary, full)
                source = f"{VULKANINFO_SUMMARY}, {VULKANINFO}"
            except ValueError as exc:
                problems.append(f"--probe: vulkaninfo: {exc}")
    else:
        problems.append("--probe: none of nvidia-smi, rocm-smi or vulkaninfo is on PATH; the cards stay TODO")

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


_GPU = re.compile(r"^\s*GPU(\d+):\s*$")
_KEY = re.compile(r"^\s*(deviceType|deviceName|deviceUUID)\s*=\s*(.*?)\s*$")
_HEAP = re.compile(r"^\s*memoryHeaps\[(\d+)\]:\s*$")
_SIZE = re.compile(r"^\s*size\s*=\s*(\d+)\b")
_GPU_TYPES = ("PHYSICAL_DEVICE_TYPE_DISCRETE_GPU", "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU")


def _sections(text: str) -> dict[int, list[str]]:
    """The lines under each ``GPU<id>:`` header of vulkaninfo's output (its ``ObjectWrapper(p, "GPU" + id)``)."""
    sections: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        found = _GPU.match(line)
        if found:
            current = sections.setdefault(int(found.group(1)), [])
        elif current is not None:
            current.append(line)
    return sections


def _device_memory(lines: list[str], integrated: bool) -> int | None:
    """What llama.cpp's Vulkan backend takes as the device's memory: the sum of its device-local heaps (every heap of
    an integrated GPU), ggml-vulkan.cpp ``ggml_backend_vk_get_device_memory``."""
    heaps: dict[int, tuple[int, bool]] = {}
    heap: int | None = None
    for line in lines:
        if line.strip().startswith("memoryTypes"):
            heap = None
            continue
        found = _HEAP.match(line)
        if found:
            heap = int(found.group(1))
            heaps[heap] = (0, False)
            continue
        if heap is None:
            continue
        size = _SIZE.match(line)
        if size:
            heaps[heap] = (int(size.group(1)), heaps[heap][1])
        elif "MEMORY_HEAP_DEVICE_LOCAL_BIT" in line:
            heaps[heap] = (heaps[heap][0], True)
    if not heaps:
        return None
    return sum(size for size, local in heaps.values() if local or integrated)


def parse_vulkaninfo(summary: str, full: str) -> tuple[Card, ...]:
    """The devices llama.cpp's Vulkan backend uses by default, named as it names them (``Vulkan0`` ...): of what
    ``vulkaninfo --summary`` lists, the discrete and integrated GPUs (never a CPU implementation such as llvmpipe),
    one per ``deviceUUID`` (a card seen through two drivers is one device), in the loader's order
    (ggml-vulkan.cpp ``ggml_vk_instance_init``); each card's memory from the heaps of ``vulkaninfo --text``.

    Raises ValueError naming what was expected when either output is not vulkaninfo's documented shape."""
    listed = _sections(summary)
    if not listed:
        raise ValueError(f"{VULKANINFO_SUMMARY}: no GPU<N>: section; expected its Devices: list")
    heaps = _sections(full)
    cards: list[Card] = []
    seen: set[str] = set()
    for gpu, lines in sorted(listed.items()):
        keys = {m.group(1): m.group(2) for m in (_KEY.match(line) for line in lines) if m}
        if "deviceType" not in keys or "deviceName" not in keys:
            raise ValueError(f"{VULKANINFO_SUMMARY}: GPU{gpu} has no deviceType/deviceName line")
        if keys["deviceType"] not in _GPU_TYPES:
            continue  # llama.cpp takes a CPU implementation only where there is no GPU at all
        uuid = keys.get("deviceUUID", "")
        if uuid and uuid in seen:
            continue
        seen.add(uuid)
        memory = _device_memory(heaps.get(gpu, []), keys["deviceType"].endswith("INTEGRATED_GPU"))
        if memory is None:
            raise ValueError(f"{VULKANINFO}: GPU{gpu} ({keys['deviceName']}) has no memoryHeaps[N]: size = BYTES "
                             "lines; expected its VkPhysicalDeviceMemoryProperties")
        cards.append(Card(f"Vulkan{len(cards)}", memory, keys["deviceName"]))
    return tuple(cards)
