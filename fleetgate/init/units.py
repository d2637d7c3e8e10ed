"""``fleetgate init``'s reading of systemd units, Quadlet ``.container`` files and serve scripts: an ``ExecStart=``
that runs the engine itself, one that runs a repository script (rendered in the sandbox as the seams render it), an
inline ``bash -c``, a ``docker run``/``podman run`` line, a Quadlet whose ``Exec=`` is the engine's arguments (read
as the seams read it), and an ``EnvironmentFile=`` that a script writes from a template."""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from fleetgate.envfile import parse_env_file
from fleetgate.errors import InputError, read_text
from fleetgate.fleet import EnvTemplate
from fleetgate.init.found import (
    DEFAULT_PORT,
    ENGINE_BINARIES,
    Context,
    EngineName,
    Found,
    Note,
    ScriptRender,
    engine_of,
    model_paths,
    port_of,
    rel_path,
    repository_file,
    service_name,
    shell_script,
    stub_fleet,
    unprefixed,
)
from fleetgate.render.dispatch import render
from fleetgate.render.start import QuadletExec, container_run
from fleetgate.render.types import RenderRefused
from fleetgate.sources.docker_run import engine_of_image
from fleetgate.sources.quadlet import read_quadlet
from fleetgate.sources.systemd import expand_exec
from fleetgate.units import Setting, Unit, split_command, split_environment_assignments

__all__ = ["from_script", "from_unit", "sandbox_render", "unit_env"]


_MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin")


def unit_env(ctx: Context, unit: Unit, section: str) -> tuple[dict[str, str], list[Path]]:
    env: dict[str, str] = {}
    files: list[Path] = []
    for setting in unit.all(section, "Environment"):
        env.update(split_environment_assignments(setting))
    for setting in unit.all(section, "EnvironmentFile"):
        value = setting.value
        local = repository_file(ctx.root, ctx.deploy_root, value.lstrip("-"))
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


def _env_template(ctx: Context, host_path: str) -> tuple[Path, Path] | None:
    """The install script of the repository that writes ``host_path`` (names it) and the one template file of the
    repository it names (``*.in``, ``*.tmpl``, ``*.template``): the pair fleet.toml declares as
    ``env_file = { template, script }``, which the render runs in its sandbox. None unless exactly one script fits."""
    found: list[tuple[Path, Path]] = []
    real_root = ctx.root.resolve()
    for file in ctx.files:
        text = shell_script(file) if file.suffix not in (".service", ".container", ".yaml", ".yml") else None
        if text is None:
            continue
        if not re.search(rf"{re.escape(host_path)}(?![\w./-])", text):
            continue
        templates = set()
        for word in _TEMPLATE_WORD.findall(text):
            for base in (file.parent, ctx.root):
                local = (base / word).resolve()
                if real_root in local.parents and os.path.isfile(local):
                    templates.add(local)
                    break
        if len(templates) == 1:
            found.append((templates.pop(), file.resolve()))
    return found[0] if len(found) == 1 else None


def _unit_stem(path: Path) -> str:
    """A unit's name without its type: ``llama.service`` and an Ansible template of it, ``llama.service.j2``."""
    name = path.name.removesuffix(".j2")
    return name.rpartition(".")[0] or name


def from_unit(ctx: Context, path: Path, unit: Unit) -> Found | None:
    if unit.kind == "quadlet":
        return _from_quadlet(ctx, unit)
    starts = unit.all("Service", "ExecStart")
    if not starts:
        return None
    setting = starts[-1]
    words = split_command(unprefixed(setting))
    if not words:
        return None
    env, env_files = unit_env(ctx, unit, "Service")
    rel = rel_path(ctx.root, path)
    hit = engine_of(words)
    if hit is not None:
        engine, start = hit
        name = service_name(_unit_stem(path), ctx.taken, "unit")
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
                how = f"--port as {rel_path(ctx.root, template[1])} renders {rel_path(ctx.root, template[0])} for {rel}"
            except InputError as exc:
                ctx.notes.append(Note(exc.path, exc.line, f"rendering {rel} with its env file from "
                                      f"{rel_path(ctx.root, template[1])}: {exc.message}"))
        args = argv[start:]
        port = port_of(engine, args, env)
        return Found(name=name, engine=engine,
                     port=port or DEFAULT_PORT[engine],
                     port_from=how if port else f"{engine}'s default port (no --port with a number)",
                     source=f"{rel}:{setting.line}", payload=tuple(model_paths(engine, args, env)), unit=rel,
                     env_template=(rel_path(ctx.root, template[0]), rel_path(ctx.root, template[1])) if template else None)
    if posixpath.basename(words[0]) in ("bash", "sh") and len(words) > 2 and words[1] == "-c":
        return _from_inline(ctx, unit, setting, words[2], env)
    script = next((s for s in (repository_file(ctx.root, ctx.deploy_root, w) for w in words) if s is not None), None)
    if script is None:
        return None
    return from_script(ctx, script, path, env_files[0] if len(env_files) == 1 else None, env,
                        f"{rel}:{setting.line}")


