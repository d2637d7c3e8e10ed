"""A service's host, read through testinfra: systemd's view of the unit, the engine's process, files, memory.

``HostTarget`` is the subject of the host checks: one service of the fleet, rendered the way it runs, and a
testinfra ``Host`` for the machine it runs on (the fleet's ``hosts.NAME.address``: loopback is testinfra's
``local://`` backend, anything else ``ssh://ADDRESS``; any testinfra host spec overrides it). Everything
here only reads: ``systemctl show``/``is-enabled``, ``ss -ltnp``, ``/proc``, ``stat``, ``sha256sum``,
``readelf -d``. The parsers are plain functions of text, so they are proven on real systemd output too.

Nothing here imports pytest.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fleetgate.fleet import LOOPBACK
from fleetgate.render.rendered import RenderedService

__all__ = [
    "NVIDIA_SMI",
    "ROCM_SMI",
    "HostReadError",
    "HostTarget",
    "SmiCard",
    "SystemdUnit",
    "default_spec",
    "environment_files",
    "limit_bytes",
    "listening_pid",
    "meminfo",
    "parse_nvidia_smi",
    "parse_rocm_smi",
    "parse_show",
    "parse_ss_pid",
    "runpath",
    "unit_name",
]

_PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "MainPID", "NRestarts", "DropInPaths", "EnvironmentFiles",
    "LimitMEMLOCK", "User", "UnitFileState", "FragmentPath", "SourcePath",
)


def default_spec(address: str | None) -> str:
    """The testinfra host spec for a fleet host: loopback (or none) is ``local://``, else ``ssh://ADDRESS``."""
    if address is None or address in LOOPBACK:
        return "local://"
    return f"ssh://{address}"


def unit_name(config: RenderedService) -> str | None:
    """The unit's name on the host: ``NAME.service``; a Quadlet ``NAME.container`` generates ``NAME.service``."""
    unit = config.rendered.unit
    if unit is None:
        return None
    if unit.host_name is not None:
        return unit.host_name
    return f"{unit.path.stem}.service" if unit.kind == "quadlet" else unit.path.name


def parse_show(text: str) -> dict[str, list[str]]:
    """``systemctl show`` output -> property -> values (a property printed on several lines keeps each)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            found.setdefault(name, []).append(value)
    return found


def environment_files(values: list[str]) -> list[tuple[str, bool]]:
    """``EnvironmentFiles=`` lines of ``systemctl show`` -> (path, optional); optional is systemd's
    ``ignore_errors=yes`` (the unit file's ``-`` prefix)."""
    found = []
    for value in values:
        if not value.strip():
            continue
        path, _, rest = value.partition(" (")
        found.append((path.strip(), "ignore_errors=yes" in rest))
    return found


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def limit_bytes(value: str) -> int | None:
    """A resource limit as systemd shows it or a unit sets it (``infinity``, ``8388608``, ``8M``); None = infinity."""
    text = value.strip()
    if text in ("infinity", "18446744073709551615"):
        return None
    suffix = text[-1:].upper() if text[-1:].isalpha() else ""
    number = text[: -1] if suffix else text
    if suffix and suffix not in _UNITS:
        raise ValueError(f"not a size: {value!r}")
    return int(number) * _UNITS[suffix]


def meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> field -> bytes."""
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            found[name.strip()] = int(words[0]) * (1024 if len(words) > 1 and words[1] == "kB" else 1)
    return found


@dataclass(frozen=True)
class SmiCard:
    """One card as the vendor's SMI tool reports it: bytes used, total and free."""

    index: int
    used: int
    total: int
    free: int
    """The tool's own free figure where it has one (nvidia-smi's ``memory.free`` leaves out reserved memory),
    else total - used."""


NVIDIA_SMI = "nvidia-smi --query-gpu=index,memory.used,memory.total,memory.free --format=csv,noheader,nounits"
ROCM_SMI = "rocm-smi --showmeminfo vram --json"
_MIB = 1 << 20


def parse_nvidia_smi(text: str) -> list[SmiCard]:
    """``nvidia-smi --query-gpu=index,memory.used,memory.total[,memory.free] --format=csv,noheader,nounits``
    (MiB) -> cards. Raises ValueError naming the line and what was expected."""
    cards = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) not in (3, 4) or not all(f.isdigit() for f in fields):
            raise ValueError(f"line {number}: {line.strip()[:80]!r}; expected 'INDEX, USED_MIB, TOTAL_MIB[, FREE_MIB]'")
        index, used, total = (int(f) for f in fields[:3])
        free = int(fields[3]) * _MIB if len(fields) == 4 else (total - used) * _MIB
        cards.append(SmiCard(index, used * _MIB, total * _MIB, free))
    if not cards:
        raise ValueError("no line; expected one 'INDEX, USED_MIB, TOTAL_MIB, FREE_MIB' line per card")
    return cards


def parse_rocm_smi(text: str) -> list[SmiCard]:
    """``rocm-smi --showmeminfo vram --json`` -> cards, in the order of their ``cardN`` keys. Raises ValueError."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc}); expected rocm-smi's --json object") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of cardN entries")
    cards = []
    for key, value in data.items():
        if not key.startswith("card"):
            continue  # rocm-smi adds "system" entries for some queries
        try:
            total = int(value["VRAM Total Memory (B)"])
            used = int(value["VRAM Total Used Memory (B)"])
            index = int(key[4:])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{key}: {json.dumps(value)[:80]}; expected 'VRAM Total Memory (B)' and "
                             "'VRAM Total Used Memory (B)' in bytes") from None
        cards.append(SmiCard(index, used, total, total - used))
    if not cards:
        raise ValueError("no cardN entry; expected one per card")
    return sorted(cards, key=lambda c: c.index)


def parse_ss_pid(text: str) -> int | None:
    """The first ``pid=N`` of ``ss -ltnpH`` output (the process that owns the listening socket)."""
    for word in text.replace(",", " ").replace("(", " ").replace(")", " ").split():
        if word.startswith("pid=") and word[4:].isdigit():
            return int(word[4:])
    return None


def runpath(readelf: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``readelf -d`` -> (NEEDED libraries, RUNPATH or RPATH directories)."""
    needed: list[str] = []
    paths: list[str] = []
    for line in readelf.splitlines():
        if "(NEEDED)" in line and "[" in line:
            needed.append(line.split("[", 1)[1].rstrip("]").strip())
        elif ("(RUNPATH)" in line or "(RPATH)" in line) and "[" in line:
            paths += line.split("[", 1)[1].rstrip("]").strip().split(":")
    return tuple(needed), tuple(paths)


