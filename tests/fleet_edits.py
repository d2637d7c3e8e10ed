"""A copy of the example fleet with text edits, for tests that hold a check to a variant of one file."""

from __future__ import annotations

import shutil
from pathlib import Path

FLEET = Path(__file__).resolve().parents[1] / "fixtures" / "fleet"

Edit = tuple[str, str, str]
"""(file relative to the fleet, text that occurs exactly once, its replacement)."""


def edited_fleet(tmp_path: Path, edits: list[Edit]) -> Path:
    """The example fleet copied under ``tmp_path`` with ``edits`` applied; returns its fleet.toml."""
    target = tmp_path / "fleet"
    shutil.copytree(FLEET, target, symlinks=True)
    for file, old, new in edits:
        text = (target / file).read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
        (target / file).write_text(text.replace(old, new), encoding="utf-8")
    return target / "fleet.toml"
