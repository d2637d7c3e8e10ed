"""The engine configurations the ledger is proven on (data for the tests and for docs/ledger.md).

Models: ``smollm2`` and ``gemma3`` are the real GGUFs from PyPI; the others are written by
tests/ledger/tiny_models.py. Each case runs llama-server with ``n_rpc`` ggml-rpc-server devices on
loopback (0: everything on the host CPU).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    args: tuple[str, ...]
    n_rpc: int
    draft: str | None = None
    second_context: str = "draft"
    expect: tuple[str, ...] = ("model", "KV")
    """Buffer kinds the run must show (a comparison over nothing proves nothing)."""


def _a(text: str) -> tuple[str, ...]:
    return tuple(text.split())


MTP = "--spec-type draft-mtp --spec-draft-n-max 3"
DFLASH = "--spec-type draft-dflash --spec-draft-n-max 3 --spec-draft-device RPC1"

CASES: tuple[Case, ...] = (
    Case("smollm2-cpu", "smollm2", _a("-c 2048 -np 2"), 0),
    Case("smollm2-1dev-q8", "smollm2", _a("-c 4096 -np 1 -ngl 999 -ctk q8_0 -ctv q8_0"), 1),
    Case("smollm2-2dev-ts3,2", "smollm2", _a("-c 4096 -np 2 -ngl 999 -ts 3,2"), 2),
    Case("smollm2-2dev-ts1,3-np3-q4", "smollm2", _a("-c 6144 -np 3 -ngl 999 -ts 1,3 -ctk q4_0 -ctv q4_0"), 2),
    Case("smollm2-2dev-unified", "smollm2", _a("-c 4096 -np -1 -ngl 999 -ts 1,1"), 2),
    Case("smollm2-2dev-ngl20", "smollm2", _a("-c 2048 -np 2 -ngl 20 -ts 1,1"), 2),
    Case("gemma3-2dev-swa", "gemma3", _a("-c 8192 -np 2 -ngl 999 -ts 1,1"), 2,
         expect=("model", "KV", "KV (SWA)")),
    Case("gemma3-1dev-swa-full", "gemma3", _a("-c 4096 -np 1 -ngl 999 --swa-full"), 1,
         expect=("model", "KV", "KV (SWA)")),
    Case("qwen35-2dev", "qwen35", _a("-c 2048 -np 2 -ngl 999 -ts 1,1"), 2, expect=("model", "KV", "RS")),
    Case("qwen35-2dev-ts2,1-np3-q8", "qwen35", _a("-c 3072 -np 3 -ngl 999 -ts 2,1 -ctk q8_0 -ctv q8_0"), 2,
         expect=("model", "KV", "RS")),
    Case("qwen35-mtp", "qwen35-mtp", _a(f"-c 2048 -np 2 -ngl 999 -ts 1,1 {MTP}"), 2, second_context="mtp",
         expect=("model", "KV", "RS")),
    Case("qwen35-mtp-unloaded", "qwen35-mtp", _a("-c 2048 -np 2 -ngl 999 -ts 3,1"), 2,
         expect=("model", "KV", "RS")),
    Case("qwen35-dflash-swa", "qwen35", _a(f"-c 2048 -np 2 -ngl 999 -ts 1,1 {DFLASH}"), 2, draft="dflash-swa",
         expect=("model", "KV", "KV (SWA)", "RS")),
    Case("qwen35-dflash-full-window", "qwen35", _a(f"-c 4096 -np 2 -ngl 999 -ts 1,1 {DFLASH}"), 2,
         draft="dflash", expect=("model", "KV", "RS")),
)
