"""Errors about the fleet's own files: one line naming the file, the line and what was expected."""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["MAX_FILE_BYTES", "InputError", "NotRead", "non_finite", "parse_toml", "read_bytes", "read_text"]

MAX_FILE_BYTES = 16 << 20
"""No fleet file (manifest, unit, env file, script) is read past this size."""


class InputError(Exception):
    """A fleet file that cannot be read the way its consumer reads it.

    ``str()`` is always a single line: ``path:line: message``. The plugin and the CLI print it as
    is and never show a traceback for it.
    """

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = Path(path)
        self.line = line
        self.message = " ".join(message.split())
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else f"{self.path}"
        return f"{where}: {self.message}"


_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


class NotRead(InputError):
    """A file of a generator (a Nix module, an Ansible template) the reader cannot turn into what the host runs
    without the generator itself: the service is not judged (one line naming the value, its line and the generated
    file to give instead), never a finding."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_bytes(path: Path, what: str) -> bytes:
    """A fleet file's bytes, never blocking: a FIFO, a device, a directory or a huge file is one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(path, None, f"cannot read {what}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, None, f"{what} is {_kind(info.st_mode)}; expected a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise InputError(path, None, f"{what} is {info.st_size} bytes; expected at most {MAX_FILE_BYTES >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            return stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(path, None, f"cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_text(path: Path, what: str) -> str:
    """A fleet file as UTF-8 text; a byte that is not UTF-8 is one line naming its line and column."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(path, line, f"{what} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); "
                         "expected UTF-8 text") from None


def non_finite(data: Any, keys: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    """Every inf/nan in a parsed TOML document, with its key path (TOML allows them; no fleet value means them)."""
    if isinstance(data, float) and not math.isfinite(data):
        yield keys, data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from non_finite(value, (*keys, str(key)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from non_finite(value, (*keys, str(i)))


def parse_toml(text: str, path: Path) -> dict[str, Any]:
    """tomllib.loads, with a syntax error as an ``InputError`` on the line tomllib names."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise InputError(path, None, "not readable TOML: arrays or inline tables nested too deeply; "
                         "expected a flat manifest") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POSITION.search(message)
        line = int(match.group(1)) if match else None
        raise InputError(path, line, f"not valid TOML: {_TOML_POSITION.sub('', message).strip()}") from None
