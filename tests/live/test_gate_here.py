"""The gate in this process (``fleetgate.gate.run_gate``, what the controls, faults and proxies run) gives the verdicts
the plugin gives, check by check, and runs every check of ``live/`` in the order pytest runs them."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from fleetgate.checks import REGISTRY, load_checks

from .conftest import GATE_ORDER, Gate, GateHere
from .faults import FaultServer
from .test_faults import FAULTS


def test_the_gate_order_is_every_live_and_host_check_once() -> None:
    load_checks("live", "host")
    assert sorted(GATE_ORDER) == sorted(name for name, check in REGISTRY.items() if check.kind in ("live", "host"))
    assert GATE_ORDER[0] == "host-unit-state", "live/test_host.py runs first: pytest takes the modules by name"


# A halt the readiness probe says (one check fails, the one after it is not run), one a check says mid-run, and
# failures of two checks side by side: the plugin and the runner hold each of them alike.
@pytest.mark.parametrize("mode", ["hang", "hang-streams", "garbage"])
def test_the_plugin_gives_the_runners_verdicts(
    mode: str, gate: Callable[..., GateHere], plugin_gate: Callable[..., Gate], no_api_key: None
) -> None:
    expected = FAULTS[mode]
    selection = " or ".join(f"test_{name.removeprefix('live-').replace('-', '_')}" for name in expected)
    with FaultServer(mode) as server:
        here = gate(server.url, only=expected, live_timeout=2)
        plugin = plugin_gate(server.url, "-k", selection, "--live-timeout", "2")
    assert here.outcomes == expected, here.output
    assert plugin.outcomes == expected, plugin.output
    assert list(here.outcomes) == [name for name in GATE_ORDER if name in expected]
    for name, (word, note) in plugin.checks.items():
        # the summary's note says the same; a wait measured in seconds may differ in its last digit
        assert here.checks[name][0] == word, (name, here.output, plugin.output)
        assert _without_seconds(here.note(name)) == _without_seconds(note), (name, here.output, plugin.output)


def _without_seconds(text: str) -> str:
    return re.sub(r"\d+\.\d+ s\b", "N s", text)
