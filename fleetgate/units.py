"""systemd units, their drop-ins, and Quadlet .container files, read the way systemd and Quadlet read them.

Only what decides what a service runs is interpreted: the environment it gets (``Environment=``,
``EnvironmentFile=``), what it executes (``ExecStart=``, a Quadlet's ``Exec=`` and ``Volume=``),
and the few unit settings the seams hold (``User=``, ``LimitMEMLOCK=``, ``Restart=``, ``WantedBy=``).
Drop-ins (``NAME.d/*.conf`` beside the unit, as they sit under /etc/systemd/system on the host)
apply after the unit in file-name order, as systemd applies them.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

from fleetgate.errors import InputError, read_text

__all__ = ["Setting", "Unit", "UnitKind", "Unresolved", "parse_unit", "resolve_specifiers", "split_command",
           "split_environment_assignments", "unit_from_settings", "unit_from_text"]

UnitKind = Literal["systemd", "quadlet"]


@dataclass(frozen=True)
class Setting:
    section: str
    key: str
    value: str
    path: Path
    line: int
    written: str | None = None
    """The value as the file wrote it, where specifier resolution changed it (``User=%u`` is ``root`` with
    ``written`` ``%u``): a check that judges what the author meant against what systemd does reads both."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Unresolved:
    """A specifier the manager resolves on the host from facts no file of the fleet holds (``%H``, ``%m``, ``%U``
    of a named user): kept as written in the value, and named in the render."""

    where: str
    key: str
    specifier: str
    meaning: str

    def describe(self) -> str:
        return (f"{self.where}: {self.key}= holds %{self.specifier} ({self.meaning}), which the manager resolves on the "
                f"host; fleetgate renders without the host, so it is kept as the characters %{self.specifier}")


@dataclass(frozen=True)
class Unit:
    path: Path
    kind: UnitKind
    settings: tuple[Setting, ...]
    drop_ins: tuple[Path, ...] = field(default=())
    unresolved: tuple[Unresolved, ...] = field(default=())
    """Specifiers that need the host (``%H``, ``%m``, ...), left as written."""
    host_name: str | None = None
    """The unit's name on the host where it is not the file's (a unit NixOS generates from a ``.nix`` file)."""

    def all(self, section: str, key: str) -> list[Setting]:
        """Every effective assignment of a list-valued key; an empty assignment resets the list."""
        found: list[Setting] = []
        for setting in self.settings:
            if setting.section == section and setting.key == key:
                if setting.value == "":
                    found = []
                else:
                    found.append(setting)
        return found

    def last(self, section: str, key: str) -> Setting | None:
        values = [s for s in self.settings if s.section == section and s.key == key]
        return values[-1] if values else None

    def __iter__(self) -> Iterator[Setting]:
        return iter(self.settings)


# Settings whose values systemd (and Quadlet, which passes them on) runs through specifier expansion.
_SPECIFIED = {"Environment", "EnvironmentFile", "ExecStart", "Exec", "Volume", "User", "Group", "WorkingDirectory"}
# Specifiers that are fixed for the system manager (systemd.unit(5), "Specifiers").
_SYSTEM_DIRS = {"t": "/run", "S": "/var/lib", "C": "/var/cache", "L": "/var/log", "E": "/etc", "T": "/tmp",
                "V": "/var/tmp", "g": "root", "G": "0"}
# Specifiers that name the host itself (its hostname, boot, machine, kernel, OS): unknown offline.
_HOST_ONLY = {"a": "the host's architecture", "A": "the OS image version", "b": "the boot ID", "B": "the OS build ID",
              "H": "the host name", "l": "the short host name", "q": "the pretty host name", "m": "the machine ID",
              "M": "the OS image ID", "o": "the OS ID", "w": "the OS version ID", "W": "the OS variant ID",
              "v": "the kernel release", "s": "the user's shell", "U": "the UID of User="}


