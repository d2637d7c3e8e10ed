"""How real fleets start an engine, each read the way its consumer reads it, into the inputs of one service.

``systemd``: a unit's ``ExecStart=`` expanded as systemd expands it (the engine itself, or ``bash -c`` with an inline
script, which the render then runs). ``docker_run``: ``docker run``/``podman run`` lines a serve script runs, read as
the client reads them. ``quadlet``: a Quadlet ``.container``'s ``[Container]`` as Quadlet's generator turns it into a
``podman run`` line. What each format reads and ignores is listed in docs/sources.md.
"""

from __future__ import annotations

__all__: list[str] = []
