"""A model card's ``config.json`` (Hugging Face transformers) as the ledger reads it.

What a checkpoint states about its shape, before any file of weights is at hand: the blocks and which kind
each is (full attention, sliding window, linear attention / recurrent), KV heads and head size, the
vocabulary, the trained context, the dtype. vLLM's ledger (fleetgate.ledger.vllm) sizes its KV cache from
it; ``fleetgate profile --from-config`` writes a llama.cpp profile from it (``source = "config"``), with the
weights spread over the blocks by parameter count from a declared file size.

Multimodal cards keep the language model under ``text_config``; its keys win. Which blocks are which:

- ``layer_types`` (``full_attention`` / ``sliding_attention`` / ``linear_attention`` / ``mamba``) when the card
  lists them (transformers' own rule for gemma3, qwen3-next, qwen3.5 and others);
- else ``full_attention_interval`` (qwen3-next style hybrids: every n-th block is attention, the rest linear);
- else ``sliding_window_pattern`` / ``sliding_window`` with ``max_window_layers`` (qwen2: blocks from
  ``max_window_layers`` on use the window, when ``use_sliding_window``);
- else every block is full attention.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import InputError, read_text

__all__ = ["DTYPE_BYTES", "ModelConfig", "config_profile", "load_model_config", "model_config_from"]

DTYPE_BYTES: Mapping[str, int] = {
    "float32": 4, "float": 4, "fp32": 4, "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1, "uint8": 1,
}
# transformers model_type -> llama.cpp general.architecture, where the names differ
_LLAMA_ARCH: Mapping[str, str] = {
    "mistral": "llama", "gemma3_text": "gemma3", "qwen3_next": "qwen3next", "qwen3_5": "qwen35",
    "qwen3_5_moe": "qwen35moe", "qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "gpt_oss": "gpt-oss",
}
_KIND = {"full_attention": "A", "attention": "A", "sliding_attention": "S", "linear_attention": "R",
         "mamba": "R", "recurrent": "R"}


@dataclass(frozen=True)
class ModelConfig:
    path: str
    model_type: str
    n_layer: int
    """Trunk blocks (num_hidden_layers); nextn (MTP) blocks are ``nextn``."""
    nextn: int
    hidden_size: int
    intermediate_size: int
    n_head: int
    n_head_kv: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int | None
    dtype: str
    tie_word_embeddings: bool
    pattern: str
    """One letter per trunk block: A full attention, S sliding window, R linear attention / recurrent."""
    sliding_window: int
    n_experts: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    linear: Mapping[str, int]
    """Linear-attention (gated delta net) dims: conv_kernel, key_head_dim, value_head_dim, num_key_heads,
    num_value_heads (qwen3-next style); empty without recurrent blocks."""
    quantization: Mapping[str, Any]

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def attention_blocks(self) -> list[int]:
        return [il for il, kind in enumerate(self.pattern) if kind in "AS"]

    def parameters(self) -> dict[str, int]:
        """Parameters per lump, as the checkpoint's tensors hold them: token_embd, output, one per block kind."""
        h, q, kv = self.hidden_size, self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        attention = h * q * 2 + h * kv * 2 + 2 * h
        if self.n_experts:
            ffn = self.n_experts * 3 * h * self.moe_intermediate_size + h * self.n_experts
            ffn += 3 * h * self.shared_expert_intermediate_size
        else:
            ffn = 3 * h * self.intermediate_size
        out = {"token_embd": self.vocab_size * h, "output": 0 if self.tie_word_embeddings else self.vocab_size * h,
               "output_norm": h, "attention_block": attention + ffn}
        if "R" in self.pattern and self.linear:
            lin = self.linear
            keys = lin["num_key_heads"] * lin["key_head_dim"]
            values = lin["num_value_heads"] * lin["value_head_dim"]
            conv = (2 * keys + values) * lin["conv_kernel"]
            out["recurrent_block"] = h * (2 * keys + 2 * values) + h * values + conv + 2 * h + ffn
        if self.nextn:
            out["nextn_block"] = attention + ffn + 2 * h * h
        return out


