"""Host checks on memory: host RAM against the engine's pin gate (B-RAM-1, C-H-1, INC-75).

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

from fleetgate.checks import check
from fleetgate.failure import Failure
from fleetgate.fleet import GIB
from fleetgate.host import HostReadError, HostTarget, meminfo

__all__: list[str] = []

MEM = "host-memavailable"


def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def _declares_gate(target: HostTarget) -> str | None:
    if target.config.service.pin_gate is None:
        return (f"{target.name} declares no pin gate: add [services.{target.name}.pin_gate] with pinned_gib (what the "
                "engine pins in RAM) and floor_gib (its own floor) to fleet.toml to hold the host's MemAvailable to it")
    return None


@check(MEM, kind="host", subject="host", requires=_declares_gate,
       cites=("B-RAM-1", "B-RAM-2", "B-SH-5", "C-H-1", "INC-75"),
       summary="MemAvailable (plus what the running engine would release) clears the declared pin gate")
def host_memavailable(target: HostTarget) -> None:
    gate = target.config.service.pin_gate
    assert gate is not None
    path = gate.meminfo
    where = f"{target.spec} {path}"
    try:
        text: str = target.host.file(path).content_string
    except Exception as exc:  # testinfra raises its own errors (or a plain one from the backend) for an unreadable file
        raise Failure(service=target.name, check=MEM, code=f"{MEM}/meminfo-unreadable", where=where,
                      observed=f"{path} cannot be read: {' '.join(str(exc).split())[:200]}",
                      expected="the host's /proc/meminfo (or the file the pin gate names)",
                      fix=f"correct meminfo in {gate.where}, or run the check where {path} is readable") from None
    available = meminfo(text).get("MemAvailable")
    if available is None:
        first = text.strip().splitlines()[0][:120] if text.strip() else "(empty)"
        raise Failure(service=target.name, check=MEM, code=f"{MEM}/meminfo-unparseable", where=where,
                      observed=f"no 'MemAvailable: N kB' line in {path} (it begins: {first!r})",
                      expected="a /proc/meminfo with MemAvailable (Linux 3.14 or later)",
                      fix=f"point meminfo in {gate.where} at the host's /proc/meminfo")
    released, how = _released(target)
    after = available + released
    if after < gate.gate_bytes:
        short = gate.gate_bytes - after
        raise Failure(service=target.name, check=MEM, code=f"{MEM}/short", where=where,
                      observed=(f"MemAvailable {_gib(available)} + {how} = {_gib(after)}: "
                                f"{_gib(short)} short of the pin gate"),
                      expected=(f"at least {_gib(gate.gate_bytes)} (pinned {_gib(gate.pinned_bytes)} + the engine's floor "
                                f"{_gib(gate.floor_bytes)}, {gate.where})"),
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
        raise Failure(service=target.name, check=MEM, code=f"{MEM}/process-unreadable", where=target.spec,
                      observed=str(exc),
                      expected=f"{target.name}'s engine (or its absence), read through systemctl and /proc",
                      fix="run the check as root on the host (testinfra's --sudo), where systemctl reaches the manager") from None
    anon = status.get("RssAnon")
    if anon is None:  # a kernel before 4.5: nothing credited, which errs towards "short", never towards a pass
        return 0, f"0 B credited (no RssAnon in /proc/{pid}/status of {how})"
    return anon, f"{_gib(anon)} RssAnon of PID {pid} released by the restart ({how})"
