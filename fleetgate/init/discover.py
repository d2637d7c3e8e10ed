"""``fleetgate init``'s discovery: the bounded walk, the ``deploy_root`` the units vote for, YAML files told apart
(compose files, llama-swap configs), llama.cpp router presets, and ``discover()``, which hands each file to the
reader of its shape (``fleetgate.init.units`` for units and serve scripts)."""

from __future__ import annotations

import os
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from yaml.nodes import MappingNode, Node

from fleetgate.engines.llamacpp import BUILD
from fleetgate.errors import InputError, NotRead, read_text
from fleetgate.init.found import (
    DEFAULT_PORT,
    ENGINE_BINARIES,
    ENGINE_COMMAND,
    Context,
    Discovery,
    Found,
    Note,
    engine_of,
    model_paths,
    port_of,
    rel_path,
    repository_file,
    service_name,
    shell_script,
    stub_fleet,
    unprefixed,
    unwritable,
)
from fleetgate.init.units import from_script, from_unit, sandbox_render, unit_env
from fleetgate.sources.ansible import RENDERED_FILES, render_template, template_variables
from fleetgate.sources.compose import list_services, project_files, read_compose
from fleetgate.sources.kubernetes import KUSTOMIZATIONS, list_workloads, read_kubernetes, unrendered
from fleetgate.sources.llama_swap import read_config
from fleetgate.sources.nix import nix_units, read_nix_unit
from fleetgate.sources.router_preset import child_argv, read_preset
from fleetgate.sources.systemd import expand_exec
from fleetgate.sources.yaml_bounded import compose_yaml, merged_keys
from fleetgate.units import Unit, parse_unit, split_command, unit_from_text

__all__ = ["discover"]


MAX_FILES = 20000
"""The walk stops after this many directory entries (a repository, not a disk)."""
MAX_DEPTH = 12
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", ".tox", "__pycache__", ".mypy_cache",
                       ".ruff_cache", ".pytest_cache", "site-packages", ".nox", ".cache"})
COMPOSE_NAMES = frozenset({"compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml",
                           "podman-compose.yaml", "podman-compose.yml", "container-compose.yaml",
                           "container-compose.yml"})


# --- the walk ---------------------------------------------------------------------------------------------------


def _walk(root: Path, start: Path, notes: list[Note]) -> Iterator[Path]:
    """Regular files under ``start``, never leaving ``root`` by a symlink, bounded in entries and depth."""
    real_root = root.resolve()
    seen = 0
    base_depth = len(start.parts)

    def unlisted(error: OSError) -> None:
        # A directory the caller may not list (mode 000 when not root): said, never a traceback, never silence.
        notes.append(Note(Path(error.filename or start), None, f"cannot list this directory ({error.strerror}): not read"))

    for directory, dirs, files in os.walk(start, onerror=unlisted, followlinks=False):
        here = Path(directory)
        depth = len(here.parts) - base_depth
        # os.path's tests answer False where a Path's raise (a directory that may be listed but not entered).
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not os.path.exists(here / d / "pyvenv.cfg")
                         and not os.path.islink(here / d))
        if depth >= MAX_DEPTH:
            dirs[:] = []
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                notes.append(Note(start, None, f"more than {MAX_FILES} files: the walk stopped there; pass the "
                                  "directories that hold the units and compose files"))
                return
            path = here / name
            try:
                path.lstat()
            except OSError as exc:
                notes.append(Note(here, None, f"cannot look at the files of this directory ({exc.strerror}): not read"))
                break
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
        if os.path.isfile(local) or (directory and os.path.isdir(local)):
            return "/" + "/".join(parts[:i])
    return None


def _unit_host_paths(unit: Unit) -> Iterator[tuple[str, bool]]:
    """Absolute paths a unit names: env files, the words of its command line, a Quadlet's volume sources."""
    for section in ("Service", "Container"):
        for setting in unit.all(section, "EnvironmentFile"):
            yield setting.value.lstrip("-"), False
    for setting in (*unit.all("Service", "ExecStart"), *unit.all("Container", "Exec")):
        try:
            words = split_command(unprefixed(setting))
        except InputError:
            continue
        for word in words:
            yield word, False
    for setting in unit.all("Container", "Volume"):
        source = setting.value.split(":", 1)[0]
        yield source, True


