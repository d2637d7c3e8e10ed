"""The serve script run in the sandbox, the engine stubbed: what it started, read back from the stubs' records.

The serve script is executed by bash, with the environment its unit gives it, and with a stub first on
PATH in place of the engine binary. The stub records the argv and environment it was started with and
exits; nothing of the engine runs and nothing is pattern-matched. Questions the script asks about the
host are answered from the fleet (see ``sandbox/_render_preamble.bash``): files of the repository are read from
the repository, declared payload files exist, anything else does not. Commands that write files are
stubbed too, so a render never changes anything.

Here: the sandbox's request (``run_script``: the stubs, the preamble, the read-only tools, the repository's mounts),
bash's parse of the script before it runs (``require_bash``), the records read back (the engine's and the container
clients' invocations, files sourced and tested, writes, bash's trace), and the paths a run's stderr says were missing
(an engine's absolute path, a directory the script enters), which the next run makes.
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
from functools import cache
from importlib import resources
from pathlib import Path

from fleetgate.errors import InputError, read_bytes
from fleetgate.fleet import Fleet, Service
from fleetgate.render.types import SYSTEMD_DEFAULT_PATH, TRACE_LINE, FileTest, Origin, SourcedFile
from fleetgate.sandbox import INSIDE, SandboxResult, SandboxSpec
from fleetgate.sandbox import run as run_sandboxed
from fleetgate.units import Setting, Unit

__all__ = ["RENDER_TIMEOUT_S", "engine_environment", "inline_records", "last_error", "last_traced_line", "missing_directories",
           "missing_engine_paths", "parsed_before", "parsed_now", "preflight_notes", "read_invocations", "read_sourced",
           "read_tests", "read_writes", "repo_mounts", "require_bash", "require_program_name", "run_script",
           "script_as_run", "script_spec", "traced_engine_paths", "vllm_module_notes"]

_READ_ONLY_TOOLS = (
    "awk", "basename", "cat", "cut", "date", "dirname", "env", "expr", "false", "grep", "head", "id",
    "nproc", "numfmt", "readlink", "realpath", "sed", "seq", "sleep", "sort", "stat", "tail", "tr",
    "true", "uname", "uniq", "wc",
)
_WRITING_TOOLS = (
    "chmod", "chown", "cp", "dd", "install", "ln", "mkdir", "mkfifo", "mv", "rm", "rmdir", "tee", "touch",
    "truncate",
)
RENDER_TIMEOUT_S = 10.0
# Container clients: stubbed in the sandbox like the engine, never run (fleetgate.sources.docker_run).
_CONTAINER_CLIENTS = ("docker", "podman")
# Pre-flight commands a start script runs to check or prepare the host: the render has neither the host's cards nor a
# network, so each is stubbed to succeed and print nothing, and the render says it did not run it (preflight_notes).
_PREFLIGHT_CHECKS = ("nvidia-smi", "rocm-smi", "amd-smi", "curl", "wget", "sleep")
_PREFLIGHT_PREPARES = ("huggingface-cli", "hf", "pip", "pip3", "uv")
_HOST_DIRS = ("/var/log", "/var/tmp")
# vLLM's OpenAI server is also started as a Python module; its argv is read as `vllm serve`'s (vllm_argv).
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")
# The shell's own default PATH (confstr _CS_PATH, bash's `command -p`) and the usual install places.
_DEFAULT_PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def inline_records(result: SandboxResult, setting: Setting) -> SandboxResult:
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


def script_as_run(fleet: Fleet, script: Path, unit: Unit | None) -> Path:
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


def engine_environment(recorded: Mapping[str, str]) -> dict[str, str]:
    """The engine's environment without the render's own variables and stub directories (a unit's own
    ``BASH_ENV`` stays: the preamble puts it back after it has run)."""
    env = {k: v for k, v in recorded.items()
           if not k.startswith("__FG_") and not (k == "BASH_ENV" and v == _PREAMBLE_PATH)}
    if "PATH" in env:
        env["PATH"] = ":".join(d for d in env["PATH"].split(":") if not d.startswith(INSIDE + "/"))
    return env


def repo_mounts(fleet: Fleet) -> list[tuple[Path, str]]:
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
        paths += [f"{where}/{relative}" for _, where in repo_mounts(fleet)]
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


def missing_engine_paths(stderr: str, binary: str, placeholder_dirs: list[str] | None = None) -> list[str]:
    """Absolute paths of the engine that bash (or env, nohup, ...) could not start.

    A stderr line is the script's to write, so what is taken from it is only ever a stub of the engine,
    made by the sandbox's init inside the new root (never on this machine): an absolute path, already
    normal (no ``.``, ``..`` or ``//``), outside the render's own directory, ending in the binary's name.
    A relative one (``./llama-server`` after a ``cd``) is taken in each placeholder directory the script entered.
    """
    found = []
    for match in _MISSING.finditer(stderr):
        path = match.group("path").strip().strip("'\"")
        if _starts_engine(posixpath.basename(path), binary) and _normal_outside_render(path):
            found.append(path)
    for match in _MISSING_RELATIVE.finditer(stderr):
        relative = match.group("path").strip()
        if not _starts_engine(posixpath.basename(relative), binary) or relative.startswith("-"):
            continue
        for directory in placeholder_dirs or ():
            path = posixpath.normpath(posixpath.join(directory, relative))
            if _starts_engine(posixpath.basename(path), binary) and _normal_outside_render(path):
                found.append(path)
    return list(dict.fromkeys(found))


def _starts_engine(name: str, binary: str) -> bool:
    """A program by this name can start the engine: the engine itself, or (for vLLM) the Python that runs its server
    module (a venv's ``bin/python3 -m vllm.entrypoints.openai.api_server``)."""
    return name == binary or (binary == "vllm" and _PYTHON.fullmatch(name) is not None)


def traced_engine_paths(trace: bytes, script: str, binary: str, directories: list[str]) -> list[str]:
    """Paths of the engine the script's traced command lines ran, where stderr cannot say them (``nohup ... > log
    2>&1 &`` sends the shell's complaint to the log): every absolute word naming the engine (or, for vLLM, a
    Python), and every relative one (``./build/bin/llama-server``) in each of ``directories`` (the script's own, the
    placeholders it entered). Taken under missing_engine_paths' rules: only a stub of the engine, inside the new root."""
    found: list[str] = []
    for line in trace.decode("utf-8", "replace").splitlines():
        match = TRACE_LINE.match(line)
        if match is None or match.group("file") != script:
            continue
        try:
            words = shlex.split(line[match.end():])
        except ValueError:
            continue
        for word in words:
            if not _starts_engine(posixpath.basename(word), binary) or word.startswith("-") or "/" not in word:
                continue
            if word.startswith("/"):
                candidates = [word]
            else:
                candidates = [posixpath.normpath(posixpath.join(d, word)) for d in directories]
            found += [path for path in candidates if _normal_outside_render(path)]
    return list(dict.fromkeys(found))

def missing_directories(stderr: str) -> list[str]:
    """Absolute directories the script could not ``cd``/``pushd`` into: made empty inside the sandbox (after
    pivot_root, like the engine's stubs) and the script run once more. Normal paths outside the render's own only."""
    found = [match.group("path") for match in _MISSING_DIR.finditer(stderr)]
    return list(dict.fromkeys(path for path in found if _normal_outside_render(path)))


# Programs the sandbox's init runs after it has put the stubs, and the shells a script is run by: an
# engine stub over one of them would stand in for the render's own machinery.
_RENDER_OWN_PROGRAMS = frozenset({"bash", "sh", "env", "setpriv", "sleep", "tar", "mount", "umount", "chmod",
                                  "hostname", "pivot_root", "cp", "mkdir"})


def require_program_name(fleet: Fleet, service: Service) -> None:
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


def run_script(fleet: Fleet, service: Service, script: Path, origins: Mapping[str, Origin],
                overrides: Mapping[str, str | None], payload: tuple[str, ...], timeout: float,
                engine_paths: list[str], args: tuple[str, ...] = (), *, command: list[str] | None = None,
                placeholder_dirs: list[str] | None = None, run_as: Path | None = None) -> SandboxResult:
    spec = script_spec(fleet, service, script, origins, overrides, payload, timeout, engine_paths, args,
                       command=command, placeholder_dirs=placeholder_dirs, run_as=run_as)
    return run_sandboxed(spec, what=script)


def script_spec(fleet: Fleet, service: Service, script: Path, origins: Mapping[str, Origin],
                overrides: Mapping[str, str | None], payload: tuple[str, ...], timeout: float,
                engine_paths: list[str], args: tuple[str, ...] = (), *, command: list[str] | None = None,
                placeholder_dirs: list[str] | None = None, run_as: Path | None = None) -> SandboxSpec:
    """The sandbox's request for one run of the script (``run_script`` runs it; a batch of renders runs several
    in one session)."""
    out = f"{INSIDE}/out"
    files: dict[str, bytes] = {f"{INSIDE}/bin/{service.binary}": _stub(out, kind="engine")}
    for name in (*_PREFLIGHT_CHECKS, *_PREFLIGHT_PREPARES):
        if name != service.binary:
            files[f"{INSIDE}/bin/{name}"] = _stub(out, kind="preflight")
    python = _stub(out, kind="python")
    if service.binary == "vllm":
        for name in ("python", "python3", *(f"python3.{minor}" for minor in range(8, 15))):
            files[f"{INSIDE}/bin/{name}"] = python
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
        files.setdefault(path, stub if posixpath.basename(path) == service.binary else python)
    # A container client is never run, whichever path the script names it by (the repository's own
    # directories hold no client: a stub there would only layer the read-only repository for nothing).
    mounts = [where.rstrip("/") for _, where in repo_mounts(fleet)]
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
    return SandboxSpec(
        command=command if command is not None else ["/bin/bash", str(run_as or script), *args],
        env=env,
        cwd=f"{INSIDE}/cwd",
        timeout=timeout,
        read_only=repo_mounts(fleet),
        placeholders=[p for p in payload if p.startswith("/")],
        # Every host has /var/log and /var/tmp, where start scripts send their logs (`> /var/log/vllm.log 2>&1 &`).
        dirs=[f"{INSIDE}/cwd", *([home] if home.startswith("/") else []), *_HOST_DIRS, *(placeholder_dirs or ())],
        files=files,
        links=links,
    )


_PREAMBLE_PATH = f"{INSIDE}/preamble.bash"


@cache
def _PREAMBLE() -> bytes:
    return resources.files("fleetgate").joinpath("sandbox/_render_preamble.bash").read_bytes()


@cache
def _read_only_tools() -> dict[str, str]:
    found = {}
    for tool in _READ_ONLY_TOOLS:
        path = shutil.which(tool, path="/usr/bin:/bin")
        if path:
            found[tool] = path
    return found


# Scripts bash has parsed without an error, by content: a script is parsed once per process, not once per render
# (each ``bash -n`` is a fork of this process), and a copy of it elsewhere (another service's harness) is not parsed
# again: what bash says of a script it parses depends on its bytes alone, and its path only names it in an error,
# which is never kept. Keyed on the bytes, so an edited script is parsed again.
_PARSED: set[tuple[str, bytes]] = set()


def parsed_before(kind: str, content: bytes) -> bool:
    """Whether bash parsed this content (a script ``file``, an ``inline`` -c string) without an error before."""
    return (kind, hashlib.sha256(content).digest()) in _PARSED


def parsed_now(kind: str, content: bytes) -> None:
    if len(_PARSED) > 4096:
        _PARSED.clear()
    _PARSED.add((kind, hashlib.sha256(content).digest()))


def require_bash(script: Path) -> None:
    # bash itself takes any bytes; only the shebang is read here.
    content = read_bytes(script, "the serve script")
    first = content.split(b"\n", 1)[0].decode("utf-8", "replace")
    if first.startswith("#!") and "bash" not in first:
        raise InputError(script, 1, f"shebang {first!r}: fleetgate renders bash serve scripts; expected #!/bin/bash or #!/usr/bin/env bash")
    if parsed_before("file", content):
        return
    _parse_with_bash(script)
    parsed_now("file", content)


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
        line, message = last_error(said[0], script)
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


_RECORD = """i=0
while [[ -e $out/{prefix}$i.argv ]]; do i=$((i + 1)); done
for __v in $(compgen -e); do printf '%s=%s\\0' "$__v" "${{!__v}}"; done >"$out/{prefix}$i.env"
printf '%s\\0' "$0" "$@" >"$out/{prefix}$i.argv"
exit 0"""


def _stub(out: str, *, kind: str) -> bytes:
    if kind == "preflight":
        body = f"""#!/bin/bash -p
printf '%s\\0' "${{0##*/}}" "$@" >>{shlex.quote(out + '/preflight')}
printf '\\n' >>{shlex.quote(out + '/preflight')}
exit 0
"""
        return body.encode("utf-8")
    if kind == "python":
        # Python's own options may come before -m; the server module is recorded as the engine, `-m pip` as a
        # pre-flight; any other use of Python runs the sandbox's own interpreter, if it has one.
        body = f"""#!/bin/bash -p
out={shlex.quote(out)}
__a=("$@")
while ((${{#__a[@]}})); do
    case ${{__a[0]}} in
        -[uOBEsIbqRS]*) __a=("${{__a[@]:1}}") ;;
        -[XW]) __a=("${{__a[@]:2}}") ;;
        *) break ;;
    esac
done
if [[ ${{__a[0]-}} == -m && ${{__a[1]-}} == {VLLM_SERVER_MODULE} ]]; then
{_RECORD.format(prefix="")}
fi
if [[ ${{__a[0]-}} == -m && ${{__a[1]-}} == pip ]]; then
    printf '%s\\0' "${{0##*/}} -m pip" "${{__a[@]:2}}" >>"$out/preflight"
    printf '\\n' >>"$out/preflight"
    exit 0
fi
IFS=: read -ra __dirs <<<"$PATH"
for __d in "${{__dirs[@]}}"; do
    [[ $__d == {INSIDE}/* ]] && continue
    [[ -x $__d/${{0##*/}} ]] && exec "$__d/${{0##*/}}" "$@"
done
printf '%s: command not found\\n' "${{0##*/}}" >&2
exit 127
"""
        return body.encode("utf-8")
    if kind in ("engine", "container"):
        # Builtins only: the PATH the script sees holds no writing tool but the stubs. A container client's
        # records are c0.argv, c1.argv, ...: its argv is read as the client reads it (fleetgate.sources.docker_run).
        prefix = "c" if kind == "container" else ""
        body = f"""#!/bin/bash -p
out={shlex.quote(out)}
{_RECORD.format(prefix=prefix)}
"""
    else:
        body = f"""#!/bin/bash -p
printf '%s\\0' "${{0##*/}}" "$@" >>{shlex.quote(out + '/writes')}
printf '\\n' >>{shlex.quote(out + '/writes')}
if [[ ${{0##*/}} == tee ]]; then while IFS= read -r __l; do printf '%s\\n' "$__l"; done; fi
exit 0
"""
    return body.encode("utf-8")


def read_invocations(files: Mapping[str, bytes], prefix: str = "") -> list[tuple[tuple[str, ...], dict[str, str]]]:
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
            found.append((_vllm_module_argv(argv) or (os.path.basename(argv[0]), *argv[1:]), env))
        i += 1
    return found


def _module_args(argv: tuple[str, ...]) -> tuple[str, ...] | None:
    """The server module's own arguments, when ``argv`` is a Python running vLLM's OpenAI server module."""
    if not argv or _PYTHON.fullmatch(os.path.basename(argv[0])) is None:
        return None
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m":
            return argv[i + 2:] if argv[i + 1] == VLLM_SERVER_MODULE else None
    return None


def _vllm_module_argv(argv: tuple[str, ...]) -> tuple[str, ...] | None:
    """``python -m vllm.entrypoints.openai.api_server --model M ...`` as the ``vllm serve M ...`` it is: the module
    is the server ``vllm serve`` starts, reading the same arguments, and ``vllm serve`` takes the model as its
    positional model tag (the last ``--model`` given wins, as argparse has it)."""
    args = _module_args(argv)
    if args is None:
        return None
    model: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--model" and i + 1 < len(args):
            model, i = args[i + 1], i + 2
            continue
        if word.startswith("--model="):
            model = word.partition("=")[2]
        else:
            rest.append(word)
        i += 1
    return ("vllm", "serve", *([model] if model is not None else []), *rest)


def vllm_module_notes(files: Mapping[str, bytes]) -> list[str]:
    """One note per recorded start of vLLM's server module, which the render reads as ``vllm serve``."""
    notes = []
    i = 0
    while f"{i}.argv" in files:
        argv = tuple(part.decode("utf-8", "replace") for part in files[f"{i}.argv"].split(b"\0")[:-1])
        if _module_args(argv) is not None:
            notes.append(f"{os.path.basename(argv[0])} -m {VLLM_SERVER_MODULE} is vLLM's OpenAI server: read as "
                         "`vllm serve` (its --model as the model tag)")
        i += 1
    return notes


def preflight_notes(files: Mapping[str, bytes]) -> list[str]:
    """One note per pre-flight command the script ran, in the order first run: none of them ran."""
    seen: dict[str, str] = {}
    for record in read_records(files.get("preflight", b"")):
        name = record[0] if record else ""
        if name in _PREFLIGHT_CHECKS:
            why = ("the render does not wait; stubbed to return at once" if name == "sleep" else
                   "it asks the host (its cards, its network), which the render does not have; stubbed to succeed "
                   "with no output")
        else:
            why = "it prepares the host (downloads, installs); stubbed to succeed, what it fetches taken as present"
        seen.setdefault(name, f"pre-flight `{name}` not run: {why}")
    return list(seen.values())


def read_records(data: bytes) -> list[tuple[str, ...]]:
    """Argv records, each NUL-separated and ended by a newline (the writers' and pre-flight stubs' logs)."""
    return [tuple(p.decode("utf-8", "replace") for p in rec.split(b"\0") if p) for rec in data.split(b"\0\n")
            if rec.strip(b"\n")]


def _records(data: bytes, fields: int) -> list[list[str]]:
    """NUL-separated fields, ``fields`` per record (paths may hold tabs and newlines)."""
    parts = [p.decode("utf-8", "replace") for p in data.split(b"\0")]
    return [parts[i:i + fields] for i in range(0, len(parts) - fields + 1, fields)]


def read_sourced(files: Mapping[str, bytes]) -> list[SourcedFile]:
    return [SourcedFile(target=target, inside_repo=kind == "repo", caller=caller)
            for kind, target, caller in _records(files.get("sources", b""), 3)]


def read_tests(files: Mapping[str, bytes]) -> list[FileTest]:
    return [FileTest(op=op, path=target, answer=answer == "0", caller=caller)
            for op, target, answer, caller in _records(files.get("tests", b""), 4)]


def read_writes(files: Mapping[str, bytes]) -> list[tuple[str, ...]]:
    return read_records(files.get("writes", b""))


def last_traced_line(trace: bytes, script: Path) -> int | None:
    """The last line of the script that bash traced before the script gave up."""
    last = None
    for line in trace.decode("utf-8", "replace").splitlines():
        match = TRACE_LINE.match(line)
        # The preamble's EXIT trap is traced at the line the script ended on: not a line of the script's own.
        if match and match.group("file") == str(script) and line[match.end():] != "__fg_wait_jobs":
            last = int(match.group("line"))
    return last


def last_error(stderr: str, script: Path) -> tuple[int | None, str]:
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
