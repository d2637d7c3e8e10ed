"""Negative controls with real misconfigured vLLM servers: each boot runs the serve script of fixtures/vllm-reference
with the misconfiguration written into a copy of it, while the gate is given the reference's own declaration (the
files say one thing, the process runs another). The gate must fail exactly the check and code each misconfiguration
breaks, and every other check must keep the reference's outcome (tests/live/test_vllm_real.py).

A boot costs minutes of CPU, so misconfigurations whose checks are independent share one boot; the test asserts that
boot's full outcome table, and each boot's entry says why its misconfigurations do not interact. Each boot is also
held to vLLM's ledger (fleetgate/ledger/vllm.py): the KV pool, blocks and concurrency vLLM printed and exported at
start against what the ledger predicts from the running copy's files.

Without an interpreter that has vLLM the tests skip (or fail under tox -e vllm), as test_vllm_real.py does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetgate.reference import ReferenceError, free_port

from . import vllm_reference as vr
from .test_vllm_real import EXPECTED_HOST, EXPECTED_LIVE, run_vllm_gate

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

Edit = tuple[str, str]
NGRAM = (
    '    --reasoning-parser "$REASONING_PARSER"\n',
    '    --reasoning-parser "$REASONING_PARSER"\n'
    """    --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, """
    """"prompt_lookup_min": 1}'\n""",
)


@dataclass(frozen=True)
class Boot:
    running: tuple[Edit, ...]
    """Edits of the serve script the process runs (and the gate's declaration does not have)."""
    failing: dict[str, str]
    """check -> failure code; every other check keeps the reference's outcome."""
    why_independent: str
    declared: tuple[Edit, ...] = ()
    """Edits both the declaration and the process have (what the gate is told, and is true)."""
    other_model: bool = False
    """The declared path holds another checkpoint (fixtures/vllm-model re-exported in float32)."""


BOOTS: dict[str, Boot] = {
    # 1. no --enable-auto-tool-choice, no --reasoning-parser, prefix caching off; ngram speculation declared and run.
    "flags": Boot(
        running=(
            ("    --enable-auto-tool-choice\n", ""),
            ('    --reasoning-parser "$REASONING_PARSER"\n', ""),
            ("    --enable-prefix-caching\n", "    --no-enable-prefix-caching\n"),
        ),
        declared=(NGRAM,),
        failing={
            "live-tool-calls": "live-tool-calls/refused",
            "live-reasoning": "live-reasoning/tags-in-content",
            "live-prefix-cache": "live-prefix-cache/not-reused",
            # reasoning_replay is read from prompts without tools: the traces' verdict does not wait on tool support
            "host-process-argv": "host-process-argv/argv-differs",
        },
        why_independent=(
            "auto tool choice gates only requests that carry tools (vLLM 0.32 loads --tool-call-parser only with it, "
            "so even tool_choice required is refused, measured); the reasoning parser only splits what a request "
            "generates (the tool probe turns thinking off, and structured output no longer waits for a trace); "
            "prefix caching only changes what a repeated prompt costs, never what any request answers; the ngram "
            "drafter, declared and run, proposes tokens the target model verifies, so greedy answers are unchanged. "
            "Each edit is in the process's argv: host-process-argv fails once for all of them"
        ),
    ),
    # 2. another --tool-call-parser, --max-model-len under the contract, another model at the declared path.
    "parser-window-model": Boot(
        running=(
            ('    --tool-call-parser "$TOOL_PARSER"\n', "    --tool-call-parser pythonic\n"),
            ('    --max-model-len "$MAXLEN"\n', "    --max-model-len 500\n"),
        ),
        other_model=True,
        failing={
            "live-tool-calls": "live-tool-calls/call-as-text",
            "live-slots": "live-slots/other-shape",
            "live-capacity": "live-capacity/other-window",
            "live-payload": "live-payload/other-model",
            "host-process-argv": "host-process-argv/argv-differs",
        },
        why_independent=(
            "the parser reads a call only under tool_choice auto (required goes through structured output); a "
            "500-token window still holds every probe but the capacity one (the longest, the prefix-cache probe, "
            "is 3/4 of the declared 512 plus one token; the tool probe 239 + 48), so it shows only in the reported "
            "window and in where the over-window prompt is refused; the float32 re-export computes at --dtype "
            "float32 exactly what the float16 checkpoint does (every weight widened exactly), so only the "
            "checkpoint's bytes and config differ from its profile"
        ),
    ),
    # 3. the deepseek_r1 reasoning parser in place of qwen3.
    "deepseek-r1": Boot(
        running=(('    --reasoning-parser "$REASONING_PARSER"\n', "    --reasoning-parser deepseek_r1\n"),),
        failing={
            "live-tool-calls": "live-tool-calls/no-structured-call",
            # the same cause: with thinking off deepseek_r1 holds the whole answer as reasoning, and the schema's
            # document never reaches the content (measured: content None)
            "live-structured-output": "live-structured-output/not-honoured",
            "host-process-argv": "host-process-argv/argv-differs",
        },
        why_independent="one misconfiguration",
    ),
    # 4. another served model name: vLLM answers 404 to every request that names the declared alias (llama-server
    # would serve it under any name), so the gate says so once, in live-alias, and runs no other live check.
    "served-name": Boot(
        running=(('    --served-model-name "$SERVED_NAME"\n', "    --served-model-name another-name\n"),),
        failing={
            **{check: "skipped" for check in EXPECTED_LIVE if check not in ("live-health", "live-alias")},
            "live-alias": "live-alias/not-listed",
            "host-process-argv": "host-process-argv/argv-differs",
        },
        why_independent="one misconfiguration",
    ),
}
CODES = {code for boot in BOOTS.values() for code in boot.failing.values()}
"""The live failure codes these controls reproduce (tests/live/test_negative_controls.py counts them)."""


