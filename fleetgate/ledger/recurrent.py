"""The recurrent state of hybrid models, and the rollback rows a drafter adds to it.

- Recurrent state (src/llama-memory-recurrent.cpp): per recurrent block, two F32 tensors of
  ``max(1, n_seq) * (1 + n_rs_seq)`` rows; ``n_rs_seq`` is the draft depth when a drafter needs rollback
  (common/common.h, ``need_n_rs_seq``; src/llama-arch.cpp, ``llm_arch_supports_rs_rollback``).
"""

from __future__ import annotations

from fleetgate.engines.llamacpp import LlamaServerConfig, pad
from fleetgate.ledger.accounts import Accounts, Basis
from fleetgate.ledger.devices import HOST, Card
from fleetgate.ledger.kv import KvCache
from fleetgate.ledger.placement import PlacedModel
from fleetgate.models.gguf import RS_ROLLBACK_ARCHS
from fleetgate.models.profile import Profile

__all__ = ["ROLLBACK_DRAFTERS", "book_recurrent", "recurrent_per_slot", "rollback_rows"]

ROLLBACK_DRAFTERS = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})


def rollback_rows(config: LlamaServerConfig, target: Profile) -> int:
    """``n_rs_seq``: the draft depth where a drafter needs rollback on an architecture that supports it, else 0."""
    rollback = target.recurrent is not None and target.recurrent.rollback \
        and target.architecture in RS_ROLLBACK_ARCHS
    return config.spec_draft_n_max if set(config.spec_types) & ROLLBACK_DRAFTERS and rollback else 0


def book_recurrent(acc: Accounts, config: LlamaServerConfig, model: PlacedModel, cache: KvCache, *,
                   basis: Basis) -> None:
    """The target's recurrent state, on each recurrent block's device (the host's with ``--no-kv-offload``)."""
    profile, layer_device = model.profile, model.layer_device
    n_seq, n_rs_seq, offload = cache.n_seq, rollback_rows(config, profile), cache.offload
    rec = profile.recurrent
    if rec is None:
        return
    rows = max(1, n_seq) * (1 + n_rs_seq)
    per_card: dict[str, tuple[Card, int]] = {}
    for il in range(profile.n_layer):
        if profile.kind(il) != "R":
            continue
        card = layer_device[il] if offload else HOST
        align = card.backend.alignment
        nbytes = pad(4 * rec.n_embd_r * rows, align) + pad(4 * rec.n_embd_s * rows, align)
        per_card[card.label] = (card, per_card.get(card.label, (card, 0))[1] + nbytes)
    for card, nbytes in per_card.values():
        acc.add(card, "recurrent", "RS", "target", nbytes, basis,
                f"src/llama-memory-recurrent.cpp: {rows} rows = max(1, n_seq) x (1 + n_rs_seq {n_rs_seq})")


def recurrent_per_slot(profile: Profile) -> int:
    """One sequence's recurrent state: one row of each state per recurrent block."""
    if profile.recurrent is None:
        return 0
    return profile.recurrent.row_bytes * sum(1 for il in range(profile.n_layer) if profile.kind(il) == "R")
