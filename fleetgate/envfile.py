"""Env files read the way their consumer reads them.

Three consumers, three dialects, and the differences matter:

* ``systemd`` -- a unit's ``EnvironmentFile=`` (systemd.exec(5); src/basic/env-file.c): comments
  start with ``#`` or ``;``, quotes are removed, a backslash escapes, a trailing backslash continues
  the line, whitespace around the value is trimmed, nothing is expanded, there is no ``export``.
* ``podman`` -- ``podman run --env-file`` and a Quadlet's ``EnvironmentFile=``: each line is
  ``NAME=value`` taken literally, quotes included; a bare ``NAME`` copies the host's value.
* ``bash`` -- a file a serve script ``source``s: bash itself reads it, so bash is run on it.

Every variable keeps the file and line it came from, so a failure can point at it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fleetgate import sandbox
from fleetgate.errors import InputError, read_text
from fleetgate.sandbox import INSIDE, SandboxSpec, run

__all__ = ["Dialect", "EnvEntry", "EnvFile", "parse_env_file", "parse_env_text"]

Dialect = Literal["systemd", "podman", "bash"]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class EnvEntry:
    name: str
    value: str
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


class EnvFile(Mapping[str, EnvEntry]):
    """Variables in assignment order; a later assignment of the same name wins, as in all three dialects."""

    def __init__(self, path: Path, dialect: Dialect, entries: list[EnvEntry]) -> None:
        self.path = path
        self.dialect = dialect
        self._entries: dict[str, EnvEntry] = {}
        for entry in entries:
            self._entries.pop(entry.name, None)
            self._entries[entry.name] = entry

    def __getitem__(self, name: str) -> EnvEntry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def values_dict(self) -> dict[str, str]:
        return {name: entry.value for name, entry in self._entries.items()}


def parse_env_file(path: Path, dialect: Dialect) -> EnvFile:
    return parse_env_text(read_text(path, "the env file"), path, dialect)


def text_line_of_offset(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def parse_env_text(text: str, path: Path, dialect: Dialect) -> EnvFile:
    if "\0" in text and dialect != "bash":
        # bash drops a NUL byte of a file it sources (A=1<NUL>2 sets A=12): it reads the file itself, below.
        raise InputError(path, text.count("\n", 0, text.index("\0")) + 1,
                         f"a NUL byte; no environment can carry one ({dialect} env file), expected text")
    if dialect == "bash" and "\r\n" in text:
        # bash keeps the carriage return in the value: MODEL=/m.gguf\r names another file.
        raise InputError(path, text.count("\n", 0, text.index("\r\n")) + 1,
                         "the line ends with CR LF (a DOS line ending); bash keeps the CR in the value, expected LF endings")
    if dialect == "systemd":
        entries = _parse_systemd(text, path)
    elif dialect == "podman":
        entries = _parse_podman(text, path)
    else:
        entries = _parse_bash(text, path)
    return EnvFile(path, dialect, entries)


def _physical_lines(text: str) -> tuple[list[str], list[str], list[int]]:
    """systemd's env-file parser ends a line at every CR and every LF (NEWLINE is "\\n\\r" in its
    string-util.h): a CR-only file is one line per CR, and CR LF is two line ends with nothing between.
    Returns the pieces, the end that closed each (one fewer), and each piece's line as an editor numbers it."""
    pieces = re.split(r"[\r\n]", text)
    ends = re.findall(r"[\r\n]", text)
    numbers: list[int] = []
    line = 1
    for i in range(len(pieces)):
        numbers.append(line)
        if i < len(ends) and not (ends[i] == "\r" and i + 1 < len(ends) and ends[i + 1] == "\n" and pieces[i + 1] == ""):
            line += 1
    return pieces, ends, numbers


def _parse_systemd(text: str, path: Path) -> list[EnvEntry]:
    entries: list[EnvEntry] = []
    lines, ends, numbers = _physical_lines(text)
    number = 0
    while number < len(lines):
        start = numbers[number]
        line = lines[number]
        number += 1
        stripped = line.lstrip(" \t")
        if not stripped:
            continue
        if stripped[0] in "#;":
            # systemd >= 254: a trailing backslash does not continue a comment line.
            continue
        if "=" not in stripped:
            raise InputError(path, start, f"expected NAME=VALUE (systemd EnvironmentFile); systemd ignores {stripped.strip()!r}")
        raw_key, rest = stripped.split("=", 1)
        key = raw_key.rstrip(" \t")
        if not _NAME.match(key):
            hint = " (systemd EnvironmentFile has no 'export'; drop it)" if key.startswith("export ") else ""
            raise InputError(path, start, f"{key!r} is not a variable name; systemd ignores this line{hint}")
        value, consumed = _systemd_value(rest, lines, ends, number, path, start)
        number += consumed
        entries.append(EnvEntry(key, value, path, start))
    return entries


