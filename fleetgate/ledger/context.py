"""The context's parameters, and whether it runs flash attention.

- Context (src/llama-context.cpp, ``llama_context::llama_context``): ``n_ctx = PAD256(-c or n_ctx_train)``,
  ``n_ctx_seq = n_ctx`` when unified else ``PAD256(n_ctx / n_seq)``; ``n_ubatch = min(n_batch, ubatch)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import ContextShape, LlamaServerConfig, pad
from fleetgate.ledger.accounts import Refusal
from fleetgate.ledger.devices import FLOAT_TYPES, Card
from fleetgate.profile import Profile

__all__ = ["FA_HEAD_SIZES", "ContextParams", "context_params", "resolve_flash_attn"]


@dataclass(frozen=True)
class ContextParams:
    """The target context's size and batches, as llama_context computes them from the command line."""

    shape: ContextShape
    n_batch: int
    n_ubatch: int

    @property
    def n_seq(self) -> int:
        return self.shape.n_seq_max

    @property
    def n_ctx_seq(self) -> int:
        return self.shape.n_ctx_seq

    @property
    def unified(self) -> bool:
        return self.shape.unified


def context_params(config: LlamaServerConfig, target: Profile) -> ContextParams:
    n_seq = max(1, config.n_slots)
    unified = config.unified_kv
    n_ctx = pad(config.ctx_size or target.n_ctx_train or 0, 256)
    n_ctx_seq = n_ctx if unified else pad(n_ctx // n_seq, 256)
    if not unified:
        n_ctx = n_ctx_seq * n_seq
    shape = ContextShape(n_ctx=n_ctx, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq, unified=unified)
    n_batch = min(n_ctx, config.batch_size) if n_ctx else config.batch_size
    n_ubatch = min(n_batch, config.ubatch_size or n_batch)
    return ContextParams(shape=shape, n_batch=n_batch, n_ubatch=n_ubatch)


# ggml/src/ggml-cuda/fattn.cu ggml_cuda_get_best_fattn_kernel: the head sizes CUDA/HIP flash attention has
# kernels for; with ``-fa auto`` any other size turns flash attention off (src/llama-context.cpp,
# resolve_fused_ops: "Flash Attention not supported, set to disabled"), seen on the H200 with head size 32
FA_HEAD_SIZES: Mapping[str, frozenset[int]] = {
    "CUDA": frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576}),
    "ROCm": frozenset({40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576}),
}


def resolve_flash_attn(config: LlamaServerConfig, profile: Profile, notes: list[str],
                       devices: Sequence[Card] = (), refusals: list[Refusal] | None = None) -> bool:
    """Whether the context runs flash attention: ``-fa on/off``; ``auto`` is on unless a device holding
    layers lacks a kernel for the head size; a quantized V cache needs it (src/llama.cpp,
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
        sizes = FA_HEAD_SIZES.get(card.backend.kind)
        if sizes is not None and (profile.key_length not in sizes or profile.value_length != profile.key_length):
            notes.append(f"-fa auto: {card.name} has no flash-attention kernel for head size "
                         f"{profile.key_length}: flash attention is off")
            return False
    return True
