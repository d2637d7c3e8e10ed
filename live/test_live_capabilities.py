"""Capabilities: tool calls, vision, reasoning field, reasoning efforts (C.2, INC-08, INC-26, INC-72)."""

import pytest

from fleetgate.plugin import Live


@pytest.mark.check("live-tool-calls")
def test_tool_calls(live: Live) -> None:
    live.run()


@pytest.mark.check("live-vision")
def test_vision(live: Live) -> None:
    live.run()


@pytest.mark.check("live-vision-colour")
def test_vision_colour(live: Live) -> None:
    live.run()


@pytest.mark.check("live-reasoning")
def test_reasoning(live: Live) -> None:
    live.run()


@pytest.mark.check("live-reasoning-effort")
def test_reasoning_effort(live: Live) -> None:
    live.run()
