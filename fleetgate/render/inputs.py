"""A service's inputs, found the way its service manager finds them: the environment the serve script starts
with (and where each variable was set), the script, and what starts the engine.

- no unit: the declared env file (bash's dialect), or the one an install script renders from a template;
- a systemd unit: ``Environment=``, then ``EnvironmentFile=`` over it (systemd's dialect), ``User=`` for ``HOME``, and
  its last ``ExecStart=``: the declared serve script under ``deploy_root``, the engine itself (``engine_exec_start``),
  or an inline ``bash -c`` script (``inline_exec_start``, ``inline_command``: the line as systemd expands it, read as
  env(1) and bash read it);
- a Quadlet: ``[Container]`` ``EnvironmentFile=`` (podman's dialect), ``Environment=`` over it
  (``quadlet_environment``), and the ``Exec=`` that runs the serve script through a ``Volume=``, or, with no serve
  script, the arguments of the image's entrypoint (``quadlet_exec_start``);
- the ``docker run``/``podman run`` lines the script ran, as the stubbed clients recorded them
  (``container_engines``): the one whose container starts the engine, read as the client reads it
  (fleetgate.sources.docker_run).

An env file rendered from a template is the one input found by running something: the install script, in the
sandbox, its administration commands stubbed. The serve script itself is run by fleetgate.render.script.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetgate.envfile import Dialect, EnvEntry, parse_env_file, parse_env_text
from fleetgate.errors import InputError, read_bytes
from fleetgate.fleet import Fleet, Service
from fleetgate.render.script import RENDER_TIMEOUT_S, parsed_before, parsed_now, read_invocations, repo_mounts
from fleetgate.render.start import InlineScript, QuadletExec
from fleetgate.render.types import SYSTEMD_DEFAULT_PATH, Origin, map_to_repo
from fleetgate.sandbox import INSIDE, SandboxSpec
from fleetgate.sandbox import run as run_sandboxed
from fleetgate.sources.ansible import render_template
from fleetgate.sources.docker_run import ENGINE_IMAGES, ContainerRun, parse_client
from fleetgate.sources.nix import read_nix_unit
from fleetgate.sources.systemd import expand_exec
from fleetgate.units import Setting, Unit, parse_unit, split_command, split_environment_assignments, unit_from_text

__all__ = ["MAX_ARG_STRLEN", "InlineScript", "container_engines", "container_lines", "engine_exec_start",
           "env_template_notes", "env_template_of", "inline_command", "inline_exec_start", "quadlet_environment",
           "quadlet_exec_start", "service_inputs", "unit_environment"]

# Linux refuses any single argument or environment string longer than this at exec (MAX_ARG_STRLEN).
MAX_ARG_STRLEN = 32 * 4096


def service_inputs(fleet: Fleet, service: Service) -> tuple[dict[str, Origin], Path, Unit | None]:
    """The environment the unit starts the serve script with, and the script it starts."""
    origins, script, unit = _service_inputs(fleet, service)
    for origin in origins.values():
        file, _, line = origin.where.rpartition(":")
        if "\0" in origin.value:
            raise InputError(file, int(line) if line.isdigit() else None,
                             f"{origin.name}: the value holds a NUL byte, which no environment can carry; expected text")
        size = len(origin.name.encode()) + len(origin.value.encode("utf-8", "surrogateescape")) + 2
        if size > MAX_ARG_STRLEN:
            raise InputError(file, int(line) if line.isdigit() else None,
                             f"{origin.name}: the assignment is {size} bytes; Linux refuses an environment string over "
                             f"{MAX_ARG_STRLEN} bytes (128 KiB) when it starts the serve script")
    return origins, script, unit


def _service_inputs(fleet: Fleet, service: Service) -> tuple[dict[str, Origin], Path, Unit | None]:
    if service.unit is None:
        origins: dict[str, Origin] = {}
        if service.env_file is not None:
            origins.update(_from_env_file(service.env_file, "bash", "env_file"))
        elif service.env_template is not None and service.env_template.writes is not None:
            origins.update(_rendered_env_template(fleet, service, service.env_template.writes, "bash", "env_file"))
        return origins, service.serve_script, None

    unit = _unit(fleet, service)
    if unit.kind == "quadlet":
        return _quadlet_inputs(fleet, service, unit)
    origins = {}
    for setting in unit.all("Service", "Environment"):
        for name, value in split_environment_assignments(setting):
            origins[name] = Origin(name, value, setting.where, "Environment=")
    # Variables from EnvironmentFile= override Environment= (systemd.exec(5)).
    for setting in unit.all("Service", "EnvironmentFile"):
        origins.update(_unit_env_file(fleet, setting, "systemd", service))
    user = unit.last("Service", "User")
    if user is not None and "HOME" not in origins:
        origins["HOME"] = Origin("HOME", f"/home/{user.value}", user.where, "User=")
    script = _exec_start_script(fleet, service, unit)
    return origins, script, unit


def _from_env_file(path: Path, dialect: Dialect, via: str) -> dict[str, Origin]:
    env = parse_env_file(path, dialect)
    return {name: _origin(entry, via) for name, entry in env.items()}


def _origin(entry: EnvEntry, via: str) -> Origin:
    return Origin(entry.name, entry.value, entry.where, via)


def _unit_env_file(fleet: Fleet, setting: Setting, dialect: Dialect, service: Service | None = None) -> dict[str, Origin]:
    value = setting.value
    optional = value.startswith("-")
    host_path = value.lstrip("-")
    local = map_to_repo(fleet, host_path)
    if local is None or not local.is_file():
        template = service.env_template if service is not None else None
        if template is not None and (template.writes is None or template.writes == host_path):
            return _rendered_env_template(fleet, service, host_path, dialect, "EnvironmentFile=")  # type: ignore[arg-type]
        shipped = env_template_of(fleet, host_path)
        if shipped is not None:
            return _from_env_file(shipped, dialect, "EnvironmentFile=")
        if optional:
            return {}
        hint = f" (fleet deploy_root is {fleet.deploy_root})" if fleet.deploy_root else " (set fleet.deploy_root in fleet.toml)"
        raise InputError(setting.path, setting.line,
                         f"EnvironmentFile={host_path} is not a file of this fleet repository{hint}")
    return _from_env_file(local, dialect, "EnvironmentFile=")


# What a repository ships in place of an env file it keeps off version control (an install script copies it to the
# host): ``chat.env.template`` for ``chat.env``, and the generic ``.env.example`` when no file is named after it.
_TEMPLATE_SUFFIXES = (".template", ".example", ".sample", ".dist", ".tmpl", ".in")
_WALK_LIMIT = 20000


def env_template_of(fleet: Fleet, host_path: str) -> Path | None:
    """The one file of the repository shipped as the template of ``host_path``, an env file a unit names that the
    repository does not hold: named after it (``chat.env.example``), else the generic ``.env.example``; None when no
    such file or several are found (which one the host got cannot be told)."""
    base = posixpath.basename(host_path)
    if not base:
        return None
    named = {base + suffix for suffix in _TEMPLATE_SUFFIXES}
    generic = {".env" + suffix for suffix in _TEMPLATE_SUFFIXES}
    found: dict[str, list[Path]] = {"named": [], "generic": []}
    seen = 0
    for walked, dirnames, filenames in os.walk(fleet.root):
        directory = Path(walked)
        dirnames[:] = [d for d in dirnames if d != ".git"]
        seen += len(dirnames) + len(filenames)
        for name in filenames:
            if name in named or name in generic:
                path = directory / name
                if path.is_file() and fleet.root.resolve() in path.resolve().parents:
                    found["named" if name in named else "generic"].append(path)
        if seen > _WALK_LIMIT:
            break
    for kind in ("named", "generic"):
        if found[kind]:
            return found[kind][0] if len(found[kind]) == 1 else None
    return None


def env_template_notes(fleet: Fleet, unit: Unit | None) -> list[str]:
    """One note per ``EnvironmentFile=`` the repository does not hold: read from the template it ships, or unset."""
    notes = []
    for setting in unit.all("Service", "EnvironmentFile") if unit is not None and unit.kind == "systemd" else ():
        host_path = setting.value.lstrip("-")
        local = map_to_repo(fleet, host_path)
        if local is not None and local.is_file():
            continue
        shipped = env_template_of(fleet, host_path)
        if shipped is not None:
            notes.append(f"{setting.where}: EnvironmentFile={host_path} is not in the repository; read from "
                         f"{shipped.relative_to(fleet.root).as_posix()}, the template the repository ships for it")
    return notes


# Administration commands an install script runs around the file it renders: stubbed (they succeed and do nothing)
# when the render runs the script to read that file; sudo runs the rest of its line.
_ADMIN_TOOLS = ("systemctl", "journalctl", "loginctl", "useradd", "groupadd", "usermod", "userdel", "chown", "chgrp",
                "apt-get", "apt", "dnf", "yum", "pacman", "pip", "pip3", "setcap", "restorecon", "semanage")
_SUDO = b"""#!/bin/bash -p
while (($#)) && [[ $1 == -* ]]; do
    case $1 in -u|-g|-C|-D|-h|-p|-r|-t|-U) shift 2 ;; --) shift; break ;; *) shift ;; esac
