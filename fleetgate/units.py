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
from pathlib import Path
from typing import Literal

from fleetgate.errors import InputError

__all__ = ["Setting", "Unit", "UnitKind", "parse_unit", "split_environment_assignments"]

UnitKind = Literal["systemd", "quadlet"]


@dataclass(frozen=True)
class Setting:
    section: str
    key: str
    value: str
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Unit:
    path: Path
    kind: UnitKind
    settings: tuple[Setting, ...]
    drop_ins: tuple[Path, ...] = field(default=())

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


def parse_unit(path: Path) -> Unit:
    kind: UnitKind = "quadlet" if path.suffix in {".container", ".kube", ".pod"} else "systemd"
    settings = list(_parse_file(path))
    drop_in_dir = path.with_name(path.name + ".d")
    drop_ins: list[Path] = []
    if drop_in_dir.is_dir():
        for conf in sorted(drop_in_dir.glob("*.conf"), key=lambda p: p.name):
            drop_ins.append(conf)
            settings.extend(_parse_file(conf))
    return Unit(path=path, kind=kind, settings=tuple(settings), drop_ins=tuple(drop_ins))


def _parse_file(path: Path) -> Iterator[Setting]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read unit file: {exc.strerror}") from None
    section: str | None = None
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].strip()
        number += 1
        if not line or line[0] in "#;":
            continue
        while line.endswith("\\"):
            # systemd joins a backslash-continued line with a space
            line = line[:-1] + " "
            while number < len(lines) and lines[number].strip()[:1] in ("#", ";"):
                number += 1
            if number >= len(lines):
                break
            line += lines[number].strip()
            number += 1
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
        words = shlex.split(setting.value.replace("%%", "%"), posix=True)
    except ValueError as exc:
        raise InputError(setting.path, setting.line, f"{setting.key}=: {exc}; expected NAME=value words") from None
    pairs: list[tuple[str, str]] = []
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise InputError(setting.path, setting.line, f"{setting.key}=: {word!r} is not NAME=value")
        pairs.append((name, value))
    return pairs
