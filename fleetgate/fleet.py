"""A fleet as fleet.toml declares it: hosts and their cards, services, clients, timeout chains, waivers.

These are the typed values only; ``fleetgate.manifest`` reads and validates fleet.toml into them.

The manifest holds only what the fleet's own files cannot say: which hosts exist and what cards they
carry, where each service's env file, serve script and unit live, and the few promises a file cannot
express (the per-card floor, the timeout nesting, which reasoning efforts a template accepts).
Everything else is read from the files themselves by the renderer.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fleetgate.engines.llama_builds import image_build
from fleetgate.engines.vllm import image_release, is_vllm_image
from fleetgate.errors import read_text
from fleetgate.toml_keys import KeyIndex

__all__ = [
    "DEFAULT_BINARY",
    "GIB",
    "LOOPBACK",
    "Bench",
    "Client",
    "Contract",
    "Device",
    "Engine",
    "EngineBuild",
    "EnvTemplate",
    "Extrapolation",
    "Fleet",
    "Host",
    "NonFinite",
    "PinGate",
    "Proxy",
    "Service",
    "ShapeFlags",
    "TimeoutChain",
    "TimeoutRef",
    "Waiver",
    "gib",
]

GIB = 1 << 30
LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""The addresses that are this machine: a host's ``address``, an engine's listen address, a URL's host."""
Engine = Literal["llama.cpp", "vllm", "openai"]
DEFAULT_BINARY: Mapping[str, str] = {"llama.cpp": "llama-server", "vllm": "vllm", "openai": "openai-server"}


def gib(value: float) -> str:
    """Bytes as every message of fleetgate writes them: ``12.34 GiB``."""
    return f"{value / GIB:.2f} GiB"


@dataclass(frozen=True)
class Device:
    name: str
    vram_bytes: int
    index: int
    serves: bool = True


@dataclass(frozen=True)
class Host:
    name: str
    ram_bytes: int
    devices: tuple[Device, ...]
    card_floor_bytes: int | None
    balance_slack_bytes: int | None
    vllm_max_gpu_memory_utilization: float | None
    address: str | None = None
    gpu_arch: str | None = None
    """The cards' GPU architecture (gfx1201, sm_86): what an engine build must target (B-DV-5)."""
    ledger_tolerance_bytes: int | None = None
    """How much more a card may use than the ledger predicts (host-vram-vs-ledger, C-H-3, INC-10)."""
    cpu_features: frozenset[str] | None = None
    """The CPU flags the host's engine build uses (``cpu_features``): they decide CPU_REPACK and AMX weights."""
    device_gids: frozenset[int] | None = None
    """The GIDs that own the host's GPU device nodes (``stat -c %g /dev/kfd /dev/dri/renderD*``): a container's
    numeric group is judged against them; the ``render`` GID differs between distributions."""

    @property
    def cards(self) -> tuple[Device, ...]:
        """The devices that serve models (a hidden iGPU is not a card)."""
        return tuple(d for d in self.devices if d.serves)


@dataclass(frozen=True)
class Extrapolation:
    max_ratio: float
    why: str


@dataclass(frozen=True)
class Contract:
    vision: bool | None = None
    tools: bool | None = None
    reasoning_field: str | None = None
    reasoning_effort: Mapping[str, int] = field(default_factory=dict)
    context_window: int | None = None
    ngram_window: tuple[int, int] | None = None
    endpoints: tuple[str, ...] = ()
    api_key_env: str | None = None
    alias: str | None = None
    slots: int | None = None
    """Conversations clients run at once: each needs its own slot, or it queues (INC-07)."""
    concurrent_mmproj: str | None = None
    """The projector type the publisher requires for concurrent image requests (B-MM-3, INC-59)."""
    mm_limits: Mapping[str, int] | None = None
    """vLLM: the items per prompt each modality accepts (``--limit-mm-per-prompt``), as clients are told (B-MM-6)."""
    sampler: Mapping[str, float] = field(default_factory=dict)
    """Sampler defaults clients are promised: temperature, top_p, top_k (B-UN-8)."""
    reasoning_budget: int | None = None
    """The reasoning budget clients are promised; -1 unlimited (B-UN-9)."""
    kv_cache_type: str | None = None
    """The KV precision the endpoint keeps, K and V (B-UN-10)."""

    draft_acceptance_min: float | None = None
    """The live gate's floor on draft acceptance (default: the fleet's own alert-rule threshold)."""
    ttft_s: float | None = None
    """Bound on the time to the first streamed token (default: derived from the measured rates)."""
    chunk_gap_s: float | None = None
    """Bound on the gap between streamed chunks (default: derived from the measured rates)."""
    structured_output: bool | None = None
    """Whether the engine honours ``response_format`` JSON schemas (a grammar); None: what the engine is known to do
    (llama.cpp and vLLM do), else not judged."""
    parallel_tool_calls: bool | None = None
    """Whether one answer may carry several tool calls (clients that run them at once); false: a request for them
    must be refused or answered with one call."""
    reasoning_replay: str | None = None
    """Which earlier reasoning traces the chat template renders back into the prompt: ``after-last-user`` (the turns
    after the last user message: an agent's trace while it works through tool results), ``always``, ``never``."""


