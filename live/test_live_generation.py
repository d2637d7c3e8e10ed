"""Generation: a real completion, a well-formed stream, greedy determinism (C-L-3, C-PF-1, C-SP-6)."""

import pytest

from fleetgate.plugin import Live


@pytest.mark.check("live-chat")
def test_chat(live: Live) -> None:
    live.run()


@pytest.mark.check("live-stream")
def test_stream(live: Live) -> None:
    live.run()


@pytest.mark.check("live-determinism")
def test_determinism(live: Live) -> None:
    live.run()
