"""Vision needs an explicit --mmproj whose file the service declares (B.7, INC-08)."""

from __future__ import annotations

from fleetgate.checks import check
from fleetgate.config import ServiceConfig
from fleetgate.failure import Failure

NAME = "vision-mmproj"


def _no_vision_contract(config: ServiceConfig) -> str | None:
    if config.llama is None:
        return f"{config.name} renders no llama-server command line"
    if config.service.contract.vision is None:
        return f"{config.name} does not say whether it serves images: set services.{config.name}.contract.vision"
    return None


@check(NAME, kind="seam", subject="service", cites=("B-MM-1", "B-MM-2", "INC-08"), requires=_no_vision_contract,
       engines=("llama.cpp",),
       summary="a vision endpoint passes --mmproj explicitly (no autoload) with a file the service declares")
def vision_mmproj(config: ServiceConfig) -> None:
    llama = config.llama
    assert llama is not None
    vision = config.service.contract.vision
    payload_where = config.fleet.where("services", config.name, "payload")
    if vision and llama.mmproj is None:
        raise Failure(
            code=f"{NAME}/no-mmproj",
            service=config.name, check=NAME, where=str(config.rendered.script),
            observed="no --mmproj in the rendered argv",
            expected="--mmproj <projector.gguf>: the contract declares vision, and this build does not autoload "
                     "mmproj*.gguf from the model directory",
            fix="pass --mmproj explicitly; without it the endpoint comes up healthy and text-only, and every image "
                "request answers 500 'image input is not supported'",
        )
    if vision and llama.mmproj is not None and llama.mmproj not in config.service.payload:
        raise Failure(
            code=f"{NAME}/mmproj-not-in-payload",
            service=config.name, check=NAME, where=config.where_flag(llama.use("mmproj")),
            observed=f"--mmproj {llama.mmproj}, which the service's payload does not list",
            expected=f"a projector among the payload files ({payload_where})",
            fix="declare the projector file in fleet.toml's payload (the deploy preflight checks those) or fix the path",
        )
    if vision is False and llama.mmproj is not None:
        raise Failure(
            code=f"{NAME}/mmproj-on-text-only",
            service=config.name, check=NAME, where=config.where_flag(llama.use("mmproj")),
            observed=f"--mmproj {llama.mmproj} on an endpoint whose contract says vision = false",
            expected="no projector on a text-only endpoint",
            fix="drop --mmproj (it costs VRAM) or declare vision = true",
        )
