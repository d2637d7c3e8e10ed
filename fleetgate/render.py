"""Serve script -> rendered config: what the service really runs.

The serve script is executed by bash, with the environment its unit gives it, and with a stub first on
PATH in place of the engine binary. The stub records the argv and environment it was started with and
exits; nothing of the engine runs and nothing is pattern-matched. Questions the script asks about the
host are answered from the fleet (see ``_render_preamble.bash``): files of the repository are read from
the repository, declared payload files exist, anything else does not. Commands that write files are
stubbed too, so a render never changes anything.
"""

from __future__ import annotations

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

from fleetgate.envfile import Dialect, EnvEntry, parse_env_file
from fleetgate.errors import InputError, read_bytes
from fleetgate.fleet import Fleet, Service
from fleetgate.sandbox import INSIDE, SandboxResult, SandboxSpec, overrun_message
from fleetgate.sandbox import run as run_sandboxed
from fleetgate.units import Setting, Unit, parse_unit, split_command, split_environment_assignments

__all__ = ["Origin", "RenderRefused", "Rendered", "SourcedFile", "engine_exec_start", "map_to_repo", "render",
           "service_inputs"]

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
        origins.update(_unit_env_file(fleet, setting, "systemd"))
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


def _unit_env_file(fleet: Fleet, setting: Setting, dialect: Dialect) -> dict[str, Origin]:
    value = setting.value
    optional = value.startswith("-")
    host_path = value.lstrip("-")
    local = map_to_repo(fleet, host_path)
    if local is None or not local.is_file():
        if optional:
            return {}
        hint = f" (fleet deploy_root is {fleet.deploy_root})" if fleet.deploy_root else " (set fleet.deploy_root in fleet.toml)"
        raise InputError(setting.path, setting.line,
                         f"EnvironmentFile={host_path} is not a file of this fleet repository{hint}")
    return _from_env_file(local, dialect, "EnvironmentFile=")


def engine_exec_start(fleet: Fleet, service: Service) -> tuple[Unit, Setting] | None:
    """The unit and its ``ExecStart=`` when that line runs the engine itself (no serve script), else None."""
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
    )


def _exec_start_script(fleet: Fleet, service: Service, unit: Unit) -> Path:
    if engine_exec_start(fleet, service) is not None:
        return unit.path  # the unit runs the engine itself: the unit is the script
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
    if len(words) > 1 and posixpath.basename(words[0]) in ("bash", "sh") and words[1] == "-c":
        raise InputError(setting.path, setting.line,
                         f"ExecStart= runs {posixpath.basename(words[0])} -c with an inline script, which fleetgate does "
                         f"not read yet; expected {service.binary} itself or a serve script of the repository "
                         "(move the inline script into a file and run that)")
    raise InputError(setting.path, setting.line,
                     f"ExecStart={setting.value} names no file under the fleet's deploy_root {fleet.deploy_root}; "
                     f"expected the serve script, or {service.binary} itself")


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
    direct = engine_exec_start(fleet, service)
    if direct is not None:
        return _render_exec_start(fleet, service, direct, overrides or {})
    origins, script, unit = service_inputs(fleet, service)
    _require_bash(script)
    _require_program_name(fleet, service)
    payload = service.payload if payload is None else payload
    engine_paths: list[str] = []
    # An engine started by an absolute path the sandbox does not have yet: stub it there and run again.
    run_as = _script_as_run(fleet, script, unit)
    for _ in range(3):
        result = _run_script(fleet, service, script, origins, dict(overrides or {}), payload, timeout, engine_paths,
                             args, run_as=run_as)
        invocations = _read_invocations(result.files)
        missing = [p for p in _missing_engine_paths(result.stderr, service.binary) if p not in engine_paths]
        if invocations or not missing:
            break
        engine_paths += missing
    sourced = tuple(_read_sourced(result.files))
    if not invocations and result.overrun is not None:
        raise RenderRefused(script, _last_traced_line(result.files.get("trace", b""), run_as),
                            f"{service.binary} was not started: {overrun_message(result.overrun, 'the serve script')}",
                            result.stderr, origins, sourced, tuple(_read_tests(result.files)))
    if result.timed_out:
        raise RenderRefused(script, _last_traced_line(result.files.get("trace", b""), run_as),
                            f"the serve script did not exec {service.binary} within {timeout:g} s (a wait loop or a prompt?)",
                            "", origins, sourced)
    if not invocations:
        stderr = result.stderr
        line, message = _last_error(stderr, run_as)
        line = line or _last_traced_line(result.files.get("trace", b""), run_as)
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
        # bash traced the script by the path it was run by; a failure names the repository's file.
        trace=result.files.get("trace", b"").decode("utf-8", "replace").replace(f"+{run_as}:", f"+{script}:"),
    )


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


_MISSING = re.compile(r"(?P<path>/[^:'\n]*): (?:No such file or directory|not found|Permission denied|cannot execute)")


def _missing_engine_paths(stderr: str, binary: str) -> list[str]:
    """Absolute paths of the engine that bash (or env, nohup, ...) could not start.

    A stderr line is the script's to write, so what is taken from it is only ever a stub of the engine,
    made by the sandbox's init inside the new root (never on this machine): an absolute path, already
    normal (no ``.``, ``..`` or ``//``), outside the render's own directory, ending in the binary's name.
    """
    found = []
    for match in _MISSING.finditer(stderr):
        path = match.group("path").strip().strip("'\"")
        if (posixpath.basename(path) == binary and path.startswith("/") and posixpath.normpath(path) == path
                and not path.startswith("//") and not path.startswith(INSIDE + "/")):
            found.append(path)
    return list(dict.fromkeys(found))


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
                engine_paths: list[str], args: tuple[str, ...] = (), run_as: Path | None = None) -> SandboxResult:
    out = f"{INSIDE}/out"
    files: dict[str, bytes] = {f"{INSIDE}/bin/{service.binary}": _stub(out, kind="engine")}
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
        command=["/bin/bash", str(run_as or script), *args],
        env=env,
        cwd=f"{INSIDE}/cwd",
        timeout=timeout,
        read_only=_repo_mounts(fleet),
        placeholders=[p for p in payload if p.startswith("/")],
        dirs=[f"{INSIDE}/cwd", *([home] if home.startswith("/") else [])],
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


def _require_bash(script: Path) -> None:
    # bash itself takes any bytes; only the shebang is read here.
    first = read_bytes(script, "the serve script").split(b"\n", 1)[0].decode("utf-8", "replace")
    if first.startswith("#!") and "bash" not in first:
        raise InputError(script, 1, f"shebang {first!r}: fleetgate renders bash serve scripts; expected #!/bin/bash or #!/usr/bin/env bash")
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
    if kind == "engine":
        # Builtins only: the PATH the script sees holds no writing tool but the stubs.
        body = f"""#!/bin/bash -p
out={shlex.quote(out)}
i=0
while [[ -e $out/$i.argv ]]; do i=$((i + 1)); done
for __v in $(compgen -e); do printf '%s=%s\\0' "$__v" "${{!__v}}"; done >"$out/$i.env"
printf '%s\\0' "$0" "$@" >"$out/$i.argv"
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


def _read_invocations(files: Mapping[str, bytes]) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    found = []
    i = 0
    while f"{i}.argv" in files:
        argv = tuple(part.decode("utf-8", "replace") for part in files[f"{i}.argv"].split(b"\0")[:-1])
        env: dict[str, str] = {}
        for item in files.get(f"{i}.env", b"").split(b"\0"):
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
