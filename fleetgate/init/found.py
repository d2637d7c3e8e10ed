"""What ``fleetgate init`` finds (``Found``, ``Note``, ``Discovery``), and the readings every shape of file shares:
the engine and its arguments in an argv, its port and model files by the engine's own argv model, a host path mapped
into the repository, a service name, a one-service fleet for the readers that take one."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.engines.vllm import parse_vllm
from fleetgate.fleet import DEFAULT_BINARY, Contract, Fleet, Host, Service
from fleetgate.units import Setting

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet, Service
    from fleetgate.sources.docker_run import ContainerRun

__all__ = [
    "DEFAULT_PORT",
    "ENGINE_BINARIES",
    "ENGINE_COMMAND",
    "TODO",
    "Context",
    "Discovery",
    "EngineName",
    "Found",
    "Note",
    "ScriptRender",
    "engine_of",
    "model_paths",
    "parsed_argv",
    "port_of",
    "rel_path",
    "repository_file",
    "service_name",
    "shell_script",
    "stub_fleet",
    "unprefixed",
    "unwritable",
    "visible",
]


TODO = "TODO"
"""The placeholder for what no file can say: a string where the schema expects a number, so it is refused until edited."""

EngineName = Literal["llama.cpp", "vllm"]
ENGINE_BINARIES: Mapping[str, EngineName] = {"llama-server": "llama.cpp", "vllm": "vllm"}
DEFAULT_PORT: Mapping[str, int] = {"llama.cpp": 8080, "vllm": 8000}


_NAME_BAD = re.compile(r"[^a-z0-9-]+")
COMMAND_WORDS = frozenset({"llama-server"})
"""Words ``fleetgate fit`` reads as the start of an engine command line: never a service name init writes."""


def visible(text: str) -> str:
    """``text`` with every character a terminal would not show as itself (a newline, a DEL, a bidi override, a byte
    of a file name that is not UTF-8) written as its escape: a file's name can neither break a line nor hide."""
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # a byte that is not UTF-8, as os.fsdecode carries it
    short = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch)
    if short is not None:
        return short
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def unwritable(text: str) -> bool:
    """A string no UTF-8 file can hold: a file name with bytes that are not UTF-8 (os.fsdecode's surrogates)."""
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


@dataclass(frozen=True)
class Note:
    """A file init read but could not use, or a fact it could not find: one line, naming the file and line."""

    path: Path
    line: int | None
    message: str
    render_first: bool = False
    """A Helm chart, a Flux HelmRelease or a kustomization: the message is the command whose output init reads."""

    def __str__(self) -> str:
        return visible(f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}")


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
    kubernetes: str | None = None
    kubernetes_workload: str | None = None
    kubernetes_container: str | None = None
    ansible_vars: tuple[str, ...] = ()
    """Where the service's file is an Ansible template: the group_vars/host_vars files its variables needed."""
    nix_unit: str | None = None
    """Where ``unit`` is a ``.nix`` file: the unit NixOS generates from it that is this service."""
    llama_swap: str | None = None
    llama_swap_model: str | None = None
    models_preset: str | None = None
    preset_model: str | None = None
    models_max: int | None = None
    """The router's ``--models-max``, from the unit that starts it (a router preset's models)."""
    env_template: tuple[str, str] | None = None
    """(template, install script): the env file the unit reads is the script's rendering of the template."""
    router_preset: str | None = None
    """The ``--models-preset`` path the rendered command line names: this is llama-server as a router, the front door
    of that preset's models (the services), never a service itself."""


@dataclass(frozen=True)
class Discovery:
    root: Path
    services: tuple[Found, ...]
    notes: tuple[Note, ...]
    deploy_root: str | None
    deploy_root_from: str | None
    read: Mapping[str, int] = field(default_factory=dict)
    """How many files of each kind were read (units, compose files, llama-swap configs)."""


