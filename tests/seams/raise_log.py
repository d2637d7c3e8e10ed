"""Where the suite's failures were built: the lines of fleetgate/checks (and the endpoint client) on the stack of every
``Failure`` made while ``FLEETGATE_RAISE_LOG`` names a directory, each with the failure's code.

The coverage gate (tests/seams/coverage_gate.py) asks one thing: did a test make each raise site build its failure?
Line coverage answered it by tracing every call of every process, which on Python 3.11 made tests/test_catalogue.py
take 37 % longer (docs/speed.md); this answers it at the one place a failure is made. The root conftest.py installs it in
every pytest process the suite starts (xdist workers, pytester runs of ``live/`` and ``seams/``); each process
appends what it saw to a file of its own in the directory: one line per failure of a new code or stack, ``CODE`` then the
stack's watched ``FILE:LINE``s, tab-separated. The code beside its stack is what the gate holds the source reader's
code-to-site map to (tests/seams/coverage_gate.py: a failure whose code no raise site on its stack names is a site the
reader cannot read).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

RAISE_LOG_ENV = "FLEETGATE_RAISE_LOG"
_PACKAGE = Path(__file__).resolve().parents[2] / "fleetgate"
_WATCHED = (str(_PACKAGE / "checks") + os.sep, str(_PACKAGE / "live" / "endpoint.py"))
_INSTALLED = "_fleetgate_raise_log"


def install(directory: Path) -> None:
    """Record, in ``directory``, the watched lines on the stack of every ``Failure`` this process makes (once per
    process: a second call changes nothing)."""
    from fleetgate.failure import Failure

    if getattr(Failure.__init__, _INSTALLED, False):
        return
    original = Failure.__init__
    seen: set[tuple[str, tuple[str, ...]]] = set()
    log = directory / f"{os.getpid()}.lines"

    def recording_init(self: Failure, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        frame = sys._getframe(1)
        stack = []
        while frame is not None:
            path = frame.f_code.co_filename
            if path.startswith(_WATCHED):
                stack.append(f"{path}:{frame.f_lineno}")
            frame = frame.f_back
        built = (str(getattr(self, "code", "") or "-"), tuple(stack))
        if stack and built not in seen:
            seen.add(built)
            # never the test's failure: a process that cannot reach the directory (another mount namespace) records
            # nothing, and the gate names the sites only it built
            with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as out:
                out.write("\t".join((built[0], *stack)) + "\n")

    setattr(recording_init, _INSTALLED, True)
    Failure.__init__ = recording_init  # type: ignore[method-assign]


Where = tuple[Path, int]


def built(directory: Path) -> set[tuple[str, tuple[Where, ...]]]:
    """Every failure the processes recorded in ``directory``: its code and the watched lines on its stack, innermost
    first."""
    found: set[tuple[str, tuple[Where, ...]]] = set()
    for log in directory.glob("*.lines"):
        for entry in log.read_text(encoding="utf-8").splitlines():
            code, *stack = entry.split("\t")
            wheres = []
            for where in stack:
                path, _, line = where.rpartition(":")
                if line.isdigit():
                    wheres.append((Path(path).resolve(), int(line)))
            found.add((code, tuple(wheres)))
    return found


def recorded(directory: Path) -> set[Where]:
    """Every (file, line) the processes recorded in ``directory``."""
    return {where for _, stack in built(directory) for where in stack}
