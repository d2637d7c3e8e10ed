"""Where each check is collected: the one table of the test modules fleetgate supplies (``seams/test_*.py``,
``live/test_*.py``), the way pytest collects doctests from a text file instead of a test module a user must copy.

A module's path and its checks' order are its node ids' first part (``seams/test_argv.py::test_engine_accepts_argv``),
which waivers, JUnit and reports name: a check keeps its place here once it has one. A test function is named after
its check (``test_`` and the name, less a ``live-`` or ``host-`` prefix); it takes ``seam``, ``live`` or
``host_check`` as its check's kind says.

PYTEST_DONT_REWRITE: data and the text of the supplied modules, no test's assert.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DIRECTORIES", "MODULES", "CheckModule"]

DIRECTORIES = ("seams", "live")
"""The directories of the supplied modules, under pytest's rootdir."""


@dataclass(frozen=True)
class CheckModule:
    path: str
    """Relative to pytest's rootdir, ``/``-separated."""
    about: str
    """The module's docstring: what its checks hold (the seed's items they cover)."""
    checks: tuple[str, ...]

    @property
    def directory(self) -> str:
        return self.path.partition("/")[0]

    @property
    def filename(self) -> str:
        return self.path.rpartition("/")[2]

    @staticmethod
    def function(check: str) -> str:
        """The test function of ``check``: ``live-health`` -> ``test_health``, ``unit-user`` -> ``test_unit_user``."""
        for prefix in ("live-", "host-"):
            check = check.removeprefix(prefix)
        return "test_" + check.replace("-", "_")

    @staticmethod
    def argument(check: str) -> str:
        """The parameter the plugin gives ``check``'s test (``_seams``, ``_live``, ``_host``)."""
        if check.startswith("live-"):
            return "live"
        return "host_check" if check.startswith("host-") else "seam"

    def source(self) -> str:
        """The module's text: what pytest imports and shows in a traceback, at the module's own path."""
        lines = [repr(self.about), "", "import pytest", ""]
        if self.directory == "seams":
            lines += ["pytestmark = pytest.mark.seam", ""]
        for check in self.checks:
            argument = self.argument(check)
            lines += ["", f"@pytest.mark.check({check!r})", f"def {self.function(check)}({argument}):", f"    {argument}.run()", ""]
        return "\n".join(lines)


