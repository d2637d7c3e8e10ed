"""A model of a llama.cpp router preset (``PresetModel``) rendered: the child llama-server the router starts for it.

Nothing runs. The child's environment is the router's own (not known offline: systemd's default PATH stands for it)
plus ``LLAMA_SERVER_ROUTER_PORT`` (the router's port, fleet.toml's ``port``); ``overrides`` replace variables of it
as they do a unit's.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetgate.fleet import Fleet, Service
from fleetgate.render.origins import SYSTEMD_DEFAULT_PATH, Origin
from fleetgate.render.start import PresetModel
from fleetgate.render.types import Rendered
from fleetgate.sources.router_preset import child_start

__all__ = ["render_preset_model"]


def render_preset_model(fleet: Fleet, service: Service, start: PresetModel,
                        overrides: Mapping[str, str | None]) -> Rendered:
    """The child's argv and environment as the router starts it."""
    assert service.models_preset is not None
    preset, name, argv = child_start(fleet, service)
    router_port = Origin("LLAMA_SERVER_ROUTER_PORT", str(service.port), fleet.where("services", service.name, "port"),
                         "the router")
    inputs = {"LLAMA_SERVER_ROUTER_PORT": router_port}
    env = {"PATH": SYSTEMD_DEFAULT_PATH, "LANG": "C.UTF-8", "LLAMA_SERVER_ROUTER_PORT": str(service.port)}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    notes = (f"{preset.where(name)}: the router picks the child's --port when it loads the model (a free port); "
             "written 0 here",
             f"{service.models_preset}: the router's own command line (merged over every model) is not read")
    return Rendered(service=service.name, argv=argv, env=env, inputs=inputs, sourced=(), tests=(), writes=(),
                    script=service.models_preset, unit=None, notes=notes,
                    start=start)
