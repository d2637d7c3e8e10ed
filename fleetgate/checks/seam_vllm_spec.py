"""vLLM's speculative depth is one its drafter can draft and the fleet measured (B-SP-11, B-SP-4, B-SP-1).

``num_speculative_tokens`` in ``--speculative-config`` is how many tokens the drafter proposes per step. A
block drafter (DFlash: ``method = "dflash"``) denoises one block of ``block_size`` positions whose first is the
last accepted token, so it proposes at most ``block_size - 1`` (B-SP-1, the same law llama.cpp asserts); and
the depth is part of the engine's compiled graph and of the acceptance the fleet measured, so the deployment
stays on a depth that was measured for that method and drafter (S002, "Speculative depth": 7 deployed, 5 the
measured batch arm; E.18: MTP self-speculation at depth 8). The measured arms are declared under
``calibration.speculative``: method, drafter (``model``, as the engine's path), depth, and a block drafter's
``block_size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetgate.checks import service_seam
from fleetgate.checks._common import vllm_of
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []


def _arms(config: RenderedService) -> list[Mapping[str, Any]]:
    raw = config.service.calibration.get("speculative", [])
    return [a for a in raw if isinstance(a, Mapping)]


def _no_drafter(config: RenderedService) -> str | None:
    vllm = vllm_of(config)
    if vllm.speculative_config is None:
        return f"{config.name} passes no --speculative-config: nothing drafts"
    if not _arms(config):
        return (f"{config.name} declares no measured drafter arm: record each measured (method, model, "
                f"num_speculative_tokens, block_size) under services.{config.name}.calibration.speculative")
    return None


@service_seam(
    cites=("B-SP-11", "B-SP-4", "B-SP-1", "B-SP-8"),
    summary="num_speculative_tokens within the drafter's block and at a depth the fleet measured for that "
               "method and drafter",
    requires=_no_drafter,
    engines=("vllm",),
    codes={
        "past-block": "`num_speculative_tokens` past a block drafter's `block_size - 1` (B-SP-1)",
        "unmeasured-depth": "a method, drafter and depth no arm of `calibration.speculative` measured (B-SP-11, B-SP-4)",
    },
)
def vllm_speculative_depth(config: RenderedService) -> None:
    vllm = config.vllm
    assert vllm is not None and vllm.speculative_config is not None
    spec = vllm.speculative_config
    method, model, depth = spec.get("method"), spec.get("model"), spec.get("num_speculative_tokens")
    where = config.where_flag(vllm.use("speculative_config"))
    declared = config.fleet.where("services", config.name, "calibration", "speculative")
    arms = _arms(config)
    mine = [a for a in arms if a.get("method") == method and a.get("model", model) == model]
    blocks = sorted({int(a["block_size"]) for a in mine if "block_size" in a})
    if isinstance(depth, int) and blocks and depth > blocks[0] - 1:
        raise vllm_speculative_depth.fail(
            config, "past-block",
            cites=("B-SP-1", "B-SP-8", "B-SP-11"), where=where,
            observed=(f"num_speculative_tokens {depth} with the {method} drafter {model} "
                      f"(block_size {blocks[0]}, {declared})"),
            expected=f"<= {blocks[0] - 1} (block_size - 1): the block's first position is the last accepted token",
            fix=f"set the depth to {blocks[0] - 1} or less; read the drafter's block_size, not its method's name",
        )
    measured = sorted({int(a["num_speculative_tokens"]) for a in mine})
    if depth not in measured:
        arms_text = "; ".join(f"{a.get('method')} {a.get('model', '(any drafter)')} depth {a.get('num_speculative_tokens')}"
                              for a in arms)
        raise vllm_speculative_depth.fail(
            config, "unmeasured-depth",
            cites=("B-SP-11", "B-SP-4"), where=where,
            observed=(f"--speculative-config method {method}, drafter {model}, num_speculative_tokens {depth}: "
                      + (f"measured only at depth {', '.join(map(str, measured))}" if measured
                         else "no arm of this method and drafter was measured")),
            expected=f"a measured arm (calibration.speculative, {declared}: {arms_text})",
            fix=("the depth is part of the compiled graph and of the acceptance the deployment was chosen on: bench "
                 "the new arm (acceptance, decode at the fleet's concurrency) and record it, or keep a measured one"),
        )
