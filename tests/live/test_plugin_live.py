"""The live plugin without an engine: skipping, choosing endpoints, usage errors, rules and dialects."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.live.dialects import dialect_for
from fleetgate.live.metrics import rule_selectors

from .conftest import LIVE


def test_live_without_an_endpoint_is_a_usage_error(pytester: pytest.Pytester) -> None:
    # a CI step that lost its --endpoint must not go green with everything skipped
    result = pytester.runpytest_subprocess(str(LIVE), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*22 live test(s) collected but no endpoint to check*--skip-live*"])


def test_skip_live_skips_on_purpose(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(LIVE), "--skip-live", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=22 + 11)  # the live checks, and the host checks of live/test_host.py
    result.stdout.fnmatch_lines(["*live tests skipped: --skip-live was given*"])


def test_a_host_without_an_address_needs_a_base_url(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(LIVE), "--endpoint", "frank-zealot", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*services.frank-zealot: host 'rtx3090' has no address*declare hosts.rtx3090.address, or pass "
         "--base-url frank-zealot=URL*"]
    )


def test_all_means_every_active_service(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        str(LIVE),
        "--endpoint",
        "all",
        "--base-url",
        "frank-zealot=http://192.0.2.1:8080",
        "--base-url",
        "frank-dragoon=http://192.0.2.2:8080",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    ids = {line.rsplit("[", 1)[-1].rstrip("]") for line in result.stdout.lines if "::" in line}
    # frank-medium is a rollback (explicit only) and frank-tts is undeployed (nothing listens)
    assert ids == {"frank-archon", "frank-zealot", "frank-dragoon", "reference"}


def test_several_endpoints_need_named_base_urls(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        str(LIVE),
        "--endpoint",
        "reference",
        "--endpoint",
        "frank-zealot",
        "--base-url",
        "http://127.0.0.1:1",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*with several endpoints say which: --base-url NAME=URL*"])


def test_an_undeployed_service_is_refused(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(LIVE), "--endpoint", "frank-tts", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ['*services.frank-tts is state = "undeployed": nothing listens there to check*']
    )


def test_rules_name_series_through_a_promql_parser(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n- name: g\n  rules:\n"
        '  - alert: A\n    expr: sum by (job) (rate({__name__="llamacpp:x_total", job="svc"}[5m])) > 0\n'
        "  - alert: B\n    expr: vllm:y offset 5m / on() group_left vllm:z\n",
        encoding="utf-8",
    )
    found = [(s.alert, s.series, s.job, s.where.rsplit(":", 1)[-1]) for s in rule_selectors([rules])]
    assert found == [
        ("A", "llamacpp:x_total", "svc", "5"),
        ("B", "vllm:y", None, "7"),
        ("B", "vllm:z", None, "7"),
    ]


def test_a_rule_that_is_not_promql_is_an_input_error(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n- name: g\n  rules:\n  - alert: Broken\n    expr: rate(llamacpp:x[5m] > 0\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match=r"rules.yml:5: rule Broken: not valid PromQL"):
        rule_selectors([rules])


@pytest.mark.parametrize(
    ("engine", "status", "body", "numbers"),
    [
        # tools/server/server-common.cpp (llama.cpp build 11434), as the reference answered it
        (
            "llama.cpp",
            400,
            {
                "error": {
                    "code": 400,
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 2084,
                    "n_ctx": 2048,
                    "message": "request (2084 tokens) exceeds the available "
                    "context size (2048 tokens), try increasing it",
                }
            },
            (2084, 2048),
        ),
        # vllm/v1/engine/input_processor.py
        (
            "vllm",
            400,
            {
                "error": {
                    "message": "The decoder prompt (length 200001) is longer than the maximum model "
                    "length of 196608. Make sure that `max_model_len` is no smaller than "
                    "the number of text tokens."
                }
            },
            (200001, 196608),
        ),
        ("vllm", 200, {"choices": []}, None),
    ],
)
def test_over_window_refusals_are_read_per_dialect(
    engine: str, status: int, body: dict[str, object], numbers: tuple[int, int] | None
) -> None:
    error = body.get("error")
    message = str(error.get("message", "")) if isinstance(error, dict) else ""
    refusal = dialect_for(engine).over_window(status, body, message)  # type: ignore[arg-type]
    assert (refusal.prompt_tokens, refusal.window) == numbers if refusal else numbers is None


def test_a_local_render_of_another_shape_is_one_line(pytester: pytest.Pytester) -> None:
    """What a conftest.py's ``pytest_fleetgate_live_render`` gives the live render must be a LocalRender (or None):
    anything else is a usage error naming what was expected, before anything is collected."""
    pytester.makepyfile(other_shape="""
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_fleetgate_live_render(service):
            return {"REFERENCE_MODELS": "/elsewhere"}
    """)
    result = pytester.runpytest_subprocess(str(LIVE), "--endpoint", "reference", "-p", "other_shape", "-p",
                                           "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest_fleetgate_live_render returned {'REFERENCE_MODELS': '/elsewhere'} for "
                                 "reference; expected None or fleetgate.live.LocalRender(overrides={VARIABLE: 'value'}, "
                                 "payload=('/absolute/path', ...))"])


def test_the_live_render_takes_what_the_hook_gives(pytester: pytest.Pytester) -> None:
    """The variables a conftest.py's ``pytest_fleetgate_live_render`` gives reach the serve script of the live render
    (and only the declared payload exists there unless it names more): the reference then looks for its model where
    the hook says."""
    pytester.makepyfile(elsewhere="""
        import pytest
        from fleetgate.live import LocalRender

        @pytest.hookimpl(tryfirst=True)
        def pytest_fleetgate_live_render(service):
            return LocalRender(overrides={"REFERENCE_MODELS": "/nowhere"})
    """)
    result = pytester.runpytest_subprocess(str(LIVE), "--endpoint", "reference", "-p", "elsewhere", "-p",
                                           "no:cacheprovider", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *serve-reference.sh:15: the serve script exited 1 without starting llama-server: "
                                 "model file missing: /nowhere/SmolLM2-135M-Instruct.Q4_1.gguf *"])
