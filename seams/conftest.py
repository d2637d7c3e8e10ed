"""seams/: offline checks over the fleet's files. Every test here is a seam (hermetic: no network)."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "seams" in item.path.parts:
            item.add_marker(pytest.mark.seam)
