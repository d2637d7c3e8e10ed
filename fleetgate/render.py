"""Serve script -> rendered config: what the service really runs.

The serve script is executed by bash, with the environment its unit gives it, and with a stub first on
PATH in place of the engine binary. The stub records the argv and environment it was started with and
exits; nothing of the engine runs and nothing is pattern-matched. Questions the script asks about the
host are answered from the fleet (see ``_render_preamble.bash``): files of the repository are read from
the repository, declared payload files exist, anything else does not. Commands that write files are
stubbed too, so a render never changes anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from fleetgate.envfile import Dialect, EnvEntry, parse_env_file
from fleetgate.errors import InputError, read_bytes
from fleetgate.fleet import Fleet, Service
from fleetgate.sandbox import INSIDE, SandboxResult, SandboxSpec, overrun_message
from fleetgate.sandbox import run as run_sandboxed
from fleetgate.sources.docker_run import ENGINE_IMAGES, ContainerRun, parse_client
from fleetgate.units import Setting, Unit, parse_unit, split_command, split_environment_assignments

if TYPE_CHECKING:
    from fleetgate.sources.compose import ComposeService

__all__ = ["InlineScript", "Origin", "RenderRefused", "Rendered", "SourcedFile", "engine_exec_start", "inline_exec_start",
           "map_to_repo", "render", "service_inputs"]

# systemd's default PATH for services (systemd.exec(5), "Environment variables in spawned processes").
SYSTEMD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
_READ_ONLY_TOOLS = (
    "awk", "basename", "cat", "cut", "date", "dirname", "env", "expr", "false", "grep", "head", "id",
    "nproc", "numfmt", "readlink", "realpath", "sed", "seq", "sleep", "sort", "stat", "tail", "tr",
    "true", "uname", "uniq", "wc",
)
_WRITING_TOOLS = (
    "chmod", "chown", "cp", "dd", "install", "ln", "mkdir", "mkfifo", "mv", "rm", "rmdir", "tee", "touch",
    "truncate",
)
_RENDER_TIMEOUT_S = 10.0
# Container clients: stubbed in the sandbox like the engine, never run (fleetgate.sources.docker_run).
_CONTAINER_CLIENTS = ("docker", "podman")
# The shell's own default PATH (confstr _CS_PATH, bash's `command -p`) and the usual install places.
_DEFAULT_PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


@dataclass(frozen=True)
class Origin:
    """Where a variable of the script's starting environment was set."""

    name: str
    value: str
    where: str
    via: str
    """``EnvironmentFile=`` / ``Environment=`` / ``env_file`` / ``sourced``."""


@dataclass(frozen=True)
class SourcedFile:
    target: str
    """The path as the script named it (a host path)."""
    inside_repo: bool
    caller: str


@dataclass(frozen=True)
class FileTest:
    op: str
    path: str
    answer: bool
    caller: str


@dataclass(frozen=True)
class Rendered:
    service: str
    argv: tuple[str, ...]
    """The engine's argv; ``argv[0]`` is the binary name as the script invoked it."""
    env: Mapping[str, str]
    """The environment the engine was started with."""
    inputs: Mapping[str, Origin]
    """The environment the unit gave the script, with where each variable was set."""
    sourced: tuple[SourcedFile, ...]
    tests: tuple[FileTest, ...]
    writes: tuple[tuple[str, ...], ...]
    script: Path
    unit: Unit | None
    extra_invocations: tuple[tuple[str, ...], ...] = field(default=())
    trace: str = ""
    """bash's own trace of the run (``set -x``, each line ``+FILE:LINE: command``): where a value was made."""
    compose: ComposeService | None = None
    """The compose service read, when a compose file starts the engine (ports, mounts, GPUs)."""
    notes: tuple[str, ...] = ()
    """What the render had to assume, one line each (a directory the repository does not hold made a placeholder,
    an engine stubbed at a path the repository does not hold, a specifier that needs the host)."""
    container: ContainerRun | None = None
    """The ``docker run``/``podman run`` line that starts the engine, where one does (its ports, volumes, GPUs)."""
    upstream_port: int | None = None
    """Where a proxy in front of the engine forwards to (llama-swap's ``proxy:``): the port the engine must listen
    on; None when clients reach the engine at the fleet's declared port."""

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[1:]

    def first_traced(self, needle: str) -> str | None:
        """``FILE:LINE`` of the first command bash traced whose expansion holds ``needle``, else None."""
        for line in self.trace.splitlines():
            match = _TRACE.match(line)
            if match and needle in line[match.end():]:
                return f"{match.group('file')}:{match.group('line')}"
        return None


