"""A random-weight vision projector GGUF for SmolLM2 (no small vision model is on PyPI).

It follows the tensor list llama.cpp's loader expects for an ``mlp`` (LLaVA-style) projector
(tools/mtmd/clip.cpp: load_hparams, load_tensors; tools/mtmd/models/llava.cpp): a one-block ViT over
8x8 patches of a 32x32 image, then two linear layers into the text model's 576-dim embedding. It
proves the mechanics -- the server loads it, reports vision, accepts an image and bills its tokens --
and nothing about what the model sees: random weights cannot name a colour.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

TEXT_EMBD = 576  # SmolLM2-135M's embedding width
IMAGE_SIZE = 32
PATCH = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2


def write_random_projector(
    path: Path, *, n_embd: int = 32, n_ff: int = 64, n_head: int = 2, seed: int = 0
) -> Path:
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("general.name", "fleetgate random projector (test only)")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", "mlp")
    writer.add_uint32("clip.vision.embedding_length", n_embd)
    writer.add_uint32("clip.vision.feed_forward_length", n_ff)
    writer.add_uint32("clip.vision.block_count", 1)
    writer.add_uint32("clip.vision.projection_dim", TEXT_EMBD)
    writer.add_uint32("clip.vision.attention.head_count", n_head)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    writer.add_uint32("clip.vision.patch_size", PATCH)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_bool("clip.use_gelu", True)

    def random(name: str, *shape: int) -> None:  # numpy shape = ggml ne reversed
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    random("v.patch_embd.weight", n_embd, 3, PATCH, PATCH)
    random("v.position_embd.weight", IMAGE_TOKENS, n_embd)
    for norm in ("ln1", "ln2"):
        writer.add_tensor(f"v.blk.0.{norm}.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(f"v.blk.0.{norm}.bias", np.zeros(n_embd, np.float32))
    for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
        random(f"v.blk.0.{proj}.weight", n_embd, n_embd)
        random(f"v.blk.0.{proj}.bias", n_embd)
    random("v.blk.0.ffn_up.weight", n_ff, n_embd)
    random("v.blk.0.ffn_up.bias", n_ff)
    random("v.blk.0.ffn_down.weight", n_embd, n_ff)
    random("v.blk.0.ffn_down.bias", n_embd)
    random("mm.0.weight", TEXT_EMBD, n_embd)
    random("mm.0.bias", TEXT_EMBD)
    random("mm.2.weight", TEXT_EMBD, TEXT_EMBD)
    random("mm.2.bias", TEXT_EMBD)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
