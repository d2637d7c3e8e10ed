"""The suite's render cache: a session directory of this run (fleetgate.sandbox.CACHE_ENV), so that the many
pytester runs of seams/ over copies of the example fleet re-render only the services a mutation touched. Named with
this process's PID, removed at exit, and swept at the next start when a killed run left it (docs/sandbox.md)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from fleetgate.sandbox import CACHE_ENV, sweep_scratch

_PREFIX = "fleetgate-render-cache-"

if not os.environ.get(CACHE_ENV):  # xdist workers inherit the controller's
    sweep_scratch(tempfile.gettempdir(), prefix=_PREFIX)
    _made = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    os.environ[CACHE_ENV] = _made
    atexit.register(shutil.rmtree, _made, True)