def _from_inline(ctx: Context, unit: Unit, setting: Setting, script: str, env: Mapping[str, str]) -> Found | None:
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
        port = port_of(engine, args, env)
        rel = rel_path(ctx.root, unit.path)
        return Found(name=service_name(_unit_stem(unit.path), ctx.taken, "unit"), engine=engine, port=port or DEFAULT_PORT[engine],
                     port_from=f"--port in {rel}:{setting.line}" if port else f"{engine}'s default port (no --port with a number)",
                     source=f"{rel}:{setting.line}", payload=tuple(model_paths(engine, args, env)), unit=rel)
    return None


def _from_quadlet(ctx: Context, unit: Unit) -> Found | None:
    exec_setting = unit.last("Container", "Exec")
    if exec_setting is None:
        return _from_quadlet_exec(ctx, unit)
    volumes = [tuple(s.value.split(":")[:2]) for s in unit.all("Container", "Volume") if ":" in s.value]
    env, env_files = unit_env(ctx, unit, "Container")
    for word in split_command(exec_setting):
        for host, container in volumes:
            container = container.rstrip("/")
            if word == container or word.startswith(container + "/"):
                script = repository_file(ctx.root, ctx.deploy_root, host.rstrip("/") + word[len(container):])
                if script is not None:
                    found = from_script(ctx, script, unit.path, env_files[0] if len(env_files) == 1 else None, env,
                                         f"{rel_path(ctx.root, unit.path)}:{exec_setting.line}")
                    # The argv names the model as the container sees it: the host holds it where Volume= maps it from.
                    return replace(found, payload=tuple(_host_side(p, volumes) for p in found.payload)) if found else None
    return _from_quadlet_exec(ctx, unit)


def _from_quadlet_exec(ctx: Context, unit: Unit) -> Found | None:
    """A Quadlet whose ``Exec=`` is the arguments of the engine its image (or ``Entrypoint=``) starts: rendered as the
    seams render it (fleetgate.render.quadlet), the port clients reach the one ``PublishPort=`` maps to the engine's."""
    read = read_quadlet(unit)
    engine: EngineName | None = None
    if read.entrypoint:
        engine = ENGINE_BINARIES.get(posixpath.basename(read.entrypoint[0]))
    elif read.image is not None:
        by_image = engine_of_image(read.image)
        engine = "llama.cpp" if by_image == "llama.cpp" else "vllm" if by_image == "vllm" else None
    if engine is None:
        if read.exec_setting is not None and engine_of(split_command(read.exec_setting)) is not None:
            ctx.notes.append(Note(read.exec_setting.path, read.exec_setting.line,
                                  f"Exec= runs the engine in image {read.image}, whose entrypoint fleetgate cannot know "
                                  "offline: name it with Entrypoint= in [Container], then run init again"))
        return None
    rel = rel_path(ctx.root, unit.path)
    name = service_name(_unit_stem(unit.path), ctx.taken, "unit")
    fleet, service = stub_fleet(ctx.root, ctx.deploy_root, name, engine, unit=unit.path.resolve(),
                                serve_script=unit.path.resolve())
    try:
        rendered = render(fleet, service)
    except InputError as exc:
        ctx.taken.discard(name)
        ctx.notes.append(Note(exc.path, exc.line, f"rendering {rel} for its port and model: {exc.message}"))
        return None
    found = engine_of(rendered.argv)
    args = rendered.argv[found[1]:] if found is not None else rendered.argv[1:]
    listen = port_of(engine, args, rendered.env) or DEFAULT_PORT[engine]
    start = rendered.start
    quadlet = start.read if isinstance(start, QuadletExec) else None
    published = quadlet.host_port(listen) if quadlet is not None else None
    where = f"{rel}:{read.exec_setting.line}" if read.exec_setting is not None else rel
    if published is not None:
        port, port_from = published, f"the host port {rel}'s PublishPort= maps the engine's {listen} to"
    else:
        port, port_from = listen, f"the engine's port in the container: {rel} publishes none (no PublishPort= for it)"
    payload = [(quadlet.host_path(p) if quadlet is not None else None) or p for p in model_paths(engine, args, rendered.env)]
    return Found(name=name, engine=engine, port=port, port_from=port_from, source=where, payload=tuple(payload), unit=rel)


