"""The KV caches: which blocks carry one, how many cells each holds, what one slot's KV costs in a saved state.

- KV (src/llama-kv-cache.cpp, ``llama_kv_cache::llama_kv_cache``): per attention block, on that block's
  device, ``row(type_k, heads_kv * key_length) * kv_size * n_stream`` plus the same for V, with
  ``n_stream = unified ? 1 : n_seq``; one buffer per device and cache. Sliding-window blocks get
  ``PAD256(min(kv_size, n_swa * (unified ? n_seq : 1) + n_ubatch))`` cells unless ``--swa-full``
  (src/llama-kv-cache-iswa.cpp). Which blocks carry KV: src/llama-model.cpp, ``create_memory``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import LlamaServerConfig, pad
from fleetgate.ledger.accounts import Accounts, Basis, Term
from fleetgate.ledger.context import ContextParams
from fleetgate.ledger.devices import FLOAT_TYPES, HOST, Card
from fleetgate.ledger.options import flag_value, option_value
from fleetgate.models.gguf import KV_CACHE_TYPES, row_bytes
from fleetgate.models.profile import Profile

__all__ = ["KvCache", "book_kv", "check_cache_types", "kv_caches", "kv_layers", "state_per_slot"]


def check_cache_types(config: LlamaServerConfig) -> None:
    """Raises ``ValueError`` for a cache type the engine refuses (the target's and the drafter's)."""
    for flag, value in (("--cache-type-k", config.cache_type_k), ("--cache-type-v", config.cache_type_v),
                        ("--spec-draft-type-k", option_value(config, "spec_draft_type_k", "f16")),
                        ("--spec-draft-type-v", option_value(config, "spec_draft_type_v", "f16"))):
        if value.upper() not in KV_CACHE_TYPES:
            accepted = ", ".join(t.lower() for t in KV_CACHE_TYPES)
            raise ValueError(f"{flag} {value}: llama-server accepts only {accepted} (common/arg.cpp)")


def kv_layers(profile: Profile, *, mtp: bool) -> list[int]:
    """Blocks that carry KV in the main context, or in the MTP context (create_memory's filters)."""
    if mtp:
        return list(range(profile.n_layer, profile.block_count))
    return [il for il in range(profile.n_layer) if profile.kind(il) in ("A", "S")]


@dataclass(frozen=True)
class KvCache:
    """How one context sizes its KV (the arguments llama_kv_cache gets)."""

    n_ctx_seq: int
    n_seq: int
    unified: bool
    n_ubatch: int
    swa_full: bool
    type_k: str
    type_v: str
    v_trans: bool
    offload: bool

    @property
    def n_stream(self) -> int:
        return 1 if self.unified else self.n_seq

    def swa_cells(self, profile: Profile) -> int:
        """src/llama-kv-cache-iswa.cpp: the windowed cache is padded to 256 and never above kv_size."""
        if self.swa_full:
            return self.n_ctx_seq
        window = profile.sliding_window * (self.n_seq if self.unified else 1) + self.n_ubatch
        return pad(min(self.n_ctx_seq, window), 256)


def kv_caches(config: LlamaServerConfig, params: ContextParams, *, flash_attn: bool) -> tuple[KvCache, KvCache]:
    """The target's cache and the draft context's (the same cells, the ``--spec-draft-type-k/v`` types);
    on the host with ``--no-kv-offload``; V transposed where flash attention is asked off: src/llama-context.cpp
    sets ``cparams.flash_attn`` from the requested type before ``create_memory`` lays V out, and only later turns an
    ``auto`` off where a device has no kernel (``resolve_fused_ops``), leaving V as flash attention wants it."""
    offload = flag_value(config, "-nkvo", "--no-kv-offload") is None
    cache = KvCache(n_ctx_seq=params.n_ctx_seq, n_seq=params.n_seq, unified=params.unified, n_ubatch=params.n_ubatch,
                    swa_full=config.swa_full, type_k=config.cache_type_k, type_v=config.cache_type_v,
                    v_trans=config.flash_attn == "off", offload=offload)
    draft_cache = dataclasses.replace(cache, type_k=option_value(config, "spec_draft_type_k", "f16"),
                                      type_v=option_value(config, "spec_draft_type_v", "f16"))
    return cache, draft_cache


def _row_padding(ggml_type: str, ne0: int, card: Card) -> int:
    """CUDA/HIP's get_alloc_size: one padding row for a quantized tensor whose ne0 is not a multiple of 512
    (the KV cache's K and V tensors too: seen on the H200, 384 B per q8_0 tensor of SmolLM2)."""
    padding = card.backend.quant_row_padding
    if not padding or ggml_type.upper() in FLOAT_TYPES or ne0 % padding == 0:
        return 0
    return row_bytes(ggml_type, padding - ne0 % padding)


def book_kv(acc: Accounts, profile: Profile, layer_device: Sequence[Card], layers: Iterable[int], cache: KvCache, *,
            context: str, term: Term, basis: Basis) -> None:
    layers = list(layers)
    widths = {profile.kv_row_elements(il)[1] for il in layers}
    caches: dict[tuple[str, str], tuple[Card, int]] = {}
    for il in layers:
        swa = profile.is_swa(il)
        cells = cache.swa_cells(profile) if swa else cache.n_ctx_seq
        k_elems, v_elems = profile.kv_row_elements(il)
        if cache.v_trans and len(widths) > 1:
            v_elems = max(widths)  # [TAG_V_CACHE_VARIABLE]: V padded to the widest layer
        card = layer_device[il] if cache.offload else HOST
        k = row_bytes(cache.type_k, k_elems) * cells * cache.n_stream + _row_padding(cache.type_k, k_elems, card)
        v = row_bytes(cache.type_v, v_elems) * cells * cache.n_stream + _row_padding(cache.type_v, v_elems, card)
        key = (card.label, "KV (SWA)" if swa else "KV")
        previous = caches.get(key, (card, 0))[1]
        caches[key] = (card, previous + pad(k, card.backend.alignment) + pad(v, card.backend.alignment))
    for (_, name), (card, nbytes) in caches.items():
        source = "src/llama-kv-cache.cpp llama_kv_cache"
        acc.add(card, term, name, context, nbytes, basis,
                source + ("; llama-kv-cache-iswa.cpp size_swa" if "SWA" in name else ""))


def state_per_slot(profile: Profile, layers: Sequence[int], cache: KvCache) -> int:
    """One sequence's KV in a saved state (src/llama-kv-cache.cpp, ``state_write_meta``/``_data``).

    Each cell costs its K and V rows on every layer plus 12 bytes of metadata (pos, n_seq_id, seq_id);
    a sliding-window cache saves only the cells inside the window.
    """
    total = 0
    for swa in (False, True):
        group = [il for il in layers if profile.is_swa(il) == swa]
        if not group:
            continue
        cells = min(cache.n_ctx_seq, profile.sliding_window + cache.n_ubatch) if swa else cache.n_ctx_seq
        per_cell = sum(row_bytes(cache.type_k, profile.kv_row_elements(il)[0])
                       + row_bytes(cache.type_v, profile.kv_row_elements(il)[1]) for il in group)
        total += cells * (per_cell + 12)
    return total
