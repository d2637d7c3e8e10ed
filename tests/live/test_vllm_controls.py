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

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetgate.gate import run_gate
from fleetgate.manifest import load_fleet
from fleetgate.reference import ReferenceError, free_port
from tests.secrets_used import SECRETS

from . import vllm_reference as vr
from .faults import FaultProxy
from .test_vllm_real import EXPECTED_HOST, EXPECTED_LIVE, only, run_vllm_gate

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
    permuted_tokenizer: bool = False
    """The process runs ``--tokenizer`` of a copy of the model's tokenizer whose ids are permuted (made at test time)."""
    said: tuple[str, ...] = ()
    """What the gate's output says in vLLM's words: lines (fnmatch) of its summary, skip reasons included (``-rs``)."""
    env_file: tuple[Edit, ...] = ()
    """Edits of the env file both the declaration and the process have."""
    alone: dict[str, str] = field(default_factory=dict)
    """check -> outcome, each check run by itself in a gate of its own (what the whole gate does not run after an
    earlier check's verdict)."""
    api_key: bool = False
    """The process also runs ``--api-key API_KEY`` (on 127.0.0.1, as every boot): the gate is given the key through
    $FLEETGATE_API_KEY for ``failing``, then run once more without it (``KEYLESS``); no output of either run may hold
    the key (``_key_kept_nowhere``)."""


