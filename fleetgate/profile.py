"""Model profiles: what the seams and the ledger need to know about a GGUF, as TOML.

A profile is written by ``fleetgate profile MODEL.gguf`` from the GGUF header, or reconstructed by
hand from published figures (``source = "reconstructed"``) when the file is not at hand.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import InputError

__all__ = ["DrafterInfo", "Profile", "load_profile"]


@dataclass(frozen=True)
class DrafterInfo:
    block_size: int | None
    """Block-diffusion drafters draft at most block_size - 1 tokens (common/speculative.cpp)."""
    sliding_window: int | None


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    source: str
    architecture: str
    n_ctx_train: int | None
    rope_scaling: str | None
    drafter: DrafterInfo | None
    raw: dict[str, Any]


def load_profile(path: Path) -> Profile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(path, None, f"cannot read profile: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, None, f"not valid TOML: {exc}") from None
    model = data.get("model")
    if not isinstance(model, dict) or "architecture" not in model or "name" not in model:
        raise InputError(path, None, "expected a [model] table with at least name and architecture")
    drafter_raw = data.get("drafter")
    drafter = None
    if isinstance(drafter_raw, dict):
        drafter = DrafterInfo(block_size=drafter_raw.get("block_size"), sliding_window=drafter_raw.get("sliding_window"))
    return Profile(
        path=path,
        name=str(model["name"]),
        source=str(model.get("source", "gguf")),
        architecture=str(model["architecture"]),
        n_ctx_train=model.get("n_ctx_train"),
        rope_scaling=model.get("rope_scaling"),
        drafter=drafter,
        raw=data,
    )