done
(($#)) && exec "$@"
exit 0
"""
_INSTALL = ('bash "$1" </dev/null >/dev/null 2>"$3/install.stderr"; rc=$?; '
            '[[ -f $2 ]] && cat -- "$2" >"$3/envfile"; exit $rc')


def _rendered_env_template(fleet: Fleet, service: Service, target: str, dialect: Dialect, via: str) -> dict[str, Origin]:
    """``env_file = { template, script }``: the install script run in the sandbox (its administration commands
    stubbed), and the file it wrote at ``target`` read in ``dialect``. Each variable is placed at the template's
    line that sets it, else at the script."""
    template = service.env_template
    assert template is not None
    root = (fleet.deploy_root or "").rstrip("/")
    relative = template.script.relative_to(fleet.root.resolve()).as_posix() if template.script.is_absolute() else str(template.script)
    run_as = f"{root}/{relative}" if root else str(template.script)
    normal = posixpath.normpath(target)
    if not target.startswith("/") or normal != target or "\0" in target:
        raise InputError(fleet.path, None, f"services.{service.name}.env_file.writes = {target!r}: expected the absolute, "
                         "normal host path the install script writes")
    out = f"{INSIDE}/out"
    files: dict[str, bytes] = {f"{INSIDE}/bin/{tool}": b"#!/bin/bash -p\nexit 0\n" for tool in _ADMIN_TOOLS}
    files[f"{INSIDE}/bin/sudo"] = _SUDO
    spec = SandboxSpec(
        command=["/bin/bash", "--noprofile", "--norc", "-c", _INSTALL, "fleetgate-install", run_as, target, out],
        env={"PATH": f"{INSIDE}/bin:{SYSTEMD_DEFAULT_PATH}:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"},
        cwd=root or str(fleet.root), timeout=RENDER_TIMEOUT_S, read_only=repo_mounts(fleet),
        dirs=[posixpath.dirname(target)], files=files,
    )
    result = run_sandboxed(spec, what=template.script)
    if "envfile" not in result.files:
        said = [line for line in result.files.get("install.stderr", b"").decode("utf-8", "replace").splitlines() if line]
        raise InputError(template.script, None, f"the install script ({template.where}) exited {result.returncode} "
                         f"without writing {target}" + (f": {said[-1]}" if said else "")
                         + f"; expected it to render the env file from {template.template.relative_to(fleet.root.resolve())}")
    text = result.files["envfile"].decode("utf-8", "replace")
    lines = read_bytes(template.template, "the env file template").decode("utf-8", "replace").splitlines()
    origins = {}
    for name, entry in parse_env_text(text, Path(target), dialect).items():
        line = next((i for i, raw in enumerate(lines, 1) if re.match(rf"\s*(?:export\s+)?{re.escape(name)}=", raw)), None)
        where = f"{template.template}:{line}" if line else f"{template.script}"
        origins[name] = Origin(name, entry.value, where, via)
    return origins


def _unit(fleet: Fleet, service: Service) -> Unit:
    """The service's unit and its drop-ins, each confined to the fleet repository by its real path: a drop-in
    symlinked to another folder of the repository is one of its files, one symlinked out of it is refused."""
    assert service.unit is not None
    if service.unit.suffix == ".nix":
        return read_nix_unit(service.unit, service.nix_unit)
    if service.unit.suffix == ".j2":
        text = render_template(service.unit, fleet.root, service.ansible_vars)
        return unit_from_text(service.unit, text, service.unit.name.removesuffix(".j2"))
    return parse_unit(service.unit, root=fleet.root)


def _last_exec_start(fleet: Fleet, service: Service) -> tuple[Unit, Setting, list[str]] | None:
    """A systemd unit's last ``ExecStart=`` (the one systemd runs) and its words, prefixes dropped."""
    if service.unit is None:
        return None
    unit = _unit(fleet, service)
    if unit.kind != "systemd":
        return None
    starts = unit.all("Service", "ExecStart")
    if not starts:
        return None
    setting = starts[-1]
    words = split_command(Setting(setting.section, setting.key, setting.value.lstrip("-@+!:"), setting.path, setting.line))
    return unit, setting, words


def engine_exec_start(fleet: Fleet, service: Service) -> tuple[Unit, Setting] | None:
    """The unit and its ``ExecStart=`` when that line runs the engine itself (no serve script), else None."""
    last = _last_exec_start(fleet, service)
    if last is None:
        return None
    unit, setting, words = last
    if words and posixpath.basename(words[0]) == service.binary:
        return unit, setting
    return None


def _exec_start_script(fleet: Fleet, service: Service, unit: Unit) -> Path:
    if engine_exec_start(fleet, service) is not None or inline_exec_start(fleet, service) is not None:
        return unit.path  # the unit runs the engine itself, or an inline script: the unit is the script
    starts = unit.all("Service", "ExecStart")
    if not starts:
        raise InputError(unit.path, None, "no ExecStart= in [Service]; expected the serve script")
    setting = starts[-1]
    words = split_command(Setting(setting.section, setting.key, setting.value.lstrip("-@+!:"), setting.path, setting.line))
    for word in words:
        local = map_to_repo(fleet, word)
        if local is not None:
            if service.serve_script == unit.path and local.is_file():
                return local.resolve()  # no serve_script declared: the one ExecStart= runs
            if local.resolve() != service.serve_script:
                raise InputError(setting.path, setting.line,
                                 f"ExecStart= runs {word}, but fleet.toml declares serve_script "
                                 f"{service.serve_script.relative_to(fleet.root)}")
            return service.serve_script
    raise InputError(setting.path, setting.line,
                     f"ExecStart={setting.value} names no file under the fleet's deploy_root {fleet.deploy_root}; "
                     f"expected the serve script, or {service.binary} itself")


# Shell options of `bash -c` that are passed on to the render's bash: the ones that change how the script runs
# (errexit, nounset, ...). A login or interactive shell (-l, -i), -p (privileged: bash then skips BASH_ENV) and
# long options are dropped; the render reads no profile of the host in any case.
_KEPT_SHELL_LETTERS = frozenset("eufxvCaB")
_KEPT_SHELL_OPTIONS = frozenset({"errexit", "nounset", "pipefail", "xtrace", "verbose", "noglob", "noclobber",
                                 "allexport", "errtrace", "functrace"})
_SHELLS = {"bash": "bash", "sh": "sh", "dash": "sh"}


@dataclass(frozen=True)
class _ShellLine:
    shell: str
    """``bash`` or ``sh``."""
    shell_word: str
    options: tuple[str, ...]
    script_index: int
    """Where the ``-c`` string is in the words (``len(words)`` when ``-c`` has no string)."""
    assignments: tuple[tuple[str, str], ...]
    """``env NAME=VALUE bash -c ...``: what env(1) adds to the environment."""


def _shell_c(words: tuple[str, ...] | list[str]) -> _ShellLine | None:
    """``[env [NAME=VALUE...]] bash|sh [OPTIONS] -c STRING [ARG0 [ARGS...]]`` read as env(1) and bash read it."""
    i = 0
    assignments: list[tuple[str, str]] = []
    if words and posixpath.basename(words[0]) == "env":
        i = 1
        while i < len(words) and "=" in words[i] and not words[i].startswith("-"):
            name, _, value = words[i].partition("=")
            assignments.append((name, value))
            i += 1
    if i >= len(words) or posixpath.basename(words[i]) not in _SHELLS:
        return None
    shell_index = i
    options: list[str] = []
    seen_c = False
    j = i + 1
    while j < len(words):
        word = words[j]
        if word in ("-o", "+o") and j + 1 < len(words):
            if words[j + 1] in _KEPT_SHELL_OPTIONS:
                options += [word, words[j + 1]]
            j += 2
            continue
        if word == "--":
            j += 1
            break
        if word.startswith("--"):
            j += 1
            continue
        if len(word) > 1 and word[0] in "-+":
            letters = word[1:]
            if word[0] == "-" and "c" in letters:
                seen_c = True
            kept = "".join(letter for letter in letters if letter in _KEPT_SHELL_LETTERS)
            if kept:
                options.append(word[0] + kept)
            j += 1
            if "o" in letters and j < len(words):  # -euo pipefail: the cluster's -o takes the next word
                if words[j] in _KEPT_SHELL_OPTIONS:
                    options += [word[0] + "o", words[j]]
                j += 1
            continue
        break
    if not seen_c:
        return None
    return _ShellLine(_SHELLS[posixpath.basename(words[shell_index])], words[shell_index], tuple(options), j,
                      tuple(assignments))


def inline_exec_start(fleet: Fleet, service: Service) -> InlineScript | None:
    """The unit and its ``ExecStart=`` when that line runs an inline shell script (``bash -c '...'``), else None."""
    last = _last_exec_start(fleet, service)
    if last is None:
        return None
    unit, setting, words = last
    if _shell_c(words) is None:
        return None
    return InlineScript(unit, setting)


def inline_command(inline: InlineScript, origins: Mapping[str, Origin],
                    overrides: Mapping[str, str | None]) -> tuple[list[str], dict[str, Origin], str, str]:
    """The inline script as systemd hands it to the shell: the ``ExecStart=`` line expanded with the unit's
    environment first (``${VAR}`` inside the ``-c`` string too, ``$$`` as ``$``), then split into the shell's
    words. Returns the render's command, the environment (with env(1)'s assignments), the ``$0`` the script
    sees and the shell."""
    setting = inline.setting
    env = {name: origin.value for name, origin in origins.items()}
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    argv = expand_exec(setting, env).argv
    line = _shell_c(argv)
    if line is None:
        raise InputError(setting.path, setting.line, f"ExecStart= is no longer a shell's -c once systemd has expanded its "
                         f"variables ({' '.join(argv[:3])} ...); expected bash -c 'SCRIPT' or sh -c 'SCRIPT'")
    if line.script_index >= len(argv):
        raise InputError(setting.path, setting.line, f"ExecStart= runs {line.shell} -c without a command string; "
                         f"{line.shell} refuses it ('-c: option requires an argument'); expected -c 'SCRIPT'")
    script = argv[line.script_index]
    rest = argv[line.script_index + 1:]
    dollar0 = rest[0] if rest else line.shell_word
    _require_inline_bash(script, setting)
    updated = dict(origins)
    for name, value in line.assignments:
        updated[name] = Origin(name, value, setting.where, "ExecStart=")
    return ["/bin/bash", *line.options, "-c", script, dollar0, *rest[1:]], updated, dollar0, line.shell


def _require_inline_bash(script: str, setting: Setting) -> None:
    content = script.encode("utf-8", "surrogateescape")
    if parsed_before("inline", content):
        return
    try:
        check = subprocess.run(["/bin/bash", "--noprofile", "--norc", "-n", "-c", script, "fleetgate-inline"],
                               capture_output=True, check=False, timeout=10, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
                               stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InputError(setting.path, setting.line, "bash could not parse the inline script within 10 s") from None
    if check.returncode != 0:
        said = check.stderr.decode("utf-8", "replace").splitlines()
        message = said[0].split(": ", 2)[-1] if said else f"bash -n exited {check.returncode}"
        raise InputError(setting.path, setting.line, f"ExecStart=: the inline script does not parse: {message}; expected "
                         "a script bash can parse")
    parsed_now("inline", content)


def unit_environment(fleet: Fleet, service: Service, unit: Unit, section: str = "Service") -> dict[str, Origin]:
    """The variables systemd itself holds for a unit's command lines: ``Environment=`` and ``EnvironmentFile=`` of
    ``section`` (a Quadlet's ``[Service]``: its ``[Container]`` ones are the container's, which systemd never sees),
    read as systemd reads them. An ``EnvironmentFile=`` outside the repository raises ``InputError``."""
    origins: dict[str, Origin] = {}
    for setting in unit.all(section, "EnvironmentFile"):
        origins.update(_unit_env_file(fleet, setting, "systemd", service))
    for setting in unit.all(section, "Environment"):
        for name, value in split_environment_assignments(setting):
            origins[name] = Origin(name, value, setting.where, "Environment=")
    return origins


def quadlet_environment(fleet: Fleet, unit: Unit) -> dict[str, Origin]:
    """The container's environment a Quadlet gives: ``[Container]`` ``EnvironmentFile=`` (podman's dialect: quotes
    kept), then ``Environment=`` over it, as podman's ``--env-file`` and ``--env`` merge."""
    origins: dict[str, Origin] = {}
    for setting in unit.all("Container", "EnvironmentFile"):
        origins.update(_unit_env_file(fleet, setting, "podman"))
    for setting in unit.all("Container", "Environment"):
        for name, value in split_environment_assignments(setting):
            origins[name] = Origin(name, value, setting.where, "Environment=")
    return origins


def _mapped_scripts(fleet: Fleet, unit: Unit, words: list[str]) -> list[Path]:
    """The repository files ``Exec=`` words name through a ``Volume=`` (the serve script the container runs)."""
    volumes: list[tuple[str, str]] = []
    for setting in unit.all("Container", "Volume"):
        parts = setting.value.split(":")
        if len(parts) >= 2 and parts[0].startswith("/"):
            volumes.append((parts[0], parts[1]))
    found: list[Path] = []
    for word in words:
        for host, container in volumes:
            if word == container or word.startswith(container.rstrip("/") + "/"):
                local = map_to_repo(fleet, host.rstrip("/") + word[len(container.rstrip("/")):])
                if local is not None and local.is_file():
                    found.append(local.resolve())
    return found


def quadlet_exec_start(fleet: Fleet, service: Service) -> QuadletExec | None:
    """A Quadlet ``.container`` whose ``Exec=`` is the arguments of what the image (or ``Entrypoint=``) starts, and
    no serve script: fleet.toml declares none apart from the unit, and no ``Exec=`` word is a repository file a
    ``Volume=`` maps into the container. None for any other service."""
    if service.unit is None or service.unit.suffix != ".container" or service.serve_script != service.unit:
        return None
    unit = _unit(fleet, service)
    if unit.kind != "quadlet":
        return None
    setting = unit.last("Container", "Exec")
    if setting is not None and _mapped_scripts(fleet, unit, split_command(setting)):
        return None
    return QuadletExec(unit)


def _quadlet_inputs(fleet: Fleet, service: Service, unit: Unit) -> tuple[dict[str, Origin], Path, Unit]:
    origins = quadlet_environment(fleet, unit)
    exec_setting = unit.last("Container", "Exec")
    if exec_setting is None:
        raise InputError(unit.path, None, "no Exec= in [Container]; expected the serve script to run in the container")
    words = split_command(exec_setting)
    if service.serve_script in _mapped_scripts(fleet, unit, words):
        return origins, service.serve_script, unit
    if words and (words[0].startswith("-") or posixpath.basename(words[0]) == service.binary):
        # fleet.toml names a serve script, and the Quadlet passes the engine's own arguments instead.
        raise InputError(exec_setting.path, exec_setting.line,
                         f"Exec= passes {service.binary}'s own arguments in the container, not the declared serve_script "
                         f"{service.serve_script.relative_to(fleet.root)}; expected no serve_script in fleet.toml (the "
                         "Quadlet's Exec= is then read as the arguments of the image's entrypoint)")
    raise InputError(exec_setting.path, exec_setting.line,
                     f"Exec={exec_setting.value} runs no file that a Volume= maps to the declared serve_script "
                     f"{service.serve_script.relative_to(fleet.root)}")


def container_lines(files: Mapping[str, bytes]) -> list[str]:
    """The container clients' command lines the script ran, shortened for a message."""
    lines = []
    for argv, _ in read_invocations(files, prefix="c"):
        lines.append(" ".join(argv[:3]) + (" ..." if len(argv) > 3 else ""))
    return lines


def container_engines(fleet: Fleet, service: Service, files: Mapping[str, bytes]
                       ) -> list[tuple[ContainerRun, tuple[str, ...], dict[str, str], list[str]]]:
    """Every recorded ``docker run``/``podman run`` whose container starts the engine: the run, the engine's argv
    (``argv[0]`` its file name), its environment, and what the render could not read of the line."""
    found = []
    for client_argv, client_env in read_invocations(files, prefix="c"):
        run = parse_client(client_argv)
        if run is None or run.problems:
            continue
        argv = run.engine_argv()
        if not argv or posixpath.basename(argv[0]) != service.binary:
            continue
        notes: list[str] = []
        env: dict[str, str] = {}
        engine = run.engine
        if run.entrypoint is None and engine is not None:
            env.update(ENGINE_IMAGES[engine][1])
        for name in run.env_files:
            env.update(_container_env_file(fleet, name, client_env, notes))
        for item in run.env:
            key, eq, value = item.partition("=")
            if eq:
                env[key] = value
            elif key in client_env:
                env[key] = client_env[key]
        found.append((run, (posixpath.basename(argv[0]), *argv[1:]), env, notes))
    return found


def _container_env_file(fleet: Fleet, name: str, client_env: Mapping[str, str], notes: list[str]) -> dict[str, str]:
    """``--env-file FILE``: read as the client reads it (each line literal, quotes kept), from the repository."""
    path = name if name.startswith("/") else posixpath.join(client_env.get("PWD", "/"), name)
    local = map_to_repo(fleet, posixpath.normpath(path))
    if local is None or not local.is_file():
        notes.append(f"--env-file {name}: not a file of this fleet repository, so its variables are not in the render")
        return {}
    env = {}
    for entry_name, entry in parse_env_file(local, "podman").items():
        env[entry_name] = entry.value
    return env
