"""The draft context runs on the card it was sized for (B-FIT-13, B-FIT-7; INC-03, INC-10, INC-58).

Which card the fleet sized the drafter for is what it measured: the device of the compute calibrations of
the draft context (``context = "mtp"`` for the model's own MTP head, ``"draft"`` for a separate drafter).
Where the engine really puts the draft context is the ledger's placement (fleetgate.ledger), which mirrors
common/speculative.cpp (``common_base_params_to_speculative``): a separate drafter takes its devices from
``--spec-draft-device`` (``none``: the host) and its layers from ``--spec-draft-ngl``; ``--no-kv-offload``
keeps every KV cache, the draft's too, in host memory; and an MTP context runs on the target model itself,
its nextn block wherever the target's layer split puts it -- the draft device and layer flags are read only
when a draft model is loaded, so under ``draft-mtp`` they are ignored.
"""

from __future__ import annotations

from fleetgate.checks import service_seam
from fleetgate.checks._common import gib, no_cards, no_profile
from fleetgate.checks.seam_memory import LEDGER_CODES, memory_ledger
from fleetgate.ledger.accounts import Buffer, Ledger
from fleetgate.ledger.devices import HOST
from fleetgate.ledger.drafters import CONTEXT_DRAFTERS
from fleetgate.ledger.service import calibrations_of
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []

# The buffers that say where a context lives: its weights and its KV cache (a compute buffer follows them).
_PLACED = ("model", "KV", "KV (SWA)")
_LABEL = {"mtp": "MTP context", "draft": "draft model's context"}


def _context(config: RenderedService) -> str | None:
    """``mtp`` (the target's own head), ``draft`` (a separate drafter) or None (no draft context)."""
    llama = config.llama
    assert llama is not None
    types = set(llama.spec_types)
    if "draft-mtp" in types and llama.spec_draft_model is None:
        return "mtp"
    if types & CONTEXT_DRAFTERS and llama.spec_draft_model is not None:
        return "draft"
    return None


def _sized_for(config: RenderedService, context: str) -> list[str]:
    return sorted({c.device for c in calibrations_of(config.service) if c.context == context})


def _no_placement(config: RenderedService) -> str | None:
    context = _context(config)
    if context is None:
        return f"{config.name} runs no draft context (no draft-mtp, no drafter type with --spec-draft-model)"
    if reason := no_cards(config) or no_profile(config, "block_count"):  # does not apply, before not judged
        return reason
    if context == "draft" and config.draft_profile is None:
        return (f"{config.name} loads a drafter but declares no draft_profile: set services.{config.name}.draft_profile "
                "so that its placement can be derived")
    if not _sized_for(config, context):
        return (f"{config.name} declares no compute calibration of its {context} context, so no card is the one the "
                f"drafter was sized for: record the boot that measured it under services.{config.name}.calibration."
                f"compute (context = \"{context}\")")
    return None


def _buffers(ledger: Ledger, context: str) -> list[Buffer]:
    return [b for d in (*ledger.devices, ledger.host) for b in d.buffers if b.context == context]


