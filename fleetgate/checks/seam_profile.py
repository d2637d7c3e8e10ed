"""Every llama.cpp service names its model's profile: without it the memory and context seams are blind."""

from __future__ import annotations

from fleetgate.checks import service_seam
from fleetgate.rendered import RenderedService

NAME = "profile-declared"


CHECK = service_seam(
    NAME,
    cites=(),
    summary="a llama.cpp service declares its model's profile, which the ledger and the context seams read",
    engines=("llama.cpp",),
    codes={
        "missing": "a llama.cpp service without `profile =`",
    },
)


@CHECK.register
def profile_declared(config: RenderedService) -> None:
    if config.profile is None:
        raise CHECK.fail(
            config, "missing",
            where=config.fleet.where("services", config.name),
            observed=f"services.{config.name} declares no profile: the card floor, balance, drafter and "
                     "prompt-cache seams and the trained-window seam cannot see this service",
            expected="profile = \"profiles/MODEL.toml\" (or the GGUF itself), so the ledger can place the model",
            fix="write one from the GGUF header with `fleetgate profile MODEL.gguf -o profiles/MODEL.toml` and "
                f"point services.{config.name}.profile at it",
        )