class RenderRefused(InputError):
    """The serve script exited without starting the engine."""

    def __init__(self, path: Path, line: int | None, message: str, stderr: str,
                 inputs: Mapping[str, Origin] | None = None, sourced: tuple[SourcedFile, ...] = (),
                 tests: tuple[FileTest, ...] = ()) -> None:
        super().__init__(path, line, message)
        self.stderr = stderr
        self.inputs = dict(inputs or {})
        self.sourced = sourced
        self.tests = tests
        """The file tests the script ran before it refused (``[ -f "$MODEL" ]`` answered no)."""


def map_to_repo(fleet: Fleet, host_path: str) -> Path | None:
    """A host path of the deployed repository -> the repository file, or None.

    Confined by the real path, as the kernel resolves it on a host where the repository is deployed
    at ``deploy_root``: ``..`` and symlinks inside the repository are followed (an absolute link into
    ``deploy_root`` stays in the repository), and a path that leaves the repository is None however it
    is spelt. Components outside the repository are taken as written (this machine is not the host).
    """
    if fleet.deploy_root is None or not host_path.startswith("/") or "\0" in host_path:
        return None
    root = PurePosixPath(fleet.deploy_root)
    real_root = fleet.root.resolve()
    pending = list(PurePosixPath(host_path).parts[1:])
    current = PurePosixPath("/")
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        current = current / part
        if current == root or root not in current.parents:
            continue
        local = real_root.joinpath(*current.relative_to(root).parts)
        if local.is_symlink():
            hops += 1
            if hops > 40:
                return None
            target = PurePosixPath(os.readlink(local))
            if target.is_absolute():
                current = PurePosixPath("/")
                pending[:0] = list(target.parts[1:])
            else:
                current = current.parent
                pending[:0] = list(target.parts)
    if current != root and root not in current.parents:
        return None
    return real_root.joinpath(*current.relative_to(root).parts)


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

    unit = parse_unit(service.unit, root=fleet.root)
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
        if optional:
            return {}
        hint = f" (fleet deploy_root is {fleet.deploy_root})" if fleet.deploy_root else " (set fleet.deploy_root in fleet.toml)"
        raise InputError(setting.path, setting.line,
                         f"EnvironmentFile={host_path} is not a file of this fleet repository{hint}")
    return _from_env_file(local, dialect, "EnvironmentFile=")


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
        cwd=root or str(fleet.root), timeout=_RENDER_TIMEOUT_S, read_only=_repo_mounts(fleet),
        dirs=[posixpath.dirname(target)], files=files,
    )
    result = run_sandboxed(spec, what=template.script)
    if "envfile" not in result.files:
        said = [line for line in result.files.get("install.stderr", b"").decode("utf-8", "replace").splitlines() if line]
        raise InputError(template.script, None, f"the install script ({template.where}) exited {result.returncode} "
                         f"without writing {target}" + (f": {said[-1]}" if said else "")
                         + f"; expected it to render the env file from {template.template.relative_to(fleet.root.resolve())}")
    from fleetgate.envfile import parse_env_text

    text = result.files["envfile"].decode("utf-8", "replace")
    lines = read_bytes(template.template, "the env file template").decode("utf-8", "replace").splitlines()
    origins = {}
    for name, entry in parse_env_text(text, Path(target), dialect).items():
        line = next((i for i, raw in enumerate(lines, 1) if re.match(rf"\s*(?:export\s+)?{re.escape(name)}=", raw)), None)
        where = f"{template.template}:{line}" if line else f"{template.script}"
        origins[name] = Origin(name, entry.value, where, via)
    return origins


def _last_exec_start(service: Service) -> tuple[Unit, Setting, list[str]] | None:
    """A systemd unit's last ``ExecStart=`` (the one systemd runs) and its words, prefixes dropped."""
    if service.unit is None:
        return None
    unit = parse_unit(service.unit)
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
    last = _last_exec_start(service)
    if last is None:
        return None
    unit, setting, words = last
    if words and posixpath.basename(words[0]) == service.binary:
        return unit, setting
    return None


def _render_exec_start(fleet: Fleet, service: Service, direct: tuple[Unit, Setting],
                       overrides: Mapping[str, str | None]) -> Rendered:
    """A unit whose ``ExecStart=`` is the engine: the argv is the line as systemd expands it (fleetgate.sources.systemd);
    nothing runs, so there is nothing to sandbox."""
    from fleetgate.sources.systemd import expand_exec

    unit, setting = direct
    origins, _, _ = service_inputs(fleet, service)
    env = {name: origin.value for name, origin in origins.items()}
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    line = expand_exec(setting, env)
    engine_env = {"PATH": SYSTEMD_DEFAULT_PATH, "LANG": "C.UTF-8", **env}
    return Rendered(
        service=service.name,
        argv=(posixpath.basename(line.argv[0]), *line.argv[1:]),
        env=engine_env,
        inputs=origins,
        sourced=(),
        tests=(),
        writes=(),
        script=unit.path,
        unit=unit,
        notes=tuple(u.describe() for u in unit.unresolved),
    )


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


