"""A mount's path names a variable its consumer defines (issue 32).

A path a container mounts is often written with a variable (``${MODELS}:/models``): it is only what the author meant
where the variable is set for the program that expands it.

- compose interpolates the file from the project's ``.env`` (and the shell of whoever runs it, which a repository
  does not hold): a variable neither sets is a blank string, with a warning ("The "MODELS" variable is not set.
  Defaulting to a blank string."). ``${MODELS}/qwen:/models`` mounts ``/qwen``; ``${MODELS}:/models`` is no valid
  volume spec at all.
- a Quadlet's ``Volume=`` is copied into the generated unit's ``ExecStart=`` (podman run ``-v``), which systemd
  expands from the unit's ``[Service] Environment=``/``EnvironmentFile=`` only: ``[Container] Environment=`` and
  ``EnvironmentFile=`` are the container's, and systemd logs "Referenced but unset environment variable evaluates to
  an empty string" (podman issue 25047).
"""

from __future__ import annotations

import re

from fleetgate.checks import NotJudged, service_seam
from fleetgate.errors import InputError
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose

__all__: list[str] = []


# systemd's expansion in command lines: $NAME and ${NAME}; $$ is a literal dollar.
_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _no_volumes(config: RenderedService) -> str | None:
    if isinstance(config.rendered.start, Compose) and config.rendered.start.read is not None:
        return None
    unit = config.rendered.unit
    if unit is not None and unit.kind == "quadlet":
        return None
    return f"{config.name} is not started by compose or a Quadlet: no volume path is interpolated"


@service_seam(
    cites=(),
    summary="every variable a compose volume or a Quadlet Volume= names is set where compose or systemd reads it",
    requires=_no_volumes,
    codes={
        "compose-unset": ("a compose `volumes:` path names a variable no `.env` of the project sets: compose mounts a "
                          "blank string in its place"),
        "quadlet-unset": ("a Quadlet `Volume=` names a variable the unit's `[Service] Environment=`/`EnvironmentFile=` "
                          "does not set (`[Container]` ones are the container's): systemd expands it to an empty string"),
    },
)
def volume_variables(config: RenderedService) -> None:
    start = config.rendered.start
    compose = start.read if isinstance(start, Compose) else None
    if compose is not None:
        for volume in compose.volume_unset:
            names = ", ".join(volume.variables)
            raise volume_variables.fail(
                config, "compose-unset",
                where=volume.where,
                observed=(f"{volume.written!r} names {names}, which no .env of the project sets: compose warns and "
                          f"reads {volume.read!r}"
                          + ("" if volume.read.startswith("/") or volume.read.startswith(".") else
                             ", which is no bind mount of a host path")),
                expected=f"{names} set in the .env beside the compose file (what `docker compose` reads on every host)",
                fix=(f"add {volume.variables[0]}=/path/on/host to the project's .env, or write the path itself; a "
                     "variable only your shell exports is not there when another user or a unit runs compose"),
            )
        return
    unit = config.rendered.unit
    assert unit is not None
    volumes = unit.all("Container", "Volume")
    referenced = [(setting, m.group(1) or m.group(2)) for setting in volumes
                  for m in _REFERENCE.finditer(setting.value) if m.group(0) != "$$"]
    if not referenced:
        return
    try:
        known = config.systemd_environment(unit)
    except InputError as error:
        raise NotJudged(f"{config.name}'s [Service] EnvironmentFile= cannot be read ({error.message}): declare it as "
                        "a file of this repository") from None
    for setting, name in referenced:
        if name in known:
            continue
        container = name in config.rendered.inputs
        raise volume_variables.fail(
            config, "quadlet-unset",
            where=setting.where,
            observed=(f"Volume={setting.value} names ${{{name}}}, which the unit's [Service] section does not set"
                      + (" ([Container] sets it, for the container only)" if container else "")
                      + ": systemd expands it to an empty string in the podman run line"),
            expected=f"{name} set by [Service] Environment= or EnvironmentFile= (what systemd expands ExecStart= from)",
            fix=f"add [Service] Environment={name}=/path/on/host (or an EnvironmentFile= there), or write the path itself",
        )
