"""Every llama.cpp service names its model's profile: without it the memory and context seams are blind.

A service without one is not judged: the profile is a declaration fleetgate lacks, not a fault of the fleet (on a
machine that cannot reach the model's host every service lacks it). The line names the command that writes it, and is
the same line every seam blind without it says, so the summary shows it once per service. A fleet that keeps the
``model-profiles`` policy holds every llama.cpp service to a profile: there the missing one fails.
"""

from __future__ import annotations

from fleetgate.checks import NotJudged, service_seam
from fleetgate.checks._common import profile_missing
from fleetgate.policies import policy_on
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []


@service_seam(
    policy_codes={"missing": "model-profiles"},
    cites=(),
    summary="a llama.cpp service declares its model's profile, which the ledger and the context seams read "
            "(not judged without it, naming the `fleetgate profile` command)",
    engines=("llama.cpp",),
    codes={
        "missing": "a llama.cpp service without `profile =`, in a fleet that keeps the `model-profiles` policy",
    },
)
def profile_declared(config: RenderedService) -> None:
    if config.profile is None:
        if policy_on(config.fleet, "model-profiles"):
            raise profile_declared.fail(
                config, "missing",
                where=config.fleet.where("services", config.name),
                observed=f"services.{config.name} declares no profile, and this fleet keeps the model-profiles policy: the "
                         "card floor, balance, drafter and prompt-cache seams and the trained-window seam cannot judge it",
                expected="profile = \"profiles/MODEL.toml\" (or the GGUF itself), so the ledger can place the model",
                fix=profile_missing(config).removeprefix("not judged: "),
            )
        raise NotJudged(profile_missing(config))
