"""Every secret the suite's tests use: the keys and tokens they give engines, gates and fleets to prove that none
reaches an output. The secret sweep (tests/secret_sweep.py) looks for each of them in everything the suite's runs
wrote, so a key a test uses and this module lacks is one the sweep cannot see: tests/test_secret_sweep.py holds every
key-like literal of tests/ to being here, and every generated key to coming from ``fresh``.

A test's key is spelled ``sk-...`` or ``hf_...`` with a digit in it, or bound to a secret name (``KEY = ...``,
``setenv("HF_TOKEN", ...)``), so that the guard knows it for one; it is long and odd enough that no other text of a
run holds it by chance.
"""

from __future__ import annotations

import re
import secrets

SECRETS: dict[str, str] = {
    # tests/test_secrets.py: the scrubber's own cases
    "SCRUB_KEY": "sk-live-4f9a1c77e2",
    "SCRUB_NESTED_KEY": "sk-abcdef12",
    "SCRUB_JSON_TOKEN": "hf_abcdef123",
    # tests/test_secrets.py and tests/host/test_from_host_systemd.py: a unit's Environment=HF_TOKEN=...
    "UNIT_TOKEN": "hf_reference_9c1d7e20",
    # tests/test_reports.py, tests/test_reports_live.py: the fake $FLEETGATE_API_KEY of the report tests
    "REPORT_KEY": "sk-fleetgate-fake-4c9e1f0b7a",
    "REPORT_LIVE_KEY": "sk-fleetgate-fake-77d1c0ffee",
    # tests/test_reports_live.py: the key a curl names by its variable
    "CURL_KEY": "k-123456",
    # tests/test_init_from_host.py: a host's engine key, its token, and a unit's --api-key
    "FROM_HOST_KEY": "sk-from-host-7f3a9c21",
    "FROM_HOST_TOKEN": "hf_fromhost_55e0b1d2",
    "FROM_HOST_UNIT_KEY": "sk-unit-0a1b2c3d",
    # tests/host/from_host_systemd_probe.py (run on its own, standard library alone: it keeps its literals)
    "PROBE_KEY": "sk-probe-7f3a9c",
    "PROBE_TOKEN": "hf_probe_5e0b1d2a",
    # tests/ledger/test_remote_profile.py, tests/hostile/test_hostile_remote.py: the Hub's token
    "PROFILE_TOKEN": "hf_secret_never_printed",
    "HUB_TOKEN": "hf_never_shown_0123456789",
    # tests/test_sources_kubernetes.py: a Secret's value
    "K8S_SECRET": "hf_plain_token",
    # tests/test_fleets.py: a key the mutated fleets' files hold
    "FLEET_FILE_KEY": "fixture-not-a-secret",
    # tests/hostile: a file outside the fleet that no reader may follow a link to
    "OUTSIDE_KEY_MATERIAL": "SECRET-KEY-MATERIAL",
    # tests/live/test_vllm_controls.py: the key the real vLLM is started with
    "VLLM_ENGINE_KEY": "sk-vllm-engine-3d9e51c7",
    # tests/live/test_transcripts.py: the gate's key, a key on the engine's argv alone, a token of the environment
    "TRANSCRIPT_GIVEN": "sk-gate-given-5e1f0a9c",
    "TRANSCRIPT_NEVER_GIVEN": "sk-engine-only-b7c24d11",
    "TRANSCRIPT_ENVIRONMENT": "hf_environment_token_93ac",
    # tests/live/test_faults.py: the key an endpoint echoes back
    "ECHOED_KEY": "sk-fleetgate-test-0123456789",
    # tests/test_secret_sweep.py: the key the sweep's own tests plant
    "PLANTED_KEY": "sk-sweep-planted-6d2f0b93",
}
"""Name (what the sweep says it found) to value."""

GENERATED_PREFIXES = ("sk-env-", "hf_env_")
"""The prefixes of keys made afresh for each run (``fresh``): the sweep matches the prefix and the 24 hex digits."""

GENERATED = re.compile("(?:" + "|".join(re.escape(prefix) for prefix in GENERATED_PREFIXES) + r")[0-9a-f]{24}(?![0-9a-f])")


def fresh(prefix: str) -> str:
    """A key no run has used before (a leak of one run cannot hide in another's), that the sweep still knows."""
    if prefix not in GENERATED_PREFIXES:
        raise ValueError(f"{prefix!r}: a generated key's prefix is one of {GENERATED_PREFIXES} (the sweep matches them)")
    return prefix + secrets.token_hex(12)


def masked(key: str) -> str:
    """A key as the sweep prints it: its first four characters, never the whole (the sweep's output is an output)."""
    return f"{key[:4]}***({len(key)} chars)"


def found_in(line: str) -> list[tuple[str, str]]:
    """The secrets ``line`` holds, as (name, masked form), in the order of ``SECRETS`` and then of the line; a
    generated key is named by its prefix (``generated sk-env-``)."""
    found = [(name, masked(value)) for name, value in SECRETS.items() if value in line]
    for match in GENERATED.finditer(line):
        prefix = next(p for p in GENERATED_PREFIXES if match.group(0).startswith(p))
        found.append((f"generated {prefix}", masked(match.group(0))))
    return found
