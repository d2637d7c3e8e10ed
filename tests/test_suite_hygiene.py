"""The suite's own machinery: what one test does must not change what a later test of the worker sees."""

from __future__ import annotations

import configparser
import socket
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_httpx_still_translates_errors_after_an_in_process_run_used_it(pytester: pytest.Pytester) -> None:
    # An in-process run that is the first to open an httpx connection: the modules it imports are dropped
    # when it ends. Connection refused must still be httpx's error afterwards (the root conftest keeps
    # httpcore imported), or every later "is it down yet" loop of the worker fails on httpcore's own class.
    port = _closed_port()
    pytester.makepyfile(
        f"""
        import httpx, pytest

        def test_connect():
            with pytest.raises(httpx.ConnectError):
                httpx.get("http://127.0.0.1:{port}/", timeout=2)
        """
    )
    pytester.inline_run("-p", "no:cacheprovider").assertoutcome(passed=1)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


def test_tox_leaves_no_venv_redirect_in_the_checkout() -> None:
    """tox 4.67 and later write a ``.venv`` file at the checkout's root after a run unless told not to: the README's
    first command (``python3 -m venv .venv``) then fails there ("Unable to create directory"), and git sees a new
    file. CI runs tox on a fresh clone, where no ``.venv`` directory stops it."""
    tox = configparser.ConfigParser()
    tox.read(REPO / "tox.ini", encoding="utf-8")
    assert tox.getboolean("tox", "venv_redirect") is False
