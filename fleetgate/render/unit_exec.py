"""A unit whose ``ExecStart=`` is the engine (``UnitExec``) rendered: the argv is the line as systemd expands it
(fleetgate.sources.systemd); nothing runs, so there is nothing to sandbox."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from fleetgate.fleet import Fleet, Service
from fleetgate.render.inputs import service_inputs
from fleetgate.render.origins import SYSTEMD_DEFAULT_PATH
from fleetgate.render.start import UnitExec
from fleetgate.render.types import Rendered
from fleetgate.sources.systemd import expand_exec

__all__ = ["render_unit_exec"]


def render_unit_exec(fleet: Fleet, service: Service, start: UnitExec, overrides: Mapping[str, str | None]) -> Rendered:
    """The engine's argv as systemd expands the line, its environment as the unit gives it."""
    unit, setting = start.unit, start.setting
    origins, _, _ = service_inputs(fleet, service)
    env = {name: origin.value for name, origin in origins.items()}
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    line = expand_exec(setting, env)
    engine_env = {"PATH": SYSTEMD_DEFAULT_PATH, "LANG": "C.UTF-8", **env}
    return Rendered(
        service=service.name,
        argv=(posixpath.basename(line.argv[0]), *line.argv[1:]),
        env=engine_env,
        inputs=origins,
        sourced=(),
        tests=(),
        writes=(),
        script=unit.path,
        unit=unit,
        notes=tuple(u.describe() for u in unit.unresolved),
        start=start,
    )
