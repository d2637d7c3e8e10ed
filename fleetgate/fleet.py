"""fleet.toml -> a typed, validated Fleet.

The manifest holds only what the fleet's own files cannot say: which hosts exist and what cards they
carry, where each service's env file, serve script and unit live, and the few promises a file cannot
express (the per-card floor, the timeout nesting, which reasoning efforts a template accepts).
Everything else is read from the files themselves by the renderer.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jsonschema

from fleetgate.errors import InputError, non_finite, parse_toml, read_text

__all__ = [
    "GIB",
    "Client",
    "Contract",
    "Device",
    "EngineBuild",
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
    "load_fleet",
]

GIB = 1 << 30
Engine = Literal["llama.cpp", "vllm", "openai"]
DEFAULT_BINARY: Mapping[str, str] = {"llama.cpp": "llama-server", "vllm": "vllm", "openai": "openai-server"}


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
    """A vLLM release (``0.13.0``)."""
    image: str | None = None
    """The image reference the service pulls; a tag without a build number floats."""

    @property
    def floating(self) -> bool:
        """An image whose tag pins no build: what runs changes with the next pull."""
        from fleetgate.engines.llama_builds import image_build

        return self.image is not None and image_build(self.image) is None


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


def _schema() -> dict[str, Any]:
    text = resources.files("fleetgate").joinpath("schema/fleet.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_fleet(path: Path | str, *, only: str | None = None) -> Fleet:
    """Read and validate a fleet manifest; every problem is one ``InputError`` line.

    ``only``: a fleet of that one service (hosts, clients and timeouts whole), for answering about
    one service at the cost of one, whatever the fleet's size; the other services' tables are not
    validated. An unknown name loads the whole fleet (the caller lists the names).
    """
    path = Path(path).resolve()
    text = read_text(path, "the fleet manifest")
    data = parse_toml(text, path)
    for waiver in data.get("waivers", []) if isinstance(data.get("waivers"), list) else []:
        # A TOML date is the natural way to write the expiry; the schema sees its ISO form.
        if isinstance(waiver, dict) and type(waiver.get("expires")) is datetime.date:
            waiver["expires"] = waiver["expires"].isoformat()

    try:
        todo = [keys for keys, value in _leaves(data) if value == "TODO" and keys[-1] not in ("note", "why", "reason")]
    except RecursionError:
        todo = []  # nested too deeply: the schema check below says so in one line
    if todo:
        # `fleetgate init` writes "TODO" where no file can say the value (the host's RAM, its cards): named, never guessed.
        raise InputError(path, locate_key(text, todo[0]), f"{', '.join('.'.join(k) for k in todo)} = \"TODO\": left by "
                         "fleetgate init, which no file could tell; declare each (the comment above it says how, or run "
                         "`fleetgate init --probe` on the host)")
    known = tuple(data["services"]) if isinstance(data.get("services"), dict) else ()
    if only is not None and only in known:
        data = {**data, "services": {only: data["services"][only]}}

    validator = jsonschema.Draft202012Validator(_schema())
    try:
        errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    except RecursionError:
        raise InputError(path, None, "arrays or tables nested too deeply to validate; expected a flat manifest") from None
    if errors:
        error = jsonschema.exceptions.best_match(errors) or errors[0]
        keys = tuple(str(k) for k in error.absolute_path)
        raise InputError(path, locate_key(text, keys), f"{'.'.join(keys) or '(top level)'}: {_explain(error)}")

    return _build(path, text, data, known)


def _leaves(data: Any, keys: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*keys, str(key)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, (*keys, str(i)))
    else:
        yield keys, data


def _shown(value: Any) -> str:
    """A manifest value as the operator wrote it: JSON for strings and numbers, TOML's own form for a date or time."""
    if isinstance(value, datetime.datetime):
        return f"the date-time {value.isoformat()}"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, datetime.time):
        return f"the time {value.isoformat()}"
    return json.dumps(value, default=lambda o: o.isoformat() if isinstance(o, (datetime.date, datetime.time)) else repr(o))


