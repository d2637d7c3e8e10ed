"""llama-swap's ``config.yaml`` read the way llama-swap reads it (mostlygeek/llama-swap, proxy/config/config.go,
``LoadConfigFromReader``; model_config.go; matrix.go, matrix_dsl.go). One module for one reader: the steps below are
llama-swap's own load, in its order, each needing what the one before it made (its split would follow render's,
which is another change's).

What llama-swap does with a model, in order, and what is done here:

- ``macros`` (global, then the model's own ``macros``, which override a global of the same name) and the built-in
  ``${MODEL_ID}`` are substituted into ``cmd``, ``cmdStop``, ``proxy`` and ``checkEndpoint``, last macro first: a
  macro may use a macro defined before it, never one after it. A macro's value is a YAML scalar written as Go's
  ``%v`` writes it (``4096``, ``0.7``, ``true``). Names are ``[a-zA-Z0-9_-]+``, under 64 characters; ``PORT`` and
  ``MODEL_ID`` are reserved; a macro that names itself is refused.
- ``${PORT}``: the models are taken in sorted order of their ids; each whose ``cmd`` (after the macros) holds
  ``${PORT}`` gets the next port from ``startPort`` (default 5800). A model without it in ``cmd`` gets no port, and
  then its ``proxy`` (default ``http://localhost:${PORT}``) may not use it: llama-swap refuses the config.
- Any ``${NAME}`` left in those fields is an unknown macro: llama-swap refuses to start (``${PID}`` in ``cmdStop`` is
  filled at stop time).
- ``cmd`` becomes the argv as ``SanitizeCommand`` does it: lines whose first non-blank character is ``#`` are
  dropped, a line ending in ``\\`` is joined to the next, and the rest is split into words by POSIX shell quoting
  rules (quotes and backslashes; no variables, globs, pipes or redirections: it is not run by a shell).
- ``env``: ``KEY=VALUE`` strings added to llama-swap's own environment for the engine; not macro-substituted.
- ``groups`` (``swap`` default true, ``exclusive`` default true, ``persistent`` default false, ``members``); a model
  in no group is in the ``(default)`` group (swap, exclusive). A ``matrix`` (``vars``, ``sets`` of ``&`` / ``|`` /
  ``()`` / ``+set`` expressions) replaces groups: a config with both is refused.

``${env.NAME}`` (llama-swap's own environment, substituted in the YAML text before it is parsed) is not known offline
and is left as written. Every other key (``healthCheckTimeout``, ``logLevel``, ``apiKeys``, ``peers``, ``hooks``,
``filters``, ``metadata``, ``timeouts``, ``name``, ``description``, ``unlisted``, ``concurrencyLimit``,
``sendLoadingState``, ``matrix.evict_costs``) is ignored.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import yaml

from fleetgate.errors import InputError, read_text
from fleetgate.sources.ansible import render_template
from fleetgate.sources.yaml_bounded import compose_yaml

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet, Service

__all__ = ["DEFAULT_GROUP", "MAX_EXPANDED", "SwapConfig", "SwapGroup", "SwapModel", "model_start", "read_config",
           "split_command"]

DEFAULT_START_PORT = 5800
DEFAULT_PROXY = "http://localhost:${PORT}"
DEFAULT_GROUP = "(default)"
_MACRO_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_MACRO_USE = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_DSL_IDENT = re.compile(r"[\w\-./:]+")
_MAX_SETS = 1000
"""llama-swap's ``maxDSLExpansions``: the combinations one expression, and all the sets together, may expand to."""
_MAX_NESTING = 100
"""The deepest ``(`` of a matrix set read (llama-swap has no bound; no real set nests more than a few)."""
_MAX_MERGES = 100
"""The longest chain of ``<<`` merges (a mapping merging one that merges another ...) read: each is a frame here."""
MAX_EXPANDED = 2 << 20
"""The most characters a field may grow to once its macros are in: Linux's ARG_MAX (2 MiB) bounds any argv."""


