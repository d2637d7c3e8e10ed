"""Every seam is shown failing: each catalogued mutation of the example fleet changes exactly its outcomes.

The seams run on a mutated copy of fixtures/fleet through the runner the plugin and the catalogue share
(``fleetgate.runner.run_seams``, in this process). The outcome of every (subject, check) is compared with the
clean fleet's, written out below: the entry's failures (subject and failure code), the checks it turns into
skips, and nothing else may change. Two catalogues share this one harness: fixtures/incidents (past incidents)
and fixtures/branches (one mutation per seam failure code that no incident reaches). The clean fleet and a sample
of the mutations also run through the real plugin (pytester): the same outcomes and failure texts.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from fleetgate.incidents import Entry, apply, load_catalogue
from fleetgate.runner import run_seams as run_seams_here

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
SEAMS = REPO / "seams"
# The incidents' own mutations run in-process in tests/test_catalogue.py against the same CLEAN table;
# here the plugin's path is proven on the rule mutations and the branch reproductions.
CATALOGUES = ("incidents/rules", "branches")
CATALOGUE = [entry for name in CATALOGUES for entry in load_catalogue(REPO / "fixtures" / name)]

PASSED, SKIPPED, NOT_JUDGED, WAIVED = "passed", "skipped", "not-judged", "waived"
LLAMA_CHECKS = ("engine-accepts-argv", "profile-declared", "slots-divide-context", "slot-within-trained-window",
                "device-visibility", "card-floor", "card-balance", "drafter-kv-fits", "prompt-cache-holds-slot",
                "speculative-wiring", "vision-mmproj", "serve-script-renders", "empty-means-omit", "rendered-port-matches",
                "drafter-placement")
UNIT_CHECKS = ("unit-install", "unit-user", "unit-restart", "unit-env-files", "unit-exec-args")
QUADLET_CHECKS = ("quadlet-image", "container-paths")
HOST_SEAMS = (*UNIT_CHECKS, "unit-memlock", "forbidden-flags", "rules-drafter-alert")


def _outcomes(subject: str, checks: Iterable[str], skipped: Iterable[str] = ()) -> dict[tuple[str, str], str]:
    skips = set(skipped)
    return {(subject, check): SKIPPED if check in skips else PASSED for check in checks}


# The clean example fleet, by hand: every seam on every subject it could concern. A skip is a seam that
# cannot see its subject, and says what to declare.
CLEAN: dict[tuple[str, str], str] = {
    # llama.cpp, two ROCm cards: every seam holds; no variable is declared omittable.
    **_outcomes("frank-medium", LLAMA_CHECKS, skipped=["empty-means-omit"]),
    # llama.cpp on the one-card 3090: nothing to balance, no drafter.
    **_outcomes("frank-zealot", LLAMA_CHECKS, skipped=["card-balance", "drafter-kv-fits", "speculative-wiring",
                                                       "drafter-placement"]),
    # llama.cpp on CPU (the reference): no card to hold a floor, balance or a draft context on.
    **_outcomes("reference", LLAMA_CHECKS, skipped=["device-visibility", "card-floor", "card-balance",
                                                    "drafter-kv-fits", "empty-means-omit", "drafter-placement"]),
    **_outcomes("frank-archon", ("device-visibility", "vllm-memory-knobs", "vllm-starts", "serve-script-renders",
                                 "empty-means-omit", "rendered-port-matches"), skipped=["empty-means-omit"]),
    # The fleet as a whole: no inf/nan, no two active services on one host:port.
    **_outcomes("frank", ("fleet-numbers-finite", "service-ports-unique")),
    # No host runs two active services (frank-medium is frank-archon's rollback): nothing shares a card.
    ("frank", "co-residence-fits"): SKIPPED,
    **_outcomes("frank-dragoon", ("serve-script-renders", "empty-means-omit"), skipped=["empty-means-omit"]),
    **_outcomes("frank-tts", ("serve-script-renders", "empty-means-omit"), skipped=["empty-means-omit"]),
    # The host engineer's seams: units and Quadlets, vLLM argv, forbidden flags, rules (issue 9).
    **_outcomes("frank-medium", (*HOST_SEAMS, *QUADLET_CHECKS), skipped=QUADLET_CHECKS),
    **_outcomes("frank-zealot", (*HOST_SEAMS, *QUADLET_CHECKS),
                skipped=["unit-memlock", "rules-drafter-alert", *QUADLET_CHECKS]),
    **_outcomes("reference", (*HOST_SEAMS, *QUADLET_CHECKS), skipped=[*UNIT_CHECKS, "unit-memlock", *QUADLET_CHECKS]),
    **_outcomes("frank-archon", (*HOST_SEAMS, "vllm-argv", "quadlet-compile-cache", *QUADLET_CHECKS),
                skipped=["unit-user", "unit-memlock"]),
    **_outcomes("frank-dragoon", (*UNIT_CHECKS, *QUADLET_CHECKS), skipped=QUADLET_CHECKS),
    **_outcomes("frank-tts", (*UNIT_CHECKS, *QUADLET_CHECKS), skipped=QUADLET_CHECKS),
    **_outcomes("frank", ("rules-exported", "retired-names", "docs-index")),
    # The retired replica era's routing proxy (B-UN-14, INC-37..40): adaptive, a 4 KiB window, three ~30k loops on two
    # cards' 122,636-token pools.
    **_outcomes("frank", ("proxy-routing", "proxy-capacity")),
    # Docs shapes (B-DOC-4): held where the rendered argv gives slots x window (halogen: its shape_flags);
    # the speech shim has no shape.
    **_outcomes("frank-medium", ("docs-shapes",)),
    **_outcomes("frank-zealot", ("docs-shapes",)),
    **_outcomes("frank-archon", ("docs-shapes",)),
    **_outcomes("reference", ("docs-shapes",)),
    **_outcomes("frank-dragoon", ("docs-shapes",)),
    ("frank-tts", "docs-shapes"): SKIPPED,
    # An engine without an argv model holds its slots x window through fleet.toml's shape_flags (halogen).
    ("frank-dragoon", "slots-divide-pool"): PASSED,
    ("frank-tts", "slots-divide-pool"): SKIPPED,
    # Engine build minimums (B-SP-10): only frank-zealot declares its build (vendor 10777).
    **_outcomes("frank-zealot", ("engine-build-minimum",)),
    **{(s, "engine-build-minimum"): SKIPPED for s in ("frank-medium", "reference")},
    # Deploy probes (B-TO-6): every service with a unit; the reference is run by `fleetgate reference`, not deployed.
    **_outcomes("frank-medium", ("deploy-probes",)),
    **_outcomes("frank-zealot", ("deploy-probes",)),
    **_outcomes("frank-archon", ("deploy-probes",)),
    **_outcomes("frank-dragoon", ("deploy-probes",)),
    **_outcomes("frank-tts", ("deploy-probes",)),
    ("reference", "deploy-probes"): SKIPPED,
    # The deploy script's payload gate (B-MM-4): every deployed service whose env file names payload its unit loads;
    # frank-archon's env names container paths, frank-tts loads none, the reference is not deployed.
    **_outcomes("frank-medium", ("deploy-payload",)),
    **_outcomes("frank-zealot", ("deploy-payload",)),
    **_outcomes("frank-dragoon", ("deploy-payload",)),
    **{(s, "deploy-payload"): SKIPPED for s in ("frank-archon", "frank-tts", "reference")},
    # Only frank-medium and the reference name their fetch manifest.
    **_outcomes("frank-medium", ("payload-consistency",)),
    **_outcomes("reference", ("payload-consistency",)),
    **{(s, "payload-consistency"): SKIPPED for s in ("frank-zealot", "frank-archon", "frank-dragoon", "frank-tts")},
    # Serve-script defaults against the env file's payload (B-SW-2): every service whose env file names a declared
    # payload file; frank-archon's env names container paths (/models/...) of the host directories its payload declares; frank-tts has none.
    **_outcomes("frank-medium", ("payload-defaults",)),
    **_outcomes("frank-zealot", ("payload-defaults",)),
    **_outcomes("frank-dragoon", ("payload-defaults",)),
    **_outcomes("reference", ("payload-defaults",)),
    **{(s, "payload-defaults"): SKIPPED for s in ("frank-archon", "frank-tts")},
    # Bench harnesses (B.15): declared by frank-medium (llama-bench, systemd-run) and frank-archon (vllm bench).
    **_outcomes("frank-medium", ("bench-harness",)),
    **_outcomes("frank-archon", ("bench-harness",)),
    **{(s, "bench-harness"): SKIPPED for s in ("frank-zealot", "frank-dragoon", "frank-tts", "reference")},
    # Contract pins (B-UN-8/9/10): only frank-medium's contract declares them.
    **_outcomes("frank-medium", ("contract-pins",)),
    **{(s, "contract-pins"): SKIPPED for s in ("frank-zealot", "reference")},
    # The engine's build script: declared by frank-medium only.
    **_outcomes("frank-medium", ("build-script",)),
    **{(s, "build-script"): SKIPPED for s in ("frank-archon", "frank-zealot", "frank-dragoon", "frank-tts", "reference")},
    # vLLM's multimodal limits (B-MM-6) and speculative depth (B-SP-11): the one vLLM service, a vision endpoint
    # whose drafter arms are measured.
    **_outcomes("frank-archon", ("vllm-mm-limits", "vllm-speculative-depth")),
    # The runbooks' Deployed configuration tables (B-UN-12): only frank-dragoon's page has one (halogen's cache knob).
    ("frank-dragoon", "runbook-settings"): PASSED,
    **{(s, "runbook-settings"): SKIPPED for s in ("frank-medium", "frank-zealot", "frank-archon", "frank-tts", "reference")},
    # engine-auth (issue 32, docs/seams.md): the three engines listen on every address with no API key, a true
    # finding this fleet waives for its home LAN until 2027-06-30 (fleet.toml [[waivers]]); the reference binds
    # 127.0.0.1. halogen and the speech shim are engines fleetgate has no argv model for.
    **{(s, "engine-auth"): WAIVED for s in ("frank-medium", "frank-archon", "frank-zealot")},
    ("reference", "engine-auth"): SKIPPED,
    # No service passes --cache-reuse; frank-archon, the one vLLM, runs beside nothing (frank-medium is its rollback).
    **{(s, "cache-reuse-kept"): SKIPPED for s in ("frank-medium", "frank-zealot", "reference")},
    ("frank", "vllm-start-headroom"): SKIPPED,
    # frank-archon's Quadlet mounts literal paths; no other service is started by a Quadlet or compose.
    ("frank-archon", "volume-variables"): PASSED,
    **{(s, "embeddings-served"): SKIPPED for s in ("frank-medium", "frank-zealot", "reference")},
    # Every llama.cpp service of frank promises tool calls, with jinja on (the build's default).
    **{(s, "tools-need-jinja"): PASSED for s in ("frank-medium", "frank-zealot", "reference")},
    # The reference's template is the repository's own (scripts/reference-chat.jinja) and describes the tools it is
    # offered; frank-medium's and frank-zealot's are their GGUFs' own, and the models are not on this machine.
    ("reference", "chat-template"): PASSED,
    **{(s, "chat-template"): NOT_JUDGED for s in ("frank-medium", "frank-zealot")},
    # No engine of frank runs in a container but frank-archon, a rootless Quadlet (its root is dank's).
    **{(s, "container-user"): SKIPPED for s in ("frank-medium", "frank-archon", "frank-zealot", "frank-dragoon", "frank-tts",
                                                "reference")},
    **{(s, "volume-variables"): SKIPPED for s in ("frank-medium", "frank-zealot", "frank-dragoon", "frank-tts", "reference")},
    **_outcomes("tts-budgets", ("timeouts-nest",)),
    **_outcomes("scriptwriting-under-webui", ("timeouts-nest",)),
    **_outcomes("scriptwriting-at-app-default", ("timeouts-nest",)),
}


class _Checks:
    """Which check and subject each collected test item is (read from the item, not from its name)."""

    def __init__(self) -> None:
        self.of: dict[str, tuple[str, str]] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            marker = item.get_closest_marker("check")
            if marker is not None and isinstance(item, pytest.Function):
                self.of[item.nodeid] = (item.callspec.id, str(marker.args[0]))


def run_seams(pytester: pytest.Pytester, fleet_toml: Path) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """Run seams/ on a fleet: the outcome of every (subject, check) -- passed, skipped, not-judged (a skip that
    carries its not-judged line), waived (xfail) or the failure code -- and the text of each failure."""
    checks = _Checks()
    recorder = pytester.inline_run(str(SEAMS), f"--fleet={fleet_toml}", "-p", "no:cacheprovider", "-q",
                                   "--import-mode=importlib", plugins=[checks])
    outcomes: dict[tuple[str, str], str] = {}
    texts: dict[tuple[str, str], str] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        key = checks.of[report.nodeid]
        if report.failed:
            text = str(report.longrepr)
            subject, _, rest = text.splitlines()[0].partition(": ")
            assert subject == key[0], text
            outcomes[key] = rest.split(" [")[0]
            texts[key] = text
        elif report.skipped and hasattr(report, "wasxfail"):
            outcomes[key] = WAIVED  # pytest's xfail: a failure a waiver of fleet.toml covers
        elif report.skipped:
            unjudged = any(name == "fleetgate.not_judged" for name, _ in report.user_properties)
            outcomes[key] = NOT_JUDGED if unjudged else SKIPPED
        elif report.when == "call":
            outcomes.setdefault(key, PASSED)
    assert set(outcomes) == set(checks.of.values()), "a collected seam reported no outcome"
    return outcomes, texts


def outcomes_here(fleet_toml: Path) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """``run_seams``'s outcomes through the runner in this process: the same (subject, check) keys and values."""
    outcomes: dict[tuple[str, str], str] = {}
    texts: dict[tuple[str, str], str] = {}
    for outcome in run_seams_here(fleet_toml):
        key = (outcome.subject, outcome.check)
        assert key not in outcomes, f"{key} judged twice"
        outcomes[key] = outcome.code if outcome.outcome == "failed" and outcome.code else outcome.outcome
        if outcome.outcome == "failed":
            texts[key] = outcome.text
    return outcomes, texts


