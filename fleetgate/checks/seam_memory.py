"""The ledger holds the host's floors: each card, the balance, the drafter, the prompt cache (B.2, B.3).

One module over 500 lines for one reason: the four seams read one ledger of the service through the same
helpers (building it, failing an unknown device or cache type alike, naming each card's terms and the split
that would fit), and splitting them would put those helpers in a module of their own for no reader's gain.

The figures come from fleetgate.ledger, which mirrors llama.cpp build 11434's allocations (weights, KV,
recurrent state, drafter, projector) and takes compute buffers from the service's calibrations (each
naming the boot it was measured on) or from an estimate, marked as such in every message.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fleetgate.checks import NOT_JUDGED, Check, NotApplicable, NotJudged, service_seam
from fleetgate.checks._common import gib, llama_of, no_cards, no_profile
from fleetgate.failure import Deferred
from fleetgate.ledger.accounts import TERMS, DeviceLedger, Ledger, SlotState
from fleetgate.ledger.drafters import CONTEXT_DRAFTERS
from fleetgate.ledger.service import arm_rungs, calibrations_of, ledger_builder, service_ledger, service_sweep
from fleetgate.ledger.verdict import SweepRow, sweep_tensor_split
from fleetgate.render.rendered import RenderedService
from fleetgate.toml_keys import locate_key
from fleetgate.visibility import Unresolved, engine_cards

__all__ = ["LEDGER_CODES", "memory_ledger"]

MiB = 1 << 20


def _profile_where(path: Path, table: str) -> str:
    """``file:line`` of a table in a profile (where the drafter's window would be declared)."""
    try:
        line = locate_key(path.read_text(encoding="utf-8"), (table,))
    except (OSError, UnicodeDecodeError):
        line = None
    return f"{path}:{line}" if line else str(path)


def _no_ledger(config: RenderedService) -> str | None:
    """Why the ledger cannot be built for this service (it needs the model's profile)."""
    return no_profile(config, "block_count")


def _no_card_ledger(config: RenderedService) -> str | None:
    """Why there is no ledger of cards: no profile, or a host without cards (CPU only)."""
    return _no_ledger(config) or no_cards(config)


LEDGER_CODES = {
    "unknown-device": "`--device` names a card the host does not have",
    "unknown-cache-type": "a KV cache type the engine refuses",
    "engine-refuses": ("the engine refuses to load the model this way (`-sm row` on devices without split buffers, "
                       "an `-ot` buffer type no device offers, `-fa off` with a quantized V cache)"),
}
"""What every seam that builds the service's ledger can fail with besides its own codes."""


def _hidden(config: RenderedService, name: str) -> str | None:
    """A ``--device`` name that is a card of the host the engine is not shown (its visibility variables or grant
    hide it): device-visibility fails it; the memory seams have no ledger to judge."""
    if name not in {d.name for d in config.host.cards}:
        return None
    seen = engine_cards(config)
    shown = ", ".join(f"{d.name} as {n}" for n, d in seen.cards) or "none"
    return (f"--device names {name}, which the engine is not shown ({seen.how}; it sees {shown}): see "
            f"device-visibility[{config.name}]")


def memory_ledger(config: RenderedService, check: Check[RenderedService]) -> Ledger:
    try:
        ledger = service_ledger(config)
    except Unresolved as exc:
        raise NotJudged(exc) from None
    except KeyError as exc:
        llama = config.llama
        assert llama is not None
        hidden = _hidden(config, str(exc.args[0]))
        if hidden:
            raise NotJudged(hidden) from None
        raise check.fail(
            config, "unknown-device", where=config.where_flag(llama.use("device")),
            observed=f"--device names {exc.args[0]!r}, which host {config.host.name} has no card for",
            expected=f"one of: {', '.join(n for n, _ in engine_cards(config).cards)}",
            fix="name the devices as llama.cpp enumerates them on that host (fleet.toml hosts.*.devices)",
        ) from None
    except ValueError as exc:
        llama = config.llama
        assert llama is not None
        raise check.fail(
            config, "unknown-cache-type",
            where=config.where_flag(llama.use("cache_type_k") or llama.use("cache_type_v")),
            observed=str(exc), expected="a KV cache type the engine accepts",
            fix="llama-server stops at startup with 'Unsupported cache type': pick one of the listed types",
        ) from None
    if ledger.refusals:
        # a process that exits at load holds no memory: no figure of its ledger is a finding
        llama = config.llama
        assert llama is not None
        first = ledger.refusals[0]
        raise check.fail(
            config, "engine-refuses", where=config.where_flag(llama.use(first.dest) if first.dest else None),
            observed=f"will not start: llama-server refuses: {first.reason}",
            expected="a command line the engine loads",
            details=[f"{r.reason} ({r.source})" for r in ledger.refusals],
            fix=("the process exits at load and holds no memory: drop -sm row (a layer split needs no split buffers), "
                 "name a buffer type the host's devices offer, or turn flash attention on"),
        )
    return ledger


def _card(d: DeviceLedger) -> str:
    terms = ", ".join(f"{t} {d.term(t) / (1 << 30):.2f}" for t in TERMS if d.term(t))
    estimates = sorted({b.term for b in d.buffers if b.basis == "estimate"})
    marks = f"; estimated: {', '.join(estimates)}" if estimates else ""
    blocks = f"{d.blocks[0]}-{d.blocks[-1]}" if d.blocks else "none"
    return (f"{d.card.shown}: {gib(d.total)} of {gib(d.card.vram_bytes or 0)} ({terms}{marks}) -> free "
            f"{gib(d.free or 0)}; blocks {blocks}{' + output' if d.holds_output else ''}")


def _split_fix(config: RenderedService, rows: list[SweepRow]) -> str:
    llama = config.llama
    assert llama is not None
    good = [r for r in rows if r.ok]
    sweep = f"`fleetgate fit {config.name} --sweep-ts` prints every step"
    if not rows:
        return (f"shrink what the card holds: --ctx-size, a smaller KV type (-ctk/-ctv q8_0), the "
                f"--ubatch-size or the drafter (`fleetgate fit {config.name}` prints every term)")
    if not good:
        return (f"no --tensor-split clears every floor and the slack at this shape: lower --ctx-size, the "
                f"--ubatch-size or the drafter's cost ({sweep})")
    first = round(llama.tensor_split[0]) if llama.tensor_split else 0
    best = min(good, key=lambda r: abs(r.tensor_split[0] - first))
    return (f"the nearest split that clears every floor and the slack is -ts {best.tensor_split[0]},"
            f"{best.tensor_split[1]} (free {gib(best.free[0])} / {gib(best.free[1])}, gap {gib(best.gap)}); "
            f"one -ts step moves one block, and blocks are not the same size ({sweep})")


def _lever(config: RenderedService) -> Deferred:
    llama = config.llama
    assert llama is not None
    return config.where_flag(llama.use("tensor_split") or llama.use("ctx_size"))


def _headroom(config: RenderedService) -> dict[str, object]:
    ledger = service_ledger(config)
    floor = config.host.card_floor_bytes or 0
    return {"free_bytes": {d.card.host_name: d.free or 0 for d in ledger.cards},
            "headroom_bytes": {d.card.host_name: (d.free or 0) - floor for d in ledger.cards}}


def _balance_margin(config: RenderedService) -> dict[str, object]:
    cards = service_ledger(config).cards
    slack = config.host.balance_slack_bytes
    if slack is None or len(cards) < 2:
        return {}
    totals = [d.total for d in cards]
    return {"balance_margin_bytes": slack - (max(totals) - min(totals))}


def _cache_margin(config: RenderedService) -> dict[str, object]:
    llama = config.llama
    assert llama is not None
    state = service_ledger(config).slot_state
    if llama.cache_ram_mib < 0:
        return {"prompt_cache": {"slot_state_bytes": state.total}}
    cap = llama.cache_ram_mib * MiB
    return {"prompt_cache": {"cap_bytes": cap, "slot_state_bytes": state.total, "margin_bytes": cap - state.total,
                             "ram_margin_bytes": config.host.ram_bytes // 2 - cap}}


@service_seam(
    cites=("B-FIT-1", "B-FIT-4", "B-FIT-6", "B-FIT-9", "B-FIT-10", "B-FIT-11", "B-FIT-16", "B-FIT-17", "B-FIT-19",
              "INC-03", "INC-04", "INC-05", "INC-10", "INC-58", "INC-74"),
    summary="every card keeps the host's floor of free VRAM once the ledger has placed everything",
    requires=_no_card_ledger,
    engines=("llama.cpp",),
    figures=_headroom,
    codes={
        **LEDGER_CODES,
        "below-floor": "a card keeps less free VRAM than the host's floor",
        "buffer-unplaceable": "a card cannot place its largest compute buffer after weights, KV and state (INC-05)",
        "unmeasured-compute": "compute buffers priced by estimate at a ubatch no boot measured (INC-74)",
    },
)
def card_floor(config: RenderedService) -> None:
    ledger = memory_ledger(config, card_floor)
    declared = config.host.card_floor_bytes
    floor = declared or 0
    # Weights, KV and state that already break the floor are the split's or the context's doing; a card
    # they leave room on that cannot then take its compute buffer is the ubatch's (B-FIT-11).
    if not any(_before_compute(d) < floor for d in ledger.cards):
        _contiguity(config, ledger)
    short = [d for d in ledger.cards if (d.free or 0) < floor]
    if not short:
        _measured_compute(config, ledger)
        return
    worst = min(short, key=lambda d: d.free or 0)
    if declared is None:
        expected = (f">= 0 free on every card: host {config.host.name} declares no floor, so the card's own "
                    f"size is the limit ({config.fleet.where('hosts', config.host.name)})")
    else:
        where_floor = config.fleet.where("hosts", config.host.name, "card_floor_gib")
        expected = f">= {gib(floor)} free on every card (the floor of host {config.host.name}, {where_floor})"
    raise card_floor.fail(
        config, "below-floor",
        where=_lever(config),
        observed=f"{worst.card.shown} keeps {gib(worst.free or 0)} free",
        expected=expected,
        details=[_card(d) for d in ledger.cards],
        fix=_split_fix(config, service_sweep(config)),
    )


def _before_compute(d: DeviceLedger) -> int:
    """What a card has left once weights, KV and state are placed (its compute buffers come last)."""
    return (d.card.vram_bytes or 0) - sum(b.bytes for b in d.buffers if b.buffer != "compute")


def _contiguity(config: RenderedService, ledger: Ledger) -> None:
    """The largest compute buffer must be placeable in what its card has left after weights, KV and state.

    Compute buffers are reserved last (src/llama-context.cpp, after the model and the memory module), each
    in one allocation: a card whose free bytes cannot take its largest one fails on that buffer, whatever
    the total says (B-FIT-11, INC-05).
    """
    for d in ledger.cards:
        computes = [b for b in d.buffers if b.buffer == "compute"]
        if not computes or d.card.vram_bytes is None:
            continue
        placed = sorted(computes, key=lambda b: b.bytes)
        room = _before_compute(d)
        for buffer in placed[:-1]:
            room -= buffer.bytes
        largest = placed[-1]
        if largest.bytes <= room:
            continue
        llama = config.llama
        assert llama is not None
        raise card_floor.fail(
            config, "buffer-unplaceable",
            cites=("B-FIT-11", "B-FIT-10", "INC-05"),
            where=config.where_flag(llama.use("ubatch_size") or llama.use("batch_size")),
            observed=(f"{d.card.shown} cannot place its {largest.context} compute buffer of {largest.bytes / MiB:.0f} MiB "
                      f"at ubatch {ledger.n_ubatch} ({largest.basis}): {gib(max(room, 0))} is left after weights, KV, "
                      "state and the smaller compute buffers"),
            expected=f"the largest compute buffer fits in what {d.card.shown} has left",
            details=[_card(x) for x in ledger.cards],
            fix=("a compute buffer is one allocation: lower --ubatch-size (the buffers scale with it) or move a block "
                 "off this card; free bytes elsewhere do not help"),
        )


def _measured_compute(config: RenderedService, ledger: Ledger) -> None:
    """A service whose compute buffers were measured must not be priced by estimate at a new ubatch (B-FIT-19)."""
    measured = sorted({c.ubatch for c in calibrations_of(config.service)})
    if not measured or ledger.n_ubatch in measured:
        return
    llama = config.llama
    assert llama is not None
    if ledger.n_ubatch in arm_rungs(config.service, llama.spec_types):
        return  # a documented arm's own rung: its estimates are the never-under ones, marked as such
    estimated = [(d.card.name, b) for d in ledger.cards for b in d.buffers if b.buffer == "compute" and b.basis == "estimate"]
    if not estimated:
        return
    raise card_floor.fail(
        config, "unmeasured-compute",
        cites=("B-FIT-19", "B-FIT-10", "INC-74"),
        where=config.where_flag(llama.use("ubatch_size")),
        observed=(f"--ubatch-size {ledger.n_ubatch}: no boot measured this rung; "
                  + ", ".join(f"{card} {b.context} {b.bytes / MiB:.0f} MiB" for card, b in estimated)
                  + " are estimates"),
        expected=f"compute buffers measured at this ubatch (calibrated at ubatch {', '.join(map(str, measured))})",
        details=[_card(d) for d in ledger.cards],
        fix=("a rung's cost is measured per shape, not transferred (the 2048 rung cost 746 MiB, not the predicted "
             "616): boot the shape once and record its compute buffers under calibration.compute (a documented "
             "arm booted at this rung: declare it under calibration.arms), or keep the measured ubatch"),
    )


def _no_split(config: RenderedService) -> str | None:
    """Why there is no layer split across cards to balance."""
    llama = llama_of(config)
    host = config.host.name
    # Whether there is a split at all comes first: a service on one card is not a service the balance cannot judge.
    if not config.host.cards:
        return no_cards(config)
    if len(config.host.cards) < 2:
        return f"host {host} has one serving card: nothing to balance"
    if len(llama.devices) == 1 or llama.split_mode == "none":
        return f"{config.name} runs on one card (--device {','.join(llama.devices) or '-'}, --split-mode {llama.split_mode})"
    if reason := _no_card_ledger(config):
        return reason
    if config.host.balance_slack_bytes is None:
        return f"host {host} declares no balance slack: set hosts.{host}.balance_slack_gib in fleet.toml"
    return None


@service_seam(
    cites=("B-FIT-2", "B-FIT-4", "B-FIT-5", "INC-12"),
    summary="the cards of a layer split differ by at most the host's declared slack",
    requires=_no_split,
    engines=("llama.cpp",),
    figures=_balance_margin,
    codes={
        **LEDGER_CODES,
        "gap-over-slack": "the cards of a layer split differ by more than the host's slack",
    },
)
def card_balance(config: RenderedService) -> None:
    ledger = memory_ledger(config, card_balance)
    slack = config.host.balance_slack_bytes
    assert slack is not None
    cards = ledger.cards
    if len(cards) < 2:
        return
    heaviest = max(cards, key=lambda d: d.total)
    lightest = min(cards, key=lambda d: d.total)
    gap = heaviest.total - lightest.total
    if gap <= slack:
        return
    where_slack = config.fleet.where("hosts", config.host.name, "balance_slack_gib")
    raise card_balance.fail(
        config, "gap-over-slack",
        where=_lever(config),
        observed=f"{heaviest.card.shown} holds {gib(gap)} more than {lightest.card.shown}",
        expected=f"a gap <= {gib(slack)} (the slack of host {config.host.name}, {where_slack})",
        details=[_card(d) for d in cards],
        fix=_split_fix(config, service_sweep(config)),
    )


@service_seam(
    cites=("B-PC-1", "B-PC-2", "B-PC-3", "B-PC-5", "INC-11"),
    summary="--cache-ram holds one slot's state (target KV, recurrent, draft) within half the host RAM",
    engines=("llama.cpp",),
    figures=_cache_margin,
    codes={
        **LEDGER_CODES,
        "unbounded": "`--cache-ram -1` on a shared host",
        "over-half-ram": "`--cache-ram` above half the host RAM",
        "below-slot-state": "`--cache-ram` below one slot's saved state (target KV, recurrent rows, draft state)",
        "checkpoints-over-cap": (
            "the slot's state fits, but not with its context checkpoints: each of `--ctx-checkpoints` (default 32) saves the target's "
            "recurrent/windowed state and the draft context's whole state (a plain KV cache, the MTP head's, ignores the partial flag), "
            "and the cache entry is state + checkpoints (B-PC-5)"
        ),
    },
)
def prompt_cache_holds_slot(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    where = config.where_flag(llama.use("cache_ram"))
    cap = llama.cache_ram_mib * MiB
    half = config.host.ram_bytes // 2
    ram = f"half the host RAM: {gib(half)}, {config.fleet.where('hosts', config.host.name, 'ram_gib')}"
    # The bounds of the cache need no ledger: they hold whether or not the model is known.
    if llama.cache_ram_mib < 0:
        raise prompt_cache_holds_slot.fail(
            config, "unbounded",
            cites=("B-PC-3",), where=where,
            observed="--cache-ram -1: the prompt cache may grow without bound",
            expected=f"a bounded cap: at least one slot's state and at most {ram}",
            fix="on a shared host the cache is bounded: set --cache-ram to one slot's state rounded up",
        )
    if cap > half:
        raise prompt_cache_holds_slot.fail(
            config, "over-half-ram",
            cites=("B-PC-2",), where=where,
            observed=f"--cache-ram {llama.cache_ram_mib} MiB = {gib(cap)}",
            expected=f"<= {ram}",
            fix="the cache is host RAM beside the co-tenants: cap it at one slot's state rounded up",
        )
    if reason := _no_ledger(config):
        if reason.startswith(NOT_JUDGED):
            raise NotJudged(reason)  # the service's one line, as every seam blind without the profile says it
        raise NotApplicable(f"{reason}; without it one slot's state is unknown (the cache's lower bound)")
    state = memory_ledger(config, prompt_cache_holds_slot).slot_state
    slot = state.target_kv + state.recurrent + state.draft
    parts = (f"target KV {gib(state.target_kv)} ({state.tokens} tokens), recurrent state "
             f"{gib(state.recurrent)}, draft state {gib(state.draft)}")
    refused = ["an entry larger than the cap is refused ('prompt state size ... exceeds cache size "
               f"limit {llama.cache_ram_mib:.3f} MiB, skipping') and the conversation is prefilled again"]
    if cap < slot:
        raise prompt_cache_holds_slot.fail(
            config, "below-slot-state",
            cites=("B-PC-1", "INC-11"), where=where,
            observed=f"--cache-ram {llama.cache_ram_mib} MiB = {gib(cap)}, one full slot's state is {gib(slot)}",
            expected=f">= {gib(slot)}: {parts}",
            details=refused,
            fix=f"raise --cache-ram to at least {-(-slot // MiB)} MiB: a hybrid model at "
                "--ctx-checkpoints 0 has no other way to carry a state across slots",
        )
    _checkpoints_fit(config, state, cap, slot, parts, refused)


def _checkpoints_fit(config: RenderedService, state: SlotState, cap: int, slot: int, parts: str,
                     refused: list[str]) -> None:
    """A cache entry is the slot's state plus every context checkpoint the slot holds (B-PC-5, INC-11).

    tools/server/server-task.cpp (``server_prompt_cache::alloc``): an entry is the target's state, the draft's
    and the sum of the slot's checkpoints. A checkpoint (tools/server/server-context.cpp, ``create_checkpoint``)
    saves what cannot be rolled back, with LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: of the target, its recurrent rows
    (src/llama-memory-hybrid.cpp) and its sliding-window cells (src/llama-kv-cache-iswa.cpp); of the draft
    context, whatever its memory writes -- a plain KV cache (the MTP head's nextn block, a drafter without a
    window) ignores the flag (src/llama-kv-cache.cpp ``state_write``: GGML_UNUSED(flags)) and writes every
    cell of the slot. They are created only where the target cannot roll back (hybrid, recurrent, SWA),
    at most --ctx-checkpoints of them per slot.
    """
    llama = config.llama
    assert llama is not None
    if not state.checkpoints:
        return
    n = llama.ctx_checkpoints
    target = state.checkpoints // n
    draft = state.draft
    entry = slot + n * (target + draft)
    if cap >= entry:
        return
    use = llama.use("ctx_checkpoints")
    held = (f"{n} checkpoints x ({gib(target)} of the target's recurrent / windowed state + {gib(draft)} of the "
            f"draft context's state) = {gib(n * (target + draft))}")
    raise prompt_cache_holds_slot.fail(
        config, "checkpoints-over-cap",
        cites=("B-PC-1", "B-PC-5", "INC-11"),
        where=config.where_flag(use) if use is not None else config.where_flag(llama.use("cache_ram")),
        observed=(f"--cache-ram {llama.cache_ram_mib} MiB = {gib(cap)} holds one slot's state ({gib(slot)}) but "
                  f"not its checkpoints: --ctx-checkpoints {n}{'' if use is not None else ' (the build default)'}, "
                  f"{held}"),
        expected=f">= {gib(entry)}: {parts}, plus {held}",
        details=[*refused, "each checkpoint saves the draft context's state whole: a plain KV cache ignores "
                 "the partial-state flag (src/llama-kv-cache.cpp state_write), so the bound is the full slot's"],
        fix=("pass --ctx-checkpoints 0 explicitly (the seeds' deliberate deviation, B-PC-5) so an entry is the slot's "
             "state alone" + (f", or raise --cache-ram to {-(-entry // MiB)} MiB" if entry <= config.host.ram_bytes // 2
                              else f"; {gib(entry)} is over half the host RAM, so no cap holds it")),
    )


def _no_draft_context(config: RenderedService) -> str | None:
    """Why there is no draft context on a card to account for."""
    llama = llama_of(config)
    types = set(llama.spec_types)
    if not ("draft-mtp" in types or (types & CONTEXT_DRAFTERS and llama.spec_draft_model is not None)):
        return f"{config.name} runs no draft context (no draft-mtp, no drafter type with --spec-draft-model)"
    return _no_card_ledger(config)


def _split_is_the_lever(config: RenderedService, ledger: Ledger) -> bool:
    """Whether some -ts step clears every card's floor with the drafter as it is: then the split is what
    moved, card-floor says so with the nearest such step, and the drafter is not to blame."""
    llama = config.llama
    assert llama is not None
    if len(llama.tensor_split) != 2:
        return False
    measured = replace(llama, ubatch_size=ledger.n_ubatch, batch_size=max(llama.batch_size, ledger.n_ubatch))
    rows = sweep_tensor_split(measured, ledger_builder(config), floor=config.host.card_floor_bytes, slack=None)
    return any(all(r.floor_ok) for r in rows)


def _at_measured_geometry(config: RenderedService, ledger: Ledger) -> Ledger:
    """The ledger with the batch geometry the service's compute buffers were measured at.

    The drafter check judges the drafter: a ubatch or batch change moves the compute buffers, which
    card-floor reports (INC-04, INC-05); here they are priced as measured, so only the draft context's
    own cost can fail this check.
    """
    llama = config.llama
    assert llama is not None
    measured = sorted({c.ubatch for c in calibrations_of(config.service)})
    if not measured or ledger.n_ubatch in measured or ledger.n_ubatch in arm_rungs(config.service, llama.spec_types):
        return ledger  # a documented arm is judged at the rung it was measured at (calibration.arms)
    ubatch = min(measured, key=lambda u: abs(u - ledger.n_ubatch))
    return ledger_builder(config)(replace(llama, ubatch_size=ubatch, batch_size=max(llama.batch_size, ubatch)))


@service_seam(
    cites=("B-FIT-7", "INC-03", "INC-58"),
    summary="the draft context's KV (the target's whole context unless the drafter has a window) fits",
    requires=_no_draft_context,
    engines=("llama.cpp",),
    codes={
        **LEDGER_CODES,
        "below-floor": "the draft context's KV takes a card below its floor",
    },
)
def drafter_kv_fits(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    ledger = _at_measured_geometry(config, memory_ledger(config, drafter_kv_fits))
    floor = config.host.card_floor_bytes or 0
    draft = config.draft_profile
    mtp = "draft-mtp" in llama.spec_types and llama.spec_draft_model is None
    for device in (d for d in ledger.devices if d.term("draft")):
        if device.free is None or device.free >= floor:
            continue
        if _split_is_the_lever(config, ledger):
            return
        kv = sum(b.bytes for b in device.buffers if b.term == "draft" and b.buffer.startswith("KV"))
        if mtp:
            what = (f"the MTP head caches its nextn block over the whole {ledger.shape.n_ctx}-token pool: "
                    f"{gib(kv)}")
        elif draft is not None and not draft.sliding_window:
            what = (f"{draft.name} declares no sliding_window, so its draft context caches the whole "
                    f"{ledger.shape.n_ctx}-token target context: {gib(kv)} of KV")
        else:
            what = f"the draft context's KV is {gib(kv)} (window {draft.sliding_window if draft else '?'})"
        where: str | Deferred = config.where_flag(llama.use("spec_type"))
        if draft is not None and not mtp and not draft.sliding_window:
            where = _profile_where(draft.path, "attention")
        raise drafter_kv_fits.fail(
            config, "below-floor",
            where=where,
            observed=f"{device.card.shown} keeps {gib(device.free)} free with the drafter: {what}",
            expected=f">= {gib(floor)} free on the card that carries the draft context",
            details=[_card(d) for d in ledger.cards]
            + ([f"draft profile: {draft.path}"] if draft is not None and not mtp else []),
            fix=("read sliding_window out of the drafter's GGUF before sizing speculative decoding: use a "
                 "window-bounded drafter, or budget its KV (draft blocks x 2 x kv heads x head dim x bytes x "
                 "the target's context) on the draft card"),
        )