@dataclass(frozen=True)
class SwapModel:
    name: str
    argv: tuple[str, ...]
    """``cmd`` as llama-swap executes it: ``argv[0]`` is the program as written."""
    env: Mapping[str, tuple[str, int]]
    """``env``: each variable's value and the line it is set on."""
    port: int | None
    """The ``${PORT}`` llama-swap assigns the model; None when ``cmd`` does not use it."""
    proxy: str
    """Where llama-swap forwards the model's requests (after macros and ``${PORT}``)."""
    aliases: tuple[str, ...]
    use_model_name: str | None
    check_endpoint: str
    ttl: int | None
    cmd_stop: str
    line: int
    """The line of ``models.NAME``."""
    cmd_line: int

    @property
    def proxy_port(self) -> int | None:
        """The port of ``proxy``, or that of its scheme when it names none."""
        try:
            parts = urlsplit(self.proxy)
            return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            return None


@dataclass(frozen=True)
class SwapGroup:
    name: str
    swap: bool
    """Only one member runs at a time (``swap: false``: all of them can)."""
    exclusive: bool
    """Loading a member unloads every other group that is not persistent."""
    persistent: bool
    """Other groups never unload it."""
    members: tuple[str, ...]
    line: int | None


@dataclass(frozen=True)
class SwapConfig:
    path: Path
    start_port: int
    models: Mapping[str, SwapModel]
    groups: tuple[SwapGroup, ...] = ()
    """Every group, the ``(default)`` one included; empty when the config has a matrix."""
    matrix: tuple[frozenset[str], ...] | None = None
    """The matrix's expanded sets (real model ids); None without a matrix."""

    def where(self, model: str | None = None) -> str:
        line = self.models[model].line if model is not None and model in self.models else None
        return f"{self.path}:{line}" if line else str(self.path)

    def residencies(self) -> tuple[tuple[frozenset[str], ...], ...]:
        """How models come to be loaded together: a choice of one alternative from each tuple.

        With groups: each persistent or non-exclusive group is always a tuple of its own (its members one at a
        time, or all together when ``swap: false``; or none); the groups that are exclusive and not persistent are
        one tuple between them, since loading one unloads the others. With a matrix: one tuple of its sets,
        and each model in no set alone.
        """
        if self.matrix is not None:
            placed = set().union(*self.matrix) if self.matrix else set()
            alone = [frozenset({m}) for m in sorted(self.models) if m not in placed]
            return ((*self.matrix, *alone),)
        independent: list[tuple[frozenset[str], ...]] = []
        exclusive: list[frozenset[str]] = []
        for group in self.groups:
            options = ((frozenset(group.members),) if not group.swap
                       else tuple(frozenset({m}) for m in group.members))
            if group.persistent or not group.exclusive:
                independent.append(options)
            else:
                exclusive += options
        return (*independent, *((tuple(exclusive),) if exclusive else ()))


def read_config(path: Path, repository: Path | None = None, ansible_vars: Sequence[Path] = ()) -> SwapConfig:
    """A llama-swap config; every problem llama-swap would refuse to start on is one ``InputError`` line. A ``.j2``
    file is an Ansible role's template of it, rendered first (``fleetgate.sources.ansible``)."""
    if path.suffix == ".j2":
        text = render_template(path, repository if repository is not None else path.parent, ansible_vars)
    else:
        text = read_text(path, "the llama-swap config")
    root = compose_yaml(path, text, "llama-swap's config.yaml")
    if not isinstance(root, yaml.MappingNode):
        raise InputError(path, _line(root), "expected a mapping with a models: section (llama-swap's config.yaml)")
    top = _mapping(path, root, "the config")
    start_port = DEFAULT_START_PORT
    if "startPort" in top:
        value = _scalar(path, top["startPort"], "startPort")
        number = _go_int(value.replace("_", ""))
        if number is None or not 1 <= number <= 65535:
            raise InputError(path, _line(top["startPort"]), f"startPort: {value[:40]!r}; expected a port number from 1 "
                             "to 65535")
        start_port = number
    macros = _macros(path, top.get("macros"), "macros")
    models_node = top.get("models")
    if models_node is None:
        raise InputError(path, None, "no models: section; expected models: NAME: cmd: ...")
    raw_models = _mapping(path, models_node, "models")

    aliases: dict[str, str] = {}
    models: dict[str, SwapModel] = {}
    next_port = start_port
    key_lines = _key_lines(models_node)
    for name in sorted(raw_models):
        node = raw_models[name]
        model, uses_port = _model(path, name, node, macros, next_port, aliases, key_lines[name])
        next_port += uses_port
        models[name] = model

    groups: list[SwapGroup] = []
    matrix = None
    if "matrix" in top and "groups" in top:
        raise InputError(path, _line(top["matrix"]), "both matrix: and groups:; expected one of them (llama-swap "
                         "refuses a config with both)")
    if "matrix" in top:
        matrix = _matrix(path, top["matrix"], models)
    else:
        groups = _groups(path, top.get("groups"), models)
    return SwapConfig(path=path, start_port=start_port, models=models, groups=tuple(groups), matrix=matrix)


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


