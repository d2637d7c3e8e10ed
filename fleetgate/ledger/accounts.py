"""What the ledger books, and the ledger it adds up to.

Each buffer is named the way llama-server names it in its load log (``model``, ``KV``, ``RS``, ``compute``,
``output``) and carries its term, the context it belongs to (target, draft, mtp, projector), the basis of its
figure (derived from the engine's source; reconstructed, from a profile that gives bytes per block kind instead
of tensors; calibrated on a named boot; or estimated) and the source it mirrors. Every phase books into one
``Accounts``; the ledger groups the buffers per device, with the host's apart, the RAM prompt cache's slot state
and the notes; ``summarize`` gives every figure in bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetgate.engines.llamacpp import ContextShape
from fleetgate.ledger.devices import Card
from fleetgate.ledger.overrides import Moved

__all__ = [
    "RUNTIME_GROWTH",
    "TERMS",
    "TOTAL_READING",
    "Accounts",
    "Basis",
    "Buffer",
    "Calibration",
    "DeviceLedger",
    "Ledger",
    "Refusal",
    "SlotState",
    "Term",
    "calibrations_at",
    "summarize",
]

Basis = Literal["derived", "reconstructed", "calibrated", "estimate"]
Term = Literal["model", "output", "kv", "recurrent", "draft", "projector", "compute", "runtime"]
TERMS: tuple[Term, ...] = ("model", "output", "kv", "recurrent", "draft", "projector", "compute", "runtime")
RUNTIME_GROWTH = "runtime growth"
"""The runtime's buffer for what a GPU's runtime grows on the first request whose prompt fills a ubatch."""
# A device total is read against nvidia-smi at one moment; the figure names its moment so that a reading taken at
# another (at health, or after a request of a few tokens, which grows less: issue 35) is not read as a miss.
TOTAL_READING = ("after the first request that fills a ubatch (the runtime's growth booked in full: a bound; a "
                 "shorter first request grows less)")


@dataclass(frozen=True)
class Calibration:
    """A compute buffer measured on one of the fleet's own boots."""

    device: str
    context: str
    """target, draft, mtp or projector."""
    bytes: int
    ubatch: int
    boot: str


def calibrations_at(calibrations: Sequence[Calibration], n_ubatch: int) -> dict[tuple[str, str], Calibration]:
    """The calibrations that apply at this ubatch, by (device, context)."""
    return {(c.device, c.context): c for c in calibrations if c.ubatch == n_ubatch}


@dataclass(frozen=True)
class Buffer:
    device: str
    term: Term
    buffer: str
    """llama-server's word for it: model, KV, KV (SWA), RS, compute, output."""
    context: str
    """target, draft, mtp, projector."""
    bytes: int
    basis: Basis
    source: str
    buffer_type: str = ""
    """The engine's name for the buffer type, as its log prints it: CUDA0, CUDA_Host, CPU_Mapped, CPU_REPACK."""

    @property
    def device_label(self) -> str:
        return self.buffer_type or self.device


@dataclass(frozen=True)
class DeviceLedger:
    card: Card
    blocks: tuple[int, ...]
    holds_output: bool
    buffers: tuple[Buffer, ...]
    draft_blocks: tuple[int, ...] = ()

    def term(self, term: Term) -> int:
        return sum(b.bytes for b in self.buffers if b.term == term)

    @property
    def total(self) -> int:
        return sum(b.bytes for b in self.buffers)

    @property
    def at_health(self) -> int:
        """The reading once ``/health`` answers: ``total`` less the runtime's growth on the first request that fills a
        ubatch, which ``total`` books in full (a bound; a first request of a few tokens grows less)."""
        return self.total - sum(b.bytes for b in self.buffers if b.buffer == RUNTIME_GROWTH)

    @property
    def free(self) -> int | None:
        return None if self.card.vram_bytes is None else self.card.vram_bytes - self.total


@dataclass(frozen=True)
class SlotState:
    """What the RAM prompt cache stores for one full slot (tools/server/server-task.cpp, ``alloc``)."""

    tokens: int
    target_kv: int
    recurrent: int
    draft: int
    checkpoints: int

    @property
    def total(self) -> int:
        return self.target_kv + self.recurrent + self.draft + self.checkpoints


@dataclass(frozen=True)
class Refusal:
    """Why the engine will not start this command line, in its own words: a process that exits at load holds no
    memory, so no figure of its ledger is a finding until this is fixed."""

    reason: str
    dest: str | None
    """The option to change (its ``LlamaServerConfig`` destination), for the failure's file and line."""
    source: str
    """The engine source that refuses."""


@dataclass(frozen=True)
class Ledger:
    shape: ContextShape
    n_ubatch: int
    devices: tuple[DeviceLedger, ...]
    host: DeviceLedger
    slot_state: SlotState
    notes: tuple[str, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    moved: tuple[Moved, ...] = ()
    """Tensors the overrides took off their layer's device (``-ot``, ``--cpu-moe``, ``--n-cpu-moe``)."""

    @property
    def cards(self) -> tuple[DeviceLedger, ...]:
        """Devices with a known capacity: the cards a floor applies to."""
        return tuple(d for d in self.devices if d.card.vram_bytes is not None)


@dataclass
class Accounts:
    """Buffers collected per device label."""

    buffers: dict[str, list[Buffer]] = field(default_factory=dict)

    def add(self, card: Card, term: Term, buffer: str, context: str, nbytes: int, basis: Basis,
            source: str, buffer_type: str = "") -> None:
        if nbytes > 0:
            self.buffers.setdefault(card.label, []).append(
                Buffer(card.name, term, buffer, context, nbytes, basis, source, buffer_type or card.label))


def summarize(ledger: Ledger) -> dict[str, Any]:
    """Every figure in bytes, per device and per term, each buffer named as llama-server names it."""
    def device(d: DeviceLedger) -> dict[str, Any]:
        return {
            "device": d.card.name,
            "buffer_name": d.card.label,
            "vram_bytes": d.card.vram_bytes,
            "total_bytes": d.total,
            "at_health_bytes": d.at_health,
            "free_bytes": d.free,
            "blocks": list(d.blocks),
            "output_layer": d.holds_output,
            "terms": {t: d.term(t) for t in TERMS},
            "buffers": [{"name": f"{b.device_label} {b.buffer} buffer", "buffer_type": b.device_label,
                         "buffer": b.buffer, "term": b.term,
                         "context": b.context, "bytes": b.bytes, "basis": b.basis, "source": b.source}
                        for b in d.buffers],
        }

    state = ledger.slot_state
    return {
        "context": {"n_ctx": ledger.shape.n_ctx, "n_ctx_seq": ledger.shape.n_ctx_seq,
                    "n_seq_max": ledger.shape.n_seq_max, "kv_unified": ledger.shape.unified,
                    "n_ubatch": ledger.n_ubatch},
        "total_reading": TOTAL_READING,
        "devices": [device(d) for d in ledger.devices],
        "host": device(ledger.host),
        "slot_state": {"tokens": state.tokens, "target_kv": state.target_kv, "recurrent": state.recurrent,
                       "draft": state.draft, "checkpoints": state.checkpoints, "total": state.total},
        "notes": list(ledger.notes),
        "refusals": [{"reason": r.reason, "option": r.dest, "source": r.source} for r in ledger.refusals],
        "moved": [{"tensor": m.tensor, "from": m.source, "to": m.target, "bytes": m.nbytes,
                   "override": m.override.origin} for m in ledger.moved],
    }
