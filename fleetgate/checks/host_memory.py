"""Host checks on memory: host RAM against the engine's pin gate (B-RAM-1, C-H-1, INC-75), and each card's
used VRAM against the ledger and the host's floor (C-H-3, C-H-5, INC-10).

``host-memavailable`` answers the operator's question before a (re)start: would the engine's pin gate clear
now? The gate is declared in fleet.toml (``[services.NAME.pin_gate]``: what the engine pins plus its own
floor); MemAvailable is read from the host's ``/proc/meminfo`` (or the file the gate names, the serve
script's seam, B-SH-5). A running engine's anonymous resident memory (``RssAnon`` of
``/proc/<MainPID>/status``) is released when it stops, so a restart has that much more: it is added.
Its file-backed pages (an mmapped model) are not: they stay in the page cache after exit, and MemAvailable
already counts the part of it the kernel can reclaim. Locked file pages (``VmLck``) would become reclaimable
too and are not credited, so for an engine that mlocks its checkpoint the verdict errs towards "short".
"""

from __future__ import annotations

from fleetgate.checks import NotApplicable, NotJudged, host_check
from fleetgate.checks._common import gib, no_cards, no_profile
from fleetgate.host import (
    NVIDIA_SMI,
    ROCM_SMI,
    HostReadError,
    HostTarget,
    SmiCard,
    meminfo,
    parse_nvidia_smi,
    parse_rocm_smi,
)
from fleetgate.ledger.service import service_ledger
from fleetgate.visibility import Unresolved

__all__: list[str] = []

VRAM = "host-vram-vs-ledger"


def _declares_gate(target: HostTarget) -> str | None:
    if target.config.service.pin_gate is None:
        return (f"{target.name} declares no pin gate: add [services.{target.name}.pin_gate] with pinned_gib (what the "
                "engine pins in RAM) and floor_gib (its own floor) to fleet.toml to hold the host's MemAvailable to it")
    return None


@host_check(
    cites=("B-RAM-1", "B-RAM-2", "B-SH-5", "C-H-1", "INC-75"),
    summary="MemAvailable (plus what the running engine would release) clears the declared pin gate",
    requires=_declares_gate,
    codes={
        "meminfo-unreadable": "the host's /proc/meminfo (or the file the pin gate names) cannot be read",
        "meminfo-unparseable": "the meminfo file has no `MemAvailable` line (not /proc/meminfo, or a kernel before 3.14)",
        "short": "MemAvailable plus the engine's RssAnon is short of the declared pin gate: a restart would be refused (INC-75)",
        "process-unreadable": "the engine's process cannot be looked up: systemctl or /proc refused the read",
    },
)
def host_memavailable(target: HostTarget) -> None:
    gate = target.config.service.pin_gate
    assert gate is not None
    path = gate.meminfo
    where = f"{target.spec} {path}"
    try:
        text: str = target.host.file(path).content_string
    except Exception as exc:  # testinfra raises its own errors (or a plain one from the backend) for an unreadable file
        raise host_memavailable.fail(target, "meminfo-unreadable", where=where,
                             observed=f"{path} cannot be read: {' '.join(str(exc).split())[:200]}",
                             expected="the host's /proc/meminfo (or the file the pin gate names)",
                             fix=f"correct meminfo in {gate.where}, or run the check where {path} is readable") from None
    available = meminfo(text).get("MemAvailable")
    if available is None:
        first = text.strip().splitlines()[0][:120] if text.strip() else "(empty)"
        raise host_memavailable.fail(target, "meminfo-unparseable", where=where,
                             observed=f"no 'MemAvailable: N kB' line in {path} (it begins: {first!r})",
                             expected="a /proc/meminfo with MemAvailable (Linux 3.14 or later)",
                             fix=f"point meminfo in {gate.where} at the host's /proc/meminfo")
    released, how = _released(target)
    after = available + released
    if after < gate.gate_bytes:
        short = gate.gate_bytes - after
        raise host_memavailable.fail(target, "short", where=where,
                             observed=(f"MemAvailable {gib(available)} + {how} = {gib(after)}: "
                                       f"{gib(short)} short of the pin gate"),
                             expected=(f"at least {gib(gate.gate_bytes)} (pinned {gib(gate.pinned_bytes)} + the engine's floor "
                                       f"{gib(gate.floor_bytes)}, {gate.where})"),
                             details=["RssAnon is what the engine's exit releases; its file-backed and locked pages are not "
                                      "counted, so an engine that mlocks its checkpoint may clear with less"],
                             fix=("a (re)start now would be refused by the pin gate (a crash loop under Restart=, INC-75): "
                                  "find what holds the RAM (a dying engine, page cache of another pool) and wait for it, "
                                  "or start with the serve script's bounded wait"))