# --- YAML: compose files and llama-swap configs -----------------------------------------------------------------


def _yaml(ctx: Context, path: Path) -> Node | None:
    """A YAML file's nodes, only to tell a compose file from a llama-swap config (each is then read by its reader);
    None when it is neither readable nor YAML within the bounds its readers keep (one line when its name or its
    top-level keys say it was meant as one)."""
    try:
        text = read_text(path, "the YAML file")
    except InputError as exc:
        if path.name in COMPOSE_NAMES:
            ctx.notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
        return None
    shaped = path.name in COMPOSE_NAMES or re.search(r"^(services|models):", text, re.M) is not None
    try:
        return compose_yaml(path, text, "a compose file or a llama-swap config")
    except InputError as exc:
        if shaped:
            ctx.notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
        return None


def _has_entry_with(section: Node | None, keys: tuple[str, ...]) -> bool:
    """Whether a section maps names to mappings and one of them has one of ``keys`` (merges applied)."""
    return isinstance(section, MappingNode) and any(
        isinstance(entry, MappingNode) and any(key in merged_keys(entry) for key in keys)
        for entry in merged_keys(section).values())


def _from_compose(ctx: Context, path: Path, doors: dict[Path, FrontDoor] | None = None) -> list[Found]:
    """Each service of a compose file whose container starts an engine, read by ``fleetgate.sources.compose`` (the
    reader the seams render it with): the argv and environment of the container, the host port ``ports:`` publishes
    the engine's port on, the host paths the bind mounts give the model paths.

    A container that runs llama-server as a router (``--models-preset FILE``, or ``LLAMA_ARG_MODELS_PRESET``) whose
    preset a bind mount takes from the repository is no service: it is the front door of the preset's models
    (``doors``, by the preset's repository file), with the port it is published on, its ``--models-max`` and its
    mounts, through which the models' paths are the host's."""
    rel = rel_path(ctx.root, path)
    found: list[Found] = []
    for entry in list_services(path, ctx.root):
        defined = f"{rel_path(ctx.root, entry.path)}:{entry.line}"
        engine = ENGINE_BINARIES.get(entry.program or "")
        if engine is None:
            continue
        fleet, stub = stub_fleet(ctx.root, ctx.deploy_root, entry.name, engine, compose=path, compose_service=entry.name)
        read = read_compose(fleet, stub)
        env = {key: origin.value for key, origin in read.env.items()}
        args = read.argv[1:]
        listen = port_of(engine, args, env) or DEFAULT_PORT[engine]
        where = defined
        published = None if read.host_network else read.published(listen)
        if published is not None and published.published is not None:
            port, port_from = published.published, f"ports: in {where} (the engine listens on {listen} in the container)"
        elif read.host_network:
            port, port_from = listen, f"network_mode: host, the engine's port ({where})"
        else:
            port, port_from = listen, f"the engine's port in the container; no ports: entry publishes it on a known host port ({where})"
        preset = _flag_values(args, ("--models-preset",)) or env.get("LLAMA_ARG_MODELS_PRESET")
        if engine == "llama.cpp" and preset and doors is not None:
            local = _compose_repository_file(ctx, read.host_path(preset))
            if local is not None:
                text = _flag_values(args, ("--models-max",)) or env.get("LLAMA_ARG_MODELS_MAX")
                models_max = int(text) if text is not None and text.isdigit() else None
                known = (published is not None and published.published is not None) or read.host_network
                doors[local.resolve()] = FrontDoor(port if known else None, models_max, where, path, read.host_path)
                continue
        payload: list[str] = []
        for model in model_paths(engine, args, env):
            host_path = read.host_path(model)
            # A relative bind source is where the repository lies on the host: unknown without a deploy_root.
            if host_path is None or (ctx.deploy_root is None and host_path.startswith(str(ctx.root) + "/")):
                ctx.notes.append(Note(entry.path, entry.line, f"services.{entry.name}: the model {model} is a path in the "
                                      "container that no bind mount with a host path maps; payload left out"))
            else:
                payload.append(host_path)
        found.append(Found(name=service_name(entry.name, ctx.taken, "compose"), engine=engine, port=port, port_from=port_from,
                           source=where, payload=tuple(payload), compose=rel, compose_service=entry.name))
    return found


