"""A model of a llama-swap config (``SwapModel``) rendered: its ``cmd`` as llama-swap starts it. Nothing runs.

The engine's environment is llama-swap's own (not known offline: systemd's default PATH stands for it) plus the
model's ``env``; ``overrides`` replace variables of it as they do a unit's. The port llama-swap forwards to is the
engine's (``SwapModel.upstream_port`` of ``Rendered.start``); the fleet's declared ``port`` is llama-swap's own listen port.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetgate.fleet import Fleet, Service
from fleetgate.render.origins import SYSTEMD_DEFAULT_PATH, Origin
from fleetgate.render.start import SwapModel
from fleetgate.render.types import Rendered
from fleetgate.sources.llama_swap import model_start

__all__ = ["render_swap_model"]


def render_swap_model(fleet: Fleet, service: Service, start: SwapModel, overrides: Mapping[str, str | None]) -> Rendered:
    """The model's ``cmd`` and environment as llama-swap starts it."""
    config, model, program = model_start(fleet, service)
    inputs = {key: Origin(key, value, f"{config.path}:{line}", "llama-swap env") for key, (value, line) in model.env.items()}
    env = {"PATH": SYSTEMD_DEFAULT_PATH, "LANG": "C.UTF-8", **{key: o.value for key, o in inputs.items()}}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return Rendered(service=service.name, argv=(program, *model.argv[1:]), env=env, inputs=inputs, sourced=(),
                    tests=(), writes=(), script=config.path, unit=None,
                    start=SwapModel(upstream_port=model.proxy_port))
