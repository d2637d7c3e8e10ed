"""fleet.toml -> a typed, validated ``Fleet``: one builder per section of the manifest.

The manifest holds only what the fleet's own files cannot say: which hosts exist and what cards they
carry, where each service's env file, serve script and unit live, and the few promises a file cannot
express (the per-card floor, the timeout nesting, which reasoning efforts a template accepts).
Everything else is read from the files themselves by the renderer.

``load_fleet`` parses, refuses ``"TODO"`` values, validates against the JSON Schema, then builds each
section in order (hosts, services, clients, proxies, timeout chains, the router presets' one
``--models-max``, the fleet's files, waivers): a later section may name an earlier one, never the reverse.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from fleetgate.engines.llama_builds import image_build
from fleetgate.engines.vllm import image_release, is_vllm_image
from fleetgate.errors import InputError, non_finite, parse_toml, read_text
from fleetgate.fleet import (
    DEFAULT_BINARY,
    GIB,
    Bench,
    Client,
    Contract,
    Device,
    EngineBuild,
    EnvTemplate,
    Extrapolation,
    Fleet,
    Host,
    NonFinite,
    PinGate,
    Proxy,
    Service,
    ShapeFlags,
    TimeoutChain,
    TimeoutRef,
    Waiver,
)
from fleetgate.toml_keys import KeyIndex, locate_key

__all__ = ["load_fleet"]


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

    validator = _VALIDATOR(_schema())
    try:
        errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    except RecursionError:
        raise InputError(path, None, "arrays or tables nested too deeply to validate; expected a flat manifest") from None
    if errors:
        error = jsonschema.exceptions.best_match(errors) or errors[0]
        keys = tuple(str(k) for k in error.absolute_path)
        raise InputError(path, locate_key(text, keys), f"{'.'.join(keys) or '(top level)'}: {_explain(error)}")

    return _build(path, text, data, known)


# JSON Schema counts 2.0 (and 1e308) as an integer; TOML does not, and no count of bytes, ports or tokens is a float.
_STRICT_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, instance: isinstance(instance, int) and not isinstance(instance, bool))
_VALIDATOR = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_STRICT_TYPES)  # type: ignore[no-untyped-call]


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


def _iec(bound: Any) -> str:
    """A bound of bytes as the operator reads it: `` (2**50, 1 PiB)`` for 1125899906842624."""
    if type(bound) is not int or bound < 1 << 30 or bound & (bound - 1):
        return ""
    shift = bound.bit_length() - 1
    step = min((shift - 30) // 10, 3)
    return f" (2**{shift}, {bound >> (30 + 10 * step)} {('GiB', 'TiB', 'PiB', 'EiB')[step]})"


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
        return f"expected a value {bound} {error.validator_value}{_iec(error.validator_value)}, got {_shown(error.instance)}"
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


@dataclass
class _Manifest:
    """fleet.toml being built: its text, where each key is, and the repository its paths are relative to."""

    path: Path
    text: str
    known: Sequence[str]
    """Every service name of the manifest (``load_fleet(only=...)`` builds one of them)."""
    index: KeyIndex = field(init=False)
    real_root: Path = field(init=False)

    def __post_init__(self) -> None:
        self.index = KeyIndex(self.text)
        self.real_root = self.path.parent.resolve()

    def line(self, keys: Sequence[str]) -> int | None:
        return self.index.line(keys)

    def where(self, keys: Sequence[str]) -> str:
        return f"{self.path}:{self.line(keys)}"

    def error(self, keys: Sequence[str], message: str) -> InputError:
        return InputError(self.path, self.line(keys), message)

    def gib(self, value: float | None, keys: Sequence[str]) -> int | None:
        return _gib_or_none(value, self.path, self.line(keys), ".".join(keys))

    def repo_file(self, value: str | None, keys: tuple[str, ...], *, must_exist: bool = True) -> Path | None:
        """A repository file named relative to fleet.toml, confined by its real path (after ``..`` and symlinks)."""
        if value is None:
            return None
        name = ".".join(keys)
        if any(c in value for c in "\0\n\r\t"):
            raise self.error(keys, f"{name}: {value!r} holds a control character; expected a plain relative path")
        try:
            file = (self.path.parent / value).resolve()
        except (OSError, RuntimeError) as exc:
            raise self.error(keys, f"{name}: cannot resolve {value!r} ({exc}); expected a repository file") from None
        if file != self.real_root and self.real_root not in file.parents:
            raise self.error(keys, f"{name}: {value!r} resolves to {file}, outside the fleet repository "
                             f"{self.real_root} (after '..' and symlinks); expected a file of the repository")
        if must_exist and not file.is_file():
            kind = "is not a regular file" if file.exists() else "no such file"
            raise self.error(keys, f"{name}: {kind} {value!r} (paths are relative to fleet.toml)")
        return file

    def required_file(self, value: str, keys: tuple[str, ...]) -> Path:
        file = self.repo_file(value, keys)
        assert file is not None  # a str value always names a file or raises
        return file


def _build(path: Path, text: str, data: Mapping[str, Any], known: Sequence[str] = ()) -> Fleet:
    manifest = _Manifest(path, text, known)
    hosts = _hosts(manifest, data["hosts"])
    services = {name: _service(manifest, name, raw, hosts, data["services"]) for name, raw in data["services"].items()}
    clients = _clients(manifest, data.get("clients", {}))
    proxies = _proxies(manifest, data.get("proxies", {}), hosts)
    chains = _timeouts(manifest, data.get("timeouts", []), services, clients)
    _one_models_max_per_router(manifest, services)
    rules = _file_list(manifest, "rules", data.get("rules", []))
    dashboards = _file_list(manifest, "dashboards", data.get("dashboards", []))
    waivers = _waivers(manifest, data.get("waivers", []), services, chains)
    fleet = data["fleet"]
    return Fleet(
        path=path,
        name=fleet["name"],
        deploy_root=fleet.get("deploy_root"),
        hosts=hosts,
        services=services,
        clients=clients,
        timeouts=chains,
        rules=rules,
        dashboards=dashboards,
        retired_names=tuple(fleet.get("retired_names", ())),
        policies=frozenset(fleet.get("policies", ())),
        docs_index=manifest.repo_file(data.get("docs_index"), ("docs_index",)),
        deploy_probes=manifest.repo_file(data.get("deploy_probes"), ("deploy_probes",)),
        deploy_script=manifest.repo_file(data.get("deploy_script"), ("deploy_script",)),
        proxies=proxies,
        non_finite=tuple(NonFinite(keys, value, manifest.line(keys)) for keys, value in non_finite(data)),
        waivers=waivers,
        key_index=manifest.index,
    )


def _hosts(manifest: _Manifest, raw_hosts: Mapping[str, Any]) -> dict[str, Host]:
    hosts: dict[str, Host] = {}
    for name, raw in raw_hosts.items():
        devices = tuple(
            Device(name=d["name"], vram_bytes=d["vram_bytes"], index=i, serves=d.get("serves", True))
            for i, d in enumerate(raw["devices"])
        )

        def gib(key: str, host: str = name, raw: Mapping[str, Any] = raw) -> int | None:
            return manifest.gib(raw.get(key), ("hosts", host, key))

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
            cpu_features=frozenset(f.lower() for f in raw["cpu_features"]) if "cpu_features" in raw else None,
            device_gids=frozenset(raw["device_gids"]) if "device_gids" in raw else None,
        )
    return hosts


def _service(manifest: _Manifest, name: str, raw: Mapping[str, Any], hosts: Mapping[str, Host],
             declared: Mapping[str, Any]) -> Service:
    keys = ("services", name)
    if raw["host"] not in hosts:
        raise manifest.error((*keys, "host"),
                             f"services.{name}.host: unknown host {raw['host']!r}; expected one of: {', '.join(hosts)}")
    file = manifest.repo_file
    unit = file(raw.get("unit"), (*keys, "unit"))
    compose = file(raw.get("compose"), (*keys, "compose"))
    kubernetes = file(raw.get("kubernetes"), (*keys, "kubernetes"))
    llama_swap = file(raw.get("llama_swap"), (*keys, "llama_swap"))
    models_preset = file(raw.get("models_preset"), (*keys, "models_preset"))
    serve_script = file(raw.get("serve_script"), (*keys, "serve_script")) or unit or compose or kubernetes or llama_swap or models_preset
    if serve_script is None:
        raise manifest.error(keys, f"services.{name}: neither serve_script nor unit nor compose; "
                             "expected the file that starts the engine (a serve script, a unit whose ExecStart= runs it, "
                             "a compose file, a kubernetes manifest, a llama_swap config or a models_preset)")
    for other in raw.get("exclusive_with", ()):
        if (other not in declared and other not in manifest.known) or other == name:
            raise manifest.error((*keys, "exclusive_with"),
                                 f"services.{name}.exclusive_with: {other!r} names no other service; expected one of: "
                                 f"{', '.join(s for s in declared if s != name)}")
    for i, item in enumerate(raw.get("payload", ())):
        # an absolute host path, or where the engine fetches it from (hf://OWNER/REPO/FILE, https://...):
        # the seams read its profile from the repository (`fleetgate profile URL` writes it), never the network
        if not item.startswith(("/", "hf://", "https://", "http://")) or any(c in item for c in "\0\n\r "):
            raise manifest.error((*keys, "payload"),
                                 f"services.{name}.payload[{i}]: {item!r}; expected an absolute host path or an "
                                 "hf:// / https:// URL, on one line")
    extrapolation = raw.get("extrapolation")
    env_file = raw.get("env_file")
    return Service(
        name=name,
        host=raw["host"],
        port=raw["port"],
        engine=raw["engine"],
        state=raw.get("state", "active"),
        binary=raw.get("binary", DEFAULT_BINARY[raw["engine"]]),
        serve_script=serve_script,
        env_file=file(env_file, (*keys, "env_file")) if isinstance(env_file, str) else None,
        env_template=_env_template(manifest, env_file, (*keys, "env_file")),
        unit=unit,
        payload=tuple(raw.get("payload", ())),
        payload_manifest=file(raw.get("payload_manifest"), (*keys, "payload_manifest")),
        pin_gate=_pin_gate(raw.get("pin_gate"), manifest.path, manifest.line((*keys, "pin_gate")), f"services.{name}.pin_gate"),
        profile=file(raw.get("profile"), (*keys, "profile")),
        draft_profile=file(raw.get("draft_profile"), (*keys, "draft_profile")),
        projector_profile=file(raw.get("projector_profile"), (*keys, "projector_profile")),
        omittable=tuple(raw.get("omittable", ())),
        extrapolation=Extrapolation(**extrapolation) if extrapolation else None,
        contract=_contract(raw.get("contract", {})),
        calibration=raw.get("calibration", {}),
        line=manifest.line(keys),
        build=(Bench(script=manifest.required_file(raw["build"]["script"], (*keys, "build", "script")),
                     binary=raw["build"]["binary"]) if "build" in raw else None),
        compose=compose,
        compose_service=raw.get("compose_service"),
        kubernetes=kubernetes,
        kubernetes_workload=raw.get("kubernetes_workload"),
        kubernetes_container=raw.get("kubernetes_container"),
        nix_unit=raw.get("nix_unit"),
        ansible_vars=tuple(f for i, v in enumerate(raw.get("ansible_vars", ()))
                           if (f := file(v, (*keys, "ansible_vars", str(i)))) is not None),
        shape_flags=(ShapeFlags(slots=raw["shape_flags"]["slots"], pool=raw["shape_flags"]["pool"])
                     if "shape_flags" in raw else None),
        engine_build=_engine_build(manifest.path, manifest.text, keys, raw["engine_build"]) if "engine_build" in raw else None,
        llama_swap=llama_swap,
        llama_swap_model=(raw.get("llama_swap_model", name) if llama_swap is not None else None),
        models_preset=models_preset,
        preset_model=(raw.get("preset_model", name) if models_preset is not None else None),
        models_max=raw.get("models_max"),
        exclusive_with=tuple(raw.get("exclusive_with", ())),
        benches=tuple(Bench(script=manifest.required_file(b["script"], (*keys, "bench", str(i), "script")), binary=b["binary"])
                      for i, b in enumerate(raw.get("bench", ()))),
    )


def _contract(raw: Mapping[str, Any]) -> Contract:
    ngram = raw.get("ngram_window")
    return Contract(
        vision=raw.get("vision"),
        tools=raw.get("tools"),
        reasoning_field=raw.get("reasoning_field"),
        reasoning_effort=dict(raw.get("reasoning_effort", {})),
        context_window=raw.get("context_window"),
        ngram_window=(ngram[0], ngram[1]) if ngram else None,
        endpoints=tuple(raw.get("endpoints", ())),
        api_key_env=raw.get("api_key_env"),
        alias=raw.get("alias"),
        slots=raw.get("slots"),
        concurrent_mmproj=raw.get("concurrent_mmproj"),
        mm_limits=dict(raw["mm_limits"]) if "mm_limits" in raw else None,
        sampler=dict(raw.get("sampler", {})),
        reasoning_budget=raw.get("reasoning_budget"),
        kv_cache_type=raw.get("kv_cache_type"),
        draft_acceptance_min=raw.get("draft_acceptance_min"),
        ttft_s=raw.get("ttft_s"),
        chunk_gap_s=raw.get("chunk_gap_s"),
        structured_output=raw.get("structured_output"),
        reasoning_replay=raw.get("reasoning_replay"),
        parallel_tool_calls=raw.get("parallel_tool_calls"),
    )


def _clients(manifest: _Manifest, raw_clients: Mapping[str, Any]) -> dict[str, Client]:
    return {name: Client(name=name, env_file=manifest.required_file(raw["env_file"], ("clients", name, "env_file")),
                         dialect=raw.get("dialect", "systemd"))
            for name, raw in raw_clients.items()}


def _proxies(manifest: _Manifest, raw_proxies: Mapping[str, Any], hosts: Mapping[str, Host]) -> dict[str, Proxy]:
    proxies: dict[str, Proxy] = {}
    for name, raw in raw_proxies.items():
        keys = ("proxies", name)
        if raw["host"] not in hosts:
            raise manifest.error((*keys, "host"),
                                 f"proxies.{name}.host: unknown host {raw['host']!r}; expected one of: {', '.join(hosts)}")
        pool = raw.get("replica_kv_pool", {})
        load = raw.get("conversations", {})
        proxies[name] = Proxy(name=name, host=raw["host"], state=raw.get("state", "active"),
                              config=manifest.required_file(raw["config"], (*keys, "config")),
                              dialect=raw.get("dialect", "podman"), pool_tokens=pool.get("tokens"),
                              pool_boot=pool.get("boot"), conversations=load.get("count"),
                              conversation_tokens=load.get("tokens"), line=manifest.line(keys))
    return proxies


def _timeouts(manifest: _Manifest, raw_chains: Sequence[Mapping[str, Any]], services: Mapping[str, Service],
              clients: Mapping[str, Client]) -> tuple[TimeoutChain, ...]:
    chains: list[TimeoutChain] = []
    for i, raw in enumerate(raw_chains):
        keys = ("timeouts", str(i))
        refs: list[TimeoutRef] = []
        for ref in raw["chain"]:
            if isinstance(ref, str):
                owner, variable = ref.split(":", 1)
                if owner not in services and owner not in manifest.known and owner not in clients:
                    raise manifest.error(keys, f"timeouts[{i}]: {ref!r} names no service or client; expected one of: "
                                         f"{', '.join([*services, *clients])}")
                refs.append(TimeoutRef(owner=owner, variable=variable, name=ref, seconds=None))
            else:
                refs.append(TimeoutRef(owner=None, variable=None, name=ref["name"], seconds=float(ref["seconds"])))
        chains.append(TimeoutChain(name=raw["name"], chain=tuple(refs), why=raw["why"], cites=tuple(raw.get("cites", ())),
                                   line=manifest.line(keys)))
    return tuple(chains)


def _one_models_max_per_router(manifest: _Manifest, services: Mapping[str, Service]) -> None:
    """The services of one router preset are one llama-server: one ``--models-max`` for them all."""
    routers: dict[Path, tuple[str, int]] = {}
    for name, service in services.items():
        if service.models_preset is None or service.models_max is None:
            continue
        first = routers.setdefault(service.models_preset, (name, service.models_max))
        if first[1] != service.models_max:
            raise manifest.error(("services", name, "models_max"),
                                 f"services.{name}.models_max: {service.models_max}, and services.{first[0]}.models_max is "
                                 f"{first[1]} for the same router preset; expected one value (one router, one --models-max)")


def _file_list(manifest: _Manifest, section: str, values: Sequence[str]) -> tuple[Path, ...]:
    return tuple(manifest.required_file(value, (section, str(i))) for i, value in enumerate(values))


def _waivers(manifest: _Manifest, raw_waivers: Sequence[Mapping[str, Any]], services: Mapping[str, Service],
             chains: Sequence[TimeoutChain]) -> tuple[Waiver, ...]:
    waivers: list[Waiver] = []
    chain_names = [c.name for c in chains]
    for i, raw in enumerate(raw_waivers):
        keys = ("waivers", str(i))
        if raw["service"] not in services and raw["service"] not in manifest.known and raw["service"] not in chain_names:
            raise manifest.error((*keys, "service"),
                                 f"waivers[{i}].service: {raw['service']!r} names no service or timeout chain; expected one "
                                 f"of: {', '.join([*services, *chain_names])}")
        try:
            expires = datetime.date.fromisoformat(raw["expires"])
        except ValueError:
            raise manifest.error((*keys, "expires"),
                                 f"waivers[{i}].expires: {raw['expires']!r} is not a calendar date; expected YYYY-MM-DD") from None
        waivers.append(Waiver(code=raw["code"], service=raw["service"], reason=raw["reason"], expires=expires,
                              line=manifest.line(keys)))
    return tuple(waivers)


def _env_template(manifest: _Manifest, raw: Any, keys: tuple[str, ...]) -> EnvTemplate | None:
    if not isinstance(raw, Mapping):
        return None
    return EnvTemplate(template=manifest.required_file(raw["template"], (*keys, "template")),
                       script=manifest.required_file(raw["script"], (*keys, "script")),
                       writes=raw.get("writes"), where=manifest.where(keys))


# 1 PiB, in GiB: the bound of every GiB figure of the manifest (a host's RAM, a card's floor, slack or tolerance, a
# pinned checkpoint). The largest machines hold some tens of TiB of RAM and the largest cards a few hundred GiB:
# a figure of a PiB or more is a typo (bytes written as GiB), never a measurement.
_MAX_GIB = 1 << 20


def _gib_or_none(value: float | None, path: Path, line: int | None, key: str) -> int | None:
    """Bytes of a GiB figure; None for inf/nan (reported by the fleet-numbers-finite seam, never rounded)."""
    if value is None or not math.isfinite(value):
        return None
    if abs(value) >= _MAX_GIB:
        raise InputError(path, line, f"{key} = {value!r} GiB is 1 PiB ({_MAX_GIB} GiB) or more, more than any "
                         "machine or card holds; expected the figure in GiB")
    return round(value * GIB)




def _engine_build(path: Path, text: str, keys: tuple[str, ...], raw: Mapping[str, Any]) -> EngineBuild:
    """``engine_build = { number }``, ``{ vllm }`` / ``{ version }`` (vLLM) or ``{ image[, number] }``: a tag that
    pins a build (``server-cuda-b6300``, ``vllm/vllm-openai:v0.32.0``) gives its number or release; a floating tag
    needs the number it resolved to."""
    image = raw.get("image")
    number = raw.get("number")
    version = raw.get("vllm", raw.get("version"))
    line = locate_key(text, (*keys, "engine_build"))
    if image is None and number is None and version is None:
        raise InputError(path, line,
                         f"{'.'.join(keys)}.engine_build: {dict(raw)!r} names no build; expected number = N (a llama.cpp "
                         "build), vllm = \"X.Y.Z\" (vLLM) or image = \"REF:TAG\"")
    if "vllm" in raw and "version" in raw and raw["vllm"] != raw["version"]:
        raise InputError(path, line, f"{'.'.join(keys)}.engine_build: vllm = {raw['vllm']!r} but version = "
                         f"{raw['version']!r}; expected one release (drop version)")
    if image is not None and is_vllm_image(image):
        tagged = image_release(image)
        if tagged is not None and version is not None and tagged != version:
            raise InputError(path, line, f"{'.'.join(keys)}.engine_build: the image tag pins vLLM {tagged} but "
                             f"vllm = {version!r}; expected one release (drop vllm, or the tag's release)")
        version = tagged if version is None else version
    if image is not None:
        pinned = image_build(image)
        if pinned is not None and number is not None and pinned != number:
            raise InputError(path, locate_key(text, (*keys, "engine_build")),
                             f"{'.'.join(keys)}.engine_build: the image tag pins build {pinned} but number = {number}; "
                             "expected one build (drop number, or the tag's build)")
        number = pinned if number is None else number
    return EngineBuild(fork=raw.get("fork", "mainline"), number=number, version=version, image=image)