def _released(target: HostTarget) -> tuple[int, str]:
    """What stopping the running engine releases (its RssAnon), and how it was found; 0 when nothing runs."""
    __tracebackhide__ = True
    try:
        pid, how = target.main_pid()
        if pid is None:
            return 0, f"0 B released ({target.name} is not running: {how} found none)"
        status = meminfo(target.proc_text(pid, "status"))
    except HostReadError as exc:
        raise host_memavailable.fail(target, "process-unreadable", where=target.spec,
                             observed=str(exc),
                             expected=f"{target.name}'s engine (or its absence), read through systemctl and /proc",
                             fix="run the check as root on the host (testinfra's --sudo), where systemctl reaches the manager") from None
    anon = status.get("RssAnon")
    if anon is None:  # a kernel before 4.5: nothing credited, which errs towards "short", never towards a pass
        return 0, f"0 B credited (no RssAnon in /proc/{pid}/status of {how})"
    return anon, f"{gib(anon)} RssAnon of PID {pid} released by the restart ({how})"


def _has_ledger(target: HostTarget) -> str | None:
    config = target.config
    if config.service.engine != "llama.cpp":
        return (f"{target.name} runs {config.service.engine}; the ledger is llama.cpp's (fleetgate fit), "
                "so there is no prediction to hold the cards to")
    # a CPU-only host has no card to hold to the ledger (does not apply) before a missing profile (not judged)
    why = no_cards(config) or no_profile(config, "block_count")
    if why:
        return why
    if config.host.ledger_tolerance_bytes is None:
        return (f"host {config.host.name} declares no ledger_tolerance_gib: declare how much more a card may use than "
                f"the ledger predicts in hosts.{config.host.name} (fleet.toml) to hold its cards to the ledger")
    return None


def _smi(target: HostTarget) -> tuple[str, list[SmiCard]]:
    """The tool the host has (the cards' vendor's first), its command and its cards."""
    __tracebackhide__ = True
    names = [d.name for d in target.config.host.cards]
    order = (ROCM_SMI, NVIDIA_SMI) if any(n.startswith("ROCm") for n in names) else (NVIDIA_SMI, ROCM_SMI)
    command = next((c for c in order if target.host.exists(c.split()[0])), None)
    if command is None:
        raise NotApplicable(f"neither nvidia-smi nor rocm-smi is on {target.spec}'s PATH: no per-card VRAM to read "
                            "(install the vendor's SMI tool, or run the check where it is)")
    result = target.host.run(command)
    where = f"{target.spec} {command}"
    if result.rc != 0:
        raise host_vram_vs_ledger.fail(target, "smi-failed", where=where,
                              observed=f"exited {result.rc}: {' '.join((result.stderr or result.stdout).split())[:200]}",
                              expected="the cards' memory figures", fix="run the tool by hand on the host: the driver may be down")
    try:
        cards = (parse_rocm_smi if command == ROCM_SMI else parse_nvidia_smi)(result.stdout)
    except ValueError as exc:
        raise host_vram_vs_ledger.fail(target, "unparseable", where=where,
                              observed=str(exc), expected="the tool's documented output for this query",
                              fix="a tool version whose output fleetgate does not read: report it with the output") from None
    return command, cards


