"""The render's types: what every start shape builds, and the one path mapping they share.

A render of any start shape is a ``Rendered``: the engine's argv and environment, and where each variable of the
environment the service starts with was set (``Origin``); the serve script run in the sandbox
(fleetgate.render.script) adds the files it sourced (``SourcedFile``), the files it tested (``FileTest``) and bash's
trace. A script that exits without starting the engine is ``RenderRefused``. ``map_to_repo`` reads a host path under
``deploy_root`` as the repository's file, the way every shape names the repository's files.

The start shapes of fleetgate.sources build these types and the dispatcher (fleetgate.render.dispatch) imports the shapes, so
this module imports nothing of either (only the type checker sees the shapes' types it names).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from fleetgate.errors import InputError

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet
    from fleetgate.sources.compose import ComposeService
    from fleetgate.sources.docker_run import ContainerRun
    from fleetgate.sources.kubernetes import KubernetesContainer
    from fleetgate.units import Unit

__all__ = ["SYSTEMD_DEFAULT_PATH", "TRACE_LINE", "FileTest", "Origin", "RenderRefused", "Rendered", "SourcedFile",
           "map_to_repo"]

# systemd's default PATH for services (systemd.exec(5), "Environment variables in spawned processes").
SYSTEMD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
# A line of bash's trace of the serve script (``set -x``): ``+FILE:LINE: command``, one ``+`` per level of nesting.
TRACE_LINE = re.compile(r"^\++(?P<file>[^:]+):(?P<line>\d+): ")


@dataclass(frozen=True)
class Origin:
    """Where a variable of the script's starting environment was set."""

    name: str
    value: str
    where: str
    via: str
    """``EnvironmentFile=`` / ``Environment=`` / ``env_file`` / ``sourced``."""


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
    extra_invocations: tuple[tuple[str, ...], ...] = field(default=())
    trace: str = ""
    """bash's own trace of the run (``set -x``, each line ``+FILE:LINE: command``): where a value was made."""
    compose: ComposeService | None = None
    """The compose service read, when a compose file starts the engine (ports, mounts, GPUs)."""
    notes: tuple[str, ...] = ()
    """What the render had to assume, one line each (a directory the repository does not hold made a placeholder,
    an engine stubbed at a path the repository does not hold, a specifier that needs the host)."""
    container: ContainerRun | None = None
    """The ``docker run``/``podman run`` line that starts the engine, where one does (its ports, volumes, GPUs)."""
    kubernetes: KubernetesContainer | None = None
    """The Kubernetes container read, when a workload manifest starts the engine (its ports, Services, volumes, GPUs)."""
    upstream_port: int | None = None
    """Where a proxy in front of the engine forwards to (llama-swap's ``proxy:``): the port the engine must listen
    on; None when clients reach the engine at the fleet's declared port."""

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


def map_to_repo(fleet: Fleet, host_path: str) -> Path | None:
    """A host path of the deployed repository -> the repository file, or None.

    Confined by the real path, as the kernel resolves it on a host where the repository is deployed
    at ``deploy_root``: ``..`` and symlinks inside the repository are followed (an absolute link into
    ``deploy_root`` stays in the repository), and a path that leaves the repository is None however it
    is spelt. Components outside the repository are taken as written (this machine is not the host).
    """
    if fleet.deploy_root is None or not host_path.startswith("/") or "\0" in host_path:
        return None
    root = PurePosixPath(fleet.deploy_root)
    real_root = fleet.root.resolve()
    pending = list(PurePosixPath(host_path).parts[1:])
    current = PurePosixPath("/")
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        current = current / part
        if current == root or root not in current.parents:
            continue
        local = real_root.joinpath(*current.relative_to(root).parts)
        if local.is_symlink():
            hops += 1
            if hops > 40:
                return None
            target = PurePosixPath(os.readlink(local))
            if target.is_absolute():
                current = PurePosixPath("/")
                pending[:0] = list(target.parts[1:])
            else:
                current = current.parent
                pending[:0] = list(target.parts)
    if current != root and root not in current.parents:
        return None
    return real_root.joinpath(*current.relative_to(root).parts)
