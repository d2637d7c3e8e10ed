"""Small helpers shared by the check modules (formatting only; no arithmetic, no parsing)."""

from __future__ import annotations

__all__ = ["gib", "mib"]


def gib(value: float) -> str:
    return f"{value / (1 << 30):.2f} GiB"


def mib(value: float) -> str:
    return f"{value / (1 << 20):,.0f} MiB"