@host_check(
    cites=("C-H-3", "C-H-5", "INC-10", "B-FIT-1"),
    summary="each card's used VRAM (nvidia-smi, rocm-smi) is within the declared tolerance of the ledger and keeps the floor",
    requires=_has_ledger,
    codes={
        "smi-failed": "nvidia-smi or rocm-smi exited non-zero: no card figures (the driver may be down)",
        "unparseable": "the SMI tool's output is not the documented shape fleetgate reads for this query",
        "card-count": "the SMI tool shows another number of cards than `hosts.NAME.devices` declares",
        "hotter": "a card uses more VRAM than the ledger predicts, beyond the host's `ledger_tolerance_gib` (INC-10)",
        "colder": "a card uses less VRAM than the ledger predicts, beyond tolerance: no engine holds what the files place there",
        "below-floor": "a serving card has less free VRAM than the host's `card_floor_gib`",
    },
)
def host_vram_vs_ledger(target: HostTarget) -> None:
    config = target.config
    host = config.host
    command, cards = _smi(target)
    where = f"{target.spec} {command}"
    declared = host.devices
    fleet_where = config.fleet.where
    if len(cards) != len(declared):
        raise host_vram_vs_ledger.fail(target, "card-count", where=where,
                              observed=f"{len(cards)} card(s): " + ", ".join(f"#{c.index} {gib(c.total)}" for c in cards),
                              expected=f"{len(declared)}, as hosts.{host.name}.devices declares "
                                       f"({fleet_where('hosts', host.name, 'devices')}): " + ", ".join(d.name for d in declared),
                              fix="a card is missing from the driver (reseat, link, driver) or fleet.toml's devices are stale")
    tolerance = host.ledger_tolerance_bytes
    assert tolerance is not None
    by_name = {d.name: i for i, d in enumerate(declared)}
    try:
        ledger = service_ledger(config)
    except Unresolved as exc:
        raise NotJudged(exc) from None
    within = (f"the ledger of the rendered config, fleetgate fit {target.name}; "
              f"tolerance: {fleet_where('hosts', host.name, 'ledger_tolerance_gib')}")
    per_card = [f"{x.card.shown}: ledger {gib(x.total)}, {command.split()[0]} {gib(cards[by_name[x.card.host_name]].used)}"
                for x in ledger.cards]
    for d in ledger.cards:
        seen = cards[by_name[d.card.host_name]]
        if seen.used - d.total > tolerance:
            over = seen.used - d.total
            raise host_vram_vs_ledger.fail(target, "hotter", where=where,
                                  observed=f"{d.card.shown} (#{seen.index}) uses {gib(seen.used)}, {gib(over)} more than the ledger",
                                  expected=f"at most {gib(d.total)} + {gib(tolerance)} ({within})", details=per_card,
                                  fix=("the ledger misses a buffer (INC-10: the MTP draft buffers) or another process holds the card: "
                                       "calibrate the service's compute from this boot, and keep the floor with the real figure"))
        if d.total - seen.used > tolerance:
            under = d.total - seen.used
            raise host_vram_vs_ledger.fail(target, "colder", where=where,
                                  observed=f"{d.card.shown} (#{seen.index}) uses {gib(seen.used)}, {gib(under)} less than the ledger",
                                  expected=f"at least {gib(d.total)} - {gib(tolerance)} ({within})", details=per_card,
                                  fix=("the engine is not holding what the files place on this card: it is down, fell back to the "
                                       "CPU, or runs another shape; if it runs as declared, the ledger overcharges: recalibrate"))
    floor = host.card_floor_bytes
    if floor is None:
        return
    for index, device in enumerate(declared):
        if not device.serves:
            continue
        seen = cards[index]
        if seen.free < floor:
            raise host_vram_vs_ledger.fail(target, "below-floor", where=where,
                                  observed=(f"{device.name} (#{seen.index}) has {gib(seen.free)} free "
                                            f"({gib(seen.used)} used of {gib(seen.total)})"),
                                  expected=(f">= {gib(floor)} free (the floor of host {host.name}, "
                                            f"{fleet_where('hosts', host.name, 'card_floor_gib')})"),
                                  fix="the card runs without its floor: a vision request or a longer prompt can OOM it; "
                                      "shrink the context or move a layer (fleetgate fit)")