@dataclass(frozen=True)
class InlineScript:
    """A unit whose ``ExecStart=`` runs ``bash -c '...'`` (or ``sh -c``, ``/usr/bin/env bash -c``)."""

    unit: Unit
    setting: Setting


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
    last = _last_exec_start(service)
    if last is None:
        return None
    unit, setting, words = last
    if _shell_c(words) is None:
        return None
    return InlineScript(parse_unit(unit.path, root=fleet.root), setting)


def _inline_command(inline: InlineScript, origins: Mapping[str, Origin],
                    overrides: Mapping[str, str | None]) -> tuple[list[str], dict[str, Origin], str, str]:
    """The inline script as systemd hands it to the shell: the ``ExecStart=`` line expanded with the unit's
    environment first (``${VAR}`` inside the ``-c`` string too, ``$$`` as ``$``), then split into the shell's
    words. Returns the render's command, the environment (with env(1)'s assignments), the ``$0`` the script
    sees and the shell."""
    from fleetgate.sources.systemd import expand_exec

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


def _quadlet_inputs(fleet: Fleet, service: Service, unit: Unit) -> tuple[dict[str, Origin], Path, Unit]:
    origins: dict[str, Origin] = {}
    # podman: --env-file first, then --env overrides it.
    for setting in unit.all("Container", "EnvironmentFile"):
        origins.update(_unit_env_file(fleet, setting, "podman"))
    for setting in unit.all("Container", "Environment"):
        for name, value in split_environment_assignments(setting):
            origins[name] = Origin(name, value, setting.where, "Environment=")
    volumes: list[tuple[str, str]] = []
    for setting in unit.all("Container", "Volume"):
        parts = setting.value.split(":")
        if len(parts) >= 2 and parts[0].startswith("/"):
            volumes.append((parts[0], parts[1]))
    exec_setting = unit.last("Container", "Exec")
    if exec_setting is None:
        raise InputError(unit.path, None, "no Exec= in [Container]; expected the serve script to run in the container")
    for word in split_command(exec_setting):
        for host, container in volumes:
            if word == container or word.startswith(container.rstrip("/") + "/"):
                host_path = host.rstrip("/") + word[len(container.rstrip("/")):]
                local = map_to_repo(fleet, host_path)
                if local is not None and local.resolve() == service.serve_script:
                    return origins, service.serve_script, unit
    raise InputError(exec_setting.path, exec_setting.line,
                     f"Exec={exec_setting.value} runs no file that a Volume= maps to the declared serve_script "
                     f"{service.serve_script.relative_to(fleet.root)}")


