"""``fleetgate init PATH...``: a fleet.toml written from the files a repository already holds.

Discovery walks the given paths (bounded; symlinks never followed out of the repository; ``.git``, virtual
environments and ``node_modules`` skipped) and reads each file the way its consumer reads it, with the readers the
suite already has:

- systemd units (``*.service``) and Quadlet ``*.container`` files, by ``fleetgate.units.parse_unit``: an
  ``ExecStart=`` that runs the engine itself is expanded as systemd expands it (``fleetgate.sources.systemd``); one
  that runs a serve script of the repository is rendered the way the seams render it (``fleetgate.render``), so the
  port and the model come from the argv the script really builds;
- serve scripts whose engine is a ``docker run``/``podman run`` line: rendered in the sandbox (the client is a stub,
  ``fleetgate.sources.docker_run`` reads the recorded line); the port through ``-p``, the model through ``-v``;
- a unit's ``EnvironmentFile=`` outside the repository that one script of the repository writes from one template
  (``*.in``, ``*.tmpl``, ``*.template``) it names: ``env_file = { template, script }``, rendered for port and model;
- docker compose files (any YAML with a ``services:`` map whose entries have an ``image`` or a ``command``), by
  ``fleetgate.sources.compose`` (``list_services``, ``read_compose``);
- llama-swap configs (YAML with a ``models:`` map whose entries have a ``cmd``), by
  ``fleetgate.sources.llama_swap.read_config``; every model gets llama-swap's own port (default ``--listen :8080``).
- llama.cpp router presets (``*.ini`` in llama.cpp's preset grammar whose sections name a model), by
  ``fleetgate.sources.router_preset``; every model gets the router's port (llama-server's default 8080).

What no file can say (the host's RAM, its cards and their sizes) is written as ``"TODO"``, a value the schema
refuses: ``pytest seams/`` then names each one in one line, never judges with a guessed size. ``probe_host`` reads
them from ``nvidia-smi`` (or ``rocm-smi``) and ``/proc/meminfo`` of the machine it runs on, only when asked.

Nothing here writes a file: ``discover`` reads, ``fleet_toml`` returns the manifest's text, the CLI writes it.
"""

from __future__ import annotations

import csv
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

import yaml

from fleetgate.envfile import parse_env_file
from fleetgate.errors import InputError, read_text
from fleetgate.units import Setting, Unit, parse_unit, split_command, split_environment_assignments

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet, Service
    from fleetgate.sources.docker_run import ContainerRun

__all__ = [
    "TODO",
    "Card",
    "Discovery",
    "Found",
    "HostFacts",
    "Note",
    "discover",
    "fleet_toml",
    "probe_host",
]

TODO = "TODO"
"""The placeholder for what no file can say: a string where the schema expects a number, so it is refused until edited."""

EngineName = Literal["llama.cpp", "vllm"]
ENGINE_BINARIES: Mapping[str, EngineName] = {"llama-server": "llama.cpp", "vllm": "vllm"}
DEFAULT_PORT: Mapping[str, int] = {"llama.cpp": 8080, "vllm": 8000}

MAX_FILES = 20000
"""The walk stops after this many directory entries (a repository, not a disk)."""
MAX_DEPTH = 12
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", ".tox", "__pycache__", ".mypy_cache",
                       ".ruff_cache", ".pytest_cache", "site-packages", ".nox", ".cache"})
COMPOSE_NAMES = frozenset({"compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml",
                           "podman-compose.yaml", "podman-compose.yml", "container-compose.yaml",
                           "container-compose.yml"})
_MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class Note:
    """A file init read but could not use, or a fact it could not find: one line, naming the file and line."""

    path: Path
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass(frozen=True)
class Found:
    """One engine endpoint found in the files, as fleet.toml will declare it."""

    name: str
    engine: EngineName
    port: int
    port_from: str
    """Where the port was read (``--port in FILE:LINE``, a compose mapping, the engine's default)."""
    source: str
    """The file (and line) the service was found in."""
    payload: tuple[str, ...] = ()
    unit: str | None = None
    serve_script: str | None = None
    env_file: str | None = None
    compose: str | None = None
    compose_service: str | None = None
    llama_swap: str | None = None
    llama_swap_model: str | None = None
    models_preset: str | None = None
    preset_model: str | None = None
    env_template: tuple[str, str] | None = None
    """(template, install script): the env file the unit reads is the script's rendering of the template."""


@dataclass(frozen=True)
class Card:
    name: str
    vram_bytes: int
    model: str


@dataclass(frozen=True)
class HostFacts:
    """What ``--probe`` read on this machine."""

    cards: tuple[Card, ...]
    ram_gib: float | None
    source: str


@dataclass(frozen=True)
class Discovery:
    root: Path
    services: tuple[Found, ...]
    notes: tuple[Note, ...]
    deploy_root: str | None
    deploy_root_from: str | None
    read: Mapping[str, int] = field(default_factory=dict)
    """How many files of each kind were read (units, compose files, llama-swap configs)."""


# --- the walk ---------------------------------------------------------------------------------------------------


