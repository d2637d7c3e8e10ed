"""The ``fleetgate`` command: init | render | fit | profile | incidents | checks | reference.

Subcommands live in their own modules (``SUBCOMMANDS``); each offers ``register(subparsers)`` and sets
``func`` on its parser. Errors about the fleet's files are printed as one line, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgate.errors import InputError, parse_toml, read_text
from fleetgate.fleet import Fleet
from fleetgate.manifest import load_fleet

if TYPE_CHECKING:
    from fleetgate.render.rendered import RenderedService

__all__ = ["DEFAULT_FLEET_HINT", "SUBCOMMANDS", "argv_lines", "flag_indices", "main", "parse_size", "resolve_fleet",
           "write_stdout"]

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "render": ("fleetgate.cli.render", "print what a service really runs (its rendered argv)"),
    "init": ("fleetgate.cli.init", "write fleet.toml from the units, compose files and llama-swap configs found"),
    "fit": ("fleetgate.cli.fit", "the per-device memory ledger of a llama.cpp service or of a llama-server command line"),
    "profile": ("fleetgate.cli.profile",
                "write a model profile (TOML) from a GGUF header, local or by HTTP range, or from a config.json"),
    "reference": ("fleetgate.cli.reference",
                  "start the reference endpoint: run its serve script for real (llama-server + SmolLM2)"),
    "incidents": ("fleetgate.cli.incidents",
                  "the regression catalogue: every past incident, what catches it, how it is reproduced"),
    "checks": ("fleetgate.cli.checks", "every check fleetgate runs: seams (offline), live (the endpoint) and host checks"),
}
"""Command -> (the module whose ``register`` adds it, its one-line help). Only the command asked for is imported:
``fit`` alone brings the whole ledger, and ``fleetgate render`` should not pay for it."""
DEFAULT_FLEET_HINT = "fleet.toml in the current directory, else the fleetgate_fleet ini option of ./pyproject.toml"


_SIZE = re.compile(r"^\s*([0-9.]+)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {unit: 1 << shift for shift, prefix in ((10, "K"), (20, "M"), (30, "G"), (40, "T"))
          for unit in (prefix, prefix + "B", prefix + "IB")} | {"": 1, "B": 1}


def parse_size(text: str, where: str) -> int:
    """A size on the command line (bytes, 31.86GiB, 24G: K, M, G, T count in 1024s); ``where`` names the option."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").upper() if match else ""
    try:
        value = float(match.group(1)) if match else -1.0
    except ValueError:
        value = -1.0
    if not match or unit not in _UNITS or value <= 0:
        raise InputError(Path.cwd(), None, f"{where}: {text!r} is not a size; expected bytes, 31.86GiB, 24G")
    return int(value * _UNITS[unit])


def write_stdout(text: str) -> int:
    """Write to standard output; a reader that stops early (``| head -1``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # the interpreter flushes stdout again at exit: point it at /dev/null so that flush is quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def resolve_fleet(path: str | None, *, only: str | None = None) -> Fleet:
    """--fleet PATH, else ./fleet.toml, else the fleetgate_fleet ini option of ./pyproject.toml.

    A manifest with inf/nan in it is refused here (the seams report it as ``fleet-numbers-finite``).
    ``only``: the answer is about that one service; the others are not loaded (see ``load_fleet``).
    """
    fleet = _find_fleet(path, only)
    if fleet.non_finite:
        bad = fleet.non_finite[0]
        raise InputError(fleet.path, bad.line, f"{bad.key} = {bad.value}; expected a finite number")
    return fleet


def _find_fleet(path: str | None, only: str | None = None) -> Fleet:
    if path:
        return load_fleet(Path(path), only=only)
    if Path("fleet.toml").exists():
        return load_fleet(Path("fleet.toml"), only=only)
    pyproject = Path("pyproject.toml")
    if pyproject.exists():
        data = parse_toml(read_text(pyproject, "pyproject.toml"), pyproject)
        ini: object = data
        for key in ("tool", "pytest", "ini_options"):
            ini = ini.get(key, {}) if isinstance(ini, dict) else None
        # Anything but tables down to ini_options (`[tool] pytest = "x"`) holds no fleetgate_fleet, as pytest sees it.
        value = ini.get("fleetgate_fleet") if isinstance(ini, dict) else None
        if value is not None:
            if not isinstance(value, str) or not value:
                raise InputError(pyproject, None, f"tool.pytest.ini_options.fleetgate_fleet = {value!r}; expected the path of a fleet.toml")
            return load_fleet(Path(value), only=only)
    raise InputError(Path.cwd(), None, f"no fleet manifest: pass --fleet PATH ({DEFAULT_FLEET_HINT})")


_NUMBER = re.compile(r"^-(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def flag_indices(config: RenderedService) -> set[int] | None:
    """argv positions the engine's own option table reads as flags (None when it has none)."""
    parsed = config.llama.parsed if config.llama else config.vllm.parsed if config.vllm else None
    if parsed is None:
        return None
    found = {use.index for uses in parsed.uses.values() for use in uses if use.index is not None}
    found |= {problem.index for problem in parsed.problems if problem.index is not None}
    return found


def argv_lines(argv: Sequence[str], flags: set[int] | None = None) -> list[str]:
    """The binary, then one line per flag with its values beside it (``--reasoning-budget -1``).

    ``flags`` are the positions the engine reads as options; without them a word that starts with a
    dash and is not a number is a flag.
    """
    lines = [shlex.quote(argv[0])]
    for index, arg in enumerate(argv[1:], start=1):
        is_flag = index in flags if flags is not None else arg.startswith("-") and not _NUMBER.match(arg)
        if is_flag or len(lines) == 1:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return lines


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default: this process's): the subcommand it names with its own arguments, every
    other one by its name and help only."""
    parser = argparse.ArgumentParser(prog="fleetgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((arg for arg in (sys.argv[1:] if argv is None else argv) if not arg.startswith("-")), None)
    for command, (module, summary) in SUBCOMMANDS.items():
        if command == chosen:
            importlib.import_module(module).register(sub)
        else:
            # Never parsed (argparse picks the command by its first positional): it stands in the list and the help.
            sub.add_parser(command, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except InputError as exc:
        print(f"fleetgate: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`fleetgate fit X | head -1`): stop quietly, as cat and grep do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    except KeyboardInterrupt:
        print("fleetgate: interrupted", file=sys.stderr)
        return 130
    return code

