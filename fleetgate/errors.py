"""Errors about the fleet's own files: one line naming the file, the line and what was expected."""

from __future__ import annotations

from pathlib import Path

__all__ = ["InputError"]


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
