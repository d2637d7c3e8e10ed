"""A crashed or killed run leaves nothing behind: no process, no scratch directory.

The sandboxed path writes nothing on this machine (each run's spec travels over a socket, its files live in its own
tmpfs), and its sandbox parent ends with its owner. The unconfined fallback's scratch directories carry their owner's
PID, and those of a dead owner are removed by the next run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from fleetgate import sandbox


def _dead_pid() -> int:
    probe = subprocess.Popen(["/bin/true"])
    probe.wait()
    return probe.pid


def test_scratch_of_a_dead_owner_is_removed_and_nothing_else(tmp_path: Path) -> None:
    dead = _dead_pid()
    names = [f"{sandbox.SCRATCH_PREFIX}{dead}-x1", f"{sandbox.SCRATCH_PREFIX}{os.getpid()}-x2",
             "fleetgate-sandbox-cache-0zesm0ym", f"{sandbox.SCRATCH_PREFIX}n42t4y44", "unrelated"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text("x", encoding="utf-8")
    (tmp_path / f"{sandbox.SCRATCH_PREFIX}{dead}-file").write_text("not a directory", encoding="utf-8")
    assert sandbox.sweep_scratch(str(tmp_path)) == [f"{sandbox.SCRATCH_PREFIX}{dead}-x1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[1:], f"{sandbox.SCRATCH_PREFIX}{dead}-file"])


def _processes(needle: bytes) -> list[str]:
    """The processes whose argv[0] is ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.split(b"\0", 1)[0] == needle:
                found.append(f"{entry.name}: {cmdline[:80]!r}")
    return found


def _parents_of(owner: int) -> list[str]:
    """The sandbox parents whose owner is ``owner`` (argv: fleetgate-sandbox -I -S -c TEXT OWNER FD)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0] == b"fleetgate-sandbox" and len(argv) > 5 and argv[5] == str(owner).encode():
                found.append(entry.name)
    return found


def _until(predicate: Callable[[], object], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_killed_owner_leaves_no_process_and_no_scratch() -> None:
    """SIGKILL the process that runs a render (atexit never runs): its sandbox parent, the run's init and the
    command all end, and no scratch directory of that process remains."""
    token = f"fleetgate-leftover-{uuid.uuid4().hex[:12]}"
    code = ("import sys\nfrom fleetgate.sandbox import SandboxSpec, run\nprint('ready', flush=True)\n"
            f"run(SandboxSpec(['/bin/bash', '-c', 'exec -a {token} sleep 300'], {{'PATH': '/usr/bin:/bin'}}, timeout=60),"
            " what='x')\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert owner.stdout is not None
    try:
        assert owner.stdout.readline() == b"ready\n"
        assert _until(lambda: _processes(token.encode()), 20), "the sandboxed command never started"
        assert _parents_of(owner.pid) != []  # the parent (and the run's unsharer and init, forks of it)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        owner.stdout.close()
    assert _until(lambda: not _processes(token.encode()) and not _parents_of(owner.pid), 10), \
        (_processes(token.encode()), _parents_of(owner.pid))
    places = {sandbox.scratch_dir() or "/tmp", os.environ.get("TMPDIR", "/tmp"), "/dev/shm"}
    left = [f"{place}/{name}" for place in places if os.path.isdir(place) for name in os.listdir(place)
            if name.startswith(f"{sandbox.SCRATCH_PREFIX}{owner.pid}-")]
    assert left == []