MODULES = (
    CheckModule("seams/test_argv.py", "llama-server accepts every flag the serve script passes.", ("engine-accepts-argv",)),
    CheckModule("seams/test_bench.py", "Bench harnesses measure what they claim: llama-bench's separators, depth and cells, the "
                "transient unit's limits, vllm bench's tokenizer and --ignore-eos (B-H-1..5, B-H-8).", ("bench-harness",)),
    CheckModule("seams/test_build.py", "The engine's build targets the host's GPU architecture and bundles its runtime at the "
                "loader's depth (B-DV-5, B-UN-3).", ("build-script",)),
    CheckModule("seams/test_context.py", "--parallel divides the context; every slot stays within the trained window (B-CTX-1..5, "
                "INC-07).", ("slots-divide-context", "slot-within-trained-window", "slots-divide-pool")),
    CheckModule("seams/test_coresidence.py", "Co-residence: services that can hold one card at once (llama-swap groups, two units "
                "on one host) fit it together; vLLM's fraction is free on a card it shares (issue 32).",
                ("co-residence-fits", "vllm-start-headroom")),
    CheckModule("seams/test_deploy.py", "The deploy script's readiness probes can succeed (B-TO-6, B-UN-6); its payload gate names "
                "what the units load (B-MM-4).", ("deploy-probes", "deploy-payload")),
    CheckModule("seams/test_devices.py", "The engine sees exactly its cards (B-DV-1..4, INC-19, INC-29).", ("device-visibility",)),
    CheckModule("seams/test_docs.py", "The runbooks' index agrees with the pages and with what is deployed (B-DOC-1..6).",
                ("docs-index", "docs-shapes")),
    CheckModule("seams/test_drafter.py", "The draft context runs on the card it was sized for (B-FIT-13, B-FIT-7, INC-03, INC-10, "
                "INC-58).", ("drafter-placement",)),
    CheckModule("seams/test_embeddings.py", "A llama-server asked for embeddings is started with --embeddings (issue "
                "32).", ("embeddings-served",)),
    CheckModule("seams/test_fleet.py", "Fleet-level findings: duplicate host:port, a rendered port that is not the declared one, "
                "inf/nan.", ("fleet-numbers-finite", "service-ports-unique", "rendered-port-matches")),
    CheckModule("seams/test_memory.py", "The ledger holds the floors: cards, balance, drafter, prompt cache (B-FIT-1/2/7, "
                "B-PC-1..3).", ("card-floor", "card-balance", "drafter-kv-fits", "prompt-cache-holds-slot")),
    CheckModule("seams/test_pins.py", "The contract's sampler defaults, reasoning and KV precision are what the argv passes "
                "(B-UN-8/9/10).", ("contract-pins",)),
    CheckModule("seams/test_profile.py", "Every llama.cpp service declares its model's profile (the ledger's and the context "
                "seams' input).", ("profile-declared",)),
    CheckModule("seams/test_proxy.py", "A routing proxy pins only continuations by a 4 KiB window (B-UN-14), and its load fits a "
                "card's pool (INC-39/40).", ("proxy-routing", "proxy-capacity")),
    CheckModule("seams/test_render.py", "The serve script starts the engine from this repository's files (B-SH-3, B-SH-4, "
                "INC-53).", ("serve-script-renders",)),
    CheckModule("seams/test_rules.py", "Alert rules and dashboards offline; no retired name anywhere (B-OB-1/2/3/5, B-DOC-10, "
                "INC-16, INC-24).", ("rules-exported", "rules-drafter-alert", "retired-names")),
    CheckModule("seams/test_runbook.py", "What a service's runbook requires of its engine is what it is started with (B-UN-12, "
                "B-CTX-8).", ("runbook-settings",)),
    CheckModule("seams/test_reuse.py", "--cache-reuse is kept by the engine: not beside a projector, not on a "
                "sliding-window model without --swa-full (issue 32).", ("cache-reuse-kept",)),
    CheckModule("seams/test_security.py", "What every fleet owes its network and its hosts: an engine other machines reach "
                "asks for a key; an engine in a container does not run as root (issue 32).",
                ("engine-auth", "container-user")),
    CheckModule("seams/test_shell.py", "An explicitly empty variable omits its flag (B-SH-1, INC-57).", ("empty-means-omit",)),
    CheckModule("seams/test_speculative.py", "Speculative decoding is wired the way the engine can load it (B-SP-1..8, INC-13, "
                "INC-15, INC-16).", ("speculative-wiring", "engine-build-minimum")),
    CheckModule("seams/test_swap.py", "After a swap every consumer names the same payload at its size (B-SW-1/2/3, INC-02, "
                "INC-68, INC-76).", ("payload-consistency", "payload-defaults")),
    CheckModule("seams/test_timeouts.py", "Timeouts nest inside-out with strict > (B-TO-1..4, INC-45, INC-46).", ("timeouts-nest",)),
    CheckModule("seams/test_tools.py", "A server promising tool calls keeps jinja on, and its chat template is there and "
                "describes the tools (issue 32).", ("tools-need-jinja", "chat-template")),
    CheckModule("seams/test_units.py", "Units and Quadlets: install target, user, memlock, restart, env files, ExecStart= "
                "arguments, ports, image form, compile cache, container paths (B-UN-1/2, B-RAM-4, B-SH-3, B-VL-13..16, "
                "INC-35/36/53/79/85).",
                ("unit-install", "unit-user", "unit-memlock", "unit-restart", "unit-env-files", "unit-exec-args", "quadlet-image",
                 "quadlet-compile-cache", "container-paths")),
    CheckModule("seams/test_vision.py", "Vision needs an explicit --mmproj the service declares (B-MM-1, B-MM-2, INC-08).",
                ("vision-mmproj",)),
    CheckModule("seams/test_volumes.py", "A mount path's variables are set where compose or systemd expands them (issue "
                "32).", ("volume-variables",)),
    CheckModule("seams/test_vllm.py", "vLLM memory knobs (B-VL-1..5, INC-30, INC-31, INC-42).", ("vllm-memory-knobs", "vllm-starts")),
    CheckModule("seams/test_vllm_argv.py", "vLLM argv as the pinned release reads it; flags the fleet's rules forbid (INC-88, "
                "B-VL-8, B-FIT-12).", ("vllm-argv", "forbidden-flags")),
    CheckModule("seams/test_vllm_mm.py", "A vLLM vision endpoint keeps its multimodal limits (B-MM-6, B-VL-3).", ("vllm-mm-limits",)),
    CheckModule("seams/test_vllm_spec.py", "vLLM's speculative depth within its drafter's block and at a measured depth (B-SP-11, "
                "B-SP-4, B-SP-1).", ("vllm-speculative-depth",)),
    CheckModule("live/test_host.py", "The service's host, read through testinfra: systemd's view of the unit, the engine's "
                "process, its libraries, its memory and cards (INC-53, INC-88, INC-75, INC-10, B-DV, B-RAM-1, B-RAM-4, B-UN-1/2/3, "
                "C-H-3).",
                ("host-unit-state", "host-unit-drop-ins", "host-unit-limits", "host-boot-persistence", "host-process-argv",
                 "host-process-env", "host-exposure", "host-runtime-libs", "host-payload", "host-memavailable",
                 "host-vram-vs-ledger")),
    CheckModule("live/test_live_caches.py", "Speculation, prefix cache, capacity (C.3, C.4, INC-16, INC-83).",
                ("live-drafter", "live-prefix-cache", "live-capacity")),
    CheckModule("live/test_live_capabilities.py", "Capabilities: tool calls, vision, reasoning field, reasoning efforts, "
                "structured output, the reasoning of earlier turns, nested and long arguments, a call with reasoning on "
                "(C.2, INC-08, INC-26, INC-72).",
                ("live-tool-calls", "live-vision", "live-vision-colour", "live-reasoning", "live-reasoning-effort",
                 "live-structured-output", "live-reasoning-turns", "live-parallel-tool-calls", "live-tool-schema",
                 "live-tool-reasoning")),
    CheckModule("live/test_live_generation.py", "Generation: a real completion, a well-formed stream, greedy determinism (C-L-3, "
                "C-PF-1, C-SP-6).", ("live-chat", "live-stream", "live-determinism")),
    CheckModule("live/test_live_identity.py", "Liveness and identity: health, alias, payload, slots, sampler defaults (C.1, "
                "C-CAP-1, INC-53).", ("live-health", "live-alias", "live-payload", "live-slots", "live-sampler-defaults")),
    CheckModule("live/test_live_metrics.py", "Observability: /metrics and the series the fleet's rules name (B.11, INC-24).",
                ("live-metrics",)),
)