def _unescape_unit(text: str) -> str:
    """systemd's unit_name_unescape: ``-`` is ``/``, ``\\xNN`` a byte."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text.startswith("\\x", i) and i + 4 <= len(text):
            try:
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        out += b"/" if text[i] == "-" else text[i].encode("utf-8")
        i += 1
    return out.decode("utf-8", "replace")


def resolve_specifiers(setting: Setting, unit_name: str, user: str | None,
                       unresolved: list[Unresolved] | None = None) -> str:
    """A unit value with its ``%`` specifiers resolved as systemd resolves them for a system unit.

    What depends on the host itself (%H, %l, %m, %b, %v, ...) cannot be known offline: it is kept as written
    (``%H`` stays ``%H``) and appended to ``unresolved``, so that the render names it; it never refuses the
    service. ``%U`` is the UID of ``User=``: 0 for root (or no ``User=``), the number of a numeric ``User=``,
    and unknown offline for a user name (the host's user database holds it). ``%h`` of a ``User=`` other than
    root is that user's home from the host's user database; offline it is taken as /home/USER, the same
    assumption the render makes for HOME. Only a letter systemd does not know is refused.
    """
    value = setting.value
    if "%" not in value:
        return value
    stem = unit_name.rpartition(".")[0] if "." in unit_name else unit_name
    prefix, at, instance = stem.partition("@")
    system_user = user or "root"
    home = "/root" if system_user == "root" else f"/home/{system_user}"
    table = {
        "n": unit_name, "N": stem, "p": prefix, "P": _unescape_unit(prefix), "i": instance, "I": _unescape_unit(instance),
        "j": prefix.rsplit("-", 1)[-1], "J": _unescape_unit(prefix.rsplit("-", 1)[-1]),
        "f": "/" + (_unescape_unit(instance) if at else _unescape_unit(prefix)).lstrip("/"),
        "u": system_user, "h": home, "y": f"/etc/systemd/system/{unit_name}", "Y": "/etc/systemd/system",
        "d": f"/run/credentials/{unit_name}", **_SYSTEM_DIRS,
    }
    if system_user == "root":
        table["U"] = "0"
    elif system_user.isdigit():
        table["U"] = str(int(system_user))
    out: list[str] = []
    i = 0
    while i < len(value):
        c = value[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(value):
            raise InputError(setting.path, setting.line, f"{setting.key}=: a lone '%' at the end; systemd expects a specifier "
                             "after it (write %% for a percent sign)")
        letter = value[i + 1]
        i += 2
        if letter == "%":
            out.append("%")
        elif letter in table:
            out.append(table[letter])
        elif letter in _HOST_ONLY:
            meaning = _HOST_ONLY[letter] + (f" {system_user}" if letter == "U" else "")
            if unresolved is not None and all(u.specifier != letter or u.where != setting.where for u in unresolved):
                unresolved.append(Unresolved(setting.where, setting.key, letter, meaning))
            out.append(f"%{letter}")
        else:
            raise InputError(setting.path, setting.line, f"{setting.key}=: %{letter} is not a systemd specifier "
                             "(systemd refuses the setting); write %% for a percent sign")
    return "".join(out)


def split_command(setting: Setting) -> list[str]:
    """An ``ExecStart=``/``Exec=`` command line, split on quotes the way systemd splits it; one line when it cannot be."""
    try:
        return shlex.split(setting.value, posix=True)
    except ValueError as exc:
        raise InputError(setting.path, setting.line, f"{setting.key}=: {exc} (unbalanced quotes); "
                         "expected a command line with every quote closed") from None


def parse_unit(path: Path, *, root: Path | None = None) -> Unit:
    """The unit and its drop-ins. Each drop-in (and the ``NAME.d`` directory) must be a file of ``root``
    (the fleet repository; by default the unit's own directory) by its real path, like an env file: one
    symlinked out of it is refused in one line, before anything of it is read."""
    kind: UnitKind = "quadlet" if path.suffix in {".container", ".kube", ".pod"} else "systemd"
    settings = list(_read_settings(path))
    drop_in_dir = path.with_name(path.name + ".d")
    drop_ins: list[Path] = []
    if drop_in_dir.is_dir():
        for conf in sorted(drop_in_dir.glob("*.conf"), key=lambda p: p.name):
            _confined(conf, root if root is not None else path.parent)
            drop_ins.append(conf)
            settings.extend(_read_settings(conf))
    unit_name = path.name if kind == "systemd" else path.stem + ".service"
    return unit_from_settings(path, unit_name, tuple(settings), kind=kind, drop_ins=tuple(drop_ins))


def unit_from_text(path: Path, text: str, unit_name: str) -> Unit:
    """A unit whose text another tool writes from ``path`` (an Ansible template's output), read as systemd reads it."""
    kind: UnitKind = "quadlet" if unit_name.endswith((".container", ".kube", ".pod")) else "systemd"
    name = unit_name if kind == "systemd" else unit_name.rpartition(".")[0] + ".service"
    return unit_from_settings(path, name, _parse_text(path, text), kind=kind)


def unit_from_settings(path: Path, unit_name: str, settings: tuple[Setting, ...], *, kind: UnitKind = "systemd",
                       drop_ins: tuple[Path, ...] = ()) -> Unit:
    """A unit from its settings in the order systemd applies them, specifiers resolved for the system manager: a
    unit file's, or the one a generator (NixOS) writes from another file's lines."""
    users = [s.value for s in settings if s.key == "User" and "%" not in s.value]
    user = users[-1] if users else None
    unresolved: list[Unresolved] = []
    resolved = [_resolved(s, unit_name, user, unresolved) if s.key in _SPECIFIED else s for s in settings]
    return Unit(path=path, kind=kind, settings=tuple(resolved), drop_ins=drop_ins, unresolved=tuple(unresolved),
                host_name=unit_name if kind == "systemd" and unit_name != path.name else None)


def _resolved(setting: Setting, unit_name: str, user: str | None, unresolved: list[Unresolved]) -> Setting:
    value = resolve_specifiers(setting, unit_name, user, unresolved)
    written = setting.value if value != setting.value else None
    return Setting(setting.section, setting.key, value, setting.path, setting.line, written)


def _confined(conf: Path, root: Path) -> None:
    real_root = root.resolve()
    try:
        real = conf.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InputError(conf, None, "the drop-in is a broken or looping symlink; expected a file of the fleet "
                         "repository") from None
    if real_root not in real.parents:
        raise InputError(conf, None, "the drop-in's real path is outside the fleet repository (a symlink out of it); "
                         "expected a file of the repository, as systemd would be given it on the host")
    if not real.is_file():
        raise InputError(conf, None, "the drop-in is not a regular file; expected a unit file fragment")


def _read_settings(path: Path) -> tuple[Setting, ...]:
    """The file's settings, parsed once per path and content: a render reads its service's unit (and drop-ins)
    several times (inputs, ExecStart=, the engine's exec), and every seam that renders it again reads it again."""
    return _parse_text(path, read_text(path, "the unit file"))


@lru_cache(maxsize=1024)
def _parse_text(path: Path, text: str) -> tuple[Setting, ...]:
    return tuple(_parse_file(path, text))


def _parse_file(path: Path, text: str) -> Iterator[Setting]:
    section: str | None = None
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].strip()
        number += 1
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            # systemd joins a backslash-continued line with a space. The pieces are joined once at the end:
            # appending to one string per continuation line copies it each time (quadratic in the lines).
            parts: list[str] = []
            piece = line
            while piece.endswith("\\"):
                parts.append(piece[:-1])
                parts.append(" ")
                while number < len(lines) and lines[number].strip()[:1] in ("#", ";"):
                    number += 1
                if number >= len(lines):
                    piece = ""
                    break
                piece = lines[number].strip()
                number += 1
            parts.append(piece)
            line = "".join(parts)
        if "\0" in line:
            raise InputError(path, start, "a NUL byte in the line; systemd refuses the file, expected text")
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise InputError(path, start, f"expected a section header like [Service], got {line!r}")
            section = line[1:-1]
            continue
        if "=" not in line:
            raise InputError(path, start, f"expected Key=Value, got {line!r}")
        if section is None:
            raise InputError(path, start, "assignment outside any section; expected a [Section] header first")
        key, value = line.split("=", 1)
        key = key.strip()
        if not key or not all(c.isalnum() or c in "-_" for c in key):
            raise InputError(path, start, f"{key!r} is not a unit setting name")
        yield Setting(section, key, value.strip(), path, start)


def split_environment_assignments(setting: Setting) -> list[tuple[str, str]]:
    """``Environment=`` holds space-separated ``NAME=value`` words; double quotes group words (systemd.exec(5))."""
    try:
        words = shlex.split(setting.value, posix=True)
    except ValueError as exc:
        raise InputError(setting.path, setting.line, f"{setting.key}=: {exc}; expected NAME=value words") from None
    pairs: list[tuple[str, str]] = []
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise InputError(setting.path, setting.line, f"{setting.key}=: {word!r} is not NAME=value")
        pairs.append((name, value))
    return pairs
