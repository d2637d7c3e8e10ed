"""Vision needs an explicit --mmproj whose file the service declares (B.7, INC-08)."""

from __future__ import annotations

import re

from fleetgate.checks import service_seam
from fleetgate.failure import Deferred
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []

# Publishers name a projector's tensor type in its file name (mmproj-Q8_0.gguf, mmproj-BF16.gguf).
_TYPE = re.compile(r"(?:^|[-_.])(F32|F16|BF16|Q8_0|Q6_K|Q5_K_M|Q4_K_M|Q4_0|Q4_1)(?=[-_.]|$)", re.IGNORECASE)


def _where_mmproj(config: RenderedService) -> str | Deferred:
    """The variable that holds the projector's path (a serve script that tests the file defeats re-rendering)."""
    llama = config.llama
    assert llama is not None
    for origin in config.variables.values():
        if origin.value == llama.mmproj:
            return f"{origin.where} ({origin.name})"
    return config.where_flag(llama.use("mmproj"))


def _projector_type(path: str) -> str | None:
    match = _TYPE.search(path.rsplit("/", 1)[-1].removesuffix(".gguf"))
    return match.group(1) if match else None


def _no_vision_contract(config: RenderedService) -> str | None:
    if config.service.contract.vision is None:
        return f"{config.name} does not say whether it serves images: set services.{config.name}.contract.vision"
    return None


@service_seam(
    cites=("B-MM-1", "B-MM-2", "INC-08"),
    summary="a vision endpoint passes --mmproj explicitly (no autoload) with a file the service declares",
    requires=_no_vision_contract,
    engines=("llama.cpp",),
    codes={
        "no-mmproj": "vision declared, no `--mmproj` (no autoload in this build)",
        "mmproj-not-in-payload": "`--mmproj` is not among the service's payload files",
        "not-concurrent-projector": "several slots with a projector other than the contract's `concurrent_mmproj` (INC-59)",
        "mmproj-on-text-only": "`--mmproj` on an endpoint whose contract says `vision = false`",
    },
)
def vision_mmproj(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    vision = config.service.contract.vision
    payload_where = config.fleet.where("services", config.name, "payload")
    if vision and llama.mmproj is None:
        raise vision_mmproj.fail(
            config, "no-mmproj",
            where=str(config.rendered.script),
            observed="no --mmproj in the rendered argv",
            expected="--mmproj <projector.gguf>: the contract declares vision, and this build does not autoload "
                     "mmproj*.gguf from the model directory",
            fix="pass --mmproj explicitly; without it the endpoint comes up healthy and text-only, and every image "
                "request answers 500 'image input is not supported'",
        )
    if vision and llama.mmproj is not None and config.host_path(llama.mmproj) not in config.service.payload:
        raise vision_mmproj.fail(
            config, "mmproj-not-in-payload",
            where=config.where_flag(llama.use("mmproj")),
            observed=f"--mmproj {llama.mmproj}, which the service's payload does not list",
            expected=f"a projector among the payload files ({payload_where})",
            fix="declare the projector file in fleet.toml's payload (the deploy preflight checks those) or fix the path",
        )
    wanted = config.service.contract.concurrent_mmproj
    if vision and llama.mmproj is not None and wanted and llama.n_slots > 1:
        found = _projector_type(llama.mmproj)
        if found is None or found.upper() != wanted.upper():
            raise vision_mmproj.fail(
                config, "not-concurrent-projector",
                cites=("B-MM-3", "INC-59"), where=_where_mmproj(config),
                observed=(f"--mmproj {llama.mmproj} ({found or 'type not in the file name'}) at --parallel "
                          f"{llama.n_slots}"),
                expected=(f"the publisher's {wanted} projector for concurrent image requests "
                          f"({config.fleet.where('services', config.name, 'contract', 'concurrent_mmproj')})"),
                fix=f"serve the {wanted} mmproj (and list it in the payload), or run one slot",
            )
    if vision is False and llama.mmproj is not None:
        raise vision_mmproj.fail(
            config, "mmproj-on-text-only",
            where=config.where_flag(llama.use("mmproj")),
            observed=f"--mmproj {llama.mmproj} on an endpoint whose contract says vision = false",
            expected="no projector on a text-only endpoint",
            fix="drop --mmproj (it costs VRAM) or declare vision = true",
        )
