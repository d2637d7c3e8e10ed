"""The hostile table runs every render for real: no answer from the suite's render cache."""

from __future__ import annotations

import pytest

from fleetgate.sandbox import CACHE_ENV


@pytest.fixture(autouse=True)
def _no_render_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
