"""A Quadlet whose ``Exec=`` is the engine's arguments (``QuadletExec``) rendered: the container's process as Quadlet's
generator writes the ``podman run`` line and systemd expands it; nothing runs.

The process is the image's entrypoint (``fleetgate.sources.docker_run.image_process``, the one compose reads too) or
``Entrypoint=``, followed by the ``Exec=`` words. Those words are expanded as systemd expands the generated
``ExecStart=`` (``fleetgate.sources.systemd.expand_exec``), with the ``[Service]`` environment only: a variable that
only ``[Container]`` ``Environment=`` sets is the container's, and ``${VAR}`` in ``Exec=`` is empty (named in the
render's notes). The engine's environment is the image's, then ``[Container]`` ``EnvironmentFile=``, then
``Environment=``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from fleetgate.errors import InputError, NotRead
from fleetgate.fleet import Fleet, Service
from fleetgate.render.inputs import MAX_ARG_STRLEN, quadlet_environment, unit_environment
from fleetgate.render.origins import installed_path
from fleetgate.render.start import QuadletExec
from fleetgate.render.types import Origin, Rendered
from fleetgate.sources.docker_run import ENGINE_IMAGES, NotServing, engine_of_image, image_process, split_image
from fleetgate.sources.quadlet import read_quadlet
from fleetgate.sources.systemd import expand_exec
from fleetgate.units import Setting

__all__ = ["render_quadlet_exec"]

_CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _apply(values: dict[str, str], overrides: Mapping[str, str | None]) -> dict[str, str]:
    for name, value in overrides.items():
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
    return values


def render_quadlet_exec(fleet: Fleet, service: Service, start: QuadletExec,
                        overrides: Mapping[str, str | None]) -> Rendered:
    """The engine's argv and environment in the container the Quadlet starts."""
    unit = start.unit
    read = read_quadlet(unit, installed_path(fleet, unit.path))
    container = quadlet_environment(fleet, unit)
    manager = unit_environment(fleet, service, unit, "Service")
    manager_env = _apply({name: o.value for name, o in manager.items()}, overrides)
    notes = [u.describe() for u in unit.unresolved]
    words: list[str] = []
    setting = read.exec_setting
    if setting is not None:
        # The generator keeps `$` and `%` as written: systemd expands them on the generated ExecStart= line, whose
        # first word is podman (never substituted), so every Exec= word is.
        line = expand_exec(Setting(setting.section, setting.key, f"podman {setting.value}", setting.path, setting.line),
                           manager_env)
        words = list(line.argv[1:])
        for name in line.unset:
            if name in container:
                notes.append(f"{setting.where}: Exec= names ${name}, which only [Container] Environment= or "
                             f"EnvironmentFile= sets ({container[name].where}): that is the container's environment, "
                             "which systemd never sees, so the word expands to nothing; set it in [Service] "
                             "Environment= for Exec= to see it")
    where = setting if setting is not None else None
    if read.image is None and read.entrypoint is None:
        raise InputError(unit.path, None, "no Image= in [Container]: Quadlet's generator refuses the file; expected "
                         "Image= naming the engine's image")
    if read.entrypoint is not None:
        process: list[str] | None = [*read.entrypoint, *words]
    else:
        repo, tag = split_image(read.image)
        try:
            process = image_process(repo, tag, words)
        except NotServing as exc:
            raise InputError(unit.path, where.line if where else None,
                             f"Exec=: {exc}; expected Exec=--server ..., got {words[:1] or 'no Exec='}") from None
    if process is None or not process or posixpath.basename(process[0]) != service.binary:
        runs = (f"Exec= hands its words to the entrypoint of image {read.image}, which fleetgate cannot know offline"
                if process is None else f"the container runs {' '.join(process[:2]) or 'nothing'}, not {service.binary}")
        raise NotRead(unit.path, where.line if where else None,
                      f"not judged: {runs}: name the engine with "
                      f"Entrypoint=/path/to/{service.binary} in [Container] (podman run --entrypoint), or move the "
                      "command line into a script the Quadlet runs through a Volume= and declare it as serve_script")
    for index, word in enumerate(process):
        if len(word.encode("utf-8", "surrogateescape")) >= MAX_ARG_STRLEN:
            raise InputError(unit.path, where.line if where else None,
                             f"Exec=: argv[{index}] ({word[:40]!r}...) is more than {MAX_ARG_STRLEN} bytes once systemd "
                             "has expanded it; expected a value Linux can pass to a process (128 KiB at most)")
    origins: dict[str, Origin] = {}
    engine = engine_of_image(read.image) if read.image is not None else None
    if engine is not None:
        for name, value in ENGINE_IMAGES[engine][1].items():
            origins[name] = Origin(name, value, read.image_where, "Image=")
    origins.update(container)
    env = _apply({"PATH": _CONTAINER_PATH, **{name: o.value for name, o in origins.items()}}, overrides)
    return Rendered(
        service=service.name,
        argv=(posixpath.basename(process[0]), *process[1:]),
        env=env,
        inputs={**manager, **origins},
        sourced=(),
        tests=(),
        writes=(),
        script=unit.path,
        unit=unit,
        notes=tuple(notes),
        start=QuadletExec(unit, read),
    )