@dataclass(frozen=True)
class Bench:
    """A bench harness script of a service: run under bash with ``binary`` stubbed, like a serve script."""

    script: Path
    binary: str
    """The program the harness runs (llama-bench, vllm, systemd-run): the stub that records each call."""


@dataclass(frozen=True)
class PinGate:
    """The engine's pin gate (B-RAM-1, B-RAM-2): it starts only while the host's MemAvailable is at least
    ``pinned_bytes + floor_bytes``."""

    pinned_bytes: int
    floor_bytes: int
    meminfo: str
    """The host file MemAvailable is read from: /proc/meminfo, or the serve script's seam (B-SH-5)."""
    where: str
    """fleet.toml and the line of ``[services.NAME.pin_gate]``."""

    @property
    def gate_bytes(self) -> int:
        return self.pinned_bytes + self.floor_bytes


@dataclass(frozen=True)
class EngineBuild:
    """Which build of its engine a service runs: the fork and its build number (B-SP-10), a vLLM version, or
    the image it pulls and the build that image resolves to (issue 20: the argv is read as that build reads it)."""

    fork: str
    """``mainline`` or the fork's name (``vendor``: the llama.cpp vendor fork)."""
    number: int | None
    """The llama.cpp build number: declared, or read from an image tag that pins one (``server-cuda-b6300``)."""
    version: str | None = None
    """A vLLM release (``0.13.0``): declared (``vllm = "0.13.0"``), or read from the tag of a vLLM image."""
    image: str | None = None
    """The image reference the service pulls; a tag without a build number floats."""

    @property
    def floating(self) -> bool:
        """An image whose tag pins no build (or, for vLLM's own images, no release): what runs changes with the
        next pull."""
        if self.image is None:
            return False
        if is_vllm_image(self.image):
            return image_release(self.image) is None
        return image_build(self.image) is None


@dataclass(frozen=True)
class ShapeFlags:
    """The flags by which an engine fleetgate has no argv model for takes its slots and its KV pool."""

    slots: str
    pool: str
    """The flag giving the whole pool of positions, divided over the slots."""


@dataclass(frozen=True)
class EnvTemplate:
    """An env file an install script of the repository renders from a template (``env_file = { template, script }``):
    the render runs the script in its sandbox and reads what it wrote at ``writes``."""

    template: Path
    script: Path
    writes: str | None
    """The host path the script writes; None: the unit's ``EnvironmentFile=`` that the repository does not hold."""
    where: str
    """fleet.toml:LINE of the declaration."""


@dataclass(frozen=True)
class Service:
    name: str
    host: str
    port: int
    engine: Engine
    state: Literal["active", "rollback", "undeployed"]
    binary: str
    serve_script: Path
    env_file: Path | None
    unit: Path | None
    payload: tuple[str, ...]
    profile: Path | None
    draft_profile: Path | None
    projector_profile: Path | None
    """Profile (or GGUF) of the --mmproj the service loads, for the ledger."""
    omittable: tuple[str, ...]
    extrapolation: Extrapolation | None
    contract: Contract
    calibration: Mapping[str, Any]
    line: int | None
    """The line of ``[services.NAME]`` in fleet.toml."""
    payload_manifest: Path | None = None
    """The fetch script's manifest: one ``SIZE SHA256 PATH`` line per payload file."""
    benches: tuple[Bench, ...] = ()
    """Bench harness scripts that measure this service (B.15)."""
    build: Bench | None = None
    """The script that builds and installs the service's engine, with the build tool it runs (cmake)."""
    pin_gate: PinGate | None = None
    """The MemAvailable the engine needs before a start (``[services.NAME.pin_gate]``)."""
    engine_build: EngineBuild | None = None
    """The engine build the service runs, where the fleet declares it (``engine_build = { fork, number }``)."""
    shape_flags: ShapeFlags | None = None
    """For an openai engine: the flags that set its slots and pool (``shape_flags = { slots, pool }``)."""
    compose: Path | None = None
    """A docker/podman compose file that starts the engine (``fleetgate.sources.compose``)."""
    compose_service: str | None = None
    """The compose service that is this service (None: the service's own name)."""
    kubernetes: Path | None = None
    """A Kubernetes manifest (rendered: no chart, no kustomization) whose workload starts the engine
    (``fleetgate.sources.kubernetes``)."""
    kubernetes_workload: str | None = None
    """The workload of that manifest that is this service, ``KIND/NAME`` (None: the manifest's only workload)."""
    kubernetes_container: str | None = None
    """The container of that workload's pod that runs the engine (None: the pod's only container)."""
    ansible_vars: tuple[Path, ...] = ()
    """Where ``unit`` or ``llama_swap`` is an Ansible role's ``.j2`` template: the group_vars/host_vars files of the
    service's host, lowest precedence first (``fleetgate.sources.ansible``)."""
    nix_unit: str | None = None
    """Where ``unit`` is a NixOS ``.nix`` file: the unit it generates that is this service (``llama-cpp`` for
    ``services.llama-cpp``, NAME for ``systemd.services.NAME``; None: the file's only engine unit)."""
    llama_swap: Path | None = None
    """llama-swap's config.yaml that starts the engine (``fleetgate.sources.llama_swap``), instead of a script or unit."""
    llama_swap_model: str | None = None
    """The model of that config this service is (``models.NAME``; default: the service's name)."""
    models_preset: Path | None = None
    """llama.cpp's router preset (``--models-preset FILE.ini``) that starts the engine (``fleetgate.sources.router_preset``)."""
    preset_model: str | None = None
    """The section of that preset this service is (default: the service's name)."""
    models_max: int | None = None
    """The router's ``--models-max``: the preset's models it keeps loaded at once (0 or less: no limit; None:
    undeclared, the router's default 4)."""
    exclusive_with: tuple[str, ...] = ()
    """Services of the same host that never run at once with this one: not co-resident on its cards."""
    env_template: EnvTemplate | None = None
    """``env_file = { template, script }``: the env file an install script renders."""


