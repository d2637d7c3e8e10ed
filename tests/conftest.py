"""The suite's own setup: waivers are judged on a fixed day, and no test report holds a secret.

The example fleet waives engine-auth for its home LAN until a date (fixtures/fleet/fleet.toml, [[waivers]]); judged
on the calendar's today, every table that holds the example fleet would change the day after. The suite judges
waivers on the day the tables were written; tests/test_reports.py rehearses an expiry by setting the day itself.
"""

from __future__ import annotations

import os

import pytest

from tests.secret_sweep import install

os.environ.setdefault("FLEETGATE_TODAY", "2026-12-07")


def pytest_configure(config: pytest.Config) -> None:
    # the secret sweep's plugin (tests/secret_sweep.py): every test report's captured output held to no secret
    install(config)