def _walk(root: Path, start: Path, notes: list[Note]) -> Iterator[Path]:
    """Regular files under ``start``, never leaving ``root`` by a symlink, bounded in entries and depth."""
    real_root = root.resolve()
    seen = 0
    base_depth = len(start.parts)
    for directory, dirs, files in os.walk(start, followlinks=False):
        here = Path(directory)
        depth = len(here.parts) - base_depth
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not (here / d / "pyvenv.cfg").exists()
                         and not (here / d).is_symlink())
        if depth >= MAX_DEPTH:
            dirs[:] = []
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                notes.append(Note(start, None, f"more than {MAX_FILES} files: the walk stopped there; pass the "
                                  "directories that hold the units and compose files"))
                return
            path = here / name
            if path.is_symlink():
                try:
                    real = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    continue
                if real != real_root and real_root not in real.parents:
                    if _interesting(name):
                        notes.append(Note(path, None, f"a symlink to {real}, outside {root}: not read"))
                    continue
            if path.is_file():
                yield path


def _interesting(name: str) -> bool:
    return name.endswith((".service", ".container", ".yaml", ".yml", ".ini"))


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _service_name(raw: str, taken: set[str]) -> str:
    base = _NAME_BAD.sub("-", raw.lower()).strip("-") or "service"
    if not base[0].isalnum():
        base = "s" + base
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


# --- deploy_root --------------------------------------------------------------------------------------------------


def _mapped_root(root: Path, host_path: str, *, directory: bool = False) -> str | None:
    """The host prefix under which ``host_path`` is a file of the repository (the longest tail that exists)."""
    if not host_path.startswith("/") or "\0" in host_path:
        return None
    parts = PurePosixPath(host_path).parts[1:]
    real_root = root.resolve()
    for i in range(1, len(parts)):
        local = root.joinpath(*parts[i:])
        try:
            real = local.resolve()
        except (OSError, RuntimeError):
            continue
        if real_root not in real.parents:
            continue
        if local.is_file() or (directory and local.is_dir()):
            return "/" + "/".join(parts[:i])
    return None


def _unit_host_paths(unit: Unit) -> Iterator[tuple[str, bool]]:
    """Absolute paths a unit names: env files, the words of its command line, a Quadlet's volume sources."""
    for section in ("Service", "Container"):
        for setting in unit.all(section, "EnvironmentFile"):
            yield setting.value.lstrip("-"), False
    for setting in (*unit.all("Service", "ExecStart"), *unit.all("Container", "Exec")):
        try:
            words = split_command(_unprefixed(setting))
        except InputError:
            continue
        for word in words:
            yield word, False
    for setting in unit.all("Container", "Volume"):
        source = setting.value.split(":", 1)[0]
        yield source, True


def _unprefixed(setting: Setting) -> Setting:
    return Setting(setting.section, setting.key, setting.value.lstrip("-@+!:"), setting.path, setting.line)


def _map(root: Path, deploy_root: str | None, host_path: str) -> Path | None:
    """A host path under ``deploy_root`` -> the repository file (None when it is not one)."""
    if deploy_root is None or not host_path.startswith(deploy_root.rstrip("/") + "/"):
        return None
    tail = host_path[len(deploy_root.rstrip("/")) + 1:]
    local = root / tail
    try:
        real = local.resolve()
    except (OSError, RuntimeError):
        return None
    if root.resolve() not in real.parents or not local.is_file():
        return None
    return local


# --- argv --------------------------------------------------------------------------------------------------------


def _engine_of(argv: Sequence[str]) -> tuple[EngineName, int] | None:
    """The engine an argv starts, and where its own arguments begin (``vllm serve MODEL``: after ``serve``)."""
    for i, word in enumerate(argv[:3]):
        engine = ENGINE_BINARIES.get(posixpath.basename(word))
        if engine is not None:
            return engine, i + 1
    return None


def _parsed(engine: EngineName, args: Sequence[str], env: Mapping[str, str]) -> tuple[int | None, list[str]]:
    """The port the argv sets (None: the engine's default) and the files it loads, read by the engine's own argv
    model (``fleetgate.engines``): aliases, ``--flag=value``, ``LLAMA_ARG_*`` and the last value winning."""
    if engine == "llama.cpp":
        from fleetgate.engines.llamacpp import parse_llama_server

        llama = parse_llama_server(("llama-server", *args), env)
        given = llama.use("port")
        files = [llama.model, llama.mmproj, llama.spec_draft_model]
    else:
        from fleetgate.engines.vllm import parse_vllm

        vllm = parse_vllm(("vllm", *args))
        given = vllm.use("port")
        drafter = (vllm.speculative_config or {}).get("model")
        files = [vllm.model, drafter if isinstance(drafter, str) else None]
    # A --port the engine would refuse (empty, not a number) is no port: the engine's default is written, and the
    # argv seams report the value.
    text = given.value if given is not None else None
    port = int(text) if text is not None and text.isdigit() else None
    # Only absolute paths are host files: a hub id or a relative path is not (the payload names host files).
    return (port if port is not None and 0 < port < 65536 else None), list(dict.fromkeys(f for f in files if f and f.startswith("/")))


