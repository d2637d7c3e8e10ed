"""Misconfigured reference servers: each fails exactly the expected checks, with their failure codes.

Every server here is the real llama-server started from the reference's rendered argv with one edit
-- the files still declare what the process no longer does, which is how INC-53 happened -- or the
real reference checked against a fleet copy whose contract says something else. Each control asserts
the exact outcome of every check (pass, skip, or the failure code that fired), and runs under both
numerics variants (conftest.VARIANTS) where generated text decides its verdict (conftest.TEXT_DECIDED_CODES):
the verdicts must be the same whatever words the model picks.
Together with test_faults.py, test_proxies.py and test_bounds.py, every registered live check is shown failing.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from fleetgate.checks import REGISTRY, TRANSPORT_CODES, load_checks
from fleetgate.reference import MODEL_FILE, ReferenceServer, llama_bin_dir, model_dir

from .conftest import TEXT_DECIDED_CODES, VARIANTS, Edit, GateHere, drop, expected_outcomes, live_checks, set_value, variants_for
from .mmproj import IMAGE_TOKENS, write_random_projector
from .test_agents import AGENT_CODES
from .test_bounds import BOUND_CODES
from .test_faults import FAULT_CODES
from .test_proxies import PROXY_CODES
from .test_stream_wait import STREAM_WAIT_CODES

FleetEdits = dict[str, Callable[[str], str]]

VISION_TRUE: FleetEdits = {
    "fleet.toml": lambda t: t.replace(
        "[services.reference.contract]\nvision = false", "[services.reference.contract]\nvision = true"
    )
}

# control -> (argv edit, fleet edits, the outcome of every check that does not pass)
CONTROLS: dict[str, tuple[Edit | str | None, FleetEdits, dict[str, str]]] = {
    "wrong-alias": (
        lambda a: set_value(a, "--alias", "somebody-else"),
        {},
        {"live-alias": "live-alias/not-listed"},
    ),
    "other-model-file": (None, {}, {"live-payload": "live-payload/other-path"}),  # argv edit built in the test
    "payload-replaced": (None, {}, {"live-payload": "live-payload/other-model"}),  # built in the test
    # the declared file removed after load, and no profile declared: nothing is left to compare with
    "payload-removed": (  # built in the test
        None,
        {},
        {"live-payload": "live-payload/header-unreadable", "host-payload": "host-payload/missing"},
    ),
    # another model (the Q8_0 requantisation) at the declared path under the declared name, loaded and left
    # there: it matches its own header, not the declared payload (the profile, the manifest's size)
    "payload-other-in-place": (  # built in the test
        None,
        {},
        {"live-payload": "live-payload/other-model", "host-payload": "host-payload/size-differs"},
    ),
    "no-metrics": (lambda a: drop(a, "--metrics", 0), {}, {"live-metrics": "live-metrics/not-served"}),
    "no-drafter": (
        lambda a: drop(drop(drop(a, "--spec-type"), "--spec-draft-model"), "--spec-draft-n-max"),
        {},
        {"live-drafter": "live-drafter/not-drafting"},
    ),
    "drafter-other-type": (
        lambda a: set_value(a, "--spec-type", "ngram-cache"),
        {},
        {"live-drafter": "live-drafter/other-type"},
    ),
    "window-other": (
        "ctx-size-2048",  # conftest.SHARED_EDITS: test_under_load.py starts the same server
        {},
        {"live-slots": "live-slots/other-shape", "live-capacity": "live-capacity/other-window"},
    ),
    "vision-without-mmproj": (
        None,
        VISION_TRUE,
        {"live-vision": "live-vision/not-accepted", "live-vision-colour": "live-vision-colour/refused"},
    ),
    "sampler-other": (
        lambda a: set_value(a, "--temp", "0.7"),
        {},
        {"live-sampler-defaults": "live-sampler-defaults/other-defaults"},
    ),
    "builtin-template": (
        lambda a: drop(a, "--chat-template-file"),
        {},
        {
            "live-tool-calls": "live-tool-calls/no-structured-call",
            "live-reasoning": "live-reasoning/no-trace",
            "live-reasoning-effort": "live-reasoning-effort/other-status",
            # the same cause: SmolLM2's own template has no tool-call format and renders no trace back
            "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel",
            "live-reasoning-turns": "live-reasoning-turns/after-tool-result",
            "live-tool-schema": "live-tool-schema/no-call",
            "live-tool-reasoning": "live-tool-reasoning/no-call",
        },
    ),
    "reasoning-in-content": (
        lambda a: set_value(a, "--reasoning-format", "none"),
        {},
        {"live-reasoning": "live-reasoning/tags-in-content", "live-tool-reasoning": "live-tool-reasoning/no-trace"},
    ),
    "reasoning-budget-unlimited": (
        lambda a: set_value(a, "--reasoning-budget", "-1"),
        {},
        # with tools, after the agent's earlier trace, the model closed its own trace and called (measured, both
        # variants): the call with reasoning on holds whoever ends the trace
        {"live-reasoning": "live-reasoning/no-answer"},
    ),
    "reasoning-budget-zero": (
        # build 11434 arms no budget sampler at 0 with thinking requested: the trace never ends
        lambda a: set_value(a, "--reasoning-budget", "0"),
        {},
        # with tools the budget of 0 ends the trace before it starts: the call comes with no trace (measured, both
        # variants)
        {"live-reasoning": "live-reasoning/no-answer", "live-tool-reasoning": "live-tool-reasoning/no-trace"},
    ),
    "no-prompt-cache": (
        lambda a: set_value(a, "--cache-ram", "0"),
        {},
        {"live-prefix-cache": "live-prefix-cache/not-reused"},
    ),
    "server-cap": (
        lambda a: [*a, "--n-predict", "4"],
        {},
        # llama.cpp applies --n-predict only to requests without max_tokens (server-context.cpp,
        # n_predict_max): what clients that send none get, and what live-chat's grammar-bound request sees
        {"live-chat": "live-chat/cut-by-server"},
    ),
    "garbage": (  # argv edit built in the test: a server-wide +100 bias on '!'
        None,
        {},
        # every call starts with '!' too: neither one call nor two (measured, both variants). The required call's
        # '!'s are words llama.cpp's grammar admits before a call opens: they fill max_tokens, and whether a call
        # opens is the model's, not judged (the builtin template's answer that ends without a call fails)
        {"live-chat": "live-chat/garbage", "live-tool-calls": "not-judged",
         "live-parallel-tool-calls": "live-parallel-tool-calls/not-parallel",
         "live-tool-schema": "live-tool-schema/no-call", "live-tool-reasoning": "live-tool-reasoning/no-call"},
    ),
    "drafter-undeclared": (
        None,
        {"scripts/reference.env": lambda t: t.replace("SPEC_TYPE=draft-simple", "SPEC_TYPE=none")},
        # the running reference drafts, the files no longer say so: its argv differs too
        {"live-drafter": "live-drafter/undeclared-drafter", "host-process-argv": "host-process-argv/argv-differs"},
    ),
    "rule-on-unexported-series": (
        None,
        {
            "prometheus/llm-fleet.yml": lambda t: t.replace(
                "  - name: llm-vllm\n",
                "      - alert: LlmKvCacheFull\n        expr: llamacpp:kv_cache_usage_ratio > 0.9\n"
                "  - name: llm-vllm\n",
            )
        },
        {"live-metrics": "live-metrics/rule-series-missing"},
    ),
    "rule-names-service-in-other-namespace": (
        None,
        {
            "prometheus/llm-fleet.yml": lambda t: t.replace(
                "  - name: llm-vllm\n",
                "      - alert: ReferenceQueueing\n"
                '        expr: vllm:num_requests_waiting{job="reference"} > 0\n'
                "  - name: llm-vllm\n",
            )
        },
        {"live-metrics": "live-metrics/rule-series-missing"},
    ),
    "projector-undeclared": (None, {}, {"live-vision": "live-vision/image-accepted"}),
    "projector-random": (None, VISION_TRUE, {"live-vision-colour": "live-vision-colour/colour-not-named"}),
}
PROFILE_LINE = 'profile = "profiles/smollm2-135m-instruct-q4_1.toml"\n'
# Controls that run against the shared reference process of the variant (only the declaration differs).
ON_REFERENCE = {
    "vision-without-mmproj",
    "drafter-undeclared",
    "rule-on-unexported-series",
    "rule-names-service-in-other-namespace",
}


def _raised_codes() -> set[str]:
    """Every failure code a live check declares as its own (``fleetgate.checks``: its ``codes=``, the readiness
    codes the endpoint client raises for live-health and live-chat among them), and the rate limit. The client's
    other transport codes are the fault and proxy tests' (FAULT_CODES, PROXY_CODES)."""
    load_checks("live")
    own = {code for check in REGISTRY.values() if check.kind == "live" for code in check.codes
           if code.split("/", 1)[1] not in TRANSPORT_CODES}
    return own | {"live-chat/rate-limited"}