def render(
    fleet: Fleet,
    service: Service,
    *,
    overrides: Mapping[str, str | None] | None = None,
    payload: tuple[str, ...] | None = None,
    args: tuple[str, ...] = (),
    timeout: float = _RENDER_TIMEOUT_S,
) -> Rendered:
    """Run the serve script in the sandbox and capture what it starts.

    ``overrides`` replaces variables (``None`` unsets one) in the script's starting environment and
    again after every file the script sources; ``payload`` replaces the declared payload files;
    ``args`` are the script's positional arguments (what a unit's ``ExecStart=`` passes after it).
    """
    if service.compose is not None:
        from fleetgate.sources.compose import render_compose

        return render_compose(fleet, service, overrides or {})
    if service.llama_swap is not None:
        from fleetgate.sources.llama_swap import render_service

        return render_service(fleet, service, overrides or {})
    if service.models_preset is not None:
        from fleetgate.sources.router_preset import render_service as render_preset

        return render_preset(fleet, service, overrides or {})
    direct = engine_exec_start(fleet, service)
    if direct is not None:
        return _render_exec_start(fleet, service, direct, overrides or {})
    origins, script, unit = service_inputs(fleet, service)
    notes = [u.describe() for u in unit.unresolved] if unit is not None else []
    inline = inline_exec_start(fleet, service)
    command: list[str] | None = None
    dollar0: str | None = None
    if inline is not None:
        command, origins, dollar0, shell = _inline_command(inline, origins, overrides or {})
        if shell == "sh":
            notes.append(f"{inline.setting.where}: ExecStart= runs sh -c; the inline script is rendered by bash, not by "
                         "the host's /bin/sh (a bashism the host's sh refuses renders here)")
    else:
        _require_bash(script)
    _require_program_name(fleet, service)
    payload = service.payload if payload is None else payload
    engine_paths: list[str] = []
    placeholder_dirs: list[str] = []
    run_as = _script_as_run(fleet, script, unit)
    # An engine started by an absolute path the sandbox does not have yet, or a directory the script cd's into
    # that the repository does not hold: made inside the sandbox (a stub, an empty directory) and run again.
    for _ in range(4):
        result = _run_script(fleet, service, script, origins, dict(overrides or {}), payload, timeout, engine_paths,
                             args, command=command, placeholder_dirs=placeholder_dirs, run_as=run_as)
        invocations = _read_invocations(result.files)
        containers = _container_engines(fleet, service, result.files)
        if invocations or containers:
            break
        missing_dirs = [d for d in _missing_directories(result.stderr) if d not in placeholder_dirs]
        missing = [p for p in _missing_engine_paths(result.stderr, service.binary, placeholder_dirs) if p not in engine_paths]
        if not missing and not missing_dirs:
            break
        engine_paths += missing
        placeholder_dirs += missing_dirs
    if inline is not None:
        result = _inline_records(result, inline.setting)
    # bash traced the script by the path it was run by; a failure names the repository's file.
    trace = result.files.get("trace", b"").replace(f"+{run_as}:".encode(), f"+{script}:".encode())
    sourced = tuple(_read_sourced(result.files))

    def locate(stderr: str) -> tuple[int | None, str]:
        if inline is not None:
            line, message = _last_error(stderr, Path(dollar0 or "bash"))
            return (inline.setting.line if line is not None else None), message
        return _last_error(stderr, run_as)

    if not invocations and not containers and result.overrun is not None:
        raise RenderRefused(script, _last_traced_line(trace, script),
                            f"{service.binary} was not started: {overrun_message(result.overrun, 'the serve script')}",
                            result.stderr, origins, sourced, tuple(_read_tests(result.files)))
    if result.timed_out:
        raise RenderRefused(script, _last_traced_line(trace, script),
                            f"the serve script did not exec {service.binary} within {timeout:g} s (a wait loop or a prompt?)",
                            "", origins, sourced)
    notes += [f"{path}: the repository does not hold this directory, which the script enters (cd); rendered in an "
              "empty placeholder of it" for path in placeholder_dirs]
    notes += [f"{path}: the engine is started by this path, which the repository does not hold; stubbed there"
              for path in engine_paths]
    if not invocations and containers:
        run, argv, engine_env, container_notes = containers[-1]
        return Rendered(
            service=service.name, argv=argv, env=engine_env, inputs=origins, sourced=sourced,
            tests=tuple(_read_tests(result.files)), writes=tuple(_read_writes(result.files)), script=script, unit=unit,
            extra_invocations=tuple(c[1] for c in containers[:-1]), trace=trace.decode("utf-8", "replace"),
            notes=tuple(notes + container_notes), container=run,
        )
    if not invocations:
        stderr = result.stderr
        line, message = locate(stderr)
        line = line or _last_traced_line(trace, script)
        clients = _container_lines(result.files)
        if clients and not message:
            message = f"{clients[-1]} runs no image fleetgate knows as {service.binary}'s"
        raise RenderRefused(
            script, line,
            f"the serve script exited {result.returncode} without starting {service.binary}"
            + (f": {message}" if message else ""),
            stderr, origins, sourced, tuple(_read_tests(result.files)),
        )
    argv, engine_env = invocations[-1]
    return Rendered(
        service=service.name,
        argv=argv,
        env=_engine_env(engine_env),
        inputs=origins,
        sourced=sourced,
        tests=tuple(_read_tests(result.files)),
        writes=tuple(_read_writes(result.files)),
        script=script,
        unit=unit,
        extra_invocations=tuple(a for a, _ in invocations[:-1]),
        trace=trace.decode("utf-8", "replace"),
        notes=tuple(notes),
    )


def _inline_records(result: SandboxResult, setting: Setting) -> SandboxResult:
    """bash -c has no BASH_SOURCE: its traced lines (``+:N:``) and the callers of its tests and sources (``:N``)
    are the unit's ``ExecStart=`` line."""
    where = f"{setting.path}:{setting.line}".encode()
    files = dict(result.files)
    files["trace"] = re.sub(rb"^(\++):\d+: ", lambda m: m.group(1) + where + b": ", files.get("trace", b""),
                            flags=re.MULTILINE)
    for name in ("tests", "sources"):
        if name in files:
            files[name] = re.sub(rb"\0:\d*\0", b"\0" + where + b"\0", files[name])
    return dataclasses.replace(result, files=files)


