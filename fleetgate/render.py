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
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from fleetgate.envfile import Dialect, EnvEntry, parse_env_file
from fleetgate.errors import InputError
from fleetgate.fleet import Fleet, Service
from fleetgate.units import Setting, Unit, parse_unit, split_environment_assignments

__all__ = ["Origin", "RenderRefused", "Rendered", "SourcedFile", "map_to_repo", "render", "service_inputs"]

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

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[1:]


class RenderRefused(InputError):
    """The serve script exited without starting the engine."""

    def __init__(self, path: Path, line: int | None, message: str, stderr: str,
                 inputs: Mapping[str, Origin] | None = None, sourced: tuple[SourcedFile, ...] = ()) -> None:
        super().__init__(path, line, message)
        self.stderr = stderr
        self.inputs = dict(inputs or {})
        self.sourced = sourced


def map_to_repo(fleet: Fleet, host_path: str) -> Path | None:
    """A host path of the deployed repository -> the repository file, or None."""
    if fleet.deploy_root is None:
        return None
    root = PurePosixPath(fleet.deploy_root)
    path = PurePosixPath(host_path)
    try:
        relative = path.relative_to(root)
    except ValueError:
        return None
    return fleet.root / relative


def service_inputs(fleet: Fleet, service: Service) -> tuple[dict[str, Origin], Path, Unit | None]:
    """The environment the unit starts the serve script with, and the script it starts."""
    if service.unit is None:
        origins: dict[str, Origin] = {}
        if service.env_file is not None:
            origins.update(_from_env_file(service.env_file, "bash", "env_file"))
        return origins, service.serve_script, None

    unit = parse_unit(service.unit)
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


