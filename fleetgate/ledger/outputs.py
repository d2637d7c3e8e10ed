"""The output buffers in host memory: the target context's logits, the draft and MTP contexts' own
(src/llama-context.cpp, ``output_reserve``), at boot and as they grow once drafts are verified."""

from __future__ import annotations

from fleetgate.engines.llamacpp import LlamaServerConfig
from fleetgate.ledger.accounts import Accounts, Basis
from fleetgate.ledger.context import ContextParams
from fleetgate.ledger.devices import HOST
from fleetgate.ledger.drafters import Drafter
from fleetgate.ledger.kv import kv_layers
from fleetgate.ledger.placement import PlacedModel
from fleetgate.models.profile import Profile

__all__ = ["book_outputs", "output_buffer"]


def output_buffer(profile: Profile, *, n_seq: int, n_batch: int, n_max: int, mtp: bool,
                  drafting: int | None = None) -> tuple[int, int]:
    """The target context's output buffer at boot and once ``drafting`` sequences (default: every slot)
    verify drafts: logits for ``1 + n_max`` outputs each, and with MTP the nextn embeddings of every token
    of the batch (src/llama-context.cpp, ``output_reserve``: ``embd_nextn`` unmasked is ``n_embd x n_batch``).
    Measured on the engine (tests/ledger/data/gpu-h200.json, qwen35-mtp-cuda): 2,080 B at boot, 528,448 B
    during one drafted request."""
    boot = n_seq * profile.n_vocab * 4
    if not n_max:
        return boot, boot
    active = n_seq if drafting is None else drafting
    outputs = max(n_seq, min(n_batch, active * (1 + n_max)))
    return boot, outputs * profile.n_vocab * 4 + (profile.n_embd * n_batch * 4 if mtp else 0)


def book_outputs(acc: Accounts, config: LlamaServerConfig, model: PlacedModel, drafter: Drafter,
                 params: ContextParams, *, basis: Basis) -> None:
    """The target's output buffer and its growth, the draft model's, the MTP context's, all on the host (in the
    output device's pinned host buffer type)."""
    target, draft_model, mtp = model.profile, drafter.model, drafter.mtp
    n_seq, n_batch = params.n_seq, params.n_batch
    out_type = model.output_device.backend.host_buffer or "CPU"
    boot, grown = output_buffer(target, n_seq=n_seq, n_batch=n_batch,
                                n_max=config.spec_draft_n_max if config.speculative else 0, mtp=mtp)
    if params.embedding:
        # output_reserve: the logits are always kept, and cparams.embeddings adds n_embd_out floats per output
        # (n_outputs_max = max(n_outputs, n_seq) at boot); a request of n tokens grows it to n x (n_vocab + n_embd)
        embd = n_seq * target.n_embd * 4
        boot, grown = boot + embd, grown + embd
    acc.add(HOST, "output", "output", "target", boot, basis,
            "src/llama-context.cpp output_reserve: n_seq x (n_vocab" + (" + n_embd" if params.embedding else "")
            + ") x 4 B at boot", out_type)
    acc.add(HOST, "output", "output growth", "target", grown - boot, basis,
            "output_reserve grows it on the first drafted request: n_seq x (1 + n_max) outputs"
            + (" + n_embd x n_batch nextn embeddings" if mtp else ""), out_type)
    if draft_model is not None:
        draft = draft_model.profile
        acc.add(HOST, "draft", "output", "draft", n_seq * draft.n_vocab * 4, basis,
                "src/llama-context.cpp output_reserve (draft context): n_seq x n_vocab x 4 B at boot; its "
                "growth while drafting is not measured", draft_model.output_device.backend.host_buffer or "CPU")
    if mtp and kv_layers(target, mtp=True):
        # the MTP context's own outputs: logits, the backend sampler's probabilities and candidates, embeddings
        mtp_boot = n_seq * target.n_vocab * 4
        acc.add(HOST, "draft", "output", "mtp", mtp_boot, basis,
                "src/llama-context.cpp output_reserve (MTP context): n_seq x n_vocab x 4 B at boot", out_type)
        acc.add(HOST, "draft", "output growth", "mtp",
                n_seq * (4 * target.n_vocab + 1 + target.n_embd) * 4 - mtp_boot, basis,
                "output_reserve once the backend sampler is set: n_seq x (4 n_vocab + 1 + n_embd) x 4 B", out_type)
