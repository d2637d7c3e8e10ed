"""Service -> rendered config: what the service really runs.

``render()`` reads each start shape the way its consumer reads it: a compose service, a Kubernetes container, a
llama-swap model and a llama.cpp router preset's model as data (fleetgate.sources), a unit whose ``ExecStart=`` is
the engine as systemd expands the line (nothing runs). Anything else is a serve script (or a unit's inline ``bash -c``): its inputs found as
the unit gives them (fleetgate.render.inputs), it runs in the sandbox with the engine stubbed
(fleetgate.render.script), and what the stub recorded is the render. Every shape builds the types of
fleetgate.render.types.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import NotRead
from fleetgate.fleet import Fleet, Service
from fleetgate.render.inputs import (
    container_engines,
    container_lines,
    engine_exec_start,
    env_template_notes,
    inline_command,
    inline_exec_start,
    service_inputs,
)
from fleetgate.render.script import (
    RENDER_TIMEOUT_S,
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
from fleetgate.render.types import SYSTEMD_DEFAULT_PATH, Rendered, RenderRefused
from fleetgate.sandbox import SandboxResult, SandboxSpec, overrun_message, run_many
from fleetgate.sandbox import run as run_sandboxed
from fleetgate.sources.compose import render_compose
from fleetgate.sources.kubernetes import render_kubernetes
from fleetgate.sources.llama_swap import render_service as render_swap
from fleetgate.sources.router_preset import render_service as render_preset
from fleetgate.sources.systemd import expand_exec
from fleetgate.units import Setting, Unit

__all__ = ["RenderRequest", "render", "render_many"]

_READ_ONLY = re.compile(r"(?:^|: )([^:\n]+): Read-only file system$")
"""The script's last error (``last_error``'s message) when it is a write the read-only repository refused."""


def render(
    fleet: Fleet,
    service: Service,
    *,
    overrides: Mapping[str, str | None] | None = None,
    payload: tuple[str, ...] | None = None,
    args: tuple[str, ...] = (),
    timeout: float = RENDER_TIMEOUT_S,
) -> Rendered:
    """Run the serve script in the sandbox and capture what it starts.

    ``overrides`` replaces variables (``None`` unsets one) in the script's starting environment and
    again after every file the script sources; ``payload`` replaces the declared payload files;
    ``args`` are the script's positional arguments (what a unit's ``ExecStart=`` passes after it).
    """
    steps = _render_steps(fleet, service, overrides, payload, args, timeout)
    try:
        spec, what = next(steps)
        while True:
            spec, what = steps.send(run_sandboxed(spec, what=what))
    except StopIteration as done:
        rendered: Rendered = done.value
        return rendered


@dataclass(frozen=True)
class RenderRequest:
    """One render ``render_many`` makes: ``render(fleet, service, overrides=..., args=...)``."""

    service: Service
    overrides: Mapping[str, str | None] | None = None
    args: tuple[str, ...] = ()


def render_many(fleet: Fleet, requests: Sequence[RenderRequest]) -> list[Rendered | Exception]:
    """Each request rendered as ``render`` renders it, its sandboxed runs side by side in sandbox sessions
    (``fleetgate.sandbox.run_many``): the first run of every request in one batch, then the runs some of them ask
    for again (an engine path or directory the first run named). Each render in order, or what ``render`` raised."""
    results: list[Rendered | Exception | None] = [None] * len(requests)
    steps = [_render_steps(fleet, r.service, r.overrides, None, r.args, RENDER_TIMEOUT_S) for r in requests]
    pending: dict[int, tuple[SandboxSpec, Path | str]] = {}

    def advance(i: int, answer: SandboxResult | Exception | None) -> None:
        try:
            if answer is None:
                pending[i] = next(steps[i])
            elif isinstance(answer, Exception):
                pending[i] = steps[i].throw(answer)
            else:
                pending[i] = steps[i].send(answer)
        except StopIteration as done:
            results[i] = done.value
        except Exception as exc:  # handed back to the one who asked for this render, as render() raises it
            results[i] = exc

    for i in range(len(requests)):
        advance(i, None)
    while pending:
        order = list(pending)
        answers = run_many([pending.pop(i) for i in order])
        for i, answer in zip(order, answers, strict=True):
            advance(i, answer)
    return [r if r is not None else RuntimeError("no render") for r in results]


def _render_steps(
    fleet: Fleet,
    service: Service,
    overrides: Mapping[str, str | None] | None,
    payload: tuple[str, ...] | None,
    args: tuple[str, ...],
    timeout: float,
) -> Generator[tuple[SandboxSpec, Path | str], SandboxResult, Rendered]:
    """``render``'s work: yields each sandboxed run it needs (the spec and the file a refusal names), is sent its
    result, and returns the render."""
    if service.compose is not None:
        return render_compose(fleet, service, overrides or {})
    if service.kubernetes is not None:
        return render_kubernetes(fleet, service, overrides or {})
    if service.llama_swap is not None:
        return render_swap(fleet, service, overrides or {})
    if service.models_preset is not None:
        return render_preset(fleet, service, overrides or {})
    direct = engine_exec_start(fleet, service)
    if direct is not None:
        return _render_exec_start(fleet, service, direct, overrides or {})
    origins, script, unit = service_inputs(fleet, service)
    notes = [u.describe() for u in unit.unresolved] if unit is not None else []
    notes += env_template_notes(fleet, unit)
    inline = inline_exec_start(fleet, service)
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
            notes=tuple(notes + container_notes), container=run,
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
    )


def _render_exec_start(fleet: Fleet, service: Service, direct: tuple[Unit, Setting],
                       overrides: Mapping[str, str | None]) -> Rendered:
    """A unit whose ``ExecStart=`` is the engine: the argv is the line as systemd expands it (fleetgate.sources.systemd);
    nothing runs, so there is nothing to sandbox."""
    unit, setting = direct
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
    )
