"""Where each key of a TOML document is: line numbers for one-line error messages.

tomllib keeps no positions, so fleet.toml's keys are located from the text in one pass (``KeyIndex``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

__all__ = ["KeyIndex", "locate_key"]

_HEADER = re.compile(r"^\s*\[(\[)?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")


def _split_dotted(key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', key))


def locate_key(text: str, keys: Sequence[str]) -> int | None:
    """Best-effort line number of a key path in a TOML document (for error messages only).

    Array indices count ``[[table]]`` occurrences. Returns the deepest line that matches: the key's
    own line, else the line of its enclosing table.
    """
    return _index(text).line(keys)


@lru_cache(maxsize=8)
def _index(text: str) -> KeyIndex:
    # fleet.toml's loader asks once per service that pins an engine build: one index per text, not one per question
    # (each a pass over the whole manifest, which made the load quadratic in the fleet's size).
    return KeyIndex(text)


class KeyIndex:
    """Every table and key path of a TOML document with the first line it appears on: built in one pass,
    so that locating many keys (one per service, one per failure) is not a rescan of the file each time."""

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        array_counts: dict[tuple[str, ...], int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header:
                name = _split_dotted(header.group(2))
                if header.group(1):
                    index = array_counts.get(name, -1) + 1
                    array_counts[name] = index
                    table = (*name, str(index))
                else:
                    table = name
                self.lines.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                self.lines.setdefault((*table, *_split_dotted(key.group(1))), number)

    def line(self, keys: Sequence[str]) -> int | None:
        """The line of the longest prefix of ``keys`` that the document names (its first occurrence)."""
        for depth in range(len(keys), 0, -1):
            found = self.lines.get(tuple(keys[:depth]))
            if found is not None:
                return found
        return None

