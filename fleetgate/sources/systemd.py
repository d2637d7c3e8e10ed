"""A systemd ``ExecStart=`` command line expanded the way systemd expands it (systemd.service(5), "Command lines").

The unit's specifiers (``%n``, ``%h``, ...) are already resolved by ``fleetgate.units.parse_unit``. What is left is
systemd's own variable substitution, done on the words after the line is split on quotes
(src/basic/env-util.c, ``replace_env_argv``):

- a word that is exactly ``$NAME`` is replaced by the variable's value split at whitespace (quotes inside the value
  group words), so an empty or unset variable removes the word;
- ``${NAME}`` anywhere in a word is replaced by the value as it is, one word;
- ``$$`` is a literal ``$``;
- nothing else is a shell's: ``${NAME:-default}`` looks up a variable literally named ``NAME:-default``, which no
  environment holds, so it expands to nothing (systemd logs "Invalid environment variable name evaluates to an
  empty string"); ``$(...)``, globs, pipes and redirections are plain characters.

The prefixes before the executable (``@ - : + !``) are read: ``:`` turns substitution off, ``@`` makes the second word
``argv[0]``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from fleetgate.errors import InputError
from fleetgate.units import Setting

__all__ = ["ExecLine", "expand_exec"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PREFIXES = "@-:+!"


@dataclass(frozen=True)
class ExecLine:
    argv: tuple[str, ...]
    """The command as systemd executes it: ``argv[0]`` is the executable as the line names it."""
    unset: tuple[str, ...]
    """Variables the line names that the unit's environment does not set (each expands to nothing)."""
    invalid: tuple[str, ...]
    """``${...}`` references that are not a variable name (``${MODEL:-x}``): each expands to nothing."""
    prefixes: str


def _split(setting: Setting, value: str) -> list[str]:
    try:
        return shlex.split(value, posix=True)
    except ValueError as exc:
        raise InputError(setting.path, setting.line, f"{setting.key}=: {exc} (unbalanced quotes); expected a command "
                         "line with every quote closed") from None


def _braced(word: str, env: Mapping[str, str], unset: list[str], invalid: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(word):
        if word.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if word.startswith("${", i):
            end = word.find("}", i + 2)
            if end < 0:
                out.append(word[i:])
                break
            name = word[i + 2:end]
            if not _NAME.fullmatch(name):
                invalid.append(name)
            elif name in env:
                out.append(env[name])
            else:
                unset.append(name)
            i = end + 1
            continue
        out.append(word[i])
        i += 1
    return "".join(out)


def expand_exec(setting: Setting, env: Mapping[str, str]) -> ExecLine:
    """``ExecStart=`` (or ``ExecStartPre=``) as the argv systemd executes, with the unit's environment ``env``."""
    value = setting.value.lstrip()
    prefixes = ""
    while value and value[0] in _PREFIXES:
        prefixes += value[0]
        value = value[1:]
    words = _split(setting, value)
    if not words:
        raise InputError(setting.path, setting.line, f"{setting.key}= names no command; expected the program to run")
    unset: list[str] = []
    invalid: list[str] = []
    argv: list[str] = []
    for index, word in enumerate(words):
        if ":" in prefixes or index == 0:
            argv.append(word)  # the executable is never substituted
        elif word.startswith("$") and not word.startswith(("${", "$$")) and _NAME.fullmatch(word[1:]):
            name = word[1:]
            if name not in env:
                unset.append(name)
                continue
            try:
                argv += shlex.split(env[name], posix=True)
            except ValueError:
                argv += env[name].split()
        else:
            argv.append(_braced(word, env, unset, invalid))
    if "@" in prefixes:
        # "@": the first word is the executable, the second what the program sees as argv[0].
        argv = [argv[0], *argv[2:]] if len(argv) > 1 else argv
    return ExecLine(argv=tuple(argv), unset=tuple(dict.fromkeys(unset)), invalid=tuple(dict.fromkeys(invalid)),
                    prefixes=prefixes)
