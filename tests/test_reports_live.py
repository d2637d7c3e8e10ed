"""Live reports: every live failure carries a curl that repeats its request, progress while a check waits.

The faults come from the fault server (a fake, for faults only): one that answers every request with
the Authorization header it received, and one that hangs. The API key in the environment is a fake.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from fleetgate.report import report_schema
from tests.secrets_used import SECRETS

from .live.faults import FaultServer

REPO = Path(__file__).resolve().parents[1]
LIVE = REPO / "live"
XUNIT2 = REPO / "tests" / "schemas" / "xunit2.xsd"
FAKE_KEY = SECRETS["REPORT_LIVE_KEY"]
REPLAY = re.compile(r"^\s+replay:\s+(curl .*)$")


def test_a_live_failure_carries_a_curl_that_repeats_it_without_the_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETGATE_API_KEY", FAKE_KEY)
    junit, jsonl, report = (pytester.path / n for n in ("junit.xml", "run.jsonl", "fleetgate.json"))
    with FaultServer("garbage") as server:
        result = pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", "reference", "--base-url", server.url, "-p", "no:cacheprovider",
            "-k", "test_chat or test_alias", "--live-timeout", "5", "-n", "2",
            f"--junitxml={junit}", f"--report-log={jsonl}", f"--fleetgate-report={report}", timeout=120,
        )
        result.assert_outcomes(failed=2)
        replays = [m.group(1) for line in result.stdout.lines if (m := REPLAY.match(line))]
        auth = '-H "Authorization: Bearer $FLEETGATE_API_KEY"'
        chat = [c for c in replays if "/v1/chat/completions" in c]
        assert len(replays) == 2 and len(chat) == 1, replays
        assert chat[0].startswith(f"curl -sS --max-time 5 -X POST {server.url}/v1/chat/completions {auth} "
                                  "-H 'Content-Type: application/json' -d '{")
        # Pasted into a shell, each asks the same question and gets the same answer (the garbage).
        for command in replays:
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, check=False,
                                  env={**os.environ, "FLEETGATE_API_KEY": FAKE_KEY})
            assert done.stdout == "<html>this is not JSON{", (command, done.stdout, done.stderr)
        body = json.loads(subprocess.run(["bash", "-c", f"printf %s {chat[0].split(' -d ', 1)[1]}"], capture_output=True,
                                         text=True, check=True).stdout)
        assert body["messages"] and isinstance(body["max_tokens"], int)

    xmlschema.XMLSchema(str(XUNIT2)).validate(str(junit))
    props = {p.get("name"): json.loads(p.get("value", "")) for p in ET.parse(junit).getroot().iter("property")
             if p.get("name", "").startswith("fleetgate[")}
    assert {(v["check"], v["code"]) for v in props.values()} == {("live-alias", "live-alias/not-json"),
                                                                  ("live-chat", "live-chat/not-json")}
    for value in props.values():
        assert value["service"] == "reference"
        assert value["replay"] in replays
        assert isinstance(value["measured"], dict)
    document = json.loads(report.read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(document)
    reference = document["services"]["reference"]
    assert sorted((c["check"], c["outcome"], c["code"]) for c in reference["checks"]) == [
        ("live-alias", "failed", "live-alias/not-json"), ("live-chat", "failed", "live-chat/not-json")]
    assert reference["live"]["requests"] == sum(int(v["requests"]) for v in props.values())
    # each check's transcript (written by the xdist worker that ran it) beside the report: the garbage kept as sent
    transcripts = sorted(p.relative_to(pytester.path).as_posix() for p in pytester.path.glob("fleetgate-transcripts/**/*.json"))
    assert transcripts == ["fleetgate-transcripts/reference/live-alias.json", "fleetgate-transcripts/reference/live-chat.json"]
    assert sorted(c["transcript"] for c in reference["checks"]) == transcripts
    chat_transcript = json.loads((pytester.path / transcripts[1]).read_text())
    assert (chat_transcript["outcome"], chat_transcript["code"]) == ("failed", "live-chat/not-json")
    last = chat_transcript["exchanges"][-1]
    assert last["replay"] == chat[0]
    assert last["response"] == {"status": 200, "elapsed_s": last["response"]["elapsed_s"], "body": "<html>this is not JSON{",
                                "retries": 0}
    kept = [p.read_text() for p in pytester.path.glob("fleetgate-transcripts/**/*.json")]
    for text in (junit.read_text(), jsonl.read_text(), report.read_text(), result.stdout.str(), result.stderr.str(), *kept):
        assert FAKE_KEY not in text


def test_the_replay_sends_the_key_from_the_environment(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_API_KEY", FAKE_KEY)
    with FaultServer("echo-auth") as server:
        result = pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", "reference", "--base-url", server.url, "-p", "no:cacheprovider",
            "-k", "test_health", "--live-timeout", "5", f"--fleetgate-report={pytester.path / 'r.json'}", timeout=120,
        )
        result.assert_outcomes(failed=1)
        replays = [m.group(1) for line in result.stdout.lines if (m := REPLAY.match(line))]
        assert replays == [f'curl -sS --max-time 5 {server.url}/health -H "Authorization: Bearer $FLEETGATE_API_KEY"']
        done = subprocess.run(["bash", "-c", replays[0]], capture_output=True, text=True, timeout=30, check=False,
                              env={**os.environ, "FLEETGATE_API_KEY": FAKE_KEY})
        assert json.loads(done.stdout) == {"error": {"message": f"rejected credentials Bearer {FAKE_KEY}"}}
    assert FAKE_KEY not in result.stdout.str() + result.stderr.str()
    # the server echoed the key in its answer: the transcript keeps the answer, not the key
    health = json.loads((pytester.path / "r-transcripts" / "reference" / "live-health.json").read_text())
    assert health["exchanges"][0]["response"]["body"] == {"error": {"message": "rejected credentials Bearer ***"}}
    assert FAKE_KEY not in (pytester.path / "r-transcripts" / "reference" / "live-health.json").read_text()


@pytest.mark.parametrize("capture", [[], ["-s"]], ids=["captured", "-s"])
def test_a_waiting_live_check_shows_progress(pytester: pytest.Pytester, capture: list[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETGATE_API_KEY", raising=False)
    with FaultServer("hang") as server:
        result = pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", "reference", "--base-url", server.url, "-p", "no:cacheprovider",
            "-k", "test_health", "--live-timeout", "2", "--live-progress", "0.5", *capture, timeout=60,
        )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"  ... test_health[[]reference[]]: waiting * s, 1 request(s) so far (GET {server.url}/health)"])
    result.stdout.fnmatch_lines([f"  replay:   curl -sS --max-time * {server.url}/health"])


class _Client:
    """A client with the live client's public surface, answering without a network."""

    base_url = "http://127.0.0.1:9"

    def url(self, path: str) -> str:
        return self.base_url + path

    def get(self, path: str, *, timeout: float | None = None) -> str:
        return f"GET {path}"

    def post(self, path: str, body: dict[str, object], *, timeout: float | None = None) -> str:
        return f"POST {path}"

    def stream(self, path: str, body: dict[str, object], *, timeout: float | None = None) -> str:
        return f"STREAM {path}"