_MERGED: weakref.WeakKeyDictionary[yaml.Node, dict[str, yaml.Node]] = weakref.WeakKeyDictionary()
"""Each mapping's keys once read: a merge source named by many ``<<`` (of sources named by many) is read once, not
once per path to it."""


def _mapping(path: Path, node: yaml.Node, what: str, merging: tuple[yaml.Node, ...] = ()) -> dict[str, yaml.Node]:
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise InputError(path, _line(node), f"{what}: expected a mapping")
    if node in _MERGED:
        return _MERGED[node]
    found: dict[str, yaml.Node] = {}
    merged: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "<<" and key.style is None:
            # a YAML merge key (`<<: *defaults`), as yaml.v3 reads it: the keys written here win
            for source in value.value if isinstance(value, yaml.SequenceNode) else [value]:
                if len(merging) >= _MAX_MERGES:
                    raise InputError(path, _line(key), f"{what}: <<: merges nested more than {_MAX_MERGES} deep; "
                                     "expected a shallower chain of merged mappings")
                if any(source is outer for outer in (*merging, node)):
                    raise InputError(path, _line(key), f"{what}: <<: merges a mapping into itself; expected a merge "
                                     "of another mapping (llama-swap refuses: \"anchor value contains itself\")")
                for name, item in _mapping(path, source, what, (*merging, node)).items():
                    merged.setdefault(name, item)
            continue
        name = _scalar(path, key, f"a key of {what}")
        if name in found:
            raise InputError(path, _line(key), f"{what}: {name!r} is given twice; expected each key once (llama-swap "
                             "refuses a mapping key defined twice)")
        found[name] = value
    _MERGED[node] = {**merged, **found}
    return _MERGED[node]


