"""Errors about the fleet's own files: one line naming the file, the line and what was expected."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["InputError", "parse_toml"]


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


def parse_toml(text: str, path: Path) -> dict[str, Any]:
    """tomllib.loads, with a syntax error as an ``InputError`` on the line tomllib names."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POSITION.search(message)
        line = int(match.group(1)) if match else None
        raise InputError(path, line, f"not valid TOML: {_TOML_POSITION.sub('', message).strip()}") from None
