"""An engine the suite or `fleetgate reference` starts never outlives a killed parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = """
import subprocess, sys
from fleetgate.reference import die_with_parent
# an engine that does not end on SIGTERM, as llama-server did once its worker was killed
engine = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
child = subprocess.Popen([sys.executable, "-c", engine], start_new_session=True,
                         preexec_fn=die_with_parent, stdin=subprocess.DEVNULL)
print(child.pid, flush=True)
import time; time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_an_engine_dies_when_its_parent_is_killed() -> None:
    # The child is in a session of its own (as the engines are), so only the kernel's parent-death signal reaches it.
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), f"pid {child} outlived its killed parent"
    finally:
        parent.stdout.close()
        if _alive(child):
            os.kill(child, signal.SIGKILL)