@dataclass(frozen=True)
class SystemdUnit:
    """systemd's own view of a unit (``systemctl show``), as read on the host."""

    name: str
    user_manager: bool
    properties: Mapping[str, list[str]]
    command: str

    def get(self, name: str) -> str:
        values = self.properties.get(name)
        return values[-1] if values else ""


def listening_pid(host: Any, port: int) -> int | None:
    """The PID that listens on TCP ``port`` (``ss -ltnpH``), or None."""
    result = host.run(f"ss -ltnpH 'sport = :{port}'")
    if result.rc != 0:
        return None
    return parse_ss_pid(result.stdout)


@dataclass
class HostTarget:
    """One service on its host: the rendered config and a testinfra Host to read the machine through."""

    config: RenderedService
    host: Any
    """A ``testinfra.host.Host``."""
    spec: str
    port: int
    """The port the files declare the engine listens on (the rendered ``--port``, else fleet.toml's)."""
    reached_port: int | None = None
    """The port of this same host where the gate reaches the service (``--base-url``), when that is not
    ``port``: a proxy, a tunnel, or the engine started on another port."""
    elsewhere: str | None = None
    """Why the process the live checks reached cannot be read through ``host`` (their URL names another machine),
    else None: the process checks are then not judged, never held to whatever runs here."""
    notes: dict[str, str] = field(default_factory=dict)
    """What a passing check has to say (check -> note), for the gate's summary."""
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def unit(self) -> str | None:
        return unit_name(self.config)

    @property
    def quadlet(self) -> bool:
        unit = self.config.rendered.unit
        return unit is not None and unit.kind == "quadlet"

    def quadlet_user(self) -> str | None:
        """A rootless Quadlet runs under the user that owns the deployed repository."""
        if "quadlet_user" not in self._cache:
            root = self.config.fleet.deploy_root
            user = None
            if root is not None:
                target = self.host.file(root)
                user = target.user if target.exists else None
            self._cache["quadlet_user"] = user
        value: str | None = self._cache["quadlet_user"]
        return value

    def systemctl(self, *args: str) -> tuple[str, Any]:
        """Run ``systemctl`` (the user's manager for a Quadlet) and return (command, testinfra result)."""
        words = ["systemctl"]
        if self.quadlet:
            user = self.quadlet_user()
            words += ["--user", f"--machine={user}@"] if user else ["--user"]
        command = shlex.join([*words, *args])
        return command, self.host.run(command)

    def systemd(self) -> SystemdUnit | None:
        """systemd's view of the unit; None when the service has no unit."""
        if self.unit is None:
            return None
        if "systemd" not in self._cache:
            command, result = self.systemctl("show", self.unit, "--property=" + ",".join(_PROPERTIES))
            self._cache["systemd"] = (command.rsplit(" ", 1)[0], result)
        command, result = self._cache["systemd"]
        if result.rc != 0:
            raise HostReadError(f"`{command}` exited {result.rc}: {result.stderr.strip() or result.stdout.strip()}")
        return SystemdUnit(self.unit, self.quadlet, parse_show(result.stdout), command)

    def main_pid(self) -> tuple[int | None, str]:
        """The engine's PID and how it was found: systemd's MainPID, else the owner of the listening port."""
        unit = self.systemd() if self.unit is not None else None
        if unit is not None:
            pid = unit.get("MainPID")
            if pid.isdigit() and int(pid) > 0:
                return int(pid), f"MainPID of {unit.name} ({unit.command})"
        pid_found = listening_pid(self.host, self.port)
        return pid_found, f"the process listening on port {self.port} (ss -ltnp)"

    def proc_words(self, pid: int, name: str) -> tuple[str, ...]:
        """``/proc/PID/cmdline`` or ``environ`` as its NUL-separated words."""
        try:
            raw: bytes = self.host.file(f"/proc/{pid}/{name}").content
        except Exception as exc:
            raise HostReadError(f"/proc/{pid}/{name} cannot be read: {' '.join(str(exc).split())[:200]}") from None
        return tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)

    def proc_text(self, pid: int, name: str) -> str:
        try:
            text: str = self.host.file(f"/proc/{pid}/{name}").content_string
        except Exception as exc:
            raise HostReadError(f"/proc/{pid}/{name} cannot be read: {' '.join(str(exc).split())[:200]}") from None
        return text

    def executable(self, pid: int) -> str:
        """The process's executable (``/proc/PID/exe`` resolved)."""
        try:
            path: str = self.host.file(f"/proc/{pid}/exe").linked_to
        except Exception as exc:
            raise HostReadError(f"/proc/{pid}/exe cannot be resolved: {' '.join(str(exc).split())[:200]}") from None
        return path

    def path(self, path: str) -> PurePosixPath:
        return PurePosixPath(path)


class HostReadError(Exception):
    """The host could not be read (a command failed, a file was unreadable); the message says what."""
