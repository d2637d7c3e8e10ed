"""The run's renderer: every render a run asks for made once, counted, and asked through the subject."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from fleetgate import sandbox
from fleetgate.manifest import load_fleet
from fleetgate.render.rendered import Renderer, load_service, share_attempts, unshare_attempts
from fleetgate.render.types import RenderRefused
from fleetgate.runner import FleetInputs

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet" / "fleet.toml"


@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every request sent to the sandbox parent from here on (the sandbox's probe made first, outside the count)."""
    assert sandbox.sandbox_problem() is None
    sent: list[object] = []
    real = sandbox._exchange

    def counted(request: Any, wait: float) -> Any:
        sent.append(request)
        return real(request, wait)

    monkeypatch.setattr(sandbox, "_exchange", counted)
    return sent


def test_a_probe_asked_twice_is_rendered_once(exchanges: list[object]) -> None:
    fleet = load_fleet(FLEET)
    renderer = Renderer()
    config = load_service(fleet, fleet.services["frank-zealot"], renderer)
    # The sandboxed runs the renderer counted are the ones the sandbox parent was sent (its env file read by bash too,
    # unless this process read that text before).
    made = len(exchanges)
    assert (renderer.renders, renderer.reused, renderer.runs) == (1, 0, made)
    first = config.probe({"PORT": "7799"})
    again = config.probe({"PORT": "7799"})
    assert again is first and "7799" in first.argv
    assert (renderer.renders, renderer.reused, renderer.runs) == (2, 1, made + 1) and len(exchanges) == made + 1
    # Another question is another render.
    config.probe({"PORT": "7800"})
    assert (renderer.renders, renderer.reused, renderer.runs) == (3, 1, made + 2) and len(exchanges) == made + 2


def test_a_refusal_is_kept_and_raised_again(exchanges: list[object]) -> None:
    fleet = load_fleet(FLEET)
    renderer = Renderer()
    config = load_service(fleet, fleet.services["frank-zealot"], renderer)
    # frank-zealot's script refuses to start with no model file named (MODEL unset: its default is not declared).
    with pytest.raises(RenderRefused) as first:
        config.probe({"MODEL": ""})
    with pytest.raises(RenderRefused) as again:
        config.probe({"MODEL": ""})
    assert again.value is first.value
    assert (renderer.renders, renderer.reused, renderer.runs) == (2, 1, len(exchanges))


def test_the_runner_renders_every_service_through_one_renderer() -> None:
    inputs = FleetInputs(load_fleet(FLEET))
    attempts = inputs.attempts()
    assert {a.config.renderer for a in attempts.values() if a.config is not None} == {inputs.renderer}
    assert inputs.renderer.renders == len(inputs.fleet.services)


def test_a_worker_gets_an_empty_renderer_of_its_own() -> None:
    inputs = FleetInputs(load_fleet(FLEET))
    back = unshare_attempts(share_attempts(inputs.attempts()))
    renderers = {a.config.renderer for a in back.values() if a.config is not None}
    assert len(renderers) == 1
    (renderer,) = renderers
    assert renderer is not inputs.renderer and (renderer.renders, renderer.reused, renderer.runs) == (0, 0, 0)