def rel_path(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def service_name(raw: str, taken: set[str], shape: str) -> str:
    """fleet.toml's ``[a-z0-9-]`` form of ``raw``, unique among ``taken``. A name that is an engine command the CLI
    reads as a command line (``llama-server.service``, a compose service ``llama-server``) gets its shape after it
    (``llama-server-unit``), so that ``fleetgate fit NAME`` never has two readings."""
    base = _NAME_BAD.sub("-", raw.lower()).strip("-") or "service"
    if not base[0].isalnum():
        base = "s" + base
    if base in COMMAND_WORDS:
        base = f"{base}-{shape}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def unprefixed(setting: Setting) -> Setting:
    return Setting(setting.section, setting.key, setting.value.lstrip("-@+!:"), setting.path, setting.line)


def repository_file(root: Path, deploy_root: str | None, host_path: str) -> Path | None:
    """A host path under ``deploy_root`` -> the repository file (None when it is not one)."""
    if deploy_root is None or not host_path.startswith(deploy_root.rstrip("/") + "/"):
        return None
    tail = host_path[len(deploy_root.rstrip("/")) + 1:]
    local = root / tail
    try:
        real = local.resolve()
    except (OSError, RuntimeError):
        return None
    if root.resolve() not in real.parents or not os.path.isfile(local):
        return None
    return local


# --- argv --------------------------------------------------------------------------------------------------------


def engine_of(argv: Sequence[str]) -> tuple[EngineName, int] | None:
    """The engine an argv starts, and where its own arguments begin (``vllm serve MODEL``: after ``serve``)."""
    for i, word in enumerate(argv[:3]):
        engine = ENGINE_BINARIES.get(posixpath.basename(word))
        if engine is not None:
            return engine, i + 1
    return None


def parsed_argv(engine: EngineName, args: Sequence[str], env: Mapping[str, str]) -> tuple[int | None, list[str]]:
    """The port the argv sets (None: the engine's default) and the files it loads, read by the engine's own argv
    model (``fleetgate.engines``): aliases, ``--flag=value``, ``LLAMA_ARG_*`` and the last value winning."""
    if engine == "llama.cpp":
        llama = parse_llama_server(("llama-server", *args), env)
        given = llama.use("port")
        files = [llama.model, llama.mmproj, llama.spec_draft_model]
    else:
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


def model_paths(engine: EngineName, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    return parsed_argv(engine, args, env)[1]


def port_of(engine: EngineName, args: Sequence[str], env: Mapping[str, str]) -> int | None:
    return parsed_argv(engine, args, env)[0]


@dataclass
class Context:
    root: Path
    deploy_root: str | None
    notes: list[Note]
    taken: set[str]
    render: Callable[..., ScriptRender] | None
    files: tuple[Path, ...] = ()
    templates: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    """Host env files the repository does not hold -> (template, install script) that render them."""


@dataclass(frozen=True)
class ScriptRender:
    """What init keeps of a script's render: the engine's argv and environment, the repository files it sourced,
    and the ``docker run``/``podman run`` line that started it in a container (``fleetgate.sources.docker_run``)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    sourced: tuple[str, ...]
    container: ContainerRun | None = None


# A command line of a shell script that starts an engine: by name or by any path (a venv's, a build tree's, quoted
# or not), after exec, nohup, setsid or env's assignments, or vLLM's OpenAI server run as a Python module.
ENGINE_COMMAND = re.compile(
    r"""^\s*(?:(?:exec|nohup|setsid|env(?:\s+\w+=\S*)*)\s+)*["']?(?:\S*/)?"""
    r"""(?:llama-server|vllm["']?\s+serve|python(?:3(?:\.\d+)?)?["']?(?:\s+-[^m\s]\S*)*\s+-m\s+"""
    r"""vllm\.entrypoints\.openai\.api_server)(?=["'\s&;|]|$)""", re.M)


def stub_fleet(root: Path, deploy_root: str | None, name: str, engine: EngineName, **where: Any) -> tuple[Fleet, Service]:
    """A fleet of one service pointing at a file, for a reader that takes (fleet, service): nothing else is known."""
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


def shell_script(file: Path) -> str | None:
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
