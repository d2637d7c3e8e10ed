"""fleetgate's pytest plugin (the ``fleetgate`` entry point of ``pytest11``): the only package of fleetgate that
imports pytest.

Its hook modules are named here as strings, as pytest names its own; each reads the run through ``_state`` (the
stash keys and what is made once per run: the fleet, its renders and chains, the chosen endpoints and their hosts,
errors too) and parametrises its tests with ``_item.CheckParam``; none imports another. Which subjects a check runs
on, and running it, is ``fleetgate.runner``'s, the same for the plugin and the catalogue.

- ``_collect``: the rootdir's ``seams/`` and ``live/`` test modules, supplied from the table of ``_modules`` where they
  are not on disk (a fleet's repository needs no copy of them);
- ``_seams``: ``--fleet``, ``--incident``, the ``check`` marker, ``seam`` tests per subject, failures as operator
  messages, hermetic seams;
- ``_live``: ``--endpoint`` and its options, ``live`` tests per chosen service, the ``endpoint`` fixture, the
  per-service live summary;
- ``_host``: ``--host-url``, ``host_check`` tests per chosen service's host (testinfra);
- ``_report``: ``--check``, properties per test, waivers, JUnit under xunit2, ``--fleetgate-report``, the
  per-service summary, the replay line of a failed live check.

No hook that runs per report or at the summary, in any hook module, lets an exception escape: its body runs under
``_state.guarded`` and a bug of fleetgate's is one line under "fleetgate: reporting errors", never pytest's
INTERNALERROR.

A test module names the parameter's type as ``Seam``, ``Live`` or ``HostCheck`` (all ``CheckParam``).
"""

from __future__ import annotations

import importlib

from fleetgate.checks import load_checks
from fleetgate.plugin._missing import missing_requirement

__all__ = ["CheckParam", "HostCheck", "Live", "Seam", "fleet_path"]

HOOK_MODULES = (
    "fleetgate.plugin._collect", "fleetgate.plugin._seams", "fleetgate.plugin._live", "fleetgate.plugin._host", "fleetgate.plugin._report",
)

pytest_plugins = list(HOOK_MODULES)

try:
    # The hook modules are imported here first, with the rest of fleetgate, so that a requirement missing from
    # this Python (fleetgate found on its path, its dependencies installed elsewhere) is one line instead of
    # pytest's traceback. The live stack is not among them: it is imported with --endpoint (_state.live_stack).
    for _name in HOOK_MODULES:
        importlib.import_module(_name)
    # The seam checks too: their requirements (promql-parser for the alert rules) would otherwise fail every seam
    # module's collection, one traceback each.
    load_checks("seam")
except ModuleNotFoundError as missing:
    error = missing_requirement(missing)
    if error is None:
        raise
    raise error from None

from fleetgate.plugin._item import CheckParam, HostCheck, Live, Seam  # noqa: E402
from fleetgate.plugin._state import fleet_path  # noqa: E402