def _explain(error: jsonschema.ValidationError) -> str:
    validator = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    schema: Any = error.schema
    if validator == "required":
        missing = [name for name in value if name not in instance]
        return f"missing required key {missing[0]!r}"
    if validator == "additionalProperties":
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        known = ", ".join(sorted(schema.get("properties", {})))
        return f"unknown key {extra[0]!r}; expected one of: {known}"
    if validator == "type":
        return f"expected {value}, got {_shown(instance)}"
    if validator == "enum":
        allowed = ", ".join(_shown(v) for v in value)
        return f"expected one of {allowed}, got {_shown(error.instance)}"
    if validator == "pattern":
        return f"{_shown(error.instance)} does not match the expected form {error.validator_value}"
    if validator in {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}:
        bound = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[validator]
        return f"expected a value {bound} {error.validator_value}, got {_shown(error.instance)}"
    if validator == "oneOf":
        return f"expected 'service:VARIABLE' or {{name, seconds}}, got {_shown(error.instance)}"
    return str(error.message)


def _pin_gate(raw: Mapping[str, Any] | None, path: Path, line: int | None, key: str) -> PinGate | None:
    pinned = _gib_or_none(raw["pinned_gib"], path, line, f"{key}.pinned_gib") if raw is not None else None
    floor = _gib_or_none(raw["floor_gib"], path, line, f"{key}.floor_gib") if raw is not None else None
    if raw is None or pinned is None or floor is None:
        return None  # inf/nan are the fleet-numbers-finite seam's to report
    return PinGate(pinned_bytes=pinned, floor_bytes=floor,
                   meminfo=raw.get("meminfo", "/proc/meminfo"), where=f"{path}:{line}" if line else str(path))


