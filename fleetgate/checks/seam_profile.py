"""Every llama.cpp service names its model's profile: without it the memory and context seams are blind.

A service without one is not judged, never failed: the profile is a declaration fleetgate lacks, not a fault of the
fleet (on a machine that cannot reach the model's host every service lacks it). The line names the command that
writes it, and is the same line every seam blind without it says, so the summary shows it once per service.
"""

from __future__ import annotations

from fleetgate.checks import NotJudged, service_seam
from fleetgate.checks._common import profile_missing
from fleetgate.rendered import RenderedService

NAME = "profile-declared"


CHECK = service_seam(
    NAME,
    cites=(),
    summary="a llama.cpp service declares its model's profile, which the ledger and the context seams read "
            "(not judged without it, naming the `fleetgate profile` command)",
    engines=("llama.cpp",),
    codes={},
)


@CHECK.register
def profile_declared(config: RenderedService) -> None:
    if config.profile is None:
        raise NotJudged(profile_missing(config))
