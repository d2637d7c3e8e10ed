"""Hypothesis profiles for the readers' property tests.

``ci`` (the default): a small sample on every run of the suite. ``fuzz``: at least 10 000 examples per
reader, for ``tox -e fuzz`` (``pytest tests/fuzz --hypothesis-profile=fuzz``). Neither keeps an example
database: nothing is written outside the tests' own temporary directories.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=40, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("fuzz", max_examples=10_000, **_COMMON)  # type: ignore[arg-type]
settings.load_profile("ci")
