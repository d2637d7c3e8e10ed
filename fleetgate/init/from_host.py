"""``fleetgate init --from-host SPEC PATH``: what a running host really runs, written as a fleet repository.

The host is any testinfra spec (``local://``, ``ssh://user@host``, ``docker://CONTAINER``, ``kubectl://POD``); every
read is one command or one file through it, read-only. The engines are the processes whose ``/proc/PID/cmdline``
starts llama-server or vLLM (``vllm serve``, a Python running the ``vllm`` script or vLLM's OpenAI server module),
leaving out an engine started by another engine (a router's or llama-swap's children are the front door's business).
For each, by what started it (``/proc/PID/cgroup``):

- a systemd service of the system manager: the unit and its drop-ins as systemd has them (``systemctl cat``), each
  file written under ``systemd/`` (the unit) and ``systemd/NAME.service.d/`` (its drop-ins), with every
  ``EnvironmentFile=`` it names and a script its ``ExecStart=`` runs (and the files beside them their text names),
  copied at their host paths under the repository, whose ``deploy_root`` is the directory they share;
- a container (its cgroup names a docker or podman container the host's client inspects): a start script
  ``scripts/NAME.sh`` whose one line is the ``docker run``/``podman run`` that starts it, built from the runtime's
  ``inspect`` (image, entrypoint and command, published ports, bind mounts, devices, GPU requests, the engine's
  variables), read by ``fleetgate.sources.docker_run``;
- anything else (a shell, a ``nohup``, a process inside the container or pod the spec runs in, a user unit): a start
  script ``scripts/NAME.sh`` that enters the process's working directory, exports the engine's variables of its
  environment (``LLAMA_ARG_*``, ``VLLM_*``, the device visibility variables of every vendor, ``HF_*``...) and execs
  its ``cmdline`` word for word.

Every secret (an ``--api-key`` value, a ``*_TOKEN``/``*_KEY`` variable, an env file's secret assignment) is written
as ``***`` (``fleetgate.secrets``): the fleet's seams judge that a key is set, never its value. The written directory
is then read by ``fleetgate init`` like any repository.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import testinfra

from fleetgate.errors import InputError
from fleetgate.secrets import scrub, scrub_argv, scrub_environment

__all__ = ["EngineProcess", "HostFleet", "engine_process", "read_host", "write_fleet"]

MAX_PROCESSES = 1 << 17
"""Processes listed at most: a busy build host runs thousands; beyond this the rest is not read (said)."""
MAX_FILE = 1 << 20
_KEPT_ENV = re.compile(r"^(?:LLAMA_ARG_\w+|LLAMA_\w+|VLLM_\w+|CUDA_\w+|NVIDIA_\w+|HIP_\w+|ROCR_\w+|HSA_\w+|"
                       r"GGML_\w+|HF_\w+|HUGGING_FACE_\w+|TRANSFORMERS_\w+|OMP_NUM_THREADS|PYTORCH_\w+|NCCL_\w+|"
                       r"LD_LIBRARY_PATH|TORCH_\w+|VK_\w+|MESA_\w+|RADV_\w+)$")
"""The variables of an engine's environment that change what it does; the rest (a login's TERM, a shell's PWD) is
the host's, not the fleet's."""
_ENGINE_MODULE = "vllm.entrypoints.openai.api_server"
_CONTAINER_CGROUP = re.compile(r"(?P<runtime>docker|libpod)[-/](?P<id>[0-9a-f]{12,64})(?:\.scope)?$", re.M)
_UNIT_CGROUP = re.compile(r"^0::/system\.slice/(?:[^/]+\.slice/)*(?P<unit>[^/]+\.service)$", re.M)
# One line per process: pid, ppid, cwd, then the cmdline with NULs as \x01 (a word may hold any other byte).
_LIST = ("for d in /proc/[0-9]*; do p=${d#/proc/}; c=$(tr '\\000' '\\001' < $d/cmdline 2>/dev/null) || continue; "
         '[ -n "$c" ] || continue; q=$(sed -n "s/^PPid:[[:space:]]*//p" $d/status 2>/dev/null); '
         'w=$(readlink $d/cwd 2>/dev/null); printf "%s\\t%s\\t%s\\t%s\\n" "$p" "$q" "$w" "$c"; done')


@dataclass(frozen=True)
class EngineProcess:
    pid: int
    ppid: int
    cwd: str
    argv: tuple[str, ...]
    engine: str
    environ: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None
    """The system manager's service that runs it (from its cgroup), None when no system unit does."""
    container: str | None = None
    """The ``docker run``/``podman run`` line that starts its container, from the runtime's ``inspect``."""