def test_the_request_log_records_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgate.replay import RequestLog, curl

    client = _Client()
    log = RequestLog()
    with log.watching(client):
        assert client.get("/health", timeout=3) == "GET /health"
        assert client.stream("/v1/chat/completions", {"stream": True, "messages": ["it's"]}) == "STREAM /v1/chat/completions"
    assert "get" not in vars(client) and client.post("/x", {}) == "POST /x"
    assert len(log.requests) == 2  # the post after the block is not recorded
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    assert curl(log.requests[0], key_env="NO_SUCH_KEY_VAR") == "curl -sS --max-time 3 http://127.0.0.1:9/health"
    monkeypatch.setenv("MY_KEY", SECRETS["CURL_KEY"])
    streamed = curl(log.requests[1], key_env="MY_KEY", timeout=60)
    assert streamed == ("curl -sS -N --max-time 60 -X POST http://127.0.0.1:9/v1/chat/completions "
                        "-H \"Authorization: Bearer $MY_KEY\" -H 'Content-Type: application/json' "
                        "-d '{\"stream\":true,\"messages\":[\"it'\"'\"'s\"]}'")
    # The shell gives the body back exactly.
    done = subprocess.run(["bash", "-c", f"printf %s {streamed.split(' -d ', 1)[1]}"], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"stream": True, "messages": ["it's"]}
    with RequestLog().watching(None) as empty:
        pass
    assert empty.requests == []