def _int(data: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if value is None:
            raise InputError(Path(where), None, f"config.json has no {key}; expected an integer")
        raise InputError(Path(where), None, f"config.json {key} = {value!r}; expected an integer >= 0")
    return value


def model_config_from(data: Mapping[str, Any], where: str) -> ModelConfig:
    """A parsed config.json as a ModelConfig; a missing or mistyped key is one line naming it."""
    if not isinstance(data, Mapping):
        raise InputError(Path(where), None, "config.json is not a JSON object; expected a model card's config")
    text = data.get("text_config")
    cfg: dict[str, Any] = {**data, **text} if isinstance(text, Mapping) else dict(data)
    n_layer = _int(cfg, "num_hidden_layers", where)
    if not 0 < n_layer <= 1 << 12:
        raise InputError(Path(where), None, f"config.json num_hidden_layers = {n_layer}; expected 1 to 4096")
    n_head = _int(cfg, "num_attention_heads", where)
    hidden = _int(cfg, "hidden_size", where)
    n_kv = _int(cfg, "num_key_value_heads", where, n_head)
    head_dim = cfg.get("head_dim")
    head = _int(cfg, "head_dim", where) if head_dim is not None else (hidden // n_head if n_head else 0)
    window = cfg.get("sliding_window") or 0
    if isinstance(window, bool) or not isinstance(window, int):
        raise InputError(Path(where), None, f"config.json sliding_window = {window!r}; expected an integer or null")
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        unknown = sorted({str(k) for k in kinds if k not in _KIND})
        if unknown or len(kinds) < n_layer:
            raise InputError(Path(where), None, f"config.json layer_types has {len(kinds)} entries"
                             + (f" and {', '.join(unknown)}" if unknown else "")
                             + f"; expected {n_layer} of {', '.join(_KIND)}")
        pattern = "".join(_KIND[k] for k in kinds[:n_layer])
    elif cfg.get("full_attention_interval"):
        every = _int(cfg, "full_attention_interval", where)
        pattern = "".join("A" if (il + 1) % every == 0 else "R" for il in range(n_layer))
    elif window and cfg.get("sliding_window_pattern"):
        period = _int(cfg, "sliding_window_pattern", where)
        pattern = "".join("A" if (il + 1) % period == 0 else "S" for il in range(n_layer))
    elif window and cfg.get("use_sliding_window"):
        first = _int(cfg, "max_window_layers", where, 0)
        pattern = "".join("S" if il >= first else "A" for il in range(n_layer))
    else:
        pattern = "A" * n_layer
    if "S" not in pattern:
        window = 0
    linear: dict[str, int] = {}
    if "R" in pattern:
        keys = {"conv_kernel": "linear_conv_kernel_dim", "key_head_dim": "linear_key_head_dim",
                "value_head_dim": "linear_value_head_dim", "num_key_heads": "linear_num_key_heads",
                "num_value_heads": "linear_num_value_heads"}
        linear = {name: _int(cfg, key, where) for name, key in keys.items()}
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or data.get("torch_dtype") or "bfloat16")
    nextn = cfg.get("num_nextn_predict_layers", cfg.get("mtp_num_hidden_layers", 0)) or 0
    experts = cfg.get("num_experts", cfg.get("num_local_experts", cfg.get("n_routed_experts", 0))) or 0
    quant = data.get("quantization_config", cfg.get("quantization_config"))
    return ModelConfig(
        path=where, model_type=str(cfg.get("model_type", data.get("model_type", ""))), n_layer=n_layer,
        nextn=int(nextn), hidden_size=hidden, intermediate_size=_int(cfg, "intermediate_size", where, 0),
        n_head=n_head, n_head_kv=n_kv, head_dim=head, vocab_size=_int(cfg, "vocab_size", where),
        max_position_embeddings=cfg.get("max_position_embeddings"), dtype=dtype,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", data.get("tie_word_embeddings", False))),
        pattern=pattern, sliding_window=window, n_experts=int(experts),
        moe_intermediate_size=_int(cfg, "moe_intermediate_size", where, 0),
        shared_expert_intermediate_size=_int(cfg, "shared_expert_intermediate_size", where, 0),
        linear=linear, quantization=quant if isinstance(quant, Mapping) else {},
    )


def load_model_config(path: Path) -> ModelConfig:
    text = read_text(path, "config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"not valid JSON: {exc.msg}; expected a model card's config.json") from None
    return model_config_from(data, str(path))


def config_profile(config: ModelConfig, *, file_bytes: int, name: str) -> dict[str, Any]:
    """A reconstructed llama.cpp profile (``source = "config"``) from what a model card states.

    The shape is the card's; the weights are ``file_bytes`` (the size the Hub states for the GGUF) spread
    over the lumps by parameter count, so every block of a kind weighs the same: exact in total, an
    average per block (the placement of a split is as good as the quantisation is uniform).
    """
    params = config.parameters()
    counts = {"A": config.pattern.count("A") + config.pattern.count("S"), "R": config.pattern.count("R")}
    total = (params["token_embd"] + params["output"] + params["output_norm"]
             + counts["A"] * params["attention_block"] + counts["R"] * params.get("recurrent_block", 0)
             + config.nextn * params.get("nextn_block", 0))
    per = file_bytes / total if total else 0.0
    weights = {key: round(value * per) for key, value in params.items()}
    if config.tie_word_embeddings:
        weights.pop("output")
    if "S" in config.pattern:
        weights["swa_block"] = weights["attention_block"]
    model: dict[str, Any] = {
        "name": name, "source": "config", "file_bytes": file_bytes,
        "architecture": _LLAMA_ARCH.get(config.model_type, config.model_type),
        "block_count": config.n_layer + config.nextn, "nextn_layers": config.nextn,
        "n_embd": config.hidden_size, "n_vocab": config.vocab_size,
    }
    if config.max_position_embeddings:
        model["n_ctx_train"] = int(config.max_position_embeddings)
    attention: dict[str, Any] = {"head_count_kv": config.n_head_kv, "key_length": config.head_dim,
                                 "value_length": config.head_dim}
    if config.sliding_window:
        attention["sliding_window"] = config.sliding_window
    data: dict[str, Any] = {"model": model, "attention": attention,
                            "layers": {"pattern": config.pattern + "N" * config.nextn}}
    if config.linear:
        lin = config.linear
        data["recurrent"] = {
            "conv_kernel": lin["conv_kernel"], "inner_size": lin["value_head_dim"] * lin["num_value_heads"],
            "state_size": lin["key_head_dim"], "group_count": lin["num_key_heads"],
            "rollback": model["architecture"] in ("qwen35", "qwen35moe"),
        }
    data["weights"] = weights
    return data