def _key_lines(node: yaml.Node | None) -> dict[str, int]:
    """The line of each key of a mapping (where a model or group is named)."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(key.value): key.start_mark.line + 1 for key, _ in node.value if isinstance(key, yaml.ScalarNode)}


def _scalar(path: Path, node: yaml.Node, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        kind = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
        raise InputError(path, _line(node), f"{what}: expected a string, got a {kind}")
    value: str = node.value
    return value


def _flag(path: Path, node: yaml.Node | None, what: str, default: bool) -> bool:
    if node is None:
        return default
    value = _scalar(path, node, what)
    if value in ("true", "True", "TRUE"):
        return True
    if value in ("false", "False", "FALSE"):
        return False
    raise InputError(path, _line(node), f"{what}: {value!r}; expected true or false")


def _strings(path: Path, node: yaml.Node | None, what: str) -> list[tuple[str, int | None]]:
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise InputError(path, _line(node), f"{what}: expected a list")
    return [(_scalar(path, item, f"{what}[{i}]"), _line(item)) for i, item in enumerate(node.value)]


def _go_value(node: yaml.ScalarNode) -> str:
    """A macro's value as llama-swap writes it into a command: Go's ``%v`` of what yaml.v3 decodes the scalar to
    (resolve.go, ``resolve``): an int (any base ``strconv.ParseInt``/``ParseUint`` take with base 0, ``_`` dropped,
    64 bits), else a float that ``strconv.ParseFloat`` takes without a range error, else a bool or ``.inf``/``.nan``,
    else the text as written (``1e999`` overflows a float64, so yaml.v3 keeps it a string)."""
    value: str = node.value
    if node.style is not None:
        return value  # quoted or block: a string
    if value in _GO_KEYWORDS:
        return _GO_KEYWORDS[value]
    if value[:1] in "+-0123456789":
        plain = value.replace("_", "")
        number = _go_int(plain)
        if number is not None:
            return str(number)
        if _FLOAT.match(plain):
            parsed = float(plain)
            if math.isfinite(parsed):
                return _go_float(parsed)
    elif value[:1] == "." and _FLOAT.match(value):
        parsed = float(value)
        if math.isfinite(parsed):
            return _go_float(parsed)
    return value


_GO_KEYWORDS = {**{word: word.lower() for word in ("true", "True", "TRUE", "false", "False", "FALSE")},
                **{word: "+Inf" for word in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
                **{word: "-Inf" for word in ("-.inf", "-.Inf", "-.INF")},
                **{word: "NaN" for word in (".nan", ".NaN", ".NAN")}}
"""yaml.v3's ``resolveMap`` words (not nulls: a null macro is refused before), as ``%v`` writes what they decode to."""
_GO_DIGITS = "0123456789abcdef"


def _go_int(plain: str) -> int | None:
    """``strconv.ParseInt(plain, 0, 64)``, else ``ParseUint(plain, 0, 64)`` (no sign): ``0x``/``0o``/``0b`` or a
    leading ``0`` (octal) picks the base; None when neither takes it."""
    sign = plain[:1] if plain[:1] in "+-" else ""
    digits = plain[len(sign):]
    if not digits:
        return None
    base = 10
    if digits[0] == "0":
        prefix = digits[1:2].lower()
        if len(digits) >= 3 and prefix in ("b", "o", "x"):
            base, digits = {"b": 2, "o": 8, "x": 16}[prefix], digits[2:]
        else:
            base, digits = 8, digits[1:] or "0"
    # checked here, not by int(), which takes a second prefix, blanks and digits past any 64-bit number
    if len(digits) > 64 or not set(digits.lower()) <= set(_GO_DIGITS[:base]):
        return None
    number = int(digits, base)
    if sign == "-":
        return -number if number <= 1 << 63 else None
    if number < 1 << 63 or (not sign and number < 1 << 64):
        return number
    return None


def _go_float(number: float) -> str:
    """``%v`` of a float64 (strconv's ``'g'`` with the shortest digits): exponent form when the decimal exponent
    is below -4 or 6 and over (``1e+06``, ``1e-05``), else plain (``0.7``, ``4096``, ``1`` for ``1.0``)."""
    if number == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    if not isinstance(exponent, int):  # inf or nan: %v's own words
        return "NaN" if math.isnan(number) else ("-Inf" if number < 0 else "+Inf")
    text = "".join(map(str, digits))
    point = len(text) + exponent  # the decimal exponent of the first digit, plus one
    x = point - 1
    if x < -4 or x >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{'-' if sign else ''}{mantissa}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if point <= 0:
        body = "0." + "0" * -point + text
    elif point >= len(text):
        body = text + "0" * (point - len(text))
    else:
        body = text[:point] + "." + text[point:]
    return ("-" if sign else "") + body


