"""Transcripts (issue 34): every live check's requests, answers and stream events are kept beside the fleetgate report,
with a curl per request, and no secret reaches any output of the run -- the gate's own key, a key on the engine's
command line it was never given, and a token in its environment.

The real reference llama-server is started with ``--api-key K1,K2`` (llama-server takes a comma-separated list): the
gate is given K1 (``$FLEETGATE_API_KEY``), K2 it never sees but on the engine's command line, which
host-process-argv shows; ``HF_TOKEN`` holds a third in the gate's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import pytest

from fleetgate.reference import ReferenceServer, launch, on_free_port
from fleetgate.report import report_schema
from tests.secrets_used import SECRETS

from .conftest import Gate, declared_argv, expected_outcomes

GIVEN = SECRETS["TRANSCRIPT_GIVEN"]
NEVER_GIVEN = SECRETS["TRANSCRIPT_NEVER_GIVEN"]
ENVIRONMENT = SECRETS["TRANSCRIPT_ENVIRONMENT"]


@pytest.fixture
def keyed_reference(engine: None, declared_home: Path, tmp_path: Path) -> Iterator[ReferenceServer]:
    def start(port: int) -> ReferenceServer:
        argv = [*declared_argv(declared_home, port, "shipped"), "--api-key", f"{GIVEN},{NEVER_GIVEN}"]
        return launch(argv, log=tmp_path / "llama-server.log", port=port)

    with on_free_port(start) as server:
        yield server


def test_every_live_check_keeps_its_transcript_and_no_key_is_kept_anywhere(
    keyed_reference: ReferenceServer, plugin_gate: Callable[..., Gate], pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETGATE_API_KEY", GIVEN)
    monkeypatch.setenv("HF_TOKEN", ENVIRONMENT)
    report = pytester.path / "out" / "gate.json"
    gate = plugin_gate(keyed_reference.url, f"--fleetgate-report={report}", f"--report-log={pytester.path / 'run.jsonl'}")
    # Every check as on the reference, but the argv: the keys are words the files do not render.
    assert gate.outcomes == expected_outcomes({"host-process-argv": "host-process-argv/argv-differs"}), gate.output
    assert "not rendered: --api-key '***'" in gate.output or "not rendered: --api-key ***" in gate.output, gate.output

    document = json.loads(report.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    checks = {c["check"]: c for c in document["services"]["reference"]["checks"]}
    kept = {name: c["transcript"] for name, c in checks.items() if "transcript" in c}
    # every live check that ran made requests and kept them, but live-health, which says what the readiness probe
    # found: the probe's requests are in the transcript of the first live check to run (live-drafter); no host check
    # (it asks the host, not the endpoint)
    ran = {name for name, c in checks.items() if name.startswith("live-") and c["outcome"] != "skipped"}
    assert set(kept) == ran - {"live-health"}, (sorted(kept), sorted(ran))
    probe = json.loads((report.parent / kept["live-drafter"]).read_text(encoding="utf-8"))["exchanges"]
    assert [(e["request"]["method"], e["request"]["url"].rsplit("/", 2)[-1]) for e in probe[:3]] == [
        ("GET", "health"), ("GET", "models"), ("POST", "completions")]
    for name, relative in kept.items():
        assert relative == f"gate-transcripts/reference/{name}.json"
        transcript = json.loads((report.parent / relative).read_text(encoding="utf-8"))
        assert (transcript["service"], transcript["check"], transcript["outcome"]) == ("reference", name, "passed")
        assert transcript["exchanges"], name
        for exchange in transcript["exchanges"]:
            assert exchange["request"]["headers"]["Authorization"] == "Bearer $FLEETGATE_API_KEY"
            assert '-H "Authorization: Bearer $FLEETGATE_API_KEY"' in exchange["replay"]
            assert ("stream" if exchange["request"]["stream"] else "response") in exchange, exchange
    # a stream is kept event by event, with the second each came at, and its replay streams (-N)
    stream = json.loads((report.parent / kept["live-stream"]).read_text(encoding="utf-8"))
    first = stream["exchanges"][-2]
    assert first["stream"]["events"][-1] == "[DONE]" and first["stream"]["done"] is True
    assert len(first["stream"]["times_s"]) == len(first["stream"]["events"])
    assert first["replay"].startswith("curl -sS -N --max-time ")
    # the replay asks the same question again, the key from the environment
    chat = json.loads((report.parent / kept["live-chat"]).read_text(encoding="utf-8"))
    asked = chat["exchanges"][0]  # 16 tokens with ignore_eos (the last is the grammar-bound one, without max_tokens)
    replay = asked["replay"]
    done = subprocess.run(["bash", "-c", replay], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "FLEETGATE_API_KEY": GIVEN})
    assert json.loads(done.stdout)["usage"]["completion_tokens"] == asked["request"]["body"]["max_tokens"] == 16

    written = [gate.output, *(p.read_text(encoding="utf-8") for p in pytester.path.rglob("*")
                              if p.is_file() and p.suffix in (".json", ".xml", ".jsonl"))]
    assert len(written) >= len(kept) + 4  # output, report, JUnit, JSON lines, every transcript
    for key in (GIVEN, NEVER_GIVEN, ENVIRONMENT):
        assert not [text[:80] for text in written if key in text], key