@dataclass
class HostFleet:
    processes: list[EngineProcess]
    files: dict[str, str] = field(default_factory=dict)
    """Repository path -> text, every secret written as ***."""
    deploy_root: str | None = None
    notes: list[str] = field(default_factory=list)


def engine_process(argv: Sequence[str]) -> str | None:
    """The engine a process's argv runs: llama.cpp or vllm; None for anything else (a shell, llama-swap)."""
    for i, word in enumerate(argv[:3]):
        base = posixpath.basename(word)
        if base == "llama-server":
            return "llama.cpp"
        if base == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return "vllm"
    if argv and posixpath.basename(argv[0]).startswith("python") and _ENGINE_MODULE in argv[1:4]:
        return "vllm"
    return None


def _output(host: Any, command: str) -> str:
    result = host.run(command)
    if result.rc != 0:
        raise InputError(Path(command.split()[0]), None, f"`{command}` exited {result.rc} on the host: "
                         f"{scrub(' '.join(str(result.stderr).split()))[:200]}")
    return str(result.stdout)


def _processes(host: Any, notes: list[str]) -> list[EngineProcess]:
    found: list[EngineProcess] = []
    all_pids: dict[int, str | None] = {}
    rows = []
    lines = _output(host, f"sh -c {shlex.quote(_LIST)}").splitlines()
    if len(lines) > MAX_PROCESSES:
        notes.append(f"the host lists {len(lines)} processes; the first {MAX_PROCESSES} were read")
    for line in lines[:MAX_PROCESSES]:
        parts = line.split("\t", 3)
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        argv = tuple(w for w in parts[3].split("\x01") if w)
        engine = engine_process(argv)
        all_pids[int(parts[0])] = engine
        rows.append((int(parts[0]), int(parts[1]) if parts[1].isdigit() else 0, parts[2], argv, engine))
    for pid, ppid, cwd, argv, engine in rows:
        if engine is None or all_pids.get(ppid) is not None:
            continue  # not an engine, or one an engine started (a router's child)
        found.append(EngineProcess(pid, ppid, cwd, argv, engine))
    return found


def _read(host: Any, path: str) -> str | None:
    try:
        file = host.file(path)
        if not file.is_file or file.size > MAX_FILE:
            return None
        return str(file.content_string)
    except Exception:  # the backend's own errors (no such file, permission): the file is not read, and said so
        return None


def _environ(host: Any, pid: int) -> dict[str, str]:
    try:
        raw: bytes = host.file(f"/proc/{pid}/environ").content
    except Exception:
        return {}
    env: dict[str, str] = {}
    for part in raw.split(b"\0"):
        name, eq, value = part.decode("utf-8", "replace").partition("=")
        if eq and _KEPT_ENV.match(name):
            env[name] = value
    return env


def _unit_of(host: Any, pid: int) -> str | None:
    text = _read(host, f"/proc/{pid}/cgroup") or ""
    match = _UNIT_CGROUP.search(text)
    return match.group("unit") if match else None


def _container_run(host: Any, cgroup: str, notes: list[str]) -> str | None:
    """The run line of the container a process runs in, from ``docker inspect``/``podman inspect`` on the host: the
    image, the entrypoint and command, the published ports, bind mounts, devices and GPU requests, and the engine's
    variables of its environment (secrets as ***). None when the process is in no container the runtime answers for."""
    match = _CONTAINER_CGROUP.search(cgroup)
    if match is None:
        return None
    client = "docker" if match.group("runtime") == "docker" else "podman"
    try:
        data = json.loads(_output(host, f"{client} inspect {match.group('id')}"))[0]
        config, hosting = data["Config"], data.get("HostConfig") or {}
    except (InputError, ValueError, LookupError, TypeError) as exc:
        notes.append(f"{client} container {match.group('id')[:12]}: not inspected ({exc}); written from /proc instead")
        return None
    words = [client, "run", "-d"]
    name = str(data.get("Name", "")).lstrip("/")
    if name:
        words += ["--name", name]
    if hosting.get("NetworkMode") == "host":
        words += ["--network", "host"]
    for port, bindings in sorted((hosting.get("PortBindings") or {}).items()):
        for binding in bindings or []:
            published = ":".join(p for p in (binding.get("HostIp") or "", binding.get("HostPort") or "") if p)
            words += ["-p", f"{published}:{port.split('/')[0]}" if published else port.split("/")[0]]
    for mount in data.get("Mounts") or []:
        if mount.get("Type") == "bind":
            words += ["-v", f"{mount['Source']}:{mount['Destination']}" + ("" if mount.get("RW", True) else ":ro")]
    for device in hosting.get("Devices") or []:
        words += ["--device", f"{device['PathOnHost']}:{device['PathInContainer']}"]
    for request in hosting.get("DeviceRequests") or []:
        ids = request.get("DeviceIDs")
        words += ["--gpus", f"device={','.join(ids)}" if ids else "all"]
    env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
    for key, value in sorted(scrub_environment({k: v for k, v in env.items() if _KEPT_ENV.match(k)}).items()):
        words += ["-e", f"{key}={value}"]
    entrypoint = list(config.get("Entrypoint") or [])
    if entrypoint:
        words += ["--entrypoint", entrypoint[0]]
    words.append(str(config["Image"]))
    words += [*entrypoint[1:], *(config.get("Cmd") or [])]
    return " ".join(shlex.quote(w) for w in scrub_argv(words))