def test_every_live_failure_code_has_a_reproduction() -> None:
    shown = {code for _, _, failing in CONTROLS.values() for code in failing.values()}
    shown |= FAULT_CODES | PROXY_CODES | BOUND_CODES | AGENT_CODES | STREAM_WAIT_CODES
    assert {code.split("/", 1)[0] for code in shown if code.startswith("live-")} == live_checks()
    assert _raised_codes() - shown == set()


def test_every_text_decided_code_is_reproduced_under_every_variant() -> None:
    """conftest.TEXT_DECIDED_CODES names codes a live check raises, and each is a control's verdict under
    every numerics variant: dropping a variant never drops a text-decided verdict from the run."""
    assert _raised_codes() >= TEXT_DECIDED_CODES
    for variant in VARIANTS:
        shown = {code for v, name in CASES if v == variant for code in CONTROLS[name][2].values()}
        assert TEXT_DECIDED_CODES - shown == set(), variant


@pytest.fixture(scope="session")
def requantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference model requantized to Q8_0: the same architecture and vocabulary, another payload."""
    out = tmp_path_factory.mktemp("requantized") / "SmolLM2-135M-Instruct.Q8_0.gguf"
    subprocess.run(
        [str(llama_bin_dir() / "llama-quantize"), "--allow-requantize", str(model_dir() / MODEL_FILE), str(out),
         "Q8_0", "1"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def _token_id(url: str, text: str) -> int:
    tokens = httpx.post(url + "/tokenize", json={"content": text}, timeout=10).json()["tokens"]
    assert len(tokens) == 1, tokens
    return int(tokens[0])


# Each control under the numerics variants whose verdict generated text decides (conftest.variants_for).
CASES = [(variant, name) for variant in VARIANTS for name in CONTROLS if variant in variants_for(CONTROLS[name][2])]


@pytest.mark.parametrize(("variant", "name"), CASES, ids=[f"{v}-{n}" for v, n in CASES], indirect=["variant"])
def test_control(
    name: str,
    variant: str,
    reference_in: ReferenceServer,
    control: Callable[[Edit | str], ReferenceServer],
    fleet_copy: Callable[[FleetEdits], Path],
    gate: Callable[..., GateHere],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    no_api_key: None,
) -> None:
    edit, fleet_edits, failing = CONTROLS[name]
    declared: Path | None = None
    if name == "other-model-file":
        other = tmp_path / "another-model.gguf"
        other.symlink_to(model_dir() / MODEL_FILE)
        edit = lambda a: set_value(a, "--model", str(other))  # noqa: E731
    if name in ("payload-replaced", "payload-removed", "payload-other-in-place"):
        # The process loads a Q8_0 file at the path the files declare; then the declared (Q4_1) payload is
        # put at that path. The path matches; the header does not (INC-53).
        directory = tmp_path / "models"
        directory.mkdir()
        declared = directory / MODEL_FILE
        shutil.copyfile(request.getfixturevalue("requantized"), declared)
        edit = lambda a: set_value(a, "--model", str(declared))  # noqa: E731
        fleet_edits = {
            "scripts/reference.env": lambda t: t.replace(
                "MODEL_DIR=${REFERENCE_MODELS:-/opt/fleetgate/models}", f"MODEL_DIR={directory}"
            ),
            "fleet.toml": lambda t: t.replace(
                'payload = ["/opt/fleetgate/models/SmolLM2-135M-Instruct.Q4_1.gguf"]', f'payload = ["{declared}"]'
            ),
        }
        if name == "payload-removed":
            declare_payload = fleet_edits["fleet.toml"]
            fleet_edits["fleet.toml"] = lambda t: declare_payload(t).replace(PROFILE_LINE, "")
    if name == "garbage":
        bang = _token_id(reference_in.url, "!")
        edit = lambda a: [*a, "--logit-bias", f"{bang}+100"]  # noqa: E731
    if name.startswith("projector-"):
        projector = write_random_projector(tmp_path / "mmproj-random.gguf")
        edit = lambda a: [*a, "--mmproj", str(projector)]  # noqa: E731
    url = reference_in.url if name in ON_REFERENCE else control(edit).url  # type: ignore[arg-type]
    if declared is not None and name == "payload-replaced":
        replacement = declared.with_suffix(".new")
        replacement.symlink_to(model_dir() / MODEL_FILE)
        replacement.replace(declared)  # a new inode at the path; the process keeps what it mapped
    if declared is not None and name == "payload-removed":
        declared.unlink()  # the process keeps what it mapped; nothing is left to compare it with
    fleet_toml = fleet_copy(fleet_edits) if fleet_edits else None
    run = gate(url, fleet_toml=fleet_toml, variant=variant)
    vision = fleet_edits is VISION_TRUE
    if name not in ON_REFERENCE:
        # the process runs the rendered argv with one edit: the host sees it too
        failing = {"host-process-argv": "host-process-argv/argv-differs", **failing}
    assert run.outcomes == expected_outcomes(failing, vision=vision), run.output
    if name == "garbage":
        # not judged, and why: the words filled max_tokens before a call could open
        assert run.note("live-tool-calls").startswith("not judged: ") and \
            "ran to max_tokens (48) in words before any call ('!!!" in run.note("live-tool-calls"), run.output
    if name == "projector-random":
        # the mechanics are proven: the image is accepted and billed as the projector's patches
        assert run.note("live-vision") == f"image accepted, {IMAGE_TOKENS} image tokens billed"