def test_the_example_fleet_gives_exactly_the_written_outcomes(pytester: pytest.Pytester) -> None:
    outcomes, texts = run_seams(pytester, FLEET / "fleet.toml")
    assert not texts, list(texts.values())
    assert outcomes == CLEAN
    assert outcomes_here(FLEET / "fleet.toml") == (CLEAN, {})


def _ids(entries: Iterable[Entry]) -> list[str]:
    return [f"{e.path.parent.name}/{e.path.stem}" for e in entries]


# Through the plugin as well: a rule mutation, a service that no longer renders (every other seam of it skips), a
# fleet-wide seam's failure.
PLUGIN_SAMPLE = [e for e in CATALOGUE if e.path.stem in ("B-CTX-3", "serve-script-renders.broken-input", "service-ports-unique.duplicate")]


@pytest.mark.parametrize("entry", PLUGIN_SAMPLE, ids=_ids(PLUGIN_SAMPLE))
def test_the_plugin_gives_the_runners_outcomes(entry: Entry, pytester: pytest.Pytester, tmp_path: Path) -> None:
    fleet_toml = apply(entry, FLEET, tmp_path / "fleet")
    outcomes, texts = run_seams(pytester, fleet_toml)
    here, texts_here = outcomes_here(fleet_toml)
    assert outcomes == here
    assert set(texts) == set(texts_here) != set()
    for key, text in texts.items():
        assert texts_here[key] in text, (key, text, texts_here[key])


