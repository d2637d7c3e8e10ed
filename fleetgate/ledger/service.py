"""The ledger of a rendered fleet service (``fleetgate.render.rendered.RenderedService``) on its host's cards: the compute
calibrations and documented arms its fleet.toml declares, the ledger built once per rendered config for all the
memory seams, and its ``--tensor-split`` sweep against the host's floor and slack."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleetgate.engines.llamacpp import LlamaServerConfig
from fleetgate.ledger.accounts import Calibration, Ledger
from fleetgate.ledger.build import build_ledger
from fleetgate.ledger.devices import Card
from fleetgate.ledger.verdict import SweepRow, sweep_tensor_split
from fleetgate.models.profile import load_profile
from fleetgate.visibility import Unresolved, engine_cards

__all__ = ["arm_rungs", "calibrations_of", "ledger_builder", "service_ledger", "service_sweep"]


def calibrations_of(service: Any) -> tuple[Calibration, ...]:
    """The compute calibrations a fleet.toml service declares (the schema has validated them)."""
    raw = service.calibration.get("compute", []) if isinstance(service.calibration, Mapping) else []
    return tuple(Calibration(device=str(c["device"]), context=str(c["context"]), bytes=int(c["bytes"]),
                             ubatch=int(c["ubatch"]), boot=str(c["boot"])) for c in raw)


def arm_rungs(service: Any, spec_types: Iterable[str]) -> frozenset[int]:
    """The ubatch rungs of the documented arms (``calibration.arms``) that this speculative type runs.

    An arm was booted and measured at its own rung, which no compute calibration covers: there its compute
    buffers are the ledger's never-under estimate (COMPUTE_FACTORS), and the arm is judged at that rung, not
    at a calibrated one it never ran at (B-SP-9, B-FIT-19).
    """
    raw = service.calibration.get("arms", []) if isinstance(service.calibration, Mapping) else []
    types = set(spec_types)
    return frozenset(int(a["ubatch"]) for a in raw if str(a["spec_type"]) in types)


def ledger_builder(config: Any) -> Callable[[LlamaServerConfig], Ledger]:
    """How to build the ledger of a rendered llama.cpp service on the cards its process enumerates. Raises
    ``fleetgate.visibility.Unresolved`` where fleetgate cannot tell which cards those are."""
    service = config.service
    if config.llama is None or config.profile is None:
        raise ValueError(f"{config.name}: the ledger needs a llama.cpp service with a profile")
    seen = engine_cards(config)
    if seen.unresolved:
        raise Unresolved(seen.unresolved)
    # the cards the process enumerates, named and ordered as the engine names them: --device, -ts and --main-gpu
    # index these, and a card the visibility variables hide holds nothing of this service
    cards = [Card(name=name, vram_bytes=d.vram_bytes, declared=d.name if d.name != name else None)
             for name, d in seen.cards]
    projector = load_profile(service.projector_profile) if service.projector_profile else None
    calibrations = calibrations_of(service)

    def build(llama: LlamaServerConfig) -> Ledger:
        # the host's declared CPU flags decide CPU_REPACK and AMX; undeclared, neither is booked (as before)
        return build_ledger(llama, config.profile, cards=cards, draft=config.draft_profile,
                            projector=projector, calibrations=calibrations,
                            cpu_features=config.host.cpu_features)

    return build


_LEDGERS: dict[int, tuple[Any, Ledger]] = {}


def service_ledger(config: Any) -> Ledger:
    """The ledger of a rendered llama.cpp service (``fleetgate.render.rendered.RenderedService``) on its host's cards.

    Built once per rendered config, for all the memory seams. Raises KeyError for a ``--device`` name
    the engine sees no card for, ``fleetgate.visibility.Unresolved`` where the cards it sees cannot be told.
    """
    cached = _LEDGERS.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    ledger = ledger_builder(config)(config.llama)
    _LEDGERS[id(config)] = (config, ledger)
    return ledger


def service_sweep(config: Any) -> list[SweepRow]:
    """The -ts sweep of a rendered service against its host's floor (0 when none is declared) and slack."""
    return sweep_tensor_split(config.llama, ledger_builder(config), floor=config.host.card_floor_bytes,
                              slack=config.host.balance_slack_bytes)