def test_the_probes_checks_declare_are_made_ahead_in_few_sessions(exchanges: list[object]) -> None:
    from fleetgate.checks import load_checks
    from fleetgate.runner import planned_probes

    load_checks("seam")
    inputs = FleetInputs(load_fleet(FLEET))
    configs = [a.config for a in inputs.attempts().values() if a.config is not None]
    own = len(exchanges)
    plans = {config.name: planned_probes(config) for config in configs}
    # frank-zealot: each payload variable unset (payload-defaults), its omittable variable set to a marker and emptied
    # (empty-means-omit), the deploy gate run as it (deploy-payload)
    zealot = next(c for c in configs if c.name == "frank-zealot")
    assert sorted(str(p.overrides) for p in plans["frank-zealot"] if p.service is None) == sorted(
        [*(str({v: None}) for v in ("MMPROJ", "MODEL", "DRAFT_MODEL") if v in zealot.variables
           and zealot.variables[v].value in zealot.service.payload),
         "{'SPEC_PRESENCE_PENALTY': 'fleetgate-probe-spec_presence_penalty'}", "{'SPEC_PRESENCE_PENALTY': ''}"])
    planned = sum(len(p) for p in plans.values())
    # The first ask makes every service's planned probes: sessions of at most 16 runs, then no session for any of them.
    first = next(p for p in plans["frank-zealot"] if p.service is None)
    with pytest.raises(RenderRefused):
        zealot.probe(first.overrides)  # MODEL unset: the script refuses (its ${MODEL:?} has no default)
    made = len(exchanges) - own
    assert made == -(-planned // 16) and inputs.renderer.renders == len(configs) + planned
    for config in configs:
        for probe in plans[config.name]:
            with contextlib.suppress(RenderRefused):
                config.probe(probe.overrides, args=probe.args, service=probe.service)
    assert len(exchanges) - own == made and inputs.renderer.reused == 1  # frank-zealot's first, asked again


def test_every_declared_probe_is_one_a_check_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe declared but asked otherwise (another override, another pseudo service) would be rendered twice: once
    ahead, never asked, and once when asked. After the example fleet's seams, nothing made ahead is left unasked."""
    from fleetgate import runner

    made: list[Renderer] = []
    planned = runner.planned_renderer

    def recorded() -> Renderer:
        made.append(planned())
        return made[-1]

    monkeypatch.setattr(runner, "planned_renderer", recorded)
    outcomes = runner.run_seams(FLEET)
    assert outcomes and len(made) == 1
    (renderer,) = made
    assert renderer._ahead == {} and renderer.reused == 0


def test_a_waived_failure_finds_its_where_only_when_its_text_is_read(exchanges: list[object]) -> None:
    """frank-zealot's engine-auth/no-key is waived (fleet.toml [[waivers]]): the re-render that finds where its
    --host comes from runs when the outcome's text is read, and the text is the one the same failure unwaived has."""
    import dataclasses

    from fleetgate.checks import get_check, load_checks
    from fleetgate.runner import run, seam_subjects

    load_checks("seam")
    check = get_check("engine-auth")
    inputs = FleetInputs(load_fleet(FLEET))
    subject = next(s for s in seam_subjects(check, inputs) if s.name == "frank-zealot")
    assert subject.waivers
    inputs.attempts()  # every service's own render, before the count
    before = len(exchanges)
    waived = run(check, subject)
    assert (waived.outcome, waived.code) == ("waived", "engine-auth/no-key")
    assert len(exchanges) == before  # nothing rendered for a where nobody read
    text = waived.text
    assert len(exchanges) > before  # the where's probe (with the service's planned ones), once the text is read
    assert "  where:    " in text and text == str(waived.text)
    unwaived = run(check, dataclasses.replace(subject, waivers=()))
    assert (unwaived.outcome, unwaived.code) == ("failed", "engine-auth/no-key")
    assert unwaived.text == text


def test_a_where_that_cannot_be_found_is_said_in_the_text_never_raised_where_it_is_read() -> None:
    """A waived failure's where is found when its text is read, which may be in a report hook: a search that fails
    there says so in the where line instead of raising."""
    from fleetgate.failure import Deferred, Failure, waived_here

    def search() -> str:
        raise RuntimeError("the sandbox is gone")

    with waived_here(lambda service, code: True):
        failure = Failure(service="svc", check="engine-auth", code="engine-auth/no-key", observed="o", expected="e",
                          fix="f", where=Deferred(search))
    assert failure.where == "(its file:line could not be found: RuntimeError: the sandbox is gone)"
    assert "the sandbox is gone" in str(failure)
