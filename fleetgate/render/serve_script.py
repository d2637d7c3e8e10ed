"""A serve script (``ServeScript``) or a unit's inline ``bash -c`` (``InlineScript``) rendered: its inputs found as
the unit gives them (fleetgate.render.inputs), it runs in the sandbox with the engine stubbed
(fleetgate.render.script), and what the stub recorded is the render. A script that starts the engine through
``docker run``/``podman run`` keeps that line (``start.container``)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Generator, Mapping
from dataclasses import replace
from pathlib import Path

from fleetgate.errors import NotRead
from fleetgate.fleet import Fleet, Service
from fleetgate.render.inputs import (
    container_engines,
    container_lines,
    env_template_notes,
    inline_command,
    service_inputs,
)
from fleetgate.render.origins import installed_path
from fleetgate.render.script import (
    engine_environment,
    inline_records,
    last_error,
    last_traced_line,
    missing_directories,
    missing_engine_paths,
    preflight_notes,
    read_invocations,
    read_sourced,
    read_tests,
    read_writes,
    require_bash,
    require_program_name,
    script_as_run,
    script_spec,
    traced_engine_paths,
    vllm_module_notes,
)
from fleetgate.render.start import InlineScript, ServeScript
from fleetgate.render.types import Rendered, RenderRefused
from fleetgate.sandbox import SandboxResult, SandboxSpec, overrun_message
from fleetgate.sources.quadlet import read_quadlet

__all__ = ["render_script"]

_READ_ONLY = re.compile(r"(?:^|: )([^:\n]+): Read-only file system$")
"""The script's last error (``last_error``'s message) when it is a write the read-only repository refused."""


def render_script(
    fleet: Fleet,
    service: Service,
    start: ServeScript | InlineScript,
    overrides: Mapping[str, str | None],
    payload: tuple[str, ...] | None,
    args: tuple[str, ...],
    timeout: float,
) -> Generator[tuple[SandboxSpec, Path | str], SandboxResult, Rendered]:
    """Run the serve script (or the unit's inline script) in the sandbox and capture what it starts: yields each
    sandboxed run (the spec and the file a refusal names) and is sent its result, so that ``render_many`` can make
    many renders' runs side by side."""
    origins, script, unit = service_inputs(fleet, service)
    if isinstance(start, ServeScript) and unit is not None and unit.kind == "quadlet":
        start = replace(start, quadlet=read_quadlet(unit, installed_path(fleet, unit.path)))
    notes = [u.describe() for u in unit.unresolved] if unit is not None else []
    notes += env_template_notes(fleet, unit)
    inline = start if isinstance(start, InlineScript) else None
    command: list[str] | None = None
    dollar0: str | None = None
    if inline is not None:
        command, origins, dollar0, shell = inline_command(inline, origins, overrides or {})
        if shell == "sh":
            notes.append(f"{inline.setting.where}: ExecStart= runs sh -c; the inline script is rendered by bash, not by "
                         "the host's /bin/sh (a bashism the host's sh refuses renders here)")
    else:
        require_bash(script)
    require_program_name(fleet, service)
    payload = service.payload if payload is None else payload
    engine_paths: list[str] = []
    placeholder_dirs: list[str] = []
    run_as = script_as_run(fleet, script, unit)
    # An engine started by an absolute path the sandbox does not have yet, or a directory the script cd's into
    # that the repository does not hold: made inside the sandbox (a stub, an empty directory) and run again.
    for _ in range(4):
        result = yield (script_spec(fleet, service, script, origins, dict(overrides or {}), payload, timeout,
                                    engine_paths, args, command=command, placeholder_dirs=placeholder_dirs,
                                    run_as=run_as), script)
        invocations = read_invocations(result.files)
        containers = container_engines(fleet, service, result.files)
        if invocations or containers:
            break
        missing_dirs = [d for d in missing_directories(result.stderr) if d not in placeholder_dirs]
        missing = [p for p in missing_engine_paths(result.stderr, service.binary, placeholder_dirs) if p not in engine_paths]
        if not missing and not missing_dirs:
            # A script that sends its stderr to a log (`nohup ... > log 2>&1 &`) names the path only in its trace.
            missing = [p for p in traced_engine_paths(result.files.get("trace", b""), str(run_as), service.binary,
                                                      [posixpath.dirname(str(run_as)), *placeholder_dirs])
                       if p not in engine_paths]
        if not missing and not missing_dirs:
            break
        engine_paths += missing
        placeholder_dirs += missing_dirs
    if inline is not None:
        result = inline_records(result, inline.setting)
    # bash traced the script by the path it was run by; a failure names the repository's file.
    trace = result.files.get("trace", b"").replace(f"+{run_as}:".encode(), f"+{script}:".encode())
    sourced = tuple(read_sourced(result.files))

    def locate(stderr: str) -> tuple[int | None, str]:
        if inline is not None:
            line, message = last_error(stderr, Path(dollar0 or "bash"))
            return (inline.setting.line if line is not None else None), message
        return last_error(stderr, run_as)

    if not invocations and not containers and result.overrun is not None:
        raise RenderRefused(script, last_traced_line(trace, script),
                            f"{service.binary} was not started: {overrun_message(result.overrun, 'the serve script')}",
                            result.stderr, origins, sourced, tuple(read_tests(result.files)))
    if result.timed_out:
        raise RenderRefused(script, last_traced_line(trace, script),
                            f"the serve script did not exec {service.binary} within {timeout:g} s (a wait loop or a prompt?)",
                            "", origins, sourced)
    notes += [f"{path}: the repository does not hold this directory, which the script enters (cd); rendered in an "
              "empty placeholder of it" for path in placeholder_dirs]
    notes += [f"{path}: the engine is started by this path, which the repository does not hold; stubbed there"
              for path in engine_paths]
    notes += preflight_notes(result.files) + vllm_module_notes(result.files)
    if not invocations and containers:
        run, argv, engine_env, container_notes = containers[-1]
        return Rendered(
            service=service.name, argv=argv, env=engine_env, inputs=origins, sourced=sourced,
            tests=tuple(read_tests(result.files)), writes=tuple(read_writes(result.files)), script=script, unit=unit,
            extra_invocations=tuple(c[1] for c in containers[:-1]), trace=trace.decode("utf-8", "replace"),
            notes=tuple(notes + container_notes), start=replace(start, container=run),
        )
    if not invocations:
        stderr = result.stderr
        line, message = locate(stderr)
        line = line or last_traced_line(trace, script)
        clients = container_lines(result.files)
        if clients and not message:
            message = f"{clients[-1]} runs no image fleetgate knows as {service.binary}'s"
        read_only = _READ_ONLY.search(message or "")
        if read_only is not None:
            # The host lets the script write beside itself (a log after `cd "$(dirname "$0")"`); the render keeps the
            # repository read-only, so what the script would start after it is unseen: a limit of the render, not a
            # finding of the fleet.
            raise NotRead(script, line, f"not judged: the script writes {read_only.group(1)} inside the repository, "
                          "which fleetgate's render keeps read-only (the host lets it), so the engine it starts after "
                          "that is not seen; write the file outside the repository (a log under /var/log or /tmp) to "
                          "have it judged")
        raise RenderRefused(
            script, line,
            f"the serve script exited {result.returncode} without starting {service.binary}"
            + (f": {message}" if message else ""),
            stderr, origins, sourced, tuple(read_tests(result.files)),
        )
    argv, engine_env = invocations[-1]
    return Rendered(
        service=service.name,
        argv=argv,
        env=engine_environment(engine_env),
        inputs=origins,
        sourced=sourced,
        tests=tuple(read_tests(result.files)),
        writes=tuple(read_writes(result.files)),
        script=script,
        unit=unit,
        extra_invocations=tuple(a for a, _ in invocations[:-1]),
        trace=trace.decode("utf-8", "replace"),
        notes=tuple(notes),
        start=start,
    )