@service_seam(
    cites=("B-FIT-13", "B-FIT-7", "INC-03", "INC-10", "INC-58"),
    summary="the draft context (its weights, KV and compute) runs on the card its calibration was measured on, "
               "and no draft flag names a placement the engine ignores",
    requires=_no_placement,
    engines=("llama.cpp",),
    codes={
        **LEDGER_CODES,
        "ignored-under-mtp": (
            "`--spec-draft-device` (or `-ngld 0`) under `draft-mtp` names a placement the engine ignores, other than the card the MTP head "
            "runs on (B-FIT-13)"
        ),
        "on-host": "the draft context's weights or KV land in host memory (`--spec-draft-device none`, `-ngld 0`, `--no-kv-offload`)",
        "off-sized-card": (
            "the draft context runs on a card other than the one its compute calibration was measured on (a moved `--spec-draft-device`, a "
            "reordered `--device` that moves the MTP head)"
        ),
    },
)
def drafter_placement(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    context = _context(config)
    assert context is not None
    sized = _sized_for(config, context)
    calibrated = config.fleet.where("services", config.name, "calibration")
    ledger = memory_ledger(config, drafter_placement)  # an unknown device or cache type fails as every memory seam does
    buffers = _buffers(ledger, context)
    cards = sorted({b.device for b in buffers if b.device != HOST.name and b.buffer in (*_PLACED, "compute")})
    device_use = llama.use("spec_draft_device")
    ngl_use = llama.use("spec_draft_ngl")
    if context == "mtp" and (device_use is not None or ngl_use is not None):
        named = list(llama.spec_draft_device)
        ngl = ngl_use.value if ngl_use is not None else None
        contradicts = (named and named != cards) or ngl == "0"
        if contradicts:
            flags = " ".join(f"{u.flag} {u.value}" for u in (device_use, ngl_use) if u is not None)
            raise drafter_placement.fail(
                config, "ignored-under-mtp",
                cites=("B-FIT-13",),
                where=config.where_flag(device_use or ngl_use),
                observed=(f"{flags} under --spec-type {','.join(llama.spec_types)}: the MTP context runs on the "
                          f"target's own nextn block, on {', '.join(cards) or 'the host'}; the engine reads the "
                          "draft device and layer flags only when it loads a draft model"),
                expected=(f"the draft flags naming where the draft context runs ({', '.join(sized)}, where its "
                          f"compute was measured: {calibrated}), or absent"),
                fix=("name the card that holds the target's last layers (the MTP head rides it), or drop the flag: "
                     "the moment SPEC_TYPE selects a separate drafter it is placed where this flag says, on a card "
                     "nobody sized for it"),
            )
    on_host = [b for b in buffers if b.device == HOST.name and b.buffer in _PLACED]
    if on_host:
        placed = ", ".join(f"{b.buffer} {b.bytes / (1 << 20):,.0f} MiB" for b in on_host)
        weights = any(b.buffer == "model" for b in on_host)
        if weights:
            causes = [f"{u.flag} {u.value}" for u in (device_use, ngl_use) if u is not None]
            where = config.where_flag(device_use or ngl_use)
        else:
            causes = ["--no-kv-offload (every KV cache, the draft's too, stays in host memory)"]
            where = config.where_flag(None)
        raise drafter_placement.fail(
            config, "on-host",
            cites=("B-FIT-13", "B-FIT-7"), where=where,
            observed=f"the {_LABEL[context]} keeps {placed} in host memory: {', '.join(causes) or 'no draft device'}",
            expected=f"the draft context on {', '.join(sized)}, where it was sized and measured ({calibrated})",
            fix=("a drafter on the host drafts at the CPU's speed and its KV crosses the bus every step: give it the "
                 "card it was measured on (--spec-draft-device, --spec-draft-ngl all, KV offload on)"),
        )
    off = [c for c in cards if c not in sized]
    if off:
        held = {c: sum(b.bytes for b in buffers if b.device == c) for c in off}
        lever = device_use if context == "draft" and device_use is not None else (
            llama.use("device") or llama.use("tensor_split") or llama.use("spec_type"))
        raise drafter_placement.fail(
            config, "off-sized-card",
            cites=("B-FIT-13",),
            where=config.where_flag(lever),
            observed=(f"the {_LABEL[context]} runs on {', '.join(cards)}: "
                      + ", ".join(f"{c} holds {gib(n)} of it" for c, n in held.items())),
            expected=(f"on {', '.join(sized)}: the card its compute buffers were measured on ({calibrated}); the "
                      "other card's floor and balance were never sized for it"),
            fix=("the drafter rides the card that holds the target's last layers: point --spec-draft-device (a "
                 "separate drafter) or the --device order and split (the MTP head) at it, or measure the new "
                 "placement and record it under calibration.compute"),
        )