_KUBERNETES_KIND = re.compile(r"^\s*(?:- )?kind:\s*[\"']?(?:Deployment|StatefulSet|DaemonSet|ReplicaSet|Job|CronJob|Pod|"
                              r"List|HelmRelease|Kustomization)[\"']?\s*$", re.M)


def _kubernetes_shaped(ctx: Context, path: Path) -> bool:
    """Whether a YAML file is a Kubernetes manifest, a Helm chart's file or a kustomization (read by
    ``fleetgate.sources.kubernetes``, never as compose). One that needs helm or kustomize first is one line with the
    command that renders it (a chart's once, at its Chart.yaml)."""
    next_step = unrendered(path, ctx.root)
    if next_step is not None:
        chart_file = (path.parent / "Chart.yaml").is_file() or (
            path.parent.name == "templates" and (path.parent.parent / "Chart.yaml").is_file())
        # a kustomization's resources and patches are said once, at the kustomization
        kustomized = path.name not in KUSTOMIZATIONS and any((path.parent / k).is_file() for k in KUSTOMIZATIONS)
        if not (chart_file or kustomized) or path.name == "Chart.yaml":
            ctx.notes.append(Note(path, None, next_step, render_first=True))
        return True
    try:
        text = read_text(path, "the YAML file")
    except InputError:
        return False
    return "apiVersion:" in text and _KUBERNETES_KIND.search(text) is not None


def _from_kubernetes(ctx: Context, path: Path) -> list[Found]:
    """Each container of a rendered Kubernetes manifest that starts an engine, read by
    ``fleetgate.sources.kubernetes``: its argv and environment (ConfigMaps and Secrets of its directory), the port
    of the Service that forwards to the engine (else the engine's own), the host paths hostPath volumes give the
    model paths."""
    rel = rel_path(ctx.root, path)
    entries = list_workloads(path, ctx.root)
    per_workload = Counter(entry.workload for entry in entries)
    found: list[Found] = []
    for entry in entries:
        if entry.foreign is not None:
            ctx.notes.append(Note(path, entry.line, f"{entry.workload} container {entry.container} runs {entry.foreign}, "
                                  "which is not an engine fleetgate knows: skipped"))
            continue
        engine = ENGINE_BINARIES.get(entry.program or "")
        if engine is None:
            continue
        container = entry.container if per_workload[entry.workload] > 1 else None
        fleet, stub = stub_fleet(ctx.root, ctx.deploy_root, entry.container, engine, kubernetes=path,
                                 kubernetes_workload=entry.workload, kubernetes_container=container)
        read = read_kubernetes(fleet, stub)
        env = {key: origin.value for key, origin in read.env.items()}
        args = read.argv[1:]
        listen = port_of(engine, args, env) or DEFAULT_PORT[engine]
        where = f"{rel}:{entry.line}"
        targeting = read.targeting(listen)
        if targeting:
            port, port_from = targeting[0].port, (f"Service {targeting[0].service}'s port, which forwards to the "
                                                  f"engine's {listen} ({where})")
        else:
            port, port_from = listen, f"the engine's port in the pod; no Service forwards to it ({where})"
        payload: list[str] = []
        for model in model_paths(engine, args, env):
            host_path = read.host_path(model)
            if host_path is None:
                ctx.notes.append(Note(path, entry.line, f"{entry.workload} container {entry.container}: the model "
                                      f"{model} lies on no hostPath volume; payload left out"))
            else:
                payload.append(host_path)
        name = entry.workload.partition("/")[2] or entry.container
        found.append(Found(name=service_name(name, ctx.taken, "k8s"), engine=engine, port=port, port_from=port_from,
                           source=where, payload=tuple(payload), kubernetes=rel, kubernetes_workload=entry.workload,
                           kubernetes_container=container))
    return found


