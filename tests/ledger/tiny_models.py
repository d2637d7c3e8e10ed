"""Tiny random-weight GGUFs for architectures the fleet uses but PyPI has no small model of.

Each writer follows the tensor list build 11434's loader expects (src/models/qwen35.cpp
``load_arch_tensors``, src/models/dflash.cpp ``load_arch_tensors``, src/models/qwen3moe.cpp
``load_arch_tensors``) so the real llama-server loads the
file, allocates its buffers and reports their sizes. The weights are noise: these models exist to be
loaded and measured, not to talk. All models share one small byte-level BPE vocabulary, so a target and
its drafter are compatible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quant_shape_to_byte_shape, quantize

N_VOCAB = 260  # 256 byte tokens, 2 merges, 2 specials


def _byte_tokens() -> list[str]:
    """GPT-2's bytes_to_unicode alphabet: one printable character per byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return [chr(c) for c in chars]


def _vocab(writer: GGUFWriter) -> None:
    tokens = [*_byte_tokens(), "Ġt", "Ġa", "<|endoftext|>", "<|mask|>"]
    assert len(tokens) == N_VOCAB
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 258 + [3, 3])
    writer.add_token_merges(["Ġ t", "Ġ a"])
    writer.add_bos_token_id(258)
    writer.add_eos_token_id(258)
    writer.add_uint32("tokenizer.ggml.mask_token_id", 259)
    writer.add_add_bos_token(False)


class _Tensors:
    def __init__(self, writer: GGUFWriter, seed: int) -> None:
        self.writer = writer
        self.rng = np.random.default_rng(seed)

    def add(self, name: str, *shape: int, qtype: str = "F16") -> None:
        """shape as llama.cpp counts it: ne0 first."""
        np_shape = tuple(reversed(shape))
        data = (self.rng.standard_normal(np_shape) * 0.02).astype(np.float32)
        if name.endswith("norm.weight") or name.endswith("ssm_norm.weight"):
            data = np.ones(np_shape, dtype=np.float32)
        if qtype == "F32" or len(shape) == 1:
            self.writer.add_tensor(name, data)
        elif qtype == "F16":
            self.writer.add_tensor(name, data.astype(np.float16))
        else:
            gtype = GGMLQuantizationType[qtype]
            try:
                packed = quantize(data, gtype)
            except NotImplementedError:
                # gguf's Python quantizer has no K-quants: random blocks of the right size (scales included; the
                # engine loads and sizes them the same, and nothing here is meant to compute)
                packed = self.rng.integers(0, 256, size=quant_shape_to_byte_shape(np_shape, gtype), dtype=np.uint8)
            self.writer.add_tensor(name, packed, raw_dtype=gtype)


@dataclass(frozen=True)
class _Dims:
    """What every block-structured writer shares: the attention shape and the trained window."""

    n_layer: int = 8
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    n_ff: int = 128
    n_ctx_train: int = 8192


def _header(writer: GGUFWriter, dims: _Dims, *, name: str, blocks: int, rope_dims: int) -> None:
    writer.add_name(name)
    writer.add_block_count(blocks)
    writer.add_context_length(dims.n_ctx_train)
    writer.add_embedding_length(dims.n_embd)
    writer.add_feed_forward_length(dims.n_ff)
    writer.add_head_count(dims.n_head)
    writer.add_head_count_kv(dims.n_head_kv)
    writer.add_key_length(dims.head_dim)
    writer.add_value_length(dims.head_dim)
    writer.add_rope_dimension_count(rope_dims)
    writer.add_rope_freq_base(1e7)
    writer.add_layer_norm_rms_eps(1e-6)


@dataclass(frozen=True)
class Qwen35Shape(_Dims):
    nextn: int = 0
    d_conv: int = 4
    d_state: int = 16
    n_group: int = 2
    dt_rank: int = 4
    interval: int = 4
    tied_output: bool = False
    matrix_type: str = "Q8_0"


