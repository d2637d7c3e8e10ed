"""The render's types: what every start shape builds, and the one path mapping they share.

A render of any start shape is a ``Rendered``: the engine's argv and environment, and where each variable of the
environment the service starts with was set (``Origin``); the serve script run in the sandbox
(fleetgate.render.script) adds the files it sourced (``SourcedFile``), the files it tested (``FileTest``) and bash's
trace. A script that exits without starting the engine is ``RenderRefused``. ``map_to_repo`` reads a host path under
``deploy_root`` as the repository's file, the way every shape names the repository's files.

A ``Rendered`` says which start shape it came from (``start``, fleetgate.render.start), with what that shape's reader
read. ``Origin`` and ``map_to_repo`` live below the readers (fleetgate.render.origins) and are named here too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgate.errors import InputError
from fleetgate.render.origins import SYSTEMD_DEFAULT_PATH, Origin, map_to_repo
from fleetgate.render.start import Start

if TYPE_CHECKING:
    from fleetgate.units import Unit

__all__ = ["SYSTEMD_DEFAULT_PATH", "TRACE_LINE", "FileTest", "Origin", "RenderRefused", "Rendered", "SourcedFile",
           "map_to_repo"]

# A line of bash's trace of the serve script (``set -x``): ``+FILE:LINE: command``, one ``+`` per level of nesting.
TRACE_LINE = re.compile(r"^\++(?P<file>[^:]+):(?P<line>\d+): ")


@dataclass(frozen=True)
class SourcedFile:
    target: str
    """The path as the script named it (a host path)."""
    inside_repo: bool
    caller: str


@dataclass(frozen=True)
class FileTest:
    op: str
    path: str
    answer: bool
    caller: str


@dataclass(frozen=True)
class Rendered:
    service: str
    argv: tuple[str, ...]
    """The engine's argv; ``argv[0]`` is the binary name as the script invoked it."""
    env: Mapping[str, str]
    """The environment the engine was started with."""
    inputs: Mapping[str, Origin]
    """The environment the unit gave the script, with where each variable was set."""
    sourced: tuple[SourcedFile, ...]
    tests: tuple[FileTest, ...]
    writes: tuple[tuple[str, ...], ...]
    script: Path
    unit: Unit | None
    start: Start
    """The start shape that was rendered, with what its reader read (a compose service, a Kubernetes container, a
    Quadlet's ``[Container]``, a ``docker run`` line a script ran, the port llama-swap forwards to). Readers match on
    its type; ``container_run`` and ``quadlet_of`` (fleetgate.render.start) ask it the two questions that span
    shapes."""
    extra_invocations: tuple[tuple[str, ...], ...] = field(default=())
    trace: str = ""
    """bash's own trace of the run (``set -x``, each line ``+FILE:LINE: command``): where a value was made."""
    notes: tuple[str, ...] = ()
    """What the render had to assume, one line each (a directory the repository does not hold made a placeholder,
    an engine stubbed at a path the repository does not hold, a specifier that needs the host)."""

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[1:]

    def first_traced(self, needle: str) -> str | None:
        """``FILE:LINE`` of the first command bash traced whose expansion holds ``needle``, else None."""
        for line in self.trace.splitlines():
            match = TRACE_LINE.match(line)
            if match and needle in line[match.end():]:
                return f"{match.group('file')}:{match.group('line')}"
        return None


class RenderRefused(InputError):
    """The serve script exited without starting the engine."""

    def __init__(self, path: Path, line: int | None, message: str, stderr: str,
                 inputs: Mapping[str, Origin] | None = None, sourced: tuple[SourcedFile, ...] = (),
                 tests: tuple[FileTest, ...] = ()) -> None:
        super().__init__(path, line, message)
        self.stderr = stderr
        self.inputs = dict(inputs or {})
        self.sourced = sourced
        self.tests = tests
        """The file tests the script ran before it refused (``[ -f "$MODEL" ]`` answered no)."""