_NIX_SERVICES = re.compile(r"\b(?:services|systemd)\s*[.=]")
_NIX_ENGINE = re.compile(r"llama-server|vllm|llama-cpp")


def _from_nix(ctx: Context, path: Path) -> list[Found] | None:
    """Each engine unit a NixOS module declares (``services.llama-cpp``, a ``systemd.services.NAME`` whose ExecStart
    runs an engine), read by ``fleetgate.sources.nix`` as the unit NixOS would generate, without evaluating Nix. A unit
    the reader cannot read is one line naming the option and the generated unit to give instead."""
    try:
        text = read_text(path, "the Nix file")
    except InputError:
        return None
    if _NIX_SERVICES.search(text) is None or _NIX_ENGINE.search(text) is None:
        return None  # a flake, a hardware module: no unit of an engine to read
    rel = rel_path(ctx.root, path)
    units = nix_units(path)
    found: list[Found] = []
    for name, line in units.units.items():
        unread = units.unread.get(name)
        if unread is not None:
            ctx.notes.append(Note(unread.path, unread.line, unread.message))
            continue
        if units.engines.get(name) is None:
            continue
        unit = read_nix_unit(path, name)
        setting = unit.all("Service", "ExecStart")[-1]
        env, _ = unit_env(ctx, unit, "Service")
        argv = expand_exec(setting, env).argv
        hit = engine_of(argv)
        if hit is None:
            continue
        engine, start = hit
        args = argv[start:]
        port = port_of(engine, args, env)
        found.append(Found(name=service_name(name, ctx.taken, "nix"), engine=engine, port=port or DEFAULT_PORT[engine],
                           port_from=(f"--port of the unit {rel}:{setting.line} generates" if port
                                      else f"{engine}'s default port (no --port with a number)"),
                           source=f"{rel}:{line}", payload=tuple(model_paths(engine, args, env)), unit=rel,
                           nix_unit=name))
    return found


def _ansible_rendered(ctx: Context, template: Path) -> tuple[str, tuple[Path, ...]] | None:
    """An Ansible role's template rendered from the role's defaults and group_vars/all (``fleetgate.sources.ansible``);
    a variable only a group's or a host's file sets is taken from the one file that sets it (said in fleet.toml's
    comment). None, with one line, when it needs Ansible itself or more than one file could give a variable."""
    extra: list[Path] = []
    candidates = [f for f in ctx.files if f.suffix in (".yml", ".yaml", "") and
                  any(p in ("group_vars", "host_vars") for p in f.relative_to(ctx.root).parts[:-1])
                  and "all" not in (f.stem, f.parent.name)]
    for _ in range(8):
        try:
            return render_template(template, ctx.root, extra), tuple(extra)
        except NotRead as exc:
            missing = re.search(r"'([A-Za-z_][A-Za-z0-9_]*)' is undefined", exc.message)
            setters = []
            if missing is not None:
                for file in candidates:
                    try:
                        if missing.group(1) in template_variables([file])[0]:
                            setters.append(file)
                    except InputError:
                        continue
            if len(setters) != 1 or setters[0] in extra:
                reason = exc.message.removeprefix("not judged: ")
                if len(setters) > 1:
                    reason = (f"'{missing.group(1) if missing else ''}' is set by "
                              f"{', '.join(rel_path(ctx.root, f) for f in setters)}: which applies depends on the "
                              f"host's groups; declare that file in ansible_vars, or {RENDERED_FILES}")
                ctx.notes.append(Note(exc.path, exc.line, reason))
                return None
            extra.append(setters[0])
        except InputError as exc:
            ctx.notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            return None
    return None


LLAMA_SWAP_LISTEN = 8080
"""llama-swap's own port when it runs without ``--listen`` (``:8080``): where clients reach every model."""


