"""Pack what the GPU boots need into one folder that travels to the GPU machine.

The real GGUFs travel as their headers only (everything before the tensor data) plus their size: the
GPU machine restores each file's size with zeros, and zero weights allocate exactly what the real ones
do. The tiny models (qwen35 hybrids, a DFlash drafter, the
random mmproj of tests/live/mmproj.py) travel whole; the qwen3moe of tests/ledger/gpu/moe_model.py
travels as its header. Usage: ``python -m tests.ledger.gpu.prepare DIR SDIST.tar.gz``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from gguf import GGUFReader

from tests.ledger.engine import model_paths
from tests.ledger.gpu.moe_model import write_qwen3moe
from tests.ledger.tiny_models import Qwen35Shape, write_dflash, write_qwen35
from tests.live.mmproj import write_random_projector


def header_only(model: Path, dest: Path) -> dict[str, int]:
    offset = GGUFReader(model).data_offset
    with model.open("rb") as src:
        dest.write_bytes(src.read(offset))
    return {"size": model.stat().st_size, "data_offset": offset}


def main(out: Path, sdist: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    models = out / "models"
    models.mkdir(exist_ok=True)
    cache = out.parent / "model-cache"
    cache.mkdir(exist_ok=True)
    manifest: dict[str, dict[str, int | str]] = {}
    for name, path in model_paths(cache).items():
        manifest[name] = {"file": f"{name}.gguf", **header_only(path, models / f"{name}.hdr")}
    # the MoE model is a sparse file of zeros past its header: it travels as that header
    moe = write_qwen3moe(cache / "qwen3moe.gguf")
    manifest["qwen3moe"] = {"file": "qwen3moe.gguf", **header_only(moe, models / "qwen3moe.hdr")}
    write_qwen35(models / "qwen35.gguf")
    write_qwen35(models / "qwen35-mtp.gguf", Qwen35Shape(nextn=1))
    write_dflash(models / "dflash.gguf")
    write_random_projector(models / "mmproj.gguf")
    for name in ("qwen35", "qwen35-mtp", "dflash", "mmproj"):
        manifest[name] = {"file": f"{name}.gguf"}
    (models / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if sdist.resolve() != (out / "llama.tar.gz").resolve():
        shutil.copy(sdist, out / "llama.tar.gz")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