def _macros(path: Path, node: yaml.Node | None, what: str) -> list[tuple[str, str]]:
    if node is None:
        return []
    if not isinstance(node, yaml.MappingNode):
        raise InputError(path, _line(node), f"{what}: expected a mapping of NAME: value")
    found: list[tuple[str, str]] = []
    for key, value in node.value:
        name = _scalar(path, key, f"a macro name of {what}")
        if len(name) >= 64 or not _MACRO_NAME.match(name):
            raise InputError(path, _line(key), f"{what}.{name}: expected a macro name of [a-zA-Z0-9_-], under 64 characters")
        if name in ("PORT", "MODEL_ID"):
            raise InputError(path, _line(key), f"{what}.{name}: a reserved name; expected another name (llama-swap sets "
                             "${PORT} and ${MODEL_ID} itself)")
        if not isinstance(value, yaml.ScalarNode) or value.tag.endswith(":null"):
            raise InputError(path, _line(value), f"{what}.{name}: expected a scalar value (a string, number or bool)")
        text = _go_value(value)
        if f"${{{name}}}" in text:
            raise InputError(path, _line(value), f"{what}.{name}: the macro uses itself; expected a value that does not "
                             f"name ${{{name}}}")
        if any(existing == name for existing, _ in found):
            raise InputError(path, _line(key), f"{what}: {name!r} is given twice; expected each macro once")
        found.append((name, text))
    return found


def _substitute(text: str, macros: list[tuple[str, str]], fail: Callable[[str], InputError]) -> str:
    """Each macro in turn, last defined first, as llama-swap does; a macro may repeat an earlier one, so a chain of
    macros doubles the text at each step: past ``MAX_EXPANDED`` the field is refused before it is built."""
    for name, value in reversed(macros):
        use = f"${{{name}}}"
        count = text.count(use)
        if count and len(text) + count * (len(value) - len(use)) > MAX_EXPANDED:
            raise fail(f"${{{name}}} makes it {len(text) + count * (len(value) - len(use))} characters, over the "
                       f"{MAX_EXPANDED} an argv can hold (the kernel's ARG_MAX); expected macros that expand to a "
                       "command that can run")
        text = text.replace(use, value)
    return text


def _strip_comments(cmd: str) -> str:
    return "\n".join(line for line in cmd.split("\n") if not line.strip().startswith("#"))


def split_command(cmd: str) -> list[str]:
    """``SanitizeCommand``: comment lines out, ``\\``-continued lines joined, POSIX shell word splitting."""
    lines = []
    for line in cmd.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return shlex.split("\n".join(lines), posix=True)