def _systemd_value(rest: str, lines: list[str], ends: list[str], next_index: int, path: Path,
                   start: int) -> tuple[str, int]:
    """Read one value the way systemd's env-file state machine does; returns (value, extra lines used)."""
    out: list[str] = []
    trailing_ws_from: int | None = None  # index in `out` where unquoted trailing whitespace begins
    text = rest
    consumed = 0
    i = 0
    state = "pre"
    while True:
        if i >= len(text):
            # end of a physical line
            ending = next_index - 1 + consumed
            end = ends[ending] if ending < len(ends) else "\n"
            if state in ("escape", "dquote_escape"):
                # a backslash-newline is eaten: the value goes on on the next line. In double quotes systemd
                # eats only a backslash-LF; a backslash-CR stays as it is, like any other escape it does not know.
                if state == "dquote_escape" and end == "\r":
                    out.extend(("\\", "\r"))
                state = "value" if state == "escape" else "dquote"
            elif state in ("squote", "dquote"):
                # a quoted value keeps the line end as it is in the file (CR or LF)
                out.append(end)
            else:
                break
            if next_index + consumed >= len(lines):
                if state in ("squote", "dquote"):
                    raise InputError(path, start, "unterminated quote in value (systemd EnvironmentFile)")
                break
            text = lines[next_index + consumed]
            consumed += 1
            i = 0
            continue
        c = text[i]
        i += 1
        if state == "pre":
            if c == "'":
                state = "squote"
            elif c == '"':
                state = "dquote"
            elif c == "\\":
                state = "escape"
            elif c not in " \t\r":
                state = "value"
                out.append(c)
        elif state == "value":
            if c == "\\":
                state = "escape"
                trailing_ws_from = None
            else:
                if c not in " \t\r":
                    trailing_ws_from = None
                elif trailing_ws_from is None:
                    trailing_ws_from = len(out)
                out.append(c)
        elif state == "escape":
            state = "value"
            out.append(c)
        elif state == "squote":
            if c == "'":
                state = "pre"
            else:
                out.append(c)
        elif state == "dquote":
            if c == '"':
                state = "pre"
            elif c == "\\":
                state = "dquote_escape"
            else:
                out.append(c)
        elif state == "dquote_escape":
            state = "dquote"
            if c in '"\\`$':
                out.append(c)
            else:
                out.extend(("\\", c))
    if state in ("squote", "dquote"):
        raise InputError(path, start, "unterminated quote in value (systemd EnvironmentFile)")
    if state == "value" and trailing_ws_from is not None:
        del out[trailing_ws_from:]
    return "".join(out), consumed


def _parse_podman(text: str, path: Path) -> list[EnvEntry]:
    entries: list[EnvEntry] = []
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.lstrip(" \t\n\v\f\r")
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not key:
            raise InputError(path, number, f"expected NAME=VALUE (podman --env-file), got {stripped!r}")
        if not sep:
            # podman copies a bare NAME from its own environment; the fleet's hosts are not this machine.
            raise InputError(path, number, f"bare {key!r} copies the host's own value under podman; expected NAME=VALUE")
        if not _NAME.match(key):
            raise InputError(path, number, f"{key!r} is not a variable name (podman --env-file takes NAME=VALUE literally)")
        entries.append(EnvEntry(key, value, path, number))
    return entries


_XTRACE_ASSIGN = re.compile(r"^\++(\d+):\s*(?:declare -x |export )?([A-Za-z_][A-Za-z0-9_]*)=")


# What bash set for a file, by its text: a render reads a service's env file every time it runs (the service's own
# render, each payload-defaults variant, the bench and deploy gates), and each read was a sandboxed bash. Keyed on
# the text, so an edited file is read again; bash reads it from stdin and sees no file of the repository (only the
# host's program directories), so the text is all it depends on, and the entries take the path they are read by.
# Only what bash read without an error is kept.
_SOURCED: dict[str, tuple[tuple[str, str, int], ...]] = {}
_SOURCED_LOCK = threading.Lock()


