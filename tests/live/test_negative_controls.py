"""Misconfigured reference servers: each makes exactly the expected live checks fail, with their messages.

Every server here is the real llama-server started from the reference's rendered argv with one edit
-- the files still declare what the process no longer does, which is how INC-53 happened -- or the
real reference checked against a fleet copy whose contract says something else. Together with
test_faults.py, every registered live check is shown failing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgate.checks import REGISTRY, get_check
from fleetgate.reference import ReferenceServer, model_dir

from .conftest import Gate, drop, set_value
from .mmproj import IMAGE_TOKENS, write_random_projector
from .test_faults import FAULT_CHECKS

Edit = Callable[[list[str]], list[str]]

# control -> (argv edit, fleet edits, the checks that must fail, a message each must carry)
CONTROLS: dict[str, tuple[Edit | None, dict[str, Callable[[str], str]], dict[str, str]]] = {
    "wrong-alias": (
        lambda a: set_value(a, "--alias", "somebody-else"),
        {},
        {"live-alias": "/v1/models lists 'somebody-else'"},
    ),
    "other-model-file": (
        None,
        {},  # argv edit needs tmp_path: built in the test
        {"live-payload": "/props model_path = "},
    ),
    "no-metrics": (lambda a: drop(a, "--metrics", 0), {}, {"live-metrics": "GET /metrics: HTTP 501"}),
    "no-drafter": (
        lambda a: drop(drop(drop(a, "--spec-type"), "--spec-draft-model"), "--spec-draft-n-max"),
        {},
        {"live-drafter": "no drafting across a counting request"},
    ),
    "window-other": (
        lambda a: set_value(a, "--ctx-size", "2048"),
        {},
        {
            "live-slots": "1024 tokens per slot, not 2048",
            "live-capacity": "the engine's window is 1024 tokens, not 2048",
        },
    ),
    "vision-without-mmproj": (
        None,
        {
            "fleet.toml": lambda t: t.replace(
                "[services.reference.contract]\nvision = false",
                "[services.reference.contract]\nvision = true",
            )
        },
        {
            "live-vision": "/props modalities.vision is False; the image request answered HTTP 500",
            "live-vision-colour": "HTTP 500",
        },
    ),
    "sampler-other": (
        lambda a: set_value(a, "--temp", "0.7"),
        {},
        {"live-sampler-defaults": "temperature = 0.7"},
    ),
    "builtin-template": (
        lambda a: drop(a, "--chat-template-file"),
        {},
        {
            "live-tool-calls": "tool_choice required: ",
            "live-reasoning": "message.reasoning_content is",
            "live-reasoning-effort": "'high' answered 200, not 400",
        },
    ),
    "reasoning-in-content": (
        lambda a: set_value(a, "--reasoning-format", "none"),
        {},
        {"live-reasoning": "the content carries"},
    ),
    "no-prompt-cache": (
        lambda a: [*set_value(a, "--cache-ram", "0"), "--slot-prompt-similarity", "0"],
        {},
        {"live-prefix-cache": "-token prompt reused"},
    ),
    "drafter-undeclared": (
        None,
        {"scripts/reference.env": lambda t: t.replace("SPEC_TYPE=draft-simple", "SPEC_TYPE=none")},
        {"live-drafter": "drafting on an endpoint whose files declare no drafter"},
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
        {"live-metrics": "1 series named by the rules are not exported"},
    ),
    "projector-undeclared": (None, {}, {"live-vision": "an image was accepted"}),
    "projector-random": (
        None,
        {
            "fleet.toml": lambda t: t.replace(
                "[services.reference.contract]\nvision = false",
                "[services.reference.contract]\nvision = true",
            )
        },
        {"live-vision-colour": "for a solid red 256x256 PNG"},
    ),
}
# Controls that run against the shared reference process (only the declaration differs).
ON_REFERENCE = {"vision-without-mmproj", "drafter-undeclared", "rule-on-unexported-series"}


def test_every_live_check_has_a_failing_case() -> None:
    get_check("live-health")
    live = {name for name, check in REGISTRY.items() if check.kind == "live"}
    shown = {check for _, _, expected in CONTROLS.values() for check in expected} | FAULT_CHECKS
    assert live - shown == set()


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control(
    name: str,
    reference: ReferenceServer,
    control: Callable[[Edit], ReferenceServer],
    fleet_copy: Callable[[dict[str, Callable[[str], str]]], Path],
    gate: Callable[..., Gate],
    tmp_path: Path,
    no_api_key: None,
) -> None:
    edit, fleet_edits, expected = CONTROLS[name]
    if name == "other-model-file":
        other = tmp_path / "another-model.gguf"
        other.symlink_to(model_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf")
        edit = lambda a: set_value(a, "--model", str(other))  # noqa: E731
    if name.startswith("projector-"):
        projector = write_random_projector(tmp_path / "mmproj-random.gguf")
        edit = lambda a: [*a, "--mmproj", str(projector)]  # noqa: E731
    url = reference.url if name in ON_REFERENCE else control(edit).url  # type: ignore[arg-type]
    fleet_toml = fleet_copy(fleet_edits) if fleet_edits else None
    run = gate(url, fleet_toml=fleet_toml)
    assert run.failed == set(expected), run.output
    for check, message in expected.items():
        assert message in run.note(check), (check, run.note(check))
    # every other check that applies passed: nothing else broke
    assert run.passed | run.failed == set(run.checks)
    if name == "projector-random":
        # the mechanics are proven: the image is accepted and billed as the projector's patches
        assert run.note("live-vision") == f"image accepted, {IMAGE_TOKENS} image tokens billed"
