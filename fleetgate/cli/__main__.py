"""``python -m fleetgate.cli``: the ``fleetgate`` command."""

from fleetgate.cli import main

raise SystemExit(main())