# The plain dialect: every line blank, a comment, or one NAME=VALUE (optionally after `export`, optionally followed by
# a comment) whose value bash takes as it is written: no quote, expansion, escape, glob, tilde or blank in it. What
# bash sets from such a file is each name's last value, at the line of its last assignment, so it is read here
# without starting bash. Names bash treats specially (its own variables, PATH, the locale, PS4 that shapes the
# trace) and anything else go to bash.
_PLAIN_LINE = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_./:,@%+=-]*)(?:[ \t]+#[^\n]*)?[ \t]*")
_PLAIN_SKIP = re.compile(r"[ \t]*(?:#[^\n]*)?")
_PLAIN_TEXT = re.compile(r"[\x20-\x7e\t\n]*")
_BASH_OWN = frozenset({
    "_", "BASH", "BASHOPTS", "BASHPID", "CDPATH", "CHILD_MAX", "COLUMNS", "COPROC", "DIRSTACK", "EMACS", "ENV", "EUID",
    "EXECIGNORE", "FCEDIT", "FIGNORE", "FUNCNAME", "FUNCNEST", "GROUPS", "HOME", "HOSTFILE", "HOSTNAME", "HOSTTYPE",
    "IFS", "IGNOREEOF", "INPUTRC", "INSIDE_EMACS", "LANG", "LINENO", "LINES", "MACHTYPE", "OLDPWD", "OPTARG", "OPTERR",
    "OPTIND", "OSTYPE", "PATH", "PIPESTATUS", "POSIXLY_CORRECT", "PPID", "PWD", "RANDOM", "REPLY", "SECONDS", "SHELL",
    "SHELLOPTS", "SHLVL", "SRANDOM", "TERM", "TIMEFORMAT", "TMOUT", "TMPDIR", "UID", "auto_resume", "histchars",
})
_BASH_OWN_PREFIXES = ("BASH", "COMP", "EPOCH", "GLOB", "HIST", "LC_", "MAIL", "PROMPT", "PS", "READLINE", "TEXTDOMAIN")
_PLAIN_MAX = 64 * 1024


def _read_plain(text: str, path: Path) -> list[EnvEntry] | None:
    """The entries bash would set from ``text``, when every line is in the plain dialect; None when bash must read it."""
    if len(text) > _PLAIN_MAX or not _PLAIN_TEXT.fullmatch(text):
        return None
    last: dict[str, EnvEntry] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        assignment = _PLAIN_LINE.fullmatch(line)
        if assignment is None:
            if _PLAIN_SKIP.fullmatch(line):
                continue
            return None
        name, value = assignment.groups()
        if name in _BASH_OWN or name.startswith(_BASH_OWN_PREFIXES):
            return None
        last.pop(name, None)
        last[name] = EnvEntry(name, value, path, number)
    return sorted(last.values(), key=lambda e: e.line)


def _parse_bash(text: str, path: Path) -> list[EnvEntry]:
    """Let bash read it, in the render's sandbox: source the file in an empty environment and collect what it set.
    A file in the plain dialect is read here instead, where the sandbox could run bash on it (so that a machine
    without one refuses as it would for any bash file)."""
    plain = _read_plain(text, path)
    if plain is not None and sandbox.sandbox_problem() is None:
        return plain
    with _SOURCED_LOCK:
        known = _SOURCED.get(text)
    if known is None:
        known = tuple((e.name, e.value, e.line) for e in _source_with_bash(text, path))
        with _SOURCED_LOCK:
            if len(_SOURCED) >= 4096:
                _SOURCED.clear()
            _SOURCED[text] = known
    return [EnvEntry(name, value, path, line) for name, value, line in known]


def _source_with_bash(text: str, path: Path) -> list[EnvEntry]:
    script = 'set -a; PS4="+\\${LINENO}: "; set -x; . /run/fleetgate/stdin; set +x; env -0'
    result = run(SandboxSpec(command=["/bin/bash", "--noprofile", "--norc", "-c", script, "fleetgate-envfile"],
                             env={"PATH": "/usr/bin:/bin"}, cwd=f"{INSIDE}/cwd", dirs=[f"{INSIDE}/cwd"],
                             stdin=text.encode("utf-8", "surrogateescape"), timeout=10),
                 what=path)
    if result.timed_out:
        raise InputError(path, None, "sourcing this file under bash did not finish in 10 s")
    stderr = result.stderr
    error = _bash_error(stderr, path)
    if error is not None or result.returncode != 0:
        raise error or InputError(path, None, f"bash exited {result.returncode} while sourcing it")
    lines: dict[str, int] = {}
    for trace in stderr.splitlines():
        match = _XTRACE_ASSIGN.match(trace)
        if match:
            lines[match.group(2)] = int(match.group(1))
    entries: list[EnvEntry] = []
    for item in result.files.get("stdout", b"").split(b"\0"):
        if not item:
            continue
        name, _, value = item.decode("utf-8", "replace").partition("=")
        if name in lines:
            entries.append(EnvEntry(name, value, path, lines[name]))
    entries.sort(key=lambda e: e.line)
    return entries


_BASH_ERROR = re.compile(r"^(?P<file>[^:]+): line (?P<line>\d+): (?P<message>.+)$")


def _bash_error(stderr: str, path: Path) -> InputError | None:
    for line in stderr.splitlines():
        if line.startswith("+"):
            continue
        match = _BASH_ERROR.match(line)
        if match and match.group("file") in ("/dev/stdin", "/run/fleetgate/stdin"):
            return InputError(path, int(match.group("line")), f"bash: {match.group('message')}")
    return None