def _build(path: Path, text: str, data: Mapping[str, Any], known: Sequence[str] = ()) -> Fleet:
    root = path.parent
    keys_index = KeyIndex(text)

    def locate_key(_: str, keys: Sequence[str]) -> int | None:
        return keys_index.line(keys)

    real_root = root.resolve()

    def repo_file(value: str | None, keys: tuple[str, ...], *, must_exist: bool = True) -> Path | None:
        """A repository file named relative to fleet.toml, confined by its real path (after ``..`` and symlinks)."""
        if value is None:
            return None
        where = locate_key(text, keys)
        if any(c in value for c in "\0\n\r\t"):
            raise InputError(path, where, f"{'.'.join(keys)}: {value!r} holds a control character; expected a plain relative path")
        try:
            file = (root / value).resolve()
        except (OSError, RuntimeError) as exc:
            raise InputError(path, where, f"{'.'.join(keys)}: cannot resolve {value!r} ({exc}); expected a repository file") from None
        if file != real_root and real_root not in file.parents:
            raise InputError(path, where, f"{'.'.join(keys)}: {value!r} resolves to {file}, outside the fleet repository "
                             f"{real_root} (after '..' and symlinks); expected a file of the repository")
        if must_exist and not file.is_file():
            kind = "is not a regular file" if file.exists() else "no such file"
            raise InputError(path, where, f"{'.'.join(keys)}: {kind} {value!r} (paths are relative to fleet.toml)")
        return file

    nonfinite = tuple(NonFinite(keys, value, locate_key(text, keys)) for keys, value in non_finite(data))

    hosts: dict[str, Host] = {}
    for name, raw in data["hosts"].items():
        devices = tuple(
            Device(name=d["name"], vram_bytes=d["vram_bytes"], index=i, serves=d.get("serves", True))
            for i, d in enumerate(raw["devices"])
        )
        def gib(key: str, host: str = name, raw: Mapping[str, Any] = raw) -> int | None:
            keys = ("hosts", host, key)
            return _gib_or_none(raw.get(key), path, locate_key(text, keys), ".".join(keys))

        hosts[name] = Host(
            name=name,
            ram_bytes=gib("ram_gib") or 0,
            devices=devices,
            card_floor_bytes=gib("card_floor_gib"),
            balance_slack_bytes=gib("balance_slack_gib"),
            vllm_max_gpu_memory_utilization=raw.get("vllm_max_gpu_memory_utilization"),
            address=raw.get("address"),
            gpu_arch=raw.get("gpu_arch"),
            ledger_tolerance_bytes=gib("ledger_tolerance_gib"),
        )

    services: dict[str, Service] = {}
    for name, raw in data["services"].items():
        keys = ("services", name)
        if raw["host"] not in hosts:
            raise InputError(path, locate_key(text, (*keys, "host")),
                             f"services.{name}.host: unknown host {raw['host']!r}; expected one of: {', '.join(hosts)}")
        contract_raw = raw.get("contract", {})
        ngram = contract_raw.get("ngram_window")
        extrapolation = raw.get("extrapolation")
        unit = repo_file(raw.get("unit"), (*keys, "unit"))
        compose = repo_file(raw.get("compose"), (*keys, "compose"))
        llama_swap = repo_file(raw.get("llama_swap"), (*keys, "llama_swap"))
        models_preset = repo_file(raw.get("models_preset"), (*keys, "models_preset"))
        serve_script = (repo_file(raw.get("serve_script"), (*keys, "serve_script")) or unit or compose or llama_swap
                        or models_preset)
        if serve_script is None:
            raise InputError(path, locate_key(text, keys), f"services.{name}: neither serve_script nor unit nor compose; "
                             "expected the file that starts the engine (a serve script, a unit whose ExecStart= runs it, "
                             "a compose file, a llama_swap config or a models_preset)")
        for other in raw.get("exclusive_with", ()):
            if (other not in data["services"] and other not in known) or other == name:
                raise InputError(path, locate_key(text, (*keys, "exclusive_with")),
                                 f"services.{name}.exclusive_with: {other!r} names no other service; expected one of: "
                                 f"{', '.join(s for s in data['services'] if s != name)}")
        for i, item in enumerate(raw.get("payload", ())):
            # an absolute host path, or where the engine fetches it from (hf://OWNER/REPO/FILE, https://...):
            # the seams read its profile from the repository (`fleetgate profile URL` writes it), never the network
            if not item.startswith(("/", "hf://", "https://", "http://")) or any(c in item for c in "\0\n\r "):
                raise InputError(path, locate_key(text, (*keys, "payload")),
                                 f"services.{name}.payload[{i}]: {item!r}; expected an absolute host path or an "
                                 "hf:// / https:// URL, on one line")
        services[name] = Service(
            name=name,
            host=raw["host"],
            port=raw["port"],
            engine=raw["engine"],
            state=raw.get("state", "active"),
            binary=raw.get("binary", DEFAULT_BINARY[raw["engine"]]),
            serve_script=serve_script,
            env_file=repo_file(raw["env_file"], (*keys, "env_file")) if isinstance(raw.get("env_file"), str) else None,
            env_template=_env_template(raw.get("env_file"), repo_file, f"{path}:{locate_key(text, (*keys, 'env_file'))}",
                                       (*keys, "env_file")),
            unit=unit,
            payload=tuple(raw.get("payload", ())),
            payload_manifest=repo_file(raw.get("payload_manifest"), (*keys, "payload_manifest")),
            pin_gate=_pin_gate(raw.get("pin_gate"), path, locate_key(text, (*keys, "pin_gate")), f"services.{name}.pin_gate"),
            profile=repo_file(raw.get("profile"), (*keys, "profile")),
            draft_profile=repo_file(raw.get("draft_profile"), (*keys, "draft_profile")),
            projector_profile=repo_file(raw.get("projector_profile"), (*keys, "projector_profile")),
            omittable=tuple(raw.get("omittable", ())),
            extrapolation=Extrapolation(**extrapolation) if extrapolation else None,
            contract=Contract(
                vision=contract_raw.get("vision"),
                tools=contract_raw.get("tools"),
                reasoning_field=contract_raw.get("reasoning_field"),
                reasoning_effort=dict(contract_raw.get("reasoning_effort", {})),
                context_window=contract_raw.get("context_window"),
                ngram_window=(ngram[0], ngram[1]) if ngram else None,
                endpoints=tuple(contract_raw.get("endpoints", ())),
                api_key_env=contract_raw.get("api_key_env"),
                alias=contract_raw.get("alias"),
                slots=contract_raw.get("slots"),
                concurrent_mmproj=contract_raw.get("concurrent_mmproj"),
                mm_limits=dict(contract_raw["mm_limits"]) if "mm_limits" in contract_raw else None,
                sampler=dict(contract_raw.get("sampler", {})),
                reasoning_budget=contract_raw.get("reasoning_budget"),
                kv_cache_type=contract_raw.get("kv_cache_type"),
                draft_acceptance_min=contract_raw.get("draft_acceptance_min"),
                ttft_s=contract_raw.get("ttft_s"),
                chunk_gap_s=contract_raw.get("chunk_gap_s"),
            ),
            calibration=raw.get("calibration", {}),
            line=locate_key(text, keys),
            build=(Bench(script=build_script, binary=raw["build"]["binary"])
                   if "build" in raw and (build_script := repo_file(raw["build"]["script"], (*keys, "build", "script")))
                   else None),
            compose=compose,
            compose_service=raw.get("compose_service"),
            shape_flags=(ShapeFlags(slots=raw["shape_flags"]["slots"], pool=raw["shape_flags"]["pool"])
                         if "shape_flags" in raw else None),
            engine_build=_engine_build(path, text, keys, raw["engine_build"]) if "engine_build" in raw else None,
            llama_swap=llama_swap,
            llama_swap_model=(raw.get("llama_swap_model", name) if llama_swap is not None else None),
            models_preset=models_preset,
            preset_model=(raw.get("preset_model", name) if models_preset is not None else None),
            models_max=raw.get("models_max"),
            exclusive_with=tuple(raw.get("exclusive_with", ())),
            benches=tuple(
                Bench(script=bench_script, binary=b["binary"])
                for i, b in enumerate(raw.get("bench", ()))
                if (bench_script := repo_file(b["script"], (*keys, "bench", str(i), "script"))) is not None
            ),
        )

    clients: dict[str, Client] = {}
    for name, raw in data.get("clients", {}).items():
        env_file = repo_file(raw["env_file"], ("clients", name, "env_file"))
        assert env_file is not None
        clients[name] = Client(name=name, env_file=env_file, dialect=raw.get("dialect", "systemd"))

    proxies: dict[str, Proxy] = {}
    for name, raw in data.get("proxies", {}).items():
        keys = ("proxies", name)
        if raw["host"] not in hosts:
            raise InputError(path, locate_key(text, (*keys, "host")),
                             f"proxies.{name}.host: unknown host {raw['host']!r}; expected one of: {', '.join(hosts)}")
        config = repo_file(raw["config"], (*keys, "config"))
        assert config is not None
        pool = raw.get("replica_kv_pool", {})
        load = raw.get("conversations", {})
        proxies[name] = Proxy(name=name, host=raw["host"], state=raw.get("state", "active"), config=config,
                              dialect=raw.get("dialect", "podman"), pool_tokens=pool.get("tokens"),
                              pool_boot=pool.get("boot"), conversations=load.get("count"),
                              conversation_tokens=load.get("tokens"), line=locate_key(text, keys))

    chains: list[TimeoutChain] = []
    for i, raw in enumerate(data.get("timeouts", [])):
        refs: list[TimeoutRef] = []
        for ref in raw["chain"]:
            if isinstance(ref, str):
                owner, variable = ref.split(":", 1)
                if owner not in services and owner not in known and owner not in clients:
                    raise InputError(path, locate_key(text, ("timeouts", str(i))),
                                     f"timeouts[{i}]: {ref!r} names no service or client; expected one of: "
                                     f"{', '.join([*services, *clients])}")
                refs.append(TimeoutRef(owner=owner, variable=variable, name=ref, seconds=None))
            else:
                refs.append(TimeoutRef(owner=None, variable=None, name=ref["name"], seconds=float(ref["seconds"])))
        chains.append(TimeoutChain(name=raw["name"], chain=tuple(refs), why=raw["why"], cites=tuple(raw.get("cites", ())),
                                   line=locate_key(text, ("timeouts", str(i)))))

    routers: dict[Path, tuple[str, int]] = {}
    for name, service in services.items():
        if service.models_preset is None or service.models_max is None:
            continue
        first = routers.setdefault(service.models_preset, (name, service.models_max))
        if first[1] != service.models_max:
            raise InputError(path, locate_key(text, ("services", name, "models_max")),
                             f"services.{name}.models_max: {service.models_max}, and services.{first[0]}.models_max is "
                             f"{first[1]} for the same router preset; expected one value (one router, one --models-max)")

    rules = tuple(
        file for i, rule in enumerate(data.get("rules", []))
        if (file := repo_file(rule, ("rules", str(i)))) is not None
    )
    dashboards = tuple(
        file for i, dashboard in enumerate(data.get("dashboards", []))
        if (file := repo_file(dashboard, ("dashboards", str(i)))) is not None
    )
    waivers: list[Waiver] = []
    for i, raw in enumerate(data.get("waivers", [])):
        keys = ("waivers", str(i))
        if raw["service"] not in services and raw["service"] not in known and raw["service"] not in {c.name for c in chains}:
            raise InputError(path, locate_key(text, (*keys, "service")),
                             f"waivers[{i}].service: {raw['service']!r} names no service or timeout chain; expected one "
                             f"of: {', '.join([*services, *(c.name for c in chains)])}")
        try:
            expires = datetime.date.fromisoformat(raw["expires"])
        except ValueError:
            raise InputError(path, locate_key(text, (*keys, "expires")),
                             f"waivers[{i}].expires: {raw['expires']!r} is not a calendar date; expected YYYY-MM-DD") from None
        waivers.append(Waiver(code=raw["code"], service=raw["service"], reason=raw["reason"], expires=expires,
                              line=locate_key(text, keys)))

    return Fleet(
        path=path,
        name=data["fleet"]["name"],
        deploy_root=data["fleet"].get("deploy_root"),
        hosts=hosts,
        services=services,
        clients=clients,
        timeouts=tuple(chains),
        rules=rules,
        dashboards=dashboards,
        retired_names=tuple(data["fleet"].get("retired_names", ())),
        policies=frozenset(data["fleet"].get("policies", ())),
        docs_index=repo_file(data.get("docs_index"), ("docs_index",)),
        deploy_probes=repo_file(data.get("deploy_probes"), ("deploy_probes",)),
        deploy_script=repo_file(data.get("deploy_script"), ("deploy_script",)),
        proxies=proxies,
        non_finite=nonfinite,
        waivers=tuple(waivers),
        key_index=keys_index,
    )


