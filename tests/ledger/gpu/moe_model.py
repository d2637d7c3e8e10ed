"""A qwen3moe GGUF large enough that where its experts live matters, written as a sparse file.

Only the header and tensor infos are written; the file is then extended to its full size with zeros
(a sparse file, so it costs no disk). llama-server loads zero weights exactly as it loads real ones:
every buffer it allocates depends on the tensors' types and shapes alone. The tensor list follows
build 11434's src/models/qwen3moe.cpp ``load_arch_tensors``. The experts are Q8_0; ``ffn_down_exps``
has ``ne0 = n_ff_exp = 384``, not a multiple of 512, so the CUDA padding row applies to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter

from tests.ledger.tiny_models import N_VOCAB, _vocab

ALIGNMENT = 32  # GGUF's default general.alignment


@dataclass(frozen=True)
class MoeShape:
    n_layer: int = 8
    n_embd: int = 512
    n_head: int = 8
    n_head_kv: int = 2
    head_dim: int = 64
    n_expert: int = 32
    n_expert_used: int = 4
    n_ff_exp: int = 384
    n_ctx_train: int = 32768
    expert_type: str = "Q8_0"


def _nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    return n // block * size


def _pad(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def write_qwen3moe(path: Path, shape: MoeShape = MoeShape()) -> Path:
    s = shape
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_name(f"tiny-qwen3moe-{s.n_layer}L-{s.n_expert}e")
    w.add_block_count(s.n_layer)
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff_exp * s.n_expert_used)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    _vocab(w)
    total = 0

    def tensor(name: str, *ne: int, qtype: str = "F32") -> None:
        nonlocal total
        gtype = GGMLQuantizationType[qtype]
        nbytes = _nbytes(ne, gtype)
        block, size = GGML_QUANT_SIZES[gtype]
        # gguf-py takes numpy order with the innermost dimension in bytes for a raw type
        byte_shape = (*reversed(ne[1:]), ne[0] // block * size)
        w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=gtype)
        total += _pad(nbytes)

    tensor("token_embd.weight", s.n_embd, N_VOCAB, qtype="Q8_0")
    tensor("output_norm.weight", s.n_embd)
    tensor("output.weight", s.n_embd, N_VOCAB, qtype="F16")
    q_dim, kv_dim = s.head_dim * s.n_head, s.head_dim * s.n_head_kv
    for il in range(s.n_layer):
        tensor(f"blk.{il}.attn_norm.weight", s.n_embd)
        tensor(f"blk.{il}.attn_q.weight", s.n_embd, q_dim, qtype="F16")
        tensor(f"blk.{il}.attn_k.weight", s.n_embd, kv_dim, qtype="F16")
        tensor(f"blk.{il}.attn_v.weight", s.n_embd, kv_dim, qtype="F16")
        tensor(f"blk.{il}.attn_output.weight", q_dim, s.n_embd, qtype="F16")
        tensor(f"blk.{il}.attn_k_norm.weight", s.head_dim)
        tensor(f"blk.{il}.attn_q_norm.weight", s.head_dim)
        tensor(f"blk.{il}.ffn_norm.weight", s.n_embd)
        tensor(f"blk.{il}.ffn_gate_inp.weight", s.n_embd, s.n_expert)
        tensor(f"blk.{il}.ffn_gate_exps.weight", s.n_embd, s.n_ff_exp, s.n_expert, qtype=s.expert_type)
        tensor(f"blk.{il}.ffn_down_exps.weight", s.n_ff_exp, s.n_embd, s.n_expert, qtype=s.expert_type)
        tensor(f"blk.{il}.ffn_up_exps.weight", s.n_embd, s.n_ff_exp, s.n_expert, qtype=s.expert_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    os.truncate(path, _pad(path.stat().st_size) + total)
    GGUFReader(path)  # the reader maps every tensor: a size or offset off by a byte fails here
    return path


if __name__ == "__main__":  # pragma: no cover - a manual probe
    import sys
    out = write_qwen3moe(Path(sys.argv[1]))
    print(out, out.stat().st_size)
