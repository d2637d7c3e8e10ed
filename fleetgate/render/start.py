"""The start shapes: how a service's engine is started, one small type each, found once per service before it is
rendered (``fleetgate.render.dispatch.find_start``, with the repository as the boundary) and kept on its render
(``Rendered.start``) with what the shape's reader read.

- ``UnitExec``: a unit whose ``ExecStart=`` is the engine itself, expanded as systemd expands it (nothing runs);
- ``InlineScript``: a unit whose ``ExecStart=`` runs ``bash -c '...'``, run in the sandbox;
- ``ServeScript``: a serve script (the unit's, or the one fleet.toml names), run in the sandbox;
- ``Compose``, ``Kubernetes``: a compose service, a Kubernetes container, read as data;
- ``QuadletExec``: a Podman Quadlet ``.container`` whose ``Exec=`` is the arguments of the engine its image (or its
  ``Entrypoint=``) starts, read as data as Quadlet's generator and systemd read it;
- ``SwapModel``, ``PresetModel``: a model of a llama-swap config, of a llama.cpp router preset, read as data.

A script that starts the engine through ``docker run``/``podman run`` keeps the line it ran (``container``), and a
serve script a Quadlet runs keeps the Quadlet's ``[Container]`` (``quadlet``); ``container_run`` and ``quadlet_of``
ask any shape for them (``QuadletExec``'s ``[Container]`` included). ``Rendered`` keeps no field per shape: its
readers match on ``start``'s type (tests/test_rendered_start.py).
Each shape is rendered by its own module of this package (the table is ``fleetgate.render.dispatch.RENDERERS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetgate.sources.compose import ComposeService
    from fleetgate.sources.docker_run import ContainerRun
    from fleetgate.sources.kubernetes import KubernetesContainer
    from fleetgate.sources.quadlet import QuadletContainer
    from fleetgate.units import Setting, Unit

__all__ = ["Compose", "InlineScript", "Kubernetes", "PresetModel", "QuadletExec", "ServeScript", "Start", "SwapModel",
           "UnitExec", "container_run", "quadlet_of"]


@dataclass(frozen=True)
class UnitExec:
    """A unit whose ``ExecStart=`` runs the engine itself."""

    unit: Unit
    setting: Setting


@dataclass(frozen=True)
class InlineScript:
    """A unit whose ``ExecStart=`` runs ``bash -c '...'`` (or ``sh -c``, ``/usr/bin/env bash -c``)."""

    unit: Unit
    setting: Setting
    container: ContainerRun | None = None
    """The ``docker run``/``podman run`` line the script ran to start the engine, once rendered."""


@dataclass(frozen=True)
class ServeScript:
    """A serve script: the unit's ``ExecStart=`` script, or fleet.toml's ``serve_script``."""

    container: ContainerRun | None = None
    """The ``docker run``/``podman run`` line the script ran to start the engine, once rendered."""
    quadlet: QuadletContainer | None = None
    """The ``[Container]`` section of the Quadlet whose ``Exec=`` runs the script in its container, once rendered
    (its devices, ports, user: the container's, whatever the script does inside it)."""


@dataclass(frozen=True)
class Compose:
    """A compose service (fleet.toml's ``compose``)."""

    read: ComposeService | None = None
    """The service as compose reads it, once rendered (ports, mounts, GPUs)."""


@dataclass(frozen=True)
class Kubernetes:
    """A container of a Kubernetes workload manifest (fleet.toml's ``kubernetes``)."""

    read: KubernetesContainer | None = None
    """The container as the cluster reads it, once rendered (its ports, Services, volumes, GPUs)."""


@dataclass(frozen=True)
class QuadletExec:
    """A Quadlet ``.container`` (fleet.toml's ``unit``, no serve script) whose ``Exec=`` is the engine's arguments."""

    unit: Unit
    read: QuadletContainer | None = None
    """The ``[Container]`` section as the generator reads it, once rendered (image, ports, volumes, devices, user)."""


@dataclass(frozen=True)
class SwapModel:
    """A model of a llama-swap config (fleet.toml's ``llama_swap``)."""

    upstream_port: int | None = None
    """Where llama-swap forwards to (its ``proxy:``), once rendered."""


@dataclass(frozen=True)
class PresetModel:
    """A model of a llama.cpp router preset (fleet.toml's ``models_preset``)."""


Start = UnitExec | InlineScript | ServeScript | Compose | Kubernetes | QuadletExec | SwapModel | PresetModel


# Two questions span shapes and are asked by several checks: each is answered here once, so that no reader (and no
# property of ``Rendered``) repeats which shapes carry the record.

def container_run(start: Start) -> ContainerRun | None:
    """The ``docker run``/``podman run`` line a script (a serve script, a ``bash -c``) ran to start the engine."""
    match start:
        case ServeScript(container=run) | InlineScript(container=run):
            return run
    return None


def quadlet_of(start: Start) -> QuadletContainer | None:
    """The Quadlet ``[Container]`` the engine runs in, however its ``Exec=`` starts it (the engine's arguments, or a
    serve script the container runs): what podman gives the container (devices, ports, network, user)."""
    match start:
        case QuadletExec(read=read) | ServeScript(quadlet=read):
            return read
    return None
