"""A compose service (``Compose``) rendered: the container's argv and environment as compose reads them; nothing runs."""

from __future__ import annotations

from collections.abc import Mapping

from fleetgate.fleet import Fleet, Service
from fleetgate.render.start import Compose
from fleetgate.render.types import Rendered
from fleetgate.sources.compose import read_compose

__all__ = ["render_compose"]


def render_compose(fleet: Fleet, service: Service, start: Compose, overrides: Mapping[str, str | None]) -> Rendered:
    """A compose service as a rendered config: the container's argv and environment; nothing runs."""
    read = read_compose(fleet, service, overrides=overrides)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           **{name: origin.value for name, origin in read.env.items()}}
    return Rendered(service=service.name, argv=read.argv, env=env, inputs={**read.project, **read.env}, sourced=(), tests=(),
                    writes=(), script=read.path, unit=None, start=Compose(read))
