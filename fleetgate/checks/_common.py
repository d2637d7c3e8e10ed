"""Small helpers shared by the check modules: formatting (``gib`` is ``fleetgate.fleet.gib``), and the reasons a seam
cannot apply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgate.fleet import gib

if TYPE_CHECKING:
    from fleetgate.rendered import RenderedService

__all__ = ["gib", "mib", "no_cards", "no_profile"]


def mib(value: float) -> str:
    return f"{value / (1 << 20):,.0f} MiB"


def no_profile(config: RenderedService, needs: str = "") -> str | None:
    """Why a seam that reads the model's profile cannot apply (None when the profile is there)."""
    if config.profile is None:
        return (f"{config.name} declares no model profile: set services.{config.name}.profile in fleet.toml "
                "(`fleetgate profile MODEL.gguf` writes one)")
    if needs and not getattr(config.profile, needs, None):
        return f"profile {config.profile.name} gives no {needs}: declare it in {config.profile.path.name}"
    return None


def no_cards(config: RenderedService) -> str | None:
    """Why a seam about the host's cards cannot apply (None when the host declares some)."""
    if not config.host.cards:
        return (f"host {config.host.name} declares no serving device (CPU only): declare its cards in "
                f"hosts.{config.host.name}.devices")
    return None