def write_qwen35(path: Path, shape: Qwen35Shape = Qwen35Shape(), *, seed: int = 1) -> Path:
    """A qwen35 hybrid: (interval-1) DeltaNet blocks then an attention block, repeated; nextn blocks last."""
    s = shape
    n_all = s.n_layer + s.nextn
    w = GGUFWriter(str(path), "qwen35")
    _header(w, s, name=f"tiny-qwen35-{s.n_layer}L{'-mtp' if s.nextn else ''}", blocks=n_all,
            rope_dims=s.head_dim // 2)
    if s.nextn:
        w.add_uint32("qwen35.nextn_predict_layers", s.nextn)
    w.add_rope_dimension_sections([s.head_dim // 8, s.head_dim // 16, s.head_dim // 16, 0])
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_ssm_inner_size(s.d_state * s.dt_rank)
    w.add_ssm_state_size(s.d_state)
    w.add_ssm_time_step_rank(s.dt_rank)
    w.add_ssm_group_count(s.n_group)
    w.add_uint32("qwen35.full_attention_interval", s.interval)
    _vocab(w)
    t = _Tensors(w, seed)
    q = s.matrix_type
    t.add("token_embd.weight", s.n_embd, N_VOCAB, qtype="Q8_0")
    t.add("output_norm.weight", s.n_embd)
    if not s.tied_output:
        t.add("output.weight", s.n_embd, N_VOCAB, qtype="F16")
    key_dim = s.d_state * s.n_group
    value_dim = s.d_state * s.dt_rank

    def attention(il: int) -> None:
        t.add(f"blk.{il}.attn_q.weight", s.n_embd, s.head_dim * s.n_head * 2, qtype=q)
        t.add(f"blk.{il}.attn_k.weight", s.n_embd, s.head_dim * s.n_head_kv, qtype=q)
        t.add(f"blk.{il}.attn_v.weight", s.n_embd, s.head_dim * s.n_head_kv, qtype=q)
        t.add(f"blk.{il}.attn_output.weight", s.head_dim * s.n_head, s.n_embd, qtype=q)
        t.add(f"blk.{il}.attn_q_norm.weight", s.head_dim)
        t.add(f"blk.{il}.attn_k_norm.weight", s.head_dim)

    def common(il: int) -> None:
        t.add(f"blk.{il}.attn_norm.weight", s.n_embd)
        t.add(f"blk.{il}.post_attention_norm.weight", s.n_embd)
        t.add(f"blk.{il}.ffn_gate.weight", s.n_embd, s.n_ff, qtype=q)
        t.add(f"blk.{il}.ffn_down.weight", s.n_ff, s.n_embd, qtype=q)
        t.add(f"blk.{il}.ffn_up.weight", s.n_embd, s.n_ff, qtype=q)

    for il in range(s.n_layer):
        common(il)
        if (il + 1) % s.interval == 0:
            attention(il)
        else:
            t.add(f"blk.{il}.attn_qkv.weight", s.n_embd, key_dim * 2 + value_dim, qtype=q)
            t.add(f"blk.{il}.attn_gate.weight", s.n_embd, value_dim, qtype=q)
            t.add(f"blk.{il}.ssm_conv1d.weight", s.d_conv, key_dim * 2 + value_dim, qtype="F32")
            t.add(f"blk.{il}.ssm_dt.bias", s.dt_rank)
            t.add(f"blk.{il}.ssm_a", s.dt_rank)
            t.add(f"blk.{il}.ssm_beta.weight", s.n_embd, s.dt_rank, qtype="F16")
            t.add(f"blk.{il}.ssm_alpha.weight", s.n_embd, s.dt_rank, qtype="F16")
            t.add(f"blk.{il}.ssm_norm.weight", s.d_state)
            t.add(f"blk.{il}.ssm_out.weight", value_dim, s.n_embd, qtype=q)
    for il in range(s.n_layer, n_all):
        common(il)
        attention(il)
        t.add(f"blk.{il}.nextn.eh_proj.weight", 2 * s.n_embd, s.n_embd, qtype=q)
        t.add(f"blk.{il}.nextn.enorm.weight", s.n_embd)
        t.add(f"blk.{il}.nextn.hnorm.weight", s.n_embd)
    _finish(w)
    return path


@dataclass(frozen=True)
class DflashShape(_Dims):
    n_layer: int = 2
    block_size: int = 4
    sliding_window: int = 0
    target_layers: Sequence[int] = (1, 3)


def write_dflash(path: Path, shape: DflashShape = DflashShape(), *, seed: int = 2) -> Path:
    """A block-diffusion drafter (arch dflash) that shares its target's embeddings and head."""
    s = shape
    w = GGUFWriter(str(path), "dflash")
    _header(w, s, name=f"tiny-dflash{'-swa' if s.sliding_window else ''}", blocks=s.n_layer,
            rope_dims=s.head_dim)
    w.add_uint32("dflash.block_size", s.block_size)
    w.add_array("dflash.target_layers", [int(x) for x in s.target_layers])
    if s.sliding_window:
        w.add_sliding_window(s.sliding_window)
        w.add_array("dflash.attention.sliding_window_pattern", [True] * s.n_layer)
    _vocab(w)
    t = _Tensors(w, seed)
    t.add("fc.weight", len(s.target_layers) * s.n_embd, s.n_embd, qtype="F16")
    t.add("enc.output_norm.weight", s.n_embd)
    t.add("output_norm.weight", s.n_embd)
    for il in range(s.n_layer):
        t.add(f"blk.{il}.attn_norm.weight", s.n_embd)
        t.add(f"blk.{il}.attn_q.weight", s.n_embd, s.head_dim * s.n_head)
        t.add(f"blk.{il}.attn_k.weight", s.n_embd, s.head_dim * s.n_head_kv)
        t.add(f"blk.{il}.attn_v.weight", s.n_embd, s.head_dim * s.n_head_kv)
        t.add(f"blk.{il}.attn_output.weight", s.head_dim * s.n_head, s.n_embd)
        t.add(f"blk.{il}.attn_q_norm.weight", s.head_dim)
        t.add(f"blk.{il}.attn_k_norm.weight", s.head_dim)
        t.add(f"blk.{il}.ffn_norm.weight", s.n_embd)
        t.add(f"blk.{il}.ffn_gate.weight", s.n_embd, s.n_ff)
        t.add(f"blk.{il}.ffn_down.weight", s.n_ff, s.n_embd)
        t.add(f"blk.{il}.ffn_up.weight", s.n_embd, s.n_ff)
    _finish(w)
    return path


@dataclass(frozen=True)
class Qwen3MoeShape(_Dims):
    n_layer: int = 4
    n_expert: int = 8
    n_expert_used: int = 2
    n_ff_exp: int = 64
    expert_type: str = "Q8_0"
    """The type of the expert matrices: Q8_0 is never repacked on x86; Q4_0 goes to CPU_REPACK on the host."""
    matrix_type: str = "F16"


def write_qwen3moe(path: Path, shape: Qwen3MoeShape = Qwen3MoeShape(), *, seed: int = 3) -> Path:
    """A qwen3moe model: attention with q/k norms, a router and three stacked expert matrices per block
    (``blk.N.ffn_{gate,up,down}_exps.weight``, the names ``--cpu-moe`` and ``--n-cpu-moe`` match)."""
    s = shape
    w = GGUFWriter(str(path), "qwen3moe")
    _header(w, s, name=f"tiny-qwen3moe-{s.n_layer}L-{s.expert_type}", blocks=s.n_layer, rope_dims=s.head_dim)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    _vocab(w)
    t = _Tensors(w, seed)
    q, e = s.matrix_type, s.expert_type
    t.add("token_embd.weight", s.n_embd, N_VOCAB, qtype="Q8_0")
    t.add("output_norm.weight", s.n_embd)
    t.add("output.weight", s.n_embd, N_VOCAB, qtype="F16")
    for il in range(s.n_layer):
        t.add(f"blk.{il}.attn_norm.weight", s.n_embd)
        t.add(f"blk.{il}.attn_q.weight", s.n_embd, s.head_dim * s.n_head, qtype=q)
        t.add(f"blk.{il}.attn_k.weight", s.n_embd, s.head_dim * s.n_head_kv, qtype=q)
        t.add(f"blk.{il}.attn_v.weight", s.n_embd, s.head_dim * s.n_head_kv, qtype=q)
        t.add(f"blk.{il}.attn_output.weight", s.head_dim * s.n_head, s.n_embd, qtype=q)
        t.add(f"blk.{il}.attn_q_norm.weight", s.head_dim)
        t.add(f"blk.{il}.attn_k_norm.weight", s.head_dim)
        t.add(f"blk.{il}.ffn_norm.weight", s.n_embd)
        t.add(f"blk.{il}.ffn_gate_inp.weight", s.n_embd, s.n_expert, qtype="F32")
        t.add(f"blk.{il}.ffn_gate_exps.weight", s.n_embd, s.n_ff_exp, s.n_expert, qtype=e)
        t.add(f"blk.{il}.ffn_down_exps.weight", s.n_ff_exp, s.n_embd, s.n_expert, qtype=e)
        t.add(f"blk.{il}.ffn_up_exps.weight", s.n_embd, s.n_ff_exp, s.n_expert, qtype=e)
    _finish(w)
    return path


def _finish(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
