"""The multimodal projector (``--mmproj``): its device, its weights, its compute buffers (tools/mtmd/clip.cpp).

The projector loads on the first GPU unless ``--mmproj-device`` names one or ``--no-mmproj-offload`` keeps it on the
host (``clip_ctx``); its compute buffers are those of one warmup image (``reserve_compute_meta``): a calibration
of this ubatch where the fleet measured one, else an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetgate.engines.llamacpp import LlamaServerConfig, pad
from fleetgate.ledger.accounts import Accounts, Basis, Calibration, calibrations_at
from fleetgate.ledger.devices import HOST, Card
from fleetgate.ledger.options import option_value
from fleetgate.ledger.placement import Devices
from fleetgate.ledger.weights import alloc
from fleetgate.models.profile import Profile

__all__ = ["book_projector", "book_projector_compute"]


def _projector_card(config: LlamaServerConfig, cards: Sequence[Card], rpc: Sequence[Card]) -> Card:
    offload = config.use("mmproj_offload")
    if offload is not None and offload.value == "0":
        return HOST
    named = option_value(config, "mmproj_device", "")
    for card in (*cards, *rpc):
        if named in (card.name, card.label):
            return card
    # ggml_backend_init_by_type(GPU): the first GPU the registry lists (RPC devices register first)
    ordered = [*rpc, *cards]
    return ordered[0] if ordered else HOST


def book_projector(acc: Accounts, notes: list[str], config: LlamaServerConfig, projector: Profile | None,
                   devices: Devices) -> Card | None:
    """The projector's weights on its device; returns the device (None without a projector or its profile)."""
    if config.mmproj is None:
        return None
    if projector is None:
        notes.append("an --mmproj is loaded but its profile is unknown: its weights are not counted")
        return None
    projector_card = _projector_card(config, devices.cards, devices.rpc)
    p_basis: Basis = "reconstructed" if projector.reconstructed else "derived"
    acc.add(projector_card, "projector", "model", "projector",
            sum(alloc(w, projector_card.backend) for w in projector.weights), p_basis,
            "tools/mtmd/clip.cpp clip_ctx: the first GPU unless --mmproj-device, --no-mmproj-offload")
    return projector_card


def _projector_compute(projector: Profile) -> tuple[int, int] | None:
    """The mmproj's compute buffers for its warmup image (the header's image size): on its device the encoder's
    activations (``4 n_embd + n_ff`` floats per patch), the f32 scores of every head (one head per 16 of width
    assumed: the profile keeps no head count) and two projected tokens' widths; on the host the image's pixels.
    Measured on one tiny projector only (gpu-h200.json smollm2-cuda-mmproj: 0.07 and 0.01 MiB)."""
    by_name = {w.name: w for w in projector.weights}
    patch, position = by_name.get("v.patch_embd.weight"), by_name.get("v.position_embd.weight")
    if patch is None or position is None or len(position.shape) < 2:
        return None
    n_embd, n_pos = position.shape[0], position.shape[1]
    n_ff = max((w.shape[1] for w in projector.weights if w.name.endswith("ffn_up.weight") and len(w.shape) > 1),
               default=4 * n_embd)
    proj = max((w.shape[1] for w in projector.weights if w.name.startswith("mm.") and len(w.shape) > 1),
               default=n_embd)
    heads = max(1, n_embd // 16)
    encoder = 4 * n_pos * (4 * n_embd + n_ff + 2 * proj) + 4 * heads * n_pos * n_pos
    side = patch.shape[0] * max(1, round(n_pos ** 0.5))
    return pad(encoder, 32), pad(4 * 3 * side * side, 32)


def book_projector_compute(acc: Accounts, notes: list[str], projector_card: Card | None, projector: Profile | None,
                           calibrations: Sequence[Calibration], *, n_ubatch: int) -> None:
    """The projector's compute buffers: its calibration at this ubatch, none where the card's target calibration
    holds it, else the estimate of one warmup image."""
    by_key = calibrations_at(calibrations, n_ubatch)
    if projector_card is not None:
        cal = by_key.get((projector_card.name, "projector"))
        if cal is not None:
            acc.add(projector_card, "projector", "compute", "projector", cal.bytes, "calibrated",
                    f"calibration: {cal.boot}")
        elif (projector_card.name, "target") in by_key:
            notes.append(f"the projector's compute buffer is taken to be inside {projector_card.name}'s "
                         "calibrated compute figure")
        else:
            found = _projector_compute(projector) if projector is not None else None
            if found is None:
                notes.append(f"the projector's compute buffer on {projector_card.name} is not calibrated and its "
                             "header names no patch or position embedding: only its weights are counted")
            else:
                encoder, image = found
                # clip.cpp runs its own CPU backend beside the GPU: its host buffer is plain CPU, never pinned
                acc.add(projector_card, "projector", "compute", "projector", encoder, "estimate",
                        "estimate (projector/encoder): one warmup image through the encoder and projector "
                        "(tools/mtmd/clip.cpp reserve_compute_meta): activations, every head's scores, the "
                        "projected tokens", "CPU" if projector_card is HOST else "")
                if projector_card is not HOST:
                    acc.add(HOST, "projector", "compute", "projector", image, "estimate",
                            "estimate (projector/image): the warmup image's f32 pixels on the host "
                            "(tools/mtmd/clip.cpp reserve_compute_meta)", "CPU")
