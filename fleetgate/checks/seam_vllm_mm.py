"""A vLLM vision endpoint keeps the multimodal limits its clients are told (B-MM-6; B-VL-3).

``--limit-mm-per-prompt`` is how many items of each modality one prompt may carry
(vllm/config/multimodal.py, ``MultiModalConfig.limit_per_prompt``): without it vLLM 0.13 allows 999 of every
modality the model supports, and its memory profiling (``profile_run``) sizes the encoder's share of the card
for those limits, so the KV pool the fleet measured (``calibration.kv_pool``) belongs to the limits it was
booted with; a limit of 0 turns a modality off; ``--skip-mm-profiling`` sizes the pool without the encoder
at all. The contract says what clients may send (``contract.mm_limits``, as models.yml's ``input`` and the
runbook's per-prompt image limit do).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fleetgate.checks import NotApplicable, service_seam
from fleetgate.engines.vllm import RADIANCE, load_release, read_as_vllm
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []

DEFAULT_LIMIT = 999  # vllm/config/multimodal.py: per modality when --limit-mm-per-prompt does not name it


def _no_vision_contract(config: RenderedService) -> str | None:
    if config.service.contract.vision is None:
        return f"{config.name} does not say whether it serves images: set services.{config.name}.contract.vision"
    return None


def _count(value: Any) -> int | None:
    """A limit as vLLM reads it: a count, or an options object with a ``count``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("count"), int):
        return int(value["count"])
    return None


@service_seam(
    cites=("B-MM-6", "B-VL-3"),
    summary="a vision endpoint passes --limit-mm-per-prompt with the contract's per-prompt limits, keeps images "
               "on, and profiles the encoder",
    requires=_no_vision_contract,
    engines=("vllm",),
    codes={
        "images-off": "an image limit of 0 on a vision endpoint (B-MM-6)",
        "profiling-skipped": "`--skip-mm-profiling` on a vision endpoint: the KV pool is sized without the encoder",
        "limits-dropped": "no `--limit-mm-per-prompt` where the contract declares `mm_limits`: vLLM's default is 999 per modality",
        "limit-differs": "a modality's per-prompt limit other than the contract's `mm_limits`",
    },
)
def vllm_mm_limits(config: RenderedService) -> None:
    vllm = config.vllm
    assert vllm is not None
    contract = config.service.contract
    if not contract.vision:
        raise NotApplicable(f"{config.name}'s contract says vision = false: no multimodal limit to hold")
    limits = vllm.limit_mm_per_prompt
    use = vllm.use("limit_mm_per_prompt")
    where = config.where_flag(use) if use is not None else str(config.rendered.script)
    contract_where = config.fleet.where("services", config.name, "contract")
    image = _count(limits.get("image")) if limits is not None else None
    if image == 0:
        raise vllm_mm_limits.fail(
            config, "images-off",
            cites=("B-MM-6",), where=where,
            observed=f"--limit-mm-per-prompt {json.dumps(dict(limits or {}))}: 0 images per prompt turns vision off",
            expected=f"images on: the contract declares vision = true ({contract_where})",
            fix="give the image modality the per-prompt limit clients are told; 0 is how vLLM disables a modality",
        )
    found, _ = read_as_vllm(config.rendered.argv, load_release().with_fork(RADIANCE))
    skip = found.get("--skip-mm-profiling")
    if skip is not None and config.rendered.argv[skip[0]].split("=", 1)[0] != "--no-skip-mm-profiling":
        raise vllm_mm_limits.fail(
            config, "profiling-skipped",
            cites=("B-VL-3", "B-MM-6"), where=str(config.rendered.script),
            observed=("--skip-mm-profiling on a vision endpoint: the KV pool is sized without the encoder's "
                      "activations, so the first large image request allocates on a card the pool already filled"),
            expected="the encoder profiled at the per-prompt limits, as the measured pool was (calibration.kv_pool)",
            fix="drop --skip-mm-profiling; lower the image limit instead if the encoder's share is too large",
        )
    wanted = contract.mm_limits
    if wanted is None:
        raise NotApplicable(
            f"{config.name} declares no per-prompt multimodal limits: set services.{config.name}.contract.mm_limits "
            "(e.g. { image = 8 }) to hold --limit-mm-per-prompt to them")
    if limits is None:
        raise vllm_mm_limits.fail(
            config, "limits-dropped",
            cites=("B-MM-6", "B-VL-3"), where=where,
            observed=(f"no --limit-mm-per-prompt in the rendered argv: vLLM allows {DEFAULT_LIMIT} items of every "
                      "modality the model supports per prompt, and profiles the encoder for that many"),
            expected=(f"--limit-mm-per-prompt '{json.dumps(dict(wanted))}' (contract.mm_limits, "
                      f"{config.fleet.where('services', config.name, 'contract', 'mm_limits')})"),
            fix=("pass the limit explicitly in the serve script: the measured KV pool and the clients' image count "
                 "were both sized at it"),
        )
    differs = {m: _count(limits.get(m)) for m, n in wanted.items() if _count(limits.get(m)) != n}
    if differs:
        raise vllm_mm_limits.fail(
            config, "limit-differs",
            cites=("B-MM-6", "B-VL-3"), where=where,
            observed="; ".join(f"{m}: {DEFAULT_LIMIT if n is None else n} per prompt" for m, n in differs.items())
            + f" (--limit-mm-per-prompt {json.dumps(dict(limits))})",
            expected=(f"{json.dumps(dict(wanted))} (contract.mm_limits, "
                      f"{config.fleet.where('services', config.name, 'contract', 'mm_limits')})"),
            fix=("keep the limit clients are told; a raise moves the encoder's profiled share and with it the KV pool "
                 "(boot it and record the pool), a cut refuses requests clients are allowed to send"),
        )