def _model(path: Path, name: str, node: yaml.Node, global_macros: list[tuple[str, str]], next_port: int,
           aliases: dict[str, str], key_line: int) -> tuple[SwapModel, int]:
    what = f"models.{name}"
    fields = _mapping(path, node, what)
    if "cmd" not in fields or not _scalar(path, fields["cmd"], f"{what}.cmd").strip():
        raise InputError(path, _line(fields["cmd"]) if "cmd" in fields else key_line, f"{what}: no cmd; expected cmd: the command that "
                         "starts the model's server")
    macros = [("MODEL_ID", name), *global_macros]
    for own, value in _macros(path, fields.get("macros"), f"{what}.macros"):
        index = next((i for i, (existing, _) in enumerate(macros) if existing == own), None)
        if index is None:
            macros.append((own, value))
        else:
            macros[index] = (own, value)

    def text(key: str, default: str = "") -> str:
        raw = _scalar(path, fields[key], f"{what}.{key}") if key in fields else default
        return _substitute(_strip_comments(raw) if key in ("cmd", "cmdStop") else raw, macros,
                           lambda problem: InputError(path, _line(fields.get(key, node)), f"{what}.{key}: {problem}"))

    cmd, cmd_stop, proxy, check = text("cmd"), text("cmdStop"), text("proxy", DEFAULT_PROXY), text("checkEndpoint", "/health")
    port = None
    if "${PORT}" in cmd:
        port = next_port
        cmd, cmd_stop, proxy = (s.replace("${PORT}", str(port)) for s in (cmd, cmd_stop, proxy))
    elif "${PORT}" in proxy:
        raise InputError(path, _line(fields.get("proxy", fields["cmd"])),
                         f"{what}: proxy {proxy!r} uses ${{PORT}} but cmd does not; expected --port ${{PORT}} in cmd, "
                         "or proxy: set to the port cmd gives the server")
    for key, value in (("cmd", cmd), ("cmdStop", cmd_stop), ("proxy", proxy), ("checkEndpoint", check)):
        for match in _MACRO_USE.finditer(value):
            if match.group(1) == "PID" and key == "cmdStop":
                continue
            known = ", ".join(sorted({m for m, _ in macros} | {"PORT"}))
            raise InputError(path, _line(fields.get(key, node)),
                             f"{what}.{key}: unknown macro ${{{match.group(1)}}}; expected one of: {known} (a macro "
                             "may use only macros defined before it)")
    try:
        argv = split_command(cmd)
    except ValueError as exc:
        raise InputError(path, _line(fields["cmd"]), f"{what}.cmd: {exc}; expected a command with every quote "
                         "closed") from None
    if not argv:
        raise InputError(path, _line(fields["cmd"]), f"{what}.cmd: no command left once comments are removed; expected "
                         "the command that starts the model's server")
    env: dict[str, tuple[str, int]] = {}
    for i, (entry, line) in enumerate(_strings(path, fields.get("env"), f"{what}.env")):
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise InputError(path, line, f"{what}.env[{i}]: {entry!r}; expected KEY=VALUE")
        env[key] = (value, line or _line(node) or 0)
    names: list[str] = []
    alias_node = fields.get("aliases")
    if isinstance(alias_node, yaml.SequenceNode):
        for i, item in enumerate(alias_node.value):
            # an alias is a string, or (current llama-swap) {id, name, unlisted}
            alias = (_scalar(path, _mapping(path, item, f"{what}.aliases[{i}]").get("id", item), f"{what}.aliases[{i}].id")
                     if isinstance(item, yaml.MappingNode) else _scalar(path, item, f"{what}.aliases[{i}]"))
            if alias in aliases:
                raise InputError(path, _line(item), f"{what}.aliases: {alias!r} is already an alias of {aliases[alias]}; "
                                 "expected aliases unique across models")
            aliases[alias] = name
            names.append(alias)
    elif alias_node is not None:
        raise InputError(path, _line(alias_node), f"{what}.aliases: expected a list")
    ttl = None
    if "ttl" in fields:
        raw = _scalar(path, fields["ttl"], f"{what}.ttl")
        ttl = _go_int(raw.replace("_", ""))
        if ttl is None or ttl >= 1 << 63:
            raise InputError(path, _line(fields["ttl"]), f"{what}.ttl: {raw[:40]!r}; expected whole seconds (a 64-bit "
                             "integer)")
    use_model_name = text("useModelName") or None
    model = SwapModel(name=name, argv=tuple(argv), env=env, port=port, proxy=proxy, aliases=tuple(names),
                      use_model_name=use_model_name, check_endpoint=check, ttl=ttl, cmd_stop=cmd_stop,
                      line=key_line, cmd_line=_line(fields["cmd"]) or 0)
    return model, 1 if port is not None else 0


def _groups(path: Path, node: yaml.Node | None, models: Mapping[str, SwapModel]) -> list[SwapGroup]:
    groups: list[SwapGroup] = []
    member_of: dict[str, str] = {}
    raw = _mapping(path, node, "groups") if node is not None else {}
    key_lines = _key_lines(node)
    for name, group_node in raw.items():
        what = f"groups.{name}"
        fields = _mapping(path, group_node, what)
        members: list[str] = []
        for member, line in _strings(path, fields.get("members"), f"{what}.members"):
            if member not in models:
                raise InputError(path, line, f"{what}.members: {member!r} is not a model of this config; expected one of: "
                                 f"{', '.join(sorted(models))} (llama-swap starts no such member, and the model meant "
                                 "stays in the exclusive (default) group)")
            if member in members:
                raise InputError(path, line, f"{what}.members: {member!r} is listed twice; expected each member once")
            if member in member_of:
                raise InputError(path, line, f"{what}.members: {member!r} is already a member of group "
                                 f"{member_of[member]}; expected each model in one group")
            member_of[member] = name
            members.append(member)
        groups.append(SwapGroup(name=name, swap=_flag(path, fields.get("swap"), f"{what}.swap", True),
                                exclusive=_flag(path, fields.get("exclusive"), f"{what}.exclusive", True),
                                persistent=_flag(path, fields.get("persistent"), f"{what}.persistent", False),
                                members=tuple(members), line=key_lines.get(name)))
    rest = tuple(sorted(m for m in models if m not in member_of))
    if rest:
        groups.append(SwapGroup(name=DEFAULT_GROUP, swap=True, exclusive=True, persistent=False, members=rest, line=None))
    return groups