def _container_lines(files: Mapping[str, bytes]) -> list[str]:
    """The container clients' command lines the script ran, shortened for a message."""
    lines = []
    for argv, _ in _read_invocations(files, prefix="c"):
        lines.append(" ".join(argv[:3]) + (" ..." if len(argv) > 3 else ""))
    return lines


def _container_engines(fleet: Fleet, service: Service, files: Mapping[str, bytes]
                       ) -> list[tuple[ContainerRun, tuple[str, ...], dict[str, str], list[str]]]:
    """Every recorded ``docker run``/``podman run`` whose container starts the engine: the run, the engine's argv
    (``argv[0]`` its file name), its environment, and what the render could not read of the line."""
    found = []
    for client_argv, client_env in _read_invocations(files, prefix="c"):
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


def _script_as_run(fleet: Fleet, script: Path, unit: Unit | None) -> Path:
    """The path bash runs the serve script by: a unit starts it from where the hosts deploy the repository
    (``deploy_root``, mounted there read-only), so ``$0`` and ``BASH_SOURCE`` say what they say on the host,
    not where this checkout lies; a script without a unit (or a fleet without ``deploy_root``) is run by its
    own path (docs/sandbox.md)."""
    if unit is None or not fleet.deploy_root:
        return script
    try:
        relative = script.relative_to(fleet.root)
    except ValueError:
        return script
    return Path(fleet.deploy_root.rstrip("/")) / relative


def _engine_env(recorded: Mapping[str, str]) -> dict[str, str]:
    """The engine's environment without the render's own variables and stub directories (a unit's own
    ``BASH_ENV`` stays: the preamble puts it back after it has run)."""
    env = {k: v for k, v in recorded.items()
           if not k.startswith("__FG_") and not (k == "BASH_ENV" and v == _PREAMBLE_PATH)}
    if "PATH" in env:
        env["PATH"] = ":".join(d for d in env["PATH"].split(":") if not d.startswith(INSIDE + "/"))
    return env


def _repo_mounts(fleet: Fleet) -> list[tuple[Path, str]]:
    """The repository, read-only, at its own path and where the hosts deploy it."""
    local = str(fleet.root)
    mounts = [(fleet.root, local)]
    root = fleet.deploy_root.rstrip("/") if fleet.deploy_root else None
    if root and (not root.startswith("/") or root.startswith("//") or posixpath.normpath(root) != root or "\0" in root
                 or any(part in (".", "..") for part in root.split("/"))):
        raise InputError(fleet.path, None, f"fleet.deploy_root {fleet.deploy_root!r}: expected an absolute path "
                         "without '.', '..' or repeated slashes (where the hosts check the repository out)")
    if root and root != local:
        if root.startswith(local + "/") or local.startswith(root + "/") or root in ("", "/"):
            raise InputError(fleet.path, None, f"fleet.deploy_root {fleet.deploy_root} and the repository's own path {local} "
                             "nest; expected two separate places (check the repository out elsewhere)")
        mounts.append((fleet.root, root))
    return mounts


def _engine_stub_paths(fleet: Fleet, service: Service, env_path: str, extra: list[str]) -> list[str]:
    """Every path the engine could be started by: each directory of the script's PATH and the
    shell's default PATH, copies of the engine inside the repository, and paths a previous run named."""
    paths: list[str] = []
    for directory in (*env_path.split(":"), *_DEFAULT_PATH_DIRS):
        if directory.startswith("/") and not directory.startswith(INSIDE):
            paths.append(posixpath.join(posixpath.normpath(directory), service.binary))
    if service.binary not in fleet.engine_copies:
        # Walked once per loaded fleet, not once per render: the walk grows with the repository.
        fleet.engine_copies[service.binary] = tuple(_engines_in_repo(fleet.root, service.binary))
    for found in fleet.engine_copies[service.binary]:
        relative = found.relative_to(fleet.root).as_posix()
        paths += [f"{where}/{relative}" for _, where in _repo_mounts(fleet)]
    paths += extra
    return list(dict.fromkeys(paths))


def _engines_in_repo(root: Path, binary: str, limit: int = 20000) -> list[Path]:
    found: list[Path] = []
    seen = 0
    for directory, dirnames, filenames in os.walk(root):
        seen += len(dirnames) + len(filenames)
        if binary in filenames:
            found.append(Path(directory) / binary)
        if seen > limit:
            break
    return found