def _model(engine: EngineName, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    return _parsed(engine, args, env)[1]


def _port(engine: EngineName, args: Sequence[str], env: Mapping[str, str]) -> int | None:
    return _parsed(engine, args, env)[0]


# --- systemd units and Quadlets ----------------------------------------------------------------------------------


@dataclass
class _Context:
    root: Path
    deploy_root: str | None
    notes: list[Note]
    taken: set[str]
    render: Callable[..., _Rendered] | None
    files: tuple[Path, ...] = ()
    templates: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    """Host env files the repository does not hold -> (template, install script) that render them."""


@dataclass(frozen=True)
class _Rendered:
    """What init keeps of a script's render: the engine's argv and environment, the repository files it sourced,
    and the ``docker run``/``podman run`` line that started it in a container (``fleetgate.sources.docker_run``)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    sourced: tuple[str, ...]
    container: ContainerRun | None = None


def _unit_env(ctx: _Context, unit: Unit, section: str) -> tuple[dict[str, str], list[Path]]:
    env: dict[str, str] = {}
    files: list[Path] = []
    for setting in unit.all(section, "Environment"):
        env.update(split_environment_assignments(setting))
    for setting in unit.all(section, "EnvironmentFile"):
        value = setting.value
        local = _map(ctx.root, ctx.deploy_root, value.lstrip("-"))
        if local is None:
            rendered_by = _env_template(ctx, value.lstrip("-"))
            if rendered_by is not None:
                ctx.templates[value.lstrip("-")] = rendered_by
            elif not value.startswith("-"):
                ctx.notes.append(Note(setting.path, setting.line, f"EnvironmentFile={value} is not a file of this "
                                      "repository (under the deploy_root found); its variables are unknown to init"))
            continue
        files.append(local)
        env.update(parse_env_file(local, "systemd" if section == "Service" else "podman").values_dict())
    return env, files


_TEMPLATE_WORD = re.compile(r"[\w./-]+\.(?:in|tmpl|template)(?![\w.-])")


def _env_template(ctx: _Context, host_path: str) -> tuple[Path, Path] | None:
    """The install script of the repository that writes ``host_path`` (names it) and the one template file of the
    repository it names (``*.in``, ``*.tmpl``, ``*.template``): the pair fleet.toml declares as
    ``env_file = { template, script }``, which the render runs in its sandbox. None unless exactly one script fits."""
    found: list[tuple[Path, Path]] = []
    real_root = ctx.root.resolve()
    for file in ctx.files:
        text = _shell_script(file) if file.suffix not in (".service", ".container", ".yaml", ".yml") else None
        if text is None:
            continue
        if not re.search(rf"{re.escape(host_path)}(?![\w./-])", text):
            continue
        templates = set()
        for word in _TEMPLATE_WORD.findall(text):
            for base in (file.parent, ctx.root):
                local = (base / word).resolve()
                if real_root in local.parents and local.is_file():
                    templates.add(local)
                    break
        if len(templates) == 1:
            found.append((templates.pop(), file.resolve()))
    return found[0] if len(found) == 1 else None


def _from_unit(ctx: _Context, path: Path, unit: Unit) -> Found | None:
    if unit.kind == "quadlet":
        return _from_quadlet(ctx, unit)
    starts = unit.all("Service", "ExecStart")
    if not starts:
        return None
    setting = starts[-1]
    words = split_command(_unprefixed(setting))
    if not words:
        return None
    env, env_files = _unit_env(ctx, unit, "Service")
    rel = _rel(ctx.root, path)
    hit = _engine_of(words)
    if hit is not None:
        from fleetgate.sources.systemd import expand_exec

        engine, start = hit
        name = _service_name(path.stem, ctx.taken)
        templates = {ctx.templates[s.value.lstrip("-")] for s in unit.all("Service", "EnvironmentFile")
                     if s.value.lstrip("-") in ctx.templates}
        template = templates.pop() if len(templates) == 1 else None
        argv: Sequence[str] = expand_exec(setting, env).argv
        how = f"--port in {rel}:{setting.line}"
        if template is not None and ctx.render is not None:
            # The env file is the install script's output: rendered in the sandbox as the seams render it.
            try:
                rendered = ctx.render(ctx.root, ctx.deploy_root, name, engine, path, path, (), template)
                argv, env = rendered.argv, rendered.env
                how = f"--port as {_rel(ctx.root, template[1])} renders {_rel(ctx.root, template[0])} for {rel}"
            except InputError as exc:
                ctx.notes.append(Note(exc.path, exc.line, f"rendering {rel} with its env file from "
                                      f"{_rel(ctx.root, template[1])}: {exc.message}"))
        args = argv[start:]
        port = _port(engine, args, env)
        return Found(name=name, engine=engine,
                     port=port or DEFAULT_PORT[engine],
                     port_from=how if port else f"{engine}'s default port (no --port with a number)",
                     source=f"{rel}:{setting.line}", payload=tuple(_model(engine, args, env)), unit=rel,
                     env_template=(_rel(ctx.root, template[0]), _rel(ctx.root, template[1])) if template else None)
    if posixpath.basename(words[0]) in ("bash", "sh") and len(words) > 2 and words[1] == "-c":
        return _from_inline(ctx, unit, setting, words[2], env)
    script = next((s for s in (_map(ctx.root, ctx.deploy_root, w) for w in words) if s is not None), None)
    if script is None:
        return None
    return _from_script(ctx, script, path, env_files[0] if len(env_files) == 1 else None, env,
                        f"{rel}:{setting.line}")


def _from_inline(ctx: _Context, unit: Unit, setting: Setting, script: str, env: Mapping[str, str]) -> Found | None:
    """``bash -c '...; exec llama-server ...'``: the engine's words after it, with the unit's variables put in."""
    try:
        words = shlex.split(script, comments=True, posix=True)
    except ValueError as exc:
        ctx.notes.append(Note(setting.path, setting.line, f"ExecStart= runs bash -c with a script init cannot split "
                              f"({exc}); expected every quote closed"))
        return None
    for i, word in enumerate(words):
        engine = ENGINE_BINARIES.get(posixpath.basename(word))
        if engine is None:
            continue
        args: list[str] = []
        for w in words[i + 1:]:
            if w in (";", "&&", "||", "|") or w.endswith(";"):
                if w.endswith(";") and len(w) > 1:
                    args.append(w[:-1])
                break
            args.append(re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), w))
        port = _port(engine, args, env)
        rel = _rel(ctx.root, unit.path)
        return Found(name=_service_name(unit.path.stem, ctx.taken), engine=engine, port=port or DEFAULT_PORT[engine],
                     port_from=f"--port in {rel}:{setting.line}" if port else f"{engine}'s default port (no --port with a number)",
                     source=f"{rel}:{setting.line}", payload=tuple(_model(engine, args, env)), unit=rel)
    return None


def _from_quadlet(ctx: _Context, unit: Unit) -> Found | None:
    exec_setting = unit.last("Container", "Exec")
    if exec_setting is None:
        return None
    volumes = [tuple(s.value.split(":")[:2]) for s in unit.all("Container", "Volume") if ":" in s.value]
    env, env_files = _unit_env(ctx, unit, "Container")
    for word in split_command(exec_setting):
        for host, container in volumes:
            container = container.rstrip("/")
            if word == container or word.startswith(container + "/"):
                script = _map(ctx.root, ctx.deploy_root, host.rstrip("/") + word[len(container):])
                if script is not None:
                    found = _from_script(ctx, script, unit.path, env_files[0] if len(env_files) == 1 else None, env,
                                         f"{_rel(ctx.root, unit.path)}:{exec_setting.line}")
                    # The argv names the model as the container sees it: the host holds it where Volume= maps it from.
                    return replace(found, payload=tuple(_host_side(p, volumes) for p in found.payload)) if found else None
    if _engine_of(split_command(exec_setting)) is not None:
        ctx.notes.append(Note(exec_setting.path, exec_setting.line, "Exec= runs the engine itself in the container: "
                              "init writes Quadlets that run a serve script of the repository only; declare it by hand"))
    return None


def _host_side(path: str, volumes: Sequence[tuple[str, ...]]) -> str:
    for host, container in volumes:
        container = container.rstrip("/")
        if host.startswith("/") and (path == container or path.startswith(container + "/")):
            return host.rstrip("/") + path[len(container):]
    return path


_ENGINE_COMMAND = re.compile(r"^\s*(?:exec\s+)?(?:\S*/)?(?:llama-server|vllm\s+serve)(?:\s|$)", re.M)
_ENGINE_WORD = re.compile(r"(?<![\w.-])(llama-server|vllm)(?![\w.-])")
_CONTAINER_RUN = re.compile(r"(?<![\w.-])(?:docker|podman)\s+(?:container\s+)?run(?![\w.-])")


def _from_script(ctx: _Context, script: Path, unit: Path | None, env_file: Path | None, env: Mapping[str, str],
                 source: str) -> Found | None:
    """A serve script: rendered in the sandbox (the engine stubbed) for its port and its model."""
    try:
        text = read_text(script, "the serve script")
    except InputError as exc:
        ctx.notes.append(Note(exc.path, exc.line, exc.message))
        return None
    match = _ENGINE_WORD.search(text)
    if match is not None:
        engines: tuple[EngineName, ...] = (ENGINE_BINARIES[match.group(1)],)
    elif _CONTAINER_RUN.search(text):
        # `docker run IMAGE ...`: the image is the engine, known only once the render records the run line.
        engines = ("llama.cpp", "vllm")
    else:
        return None
    name = _service_name((unit or script).stem, ctx.taken)
    rel_script = _rel(ctx.root, script)
    guesses = tuple(v for v in env.values() if v.startswith("/") and v.endswith(_MODEL_SUFFIXES))
    engine = engines[0]
    rendered = _Rendered((), {}, ())
    if ctx.render is not None:
        for engine in engines:
            try:
                rendered = ctx.render(ctx.root, ctx.deploy_root, name, engine, script, unit, guesses)
                break
            except InputError as exc:
                if engine == engines[-1]:
                    ctx.notes.append(Note(exc.path, exc.line, f"rendering {rel_script} for its port and model: "
                                          f"{exc.message}"))
    if match is None and rendered.container is None:
        return None  # a container run of no engine image init knows
    argv, engine_env = rendered.argv, rendered.env
    args = argv[(_engine_of(argv) or (engine, 1))[1]:] if argv else ()
    port = _port(engine, args, engine_env) if argv else None
    if argv and engine == "vllm" and args[:1] != ("serve",):
        return None  # `vllm bench serve`, `vllm collect-env`: a vllm command that serves nothing
    payload = _model(engine, args, engine_env)
    run = rendered.container
    if port is None:
        port_from = f"{engine}'s default port (no --port with a number rendered)"
    else:
        port_from = f"--port as {rel_script} renders it"
    if run is not None:
        listen = port or DEFAULT_PORT[engine]
        published = run.host_port(listen)
        if published is not None:
            port, port_from = published, (f"the host port {run.client} run publishes the engine's {listen} on, as "
                                          f"{rel_script} renders it")
        else:
            port_from = f"the engine's port in the container: the {run.client} run line of {rel_script} publishes none"
        payload = [run.host_path(p) or p for p in payload]
    env_rel = _rel(ctx.root, env_file) if env_file is not None else rendered.sourced[0] if len(rendered.sourced) == 1 else None
    return Found(name=name, engine=engine, port=port or DEFAULT_PORT[engine], port_from=port_from,
                 source=source, payload=tuple(payload),
                 unit=_rel(ctx.root, unit) if unit is not None else None, serve_script=rel_script,
                 env_file=env_rel)


def _sandbox_render(root: Path, deploy_root: str | None, name: str, engine: EngineName, script: Path, unit: Path | None,
                    payload: tuple[str, ...], env_template: tuple[Path, Path] | None = None) -> _Rendered:
    """Render one script as the seams do, with a fleet of that one service (nothing written, nothing started)."""
    from fleetgate.fleet import EnvTemplate
    from fleetgate.render import render

    template = (EnvTemplate(template=env_template[0], script=env_template[1], writes=None, where="fleetgate init")
                if env_template is not None else None)
    fleet, service = _stub_fleet(root, deploy_root, name, engine, serve_script=script.resolve(),
                                 unit=unit.resolve() if unit else None, payload=payload, env_template=template)
    from fleetgate.render_types import RenderRefused

    # A script that tests its payload before it starts the engine (`[ -f "$MODEL" ] || exit 1`) is rendered again
    # with each file it asked for present, as the seams render it with the declared payload: a few rounds at most.
    for _ in range(6):
        try:
            rendered = render(fleet, service)
            break
        except RenderRefused as refused:
            missing = tuple(t.path for t in refused.tests
                            if not t.answer and t.path.startswith("/") and t.path not in service.payload)
            if not missing:
                raise
            service = replace(service, payload=(*service.payload, *missing))
    else:
        raise InputError(script, None, "the script kept asking for more files than init supplies; declare its payload")
    real_root = root.resolve()
    sourced: list[str] = []
    for item in rendered.sourced:
        if not item.inside_repo:
            continue
        local = _map(root, deploy_root, item.target)
        if local is None and item.target.startswith(str(real_root) + "/"):
            local = Path(item.target)
        if local is not None:
            sourced.append(local.resolve().relative_to(real_root).as_posix())
    return _Rendered(rendered.argv, dict(rendered.env), tuple(dict.fromkeys(sourced)), rendered.container)


# --- YAML: compose files and llama-swap configs -----------------------------------------------------------------


def _yaml(ctx: _Context, path: Path) -> Any:
    """A YAML file's data, only to tell a compose file from a llama-swap config (each is then read by its reader);
    None when it is neither readable nor YAML (one line when its name or its top-level keys say it was meant as one)."""
    try:
        text = read_text(path, "the YAML file")
    except InputError as exc:
        if path.name in COMPOSE_NAMES:
            ctx.notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
        return None
    shaped = path.name in COMPOSE_NAMES or re.search(r"^(services|models):", text, re.M) is not None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        if shaped:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            ctx.notes.append(Note(path, mark.line + 1 if mark is not None else None,
                                  f"not YAML ({problem}); expected a compose file or a llama-swap config: skipped"))
        return None
    except RecursionError:
        ctx.notes.append(Note(path, None, "YAML nested too deeply: skipped"))
        return None


def _stub_fleet(root: Path, deploy_root: str | None, name: str, engine: EngineName, **where: Any) -> tuple[Fleet, Service]:
    """A fleet of one service pointing at a file, for a reader that takes (fleet, service): nothing else is known."""
    from fleetgate.fleet import DEFAULT_BINARY, Contract, Fleet, Host, Service

    host = Host(name="localhost", ram_bytes=0, devices=(), card_floor_bytes=None, balance_slack_bytes=None,
                vllm_max_gpu_memory_utilization=None)
    fields: dict[str, Any] = {"serve_script": None, "env_file": None, "unit": None, "payload": (), **where}
    service = Service(name=name, host="localhost", port=DEFAULT_PORT[engine], engine=engine, state="active",
                      binary=DEFAULT_BINARY[engine],
                      profile=None, draft_profile=None, projector_profile=None, omittable=(), extrapolation=None,
                      contract=Contract(), calibration={}, line=None, **fields)
    fleet = Fleet(path=root.resolve() / "fleet.toml", name="init", deploy_root=deploy_root, hosts={"localhost": host},
                  services={name: service}, clients={}, timeouts=(), rules=())
    return fleet, service


def _from_compose(ctx: _Context, path: Path) -> list[Found]:
    """Each service of a compose file whose container starts an engine, read by ``fleetgate.sources.compose`` (the
    reader the seams render it with): the argv and environment of the container, the host port ``ports:`` publishes
    the engine's port on, the host paths the bind mounts give the model paths."""
    from fleetgate.sources.compose import list_services, read_compose

    rel = _rel(ctx.root, path)
    found: list[Found] = []
    for entry in list_services(path):
        engine = ENGINE_BINARIES.get(entry.program or "")
        if engine is None:
            continue
        fleet, stub = _stub_fleet(ctx.root, ctx.deploy_root, entry.name, engine, compose=path, compose_service=entry.name)
        read = read_compose(fleet, stub)
        env = {key: origin.value for key, origin in read.env.items()}
        args = read.argv[1:]
        listen = _port(engine, args, env) or DEFAULT_PORT[engine]
        where = f"{rel}:{entry.line}"
        published = None if read.host_network else read.published(listen)
        if published is not None and published.published is not None:
            port, port_from = published.published, f"ports: in {where} (the engine listens on {listen} in the container)"
        elif read.host_network:
            port, port_from = listen, f"network_mode: host, the engine's port ({where})"
        else:
            port, port_from = listen, f"the engine's port in the container; no ports: entry publishes it on a known host port ({where})"
        payload: list[str] = []
        for model in _model(engine, args, env):
            host_path = read.host_path(model)
            # A relative bind source is where the repository lies on the host: unknown without a deploy_root.
            if host_path is None or (ctx.deploy_root is None and host_path.startswith(str(ctx.root) + "/")):
                ctx.notes.append(Note(path, entry.line, f"services.{entry.name}: the model {model} is a path in the "
                                      "container that no bind mount with a host path maps; payload left out"))
            else:
                payload.append(host_path)
        found.append(Found(name=_service_name(entry.name, ctx.taken), engine=engine, port=port, port_from=port_from,
                           source=where, payload=tuple(payload), compose=rel, compose_service=entry.name))
    return found


LLAMA_SWAP_LISTEN = 8080
"""llama-swap's own port when it runs without ``--listen`` (``:8080``): where clients reach every model."""


def _from_llama_swap(ctx: _Context, path: Path) -> list[Found]:
    """Each model of a llama-swap config whose ``cmd`` starts an engine, read by ``fleetgate.sources.llama_swap``
    (macros, ``${PORT}``, ``env`` as llama-swap reads them). Every model's port is llama-swap's own listen port,
    where clients reach it; the engine's ``${PORT}`` is llama-swap's business (rendered-port-matches holds the engine
    to the model's ``proxy:``)."""
    from fleetgate.sources.llama_swap import read_config

    rel = _rel(ctx.root, path)
    config = read_config(path)
    found: list[Found] = []
    for model_id, model in config.models.items():
        hit = _engine_of(model.argv)
        if hit is None:
            if model.argv and posixpath.basename(model.argv[0]) in ("docker", "podman"):
                ctx.notes.append(Note(path, model.cmd_line, f"models.{model_id}.cmd runs {model.argv[0]}: a container "
                                      "start, which the llama-swap reader does not read yet: skipped"))
            continue
        engine, first = hit
        args = model.argv[first:]
        env = {key: value for key, (value, _) in model.env.items()}
        found.append(Found(name=_service_name(model_id, ctx.taken), engine=engine, port=LLAMA_SWAP_LISTEN,
                           port_from="llama-swap's default --listen :8080 (edit it if llama-swap runs with another)",
                           source=f"{rel}:{model.line}", payload=tuple(_model(engine, args, env)),
                           llama_swap=rel, llama_swap_model=model_id))
    return found


ROUTER_PORT = 8080
"""llama-server's own default ``--port``: where the router listens when started without one."""


def _from_router_preset(ctx: _Context, path: Path) -> list[Found]:
    """Each model of a llama.cpp router preset (``--models-preset FILE.ini``) that names a model file or repository
    (``model``/``m``, ``hf-repo``/``hf``, ``LLAMA_ARG_MODEL``, in its section or ``[*]``), read by
    ``fleetgate.sources.router_preset`` as llama-server reads it. An INI file with no such section is not a preset:
    nothing is found in it. Every model's port is the router's, its default 8080."""
    from fleetgate.engines.llamacpp import BUILD
    from fleetgate.sources.router_preset import child_argv, read_preset

    preset = read_preset(path)
    model_keys = {"model", "m", "LLAMA_ARG_MODEL", "hf-repo", "hf", "hfr", "LLAMA_ARG_HF_REPO"}
    shared = set(preset.global_section.keys) if preset.global_section is not None else set()
    names = [n for n in sorted(preset.sections) if (set(preset.sections[n].keys) | shared) & model_keys]
    rel = _rel(ctx.root, path)
    found: list[Found] = []
    for name in names:
        argv, _ = child_argv(preset, name, "llama-server", BUILD)
        found.append(Found(name=_service_name(name, ctx.taken), engine="llama.cpp", port=ROUTER_PORT,
                           port_from="llama-server's default --port 8080 for the router (edit it if the router runs "
                                     "with another)",
                           source=f"{rel}:{preset.sections[name].line}", payload=tuple(_model("llama.cpp", argv[1:], {})),
                           models_preset=rel, preset_model=name))
    return found


# --- discovery ---------------------------------------------------------------------------------------------------


def discover(root: Path, paths: Sequence[Path] = (), *, render_scripts: bool = True) -> Discovery:
    """Every engine endpoint the files under ``paths`` (default: ``root``) start; ``root`` is where fleet.toml
    goes, and every file it names is relative to it. Bad files are notes, and discovery goes on."""
    root = root.resolve()
    notes: list[Note] = []
    files: dict[Path, None] = {}
    for start in paths or (root,):
        for file in _walk(root, start.resolve(), notes):
            if root in file.parents:
                files[file] = None
            elif _interesting(file.name):
                notes.append(Note(file, None, f"outside {root}, the directory of fleet.toml, which names files under "
                                  "it only: not read"))
    units: list[tuple[Path, Unit]] = []
    yamls: list[Path] = []
    presets: list[Path] = []
    for file in files:
        if file.suffix in (".service", ".container"):
            try:
                units.append((file, parse_unit(file, root=root)))
            except InputError as exc:
                notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
        elif file.suffix in (".yaml", ".yml"):
            yamls.append(file)
        elif file.suffix == ".ini":
            presets.append(file)

    votes: Counter[str] = Counter()
    first: dict[str, str] = {}
    for file, unit in units:
        for host_path, directory in _unit_host_paths(unit):
            mapped = _mapped_root(root, host_path, directory=directory)
            if mapped is not None:
                votes[mapped] += 1
                first.setdefault(mapped, f"{host_path} ({_rel(root, file)}) is {host_path[len(mapped) + 1:]} here")
    deploy_root = votes.most_common(1)[0][0] if votes else None
    for other in votes:
        if other != deploy_root:
            notes.append(Note(root, None, f"deploy_root: units also name the repository under {other} "
                              f"({first[other]}); fleet.toml takes {deploy_root}, the most named"))

    ctx = _Context(root=root, deploy_root=deploy_root, notes=notes, taken=set(),
                   render=_sandbox_render if render_scripts else None, files=tuple(files))
    services: list[Found] = []
    read: Counter[str] = Counter()
    for file, unit in units:
        read["units"] += 1
        try:
            found = _from_unit(ctx, file, unit)
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        if found is not None:
            services.append(found)
    started = {ctx.root / f.serve_script for f in services if f.serve_script is not None}
    for file in files:
        if file in started or file.suffix in (".service", ".container", ".yaml", ".yml", ".ini") or not _standalone(file):
            continue
        read["serve scripts"] += 1
        found = _from_script(ctx, file, None, None, {}, _rel(root, file))
        if found is not None:
            services.append(found)
    for file in yamls:
        data = _yaml(ctx, file)
        if not isinstance(data, dict):
            continue
        try:
            if isinstance(data.get("services"), dict) and any(
                    isinstance(s, dict) and ("image" in s or "command" in s) for s in data["services"].values()):
                read["compose files"] += 1
                services += _from_compose(ctx, file)
            elif isinstance(data.get("models"), dict) and any(
                    isinstance(m, dict) and "cmd" in m for m in data["models"].values()):
                read["llama-swap configs"] += 1
                services += _from_llama_swap(ctx, file)
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
    for file in presets:
        try:
            found_presets = _from_router_preset(ctx, file)
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        if found_presets:
            read["router presets"] += 1
            services += found_presets
    return Discovery(root=root, services=tuple(services), notes=tuple(notes), deploy_root=deploy_root,
                     deploy_root_from=first.get(deploy_root) if deploy_root else None, read=dict(read))


def _shell_script(file: Path) -> str | None:
    """The first 64 KiB of a shell script (``.sh``, or a bash/sh shebang); None for any other file."""
    try:
        with file.open("rb") as stream:
            head = stream.read(2)
            if head != b"#!" and file.suffix != ".sh":
                return None
            head += stream.read(65534)
    except OSError:
        return None
    first = head.split(b"\n", 1)[0]
    if not (file.suffix == ".sh" or b"bash" in first or first.endswith(b"/sh")):
        return None
    return head.decode("utf-8", "replace")


def _standalone(file: Path) -> bool:
    """A shell script no unit starts whose own command lines start an engine (``exec llama-server ...``)."""
    text = _shell_script(file)
    return text is not None and _ENGINE_COMMAND.search(text) is not None


# --- the host, when asked ----------------------------------------------------------------------------------------


def probe_host(*, meminfo: Path = Path("/proc/meminfo"), timeout: float = 10.0) -> tuple[HostFacts, list[str]]:
    """The cards of this machine from ``nvidia-smi`` (else ``rocm-smi``, read as the host checks read it) and its
    RAM from ``meminfo`` (``fleetgate.host.meminfo``).

    Returns the facts and one line per tool that could not answer. Device names are the engine's
    (``CUDA0``, ``ROCm0``), in the order the tool lists the cards.
    """
    problems: list[str] = []
    cards: tuple[Card, ...] = ()
    source = ""
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"], timeout, problems)
        if out is not None:
            parsed: list[Card] = []
            for number, row in enumerate(csv.reader(out.splitlines()), start=1):
                if not row:
                    continue
                try:
                    mib = int(float(row[-1].strip()))
                except (ValueError, IndexError):
                    problems.append(f"nvidia-smi line {number}: {','.join(row)!r}; expected NAME, MEMORY_MIB")
                    parsed = []
                    break
                parsed.append(Card(f"CUDA{len(parsed)}", mib << 20, ",".join(row[:-1]).strip()))
            cards = tuple(parsed)
            source = "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
    elif shutil.which("rocm-smi"):
        from fleetgate.host import ROCM_SMI, parse_rocm_smi

        out = _run(ROCM_SMI.split(), timeout, problems)
        if out is not None:
            try:
                cards = tuple(Card(f"ROCm{i}", c.total, f"card{c.index}") for i, c in enumerate(parse_rocm_smi(out)))
                source = ROCM_SMI
            except ValueError as exc:
                problems.append(f"--probe: {ROCM_SMI}: {exc}")
    else:
        problems.append("--probe: neither nvidia-smi nor rocm-smi is on PATH; the cards stay TODO")
    from fleetgate.host import meminfo as read_meminfo

    ram_gib = None
    try:
        total = read_meminfo(meminfo.read_text(encoding="utf-8")).get("MemTotal")
        ram_gib = round(total / (1 << 30), 1) if total else None
    except (OSError, UnicodeDecodeError):
        pass
    if ram_gib is None:
        problems.append(f"--probe: cannot read MemTotal from {meminfo}; ram_gib stays TODO")
    return HostFacts(cards=cards, ram_gib=ram_gib, source=source), problems


def _run(argv: list[str], timeout: float, problems: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"--probe: {argv[0]} did not answer ({exc})")
        return None
    if done.returncode != 0:
        problems.append(f"--probe: {argv[0]} exited {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}")
        return None
    return done.stdout


# --- the manifest ------------------------------------------------------------------------------------------------


def _s(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def fleet_toml(discovery: Discovery, *, name: str, facts: HostFacts | None = None) -> str:
    """The manifest's text: what the files say, and ``"TODO"`` with a comment for what they cannot."""
    out = ["# Written by `fleetgate init` from the files of this repository. Each value says where it was read;",
           '# "TODO" marks what no file can say: fleet.toml is refused until it is edited.', "", "[fleet]",
           f"name = {_s(name)}"]
    if discovery.deploy_root is not None:
        out.append(f"# where the units find this repository on the host: {discovery.deploy_root_from}")
        out.append(f"deploy_root = {_s(discovery.deploy_root)}")
    out += ["", "[hosts.localhost]"]
    if facts is not None and facts.ram_gib is not None:
        out += ["# MemTotal of /proc/meminfo on the machine `fleetgate init --probe` ran on",
                f"ram_gib = {facts.ram_gib}"]
    else:
        out += ["# TODO: the host's RAM in GiB (MemTotal of /proc/meminfo; `fleetgate init --probe` on the host reads it)",
                f"ram_gib = {_s(TODO)}"]
    if facts is not None and facts.cards:
        out.append(f"# read by {facts.source}")
        out.append("devices = [")
        out += [f"    {{ name = {_s(c.name)}, vram_bytes = {c.vram_bytes} }},  # {c.model}" for c in facts.cards]
        out.append("]")
    else:
        out += ["# TODO: one entry per card, in the order the GPU runtime enumerates them: the engine's device name",
                "# (CUDA0, ROCm0, Vulkan0) and its VRAM in bytes (nvidia-smi --query-gpu=memory.total", "# "
                "--format=csv,noheader,nounits gives MiB: times 1048576); `fleetgate init --probe` on the host reads them.",
                "# A host without a GPU: devices = []",
                f"devices = [{{ name = {_s(TODO)}, vram_bytes = {_s(TODO)} }}]"]
    for found in discovery.services:
        out += ["", f"# found in {found.source}", f"[services.{found.name}]", 'host = "localhost"',
                f"port = {found.port}  # {found.port_from}", f"engine = {_s(found.engine)}"]
        for key in ("unit", "serve_script", "env_file", "compose", "compose_service", "llama_swap", "llama_swap_model",
                    "models_preset", "preset_model"):
            value = getattr(found, key)
            if value is not None:
                out.append(f"{key} = {_s(value)}")
        if found.env_template is not None:
            out.append("# the unit's EnvironmentFile= is written on the host by this script from this template")
            out.append(f"env_file = {{ template = {_s(found.env_template[0])}, script = {_s(found.env_template[1])} }}")
        if found.payload:
            out.append(f"payload = [{', '.join(_s(p) for p in found.payload)}]")
        else:
            out.append("# payload: no model path of the argv is a host file; declare the files the host must hold")
    return "\n".join(out) + "\n"
