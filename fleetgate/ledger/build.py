"""The ledger of one llama-server command line, booked phase by phase: the context, the devices and the layers'
placement, the weights, the KV caches, the recurrent state, the drafter, the projector, the GPU runtime, the
compute buffers, the output buffers; then the ledger per device and the prompt cache's slot state."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fleetgate.engines.llamacpp import LlamaServerConfig
from fleetgate.ledger.accounts import Accounts, Basis, Calibration, DeviceLedger, Ledger, Refusal, SlotState
from fleetgate.ledger.compute import book_compute, offloads_ops
from fleetgate.ledger.context import ContextParams, context_params, resolve_flash_attn
from fleetgate.ledger.devices import HOST, Card
from fleetgate.ledger.drafters import Drafter, book_drafter
from fleetgate.ledger.kv import KvCache, book_kv, check_cache_types, kv_caches, kv_layers, state_per_slot
from fleetgate.ledger.outputs import book_outputs
from fleetgate.ledger.placement import Devices, PlacedModel, devices_of, place_target
from fleetgate.ledger.projector import book_projector, book_projector_compute
from fleetgate.ledger.recurrent import book_recurrent, recurrent_per_slot
from fleetgate.ledger.runtime import book_runtime
from fleetgate.ledger.weights import book_weights, host_holding, moved_tensors
from fleetgate.models.profile import Profile

__all__ = ["build_ledger"]


def build_ledger(
    config: LlamaServerConfig,
    target: Profile,
    *,
    cards: Sequence[Card] = (),
    draft: Profile | None = None,
    projector: Profile | None = None,
    calibrations: Sequence[Calibration] = (),
    cpu_features: frozenset[str] | None = None,
) -> Ledger:
    """The per-device ledger of one llama-server command line.

    ``cards`` are the devices the host offers (in enumeration order); ``--device`` picks among them,
    ``--rpc`` adds RPC devices in front. ``cpu_features`` are the flags of the host's CPU (``avx2``,
    ``avx512f``, ``asimddp`` ...) that decide which weights the CPU backend repacks; None: not modelled,
    and said so in the notes when host weights could repack. Raises ``KeyError`` for a ``--device`` name no card has and
    ``ValueError`` for a cache type the engine refuses.
    """
    notes: list[str] = []
    refusals: list[Refusal] = []
    basis: Basis = "reconstructed" if target.reconstructed else "derived"
    check_cache_types(config)
    params = context_params(config, target)
    _note_taken_as_given(config, notes)
    devices = devices_of(config, cards)
    _refuse_split_buffers(config, devices, refusals)
    _refuse_main_gpu(config, devices, refusals)
    model = place_target(config, target, devices, refusals)
    flash_attn = resolve_flash_attn(config, target, notes, [c for c in model.cards if c is not HOST], refusals)
    holding = host_holding(config, devices, model, cpu_features, notes)
    cache, draft_cache = kv_caches(config, params, flash_attn=flash_attn)

    acc = Accounts()
    book_weights(acc, model, context="target", term_block="model", term_output="output", host=holding, basis=basis)
    book_kv(acc, target, model.layer_device, kv_layers(target, mtp=False), cache, context="target", term="kv",
            basis=basis)
    book_recurrent(acc, config, model, cache, basis=basis)
    drafter = book_drafter(acc, notes, config, model, draft, devices, holding, draft_cache, basis=basis)
    projector_card = book_projector(acc, notes, config, projector, devices)
    op_offload = offloads_ops(config, model, devices.used, params.n_ubatch)
    book_runtime(acc, notes, model, drafter, calibrations, devices=devices, flash_attn=flash_attn,
                 kv_offload=cache.offload, op_offload=op_offload)
    book_compute(acc, notes, config, model, drafter, calibrations, devices=devices.used, params=params, cache=cache,
                 flash_attn=flash_attn, op_offload=op_offload, host_compute=holding.compute)
    book_projector_compute(acc, notes, projector_card, projector, calibrations, n_ubatch=params.n_ubatch)
    book_outputs(acc, config, model, drafter, params, basis=basis)
    return dataclasses.replace(
        _ledger(acc, notes, model, drafter, devices, params, _slot_state(config, target, cache, drafter)),
        refusals=tuple(refusals), moved=moved_tensors(model))


def _refuse_split_buffers(config: LlamaServerConfig, devices: Devices, refusals: list[Refusal]) -> None:
    """``--split-mode row``: every model device needs a split buffer type (src/llama-model.cpp
    ``make_gpu_buft_list``, called for each device whatever ``-ngl`` says); the first without one stops the load.
    With no device (the host alone) the mode changes nothing."""
    if config.split_mode != "row":
        return
    lacking = next((d for d in devices.used if not d.backend.split_buffers), None)
    if lacking is not None:
        refusals.append(Refusal(f"error loading model: device {lacking.name} does not support split buffers",
                                "split_mode", "src/llama-model.cpp make_gpu_buft_list"))


def _refuse_main_gpu(config: LlamaServerConfig, devices: Devices, refusals: list[Refusal]) -> None:
    """``--split-mode none`` keeps the ``--main-gpu``-th of the model's devices; an index past them stops the load
    (src/llama.cpp ``llama_prepare_model_devices``). Found by ``hb-smollm2-sm-none-mg1`` of the second held-out set,
    fixed after it was booted."""
    if config.split_mode != "none":
        return
    candidates = devices.pick(config.devices, "layer")
    if candidates and devices.main_gpu >= len(candidates):
        refusals.append(Refusal(f"invalid value for main_gpu: {devices.main_gpu} (available devices: "
                                f"{len(candidates)})", "main_gpu", "src/llama.cpp llama_prepare_model_devices"))


def _note_taken_as_given(config: LlamaServerConfig, notes: list[str]) -> None:
    """What the ledger does not model, said in its notes: ``--fit`` resizing at boot, row and tensor splits."""
    if config.fit not in ("off", "0", "false"):
        notes.append("--fit is on: llama.cpp may change -ngl or -c at boot to fit free memory; this ledger "
                     "takes the flags as given")
    if config.split_mode not in ("none", "layer", "row"):  # row: refused with any device, else moot
        notes.append(f"--split-mode {config.split_mode}: modelled as a layer split")


def _slot_state(config: LlamaServerConfig, target: Profile, cache: KvCache, drafter: Drafter) -> SlotState:
    """What the RAM prompt cache stores for one full slot: the target's KV and recurrent state, the drafter's KV,
    the context checkpoints (each the recurrent state and the sliding-window KV)."""
    checkpoint = recurrent_per_slot(target) + state_per_slot(
        target, [il for il in kv_layers(target, mtp=False) if target.is_swa(il)], cache)
    return SlotState(
        tokens=cache.n_ctx_seq,
        target_kv=state_per_slot(target, kv_layers(target, mtp=False), cache),
        recurrent=recurrent_per_slot(target),
        draft=drafter.slot_state,
        checkpoints=config.ctx_checkpoints * checkpoint if checkpoint and config.ctx_checkpoints > 0 else 0,
    )


def _ledger(acc: Accounts, notes: list[str], model: PlacedModel, drafter: Drafter, devices: Devices,
            params: ContextParams, slot: SlotState) -> Ledger:
    """The booked buffers per device: the target's devices in order, then any other device a buffer landed on
    (a drafter's or projector's), and the host apart."""
    draft_model = drafter.model
    ledgers = [DeviceLedger(
        card=card,
        blocks=tuple(il for il, c in enumerate(model.layer_device) if c is card),
        holds_output=model.output_device is card,
        buffers=tuple(acc.buffers.get(card.label, ())),
        draft_blocks=tuple(il for il, c in enumerate(draft_model.layer_device) if c is card)
        if draft_model else (),
    ) for card in devices.used]
    for label, buffers in acc.buffers.items():
        if label != HOST.label and all(d.card.label != label for d in ledgers):
            card = next(c for c in (*devices.cards, *devices.rpc) if c.label == label)
            ledgers.append(DeviceLedger(card=card, blocks=(), holds_output=False, buffers=tuple(buffers)))
    host = DeviceLedger(card=HOST, blocks=tuple(il for il, c in enumerate(model.layer_device) if c is HOST),
                        holds_output=model.output_device is HOST,
                        buffers=tuple(acc.buffers.get(HOST.label, ())))
    return Ledger(shape=params.shape, n_ubatch=params.n_ubatch, devices=tuple(ledgers), host=host, slot_state=slot,
                  notes=tuple(notes))