def _split_cat(text: str) -> list[tuple[str, str]]:
    """``systemctl cat`` output -> (host path, text) of the unit and each drop-in, in the order systemd applies them."""
    files: list[tuple[str, str]] = []
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("# /") and (line.endswith((".service", ".conf"))):
            if current is not None:
                files.append((current, "\n".join(lines).strip("\n") + "\n"))
            current, lines = line[2:], []
        else:
            lines.append(line)
    if current is not None:
        files.append((current, "\n".join(lines).strip("\n") + "\n"))
    return files


def read_host(spec: str, host: Any = None) -> HostFleet:
    """Read the engines a host runs (the module's docstring); one ``InputError`` line when the host cannot be read.
    ``host`` is a testinfra ``Host`` already made (by default, ``testinfra.get_host(spec)``)."""
    notes: list[str] = []
    try:
        host = host if host is not None else testinfra.get_host(spec)
        processes = _processes(host, notes)
    except InputError:
        raise
    except Exception as exc:  # testinfra's backends raise their own (ssh refused, no such container)
        raise InputError(Path(spec), None, f"the host cannot be read: {scrub(' '.join(str(exc).split()))[:300]}") from None
    fleet = HostFleet(processes=[], notes=notes)
    systemd = _read(host, "/proc/1/comm") == "systemd\n"
    host_files: dict[str, str] = {}
    for process in processes:
        cgroup = _read(host, f"/proc/{process.pid}/cgroup") or ""
        container = _container_run(host, cgroup, fleet.notes)
        unit = _unit_of(host, process.pid) if systemd and container is None else None
        process = EngineProcess(process.pid, process.ppid, process.cwd, process.argv, process.engine,
                                _environ(host, process.pid), unit, container)
        fleet.processes.append(process)
        if unit is None:
            continue
        try:
            cat = _output(host, f"systemctl cat {shlex.quote(unit)}")
        except InputError as exc:
            fleet.notes.append(f"{unit}: {exc.message}; written from /proc instead")
            fleet.processes[-1] = EngineProcess(process.pid, process.ppid, process.cwd, process.argv, process.engine,
                                                process.environ, None)
            continue
        for index, (path, text) in enumerate(_split_cat(cat)):
            name = f"systemd/{unit}" if index == 0 else f"systemd/{unit}.d/{posixpath.basename(path)}"
            fleet.files[name] = scrub(text)
            for named in _named_files(text):
                content = _read(host, named)
                if content is None:
                    fleet.notes.append(f"{unit}: {named} cannot be read on the host: not written")
                else:
                    host_files[named] = scrub(content)
                    _siblings(host, named, content, host_files)
    if host_files:
        common = posixpath.commonpath([posixpath.dirname(p) for p in host_files])
        if common == "/":
            fleet.notes.append(f"the files the units name ({', '.join(sorted(host_files))}) share no directory: "
                               "written under files/, declare each service's env_file in fleet.toml")
            for path, text in host_files.items():
                fleet.files[f"files{path}"] = text
        else:
            fleet.deploy_root = common
            for path, text in host_files.items():
                fleet.files[str(PurePosixPath(path).relative_to(common))] = text
    return fleet


MAX_SIBLINGS = 32