@dataclass(frozen=True)
class Client:
    name: str
    env_file: Path
    dialect: Literal["systemd", "podman", "bash"]


@dataclass(frozen=True)
class Proxy:
    """A routing proxy in front of single-card replicas of one endpoint (the retired frank-medium-proxy)."""

    name: str
    host: str
    state: Literal["active", "retired"]
    config: Path
    """Its env file: ROUTING, AFFINITY_BYTES, LARGE_TOKENS / LARGE_LIMIT, REPLICAS."""
    dialect: Literal["systemd", "podman", "bash"]
    pool_tokens: int | None
    """Each replica's KV pool in tokens, from its boot ledger (``replica_kv_pool``)."""
    pool_boot: str | None
    conversations: int | None
    """How many conversations it must carry at once, and the tokens each keeps cached (``conversations``)."""
    conversation_tokens: int | None
    line: int | None


@dataclass(frozen=True)
class TimeoutRef:
    owner: str | None
    """The service or client whose env file holds the variable; None for a fixed budget."""
    variable: str | None
    name: str
    seconds: float | None


@dataclass(frozen=True)
class TimeoutChain:
    name: str
    chain: tuple[TimeoutRef, ...]
    why: str
    cites: tuple[str, ...]
    line: int | None


@dataclass(frozen=True)
class Waiver:
    """A known failure accepted until a date (``[[waivers]]`` in fleet.toml)."""

    code: str
    """A failure code, or a check name (every code of that check)."""
    service: str
    reason: str
    expires: datetime.date
    """The last day the waiver holds."""
    line: int | None

    def covers(self, service: str, code: str) -> bool:
        return service == self.service and (code == self.code or code.split("/", 1)[0] == self.code)

    def expired(self, today: datetime.date) -> bool:
        return today > self.expires

    def describe(self) -> str:
        return f"waiver {self.code} for {self.service} until {self.expires.isoformat()}: {self.reason}"


@dataclass(frozen=True)
class NonFinite:
    keys: tuple[str, ...]
    value: float
    line: int | None

    @property
    def key(self) -> str:
        return ".".join(self.keys)


@dataclass(frozen=True)
class Fleet:
    path: Path
    name: str
    deploy_root: str | None
    hosts: Mapping[str, Host]
    services: Mapping[str, Service]
    clients: Mapping[str, Client]
    timeouts: tuple[TimeoutChain, ...]
    rules: tuple[Path, ...]
    dashboards: tuple[Path, ...] = ()
    retired_names: tuple[str, ...] = ()
    policies: frozenset[str] = frozenset()
    """The house rules this fleet keeps (``[fleet] policies``; ``fleetgate.policies``)."""
    docs_index: Path | None = None
    deploy_probes: Path | None = None
    """The deploy script's readiness probes, one 'SERVICE URL BUDGET_SECONDS' line per service (B-TO-6)."""
    deploy_script: Path | None = None
    proxies: Mapping[str, Proxy] = field(default_factory=dict)
    """The deploy script (``deploy.sh TARGET --service NAME``), run by the deploy seams with ``ssh`` stubbed (B-MM-4)."""
    non_finite: tuple[NonFinite, ...] = ()
    """inf/nan values anywhere in the manifest (TOML allows them); the ``fleet-numbers-finite`` seam fails on them."""
    waivers: tuple[Waiver, ...] = ()
    key_index: KeyIndex | None = field(default=None, compare=False, repr=False)
    """Where each key of fleet.toml is, read once with the file (``where`` looks keys up in it)."""
    engine_copies: dict[str, tuple[Path, ...]] = field(default_factory=dict, compare=False, repr=False)
    """Copies of an engine binary found in the repository, by binary name: walked once per loaded fleet."""

    @property
    def root(self) -> Path:
        return self.path.parent

    def where(self, *keys: str) -> str:
        """``fleet.toml:LINE`` for a key path, for failure messages."""
        index = self.key_index or KeyIndex(read_text(self.path, "the fleet manifest"))
        line = index.line(keys)
        return f"{self.path}:{line}" if line else str(self.path)

    def host_of(self, service: Service) -> Host:
        return self.hosts[service.host]
