"""A docker compose / podman compose service read the way compose reads it: the engine's argv and environment.
One module for one reader: interpolation, env files, entrypoint and command, ports, mounts and device grants are the
fields of one service node, read by one ``_Reader`` that keeps every value's line (its split would follow render's,
which is another change's).

Nothing runs: no container client is called, compose is data. The file is read with PyYAML's node API so that every
value keeps its line. What is read, as the compose specification says (compose-spec ``05-services.md``,
``12-interpolation.md``):

- interpolation of every value of the file (``$VAR``, ``${VAR}``, ``${VAR:-d}``, ``${VAR-d}``, ``${VAR:?msg}``,
  ``${VAR?msg}``, ``${VAR:+alt}``, ``${VAR+alt}``, ``$$``; defaults nest) from the ``.env`` file of the project
  directory (the compose file's own directory) only: the shell environment ``docker compose up`` would also read is
  not known offline, so a variable only the shell sets is unset here (and named in ``ComposeService.unset``);
- ``environment:`` (a map or a ``KEY=VALUE`` list; a bare ``KEY`` or a null value would come from the shell, so it is
  left out), ``env_file:`` (a string, a list, or ``{path, required}``), ``environment`` overriding ``env_file``;
- ``entrypoint:`` and ``command:`` (a string split shell-like, or a list); without ``entrypoint:`` the image's own:
  llama.cpp's ``server*`` images run ``/app/llama-server`` (and set ``LLAMA_ARG_HOST=0.0.0.0``), ``full*`` run
  ``/app/tools.sh`` whose first argument ``--server``/``-s`` starts llama-server with the rest, ``vllm/vllm-openai``
  runs ``vllm serve`` (.devops/cuda.Dockerfile of llama.cpp, docker/Dockerfile of vLLM);
- ``image:`` the engine build where its tag pins one (``server-cuda-b6300``; ``vllm/vllm-openai:v0.13.0``);
- ``ports:`` (short and long form), ``network_mode: host``; ``volumes:`` (bind mounts, short and long form);
- ``deploy.resources.reservations.devices``, ``gpus:`` and ``runtime: nvidia``: which of the host's cards the
  container gets; ``devices:`` (the GPU nodes) and ``group_add:``, which decide whether a non-root user can open them.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fleetgate.engines.llama_builds import image_build
from fleetgate.engines.vllm import image_release, is_vllm_image
from fleetgate.errors import InputError, read_text
from fleetgate.fleet import EngineBuild
from fleetgate.render.origins import Origin, map_to_repo
from fleetgate.sources.docker_run import NotServing, image_process, split_image
from fleetgate.sources.yaml_bounded import compose_yaml, merged_keys

if TYPE_CHECKING:
    from fleetgate.fleet import EngineBuild, Fleet, Service

__all__ = ["MAX_COMPOSE_FILES", "MAX_EXTENDS", "ComposeEntry", "ComposeService", "Grant", "Mount", "OpaqueMount", "PortMap",
           "deepest_mount", "interpolate", "list_services", "project_files", "read_compose"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# ASCII digits only: str.isdigit() also takes digits int() refuses ("²"), and a port or a card has few digits.
_DIGITS = re.compile(r"[0-9]{1,6}")
_INDEX = re.compile(r"[0-9]{1,4}")
MAX_CARDS = 1024
"""The most cards a ``count:`` may ask for: more than any host has."""
_LLAMA_IMAGES = ("ghcr.io/ggml-org/llama.cpp", "ghcr.io/ggerganov/llama.cpp")
_VLLM_API_SERVER = ("python3", "-m", "vllm.entrypoints.openai.api_server")
_EXPECTED = "a compose file (YAML: services: NAME: image: ...)"
MAX_NESTED_DEFAULTS = 32
"""How deep ``${A:-${B:-...}}`` may nest: real files nest two or three."""
MAX_VALUE_CHARS = 32 * 4096
"""No interpolated value is longer: Linux refuses an argument or environment string over 128 KiB (MAX_ARG_STRLEN)."""


@dataclass(frozen=True)
class PortMap:
    """One published port: clients reach ``host_ip:published`` on the host, the engine listens on ``target``."""

    target: int
    published: int | None
    """None: no host port given, so docker picks an ephemeral one that no client can know."""
    host_ip: str | None
    protocol: str
    where: str


@dataclass(frozen=True)
class Mount:
    source: str
    """The host path (relative sources resolved against the compose file's directory where the hosts deploy it)."""
    target: str
    where: str


@dataclass(frozen=True)
class OpaqueMount:
    """A ``volumes:`` entry with no host path fleetgate can know offline behind it: a named or anonymous volume
    (docker's storage), a tmpfs, a source under the home directory of whoever runs compose."""

    target: str
    kind: str
    """What it is, for a message: ``the named volume models``, ``an anonymous volume``, ``a tmpfs``."""
    where: str


@dataclass(frozen=True)
class UnsetVolume:
    """A ``volumes:`` entry whose path names a variable no ``.env`` of the project sets: compose warns and substitutes a
    blank string, so the mount is another path (``/qwen`` for ``${MODELS}/qwen``) or no valid spec at all."""

    written: str
    variables: tuple[str, ...]
    read: str
    """What compose makes of it."""
    where: str


@dataclass(frozen=True)
class Grant:
    """The cards the container gets: host device indices, ``None`` for every card, and how that was read."""

    indices: tuple[int, ...] | None
    how: str
    where: str
    unknown: tuple[str, ...] = ()
    """Device ids that are not an index of the host's cards (a UUID, or an index past them)."""
    nodes: tuple[str, ...] = ()
    """The render nodes a device-node grant passes (``/dev/dri``, ``/dev/dri/renderD129``), as written."""


@dataclass(frozen=True)
class ComposeService:
    path: Path
    name: str
    line: int
    image: str | None
    image_where: str
    argv: tuple[str, ...]
    env: Mapping[str, Origin]
    """The container's environment (the image's, ``env_file``, ``environment``), with where each was set."""
    project: Mapping[str, Origin]
    """The ``.env`` file's variables, which interpolate the compose file (not the container's environment)."""
    ports: tuple[PortMap, ...]
    host_network: bool
    mounts: tuple[Mount, ...]
    """The bind mounts."""
    gpus: Grant | None
    """None: nothing grants the container a GPU (no reservation, no ``gpus:``, no ``runtime: nvidia``, no
    ``/dev/dri`` render node in ``devices:``)."""
    unset: tuple[str, ...] = ()
    """Variables the file interpolates that the ``.env`` file does not set (compose: a blank string)."""
    volume_unset: tuple[UnsetVolume, ...] = ()
    """``volumes:`` entries that interpolate a variable the ``.env`` file does not set, as written."""
    user: tuple[str, str] | None = None
    """``user:`` (``NAME|UID[:GROUP|GID]``) and where it is written; None: the image's USER applies."""
    device_nodes: tuple[str, ...] = ()
    """The GPU device nodes ``devices:`` passes (``/dev/kfd``, ``/dev/dri``, ``/dev/dri/renderD128``): host paths,
    which the container opens with the host's owner and mode."""
    groups: tuple[str, ...] = ()
    """``group_add:`` (names, resolved in the image's /etc/group, or GIDs), in order."""
    groups_where: str = ""
    command_where: str = ""
    engine_build: EngineBuild | None = None
    notes: tuple[str, ...] = field(default=())
    opaque: tuple[OpaqueMount, ...] = ()
    """The other ``volumes:`` entries: a path below one of them is on no host path of the repository's hosts."""

    def holder(self, container_path: str) -> tuple[Mount | OpaqueMount, PurePosixPath] | None:
        """The entry of ``volumes:`` the container sees at a path (the deepest target), and the path below it."""
        return deepest_mount((*self.mounts, *self.opaque), container_path)

    def volume_at(self, container_path: str) -> OpaqueMount | None:
        """The entry other than a bind mount that the container sees at a path, if one is the deepest that holds it."""
        found = self.holder(container_path)
        return found[0] if found is not None and isinstance(found[0], OpaqueMount) else None

    def host_path(self, container_path: str) -> str | None:
        """The host path behind a container path, through the bind mounts (the deepest target first); None where no
        bind mount holds it, or a volume mounted deeper does."""
        found = self.holder(container_path)
        return None if found is None or isinstance(found[0], OpaqueMount) else _below(found[0].source, found[1])

    def published(self, target: int) -> PortMap | None:
        """The tcp entry that publishes ``target``: one with a host port first, else an ephemeral one."""
        found = [p for p in self.ports if p.target == target and p.protocol == "tcp"]
        return next((p for p in found if p.published is not None), found[0] if found else None)


# ---------------------------------------------------------------------------------------------------- interpolation

class _Targeted(Protocol):
    @property
    def target(self) -> str: ...


_M = TypeVar("_M", bound=_Targeted)


def deepest_mount(mounts: Sequence[_M], container_path: str) -> tuple[_M, PurePosixPath] | None:
    """The mount whose target holds ``container_path`` most deeply (a container sees the deepest one), and the path
    below its target; None when no mount holds it."""
    inside = PurePosixPath(posixpath.normpath(container_path))
    for mount in sorted(mounts, key=lambda m: -len(PurePosixPath(m.target).parts)):
        try:
            return mount, inside.relative_to(PurePosixPath(mount.target))
        except ValueError:
            continue
    return None


def _below(source: str, rest: PurePosixPath) -> str:
    return str(PurePosixPath(source) / rest) if str(rest) != "." else source


def interpolate(text: str, env: Mapping[str, str], path: Path | str, line: int | None,
                unset: list[str] | None = None) -> str:
    """``text`` with compose's interpolation applied (compose-spec 12-interpolation.md)."""
    out, _ = _interpolate(text, 0, env, path, line, unset if unset is not None else [], stop=None, depth=0)
    return out


def _interpolate(text: str, i: int, env: Mapping[str, str], path: Path | str, line: int | None,
                 unset: list[str], stop: str | None, depth: int) -> tuple[str, int]:
    out: list[str] = []
    size = 0
    while i < len(text):
        if size > MAX_VALUE_CHARS:
            raise InputError(path, line, f"{_shown(text)}: interpolates to more than {MAX_VALUE_CHARS} characters; "
                             "expected a value Linux can pass to a process (128 KiB at most)")
        c = text[i]
        if stop is not None and c == stop:
            return "".join(out), i
        if c != "$":
            out.append(c)
            size += 1
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if nxt == "$":
            out.append("$")
            size += 1
            i += 2
            continue
        if nxt == "{":
            value, i = _braced(text, i + 2, env, path, line, unset, depth)
            out.append(value)
            size += len(value)
            continue
        match = _NAME.match(text, i + 1)
        if match:
            name = match.group(0)
            if name not in env:
                unset.append(name)
            out.append(env.get(name, ""))
            size += len(out[-1])
            i = match.end()
            continue
        raise InputError(path, line, f"{_shown(text)}: a '$' that starts no variable; expected $NAME, ${{NAME}} or $$ "
                         "for a literal dollar (compose interpolation)")
    if size > MAX_VALUE_CHARS:
        raise InputError(path, line, f"{_shown(text)}: interpolates to more than {MAX_VALUE_CHARS} characters; "
                         "expected a value Linux can pass to a process (128 KiB at most)")
    if stop is not None:
        raise InputError(path, line, f"{_shown(text)}: '${{' is never closed; expected '}}' (compose interpolation)")
    return "".join(out), i


def _shown(text: str) -> str:
    """The value an error names, cut short: a hostile value may be megabytes long."""
    return repr(text) if len(text) <= 200 else f"{text[:200]!r}... ({len(text)} characters)"


def _braced(text: str, i: int, env: Mapping[str, str], path: Path | str, line: int | None,
            unset: list[str], depth: int) -> tuple[str, int]:
    match = _NAME.match(text, i)
    if not match:
        raise InputError(path, line, f"{_shown(text)}: '${{' is not followed by a variable name; expected ${{NAME}} "
                         "(compose interpolation)")
    name = match.group(0)
    i = match.end()
    if i >= len(text):
        raise InputError(path, line, f"{_shown(text)}: '${{{name}' is never closed; expected '}}' (compose "
                         "interpolation)")
    if text[i] == "}":
        if name not in env:
            unset.append(name)
        return env.get(name, ""), i + 1
    op = text[i:i + 2] if text[i] == ":" else text[i]
    if op not in (":-", "-", ":?", "?", ":+", "+"):
        raise InputError(path, line, f"{_shown(text)}: '${{{name}{text[i]}' is no compose substitution; expected one "
                         "of :- - :? ? :+ + after the name")
    if depth >= MAX_NESTED_DEFAULTS:
        raise InputError(path, line, f"{_shown(text)}: substitutions nested more than {MAX_NESTED_DEFAULTS} deep; "
                         "expected ${NAME:-default} nested a few levels at most (compose interpolation)")
    word, end = _interpolate(text, i + len(op), env, path, line, unset, stop="}", depth=depth + 1)
    value = env.get(name)
    missing = value is None or (op.startswith(":") and value == "")
    if op.endswith("-"):
        result = word if missing else value
    elif op.endswith("+"):
        result = "" if missing else word
    else:
        if missing:
            why = "is not set" if value is None else "is empty"
            raise InputError(path, line, f"${{{name}{op}{word}}}: {name} {why}: {word or 'required variable'}; "
                             f"expected {name} in the .env file beside the compose file (the shell's environment is "
                             "not read offline)")
        result = value
    assert result is not None
    return result, end + 1


# -------------------------------------------------------------------------------------------------------- .env files

def _dotenv(path: Path, env: Mapping[str, str], what: str, via: str) -> dict[str, Origin]:
    """A compose env file (``.env`` or ``env_file:``): ``KEY=VALUE`` lines, ``#`` comments, ``export`` allowed; single
    quotes literal, double quotes with escapes and interpolation, unquoted values interpolated with ``' #'`` comments."""
    found: dict[str, Origin] = {}
    scope = dict(env)
    for number, raw in enumerate(read_text(path, what).splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq or not _NAME.fullmatch(name):
            raise InputError(path, number, f"{raw.strip()!r}: expected KEY=VALUE (a compose env file)")
        value = value.strip()
        if value.startswith("'"):
            close = value.find("'", 1)
            if close < 0:
                raise InputError(path, number, f"{name}: the single quote is never closed; expected '...'")
            value = value[1:close]
        elif value.startswith('"'):
            close = _closing_double(value)
            if close < 0:
                raise InputError(path, number, f"{name}: the double quote is never closed; expected \"...\"")
            body = value[1:close]
            # One pass over the escapes; an escaped dollar becomes interpolation's own literal dollar ($$).
            body = re.sub(r"\\([\\\"nrt$])",
                          lambda m: {"n": "\n", "r": "\r", "t": "\t", "$": "$$"}.get(m.group(1), m.group(1)), body)
            value = interpolate(body, scope, path, number)
        else:
            comment = re.search(r"\s#", value)
            if comment:
                value = value[:comment.start()].rstrip()
            value = interpolate(value, scope, path, number)
        found[name] = Origin(name, value, f"{path}:{number}", via)
        scope[name] = value
    return found


def _closing_double(value: str) -> int:
    i = 1
    while i < len(value):
        if value[i] == "\\":
            i += 2
            continue
        if value[i] == '"':
            return i
        i += 1
    return -1


# ------------------------------------------------------------------------------------------------------ YAML access

@dataclass(frozen=True, eq=False)
class _File:
    """One compose file as a project reads it: the variables that interpolate it, and the directory its relative paths
    resolve against (its project directory; the file's own directory for a file another service extends)."""

    path: Path
    env: Mapping[str, str]
    project: Mapping[str, Origin]
    """Where each of ``env`` was set (the ``.env`` files)."""
    base: Path


class _Reader:
    """Nodes of the compose files of one project, interpolated on access, every error at its file and line."""

    def __init__(self, main: _File) -> None:
        self.main = main
        self.unset: list[str] = []
        self._files: dict[int, _File] = {}
        # The nodes _files names by id are kept alive here, so that no id is reused by another node.
        self._kept: list[Node] = []

    def adopt(self, root: Node, file: _File) -> None:
        """Every node of ``root`` comes from ``file``."""
        self._kept.append(root)
        pending = [root]
        while pending:
            node = pending.pop()
            if id(node) in self._files:
                continue
            self._files[id(node)] = file
            if isinstance(node, SequenceNode):
                pending += node.value
            elif isinstance(node, MappingNode):
                for key, value in node.value:
                    pending += [key, value]

    def made(self, node: Node, like: Node) -> Node:
        """A node merged from others, read as coming from the file of ``like``."""
        self._kept.append(node)
        self._files[id(node)] = self.file(like)
        return node

    def file(self, node: Node) -> _File:
        return self._files.get(id(node), self.main)

    def line(self, node: Node) -> int:
        return int(node.start_mark.line) + 1

    def where(self, node: Node) -> str:
        return f"{self.file(node).path}:{self.line(node)}"

    def fail(self, node: Node, message: str) -> InputError:
        return InputError(self.file(node).path, self.line(node), message)

    def items(self, node: Node, what: str) -> list[tuple[str, Node, Node]]:
        """(key, key node, value node) of a mapping, ``<<`` merges applied (explicit keys win)."""
        if not isinstance(node, MappingNode):
            raise self.fail(node, f"{what}: expected a mapping, got {_kind(node)}")
        own: list[tuple[str, Node, Node]] = []
        merged: list[tuple[str, Node, Node]] = []
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                sources = value.value if isinstance(value, SequenceNode) else [value]
                for source in sources:
                    merged += self.items(source, f"{what} (<< merge)")
                continue
            if not isinstance(key, ScalarNode):
                raise self.fail(key, f"{what}: a key that is not a string; expected NAME: VALUE")
            own.append((key.value, key, value))
        # The first of several merged mappings wins, as the keys written here win over all of them: one entry per key
        # keeps a chain of merges linear instead of doubling at each step.
        taken = {k for k, _, _ in own}
        kept: list[tuple[str, Node, Node]] = []
        for item in merged:
            if item[0] not in taken:
                taken.add(item[0])
                kept.append(item)
        return own + kept

    def get(self, node: Node, key: str, what: str) -> Node | None:
        for name, _, value in self.items(node, what):
            if name == key:
                return value
        return None

    def null(self, node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null"

    def text(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode):
            raise self.fail(node, f"{what}: expected a string, got {_kind(node)}")
        file = self.file(node)
        return interpolate(node.value, file.env, file.path, self.line(node), self.unset)

    def strings(self, node: Node, what: str) -> list[tuple[str, Node]]:
        """A string or a list of strings."""
        if isinstance(node, SequenceNode):
            return [(self.text(item, f"{what}[{i}]"), item) for i, item in enumerate(node.value)]
        return [(self.text(node, what), node)]


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"the {node.tag.rsplit(':', 1)[-1]} {node.value!r}"


def _load(path: Path) -> Node:
    root = compose_yaml(path, read_text(path, "the compose file"), _EXPECTED)
    if root is None:
        raise InputError(path, 1, "the compose file is empty; expected a top-level services: mapping")
    return root


# ---------------------------------------------------------------------------------------------------------- projects

MAX_COMPOSE_FILES = 64
"""The most compose files one project reads (its own, those it includes, those its services extend): a project split
over a handful of files is common, and includes that repeat each other must not read files without end."""
MAX_EXTENDS = 32
"""The longest chain of ``extends:`` followed: real files chain two or three."""
_LAYERS = "tag:fleetgate,2026:layers"
"""The tag of a merged ``environment:``: each of its items is one service's own (a mapping or a list), in order."""
_REPLACED = frozenset({"command", "entrypoint"})
"""Service keys a later definition replaces whole (compose-spec 13-merge.md: shell commands)."""


def _unique_key(reader: _Reader, key: str, item: Node) -> str | None:
    """The key compose keeps one entry of a service sequence by (compose-go ``override/uncity.go``): a volume's or a
    device's target, a port's text or {host_ip, published, target, protocol}, an env file's path; None: no key."""
    def text(node: Node | None) -> str | None:
        return reader.text(node, key) if isinstance(node, ScalarNode) else None

    if key in ("volumes", "devices"):
        if isinstance(item, MappingNode):
            return text(merged_keys(item).get("target"))
        written = text(item)
        if written is None:
            return None
        parts = written.split(":")
        return parts[1] if len(parts) > 1 else parts[0]
    if key == "ports":
        if isinstance(item, MappingNode):
            fields = merged_keys(item)
            return (f"{text(fields.get('host_ip')) or '0.0.0.0'}:{text(fields.get('published')) or ''}:"
                    f"{text(fields.get('target'))}/{text(fields.get('protocol')) or 'tcp'}")
        return text(item)
    written = text(merged_keys(item).get("path")) if isinstance(item, MappingNode) else text(item)
    return None if written is None else posixpath.normpath(posixpath.join(reader.file(item).base.as_posix(), written))


class _Project:
    """The services of a compose project, read as compose reads them: the files a top-level ``include:`` names join it
    (each with its own project directory and ``.env``), and a service's ``extends:`` is merged into it
    (compose-spec 14-include.md, 05-services.md ``extends``, 13-merge.md). Every file read is one of the repository by
    real path."""

    def __init__(self, repository: Path, main: _File) -> None:
        self.repository = repository
        self.reader = _Reader(main)
        self.read: list[Path] = []
        self.roots: list[Node] = []
        self._extended: dict[tuple[str, int], _Loaded] = {}

    # --- files

    def confined(self, node: Node, written: str, base: Path, what: str, kind: str) -> Path:
        """The file ``written`` relative to ``base``, when it is a file of the repository by real path."""
        # Joined and cleaned as compose joins it (Go's filepath.Join), then confined by real path.
        path = Path(posixpath.normpath(base / written))
        resolved = _real(path)
        if not _inside(self.repository, resolved):
            raise self.reader.fail(node, f"{what}: {written} resolves outside the fleet repository ({resolved}); "
                                   f"expected {kind} of the repository")
        if not resolved.is_file():
            raise self.reader.fail(node, f"{what}: {written}: no such file (looked for {path}); expected {kind} of the "
                                   f"repository, relative to {base}")
        return path

    def load(self, file: _File, named_by: tuple[Node, str] | None = None) -> Node:
        """``file`` read, interpolated and adopted; ``named_by``: the node that names it, and what it is."""
        if len(self.read) >= MAX_COMPOSE_FILES and named_by is not None:
            node, what = named_by
            raise self.reader.fail(node, f"{what}: the compose project would read more than {MAX_COMPOSE_FILES} files; "
                                   "expected includes and extends that name each file a few times at most")
        self.read.append(file.path)
        root = _load(file.path)
        _interpolate_all(file, root)
        self.reader.adopt(root, file)
        self.roots.append(root)
        return root

    def services_of(self, root: Node, what: str) -> dict[str, Node]:
        services = self.reader.get(root, "services", what)
        if services is None or self.reader.null(services):
            return {}
        return {name: node for name, _, node in self.reader.items(services, "services")}

    # --- a project: its files merged, its includes imported, its extends applied

    def project(self, paths: Sequence[tuple[Path, tuple[Node, str] | None]], file: _File,
                chain: tuple[Path, ...]) -> dict[str, Node]:
        """The services of the project whose files are ``paths`` (later ones override; each with the node that names
        it), ``file`` giving the variables and the project directory."""
        services: dict[str, Node] = {}
        for path, named_by in paths:
            this = _File(path, file.env, file.project, file.base)
            root = self.load(this, named_by)
            for name, node in self.services_of(root, "the compose file").items():
                services[name] = self.merge_service(services[name], node) if name in services else node
            include = self.reader.get(root, "include", "the compose file")
            if include is not None and not self.reader.null(include):
                for name, node in self.include(include, this, (*chain, _real(path))).items():
                    if name in services and not self.same(services[name], node):
                        first = services[name]
                        raise self.reader.fail(first, f"services.{name}: defined here and in {self.reader.where(node)}, "
                                               "which include: brings in; expected one definition of each service "
                                               f"(compose: services.{name} conflicts with imported resource)")
                    services.setdefault(name, node)
        loaded = _Loaded(services)
        return {name: self.extend(name, loaded, ()) for name in services}

    def include(self, node: Node, file: _File, chain: tuple[Path, ...]) -> dict[str, Node]:
        reader = self.reader
        if not isinstance(node, SequenceNode):
            raise reader.fail(node, f"include: expected a list of files, got {_kind(node)}")
        imported: dict[str, Node] = {}
        for i, entry in enumerate(node.value):
            what = f"include[{i}]"
            if isinstance(entry, MappingNode):
                path_node = reader.get(entry, "path", what)
                if path_node is None:
                    raise reader.fail(entry, f"{what}: no path; expected path: FILE (or a list of files)")
                written = reader.strings(path_node, f"{what}.path")
                if not written:
                    raise reader.fail(path_node, f"{what}.path: an empty list; expected one file at least")
                directory = reader.get(entry, "project_directory", what)
                env_files = reader.get(entry, "env_file", what)
            else:
                written, directory, env_files = [(reader.text(entry, what), entry)], None, None
            labels = [f"{what}.path" if n is not entry else what for _, n in written]
            paths = [self.confined(n, text, file.base, label, "a compose file")
                     for (text, n), label in zip(written, labels, strict=True)]
            for path, (text, n) in zip(paths, written, strict=True):
                if _real(path) in chain:
                    cycle = " -> ".join([*(str(p) for p in chain), str(_real(path))])
                    raise reader.fail(n, f"{what}: {text}: an include cycle ({cycle}); expected included files that do "
                                      "not include the file back")
            base = paths[0].parent
            if directory is not None:
                text = reader.text(directory, f"{what}.project_directory")
                base = file.base / text
                resolved = _real(base)
                if not _inside(self.repository, resolved):
                    raise reader.fail(directory, f"{what}.project_directory: {text} resolves outside the fleet "
                                      f"repository ({resolved}); expected a directory of the repository")
            origins = dict(file.project)
            env = dict(file.env)
            if env_files is not None:
                sources = [(self.confined(n, text, file.base, f"{what}.env_file", "an env file"), n)
                           for text, n in reader.strings(env_files, f"{what}.env_file")]
            else:
                dotenv = base / ".env"
                sources = [(dotenv, entry)] if _real(dotenv).is_file() else []
                if sources and not _inside(self.repository, _real(dotenv)):
                    raise reader.fail(entry, f"{what}: the included project's .env resolves outside the fleet "
                                      f"repository ({_real(dotenv)}); expected a file of the repository, or none")
            for source, _ in sources:
                # Compose's own environment wins: an included project's .env only adds what is not set yet.
                for key, origin in _dotenv(source, file.env, "an env file of an included compose project",
                                           ".env").items():
                    if key not in env:
                        env[key] = origin.value
                        origins[key] = origin
            included = _File(paths[0], env, origins, base)
            named = [(path, (n, label)) for path, (_, n), label in zip(paths, written, labels, strict=True)]
            for name, service in self.project(named, included, chain).items():
                if name in imported and not self.same(imported[name], service):
                    raise reader.fail(entry, f"{what}: services.{name} is defined again by {reader.where(service)}, "
                                      f"another included file, and differs; expected one definition of each service "
                                      f"(compose: services.{name} conflicts with imported resource)")
                imported.setdefault(name, service)
        return imported

    def same(self, one: Node, other: Node) -> bool:
        """Whether two definitions of a service are one (compose lets an included file define again what is equal)."""
        def shape(node: Node) -> object:
            base = self.reader.file(node).base
            if isinstance(node, ScalarNode):
                return (base, node.tag, self.reader.text(node, "the service"))
            if isinstance(node, SequenceNode):
                return (node.tag, tuple(shape(n) for n in node.value))
            return tuple((k, shape(v)) for k, _, v in self.reader.items(node, "the service"))
        return shape(one) == shape(other)

    # --- extends

    def extend(self, name: str, loaded: _Loaded, chain: tuple[tuple[Path, str], ...]) -> Node:
        """Service ``name`` of ``loaded`` with its ``extends:`` chain followed and merged."""
        if name in loaded.resolved:
            return loaded.resolved[name]
        reader = self.reader
        node = loaded.services[name]
        what = f"services.{name}"
        file = reader.file(node)
        step = (_real(file.path), name)
        if step in chain:
            cycle = " -> ".join(f"{p.name}:{n}" for p, n in (*chain, step))
            raise reader.fail(node, f"{what}.extends: a cycle ({cycle}); expected extends that end at a service which "
                              "extends none")
        if len(chain) >= MAX_EXTENDS:
            raise reader.fail(node, f"{what}.extends: a chain of more than {MAX_EXTENDS} services; expected extends a "
                              "few services deep")
        extends = reader.get(node, "extends", what)
        if extends is None or reader.null(extends):
            loaded.resolved[name] = node
            return node
        if isinstance(extends, MappingNode):
            ref_node = reader.get(extends, "service", f"{what}.extends")
            if ref_node is None:
                raise reader.fail(extends, f"{what}.extends: no service; expected service: NAME (and file: FILE)")
            ref = reader.text(ref_node, f"{what}.extends.service")
            file_node = reader.get(extends, "file", f"{what}.extends")
        else:
            ref, ref_node, file_node = reader.text(extends, f"{what}.extends"), extends, None
        if file_node is not None and not reader.null(file_node):
            written = reader.text(file_node, f"{what}.extends.file")
            path = self.confined(file_node, written, file.base, f"{what}.extends.file", "a compose file")
            other = self.extended_file(path, file, (file_node, f"{what}.extends.file"))
            if ref not in other.services:
                raise reader.fail(ref_node, f"{what}.extends: no service {ref!r} in {written}; expected one of: "
                                  f"{', '.join(other.services) or 'none'}")
        else:
            other = loaded
            if ref not in other.services:
                raise reader.fail(ref_node, f"{what}.extends: no service {ref!r} in {file.path.name}; expected one "
                                  f"of: {', '.join(n for n in other.services if n != name) or 'none'}")
        base = self.extend(ref, other, (*chain, step))
        merged = self.merge_service(base, node)
        loaded.resolved[name] = merged
        return merged

    def extended_file(self, path: Path, by: _File, named_by: tuple[Node, str]) -> _Loaded:
        """A file a service extends: interpolated with the extending project's variables, its relative paths its own
        directory's; its ``include:`` is not read (compose skips it there)."""
        key = (str(_real(path)), id(by.env))
        if key not in self._extended:
            file = _File(path, by.env, by.project, path.parent)
            self._extended[key] = _Loaded(self.services_of(self.load(file, named_by), "the extended compose file"))
        return self._extended[key]

    # --- merging (compose-spec 13-merge.md)

    def merge_service(self, base: Node, over: Node) -> Node:
        reader = self.reader
        merged: dict[str, tuple[Node, Node]] = {
            key: (key_node, value) for key, key_node, value in reader.items(base, "the extended service")
            if key != "extends"}
        for key, key_node, value in reader.items(over, "the service"):
            if key == "extends":
                continue
            if key in merged and key not in _REPLACED and not key.startswith("x-"):
                value = self.merge_value(key, merged[key][1], value)
            merged[key] = (key_node, value)
        return reader.made(MappingNode("tag:yaml.org,2002:map", list(merged.values()), over.start_mark,
                                       over.end_mark), over)

    def merge_value(self, key: str, base: Node, over: Node) -> Node:
        reader = self.reader
        if reader.null(over) or reader.null(base):
            return over
        if key == "environment":
            layers = base.value if base.tag == _LAYERS else [base]
            return reader.made(SequenceNode(_LAYERS, [*layers, over], over.start_mark, over.end_mark), over)
        if key == "env_file":
            items = [*(base.value if isinstance(base, SequenceNode) else [base]),
                     *(over.value if isinstance(over, SequenceNode) else [over])]
            return reader.made(SequenceNode("tag:yaml.org,2002:seq", items, over.start_mark, over.end_mark), over)
        if isinstance(base, MappingNode) and isinstance(over, MappingNode):
            merged: dict[str, tuple[Node, Node]] = {k: (kn, v) for k, kn, v in reader.items(base, key)}
            for name, key_node, value in reader.items(over, key):
                if name in merged:
                    value = self.merge_value(f"{key}.{name}", merged[name][1], value)
                merged[name] = (key_node, value)
            return reader.made(MappingNode(over.tag, list(merged.values()), over.start_mark, over.end_mark), over)
        if isinstance(base, SequenceNode) and isinstance(over, SequenceNode):
            return reader.made(SequenceNode(over.tag, [*base.value, *over.value], over.start_mark, over.end_mark),
                               over)
        return over

    def unique(self, node: Node) -> Node:
        """The service with one entry per unique key in ``ports``, ``volumes``, ``devices`` and ``env_file`` (a later
        entry takes the place of the earlier one, as compose's EnforceUnicity does)."""
        reader = self.reader
        if not isinstance(node, MappingNode):
            return node
        pairs: list[tuple[Node, Node]] = []
        changed = False
        for key, key_node, value in reader.items(node, "the service"):
            if key in ("ports", "volumes", "devices", "env_file") and isinstance(value, SequenceNode):
                kept: list[Node] = []
                slots: dict[str, int] = {}
                for item in value.value:
                    unique = _unique_key(reader, key, item)
                    if unique is not None and unique in slots:
                        kept[slots[unique]] = item
                        continue
                    if unique is not None:
                        slots[unique] = len(kept)
                    kept.append(item)
                if len(kept) != len(value.value):
                    value = reader.made(SequenceNode(value.tag, kept, value.start_mark, value.end_mark), value)
                    changed = True
            pairs.append((key_node, value))
        if not changed:
            return node
        return reader.made(MappingNode(node.tag, pairs, node.start_mark, node.end_mark), node)


@dataclass
class _Loaded:
    """The services of one project or one extended file, and those whose extends are followed already."""

    services: dict[str, Node]
    resolved: dict[str, Node] = field(default_factory=dict)


def _open_project(repository: Path, path: Path,
                  overrides: Mapping[str, str | None] | None) -> tuple[_Project, Node, dict[str, Node]]:
    """The project of the compose file ``path``: its root node and every service, include and extends applied."""
    project_env = _project_env(repository, path)
    env = {n: o.value for n, o in project_env.items()}
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    main = _File(path, env, project_env, path.parent)
    project = _Project(repository, main)
    services = project.project([(path, None)], main, ())
    root = project.roots[0]
    if not services and project.reader.get(root, "services", "the compose file") is None:
        raise project.reader.fail(root, "no services: mapping; expected services: NAME: ... (a compose file)")
    return project, root, {name: project.unique(node) for name, node in services.items()}


# ---------------------------------------------------------------------------------------------------------- reading

def read_compose(fleet: Fleet, service: Service, *, overrides: Mapping[str, str | None] | None = None) -> ComposeService:
    """The compose service a fleet service names, read the way compose reads it (its project's includes and its
    extends applied)."""
    assert service.compose is not None
    path = service.compose
    name = service.compose_service or service.name
    project, root, services = _open_project(fleet.root, path, overrides)
    reader = project.reader
    node = services.get(name)
    if node is None:
        where = reader.get(root, "services", "the compose file")
        raise reader.fail(root if where is None else where, f"no compose service {name!r}; expected one of: "
                          f"{', '.join(services) or 'none'} (set compose_service in fleet.toml)")
    what = f"services.{name}"
    file = reader.file(node)
    env = file.env
    line = reader.line(node)

    def attr(key: str) -> Node | None:
        value = reader.get(node, key, what)
        return None if value is None or reader.null(value) else value

    # The container's environment: the image's, then env_file in order, then environment (which wins).
    container: dict[str, Origin] = {}
    image_node = attr("image")
    image = reader.text(image_node, f"{what}.image") if image_node is not None else None
    image_where = reader.where(image_node) if image_node is not None else reader.where(node)
    repo, tag = split_image(image)
    if repo in _LLAMA_IMAGES and tag.startswith("server"):
        container["LLAMA_ARG_HOST"] = Origin("LLAMA_ARG_HOST", "0.0.0.0", image_where, "image")
    env_files = attr("env_file")
    if env_files is not None:
        for local, required, where_node in _env_files(reader, env_files, what):
            # Relative to the project directory of the file that names it (an extended file's own directory).
            resolved = _real(reader.file(where_node).base / local)
            if not _inside(fleet.root, resolved):
                raise reader.fail(where_node, f"env_file {local}: resolves outside the fleet repository ({resolved}); "
                                  "expected a file of the repository (relative to the compose file)")
            if not resolved.is_file():
                if not required:
                    continue
                raise reader.fail(where_node, f"env_file {local}: no such file; expected a file of the repository "
                                  "(relative to the compose file), or required: false")
            container.update(_dotenv(resolved, reader.file(where_node).env, "an env_file of the compose service",
                                     "env_file"))
    environment = attr("environment")
    if environment is not None:
        container.update(_environment(reader, environment, what))
    for key, value in (overrides or {}).items():
        if key in container and key not in env:
            if value is None:
                container.pop(key)
            else:
                container[key] = Origin(key, value, container[key].where, container[key].via)

    argv, command_where = _argv(reader, node, what, service, repo, tag, attr)
    ports, host_network = _ports(reader, attr, what)
    mounts, opaque, volume_unset = _mounts(fleet, reader, attr("volumes"), what, map_to_repo)
    user_node = attr("user")
    user = (reader.text(user_node, f"{what}.user"), reader.where(user_node)) if user_node is not None else None
    grant = _gpus(reader, attr, what, container)
    devices_node, groups_node = attr("devices"), attr("group_add")
    nodes = [text.split(":", 1)[0] for text, _ in reader.strings(devices_node, f"{what}.devices")] if devices_node else []
    groups = [text.strip() for text, _ in reader.strings(groups_node, f"{what}.group_add")] if groups_node else []
    return ComposeService(
        path=file.path, name=name, line=line, image=image, image_where=image_where, argv=argv, env=container,
        project=file.project,
        ports=ports, host_network=host_network, mounts=mounts, opaque=opaque, gpus=grant,
        unset=tuple(dict.fromkeys(reader.unset)), volume_unset=volume_unset, user=user, command_where=command_where,
        device_nodes=tuple(n for n in nodes if n == "/dev/kfd" or n.rstrip("/") == "/dev/dri" or n.startswith("/dev/dri/")),
        groups=tuple(groups), groups_where=reader.where(groups_node) if groups_node is not None else "",
        engine_build=_engine_build(service, image, image_where, image_node, reader),
    )


@dataclass(frozen=True)
class ComposeEntry:
    """One service of a compose project, as ``list_services`` finds it (before a fleet names it)."""

    name: str
    path: Path
    """The compose file that defines it: the one named, or one it includes."""
    line: int
    program: str | None
    """The file name of the program its container starts (``llama-server``, ``vllm``, ``python3``); None when the
    image's entrypoint is not known offline and the file names none (a web UI, a database)."""


def list_services(path: Path, repository: Path) -> tuple[ComposeEntry, ...]:
    """Every service of the compose project of ``path`` (a file of the fleet repository ``repository``: the services
    of the files it includes too, each with its extends applied) and the program its container starts, read as
    ``read_compose`` reads it; a project compose would refuse is one ``InputError``."""
    project, _, services = _open_project(repository, path, None)
    reader = project.reader
    found: list[ComposeEntry] = []
    for name, node in services.items():
        what = f"services.{name}"

        def attr(key: str, node: Node = node, what: str = what) -> Node | None:
            value = reader.get(node, key, what)
            return None if value is None or reader.null(value) else value

        image_node = attr("image")
        repo, tag = split_image(reader.text(image_node, f"{what}.image") if image_node is not None else None)
        words = _container_words(reader, node, what, repo, tag, attr)
        found.append(ComposeEntry(name, reader.file(node).path, reader.line(node),
                                  posixpath.basename(words[0]) if words else None))
    return tuple(found)


def project_files(path: Path, repository: Path) -> tuple[Path, ...]:
    """The other compose files the project of ``path`` reads (those it includes, those its services extend)."""
    project, _, _ = _open_project(repository, path, None)
    return tuple(p for p in project.read[1:])


def _real(path: Path) -> Path:
    """The real path, symlinks followed; a symlink loop is left as it is (``Path.resolve`` raises on one)."""
    return Path(os.path.realpath(path))


def _inside(repository: Path, resolved: Path) -> bool:
    real_root = _real(repository)
    return resolved == real_root or real_root in resolved.parents


def _project_env(repository: Path, path: Path) -> dict[str, Origin]:
    """The ``.env`` file of the compose project (the compose file's directory), confined to the fleet repository by
    real path as ``env_file:`` is: one that leads outside is refused before it is opened."""
    dotenv = path.parent / ".env"
    if not dotenv.is_symlink() and not dotenv.exists():
        return {}
    resolved = _real(dotenv)
    if not _inside(repository, resolved):
        raise InputError(dotenv, None, f"the compose project's .env resolves outside the fleet repository ({resolved}); "
                         "expected a file of the repository beside the compose file, or none")
    if not resolved.is_file():
        return {}
    return _dotenv(dotenv, {}, "the compose project's .env file", ".env")


def _interpolate_all(file: _File, root: Node) -> None:
    """Compose interpolates the whole file before it starts anything: a refused interpolation anywhere (a required
    variable of another service) refuses ``docker compose up`` of every service."""
    seen: set[int] = set()
    pending = [root]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ScalarNode):
            interpolate(node.value, file.env, file.path, int(node.start_mark.line) + 1, [])
        elif isinstance(node, SequenceNode):
            pending += node.value
        elif isinstance(node, MappingNode):
            pending += [value for _, value in node.value]


def _engine_build(service: Service, image: str | None, where: str, node: Node | None,
                  reader: _Reader) -> EngineBuild | None:
    if image is None:
        return None
    repo, _ = split_image(image)
    declared = service.engine_build
    if is_vllm_image(repo):
        version = image_release(image)
        if declared is not None and declared.version is not None and version is not None and declared.version != version:
            assert node is not None
            raise reader.fail(node, f"image {image} pins vLLM {version} but fleet.toml's engine_build version = "
                              f"{declared.version}; expected one release (drop engine_build, or the tag's)")
        return EngineBuild(fork="mainline", number=None, version=version, image=image)
    number = image_build(image)
    if declared is not None and declared.number is not None and number is not None and declared.number != number:
        assert node is not None
        raise reader.fail(node, f"image {image} pins build {number} but fleet.toml's engine_build number = "
                          f"{declared.number}; expected one build (drop engine_build, or the tag's)")
    return EngineBuild(fork="mainline", number=number, image=image)


def _env_files(reader: _Reader, node: Node, what: str) -> list[tuple[str, bool, Node]]:
    found: list[tuple[str, bool, Node]] = []
    items = node.value if isinstance(node, SequenceNode) else [node]
    for i, item in enumerate(items):
        if isinstance(item, MappingNode):
            path_node = reader.get(item, "path", f"{what}.env_file[{i}]")
            if path_node is None:
                raise reader.fail(item, f"{what}.env_file[{i}]: no path; expected path: FILE (and required: true|false)")
            required_node = reader.get(item, "required", f"{what}.env_file[{i}]")
            required = True
            if required_node is not None:
                flag = reader.text(required_node, f"{what}.env_file[{i}].required").lower()
                if flag not in ("true", "false"):
                    raise reader.fail(required_node, f"{what}.env_file[{i}].required: {flag!r}; expected true or false")
                required = flag == "true"
            found.append((reader.text(path_node, f"{what}.env_file[{i}].path"), required, path_node))
        else:
            found.append((reader.text(item, f"{what}.env_file"), True, item))
    return found


def _environment(reader: _Reader, node: Node, what: str) -> dict[str, Origin]:
    """``environment:``; merged by extends, each service's own in order, a later one winning key by key."""
    found: dict[str, Origin] = {}
    for layer in node.value if node.tag == _LAYERS else [node]:
        for key, origin in _environment_layer(reader, layer, what).items():
            if origin is None:  # a bare KEY or a null value takes the shell's value, which is not known offline
                found.pop(key, None)
            else:
                found[key] = origin
    return found


def _environment_layer(reader: _Reader, node: Node, what: str) -> dict[str, Origin | None]:
    found: dict[str, Origin | None] = {}
    if isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            entry = reader.text(item, f"{what}.environment[{i}]")
            key, eq, value = entry.partition("=")
            if not key:
                raise reader.fail(item, f"{what}.environment[{i}]: {entry!r}; expected KEY=VALUE")
            found[key] = Origin(key, value, reader.where(item), "environment") if eq else None
        return found
    for key, _, value_node in reader.items(node, f"{what}.environment"):
        if reader.null(value_node):
            found[key] = None
            continue
        value = reader.text(value_node, f"{what}.environment.{key}")
        if value_node.tag == "tag:yaml.org,2002:bool":
            value = value.lower()
        found[key] = Origin(key, value, reader.where(value_node), "environment")
    return found


def _words(reader: _Reader, node: Node, what: str) -> list[str]:
    """``command:``/``entrypoint:``: a list as it is, a string split as compose splits it (shell words)."""
    if isinstance(node, SequenceNode):
        return [reader.text(item, f"{what}[{i}]") for i, item in enumerate(node.value)]
    if isinstance(node, ScalarNode):
        text = reader.text(node, what)
        try:
            return shlex.split(text, posix=True)
        except ValueError as exc:
            raise reader.fail(node, f"{what}: {exc} in {text!r}; expected a command line with every quote closed, or "
                              "a list of arguments") from None
    raise reader.fail(node, f"{what}: expected a string or a list of arguments, got {_kind(node)}")


def _container_words(reader: _Reader, node: Node, what: str, repo: str, tag: str,
                     attr: Callable[[str], Node | None]) -> list[str] | None:
    """The process the container starts (``entrypoint`` + ``command``, or the engine image's own entrypoint); None
    when the image's entrypoint is not known offline and the file names none."""
    entry_node, command_node = attr("entrypoint"), attr("command")
    command = _words(reader, command_node, f"{what}.command") if command_node is not None else []
    if entry_node is not None:
        entrypoint = _words(reader, entry_node, f"{what}.entrypoint")
        words = [*entrypoint, *command]
    else:
        try:
            process = image_process(repo, tag, command)
        except NotServing as exc:
            raise reader.fail(command_node or node, f"{what}: {exc}; expected command: [\"--server\", ...], got "
                              f"{command[:1] or 'no command'}") from None
        if process is None:
            return None
        words = process
    if tuple(words[:3]) == _VLLM_API_SERVER or (tuple(words[:2]) == ("python", "-m") and words[2:3] == [_VLLM_API_SERVER[2]]):
        words = ["vllm", "serve", *words[3:]]  # the api_server takes vllm serve's options (the model as --model)
    return words


def _argv(reader: _Reader, node: Node, what: str, service: Service, repo: str, tag: str,
          attr: Callable[[str], Node | None]) -> tuple[tuple[str, ...], str]:
    entry_node, command_node = attr("entrypoint"), attr("command")
    where = reader.where(command_node or entry_node or node)
    found = _container_words(reader, node, what, repo, tag, attr)
    if found is None:
        raise reader.fail(node, f"{what}: fleetgate does not know the entrypoint of image {repo}:{tag}; expected "
                          f"entrypoint: naming {service.binary}, or a llama.cpp server/full image or vllm/vllm-openai")
    words = found
    if not words or posixpath.basename(words[0]) != service.binary:
        shown = " ".join(words[:3]) or "nothing"
        raise reader.fail(entry_node or command_node or node, f"{what}: the container runs {shown}; expected "
                          f"{service.binary} itself (a shell or a wrapper script in the image is not read)")
    return (service.binary, *words[1:]), where


def _port(reader: _Reader, text: str, node: Node, what: str) -> int:
    if "-" in text:
        low, _, high = text.partition("-")
        if low != high:
            raise reader.fail(node, f"{what}: the port range {text}; expected one port (a range publishes several)")
        text = low
    if not _DIGITS.fullmatch(text) or not 0 < int(text) < 65536:
        raise reader.fail(node, f"{what}: {text!r}; expected a port number 1-65535")
    return int(text)


def _published(reader: _Reader, text: str, node: Node, what: str) -> int | None:
    """The host port; none written (``""``) is an ephemeral one docker picks."""
    return None if text == "" else _port(reader, text, node, what)


def _ports(reader: _Reader, attr: Callable[[str], Node | None], what: str) -> tuple[tuple[PortMap, ...], bool]:
    mode = attr("network_mode")
    host_network = mode is not None and reader.text(mode, f"{what}.network_mode") == "host"
    node = attr("ports")
    if node is None:
        return (), host_network
    if not isinstance(node, SequenceNode):
        raise reader.fail(node, f"{what}.ports: expected a list, got {_kind(node)}")
    found: list[PortMap] = []
    for i, item in enumerate(node.value):
        label = f"{what}.ports[{i}]"
        if isinstance(item, MappingNode):
            def field_(key: str, item: Node = item, label: str = label) -> str | None:
                value = reader.get(item, key, label)
                return None if value is None or reader.null(value) else reader.text(value, f"{label}.{key}")

            target = field_("target")
            if target is None:
                raise reader.fail(item, f"{label}: no target; expected target: CONTAINER_PORT")
            target_port = _port(reader, target, item, f"{label}.target")
            published = field_("published")
            found.append(PortMap(target_port, _published(reader, published or "", item, f"{label}.published"),
                                 field_("host_ip"), field_("protocol") or "tcp", reader.where(item)))
            continue
        text = reader.text(item, label)
        spec, _, protocol = text.partition("/")
        host_ip = None
        if spec.startswith("["):
            close = spec.find("]:")
            if close < 0:
                raise reader.fail(item, f"{label}: {text!r}: the host address's '[' is never closed by ']:'; expected "
                                  "[IPV6]:HOST_PORT:CONTAINER_PORT")
            host_ip, spec = spec[1:close], spec[close + 2:]
        parts = spec.split(":")
        if len(parts) == 3:
            host_ip, published, target = parts
        elif len(parts) == 2:
            published, target = parts
        elif len(parts) == 1:
            published, target = "", parts[0]
        else:
            raise reader.fail(item, f"{label}: {text!r}; expected [HOST_IP:][HOST_PORT:]CONTAINER_PORT")
        target_port = _port(reader, target, item, label)
        found.append(PortMap(target_port, _published(reader, published, item, label), host_ip or None, protocol or "tcp",
                             reader.where(item)))
    return tuple(found), host_network


def _mounts(fleet: Fleet, reader: _Reader, node: Node | None, what: str,
            map_to_repo: Callable[[Fleet, str], Path | None]
            ) -> tuple[tuple[Mount, ...], tuple[OpaqueMount, ...], tuple[UnsetVolume, ...]]:
    if node is None:
        return (), (), ()
    if not isinstance(node, SequenceNode):
        raise reader.fail(node, f"{what}.volumes: expected a list, got {_kind(node)}")
    found: list[Mount] = []
    opaque: list[OpaqueMount] = []
    unset: list[UnsetVolume] = []
    for i, item in enumerate(node.value):
        before = len(reader.unset)
        mount, written, read = _mount(fleet, reader, item, f"{what}.volumes[{i}]")
        if len(reader.unset) > before:
            unset.append(UnsetVolume(written, tuple(dict.fromkeys(reader.unset[before:])), read, reader.where(item)))
        if isinstance(mount, Mount):
            found.append(mount)
        elif mount is not None:
            opaque.append(mount)
    return tuple(found), tuple(opaque), tuple(unset)


def _mount(fleet: Fleet, reader: _Reader, item: Node, label: str) -> tuple[Mount | OpaqueMount | None, str, str]:
    """One entry of ``volumes:``: its bind mount, or what else is mounted where no host path is known offline (a
    named or anonymous volume, a tmpfs, a source under ``~``), the entry's path as written and as compose reads it."""
    # A relative source is relative to the project directory of the file that wrote it (an extended file's own).
    base = reader.file(item).base.resolve().relative_to(fleet.root.resolve())
    host_dir = posixpath.join(fleet.deploy_root or str(fleet.root), base.as_posix()) if base.parts else (
        fleet.deploy_root or str(fleet.root))
    if isinstance(item, MappingNode):
        kind = reader.get(item, "type", label)
        source_node, target_node = reader.get(item, "source", label), reader.get(item, "target", label)
        if kind is not None and (type_ := reader.text(kind, f"{label}.type")) != "bind":
            if target_node is None:
                return None, "", ""
            named = reader.text(source_node, f"{label}.source") if source_node is not None else ""
            what = f"the named volume {named}" if type_ == "volume" and named else (
                "an anonymous volume" if type_ == "volume" else f"a {type_} mount")
            return OpaqueMount(reader.text(target_node, f"{label}.target"), what, reader.where(item)), "", ""
        if source_node is None or target_node is None:
            raise reader.fail(item, f"{label}: expected source: and target: (a bind mount)")
        source, target = reader.text(source_node, f"{label}.source"), reader.text(target_node, f"{label}.target")
        written = source_node.value if isinstance(source_node, ScalarNode) else ""
        read = source
    else:
        read = reader.text(item, label)
        written = item.value if isinstance(item, ScalarNode) else ""
        parts = read.split(":")
        if len(parts) < 2:
            return OpaqueMount(parts[0], "an anonymous volume", reader.where(item)), written, read
        source, target = parts[0], parts[1]
    if source.startswith("~"):
        # the home directory of whoever runs compose: not known offline
        return OpaqueMount(target, f"{source} (under the home directory of whoever runs compose)",
                           reader.where(item)), written, read
    if source.startswith("."):
        source = posixpath.normpath(posixpath.join(host_dir, source))
    elif not source:
        return None, written, read  # ':/models' (a variable no .env sets): no valid spec, nothing mounted
    elif not source.startswith("/"):
        return OpaqueMount(target, f"the named volume {source}", reader.where(item)), written, read
    return Mount(source, target, reader.where(item)), written, read


def _device_ids(reader: _Reader, node: Node, label: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    ids: list[int] = []
    unknown: list[str] = []
    for text, _ in reader.strings(node, label):
        for part in (p.strip() for p in text.split(",")):
            if _INDEX.fullmatch(part):
                ids.append(int(part))
            elif part:
                unknown.append(part)
    return tuple(ids), tuple(unknown)


def _render_nodes(reader: _Reader, devices: Node | None, what: str) -> Grant | None:
    """An AMD or Vulkan GPU passed as device nodes (``devices: [/dev/kfd, /dev/dri]``): ROCm opens ``/dev/kfd`` and
    the cards' render nodes, Vulkan the render nodes alone. Which card a single ``renderD12N`` node is depends on the
    host's DRM order, which no file says: every card is taken as granted (never a finding from a guessed index)."""
    if devices is None:
        return None
    nodes = [(text.split(":", 1)[0], item) for text, item in reader.strings(devices, f"{what}.devices")]
    render = [(source, item) for source, item in nodes
              if source.rstrip("/") == "/dev/dri" or source.startswith("/dev/dri/renderD")]
    if not render:
        return None
    kfd = any(source == "/dev/kfd" for source, _ in nodes)
    named = ", ".join(source for source, _ in render)
    return Grant(None, f"devices: {'/dev/kfd, ' if kfd else ''}{named} ({'ROCm' if kfd else 'Vulkan'}: every card "
                 "the render nodes expose)", reader.where(render[0][1]), nodes=tuple(source for source, _ in render))


def _gpus(reader: _Reader, attr: Callable[[str], Node | None], what: str,
          container: Mapping[str, Origin]) -> Grant | None:
    deploy = attr("deploy")
    requests: list[tuple[Node, str]] = []
    if deploy is not None:
        resources = reader.get(deploy, "resources", f"{what}.deploy")
        reservations = reader.get(resources, "reservations", f"{what}.deploy.resources") if resources else None
        devices = reader.get(reservations, "devices", f"{what}.deploy.resources.reservations") if reservations else None
        if devices is not None:
            if not isinstance(devices, SequenceNode):
                raise reader.fail(devices, f"{what}.deploy.resources.reservations.devices: expected a list, got "
                                  f"{_kind(devices)}")
            requests += [(item, f"{what}.deploy.resources.reservations.devices[{i}]")
                         for i, item in enumerate(devices.value)]
    gpus = attr("gpus")
    if gpus is not None:
        if isinstance(gpus, ScalarNode):
            if reader.text(gpus, f"{what}.gpus") != "all":
                raise reader.fail(gpus, f"{what}.gpus: expected all or a list of {{count, device_ids}}")
            return Grant(None, "gpus: all", reader.where(gpus))
        if not isinstance(gpus, SequenceNode):
            raise reader.fail(gpus, f"{what}.gpus: expected all or a list, got {_kind(gpus)}")
        requests += [(item, f"{what}.gpus[{i}]") for i, item in enumerate(gpus.value)]
    indices: list[int] = []
    unknown: list[str] = []
    every: Grant | None = None
    granted = False
    for item, label in requests:
        capabilities = reader.get(item, "capabilities", label)
        caps = [c for c, _ in reader.strings(capabilities, f"{label}.capabilities")] if capabilities is not None else []
        if capabilities is not None and "gpu" not in caps:
            continue  # another kind of device
        if capabilities is None and label.endswith("]") and ".deploy." in label:
            raise reader.fail(item, f"{label}: no capabilities; expected capabilities: [gpu] (compose requires them "
                              "for a device reservation)")
        granted = True
        count_node, ids_node = reader.get(item, "count", label), reader.get(item, "device_ids", label)
        if count_node is not None and ids_node is not None:
            raise reader.fail(item, f"{label}: both count and device_ids; expected one of them")
        if ids_node is not None:
            ids, bad = _device_ids(reader, ids_node, f"{label}.device_ids")
            indices += ids
            unknown += bad
        elif count_node is not None:
            count = reader.text(count_node, f"{label}.count")
            if count == "all":
                every = Grant(None, f"{label}.count: all", reader.where(count_node))
            elif _INDEX.fullmatch(count):
                if int(count) > MAX_CARDS:
                    raise reader.fail(count_node, f"{label}.count: {count}; expected the number of cards the container "
                                      f"gets (at most {MAX_CARDS}), or all")
                indices += [i for i in range(int(count)) if i not in indices]
            else:
                raise reader.fail(count_node, f"{label}.count: {count!r}; expected a number or all")
        else:
            every = Grant(None, f"{label}: neither count nor device_ids (every card)", reader.where(item))
    if every is not None:
        return every
    if granted:
        where = reader.where(requests[0][0])
        return Grant(tuple(dict.fromkeys(indices)), requests[0][1], where, tuple(unknown))
    amd = _render_nodes(reader, attr("devices"), what)
    if amd is not None:
        return amd
    runtime = attr("runtime")
    if runtime is not None and reader.text(runtime, f"{what}.runtime") == "nvidia":
        visible = container.get("NVIDIA_VISIBLE_DEVICES")
        if visible is None or visible.value in ("all", ""):
            return Grant(None, "runtime: nvidia (the CUDA images' NVIDIA_VISIBLE_DEVICES=all)", reader.where(runtime))
        if visible.value in ("none", "void"):
            return None
        named = [p.strip() for p in visible.value.split(",") if p.strip()]
        return Grant(tuple(int(p) for p in named if _INDEX.fullmatch(p)),
                     f"runtime: nvidia, NVIDIA_VISIBLE_DEVICES={visible.value}", visible.where,
                     tuple(p for p in named if not _INDEX.fullmatch(p)))
    return None
