"""The render cache (the suite's, off by default): sandboxed runs kept by the content of their inputs.

A run is kept under the digest of the sandbox's code, its request (the repository's path replaced by a mark, so a
copy of the fleet elsewhere is the same input) and the listing of the repository; it is used again only while every
repository file it opened has the content it had. ``fleetgate.sandbox`` asks here before it runs a command.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

__all__ = ["CACHE_ENV", "cache_dir", "cache_key", "cache_load", "cache_store"]

CACHE_ENV = "FLEETGATE_RENDER_CACHE"
"""A directory (this user's, not writable by others) where sandboxed runs are kept by the content of their inputs.
Unset (the default), nothing is kept. The test suite sets it to a session directory of its own."""
_REPO_MARK = "\0fleetgate-repo\0"


def cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV, "")
    if not value:
        return None
    try:
        info = os.stat(value, follow_symlinks=False)
    except OSError:
        return None
    if not os.path.isdir(value) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return None
    return Path(value)


def _normalised(value: object, repo: str) -> object:
    """``value`` with the repository's path replaced by a mark: a copy of the fleet elsewhere is the same input."""
    if isinstance(value, str):
        return value.replace(repo, _REPO_MARK)
    if isinstance(value, bytes):
        return value.replace(repo.encode("utf-8", "surrogateescape"), _REPO_MARK.encode())
    if isinstance(value, (list, tuple)):
        return [_normalised(item, repo) for item in value]
    if isinstance(value, dict):
        return {k: _normalised(v, repo) for k, v in sorted(value.items())}
    return value


def _snapshot(repo: Path) -> dict[str, tuple[str, int, int, bytes]]:
    """Every entry of the repository: relative path -> (kind, mode, content digest or link target). Read before the
    run, so a file changed during it cannot be kept under its new content."""
    entries: dict[str, tuple[str, int, int, bytes]] = {}
    for directory, dirnames, filenames in os.walk(repo):
        base = os.path.relpath(directory, repo)
        for name in (*dirnames, *filenames):
            path = os.path.join(directory, name)
            relative = name if base == "." else f"{base}/{name}"
            try:
                info = os.lstat(path)
                if os.path.islink(path):
                    entries[relative] = ("link", info.st_mode, 0, os.readlink(path).encode("utf-8", "surrogateescape"))
                elif os.path.isdir(path):
                    entries[relative] = ("dir", info.st_mode, 0, b"")
                elif os.path.isfile(path):
                    entries[relative] = ("file", info.st_mode, info.st_size, hashlib.sha256(Path(path).read_bytes()).digest())
                else:
                    entries[relative] = ("other", info.st_mode, 0, b"")
            except OSError:
                entries[relative] = ("gone", 0, 0, b"")
    return entries


def _listing(snapshot: Mapping[str, tuple[str, int, int, bytes]]) -> bytes:
    """What a run sees of the repository without opening a file (a stat, a glob, a listing): every name, its kind,
    mode and size, a link's target. Not the times: a copy of the fleet has new ones."""
    shape = sorted((path, kind, mode, size, digest if kind == "link" else b"")
                   for path, (kind, mode, size, digest) in snapshot.items())
    return hashlib.sha256(marshal.dumps(shape)).digest()


def cache_key(request: Mapping[str, object], repo: Path | None,
              version: bytes) -> tuple[str, dict[str, tuple[str, int, int, bytes]] | None]:
    """The key of a run: the sandbox's code ``version``, the request (the repository's path marked), the listing of
    the repository; and the repository's snapshot, read before the run."""
    shaped = _normalised(dict(request), str(repo)) if repo is not None else dict(request)
    snapshot = _snapshot(repo) if repo is not None else None
    digest = hashlib.sha256(version + marshal.dumps(cast(Any, shaped)))
    if snapshot is not None:
        digest.update(_listing(snapshot))
    return digest.hexdigest(), snapshot


def cache_load(cache: Path, key: str, repo: Path | None,
               snapshot: Mapping[str, tuple[str, int, int, bytes]] | None) -> tuple[int | None, dict[str, bytes]] | None:
    """A kept run's exit status and files, when every repository file it opened is as it was then."""
    try:
        stored = marshal.loads((cache / key).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    opened, rc, files = stored
    if snapshot is not None:
        for path, digest in opened:
            if snapshot.get(path, ("", 0, 0, b""))[3] != digest:
                return None
    if repo is not None:
        files = {name: content.replace(_REPO_MARK.encode(), str(repo).encode("utf-8", "surrogateescape"))
                 for name, content in files.items()}
    return rc, files


def cache_store(cache: Path, key: str, repo: Path | None, snapshot: Mapping[str, tuple[str, int, int, bytes]] | None,
                opened: list[str], returncode: int | None, files: Mapping[str, bytes]) -> None:
    """Keep a run under ``key``, with the digests of the repository files it opened."""
    files = dict(files)
    if repo is not None:
        files = {name: content.replace(str(repo).encode("utf-8", "surrogateescape"), _REPO_MARK.encode())
                 for name, content in files.items()}
    deps = [(path, (snapshot or {}).get(path, ("", 0, 0, b""))[3]) for path in opened]
    staging = cache / f".{key}.{os.getpid()}.{threading.get_ident()}"
    try:
        staging.write_bytes(marshal.dumps((deps, returncode, files)))
        os.replace(staging, cache / key)
    except OSError:
        with contextlib.suppress(OSError):
            staging.unlink()
