"""A requirement of fleetgate missing from this Python, said in one line instead of pytest's traceback."""

from __future__ import annotations

import sys

import pytest

__all__ = ["missing_requirement"]


def missing_requirement(missing: ModuleNotFoundError) -> pytest.UsageError | None:
    """The usage error naming the package this Python lacks; None when the missing module is fleetgate's own (a bug)."""
    if not missing.name or missing.name.partition(".")[0] == "fleetgate":
        return None
    return pytest.UsageError(
        f"fleetgate needs the {missing.name.partition('.')[0]} package, which this Python ({sys.executable}) does not "
        "have: run the pytest of the environment the README's set-up command made (.venv/bin/pytest), or install "
        "fleetgate into this one (pip install -e .)")
