"""A container of a Kubernetes workload (``Kubernetes``) rendered: its argv and environment as the cluster reads
them; nothing runs."""

from __future__ import annotations

from collections.abc import Mapping

from fleetgate.fleet import Fleet, Service
from fleetgate.render.start import Kubernetes
from fleetgate.render.types import Rendered
from fleetgate.sources.kubernetes import read_kubernetes

__all__ = ["render_kubernetes"]


def render_kubernetes(fleet: Fleet, service: Service, start: Kubernetes,
                      overrides: Mapping[str, str | None]) -> Rendered:
    """A Kubernetes container as a rendered config: its argv and environment; nothing runs."""
    read = read_kubernetes(fleet, service, overrides=overrides)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           **{name: origin.value for name, origin in read.env.items()}}
    return Rendered(service=service.name, argv=read.argv, env=env, inputs=dict(read.env), sourced=(), tests=(),
                    writes=(), script=read.path, unit=None, notes=read.notes, start=Kubernetes(read))
