"""House rules a fleet opts into: conventions of one fleet, not facts of every fleet.

A check that holds for every fleet (the engine refuses the argv, systemd would reject or default a value,
two services bind one port, a card does not fit) runs by default. A fleet's conventions (a named service
user rather than a transient one, ``--kv-cache-memory 0``, a drafter alert rule, slot padding, a docs index, deploy probes, payload
manifests, bench harnesses) are *policies*: a fleet lists the ones it keeps in ``[fleet] policies`` of
fleet.toml, or turns one on by declaring the artefact it is about (``docs_index``, ``deploy_probes``, a
service's ``bench``). A policy that is off is one skip per check for the whole fleet, naming how to turn it on,
instead of one skip per service.

Some policies govern a whole check (``forbidden-flags``); others one failure code of a universal
check (``slot-padding`` is ``slots-divide-context/slot-padding``): the check consults ``policy_on`` before that
branch. Which checks and codes a policy governs is said on each check's declaration (``policy=``,
``policy_codes=``: fleetgate.checks), never here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet

__all__ = ["POLICIES", "Policy", "policy_off", "policy_on"]


@dataclass(frozen=True)
class Policy:
    name: str
    summary: str
    """The convention, in one line."""
    declared_by: Callable[[Fleet], bool] | None = None
    """The fleet.toml declaration that turns the policy on by itself (the artefact the policy checks)."""
    declaration: str = ""
    """That declaration, as the skip reason names it."""


def _any_service(attribute: str) -> Callable[[Fleet], bool]:
    def declared(fleet: Fleet) -> bool:
        return any(getattr(s, attribute) for s in fleet.services.values())
    return declared


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("service-user", "a systemd unit names its service user (User=NAME), not a transient DynamicUser="),
    Policy("unlimited-memlock", "a ROCm engine's unit sets LimitMEMLOCK=infinity for its pinned staging buffers"),
    Policy("local-images", "a Quadlet's Image= is a locally built tag (localhost/NAME:TAG)"),
    Policy("vllm-compile-cache", "a containerised vLLM keeps its torch.compile cache (/root/.cache) on a host volume"),
    Policy("vllm-kv-cache-memory", "vLLM is always passed --kv-cache-memory 0 (the KV pool profiled, never pinned)"),
    Policy("model-profiles", "every llama.cpp service declares its model's profile, so the memory and context seams "
           "judge every service (without the policy a missing profile is not judged)"),
    Policy("slot-padding", "--ctx-size is slots x a per-slot window that is a multiple of 256, so llama.cpp pads nothing"),
    Policy("forbidden-flags", "no --fit on for llama.cpp (the fit is fleetgate's ledger) and no --expert-precise-memory "
           "on vLLM"),
    Policy("drafter-alert", "every speculative-decoding service has a Prometheus rule on its drafter going quiet"),
    Policy("docs-index", "every runbook page is registered in a docs index with a status marker, and documents the "
           "shapes fleet.toml deploys and the settings its runbooks require",
           declared_by=lambda fleet: fleet.docs_index is not None, declaration="docs_index = PATH"),
    Policy("deploy-probes", "the deploy script's readiness probe of every deployed service can succeed",
           declared_by=lambda fleet: fleet.deploy_probes is not None, declaration="deploy_probes = PATH"),
    Policy("deploy-payload", "the deploy script's payload gate names every file each unit loads",
           declared_by=lambda fleet: fleet.deploy_script is not None, declaration="deploy_script = PATH"),
    Policy("payload-manifest", "a fetch manifest (SIZE SHA256 PATH per file) lists each service's payload",
           declared_by=_any_service("payload_manifest"), declaration="services.NAME.payload_manifest = PATH"),
    Policy("bench-harness", "bench harness scripts pass llama-bench and vllm bench flags they take",
           declared_by=_any_service("benches"), declaration="services.NAME.bench = [{ script, binary }]"),
    Policy("build-script", "the engine's build script targets the hosts' GPU architecture and installs where units "
           "start it",
           declared_by=_any_service("build"), declaration="services.NAME.build = { script, binary }"),
    Policy("retired-names", "no retired service, job or variable name in the repository's live files",
           declared_by=lambda fleet: bool(fleet.retired_names), declaration="[fleet] retired_names = [...]"),
    Policy("routing-proxy", "a routing proxy pins continuations only and carries the declared conversations",
           declared_by=lambda fleet: bool(fleet.proxies), declaration="[proxies.NAME]"),
)}


def policy_on(fleet: Fleet, name: str) -> bool:
    """Whether the fleet keeps the policy: listed in ``[fleet] policies``, or its artefact declared."""
    policy = POLICIES[name]
    if name in fleet.policies:
        return True
    return policy.declared_by is not None and policy.declared_by(fleet)


def policy_off(fleet: Fleet, name: str | None) -> str | None:
    """Why a check under the policy ``name`` (a check's ``policy``) does not run on this fleet, or None when it runs
    (None, a check of every fleet, always runs)."""
    if name is None or policy_on(fleet, name):
        return None
    policy = POLICIES[name]
    how = f'list "{policy.name}" in [fleet] policies'
    if policy.declaration:
        how = f"declare {policy.declaration} (or {how})"
    return f"policy {policy.name} is off for this fleet ({policy.summary}): {how} to check it"
