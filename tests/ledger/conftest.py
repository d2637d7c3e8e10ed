"""Fixtures for the ledger's own tests: the real engine and the models it loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledger.engine import Engine, find_engine, model_paths
from tests.ledger.tiny_models import (
    DflashShape,
    Qwen3MoeShape,
    Qwen35Shape,
    write_dflash,
    write_qwen3moe,
    write_qwen35,
)


@pytest.fixture(scope="session")
def engine() -> Engine:
    try:
        return find_engine()
    except RuntimeError as exc:
        # a missing engine is a failure, not a skip: the proof of the ledger is the real server
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    try:
        paths = model_paths(root)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    paths["qwen35"] = write_qwen35(root / "tiny-qwen35.gguf")
    paths["qwen35-mtp"] = write_qwen35(root / "tiny-qwen35-mtp.gguf", Qwen35Shape(nextn=1))
    paths["dflash"] = write_dflash(root / "tiny-dflash.gguf")
    paths["dflash-swa"] = write_dflash(root / "tiny-dflash-swa.gguf", DflashShape(sliding_window=64))
    paths["moe"] = write_qwen3moe(root / "tiny-qwen3moe.gguf")
    paths["moe-q4"] = write_qwen3moe(root / "tiny-qwen3moe-q4.gguf", Qwen3MoeShape(expert_type="Q4_0"))
    return paths