_MISSING = re.compile(r"(?<![^\s:'\"])(?P<path>/[^:'\n]*): (?:No such file or directory|not found|Permission denied|cannot execute)")
_MISSING_RELATIVE = re.compile(r": (?P<path>[^/:'\n][^:'\n]*): (?:No such file or directory|not found)")
_MISSING_DIR = re.compile(r"(?:cd|pushd): (?P<path>/[^:'\n]*): No such file or directory")


def _normal_outside_render(path: str) -> bool:
    """An absolute path, already normal (no ``.``, ``..`` or ``//``), outside the render's own directory."""
    return (path.startswith("/") and posixpath.normpath(path) == path and not path.startswith("//")
            and path != "/" and path != INSIDE and not path.startswith(INSIDE + "/"))


def _missing_engine_paths(stderr: str, binary: str, placeholder_dirs: list[str] | None = None) -> list[str]:
    """Absolute paths of the engine that bash (or env, nohup, ...) could not start.

    A stderr line is the script's to write, so what is taken from it is only ever a stub of the engine,
    made by the sandbox's init inside the new root (never on this machine): an absolute path, already
    normal (no ``.``, ``..`` or ``//``), outside the render's own directory, ending in the binary's name.
    A relative one (``./llama-server`` after a ``cd``) is taken in each placeholder directory the script entered.
    """
    found = []
    for match in _MISSING.finditer(stderr):
        path = match.group("path").strip().strip("'\"")
        if posixpath.basename(path) == binary and _normal_outside_render(path):
            found.append(path)
    for match in _MISSING_RELATIVE.finditer(stderr):
        relative = match.group("path").strip()
        if posixpath.basename(relative) != binary or relative.startswith("-"):
            continue
        for directory in placeholder_dirs or ():
            path = posixpath.normpath(posixpath.join(directory, relative))
            if posixpath.basename(path) == binary and _normal_outside_render(path):
                found.append(path)
    return list(dict.fromkeys(found))


def _missing_directories(stderr: str) -> list[str]:
    """Absolute directories the script could not ``cd``/``pushd`` into: made empty inside the sandbox (after
    pivot_root, like the engine's stubs) and the script run once more. Normal paths outside the render's own only."""
    found = [match.group("path") for match in _MISSING_DIR.finditer(stderr)]
    return list(dict.fromkeys(path for path in found if _normal_outside_render(path)))


# Programs the sandbox's init runs after it has put the stubs, and the shells a script is run by: an
# engine stub over one of them would stand in for the render's own machinery.
_RENDER_OWN_PROGRAMS = frozenset({"bash", "sh", "env", "setpriv", "sleep", "tar", "mount", "umount", "chmod",
                                  "hostname", "pivot_root", "cp", "mkdir"})


def _require_program_name(fleet: Fleet, service: Service) -> None:
    """``binary`` is a program's file name: the render stubs it in every directory of the PATH, so a
    name with a slash, a dotfile (``.bash_profile``, ``.bashrc``: files bash reads at start) or one of
    the render's own programs would be a stub of something else."""
    binary = service.binary
    problem = None
    if not binary or "/" in binary or "\0" in binary or "\n" in binary:
        problem = "a file name without '/'"
    elif binary.startswith(".") or binary.startswith("-"):
        problem = "a program's name, not a dotfile or an option (a stub named like a file bash reads at start " \
                  "would change how bash behaves)"
    elif binary in _RENDER_OWN_PROGRAMS:
        problem = "the engine's own program name, not one of the programs the render itself runs"
    if problem is not None:
        raise InputError(fleet.path, None, f"services.{service.name}.binary = {binary!r}: expected {problem}")


