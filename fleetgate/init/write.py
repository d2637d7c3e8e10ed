"""``fleetgate init``'s write: fleet.toml loaded back by fleetgate's own loader, then put in place by a rename.

Each text goes to a new file beside the target (``tempfile.mkstemp``: ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600).
``vet`` loads the manifest with ``load_fleet`` (the host's ``"TODO"`` values stand in for a card and its RAM, which
the loader would refuse first) and leaves out, with one line each, the services the loader refuses; ``place`` writes
the real text, reads it back, and only then renames it over the target. The existing fleet.toml is never opened:
a hard link to a file elsewhere keeps that file as it was, and a FIFO, a socket, a device or a directory there is
refused before anything is written. On every failure the new file is removed: nothing is left half-written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleetgate.errors import InputError, parse_toml, read_text
from fleetgate.init.found import Discovery, Found, Note, visible
from fleetgate.init.manifest_text import fleet_toml
from fleetgate.init.probe import Card, HostFacts
from fleetgate.manifest import load_fleet

__all__ = ["check_target", "place", "vet"]

_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
          stat.S_IFBLK: "a device"}
_STAND_IN = HostFacts(cards=(Card("CUDA0", 1 << 30, "stand-in"),), ram_gib=1.0, source="stand-in")
"""What the loader sees where init writes ``"TODO"``: the loader refuses "TODO" before it reads anything else."""


def check_target(output: Path, *, force: bool) -> None:
    """Refuse, before anything is read or written, a target init must not replace."""
    try:
        info = os.lstat(output)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(output, None, f"cannot look at it: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputError(output, None, "is a symlink; init writes a plain file")
    if not stat.S_ISREG(info.st_mode):
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise InputError(output, None, f"is {kind}; init replaces only a regular fleet.toml (remove it, or "
                         "--output ANOTHER.toml)")
    if not force:
        raise InputError(output, None, "exists; init never overwrites a fleet.toml (pass --force to replace it, or "
                         "--output ANOTHER.toml)")


@contextlib.contextmanager
def _new_file(output: Path) -> Iterator[tuple[int, Path]]:
    """A new file beside ``output`` (same directory, so that the loader resolves the same relative paths and the
    rename stays on one file system), removed on the way out unless it was renamed."""
    try:
        fd, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(output, None, f"cannot write: {exc.strerror}") from None
    temp = Path(name)
    try:
        yield fd, temp
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def _put(fd: int, text: str, output: Path) -> None:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(output, None, f"{visible(text[exc.start:exc.end])} is not UTF-8 (a file name or --name "
                         "with bytes that are not); fleet.toml is UTF-8 text: nothing written") from None
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise InputError(output, None, f"cannot write: {exc.strerror}") from None


def _where(root: Path, found: Found) -> tuple[Path, int | None]:
    file, _, line = found.source.rpartition(":")
    return (root / file, int(line)) if file and line.isdigit() else (root / found.source, None)


def vet(output: Path, discovery: Discovery, *, name: str, facts: HostFacts | None) -> Discovery:
    """``discovery`` less the services fleetgate's own loader would refuse as init writes them (each a note); one
    line when the loader refuses the manifest for a reason no single service explains."""
    if not discovery.services:
        return discovery
    stand_in = HostFacts(cards=facts.cards or _STAND_IN.cards, ram_gib=facts.ram_gib or _STAND_IN.ram_gib,
                         source=facts.source) if facts is not None else _STAND_IN
    with _new_file(output) as (fd, temp):
        # Each round loads the whole, or leaves out at least one service: bounded by the number of services.
        while True:
            _put(fd, fleet_toml(discovery, name=name, facts=stand_in), output)
            try:
                load_fleet(temp)
                return discovery
            except InputError as whole:
                refused: dict[str, InputError] = {}
                for found in discovery.services if whole.message.startswith("services.") else ():
                    try:
                        load_fleet(temp, only=found.name)
                    except InputError as exc:
                        if not exc.message.startswith((f"services.{found.name}.", f"services.{found.name}:")):
                            whole = exc
                            refused.clear()
                            break
                        refused[found.name] = exc
                if not refused:
                    raise InputError(output, whole.line, "fleetgate's own loader refuses the fleet.toml init would "
                                     f"write: {whole.message}; nothing written") from None
            notes = [Note(*_where(discovery.root, f), f"{refused[f.name].message}: fleet.toml cannot declare "
                          f"services.{f.name} as found: left out") for f in discovery.services if f.name in refused]
            discovery = replace(discovery, services=tuple(f for f in discovery.services if f.name not in refused),
                                notes=(*discovery.notes, *notes))
            if not discovery.services:
                return discovery


def _meant(discovery: Discovery) -> dict[str, dict[str, Any]]:
    """The services as fleet.toml must read back: names, ports, engines, and the files each one names."""
    services: dict[str, dict[str, Any]] = {}
    for found in discovery.services:
        entry: dict[str, Any] = {"host": "localhost", "port": found.port, "engine": found.engine}
        for key in ("unit", "serve_script", "env_file", "compose", "compose_service", "kubernetes", "kubernetes_workload",
                    "kubernetes_container", "nix_unit", "llama_swap", "llama_swap_model",
                    "models_preset", "preset_model"):
            if getattr(found, key) is not None:
                entry[key] = getattr(found, key)
        if found.ansible_vars:
            entry["ansible_vars"] = list(found.ansible_vars)
        if found.models_max is not None:
            entry["models_max"] = found.models_max
        if found.env_template is not None:
            entry["env_file"] = {"template": found.env_template[0], "script": found.env_template[1]}
        if found.payload:
            entry["payload"] = list(found.payload)
        services[found.name] = entry
    return services


def place(output: Path, text: str, discovery: Discovery, *, force: bool) -> None:
    """Write ``text`` to a new file, read it back, and rename it to ``output``: replacing a regular file with
    ``force``, else only where nothing is (a file that appeared since ``check_target`` is still not overwritten)."""
    with _new_file(output) as (fd, temp):
        _put(fd, text, output)
        written = parse_toml(read_text(temp, "the fleet.toml init wrote"), output)
        meant = _meant(discovery)
        read_back = written.get("services")
        read_back = read_back if isinstance(read_back, dict) else {}
        differ = sorted(n for n in {*meant, *read_back} if meant.get(n) != read_back.get(n))
        if differ:
            raise InputError(output, None, "the fleet.toml init would write does not read back as meant (services "
                             f"{', '.join(visible(n) for n in differ)}); nothing written")
        mask = os.umask(0)
        os.umask(mask)
        try:
            os.fchmod(fd, 0o644 & ~mask)
            os.fsync(fd)
            if force:
                os.replace(temp, output)
            else:
                _link(temp, output)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise InputError(output, None, "appeared while init read the files; init never overwrites a "
                                 "fleet.toml (pass --force to replace it, or --output ANOTHER.toml)") from None
            raise InputError(output, None, f"cannot write: {exc.strerror}") from None


def _link(temp: Path, output: Path) -> None:
    """``output`` made only where nothing is: a hard link fails on an existing name, where a rename would replace it."""
    try:
        os.link(temp, output)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV) or os.path.lexists(output):
            raise
        os.rename(temp, output)  # a file system without hard links: checked just above
