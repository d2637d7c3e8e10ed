"""How real fleets start an engine, each read the way its consumer reads it, into the inputs of one service.

``systemd``: a unit whose ``ExecStart=`` runs the engine itself (no serve script), its variables expanded as systemd
expands them. What each format reads and ignores is listed in docs/sources.md.
"""

from __future__ import annotations

__all__: list[str] = []