def _run_script(fleet: Fleet, service: Service, script: Path, origins: Mapping[str, Origin],
                overrides: Mapping[str, str | None], payload: tuple[str, ...], timeout: float,
                engine_paths: list[str], args: tuple[str, ...] = (), *, command: list[str] | None = None,
                placeholder_dirs: list[str] | None = None, run_as: Path | None = None) -> SandboxResult:
    out = f"{INSIDE}/out"
    files: dict[str, bytes] = {f"{INSIDE}/bin/{service.binary}": _stub(out, kind="engine")}
    client = _stub(out, kind="container")
    for name in _CONTAINER_CLIENTS:
        if name != service.binary:
            files[f"{INSIDE}/bin/{name}"] = client
    for tool in _WRITING_TOOLS:
        files[f"{INSIDE}/bin/{tool}"] = _stub(out, kind="writer")
    files[_PREAMBLE_PATH] = _PREAMBLE()
    links = {f"{INSIDE}/tools/{tool}": found for tool, found in _read_only_tools().items()}

    env = {name: origin.value for name, origin in origins.items()}
    env.setdefault("PATH", SYSTEMD_DEFAULT_PATH)
    env.setdefault("HOME", "/root")
    env.setdefault("LANG", "C.UTF-8")
    script_path = env["PATH"]
    stub = _stub(out, kind="engine")
    for path in _engine_stub_paths(fleet, service, script_path, engine_paths):
        files.setdefault(path, stub)
    # A container client is never run, whichever path the script names it by (the repository's own
    # directories hold no client: a stub there would only layer the read-only repository for nothing).
    mounts = [where.rstrip("/") for _, where in _repo_mounts(fleet)]
    for directory in (*script_path.split(":"), *_DEFAULT_PATH_DIRS):
        normal = posixpath.normpath(directory) if directory.startswith("/") else ""
        if normal and not normal.startswith(INSIDE) and not any(normal == m or normal.startswith(m + "/") for m in mounts):
            for name in _CONTAINER_CLIENTS:
                if name != service.binary:
                    files.setdefault(posixpath.join(posixpath.normpath(directory), name), client)
    env["PATH"] = f"{INSIDE}/bin:{INSIDE}/tools:{env['PATH']}"
    # bash reads BASH_ENV before the script: the preamble first, then the unit's own (the preamble
    # reads it as bash would, confined to the repository, and puts the variable back).
    if "BASH_ENV" in env:
        env["__FG_BASH_ENV"] = env["BASH_ENV"]
        env["__FG_BASH_ENV_WHERE"] = origins["BASH_ENV"].where if "BASH_ENV" in origins else "BASH_ENV"
    env["BASH_ENV"] = _PREAMBLE_PATH
    env["FLEETGATE_RENDER_OUT"] = out
    env["__FG_REPO"] = str(fleet.root)
    env["__FG_DEPLOY_ROOT"] = (fleet.deploy_root or "").rstrip("/")
    env["__FG_PAYLOAD"] = "\n".join(payload)
    env["__FG_BINARY"] = service.binary
    env["__FG_OVERRIDES"] = _override_script(overrides)
    home = env["HOME"]
    spec = SandboxSpec(
        command=command if command is not None else ["/bin/bash", str(run_as or script), *args],
        env=env,
        cwd=f"{INSIDE}/cwd",
        timeout=timeout,
        read_only=_repo_mounts(fleet),
        placeholders=[p for p in payload if p.startswith("/")],
        dirs=[f"{INSIDE}/cwd", *([home] if home.startswith("/") else []), *(placeholder_dirs or ())],
        files=files,
        links=links,
    )
    return run_sandboxed(spec, what=script)


_PREAMBLE_PATH = f"{INSIDE}/preamble.bash"


@cache
def _PREAMBLE() -> bytes:
    return resources.files("fleetgate").joinpath("_render_preamble.bash").read_bytes()


@cache
def _read_only_tools() -> dict[str, str]:
    found = {}
    for tool in _READ_ONLY_TOOLS:
        path = shutil.which(tool, path="/usr/bin:/bin")
        if path:
            found[tool] = path
    return found


# Scripts bash has parsed already, by path and content: a script is parsed once per process, not once per render
# (each ``bash -n`` is a fork of this process). Keyed on the bytes, so an edited script is parsed again.
_PARSED: set[tuple[str, bytes]] = set()


def _require_bash(script: Path) -> None:
    # bash itself takes any bytes; only the shebang is read here.
    content = read_bytes(script, "the serve script")
    first = content.split(b"\n", 1)[0].decode("utf-8", "replace")
    if first.startswith("#!") and "bash" not in first:
        raise InputError(script, 1, f"shebang {first!r}: fleetgate renders bash serve scripts; expected #!/bin/bash or #!/usr/bin/env bash")
    key = (str(script), hashlib.sha256(content).digest())
    if key in _PARSED:
        return
    _parse_with_bash(script)
    if len(_PARSED) > 4096:
        _PARSED.clear()
    _PARSED.add(key)