def _from_llama_swap(ctx: Context, path: Path, ansible_vars: tuple[Path, ...] = ()) -> list[Found]:
    """Each model of a llama-swap config whose ``cmd`` starts an engine, read by ``fleetgate.sources.llama_swap``
    (macros, ``${PORT}``, ``env`` as llama-swap reads them). Every model's port is llama-swap's own listen port,
    where clients reach it; the engine's ``${PORT}`` is llama-swap's business (rendered-port-matches holds the engine
    to the model's ``proxy:``)."""
    rel = rel_path(ctx.root, path)
    config = read_config(path, ctx.root, ansible_vars)
    found: list[Found] = []
    for model_id, model in config.models.items():
        hit = engine_of(model.argv)
        if hit is None:
            if model.argv and posixpath.basename(model.argv[0]) in ("docker", "podman"):
                ctx.notes.append(Note(path, model.cmd_line, f"models.{model_id}.cmd runs {model.argv[0]}: a container "
                                      "start, which the llama-swap reader does not read yet: skipped"))
            continue
        engine, first = hit
        args = model.argv[first:]
        env = {key: value for key, (value, _) in model.env.items()}
        found.append(Found(name=service_name(model_id, ctx.taken, "swap"), engine=engine, port=LLAMA_SWAP_LISTEN,
                           port_from="llama-swap's default --listen :8080 (edit it if llama-swap runs with another)",
                           source=f"{rel}:{model.line}", payload=tuple(model_paths(engine, args, env)),
                           llama_swap=rel, llama_swap_model=model_id,
                           ansible_vars=tuple(rel_path(ctx.root, f) for f in ansible_vars)))
    return found


ROUTER_PORT = 8080
"""llama-server's own default ``--port``: where the router listens when started without one."""


def _from_router_preset(ctx: Context, path: Path) -> list[Found]:
    """Each model of a llama.cpp router preset (``--models-preset FILE.ini``) that names a model file or repository
    (``model``/``m``, ``hf-repo``/``hf``, ``LLAMA_ARG_MODEL``, in its section or ``[*]``), read by
    ``fleetgate.sources.router_preset`` as llama-server reads it. An INI file with no such section is not a preset:
    nothing is found in it. Every model's port is the router's, its default 8080."""
    preset = read_preset(path)
    model_keys = {"model", "m", "LLAMA_ARG_MODEL", "hf-repo", "hf", "hfr", "LLAMA_ARG_HF_REPO"}
    shared = set(preset.global_section.keys) if preset.global_section is not None else set()
    names = [n for n in sorted(preset.sections) if (set(preset.sections[n].keys) | shared) & model_keys]
    rel = rel_path(ctx.root, path)
    found: list[Found] = []
    for name in names:
        argv, _ = child_argv(preset, name, "llama-server", BUILD)
        found.append(Found(name=service_name(name, ctx.taken, "preset"), engine="llama.cpp", port=ROUTER_PORT,
                           port_from="llama-server's default --port 8080 for the router (edit it if the router runs "
                                     "with another)",
                           source=f"{rel}:{preset.sections[name].line}", payload=tuple(model_paths("llama.cpp", argv[1:], {})),
                           models_preset=rel, preset_model=name))
    return found


# --- the processes in front of the models: llama-swap and the llama.cpp router --------------------------------


@dataclass(frozen=True)
class FrontDoor:
    """What a unit's command line says of the process clients reach for a llama-swap config or a router preset."""

    port: int | None
    models_max: int | None
    where: str
    unit: Path
    """The unit (or compose file) that runs llama-swap or the router (``llama-server --models-preset``): the models
    behind it are the services, not it."""
    host_path: Callable[[str], str | None] | None = None
    """A container's bind mounts, where the router runs in one: the models' paths in it -> the host's."""


_LISTEN = re.compile(r"^(?:.*:)?(\d{1,5})$")


