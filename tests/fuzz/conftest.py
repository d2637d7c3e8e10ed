"""Hypothesis profiles for the readers' property tests.

``ci`` (the default): a small sample on every run of the suite. ``fuzz``: at least 10 000 examples per
reader, for ``tox -e fuzz`` (``pytest tests/fuzz --hypothesis-profile=fuzz``). Neither keeps an example
database, and Hypothesis's own directory (its constants and Unicode caches, ``./.hypothesis`` by default: the
checkout) is a temporary one of the session's: nothing is written outside the tests' own temporary directories.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, configuration, settings

# Before the test modules are imported: Hypothesis writes its constants cache while they are collected.
_HOME = tempfile.mkdtemp(prefix="fleetgate-hypothesis-")
configuration.set_hypothesis_home_dir(_HOME)

_COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=40, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("fuzz", max_examples=10_000, **_COMMON)  # type: ignore[arg-type]
settings.load_profile("ci")


def pytest_unconfigure() -> None:
    configuration.set_hypothesis_home_dir(None)
    shutil.rmtree(_HOME, ignore_errors=True)
