"""The suite's own setup: waivers are judged on a fixed day.

The example fleet waives engine-auth for its home LAN until a date (fixtures/fleet/fleet.toml, [[waivers]]); judged
on the calendar's today, every table that holds the example fleet would change the day after. The suite judges
waivers on the day the tables were written; tests/test_reports.py rehearses an expiry by setting the day itself.
"""

from __future__ import annotations

import os

os.environ.setdefault("FLEETGATE_TODAY", "2026-12-07")