def _flag_values(words: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The last value of any of ``names`` (``--flag VALUE`` or ``--flag=VALUE``), as the engines' parsers keep it."""
    value = None
    for i, word in enumerate(words):
        name, eq, given = word.partition("=")
        if name in names:
            value = given if eq else (words[i + 1] if i + 1 < len(words) else None)
    return value


def _repository_file(ctx_root: Path, deploy_root: str | None, files: Sequence[Path], named: str) -> Path | None:
    local = repository_file(ctx_root, deploy_root, named)
    if local is not None:
        return local.resolve()
    same = [f for f in files if f.name in (posixpath.basename(named), posixpath.basename(named) + ".j2")]
    return same[0].resolve() if len(same) == 1 else None


def _front_doors(root: Path, deploy_root: str | None, files: Sequence[Path],
                 units: Sequence[tuple[Path, Unit]]) -> dict[Path, FrontDoor]:
    """Repository config file -> the port (and ``--models-max``) its unit starts llama-swap or the router with."""
    doors: dict[Path, FrontDoor] = {}
    for file, unit in units:
        for setting in unit.all("Service", "ExecStart")[-1:]:
            try:
                words = split_command(unprefixed(setting))
            except InputError:
                continue
            program = posixpath.basename(words[0]) if words else ""
            where = f"{rel_path(root, file)}:{setting.line}"
            if program == "llama-swap":
                config, listen = _flag_values(words, ("-config", "--config")), _flag_values(words, ("-listen", "--listen"))
                models_max = None
            elif program == "llama-server" and _flag_values(words, ("--models-preset",)) is not None:
                config, listen = _flag_values(words, ("--models-preset",)), _flag_values(words, ("--port",))
                text = _flag_values(words, ("--models-max",))
                models_max = int(text) if text is not None and text.isdigit() else None
            else:
                continue
            local = _repository_file(root, deploy_root, files, config) if config else None
            if local is None:
                continue
            match = _LISTEN.match(listen or "")
            port = int(match.group(1)) if match and 0 < int(match.group(1)) < 65536 else None
            doors[local] = FrontDoor(port, models_max, where, file)
    return doors


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
    nix_files: list[Path] = []
    templates: list[Path] = []
    for file in files:
        if file.suffix in (".service", ".container"):
            try:
                units.append((file, parse_unit(file, root=root)))
            except InputError as exc:
                notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
        elif file.suffix in (".yaml", ".yml"):
            yamls.append(file)
        elif file.suffix == ".ini" and not _inventory(root, file):
            presets.append(file)
        elif file.suffix == ".nix":
            nix_files.append(file)
        elif file.name.endswith((".service.j2", ".container.j2", ".yaml.j2", ".yml.j2")):
            templates.append(file)

    ctx0 = Context(root=root, deploy_root=None, notes=notes, taken=set(), render=None, files=tuple(files))
    template_vars: dict[Path, tuple[Path, ...]] = {}
    swap_templates: list[Path] = []
    for file in templates:
        rendered = _ansible_rendered(ctx0, file)
        if rendered is None:
            continue
        text, extra = rendered
        if file.name.endswith((".service.j2", ".container.j2")):
            try:
                units.append((file, unit_from_text(file, text, file.name.removesuffix(".j2"))))
            except InputError as exc:
                notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
                continue
        elif re.search(r"^models:", text, re.M):
            swap_templates.append(file)
        else:
            continue
        template_vars[file] = extra

    votes: Counter[str] = Counter()
    first: dict[str, str] = {}
    for file, unit in units:
        for host_path, directory in _unit_host_paths(unit):
            mapped = _mapped_root(root, host_path, directory=directory)
            if mapped is not None:
                votes[mapped] += 1
                first.setdefault(mapped, f"{host_path} ({rel_path(root, file)}) is {host_path[len(mapped) + 1:]} here")
    deploy_root = votes.most_common(1)[0][0] if votes else None
    for other in votes:
        if other != deploy_root:
            notes.append(Note(root, None, f"deploy_root: units also name the repository under {other} "
                              f"({first[other]}); fleet.toml takes {deploy_root}, the most named"))

    ctx = Context(root=root, deploy_root=deploy_root, notes=notes, taken=set(),
                   render=sandbox_render if render_scripts else None, files=tuple(files))
    services: list[Found] = []
    read: Counter[str] = Counter()
    doors = _front_doors(root, deploy_root, tuple(files), units)
    fronts = {door.unit for door in doors.values()}
    for file, unit in units:
        read["units"] += 1
        if file in fronts:
            continue  # llama-swap's or the router's models are the services (read below with the port it gives)
        try:
            found = from_unit(ctx, file, unit)
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        if found is not None and not _router(ctx, found, doors):
            services.append(_with_vars(ctx, found, template_vars.get(file, ())))
    started = {ctx.root / f.serve_script for f in services if f.serve_script is not None}
    for file in files:
        if file in started or file.suffix in (".service", ".container", ".yaml", ".yml", ".ini") or not _standalone(file):
            continue
        read["serve scripts"] += 1
        found = from_script(ctx, file, None, None, {}, rel_path(root, file))
        if found is not None and not _router(ctx, found, doors):
            services.append(found)
    for file in nix_files:
        try:
            found_units = _from_nix(ctx, file)
        except NotRead as exc:
            notes.append(Note(exc.path, exc.line, exc.message))
            continue
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        if found_units is not None:
            read["Nix modules"] += 1
            services += found_units
    manifests = [file for file in yamls if _kubernetes_shaped(ctx, file)]
    for file in manifests:
        if unrendered(file, root) is not None:
            continue  # named with the command that renders it
        try:
            found_workloads = _from_kubernetes(ctx, file)
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        read["Kubernetes manifests"] += 1
        services += found_workloads
    documents = [(file, _yaml(ctx, file)) for file in yamls if file not in manifests]
    composes = [file for file, document in documents if isinstance(document, MappingNode) and _compose_shaped(document)]
    # A file another compose project includes or extends is read as part of that project, as compose reads it.
    parts = _project_parts(ctx, composes)
    for file, document in documents:
        if not isinstance(document, MappingNode) or _real(file) in parts:
            continue
        top = merged_keys(document)
        try:
            if file in composes:
                read["compose files"] += 1
                services += _from_compose(ctx, file, doors)
            elif _has_entry_with(top.get("models"), ("cmd",)):
                read["llama-swap configs"] += 1
                services += _with_door(_from_llama_swap(ctx, file), doors.get(file.resolve()), "llama-swap's --listen")
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
    for file in swap_templates:
        try:
            found_models = _from_llama_swap(ctx, file, template_vars[file])
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        read["Ansible templates"] += 1
        services += _with_door(found_models, doors.get(file.resolve()), "llama-swap's --listen")
    read["Ansible templates"] += sum(1 for f in template_vars if f not in swap_templates)
    if not read["Ansible templates"]:
        del read["Ansible templates"]
    for file in presets:
        try:
            found_presets = _from_router_preset(ctx, file)
        except InputError as exc:
            notes.append(Note(exc.path, exc.line, f"{exc.message}: skipped"))
            continue
        if found_presets:
            read["router presets"] += 1
            door = doors.get(file.resolve())
            what = "the router's --port" if door is None or door.host_path is None else "the router's published port"
            services += _with_door(found_presets, door, what)
    named = [found for found in services if _nameable(root, found, notes)]
    return Discovery(root=root, services=tuple(named), notes=tuple(notes), deploy_root=deploy_root,
                     deploy_root_from=first.get(deploy_root) if deploy_root else None, read=dict(read))


def _nameable(root: Path, found: Found, notes: list[Note]) -> bool:
    """Whether fleet.toml (UTF-8 text) can name every file of a service: a name that is not UTF-8 cannot be written
    in it, escaped or not, so the service is left out with one line naming the file escaped."""
    for key in ("unit", "serve_script", "env_file", "compose", "kubernetes", "llama_swap", "models_preset"):
        value = getattr(found, key)
        if value is not None and unwritable(value):
            notes.append(Note(root / value, None, f"{key}: the file name is not UTF-8, which fleet.toml cannot "
                              f"name; services.{found.name} left out (rename the file)"))
            return False
    strings = [*found.payload, *(found.env_template or ()), found.compose_service or "", found.llama_swap_model or "",
               found.kubernetes_workload or "", found.kubernetes_container or "", found.nix_unit or "",
               found.preset_model or "", found.port_from, found.source]
    bad = next((text for text in strings if unwritable(text)), None)
    if bad is not None:
        notes.append(Note(root / found.source.rpartition(":")[0] if ":" in found.source else root / found.source, None,
                          f"{bad}: not UTF-8, which fleet.toml cannot hold; services.{found.name} left out"))
        return False
    return True


def _with_vars(ctx: Context, found: Found, extra: tuple[Path, ...]) -> Found:
    return replace(found, ansible_vars=tuple(rel_path(ctx.root, f) for f in extra)) if extra else found


def _with_door(found: list[Found], door: FrontDoor | None, what: str) -> list[Found]:
    """The services behind llama-swap or the router, with the port (and ``--models-max``) its unit starts it with;
    in a container, each model at the host path its bind mounts give (a path no mount maps is left as written)."""
    if door is None:
        return found
    mapped = door.host_path
    return [replace(f, port=door.port if door.port is not None else f.port,
                    port_from=f"{what} in {door.where}" if door.port is not None else f.port_from,
                    models_max=door.models_max,
                    payload=f.payload if mapped is None else tuple(mapped(p) or p for p in f.payload)) for f in found]


def _router(ctx: Context, found: Found, doors: dict[Path, FrontDoor]) -> bool:
    """Whether ``found`` is llama-server run as a router (a script's rendered ``--models-preset``): then it is no
    service but the front door of its preset's models, at its port with its ``--models-max``. A preset the repository
    does not hold leaves its models unread, said in one line."""
    if found.router_preset is None:
        return False
    local = _repository_file(ctx.root, ctx.deploy_root, ctx.files, found.router_preset)
    where = found.serve_script or found.source
    if local is None:
        ctx.notes.append(Note(ctx.root / where, None, f"{where} starts llama-server as a router on the preset "
                              f"{found.router_preset}, which is no file of the repository: its models are not read "
                              "(keep the preset in the repository, or declare each model as a service)"))
        return True
    doors[local.resolve()] = FrontDoor(found.port, found.models_max, where, ctx.root / where)
    return True


def _compose_repository_file(ctx: Context, host_path: str | None) -> Path | None:
    """The repository file a compose bind mount's host path is: a relative source is the repository itself (the
    compose file's directory, read as ``ctx.root``'s) or under ``deploy_root``."""
    if host_path is None:
        return None
    root = str(ctx.root)
    if host_path.startswith(root + "/"):
        local = Path(host_path)
        return local if local.is_file() and ctx.root.resolve() in local.resolve().parents else None
    return repository_file(ctx.root, ctx.deploy_root, host_path)


def _compose_shaped(document: Node) -> bool:
    top = merged_keys(document)
    return "include" in top or _has_entry_with(top.get("services"), ("image", "command", "extends"))


def _project_parts(ctx: Context, composes: list[Path]) -> set[Path]:
    """The real paths of the compose files that another of ``composes`` includes or extends."""
    parts: set[Path] = set()
    for file in composes:
        try:
            parts.update(_real(p) for p in project_files(file, ctx.root) if _real(p) != _real(file))
        except InputError:
            continue  # said once, when the file is read for its services
    return parts


def _inventory(root: Path, file: Path) -> bool:
    """An Ansible inventory in INI form (``inventory/hosts.ini``), never a llama.cpp preset."""
    parts = file.relative_to(root).parts[:-1]
    return file.name in ("hosts.ini", "inventory.ini") or any(p in ("inventory", "inventories") for p in parts)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


_CONTAINER_RUN = re.compile(r"^\s*(?:(?:exec|nohup|setsid)\s+)*(?:\S*/)?(?:docker|podman)\s+(?:container\s+)?run\b", re.M)


def _standalone(file: Path) -> bool:
    """A shell script no unit starts whose own command lines start an engine (``exec llama-server ...``) or a
    container (``docker run ...``: rendered with the client stubbed, a service when its image is an engine's)."""
    text = shell_script(file)
    return text is not None and (ENGINE_COMMAND.search(text) is not None or _CONTAINER_RUN.search(text) is not None)
