"""What every start shape shares, below the readers and the render alike: where a variable of the service's starting
environment was set (``Origin``), systemd's default PATH, and ``map_to_repo``, which reads a host path under
``deploy_root`` as the repository's file, the way every shape names the repository's files. The readers
(fleetgate.sources) import this module and nothing else of the render."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet

__all__ = ["SYSTEMD_DEFAULT_PATH", "Origin", "installed_path", "map_to_repo"]

# systemd's default PATH for services (systemd.exec(5), "Environment variables in spawned processes").
SYSTEMD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


@dataclass(frozen=True)
class Origin:
    """Where a variable of the script's starting environment was set."""

    name: str
    value: str
    where: str
    via: str
    """``EnvironmentFile=`` / ``Environment=`` / ``env_file`` / ``sourced``."""


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


def installed_path(fleet: Fleet, path: Path) -> str | None:
    """Where the hosts have a repository file (the reverse of ``map_to_repo``): under ``deploy_root``; None without
    one, or for a file outside the repository."""
    if not fleet.deploy_root:
        return None
    try:
        relative = path.relative_to(fleet.root)
    except ValueError:
        return None
    return str(PurePosixPath(fleet.deploy_root) / PurePosixPath(relative.as_posix()))