def _parse_with_bash(script: Path) -> None:
    try:
        # Parse only (-n runs nothing), with no BASH_ENV or anything else from this process's environment.
        check = subprocess.run(["/bin/bash", "--noprofile", "--norc", "-n", str(script)], capture_output=True, check=False,
                               timeout=10, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InputError(script, None, "bash could not parse the serve script within 10 s; expected a script of a sane size") from None
    if check.returncode < 0:
        # bash's parser recurses: 200,000 nested $( overflow its stack, and it dies without a word.
        raise InputError(script, None, f"bash died of {_signal_name(-check.returncode)} while parsing the serve script "
                         "(constructs nested too deeply?); expected a script bash can parse")
    if check.returncode != 0:
        # bash -n reports the error first and echoes the offending line after it.
        said = check.stderr.decode("utf-8", "replace").splitlines()
        if not said:
            raise InputError(script, None, f"bash -n exited {check.returncode} without naming an error; expected a script bash can parse")
        line, message = _last_error(said[0], script)
        raise InputError(script, line, f"bash: {message}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _override_script(overrides: Mapping[str, str | None]) -> str:
    statements = []
    for name, value in overrides.items():
        if value is None:
            statements.append(f"unset {name}")
        else:
            statements.append(f"export {name}={shlex.quote(value)}")
    return "; ".join(statements) or ":"


def _stub(out: str, *, kind: str) -> bytes:
    if kind in ("engine", "container"):
        # Builtins only: the PATH the script sees holds no writing tool but the stubs. A container client's
        # records are c0.argv, c1.argv, ...: its argv is read as the client reads it (fleetgate.sources.docker_run).
        prefix = "c" if kind == "container" else ""
        body = f"""#!/bin/bash -p
out={shlex.quote(out)}
i=0
while [[ -e $out/{prefix}$i.argv ]]; do i=$((i + 1)); done
for __v in $(compgen -e); do printf '%s=%s\\0' "$__v" "${{!__v}}"; done >"$out/{prefix}$i.env"
printf '%s\\0' "$0" "$@" >"$out/{prefix}$i.argv"
exit 0
"""
    else:
        body = f"""#!/bin/bash -p
printf '%s\\0' "${{0##*/}}" "$@" >>{shlex.quote(out + '/writes')}
printf '\\n' >>{shlex.quote(out + '/writes')}
if [[ ${{0##*/}} == tee ]]; then while IFS= read -r __l; do printf '%s\\n' "$__l"; done; fi
exit 0
"""
    return body.encode("utf-8")


def _read_invocations(files: Mapping[str, bytes], prefix: str = "") -> list[tuple[tuple[str, ...], dict[str, str]]]:
    found = []
    i = 0
    while f"{prefix}{i}.argv" in files:
        argv = tuple(part.decode("utf-8", "replace") for part in files[f"{prefix}{i}.argv"].split(b"\0")[:-1])
        env: dict[str, str] = {}
        for item in files.get(f"{prefix}{i}.env", b"").split(b"\0"):
            if item:
                name, _, value = item.decode("utf-8", "replace").partition("=")
                env[name] = value
        if argv:
            found.append(((os.path.basename(argv[0]), *argv[1:]), env))
        i += 1
    return found


def _records(data: bytes, fields: int) -> list[list[str]]:
    """NUL-separated fields, ``fields`` per record (paths may hold tabs and newlines)."""
    parts = [p.decode("utf-8", "replace") for p in data.split(b"\0")]
    return [parts[i:i + fields] for i in range(0, len(parts) - fields + 1, fields)]


def _read_sourced(files: Mapping[str, bytes]) -> list[SourcedFile]:
    return [SourcedFile(target=target, inside_repo=kind == "repo", caller=caller)
            for kind, target, caller in _records(files.get("sources", b""), 3)]


def _read_tests(files: Mapping[str, bytes]) -> list[FileTest]:
    return [FileTest(op=op, path=target, answer=answer == "0", caller=caller)
            for op, target, answer, caller in _records(files.get("tests", b""), 4)]


def _read_writes(files: Mapping[str, bytes]) -> list[tuple[str, ...]]:
    records = files.get("writes", b"").split(b"\0\n")
    return [tuple(p.decode("utf-8", "replace") for p in rec.split(b"\0") if p) for rec in records if rec.strip(b"\n")]


_TRACE = re.compile(r"^\++(?P<file>[^:]+):(?P<line>\d+): ")


def _last_traced_line(trace: bytes, script: Path) -> int | None:
    """The last line of the script that bash traced before the script gave up."""
    last = None
    for line in trace.decode("utf-8", "replace").splitlines():
        match = _TRACE.match(line)
        if match and match.group("file") == str(script):
            last = int(match.group("line"))
    return last


def _last_error(stderr: str, script: Path) -> tuple[int | None, str]:
    """The most telling stderr line: bash's own 'FILE: line N: ...' for the script, else the last line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    prefix = f"{script}: line "
    for line in reversed(lines):
        if line.startswith(prefix):
            number, _, message = line[len(prefix):].partition(": ")
            if number.isdigit():
                return int(number), message
        if line.startswith(f"{script}:"):
            rest = line[len(str(script)) + 1:]
            number, _, message = rest.partition(": ")
            if number.isdigit():
                return int(number), message
    return None, lines[-1] if lines else ""