def _host_side(path: str, volumes: Sequence[tuple[str, ...]]) -> str:
    for host, container in volumes:
        container = container.rstrip("/")
        if host.startswith("/") and (path == container or path.startswith(container + "/")):
            return host.rstrip("/") + path[len(container):]
    return path


# An engine's name, or vLLM's server module (`python -m vllm.entrypoints.openai.api_server`).
_ENGINE_WORD = re.compile(r"(?<![\w.-])(llama-server|vllm)(?:(?![\w.-])|(?=\.entrypoints\.openai\.api_server(?![\w.-])))")
_CONTAINER_RUN = re.compile(r"(?<![\w.-])(?:docker|podman)\s+(?:container\s+)?run(?![\w.-])")


def from_script(ctx: Context, script: Path, unit: Path | None, env_file: Path | None, env: Mapping[str, str],
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
    name = service_name((unit or script).stem, ctx.taken, "unit" if unit is not None else "script")
    rel_script = rel_path(ctx.root, script)
    guesses = tuple(v for v in env.values() if v.startswith("/") and v.endswith(_MODEL_SUFFIXES))
    engine = engines[0]
    rendered = ScriptRender((), {}, ())
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
    args = argv[(engine_of(argv) or (engine, 1))[1]:] if argv else ()
    port = port_of(engine, args, engine_env) if argv else None
    if argv and engine == "vllm" and args[:1] != ("serve",):
        return None  # `vllm bench serve`, `vllm collect-env`: a vllm command that serves nothing
    payload = model_paths(engine, args, engine_env)
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
    env_rel = rel_path(ctx.root, env_file) if env_file is not None else rendered.sourced[0] if len(rendered.sourced) == 1 else None
    preset = _last_value(args, "--models-preset") or engine_env.get("LLAMA_ARG_MODELS_PRESET") if engine == "llama.cpp" else None
    models_max = _last_value(args, "--models-max") or engine_env.get("LLAMA_ARG_MODELS_MAX") if preset else None
    return Found(name=name, engine=engine, port=port or DEFAULT_PORT[engine], port_from=port_from,
                 source=source, payload=tuple(payload),
                 unit=rel_path(ctx.root, unit) if unit is not None else None, serve_script=rel_script,
                 env_file=env_rel, router_preset=preset or None,
                 models_max=int(models_max) if models_max is not None and models_max.isdigit() else None)


def _last_value(args: Sequence[str], flag: str) -> str | None:
    """The last ``--flag VALUE`` or ``--flag=VALUE`` of an engine's argv, as its parser keeps it."""
    value = None
    for i, word in enumerate(args):
        name, eq, given = word.partition("=")
        if name == flag:
            value = given if eq else (args[i + 1] if i + 1 < len(args) else None)
    return value


def sandbox_render(root: Path, deploy_root: str | None, name: str, engine: EngineName, script: Path, unit: Path | None,
                    payload: tuple[str, ...], env_template: tuple[Path, Path] | None = None) -> ScriptRender:
    """Render one script as the seams do, with a fleet of that one service (nothing written, nothing started)."""
    template = (EnvTemplate(template=env_template[0], script=env_template[1], writes=None, where="fleetgate init")
                if env_template is not None else None)
    fleet, service = stub_fleet(root, deploy_root, name, engine, serve_script=script.resolve(),
                                 unit=unit.resolve() if unit else None, payload=payload, env_template=template)

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
        local = repository_file(root, deploy_root, item.target)
        if local is None and item.target.startswith(str(real_root) + "/"):
            local = Path(item.target)
        if local is not None:
            sourced.append(local.resolve().relative_to(real_root).as_posix())
    run = container_run(rendered.start)
    return ScriptRender(rendered.argv, dict(rendered.env), tuple(dict.fromkeys(sourced)), run)
