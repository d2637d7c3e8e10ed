"""Every id the suite cites, defined inside the repository.

Invariants (``B-*``), live checks (``C-*``) and fleetgate's own rules (``FG-*``) are defined with their
rule text in ``fleetgate/data/ids.toml``; incidents (``INC-*``) are the catalogue's entries, each with
its story (``fleetgate.incidents``). ``undefined`` finds cited ids that resolve to nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from fleetgate.errors import InputError, parse_toml

__all__ = ["ID_PATTERN", "Definition", "definitions", "find_ids", "undefined"]

ID_PATTERN = re.compile(r"\b(?:B-[A-Z]+-\d+|C-[A-Z]+-\d+|FG-[A-Z]+-\d+|INC-\d{2})\b")


@dataclass(frozen=True)
class Definition:
    id: str
    section: str
    rule: str
    """The rule (B-*, FG-*) or the check (C-*), in the runbooks' words."""
    fields: tuple[tuple[str, str], ...]
    """Everything else the definition says (threshold, source quote, how, expected, applies, seed)."""

    @property
    def kind(self) -> str:
        return {"B": "invariant", "C": "live check", "FG": "fleetgate rule"}[self.id.split("-")[0]]


@cache
def definitions() -> Mapping[str, Definition]:
    """The B-*, C-* and FG-* definitions shipped with fleetgate."""
    source = resources.files("fleetgate") / "data" / "ids.toml"
    path = Path(str(source))
    data = parse_toml(source.read_text(encoding="utf-8"), path)
    found: dict[str, Definition] = {}
    for key, table in data.items():
        if not ID_PATTERN.fullmatch(key) or not isinstance(table, dict) or "rule" not in table:
            raise InputError(path, None, f"[{key!r}]: expected an id (B-*, C-*, FG-*) with a 'rule'")
        extra = tuple((k, str(v)) for k, v in table.items() if k not in ("section", "rule"))
        found[key] = Definition(id=key, section=str(table.get("section", "")), rule=str(table["rule"]), fields=extra)
    return found


def find_ids(text: str) -> list[str]:
    """Every id named in ``text``, in order of first appearance."""
    return list(dict.fromkeys(ID_PATTERN.findall(text)))


def undefined(cited: Iterable[str], incidents: Iterable[str]) -> list[str]:
    """The cited ids that are neither defined in ids.toml nor an entry of the catalogue."""
    known = set(definitions()) | set(incidents)
    return sorted({i for i in cited if i not in known})
