"""Capture the series a running llama-server exports on /metrics into fleetgate/engines/llama_server_metrics.json.

``python -m tools.llama_metrics URL BUILD > fleetgate/engines/llama_server_metrics.json``: the server runs with every
feature that adds series on (``--metrics``, speculative decoding after at least one drafted request: the
per-position acceptance series appears only then); the sample names are read as
``fleetgate.engines.llama_metrics.exported_series`` reads them, and stored with the build they came from.
"""

from __future__ import annotations

import json
import sys

import httpx

from fleetgate.engines.llama_metrics import exported_series


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: python -m tools.llama_metrics URL BUILD\n")
        return 2
    text = httpx.get(argv[1].rstrip("/") + "/metrics", timeout=10).text
    json.dump({"build": argv[2], "generated_from": f"GET /metrics of llama-server build {argv[2]} "
               "(the reference: --metrics, draft-simple speculative decoding, after one drafted request)",
               "series": exported_series(text)}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