API_KEY = SECRETS["VLLM_ENGINE_KEY"]
"""The key of the boot that runs one (``Boot.api_key``): a word no output of the gate may hold."""

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
            # the parallel calls are asked under tool_choice auto: refused the same way
            "live-parallel-tool-calls": "live-parallel-tool-calls/refused",
            # and the nested call and the call with thinking on, both under required
            "live-tool-schema": "live-tool-schema/refused",
            "live-tool-reasoning": "live-tool-reasoning/refused",
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
            ('    --max-model-len "$MAXLEN"\n', "    --max-model-len 1000\n"),
        ),
        other_model=True,
        failing={
            "live-tool-calls": "live-tool-calls/call-as-text",
            # the same cause: two calls written in hermes markup, which the pythonic parser leaves as text
            "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel",
            # the pythonic parser has no structural tag: required goes through vLLM's JSON array of {"name",
            # "parameters"}, and the model, trained on hermes markup, spelled the nested call past its 160 tokens
            # (finish_reason length, measured); the weather call in that array it was trained on passes
            "live-tool-schema": "live-tool-schema/no-call",
            "live-slots": "live-slots/other-shape",
            "live-capacity": "live-capacity/other-window",
            "live-payload": "live-payload/other-model",
            "host-process-argv": "host-process-argv/argv-differs",
        },
        why_independent=(
            "the parser reads a call only under tool_choice auto (required goes through structured output); a "
            "1000-token window still holds every probe but the capacity one (the longest, the prefix-cache probe, "
            "is 3/4 of the declared 1024 plus one token; the nested tool probe 391 + 160), so it shows only in the reported "
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
            # document never reaches the content (measured: content None), nor the parallel calls the parser
            "live-structured-output": "live-structured-output/not-honoured",
            "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel",
            # and the nested call (thinking off: measured, no call and content ''); with thinking on the trace ends
            "live-tool-schema": "live-tool-schema/no-call",
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
# Issue 34: what vLLM reports nowhere, seen through what it does.
HOT = ("    --enable-auto-tool-choice\n",
       "    --enable-auto-tool-choice\n    --override-generation-config '{\"temperature\": 1.5}'\n")
BOOTS.update({
    # 5. one sequence at a time, a KV pool set in the environment only, no cached-token counts; sampler defaults
    # declared and run alike (live-sampler-defaults judged by a seeded request, passing). And an API key the files do
    # not declare (issue 34: the key printed by the gate's argv check): the gate given it sees only the argv differ.
    "sequences-env-details": Boot(
        running=(
            ('    --max-num-seqs "$MAXSEQS"\n', "    --max-num-seqs 1\n"),
            ("    --enable-prompt-tokens-details\n", ""),
            # the KV pool set in the process environment only (the files set none), and the key in vLLM's own
            # variable too (vllm/envs.py VLLM_API_KEY): a secret in the engine's environment, shown masked
            ('exec vllm "${args[@]}"',
             f'export VLLM_CPU_KVCACHE_SPACE=2 VLLM_API_KEY={API_KEY}\nexec vllm "${{args[@]}}"'),
        ),
        declared=(HOT,),
        env_file=(("export VLLM_CPU_KVCACHE_SPACE=1\n", ""),),
        api_key=True,
        said=("  observed: VLLM_API_KEY=[*][*][*], VLLM_CPU_KVCACHE_SPACE=2",
              "SKIPPED *test_live_caches.py:*: not judged: vllm-reference reports no cached tokens (vLLM counts them in "
              "usage.prompt_tokens_details.cached_tokens only when started with --enable-prompt-tokens-details): add "
              "that flag to its serve script to judge its prefix cache",),
        failing={
            "live-slots": "live-slots/fewer-sequences",
            "live-prefix-cache": "skipped",  # not judged: vLLM counts no cached tokens without the flag
            "live-sampler-defaults": "passed",
            "host-process-env": "host-process-env/undeclared-engine-env",
            "host-process-argv": "host-process-argv/argv-differs",
        },
        why_independent=(
            "one sequence at a time changes only when concurrent requests run (the gate's are sequential but for the slots "
            "probe's); the counts of cached tokens only what an answer's usage says (the cache still works); a 2 GiB pool "
            "where the files set none (vLLM's CPU default is 4) only how many blocks the KV cache has (every probe fits in "
            "either); the declared temperature 1.5 applies only to requests that send none (every probe but the sampler's "
            "sends temperature 0); the key only whether the gate's requests are let in (it is given it), and vLLM asks for "
            "it only under /v1, so the boot's own wait for /health and the ledger's read of /metrics go through"
        ),
    ),
    # 6. a server-side cap: every answer at most 8 tokens (vLLM's override_max_tokens).
    "server-cap": Boot(
        running=(("    --enable-auto-tool-choice\n",
                  "    --enable-auto-tool-choice\n    --override-generation-config '{\"max_new_tokens\": 8}'\n"),),
        failing={
            **{check: "skipped" for check in EXPECTED_LIVE
               if check not in ("live-health", "live-alias", "live-payload", "live-metrics")},
            "live-drafter": "live-drafter/server-cap",
            "host-process-argv": "host-process-argv/argv-differs",
        },
        # the cap seen in streamed answers too: each streaming check by itself, the first its cap cuts
        alone={"live-stream": "live-stream/server-cap", "live-tool-calls": "live-tool-calls/server-cap"},
        why_independent="one misconfiguration",
    ),
    # 7. a tokenizer that is not the model's, and sampler defaults other than declared.
    "tokenizer-sampler": Boot(
        running=(("""    --override-generation-config '{"temperature": 1.5}'\n""",
                  """    --override-generation-config '{"temperature": 0}'\n"""),),
        declared=(HOT,),
        permuted_tokenizer=True,
        failing={
            "live-payload": "live-payload/other-tokenizer",
            "live-sampler-defaults": "live-sampler-defaults/other-behaviour",
            "host-process-argv": "host-process-argv/argv-differs",
            # what the model made of prompts it read as other tokens (measured): no call in the required call's 48
            # tokens, and a trace that ran to max_tokens; chat, stream and determinism pass on whatever it wrote
            "live-tool-calls": "live-tool-calls/no-structured-call",
            "live-reasoning": "live-reasoning/no-answer",
            # since the model was retrained (another vocabulary, permuted the same way): every call and the
            # schema's document ran to max_tokens in what the model wrote (measured)
            "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel",
            "live-structured-output": "live-structured-output/not-honoured",
            "live-tool-schema": "live-tool-schema/no-call",
            "live-tool-reasoning": "live-tool-reasoning/no-call",
        },
        why_independent=(
            "the sampler probe compares the server's own answers to one seeded request with and without the declared "
            "defaults, whatever tokens they are; the tokenizer changes every text the model reads and writes, and the "
            "rest of this table is what that did (measured)"
        ),
    ),
})
# The keyed boot asked without the key: vLLM answers 401 under /v1 (its /health is open), so the gate says so once
# and runs no other live check; the host checks, which read the host, judge the process as with the key.
KEYLESS = {"live-health": "live-health/unauthorized"}
CODES = {code for boot in BOOTS.values() for code in boot.failing.values()} | set(KEYLESS.values())
"""The live failure codes these controls reproduce (tests/live/test_negative_controls.py counts them)."""


# Under ``-n 2 --dist loadscope`` (tox -e vllm) xdist sends each class (and test_vllm_real.py, one module) to one
# worker: four scopes (test_vllm_real.py and three classes), so the nine boots run two at a time (issue 34 added
# TestBootsC's three, and TestBootsB's template boot).
class TestBootsA:
    @pytest.mark.parametrize("name", ["flags", "deepseek-r1"])
    def test_misconfigured_vllm(self, name: str, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None) -> None:
        _control(name, tmp_path, pytester)


class TestBootsB:
    @pytest.mark.parametrize("name", ["parser-window-model", "served-name"])
    def test_misconfigured_vllm(self, name: str, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None) -> None:
        _control(name, tmp_path, pytester)

    def test_a_template_that_renders_the_trace_after_the_last_user(
        self, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None
    ) -> None:
        """live-reasoning-turns on vLLM, both ways: the reference's template renders no earlier trace (declared
        never), so the trace a proxy strips never reached its prompt; here vLLM runs a template that renders the trace
        of the turns after the last user message (declared after-last-user: the checks the template decides for pass). A proxy
        that strips reasoning from the history then breaks the agent's turn (after-tool-result), and the same server
        declared to keep every trace breaks the other (after-user-message). The check reads prompt token counts of
        one-token answers: what the model writes does not enter. The boot also listens on another port than its files
        declare, reached through --base-url, while a process that is no engine holds the declared port: the host checks
        judge the vLLM the live checks reached and name the other, not judged."""
        python = vr.python_or_skip()
        port, declared_port = free_port(), free_port()
        template = _template_rendering_after_last_user(tmp_path / "after-last-user.jinja")
        flag = (('    --reasoning-parser "$REASONING_PARSER"\n',
                 f'    --reasoning-parser "$REASONING_PARSER"\n    --chat-template {template}\n'),)
        # vLLM listens on another port than the files declare, and the gate reaches it through --base-url, while
        # another process holds the declared port: the host checks judge the process the live checks reached
        running = _replaying(vr.declare(tmp_path / "running", port=port, edits=flag), "after-last-user")
        declared = _replaying(vr.declare(tmp_path / "declared", port=declared_port, edits=flag), "after-last-user")
        always = _replaying(vr.declare(tmp_path / "always", port=declared_port, edits=flag), "always")
        before = vr.system_temp_shapes()
        with vr.own_temp_dir() as temp, _squatting(declared_port, tmp_path) as squatter:
            try:
                server = vr.start(running, python=python, work=tmp_path, temp=temp, port=port)
            except ReferenceError as exc:
                pytest.fail(str(exc), pytrace=False)
            with server:
                # the checks whose requests carry an assistant turn or a trace, the template's only difference
                result, outcomes = run_vllm_gate(pytester, server.url, declared, "-k", only(AFFECTED))
                # the argv check's whole note (the gate's summary line is cut at 220 characters)
                argv = run_gate(load_fleet(declared), vr.SERVICE, ["host-process-argv"], base_url=server.url)
                with FaultProxy(server.url, "drop-reasoning-history") as proxy:
                    stripped, stripped_outcomes = run_vllm_gate(pytester, proxy.url, declared, "-k", only([TURNS]))
                kept, kept_outcomes = run_vllm_gate(pytester, server.url, always, "-k", only([TURNS]))
            server.stop(timeout=30)
        vr.fail_on_temp_left(before)
        assert outcomes == dict.fromkeys(AFFECTED, "passed"), result.stdout.str()
        result.stdout.fnmatch_lines(["*PASS live-reasoning-turns*an earlier trace, as 'after-last-user' declares: after "
                                     "a tool result rendered (* -> * prompt tokens), after the user's message left out*"])
        assert re.fullmatch(
            rf"PID \d+ runs the rendered argv through its interpreter \S+; it listens on port {port}, not the declared "
            rf"{declared_port} \(--base-url\): the port is the one difference allowed; the declared port {declared_port} "
            rf"is held by PID {squatter} .*which the live checks did not reach: not judged", argv.checks["host-process-argv"][1]), \
            argv.checks
        assert argv.checks["host-process-argv"][0] == "PASS", argv.checks
        assert "proxy or tunnel" not in result.stdout.str()
        assert stripped_outcomes == {TURNS: f"{TURNS}/after-tool-result"}, stripped.stdout.str()
        assert kept_outcomes == {TURNS: f"{TURNS}/after-user-message"}, kept.stdout.str()


class TestBootsC:
    @pytest.mark.parametrize("name", ["sequences-env-details", "server-cap", "tokenizer-sampler"])
    def test_misconfigured_vllm(self, name: str, tmp_path: Path, pytester: pytest.Pytester, no_api_key: None,
                                monkeypatch: pytest.MonkeyPatch) -> None:
        _control(name, tmp_path, pytester, monkeypatch)


TURNS = "live-reasoning-turns"
AFFECTED = (TURNS, "live-reasoning", "live-tool-calls", "live-tool-reasoning", "live-chat")
"""What a chat template decides for the gate: the history's rendering (the turns, the tool loop) and the generation
prompt (thinking on or off, tools listed)."""


def _template_rendering_after_last_user(target: Path) -> Path:
    """The vLLM fixture model's chat template, rendering an assistant turn's trace (vLLM 0.32 hands the template the
    message's ``reasoning``) as a think block, for the turns after the last user message only."""
    text = (vr.MODELS / "vllm-model" / "chat_template.jinja").read_text(encoding="utf-8")
    opening = "{%- for message in messages -%}\n"
    turn = "{%- elif message.role == 'assistant' -%}\n{{- '<|im_start|>assistant\\n' -}}\n"
    assert text.count(opening) == 1 and text.count(turn) == 1, target
    text = text.replace(opening, "{%- set ns = namespace(last_user=-1) -%}\n"
                        "{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
                        "{%- endif -%}{%- endfor -%}\n" + opening)
    text = text.replace(turn, turn + "{%- if message.reasoning and loop.index0 > ns.last_user -%}"
                        "{{- '<think>\\n' + message.reasoning + '\\n</think>\\n\\n' -}}{%- endif -%}\n")
    target.write_text(text, encoding="utf-8")
    return target


@contextlib.contextmanager
def _squatting(port: int, where: Path) -> Iterator[int]:
    """A process that is no engine (Python's http.server) holding ``port`` on 127.0.0.1; yields its PID."""
    process = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)], cwd=where,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"http.server did not listen on 127.0.0.1:{port} within 30 s", pytrace=False)
            time.sleep(0.1)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _replaying(fleet_toml: Path, replay: str) -> Path:
    text = fleet_toml.read_text(encoding="utf-8")
    declared = 'reasoning_replay = "never"'
    assert text.count(declared) == 1, fleet_toml
    fleet_toml.write_text(text.replace(declared, f'reasoning_replay = "{replay}"'), encoding="utf-8")
    return fleet_toml