# 16 EiB: what a 64-bit machine can address, in GiB. A figure past it is a typo, never a measurement.
_MAX_GIB = 1 << 34


def _gib_or_none(value: float | None, path: Path, line: int | None, key: str) -> int | None:
    """Bytes of a GiB figure; None for inf/nan (reported by the fleet-numbers-finite seam, never rounded)."""
    if value is None or not math.isfinite(value):
        return None
    if abs(value) >= _MAX_GIB:
        raise InputError(path, line, f"{key} = {value!r} GiB is more than a 64-bit machine can address "
                         f"({_MAX_GIB} GiB, 16 EiB); expected the figure in GiB")
    return round(value * GIB)


_HEADER = re.compile(r"^\s*\[(\[)?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")


def _split_dotted(key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', key))


def locate_key(text: str, keys: Sequence[str]) -> int | None:
    """Best-effort line number of a key path in a TOML document (for error messages only).

    Array indices count ``[[table]]`` occurrences. Returns the deepest line that matches: the key's
    own line, else the line of its enclosing table.
    """
    return KeyIndex(text).line(keys)


class KeyIndex:
    """Every table and key path of a TOML document with the first line it appears on: built in one pass,
    so that locating many keys (one per service, one per failure) is not a rescan of the file each time."""

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        array_counts: dict[tuple[str, ...], int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header:
                name = _split_dotted(header.group(2))
                if header.group(1):
                    index = array_counts.get(name, -1) + 1
                    array_counts[name] = index
                    table = (*name, str(index))
                else:
                    table = name
                self.lines.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                self.lines.setdefault((*table, *_split_dotted(key.group(1))), number)

    def line(self, keys: Sequence[str]) -> int | None:
        """The line of the longest prefix of ``keys`` that the document names (its first occurrence)."""
        for depth in range(len(keys), 0, -1):
            found = self.lines.get(tuple(keys[:depth]))
            if found is not None:
                return found
        return None


def _env_template(raw: Any, repo_file: Callable[..., Path | None], where: str,
                  keys: tuple[str, ...]) -> EnvTemplate | None:
    if not isinstance(raw, Mapping):
        return None
    template = repo_file(raw["template"], (*keys, "template"))
    script = repo_file(raw["script"], (*keys, "script"))
    assert template is not None and script is not None
    return EnvTemplate(template=template, script=script, writes=raw.get("writes"), where=where)


def _engine_build(path: Path, text: str, keys: tuple[str, ...], raw: Mapping[str, Any]) -> EngineBuild:
    """``engine_build = { number }``, ``{ version }`` (vLLM) or ``{ image[, number] }``: a tag that pins a build
    (``server-cuda-b6300``) gives its number; a floating tag needs the number it resolved to."""
    from fleetgate.engines.llama_builds import image_build

    image = raw.get("image")
    number = raw.get("number")
    if image is None and number is None and raw.get("version") is None:
        raise InputError(path, locate_key(text, (*keys, "engine_build")),
                         f"{'.'.join(keys)}.engine_build: {dict(raw)!r} names no build; expected number = N (a llama.cpp "
                         "build), version = \"X.Y.Z\" (vLLM) or image = \"REF:TAG\"")
    if image is not None:
        pinned = image_build(image)
        if pinned is not None and number is not None and pinned != number:
            raise InputError(path, locate_key(text, (*keys, "engine_build")),
                             f"{'.'.join(keys)}.engine_build: the image tag pins build {pinned} but number = {number}; "
                             "expected one build (drop number, or the tag's build)")
        number = pinned if number is None else number
    return EngineBuild(fork=raw.get("fork", "mainline"), number=number, version=raw.get("version"), image=image)