def _siblings(host: Any, named: str, text: str, host_files: dict[str, str]) -> None:
    """The files beside a script (or env file) that its text names by file name (``source "$here/chat.env"``, a
    template an env file names), and those they name in turn, two rounds, at most ``MAX_SIBLINGS``: what a serve
    script reads beside itself, never its whole directory (other units' files lie there too)."""
    directory = posixpath.dirname(named)
    try:
        listing = _output(host, f"ls -A {shlex.quote(directory)}").split() if directory else []
    except InputError:
        return  # a directory that cannot be listed: the named file alone
    pending = [text]
    for _ in range(2):
        found = []
        for body in pending:
            for name in listing:
                path = posixpath.join(directory, name)
                if path in host_files or len(host_files) >= MAX_SIBLINGS or not re.search(
                        rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", body):
                    continue
                content = _read(host, path)
                if content is not None:
                    host_files[path] = scrub(content)
                    found.append(content)
        pending = found


def _named_files(unit_text: str) -> list[str]:
    """The env files a unit names and the script its ExecStart= runs (a host file that is not an engine)."""
    named: list[str] = []
    for line in unit_text.splitlines():
        key, eq, value = line.strip().partition("=")
        if not eq:
            continue
        if key == "EnvironmentFile":
            named.append(value.lstrip("-").strip())
        elif key == "ExecStart":
            try:
                words = shlex.split(value.lstrip("-@+!:"))
            except ValueError:
                continue
            if words and words[0].startswith("/") and engine_process(words) is None and \
                    posixpath.basename(words[0]) not in ("bash", "sh", "env", "docker", "podman"):
                named.append(words[0])
            elif len(words) > 1 and posixpath.basename(words[0]) in ("bash", "sh") and words[1].startswith("/"):
                named.append(words[1])
    return [n for n in named if n.startswith("/") and "%" not in n and "$" not in n]


def _script(process: EngineProcess, spec: str) -> str:
    words = process.argv
    if len(words) > 2 and posixpath.basename(words[0]).startswith("python") and posixpath.basename(words[1]) == "vllm":
        words = words[1:]  # the vllm script run by its interpreter: the script itself, whose shebang names it
    argv = scrub_argv(words)
    env = scrub_environment(process.environ)
    lines = ["#!/bin/bash", f"# What process {process.pid} on {spec} ran, read by fleetgate init --from-host from "
             "/proc/PID/cmdline, environ and cwd.", f"cd {shlex.quote(process.cwd)}" if process.cwd else ""]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    lines.append("exec " + " ".join(shlex.quote(word) for word in argv))
    return "\n".join(line for line in lines if line) + "\n"


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def _label(process: EngineProcess) -> str:
    """A process's name in the fleet: the model name it serves (``--alias``, ``--served-model-name``), else its
    engine and port; never the bare binary name (``fleetgate fit llama-server`` reads that as a command line)."""
    words = process.argv
    for i, word in enumerate(words[:-1]):
        if word in ("--alias", "-a", "--served-model-name"):
            return words[i + 1]
    port = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--port"), None)
    kind = "llama" if process.engine == "llama.cpp" else "vllm"
    return f"{kind}-{port}" if port else kind


def write_fleet(fleet: HostFleet, spec: str, out: Path) -> list[str]:
    """The files read, written under ``out`` (a new or empty directory); the notes, one line each."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(out, None, "expected a new or empty directory: --from-host writes the host's files there")
    out.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    for process in fleet.processes:
        if process.unit is not None:
            continue
        if process.container is not None:
            base = re.sub(r"[^a-z0-9-]+", "-", _label(process).lower()).strip("-") or "engine"
            name = _unique(base, taken)
            fleet.files[f"scripts/{name}.sh"] = ("#!/bin/bash\n# The container of process "
                                                 f"{process.pid} on {spec}, as its runtime's inspect gives it.\n"
                                                 f"exec {process.container}\n")
            continue
        base = re.sub(r"[^a-z0-9-]+", "-", _label(process).lower()).strip("-") or "engine"
        fleet.files[f"scripts/{_unique(base, taken)}.sh"] = _script(process, spec)
    for relative, text in sorted(fleet.files.items()):
        target = out / relative
        real_out = out.resolve()
        if real_out not in target.resolve().parents:
            raise InputError(out, None, f"{relative}: a host path that leaves the directory; nothing of it written")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        if relative.startswith("scripts/"):
            target.chmod(0o755)
    return fleet.notes
