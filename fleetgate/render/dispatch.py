"""Service -> rendered config: what the service really runs.

``find_start`` finds a service's start shape once (fleetgate.render.start), with the repository as the boundary;
``render()`` looks up the shape's own module in ``RENDERERS`` and renders it there. A compose service, a Kubernetes
container, a llama-swap model and a llama.cpp router preset's model are read as data (the readers of
fleetgate.sources); a unit whose ``ExecStart=`` is the engine is expanded as systemd expands the line, and a Quadlet
whose ``Exec=`` is the engine's arguments as Quadlet's generator and systemd write and expand it (nothing runs);
a serve script or a unit's inline ``bash -c`` runs in the sandbox with the engine stubbed
(fleetgate.render.serve_script). Every shape builds the types of fleetgate.render.types.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.fleet import Fleet, Service
from fleetgate.render.compose import render_compose
from fleetgate.render.inputs import engine_exec_start, inline_exec_start, quadlet_exec_start
from fleetgate.render.kubernetes import render_kubernetes
from fleetgate.render.llama_swap import render_swap_model
from fleetgate.render.quadlet import render_quadlet_exec
from fleetgate.render.router_preset import render_preset_model
from fleetgate.render.script import RENDER_TIMEOUT_S
from fleetgate.render.serve_script import render_script
from fleetgate.render.start import (
    Compose,
    InlineScript,
    Kubernetes,
    PresetModel,
    QuadletExec,
    ServeScript,
    Start,
    SwapModel,
    UnitExec,
)
from fleetgate.render.types import Rendered
from fleetgate.render.unit_exec import render_unit_exec
from fleetgate.sandbox import SandboxResult, SandboxSpec, run_many
from fleetgate.sandbox import run as run_sandboxed

__all__ = ["RENDERERS", "RenderRequest", "RenderSteps", "find_start", "render", "render_many"]


def find_start(fleet: Fleet, service: Service) -> Start:
    """The start shape of a service: what fleet.toml declares (a compose file, a Kubernetes manifest, a llama-swap
    config, a router preset), else what its unit's ``ExecStart=`` runs (the engine, an inline script), else a
    Quadlet whose ``Exec=`` is the engine's arguments, else its serve script."""
    if service.compose is not None:
        return Compose()
    if service.kubernetes is not None:
        return Kubernetes()
    if service.llama_swap is not None:
        return SwapModel()
    if service.models_preset is not None:
        return PresetModel()
    direct = engine_exec_start(fleet, service)
    if direct is not None:
        return UnitExec(*direct)
    inline = inline_exec_start(fleet, service)
    if inline is not None:
        return inline
    quadlet = quadlet_exec_start(fleet, service)
    return quadlet if quadlet is not None else ServeScript()


RenderSteps = Generator[tuple[SandboxSpec, Path | str], SandboxResult, Rendered]
"""A render's work: yields each sandboxed run it needs (the spec and the file a refusal names), is sent its result,
and returns the render; a shape read as data yields nothing."""

_Renderer = Callable[[Fleet, Service, Any, Mapping[str, str | None], tuple[str, ...] | None, tuple[str, ...], float],
                     RenderSteps]


def _data(read: Callable[[Fleet, Service, Any, Mapping[str, str | None]], Rendered]) -> _Renderer:
    """A shape read as data: the overrides are all it takes of the request (nothing runs, nothing is timed)."""
    def steps(fleet: Fleet, service: Service, start: Any, overrides: Mapping[str, str | None],
              _payload: tuple[str, ...] | None, _args: tuple[str, ...], _timeout: float) -> RenderSteps:
        yield from ()
        return read(fleet, service, start, overrides)
    return steps


RENDERERS: Mapping[type[Start], _Renderer] = {
    Compose: _data(render_compose),
    Kubernetes: _data(render_kubernetes),
    SwapModel: _data(render_swap_model),
    PresetModel: _data(render_preset_model),
    UnitExec: _data(render_unit_exec),
    QuadletExec: _data(render_quadlet_exec),
    InlineScript: render_script,
    ServeScript: render_script,
}
"""Each start shape's renderer: (fleet, service, shape, overrides, payload, args, timeout) -> its steps."""


def render(
    fleet: Fleet,
    service: Service,
    *,
    overrides: Mapping[str, str | None] | None = None,
    payload: tuple[str, ...] | None = None,
    args: tuple[str, ...] = (),
    timeout: float = RENDER_TIMEOUT_S,
) -> Rendered:
    """What the service starts, rendered the way its start shape is.

    ``overrides`` replaces variables (``None`` unsets one) in the service's starting environment (for a script, again
    after every file it sources); ``payload`` replaces the declared payload files; ``args`` are the script's
    positional arguments (what a unit's ``ExecStart=`` passes after it).
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
) -> RenderSteps:
    """``render``'s work, as steps: the start shape found (a refusal raised at the first step, where ``render_many``
    hands it to the one who asked) and its renderer's steps."""
    start = find_start(fleet, service)
    return (yield from RENDERERS[type(start)](fleet, service, start, overrides or {}, payload, args, timeout))