def _matrix(path: Path, node: yaml.Node, models: Mapping[str, SwapModel]) -> tuple[frozenset[str], ...]:
    fields = _mapping(path, node, "matrix")
    names: dict[str, str] = {}
    for short, value in (_mapping(path, fields["vars"], "matrix.vars") if "vars" in fields else {}).items():
        model = _scalar(path, value, f"matrix.vars.{short}")
        if model not in models:
            raise InputError(path, _line(value), f"matrix.vars.{short}: {model!r} is not a model of this config; "
                             f"expected one of: {', '.join(sorted(models))}")
        names[short] = model
    sets_node = fields.get("sets")
    sets = _mapping(path, sets_node, "matrix.sets") if sets_node is not None else {}
    if not sets:
        raise InputError(path, _line(node), "matrix: no sets; expected sets: NAME: \"a & b\"")
    dsl = {name: _Dsl(path, _line(set_node), f"matrix.sets.{name}", _scalar(path, set_node, f"matrix.sets.{name}"),
                      names, models, sets) for name, set_node in sets.items()}
    expanded: dict[str, list[frozenset[str]]] = {}
    total = 0
    for name in _set_order(path, sets, dsl):
        expanded[name] = dsl[name].parse(expanded)
        total += len(expanded[name])
        if total > _MAX_SETS:
            raise InputError(path, _line(sets[name]), f"matrix.sets.{name}: the sets expand to more than {_MAX_SETS} "
                             "combinations in all; expected fewer (llama-swap refuses: \"total expanded combinations "
                             "exceed limit\")")
    found: list[frozenset[str]] = []
    seen: set[frozenset[str]] = set()
    for name in sets:
        for combination in expanded[name]:
            if combination not in seen:
                seen.add(combination)
                found.append(combination)
    return tuple(found)


def _set_order(path: Path, sets: Mapping[str, yaml.Node], dsl: Mapping[str, _Dsl]) -> list[str]:
    """The sets in an order where each comes after the sets it names (``+SET``), found without recursion: a chain
    of sets may be as long as the file."""
    order: list[str] = []
    state: dict[str, bool] = {}  # False: being visited, True: done
    for root in sets:
        if root in state:
            continue
        state[root] = False
        stack = [(root, iter(dsl[root].refs()))]
        while stack:
            name, pending = stack[-1]
            ref = next(pending, None)
            if ref is None:
                stack.pop()
                state[name] = True
                order.append(name)
            elif ref in sets and ref not in state:
                state[ref] = False
                stack.append((ref, iter(dsl[ref].refs())))
            elif ref in sets and not state[ref]:
                trail = " -> ".join((*(n for n, _ in stack), ref))
                raise InputError(path, _line(sets[ref]), f"matrix.sets.{ref}: refers to itself through {trail}; "
                                 "expected sets without a cycle")
    return order