# Under ``-n 2 --dist loadscope`` (tox -e vllm) xdist sends each class (and test_vllm_real.py, one module) to one
# worker: three scopes, so the five boots run two at a time -- the reference and one pair, then the other pair.
class TestBootsA:
    @pytest.mark.parametrize("name", ["flags", "deepseek-r1"])
    def test_misconfigured_vllm(self, name: str, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None) -> None:
        _control(name, tmp_path, pytester)


class TestBootsB:
    @pytest.mark.parametrize("name", ["parser-window-model", "served-name"])
    def test_misconfigured_vllm(self, name: str, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None) -> None:
        _control(name, tmp_path, pytester)


def test_every_boot_runs_in_one_class() -> None:
    assert sorted(["flags", "deepseek-r1", "parser-window-model", "served-name"]) == sorted(BOOTS)


def _control(name: str, tmp_path: Path, pytester: pytest.Pytester) -> None:
    boot = BOOTS[name]
    python = vr.python_or_skip()
    port = free_port()
    before = vr.system_temp_shapes()
    with vr.own_temp_dir() as temp:
        models = vr.float32_export(python, tmp_path / "models", temp=temp) if boot.other_model else vr.MODELS
        declared = vr.declare(tmp_path / "declared", port=port, edits=boot.declared, models=models)
        running = vr.declare(tmp_path / "running", port=port, edits=(*boot.declared, *boot.running), models=models)
        try:
            server = vr.start(running, python=python, work=tmp_path, temp=temp, port=port)
        except ReferenceError as exc:
            pytest.fail(str(exc), pytrace=False)
        with server:
            result, outcomes = run_vllm_gate(pytester, server.url, declared)
            vr.ledger_agrees(running, server.log, server.url)
        server.stop(timeout=30)
    vr.fail_on_temp_left(before)
    assert outcomes == {**EXPECTED_LIVE, **EXPECTED_HOST, **boot.failing}, result.stdout.str()
