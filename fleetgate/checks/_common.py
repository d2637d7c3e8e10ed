"""Small helpers shared by the check modules: formatting (``gib`` is ``fleetgate.fleet.gib``), and the reasons a seam
cannot apply or cannot judge."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from fleetgate.checks import NOT_JUDGED, NotApplicable
from fleetgate.fleet import gib

if TYPE_CHECKING:
    from fleetgate.engines.llamacpp import LlamaServerConfig
    from fleetgate.engines.vllm import VllmConfig
    from fleetgate.render.rendered import RenderedService

__all__ = ["gib", "llama_of", "mib", "no_cards", "no_profile", "profile_missing", "vllm_of"]


def mib(value: float) -> str:
    return f"{value / (1 << 20):,.0f} MiB"


def llama_of(config: RenderedService) -> LlamaServerConfig:
    """The llama-server command line of a service a seam declared ``engines=("llama.cpp",)`` judges: every llama.cpp
    service has one, so the declaration says which services the seam is about and no ``requires`` says it again."""
    if config.llama is None:
        raise NotApplicable(f"{config.name} runs {config.service.engine}, not llama.cpp")
    return config.llama


def vllm_of(config: RenderedService) -> VllmConfig:
    """The vLLM command line of a service a seam declared ``engines=("vllm",)`` judges (as ``llama_of``)."""
    if config.vllm is None:
        raise NotApplicable(f"{config.name} runs {config.service.engine}, not vLLM")
    return config.vllm


def profile_missing(config: RenderedService) -> str:
    """The one not-judged line of a llama.cpp service without a model profile: every seam blind without it says this
    same line (the summary lists it once per service), naming the command that writes the profile from the model the
    argv loads."""
    model = config.llama.model if config.llama is not None else None
    gguf = config.host_path(model) if model else "MODEL.gguf"
    target = f"profiles/{config.name}.toml"
    return (f"{NOT_JUDGED}{config.name} declares no model profile, which the ledger and the context seams read: "
            f"write it with `fleetgate profile {shlex.quote(gguf)} -o {target}` and set "
            f"services.{config.name}.profile = \"{target}\" in fleet.toml")


def no_profile(config: RenderedService, needs: str = "") -> str | None:
    """Why a seam that reads the model's profile cannot judge (None when the profile is there): without one, the
    service's not-judged line (``profile_missing``)."""
    if config.profile is None:
        return profile_missing(config)
    if needs and not getattr(config.profile, needs, None):
        return f"profile {config.profile.name} gives no {needs}: declare it in {config.profile.path.name}"
    return None


def no_cards(config: RenderedService) -> str | None:
    """Why a seam about the host's cards cannot apply (None when the host declares some)."""
    if not config.host.cards:
        return (f"host {config.host.name} declares no serving device (CPU only): declare its cards in "
                f"hosts.{config.host.name}.devices")
    return None