def test_every_boot_runs_in_one_class() -> None:
    assert sorted(["flags", "deepseek-r1", "parser-window-model", "served-name", "sequences-env-details", "server-cap",
                   "tokenizer-sampler"]) == sorted(BOOTS)


def permuted_tokenizer(target: Path) -> Path:
    """A copy of the model's tokenizer (and its chat template, which vLLM reads from the tokenizer's directory) at
    ``target`` whose ordinary tokens have their ids reversed: the same merges and texts, other ids."""
    import shutil

    target.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(vr.MODELS / "vllm-model" / name, target / name)
    document = json.loads((vr.MODELS / "vllm-model" / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = document["model"]["vocab"]
    special = {entry["id"] for entry in document.get("added_tokens", [])}
    ordinary = sorted(i for i in vocab.values() if i not in special)
    flipped = dict(zip(ordinary, reversed(ordinary), strict=True))
    document["model"]["vocab"] = {token: flipped.get(i, i) for token, i in vocab.items()}
    (target / "tokenizer.json").write_text(json.dumps(document), encoding="utf-8")
    return target


def _key_kept_nowhere(result: pytest.RunResult, written: Path, transcripts: set[str]) -> None:
    """The gate's stdout and stderr, and every file under ``written`` (its JUnit, its report and the transcripts of
    the checks ``transcripts`` beside it, no other), hold no word of ``API_KEY``; and the argv check showed the key's
    flag scrubbed."""
    kept = {"stdout": result.stdout.str(), "stderr": result.stderr.str()}
    kept |= {str(p.relative_to(written)): p.read_text(encoding="utf-8", errors="replace")
             for p in written.rglob("*") if p.is_file()}
    beside = "out/gate-transcripts/vllm-reference/"
    assert {k.removeprefix(beside).removesuffix(".json") for k in kept if k.startswith(beside)} == transcripts, sorted(kept)
    assert {"junit.xml", "out/gate.json"} <= set(kept), sorted(kept)
    assert not [where for where, text in kept.items() if API_KEY in text], API_KEY
    assert "--api-key '***'" in kept["stdout"], kept["stdout"]


def _control(name: str, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    boot = BOOTS[name]
    python = vr.python_or_skip()
    port = free_port()
    before = vr.system_temp_shapes()
    with vr.own_temp_dir() as temp:
        models = vr.float32_export(python, tmp_path / "models", temp=temp) if boot.other_model else vr.MODELS
        tokenizer: tuple[Edit, ...] = ()
        if boot.permuted_tokenizer:
            path = permuted_tokenizer(tmp_path / "tokenizer")
            tokenizer = (('    --max-model-len "$MAXLEN"\n', f'    --max-model-len "$MAXLEN"\n    --tokenizer {path}\n'),)
        keyed: tuple[Edit, ...] = ()
        if boot.api_key:
            keyed = (('    --reasoning-parser "$REASONING_PARSER"\n',
                      f'    --reasoning-parser "$REASONING_PARSER"\n    --api-key {API_KEY}\n'),)
        declared = vr.declare(tmp_path / "declared", port=port, edits=boot.declared, models=models,
                              env_edits=boot.env_file)
        running = vr.declare(tmp_path / "running", port=port, edits=(*boot.declared, *boot.running, *tokenizer, *keyed),
                             models=models, env_edits=boot.env_file)
        try:
            server = vr.start(running, python=python, work=tmp_path, temp=temp, port=port)
        except ReferenceError as exc:
            pytest.fail(str(exc), pytrace=False)
        report = f"--fleetgate-report={pytester.path / 'out' / 'gate.json'}"
        with server:
            if boot.api_key:
                assert monkeypatch is not None
                monkeypatch.setenv("FLEETGATE_API_KEY", API_KEY)
            result, outcomes = run_vllm_gate(pytester, server.url, declared, report)
            if boot.api_key:
                assert monkeypatch is not None
                # every live check that sent a request keeps it; live-health's are the first check's (live-drafter),
                # and the two that do not apply here send none
                _key_kept_nowhere(result, pytester.path,
                                  set(EXPECTED_LIVE) - {"live-health", "live-vision-colour", "live-reasoning-effort"})
                monkeypatch.delenv("FLEETGATE_API_KEY")
                shutil.rmtree(pytester.path / "out")
                keyless, keyless_outcomes = run_vllm_gate(pytester, server.url, declared, report)
                _key_kept_nowhere(keyless, pytester.path, set())  # refused at the readiness probe: no check asked
            alone = {check: run_vllm_gate(pytester, server.url, declared, "-k", only([check])) for check in boot.alone}
            vr.ledger_agrees(running, server.log, server.url)
        server.stop(timeout=30)
    vr.fail_on_temp_left(before)
    assert outcomes == {**EXPECTED_LIVE, **EXPECTED_HOST, **boot.failing}, result.stdout.str()
    for check, (by_itself, its_outcomes) in alone.items():
        assert its_outcomes == {check: boot.alone[check]}, by_itself.stdout.str()
    for line in boot.said:
        result.stdout.fnmatch_lines([line])
    if boot.api_key:
        host = {check: outcome for check, outcome in boot.failing.items() if check.startswith("host-")}
        assert keyless_outcomes == {**{check: "skipped" for check in EXPECTED_LIVE}, **EXPECTED_HOST, **host,
                                    **KEYLESS}, keyless.stdout.str()
        keyless.stdout.fnmatch_lines(["vllm-reference: live-health/unauthorized *", "  where: */v1/models",
                                      "  observed: HTTP 401: Unauthorized", "  expected: *",
                                      "  fix: *put the endpoint's API key in $FLEETGATE_API_KEY (now not set)*"])
