"""The context's parameters, and whether it runs flash attention.

- Context (src/llama-context.cpp, ``llama_context::llama_context``): ``n_ctx = PAD256(-c or n_ctx_train)``,
  ``n_ctx_seq = n_ctx`` when unified else ``PAD256(n_ctx / n_seq)``; ``n_ubatch = min(n_batch, ubatch)``.
- Embedding services (``--embedding``, ``--rerank``; ``--pooling`` other than ``none``): every token of a batch is
  an output (tools/server/server-context.cpp ``server_output_limits``: ``n_outputs_max = n_batch``), and the
  batch must fit one ubatch (tools/server/server.cpp and common/common.cpp ``common_init_from_params``: "setting
  n_batch = n_ubatch").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import TRUTHY, ContextShape, LlamaServerConfig, pad
from fleetgate.ledger.accounts import Refusal
from fleetgate.ledger.devices import FLOAT_TYPES, Card
from fleetgate.ledger.options import flag_value
from fleetgate.models.profile import Profile

__all__ = ["FA_HEAD_SIZES", "FA_KV_TYPES", "ContextParams", "context_params", "embedding_mode", "fa_kernel",
           "resolve_flash_attn"]


@dataclass(frozen=True)
class ContextParams:
    """The target context's size and batches, as llama_context computes them from the command line."""

    shape: ContextShape
    n_batch: int
    n_ubatch: int
    embedding: bool = False
    """``--embedding`` (or ``--rerank``): the context also returns embeddings (``cparams.embeddings``)."""
    every_token: bool = False
    """Every token of a batch is an output: embedding mode, or a pooling type other than none."""

    @property
    def n_seq(self) -> int:
        return self.shape.n_seq_max

    @property
    def n_ctx_seq(self) -> int:
        return self.shape.n_ctx_seq

    @property
    def unified(self) -> bool:
        return self.shape.unified


EMBEDDING_FLAGS = ("--embedding", "--embeddings", "LLAMA_ARG_EMBEDDINGS", "--rerank", "--reranking",
                   "LLAMA_ARG_RERANKING")


def embedding_mode(config: LlamaServerConfig) -> tuple[bool, bool]:
    """(embedding, every token an output): common/arg.cpp ``--embedding`` and ``--rerank`` set
    ``params.embedding`` (an environment variable only when truthy); ``--pooling`` sets the pooling type, and any but
    ``none`` makes every token an output (tools/server/server-context.cpp ``server_output_limits``)."""
    embedding = False
    for uses in config.parsed.uses.values():
        for use in uses:
            if use.flag in EMBEDDING_FLAGS and (use.value is None or use.value.lower() in TRUTHY):
                embedding = True
    pooling = (flag_value(config, "--pooling", "LLAMA_ARG_POOLING") or "").lower()
    return embedding, embedding or pooling not in ("", "none")


def context_params(config: LlamaServerConfig, target: Profile) -> ContextParams:
    embedding, every_token = embedding_mode(config)
    n_seq = max(1, config.n_slots)
    unified = config.unified_kv
    n_ctx = pad(config.ctx_size or target.n_ctx_train or 0, 256)
    n_ctx_seq = n_ctx if unified else pad(n_ctx // n_seq, 256)
    if not unified:
        n_ctx = n_ctx_seq * n_seq
    shape = ContextShape(n_ctx=n_ctx, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq, unified=unified)
    n_batch = min(n_ctx, config.batch_size) if n_ctx else config.batch_size
    n_ubatch = min(n_batch, config.ubatch_size or n_batch)
    if embedding:
        n_batch = n_ubatch  # tools/server/server.cpp: "setting n_batch = n_ubatch" (embeddings need one ubatch)
    return ContextParams(shape=shape, n_batch=n_batch, n_ubatch=n_ubatch, embedding=embedding,
                         every_token=every_token)


# ggml/src/ggml-cuda/fattn.cu ggml_cuda_get_best_fattn_kernel: the head sizes CUDA/HIP flash attention has
# kernels for; with ``-fa auto`` any other size turns flash attention off (src/llama-context.cpp,
# resolve_fused_ops: "Flash Attention not supported, set to disabled"), seen on the H200 with head size 32
FA_HEAD_SIZES: Mapping[str, frozenset[int]] = {
    "CUDA": frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576}),
    "ROCm": frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576}),
}
# ggml/src/ggml-cuda/fattn.cu ggml_cuda_fattn_kv_type_supported: the K and V types a CUDA/HIP flash-attention kernel
# reads in build 11434 (no GGML_CUDA_FA_ALL_QUANTS switch there); for any other (iq4_nl, q5_k ...) supports_op refuses
# the node and ggml-backend.cpp ggml_backend_sched_split_graph gives it to the CPU, next to whatever cache it reads
FA_KV_TYPES: Mapping[str, frozenset[str]] = {
    "CUDA": frozenset({"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}),
    "ROCm": frozenset({"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}),
}


def fa_kernel(card: Card, profile: Profile, type_k: str, type_v: str) -> bool:
    """Whether the card's backend runs a flash-attention node of this model over a cache of these types
    (fattn.cu ``ggml_cuda_get_best_fattn_kernel``: a head size with a kernel, V's as wide as K's, K and V of a
    type it reads); True for a backend without a table here (the CPU runs every case)."""
    sizes = FA_HEAD_SIZES.get(card.backend.kind)
    types = FA_KV_TYPES.get(card.backend.kind)
    if sizes is None or types is None:
        return True
    return profile.key_length in sizes and profile.value_length == profile.key_length \
        and type_k.upper() in types and type_v.upper() in types


def resolve_flash_attn(config: LlamaServerConfig, profile: Profile, notes: list[str],
                       devices: Sequence[Card] = (), refusals: list[Refusal] | None = None) -> bool:
    """Whether the context runs flash attention: ``-fa on/off``; ``auto`` is on unless a device holding
    layers lacks a kernel for the head size or the cache's types (``fa_kernel``); a quantized V cache needs it (src/llama.cpp,
    llama_init_from_model: "enabling flash_attn since it is required for quantized V cache")."""
    mode = config.flash_attn
    quantized_v = config.cache_type_v.upper() not in FLOAT_TYPES
    if mode == "off":
        if quantized_v:
            notes.append(f"-fa off with a {config.cache_type_v} V cache: llama-server refuses to start "
                         "(a quantized V cache needs flash attention)")
            if refusals is not None:
                refusals.append(Refusal("quantized V cache was requested, but this requires Flash Attention",
                                        "flash_attn", "src/llama-context.cpp llama_context::llama_context"))
        return False
    if mode == "on" or quantized_v:
        return True
    for card in devices:
        if not fa_kernel(card, profile, "F16", "F16"):
            notes.append(f"-fa auto: {card.name} has no flash-attention kernel for head size "
                         f"{profile.key_length}: flash attention is off")
            return False
        if not fa_kernel(card, profile, config.cache_type_k, config.cache_type_v):
            # resolve_fused_ops' probe finds the node on the CPU, not on the layer's device
            notes.append(f"-fa auto: {card.name} has no flash-attention kernel for a {config.cache_type_k} K / "
                         f"{config.cache_type_v} V cache: flash attention is off")
            return False
    return True