@pytest.mark.parametrize("entry", CATALOGUE, ids=_ids(CATALOGUE))
def test_mutation_changes_exactly_its_outcomes(entry: Entry, tmp_path: Path) -> None:
    fleet_toml = apply(entry, FLEET, tmp_path / "fleet")
    outcomes, texts = outcomes_here(fleet_toml)
    expected = dict(CLEAN)
    failing = {(e.subject, e.check) for e in entry.expect}
    for subject, check in entry.skip:
        if check == "*":  # every other seam of a service that no longer renders
            expected.update({k: SKIPPED for k, v in CLEAN.items() if k[0] == subject and k not in failing})
            continue
        assert expected.get((subject, check)) == PASSED, f"{entry.id}: skip of {subject}: {check}, which is not a pass"
        expected[(subject, check)] = SKIPPED
    for subject, check in entry.passes:  # a seam the mutation makes applicable (a skip on the clean fleet)
        assert CLEAN.get((subject, check)) == SKIPPED, f"{entry.id}: passes {subject}: {check}, which is not a skip when clean"
        expected[(subject, check)] = PASSED
    for subject, check in entry.not_judged:  # a seam left without a fact it needs (a declaration removed)
        assert CLEAN.get((subject, check)) == PASSED, f"{entry.id}: not judged {subject}: {check}, which is not a pass when clean"
        expected[(subject, check)] = NOT_JUDGED
    for expectation in entry.expect:
        assert (expectation.subject, expectation.check) in expected, f"{entry.id}: no seam {expectation}"
        expected[(expectation.subject, expectation.check)] = expectation.code
    changed = {k: (CLEAN.get(k), v) for k, v in outcomes.items() if expected.get(k) != v}
    assert outcomes == expected, f"{entry.id}: (clean, now) where the entry expects otherwise: {changed}"
    for text in texts.values():
        for label in ("where:", "observed:", "expected:", "fix:"):
            assert f"  {label}" in text, f"{entry.id}: no {label} line in\n{text}"
        assert "Traceback" not in text
