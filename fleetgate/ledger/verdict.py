"""Whether a ledger fits: every sized card at or above its floor and the cards of a split within the slack
(``fleetgate fit``'s verdict and exit code), and the ``--tensor-split`` sweep of a two-card split."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetgate.engines.llamacpp import LlamaServerConfig
from fleetgate.ledger.accounts import DeviceLedger, Ledger, Refusal

__all__ = ["SweepRow", "Verdict", "judge", "nearest_fitting", "sweep_tensor_split"]


@dataclass(frozen=True)
class SweepRow:
    """One ``--tensor-split`` step of a two-card split, as the seeds tabulate them by hand (E.5-E.7)."""

    tensor_split: tuple[int, int]
    free: tuple[int, int]
    gap: int
    floor_ok: tuple[bool, bool]
    slack_ok: bool | None

    @property
    def ok(self) -> bool:
        return all(self.floor_ok) and self.slack_ok is not False


def sweep_tensor_split(config: LlamaServerConfig, ledger_of: Callable[[LlamaServerConfig], Ledger], *,
                       floor: int | None, slack: int | None) -> list[SweepRow]:
    """Every integer ``-ts a,b`` from ``1,total-1`` to ``total-1,1``, the total being the command's split's
    (100 when it gives none): the whole range, two cards only.

    A floor of None is a floor of 0: no row is ok with a card below zero, declared floor or not.
    """
    if len(config.tensor_split) == 2:
        total = round(sum(config.tensor_split))
    elif not config.tensor_split:
        total = 100
    else:
        return []
    limit = floor or 0
    rows: list[SweepRow] = []
    for first in range(1, total):
        ledger = ledger_of(dataclasses.replace(config, tensor_split=(float(first), float(total - first))))
        cards = ledger.cards
        if len(cards) != 2:
            return []
        free = (cards[0].free or 0, cards[1].free or 0)
        gap = abs(cards[0].total - cards[1].total)
        rows.append(SweepRow(tensor_split=(first, total - first), free=free, gap=gap,
                             floor_ok=(free[0] >= limit, free[1] >= limit),
                             slack_ok=None if slack is None else gap <= slack))
    return rows


@dataclass(frozen=True)
class Verdict:
    """What ``fleetgate fit`` gates on: every sized card at or above its floor (0 when none is declared), and
    the cards of a split within the declared slack."""

    floor: int
    floor_declared: bool
    failing: tuple[DeviceLedger, ...]
    """Cards below the floor, the worst first."""
    unsized: tuple[str, ...]
    """Cards whose size is not known: not judged."""
    gap: int | None
    slack: int | None
    refusals: tuple[Refusal, ...] = ()
    """Why the engine will not start at all (the ledger's refusals): it then fits nowhere."""

    @property
    def slack_fails(self) -> bool:
        return self.slack is not None and self.gap is not None and self.gap > self.slack

    @property
    def fits(self) -> bool:
        return not self.refusals and not self.failing and not self.slack_fails

    @property
    def exit_code(self) -> int:
        """0 fits; 1 the engine will not start, a card below zero or its floor, or a gap over the slack; 3 fits as
        far as it can see, but a card's size is unknown (``--card NAME=SIZE``)."""
        if not self.fits:
            return 1
        return 3 if self.unsized else 0


def judge(ledger: Ledger, *, floor: int | None, slack: int | None) -> Verdict:
    limit = floor or 0
    cards = ledger.cards
    sized = [d for d in cards if d.card.vram_bytes is not None]
    failing = tuple(sorted((d for d in sized if (d.free or 0) < limit), key=lambda d: d.free or 0))
    gap = max(d.total for d in sized) - min(d.total for d in sized) if len(sized) > 1 else None
    return Verdict(floor=limit, floor_declared=floor is not None, failing=failing,
                   unsized=tuple(d.card.name for d in ledger.devices if d.card.vram_bytes is None), gap=gap,
                   slack=slack if len(sized) > 1 else None, refusals=ledger.refusals)


def nearest_fitting(rows: Sequence[SweepRow], current: Sequence[float]) -> SweepRow | None:
    """The sweep's ok row nearest the current split (None when no split clears every floor and the slack)."""
    good = [r for r in rows if r.ok]
    if not good:
        return None
    first = current[0] if len(current) == 2 else 50.0  # the rows share the current split's total (100 without one)
    return min(good, key=lambda r: (abs(r.tensor_split[0] - first), r.tensor_split[0]))
