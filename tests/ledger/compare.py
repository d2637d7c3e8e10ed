"""The ledger's prediction next to llama-server's own buffers, one row per buffer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleetgate.ledger.accounts import Ledger
from tests.ledger.engine import MiB, Observed

EXACT_BUFFERS = ("model", "KV", "KV (SWA)", "RS")


@dataclass(frozen=True)
class Row:
    device: str
    buffer: str
    context: str
    predicted: int
    observed_mib: str | None
    observed_exact: int | None

    @property
    def exact(self) -> bool:
        """Compared in bytes (an RPC device), not only at the log's two decimals."""
        return self.observed_exact is not None

    @property
    def ok(self) -> bool:
        if self.observed_mib is None:
            return False
        if self.observed_exact is not None:
            return self.predicted == self.observed_exact
        return f"{self.predicted / MiB:.2f}" == self.observed_mib

    @property
    def observed(self) -> float:
        if self.observed_exact is not None:
            return float(self.observed_exact)
        return float(self.observed_mib or 0) * MiB

    @property
    def error(self) -> float:
        """(predicted - observed) / observed."""
        return (self.predicted - self.observed) / self.observed if self.observed else float("inf")


def _log_device(label: str, buffer_type: str, buffer: str, host_mapped: bool) -> str:
    """The name the engine's log gives the buffer: the host's model buffers by their buffer type (CPU_Mapped,
    CPU_REPACK), every other buffer by its device."""
    if label == "CPU" and buffer == "model":
        return buffer_type if buffer_type != "CPU" or not host_mapped else "CPU_Mapped"
    return label


def compare(observed: Observed, ledger: Ledger, *, buffers: Sequence[str] = EXACT_BUFFERS,
            host_mapped: bool = True) -> list[Row]:
    """Rows for every (device, buffer, context) either side has, for the given buffer kinds."""
    predicted: dict[tuple[str, str, str], int] = {}
    for device in (*ledger.devices, ledger.host):
        for b in device.buffers:
            if b.buffer not in buffers:
                continue
            key = (_log_device(device.card.label, b.device_label, b.buffer, host_mapped), b.buffer, b.context)
            predicted[key] = predicted.get(key, 0) + b.bytes
    logged: dict[tuple[str, str, str], tuple[str, int | None]] = {}
    for b in observed.buffers:
        if b.buffer not in buffers:
            continue
        key = (b.device, b.buffer, b.context)
        if key in logged:  # two buffers of one kind on one device: add them up
            mib, exact = logged[key]
            total_exact = None if exact is None or b.exact is None else exact + b.exact
            logged[key] = (f"{float(mib) + float(b.mib):.2f}", total_exact)
        else:
            logged[key] = (b.mib, b.exact)
    rows = []
    for key in sorted(set(predicted) | set(logged)):
        mib, exact = logged.get(key, (None, None))
        rows.append(Row(device=key[0], buffer=key[1], context=key[2], predicted=predicted.get(key, 0),
                        observed_mib=mib, observed_exact=exact))
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = []
    for r in rows:
        observed = f"{r.observed_mib} MiB" if r.observed_mib else "absent"
        if r.exact:
            observed = str(r.observed_exact)
        lines.append(f"  {'ok ' if r.ok else 'BAD'} {r.device:<24} {r.context:<7} {r.buffer:<9} predicted "
                     f"{r.predicted:>12,} B  observed {observed}")
    return "\n".join(lines)
