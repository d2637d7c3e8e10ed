"""The drafter's share: a separate draft model's weights and KV, or the MTP context's KV on the target's own blocks.

- Drafters (common/speculative.cpp, ``common_speculative_init_result``): the draft context holds
  ``llama_n_ctx(ctx_tgt)`` tokens with the target's slots, its own cache types and no rollback rows;
  a drafter without ``sliding_window`` therefore caches the whole target window (INC-03). The MTP
  context runs on the target's own nextn blocks and caches only them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetgate.engines.llamacpp import LlamaServerConfig
from fleetgate.ledger.accounts import Accounts, Basis
from fleetgate.ledger.kv import KvCache, book_kv, kv_layers, state_per_slot
from fleetgate.ledger.options import option_value
from fleetgate.ledger.placement import Devices, PlacedModel, n_gpu_layers, place
from fleetgate.ledger.weights import HostHolding, book_weights
from fleetgate.models.profile import Profile

__all__ = ["CONTEXT_DRAFTERS", "Drafter", "book_drafter"]

CONTEXT_DRAFTERS = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})


@dataclass(frozen=True)
class Drafter:
    """What the drafter phase booked."""

    model: PlacedModel | None
    """A separate draft model on its devices (its profile: ``model.profile``); None without one."""
    mtp: bool
    """``draft-mtp`` without a draft model: the MTP context drafts on the target's nextn blocks."""
    slot_state: int
    """One slot's draft KV in a saved state."""


def book_drafter(acc: Accounts, notes: list[str], config: LlamaServerConfig, model: PlacedModel,
                 draft: Profile | None, devices: Devices, holding: HostHolding, draft_cache: KvCache, *,
                 basis: Basis) -> Drafter:
    """A draft model placed by ``--spec-draft-device`` and ``--spec-draft-ngl``, its weights and KV; or, under
    ``draft-mtp``, the MTP context's KV on the target's nextn blocks."""
    target = model.profile
    spec = set(config.spec_types)
    draft_model: PlacedModel | None = None
    slot_draft = 0
    mtp = "draft-mtp" in spec and config.spec_draft_model is None
    if spec & CONTEXT_DRAFTERS and config.spec_draft_model is not None:
        if draft is None:
            notes.append("a drafter is configured but its profile is unknown: its weights and KV are not "
                         "counted")
        else:
            draft_basis: Basis = "reconstructed" if draft.reconstructed else "derived"
            names = config.spec_draft_device or config.devices
            mode = "layer" if len(names) == 1 else config.split_mode
            draft_devices = devices.pick(names, mode)
            draft_ngl = n_gpu_layers(option_value(config, "spec_draft_ngl", "-1"), draft.block_count)
            draft_model = place(draft, draft_devices, draft_ngl, config.tensor_split, False)
            book_weights(acc, draft_model, context="draft", term_block="draft", term_output="draft",
                         host=holding, basis=draft_basis)
            book_kv(acc, draft, draft_model.layer_device, kv_layers(draft, mtp=False), draft_cache,
                    context="draft", term="draft", basis=draft_basis)
            slot_draft = state_per_slot(draft, kv_layers(draft, mtp=False), draft_cache)
    elif mtp:
        layers = kv_layers(target, mtp=True)
        if not layers:
            notes.append("draft-mtp on a model without nextn blocks: the engine refuses to load it")
        book_kv(acc, target, model.layer_device, layers, draft_cache, context="mtp", term="draft", basis=basis)
        slot_draft = state_per_slot(target, layers, draft_cache)
    return Drafter(model=draft_model, mtp=mtp, slot_state=slot_draft)