def _exec_start_script(fleet: Fleet, service: Service, unit: Unit) -> Path:
    starts = unit.all("Service", "ExecStart")
    if not starts:
        raise InputError(unit.path, None, "no ExecStart= in [Service]; expected the serve script")
    setting = starts[-1]
    words = shlex.split(setting.value.lstrip("-@+!:"))
    for word in words:
        local = map_to_repo(fleet, word)
        if local is not None:
            if local.resolve() != service.serve_script:
                raise InputError(setting.path, setting.line,
                                 f"ExecStart= runs {word}, but fleet.toml declares serve_script "
                                 f"{service.serve_script.relative_to(fleet.root)}")
            return service.serve_script
    raise InputError(setting.path, setting.line,
                     f"ExecStart={setting.value} names no file under the fleet's deploy_root {fleet.deploy_root}; "
                     "expected the serve script")


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
    for word in shlex.split(exec_setting.value):
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
    """Run the serve script and capture what it starts.

    ``overrides`` replaces variables (``None`` unsets one) in the script's starting environment and
    again after every file the script sources; ``payload`` replaces the declared payload files;
    ``args`` are the script's positional arguments (what a unit's ``ExecStart=`` passes after it).
    """
    origins, script, unit = service_inputs(fleet, service)
    _require_bash(script)
    overrides = dict(overrides or {})
    with tempfile.TemporaryDirectory(prefix="fleetgate-render-") as tmp:
        tmp_path = Path(tmp)
        out = tmp_path / "out"
        out.mkdir()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        _write_stub(bin_dir / service.binary, out, kind="engine")
        for tool in _WRITING_TOOLS:
            _write_stub(bin_dir / tool, out, kind="writer")
        tools = tmp_path / "tools"
        tools.mkdir()
        for tool in _READ_ONLY_TOOLS:
            found = shutil.which(tool, path="/usr/bin:/bin")
            if found:
                (tools / tool).symlink_to(found)
        preamble = resources.files("fleetgate").joinpath("_render_preamble.bash").read_text(encoding="utf-8")
        (tmp_path / "preamble.bash").write_text(preamble, encoding="utf-8")
        work = tmp_path / "cwd"
        work.mkdir()

        env = {name: origin.value for name, origin in origins.items()}
        env.setdefault("PATH", SYSTEMD_DEFAULT_PATH)
        env.setdefault("HOME", "/root")
        env.setdefault("LANG", "C.UTF-8")
        env["PATH"] = f"{bin_dir}:{tools}:{env['PATH']}"
        env["BASH_ENV"] = str(tmp_path / "preamble.bash")
        env["FLEETGATE_RENDER_OUT"] = str(out)
        env["__FG_REPO"] = str(fleet.root)
        env["__FG_DEPLOY_ROOT"] = fleet.deploy_root or ""
        env["__FG_PAYLOAD"] = "\n".join(service.payload if payload is None else payload)
        env["__FG_OVERRIDES"] = _override_script(overrides)
        try:
            done = subprocess.run(
                ["/bin/bash", str(script), *args],
                cwd=work,
                env=env,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RenderRefused(script, None, f"the serve script did not exec {service.binary} within "
                                f"{timeout:g} s (a wait loop or a prompt?)", "") from None
        stderr = done.stderr.decode("utf-8", "replace")
        invocations = _read_invocations(out)
        if not invocations:
            line, message = _last_error(stderr, script)
            line = line or _last_traced_line(out / "trace", script)
            raise RenderRefused(
                script, line,
                f"the serve script exited {done.returncode} without starting {service.binary}"
                + (f": {message}" if message else ""),
                stderr, origins, tuple(_read_sourced(out)),
            )
        argv, engine_env = invocations[-1]
        return Rendered(
            service=service.name,
            argv=argv,
            env={k: v for k, v in engine_env.items() if not k.startswith("__FG_") and k != "BASH_ENV"},
            inputs=origins,
            sourced=tuple(_read_sourced(out)),
            tests=tuple(_read_tests(out)),
            writes=tuple(_read_writes(out)),
            script=script,
            unit=unit,
            extra_invocations=tuple(a for a, _ in invocations[:-1]),
        )


def _require_bash(script: Path) -> None:
    try:
        first = script.read_text(encoding="utf-8").split("\n", 1)[0]
    except OSError as exc:
        raise InputError(script, None, f"cannot read serve script: {exc.strerror}") from None
    if first.startswith("#!") and "bash" not in first:
        raise InputError(script, 1, f"shebang {first!r}: fleetgate renders bash serve scripts; expected #!/bin/bash or #!/usr/bin/env bash")
    check = subprocess.run(["/bin/bash", "-n", str(script)], capture_output=True, check=False, timeout=10)
    if check.returncode != 0:
        # bash -n reports the error first and echoes the offending line after it.
        line, message = _last_error(check.stderr.decode("utf-8", "replace").splitlines()[0], script)
        raise InputError(script, line, f"bash: {message}")


def _override_script(overrides: Mapping[str, str | None]) -> str:
    statements = []
    for name, value in overrides.items():
        if value is None:
            statements.append(f"unset {name}")
        else:
            statements.append(f"export {name}={shlex.quote(value)}")
    return "; ".join(statements) or ":"


def _write_stub(path: Path, out: Path, *, kind: str) -> None:
    if kind == "engine":
        # Builtins only: the PATH the script sees holds no writing tool but the stubs.
        body = f"""#!/bin/bash
out={shlex.quote(str(out))}
i=0
while [[ -e $out/$i.argv ]]; do i=$((i + 1)); done
for __v in $(compgen -e); do printf '%s=%s\\0' "$__v" "${{!__v}}"; done >"$out/$i.env"
printf '%s\\0' "$0" "$@" >"$out/$i.argv"
exit 0
"""
    else:
        body = f"""#!/bin/bash
printf '%s\\0' "${{0##*/}}" "$@" >>{shlex.quote(str(out / 'writes'))}
printf '\\n' >>{shlex.quote(str(out / 'writes'))}
if [[ ${{0##*/}} == tee ]]; then while IFS= read -r __l; do printf '%s\\n' "$__l"; done; fi
exit 0
"""
    path.write_text(body, encoding="utf-8")
    path.chmod(0o755)


def _read_invocations(out: Path) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    found = []
    i = 0
    while (out / f"{i}.argv").exists():
        argv = tuple(part.decode("utf-8", "replace") for part in (out / f"{i}.argv").read_bytes().split(b"\0")[:-1])
        env: dict[str, str] = {}
        for item in (out / f"{i}.env").read_bytes().split(b"\0"):
            if item:
                name, _, value = item.decode("utf-8", "replace").partition("=")
                env[name] = value
        argv = (os.path.basename(argv[0]), *argv[1:])
        found.append((argv, env))
        i += 1
    return found


def _read_sourced(out: Path) -> list[SourcedFile]:
    path = out / "sources"
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        kind, target, caller = line.split("\t")
        found.append(SourcedFile(target=target, inside_repo=kind == "repo", caller=caller))
    return found


def _read_tests(out: Path) -> list[FileTest]:
    path = out / "tests"
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        op, target, answer, caller = line.split("\t")
        found.append(FileTest(op=op, path=target, answer=answer == "0", caller=caller))
    return found


def _read_writes(out: Path) -> list[tuple[str, ...]]:
    path = out / "writes"
    if not path.exists():
        return []
    records = path.read_bytes().split(b"\0\n")
    return [tuple(p.decode("utf-8", "replace") for p in rec.split(b"\0") if p) for rec in records if rec.strip(b"\n")]


_TRACE = re.compile(r"^\++(?P<file>[^:]+):(?P<line>\d+): ")


def _last_traced_line(trace: Path, script: Path) -> int | None:
    """The last line of the script that bash traced before the script gave up."""
    if not trace.exists():
        return None
    last = None
    for line in trace.read_text(encoding="utf-8", errors="replace").splitlines():
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