class _Dsl:
    """A matrix set: ``&`` (together) binds tighter than ``|`` (either); ``( )`` groups; ``+name`` another set."""

    def __init__(self, path: Path, line: int | None, what: str, text: str, names: Mapping[str, str],
                 models: Mapping[str, SwapModel], sets: Mapping[str, yaml.Node]) -> None:
        self.path, self.line, self.what = path, line, what
        self.names, self.models, self.sets = names, models, sets
        self.tokens = list(self._tokens(text))
        self.pos = 0
        self.depth = 0
        self.expanded: Mapping[str, list[frozenset[str]]] = {}

    def _fail(self, problem: str) -> InputError:
        return InputError(self.path, self.line, f"{self.what}: {problem}; expected models joined by & and |, "
                          "( ) and +SET")

    def _tokens(self, text: str) -> Iterator[str]:
        i = 0
        while i < len(text):
            if text[i].isspace():
                i += 1
            elif text[i] in "&|()":
                yield text[i]
                i += 1
            else:
                match = _DSL_IDENT.match(text, i + (text[i] == "+"))
                if match is None:
                    raise self._fail(f"unexpected {text[i]!r} at position {i}")
                yield text[i:match.end()]
                i = match.end()

    def refs(self) -> list[str]:
        """The sets this one names, in order, once each."""
        return list(dict.fromkeys(token[1:] for token in self.tokens if token.startswith("+")))

    def parse(self, expanded: Mapping[str, list[frozenset[str]]]) -> list[frozenset[str]]:
        """The set's combinations, each set it names already in ``expanded``; repeats kept, as llama-swap counts them."""
        self.expanded, self.pos, self.depth = expanded, 0, 0
        if not self.tokens:
            raise self._fail("an empty set")
        result = self._or()
        if self.pos != len(self.tokens):
            raise self._fail(f"unexpected {self.tokens[self.pos]!r}")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _or(self) -> list[frozenset[str]]:
        result = self._and()
        while self._peek() == "|":
            self.pos += 1
            result += self._and()
            if len(result) > _MAX_SETS:
                raise self._fail(f"more than {_MAX_SETS} combinations")
        return result

    def _and(self) -> list[frozenset[str]]:
        result = self._atom()
        while self._peek() == "&":
            self.pos += 1
            right = self._atom()
            if len(result) * len(right) > _MAX_SETS:
                raise self._fail(f"more than {_MAX_SETS} combinations")
            result = [a | b for a in result for b in right]
        return result

    def _atom(self) -> list[frozenset[str]]:
        token = self._peek()
        if token is None or token in "&|)":
            raise self._fail(f"expected a model, +SET or ( at {token or 'the end'!r}")
        self.pos += 1
        if token == "(":
            # each ( is three frames of this parser: bounded well inside Python's recursion limit
            self.depth += 1
            if self.depth > _MAX_NESTING:
                raise self._fail(f"( nested more than {_MAX_NESTING} deep")
            inner = self._or()
            if self._peek() != ")":
                raise self._fail("a ( without its )")
            self.pos += 1
            self.depth -= 1
            return inner
        if token.startswith("+"):
            if token[1:] not in self.sets:
                raise self._fail(f"+{token[1:]} names no set")
            return list(self.expanded[token[1:]])
        model = self.names.get(token, token if token in self.models else None)
        if model is None:
            raise self._fail(f"{token!r} is neither a var nor a model id")
        return [frozenset({model})]


def model_start(fleet: Fleet, service: Service) -> tuple[SwapConfig, SwapModel, str]:
    """The config, the model and the program of a fleet service that is a model of a llama-swap config; a model the
    config lacks, or a ``cmd`` that runs another program than the engine, is one line."""
    assert service.llama_swap is not None
    config = read_config(service.llama_swap, fleet.root, service.ansible_vars)
    name = service.llama_swap_model or service.name
    model = config.models.get(name)
    if model is None:
        key = "llama_swap_model" if service.llama_swap_model != service.name else "llama_swap"
        raise InputError(fleet.path, fleet.key_index.line(("services", service.name, key)) if fleet.key_index else service.line,
                         f"services.{service.name}.{key}: {service.llama_swap.name} has no model {name!r}; expected one "
                         f"of: {', '.join(sorted(config.models))} (llama_swap_model = \"NAME\")")
    program = posixpath.basename(model.argv[0])
    if program != service.binary:
        raise InputError(config.path, model.cmd_line,
                         f"models.{name}.cmd runs {program}; expected {service.binary} itself (fleet.toml's binary for "
                         f"{service.engine}); a container run from cmd is not read yet")
    return config, model, program
