"""Faults a real server will not produce on demand: each gives a clear failure within its bound.

The endpoint is down, hangs, answers garbage, truncates its stream, answers 500, is not
deterministic, or accepts a prompt over its window. The fault server is a fake, used for faults only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgate.reference import free_port
from tests.secrets_used import SECRETS

from .conftest import Gate, GateHere
from .faults import FaultServer

# mode -> the outcome of each check run (the failure code, or skipped: not run before health holds)
FAULTS: dict[str, dict[str, str]] = {
    "down": {"live-health": "live-health/down", "live-chat": "skipped"},
    "hang": {"live-health": "live-health/timeout", "live-chat": "skipped", "live-stream": "skipped"},
    "garbage": {"live-alias": "live-alias/not-json", "live-chat": "live-chat/not-json"},
    "truncate": {"live-stream": "live-stream/truncated"},
    "error": {"live-health": "live-health/unhealthy", "live-chat": "skipped"},
    "nondeterministic": {"live-determinism": "live-determinism/differs"},
    "accept-anything": {"live-capacity": "live-capacity/accepted"},
    "refuse-unexplained": {"live-capacity": "live-capacity/unexplained-refusal"},
    "empty-answer": {"live-chat": "live-chat/empty-answer"},
    "bad-stream": {"live-stream": "live-stream/malformed"},
    "stream-refused": {"live-stream": "live-stream/refused"},
    "stream-empty": {"live-stream": "live-stream/no-tokens"},
    "tools-call-despite-none": {"live-tool-calls": "live-tool-calls/call-despite-none"},
    "tools-none-refused": {"live-tool-calls": "live-tool-calls/none-refused"},
    # the stream hangs mid-run: said once by the check that ran out of time; the next check is not run
    "hang-streams": {"live-stream": "live-stream/timeout", "live-determinism": "skipped"},
    # a sign-in page served with 200 where the engine should answer: not the engine's health
    "login-page": {"live-health": "live-health/not-engine-health", "live-chat": "skipped"},
    # a stream that arrives at once: judged by the steps the engine reports making it in (its accepted drafts
    # come out with their step), not by its chunks
    "speculative-burst": {"live-stream": "passed"},
    "burst-of-many-steps": {"live-stream": "live-stream/buffered"},
    # every answer cut at 4 tokens by the server's own ceiling: said once, by the first check it cuts (not as the
    # parser's or the budget's fault further on); the generating checks after it not run, the reading ones run
    "capped-at-4": {"live-chat": "live-chat/server-cap", "live-stream": "skipped", "live-determinism": "skipped",
                    "live-alias": "passed"},
    "vision-unbilled": {
        "live-vision": "live-vision/image-not-billed",
        "live-vision-colour": "live-vision-colour/colour-not-named",  # the colour check runs beside it
    },
}
CHECK_S = 3.0
"""What one request, and one check, of a fault run may take: the 2 s --live-timeout, and a second more."""
FAULT_CODES = {code for outcomes in FAULTS.values() for code in outcomes.values() if "/" in code}
# faults that need the contract to declare what they break (a fleet copy)
DECLARE: dict[str, dict[str, Callable[[str], str]]] = {
    "vision-unbilled": {
        "fleet.toml": lambda t: t.replace(
            "[services.reference.contract]\nvision = false", "[services.reference.contract]\nvision = true"
        )
    },
}


@pytest.mark.parametrize("mode", list(FAULTS))
def test_fault(
    mode: str, gate: Callable[..., GateHere], fleet_copy: Callable[..., Path], no_api_key: None
) -> None:
    expected = FAULTS[mode]
    fleet_toml = fleet_copy(DECLARE[mode]) if mode in DECLARE else None
    if mode == "down":
        run = gate(f"http://127.0.0.1:{free_port()}", only=expected, live_timeout=2)
    else:
        with FaultServer(mode) as server:
            run = gate(server.url, only=expected, live_timeout=2, fleet_toml=fleet_toml)
    assert run.outcomes == expected, run.output
    # Bounded, as the gate measures itself (the wall clock of the whole run adds a pytest process's start-up,
    # collection and the fleet's render, which a loaded machine stretches): every failed request says how long
    # it waited, the readiness probe's included, and none waited past its 2 s bound and a second; the checks
    # together took at most 3 s each.
    notes = "\n".join(note for _, note in run.checks.values())
    waits = [float(w) for w in re.findall(r"\(after (\d+\.\d) s\)", notes)]
    assert all(w < CHECK_S for w in waits), run.output
    if mode in ("hang", "hang-streams"):
        assert re.search(r"within the 2 s bound \(after 2\.\d s\)", notes), run.output
    assert run.checks_took() < CHECK_S * len(expected), run.output


def test_an_echoed_api_key_never_reaches_the_output(
    plugin_gate: Callable[..., Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = SECRETS["ECHOED_KEY"]
    monkeypatch.setenv("FLEETGATE_API_KEY", secret)
    with FaultServer("echo-auth") as server:
        run = plugin_gate(server.url, "-k", "test_health or test_chat or test_alias")
    assert run.outcomes == {
        "live-health": "live-health/unhealthy",
        "live-chat": "skipped",
        "live-alias": "skipped",
    }, run.output
    assert "rejected credentials Bearer ***" in run.output
    assert secret not in run.output


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # host-payload (live/test_host.py's test_payload) skips: frank-archon declares no payload manifest
        ("vllm-as-declared", {"live-payload": "passed", "live-slots": "passed", "host-payload": "skipped"}),
        ("vllm-other-payload", {"live-payload": "live-payload/other-path", "live-slots": "live-slots/other-shape",
                                "host-payload": "skipped"}),
    ],
)
def test_vllm_payload_and_window_are_read_from_v1_models(
    mode: str, expected: dict[str, str], pytester: pytest.Pytester, no_api_key: None
) -> None:
    # INC-53 on vLLM: /v1/models root and max_model_len, compared with frank-archon's rendered config
    from .conftest import LIVE, junit_outcomes

    with FaultServer(mode) as server:
        junit = pytester.path / "junit.xml"
        pytester.runpytest_subprocess(
            str(LIVE),
            "--endpoint",
            "frank-archon",
            "--base-url",
            server.url,
            "-k",
            "test_payload or test_slots",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            timeout=120,
        )
    assert junit_outcomes(junit) == expected


AUTO_TOOL_FAULTS: dict[str, dict[str, str]] = {
    # an engine whose required and none work while auto is refused (vLLM before the parser gated required too)
    "tools-auto-refused": {"live-tool-calls": "live-tool-calls/refused"},
    "tools-auto-as-text": {"live-tool-calls": "live-tool-calls/call-as-text"},
}
FAULT_CODES |= {code for outcomes in AUTO_TOOL_FAULTS.values() for code in outcomes.values()}


@pytest.mark.parametrize(("mode", "expected"), list(AUTO_TOOL_FAULTS.items()))
def test_vllm_tool_choice_auto_is_asked_too(
    mode: str, expected: dict[str, str], pytester: pytest.Pytester, no_api_key: None
) -> None:
    # vLLM's required and none bypass --tool-call-parser (structured output): only auto shows a missing
    # --enable-auto-tool-choice or a parser of another format (real servers: tests/live/test_vllm_controls.py)
    from .conftest import LIVE, junit_outcomes

    with FaultServer(mode) as server:
        junit = pytester.path / "junit.xml"
        pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", "frank-archon", "--base-url", server.url, "-k", "test_tool_calls",
            "-p", "no:cacheprovider", f"--junitxml={junit}", timeout=120,
        )
    assert junit_outcomes(junit) == expected


def test_vllm_not_serving_the_alias_is_said_once(pytester: pytest.Pytester, no_api_key: None) -> None:
    # vLLM refuses (404) every request naming a model it does not serve: live-alias says so, nothing else runs
    # (a real vLLM with another --served-model-name: tests/live/test_vllm_controls.py)
    from .conftest import LIVE, junit_outcomes

    with FaultServer("vllm-other-name") as server:
        junit = pytester.path / "junit.xml"
        pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", "frank-archon", "--base-url", server.url, "-k",
            "test_health or test_alias or test_chat or test_payload", "-p", "no:cacheprovider",
            f"--junitxml={junit}", timeout=120,
        )
    assert junit_outcomes(junit) == {"live-health": "passed", "live-alias": "live-alias/not-listed",
                                     "live-chat": "skipped", "live-payload": "skipped", "host-payload": "skipped"}


# Issue 34: what vLLM reports nowhere, broken one thing at a time by a fake vLLM for the vllm-reference fleet (real
# vLLM servers: tests/live/test_vllm_controls.py, boots sequences-env-details and tokenizer-sampler).
VLLM_REFERENCE_FAULTS: dict[str, dict[str, str]] = {
    "vllm-healthy": {"live-payload": "passed", "live-slots": "passed", "live-sampler-defaults": "passed"},
    "vllm-one-at-a-time": {"live-payload": "passed", "live-slots": "live-slots/fewer-sequences",
                           "live-sampler-defaults": "passed"},
    # a healthy vLLM that the requests reached one after another (a loaded host): nothing waited, so not judged
    "vllm-apart": {"live-payload": "passed", "live-slots": "not-judged", "live-sampler-defaults": "passed"},
    "vllm-other-tokenizer": {"live-payload": "live-payload/other-tokenizer", "live-slots": "passed",
                             "live-sampler-defaults": "passed"},
    "vllm-other-sampler": {"live-payload": "passed", "live-slots": "passed",
                           "live-sampler-defaults": "live-sampler-defaults/other-behaviour"},
    # the answer does not depend on the sampler: not judged, never a pass
    "vllm-sampler-blind": {"live-payload": "passed", "live-slots": "passed", "live-sampler-defaults": "not-judged"},
}
FAULT_CODES |= {code for outcomes in VLLM_REFERENCE_FAULTS.values() for code in outcomes.values() if "/" in code}


@pytest.mark.parametrize(("mode", "expected"), list(VLLM_REFERENCE_FAULTS.items()))
def test_what_vllm_reports_nowhere_is_seen_through_what_it_does(
    mode: str, expected: dict[str, str], tmp_path: Path, no_api_key: None
) -> None:
    from fleetgate.checks.live_identity import _vocabulary_sample
    from fleetgate.gate import run_gate
    from fleetgate.manifest import load_fleet

    from . import vllm_reference as vr
    from .test_vllm_controls import HOT

    with FaultServer(mode) as server:
        fleet_toml = vr.declare(tmp_path / "fleet", port=int(server.url.rsplit(":", 1)[1]), edits=(HOT,))
        server.model_root = str(vr.MODELS / "vllm-model")
        sample = _vocabulary_sample(server.model_root)
        assert not isinstance(sample, str), sample
        server.detokenized = sample[1]
        run = run_gate(load_fleet(fleet_toml), vr.SERVICE, list(expected), base_url=server.url, timeout=5)
    assert run.verdicts == expected, run.text()
    if mode == "vllm-healthy":
        assert run.notes["live-slots"] == ("window 1024 tokens; 4 sequences at once decoded together: 48 engine steps of 2-8 "
                                           "tokens (--max-num-seqs 4)")
        assert run.notes["live-payload"].endswith("its tokenizer spells 8 tokens of vllm-model/tokenizer.json back "
                                                  "(/detokenize)"), run.notes


def test_vllm_parallel_calls_with_a_parser_whose_markup_the_gate_does_not_write(
    pytester: pytest.Pytester, tmp_path: Path, no_api_key: None
) -> None:
    """On vLLM the gate asks for two calls in the tool parser's own markup (hermes, on the real vLLM:
    test_vllm_real.py); frank-archon's qwen3_coder writes another: not judged, naming the parser."""
    import shutil

    from .conftest import FLEET_DIR, LIVE, junit_outcomes

    fleet = tmp_path / "fleet"
    shutil.copytree(FLEET_DIR, fleet)
    manifest = fleet / "fleet.toml"
    text = manifest.read_text(encoding="utf-8")
    marker = '[services.frank-archon.contract]\nvision = true\n'
    assert marker in text
    manifest.write_text(text.replace(marker, marker + "parallel_tool_calls = true\n"), encoding="utf-8")
    with FaultServer("vllm-as-declared") as server:
        junit = pytester.path / "junit.xml"
        result = pytester.runpytest_subprocess(
            str(LIVE), "--endpoint", "frank-archon", "--base-url", server.url, "--fleet", str(manifest), "-k",
            "test_parallel_tool_calls", "-p", "no:cacheprovider", "-rs", f"--junitxml={junit}", timeout=120,
        )
    assert junit_outcomes(junit) == {"live-parallel-tool-calls": "skipped"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*not judged: frank-archon's --tool-call-parser is 'qwen3_coder': the gate writes two "
                                 "calls in the markup the parser reads, and knows hermes's*"])


def test_a_vllm_without_a_reasoning_parser_ends_no_trace_the_gate_could_judge(tmp_path: Path, no_api_key: None) -> None:
    """live-tool-reasoning on vLLM is judged where a --reasoning-parser runs (vLLM then honours the request's
    thinking_token_budget); a vLLM service whose files run none is not judged, naming what would make it judged."""
    from fleetgate.gate import run_gate
    from fleetgate.manifest import load_fleet

    from . import vllm_reference as vr

    with FaultServer("vllm-healthy") as server:
        fleet_toml = vr.declare(tmp_path / "fleet", port=int(server.url.rsplit(":", 1)[1]),
                                edits=(('    --reasoning-parser "$REASONING_PARSER"\n', ""),))
        server.model_root = str(vr.MODELS / "vllm-model")
        run = run_gate(load_fleet(fleet_toml), vr.SERVICE, ["live-tool-reasoning"], base_url=server.url, timeout=5)
    assert run.verdicts == {"live-tool-reasoning": "not-judged"}, run.text()
    assert run.notes["live-tool-reasoning"] == (
        "not judged: vllm-reference runs no --reasoning-parser, so it honours no thinking_token_budget and ends a trace "
        "only where the model writes its end tag: whether a call follows the trace is the model's"), run.notes
