"""llama.cpp's router presets (``llama-server --models-preset FILE.ini``) read the way llama-server reads them.

The reading follows llama.cpp's ``common/preset.cpp`` (``parse_ini_from_file``, ``common_preset_context::
load_from_ini``, ``common_preset::to_args``) and ``tools/server/server-models.cpp`` (``load_models``,
``unset_reserved_args``, ``server_model_meta::update_args``); the option names are build 11434's (or the
service's ``engine_build``), from fleetgate's table of ``common/arg.cpp``.

The file, as llama.cpp's own INI grammar reads it (not Python's configparser, whose rules differ: it takes ``:``
as a delimiter, folds key case, joins indented continuation lines and refuses a repeated key or section):

- a line is a header ``[NAME]`` (``[`` in the first column; the name is everything up to ``]``), ``KEY = VALUE``
  (the key in the first column, ``[a-zA-Z_][a-zA-Z0-9_.-]*``), a comment (``;`` or ``#`` after blanks) or blank;
  any other line makes llama-server refuse the whole file;
- a value runs to the first ``;`` or ``#`` or the end of the line, trailing blanks dropped; quotes are kept as
  characters (nothing is unquoted or unescaped);
- a key given twice in a section keeps its last value; a header given twice starts its section afresh;
  keys before the first header belong to a model named ``default``;
- ``[*]`` is the global section, under every model's own keys; ``version`` is skipped. A file that starts with
  ``version = 1`` and nothing else before its first header gives llama.cpp a ``default`` preset with no option: it
  names nothing to load, so it is not read as a model (co-residence would otherwise ask to declare a phantom).

A key is a llama-server option: any of its names without the leading dashes (``c``, ``ctx-size``,
``no-jinja``) or its environment name (``LLAMA_ARG_CTX_SIZE``). A key no option has makes llama-server refuse the
file (``option 'KEY' not recognized in preset 'NAME'``). ``load-on-startup`` and ``stop-timeout`` are the
router's own and never reach a child.

What the router starts for a model: the program itself, then each option once, as its last (long) name; a switch
whose value is false (``off``, ``disabled``, ``false``, ``0``) becomes its negative name, or is dropped when it
has none; a negative key (``no-mmap = true``) is the positive option with the value reversed. The router drops
``--ssl-key-file``, ``--ssl-cert-file``, ``--api-key``, ``--models-dir``, ``--models-max``, ``--models-preset`` and
``--models-autoload`` from it and sets ``--host 127.0.0.1``, ``--port`` (a free port it picks when it loads the
model: written 0 here) and ``--alias NAME``. The router's own command line (merged over every model, highest
precedence) is not read: fleet.toml does not hold it.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgate.engines.llama_builds import load_builds
from fleetgate.engines.llamacpp import llama_table_build
from fleetgate.errors import InputError, read_text

if TYPE_CHECKING:
    from fleetgate.engines.llama_builds import Variant
    from fleetgate.fleet import Fleet, Service

__all__ = [
    "DEFAULT_MODELS_MAX",
    "GLOBAL",
    "MAX_RESIDENCIES",
    "Preset",
    "PresetSection",
    "child_argv",
    "child_start",
    "load_on_startup",
    "read_preset",
    "router_models_max",
]

GLOBAL = "*"
DEFAULT_SECTION = "default"
DEFAULT_MODELS_MAX = 4
"""``common_params::models_max`` (common/common.h): the models the router keeps loaded at once; 0 or less: no limit."""
MAX_RESIDENCIES = 20_000
"""The most sets of co-loaded models ``Preset.residencies`` lists: any 4 of 200 models are 64 million sets."""
_STARTUP_NAMED = 8
"""The models named in the load-on-startup refusal before the rest are counted."""
CHILD_HOST = "127.0.0.1"
CHILD_PORT = "0"
PRESET_ONLY = frozenset({"load-on-startup", "stop-timeout"})
RESERVED = frozenset({"--ssl-key-file", "--ssl-cert-file", "--api-key", "--models-dir", "--models-max",
                      "--models-preset", "--models-autoload", "--no-models-autoload"})
SET_BY_ROUTER = ("--host", "--port", "--alias")
FALSEY = ("off", "disabled", "false", "0")
TRUTHY = ("on", "enabled", "true", "1")

_HEADER = re.compile(r"^\[[ \t]*(?P<name>[^\]]+)\](?P<rest>.*)$")
_KEY = re.compile(r"^(?P<key>[a-zA-Z_][a-zA-Z0-9_.-]*)[ \t]*=[ \t]*(?P<rest>.*)$")
_END = re.compile(r"^[ \t]*([;#].*)?$")


@dataclass(frozen=True)
class PresetSection:
    name: str
    line: int
    """The line of its header (its first key's for ``default``); the last header when it is given twice."""
    keys: Mapping[str, tuple[str, int]]
    """Each key's value and line, in file order; a repeated key keeps its last value (at its first place)."""


@dataclass(frozen=True)
class Preset:
    path: Path
    sections: Mapping[str, PresetSection]
    """Every section but ``[*]``, by name: the models the file defines."""
    global_section: PresetSection | None

    def where(self, model: str | None = None) -> str:
        section = self.sections.get(model) if model is not None else None
        return f"{self.path}:{section.line}" if section is not None else str(self.path)

    def residency_count(self, models_max: int) -> int:
        """How many sets of models ``residencies`` lists, counted without listing them; ``MAX_RESIDENCIES + 1``
        stands for any count past the bound (the exact one can take seconds: any half of a million models)."""
        total = len(self.sections)
        if not total:
            return 0
        if models_max <= 0 or models_max >= total:
            return 1
        count = 1
        for i in range(1, min(models_max, total - models_max) + 1):
            count = count * (total - i + 1) // i  # C(total, i): exact at each step, and growing
            if count > MAX_RESIDENCIES:
                return MAX_RESIDENCIES + 1
        return count

    def residencies(self, models_max: int) -> tuple[tuple[frozenset[str], ...], ...]:
        """How the router keeps models loaded together: any ``models_max`` of them (it unloads the least recently
        used one beyond that); all of them when ``models_max`` is 0 or less, or not below their count.

        At most ``MAX_RESIDENCIES`` sets are listed (``residency_count`` says beforehand): past it, ValueError."""
        names = sorted(self.sections)
        count = self.residency_count(models_max)
        if count > MAX_RESIDENCIES:
            raise ValueError(f"{self.path}: any {models_max} of {len(names)} models are more than {MAX_RESIDENCIES} "
                             "sets; expected residency_count to be asked first")
        if not names:
            return ()
        if count == 1:
            return ((frozenset(names),),)
        return (tuple(frozenset(c) for c in itertools.combinations(names, models_max)),)


def read_preset(path: Path) -> Preset:
    """A preset file; a line llama-server's INI grammar does not take is one ``InputError`` naming it."""
    text = read_text(path, "the router preset")
    sections: dict[str, dict[str, tuple[str, int]]] = {}
    lines: dict[str, int] = {}
    headed: set[str] = set()
    current = DEFAULT_SECTION
    for number, line in enumerate(re.split(r"\r\n|\n|\r", text), start=1):
        header = _HEADER.match(line)
        if header is not None and _END.match(header.group("rest")):
            current = header.group("name")
            headed.add(current)
            sections[current] = {}  # a header given again starts its section afresh, as llama.cpp's map does
            lines[current] = number
            continue
        pair = _KEY.match(line)
        if pair is not None:
            value = re.split(r"[;#]", pair.group("rest"), maxsplit=1)[0].rstrip(" \t")
            section = sections.setdefault(current, {})
            lines.setdefault(current, number)
            section[pair.group("key")] = (value, number)
            continue
        if _END.match(line):
            continue
        raise InputError(path, number, f"{line.strip()[:60]!r} is neither [SECTION], KEY = VALUE, a ; or # comment nor "
                         "blank; expected llama.cpp's preset INI (llama-server refuses the whole file: \"failed to "
                         "parse server config file\"; a key starts in the first column)")
    if DEFAULT_SECTION not in headed and set(sections.get(DEFAULT_SECTION, {})) <= {"version"}:
        sections.pop(DEFAULT_SECTION, None)
    found = {name: PresetSection(name, lines[name], keys) for name, keys in sections.items()}
    return Preset(path=path, sections={n: s for n, s in found.items() if n != GLOBAL},
                  global_section=found.get(GLOBAL))


def _strip(name: str) -> str:
    return name.lstrip("-")


@functools.cache  # once per build: every model of a preset is checked against the same table
def _options(build: int) -> tuple[dict[str, tuple[int, Variant]], tuple[Variant, ...]]:
    builds = load_builds()
    resolved = builds.resolve(build)
    assert resolved is not None
    variants = builds.at(resolved.sample)
    keys: dict[str, tuple[int, Variant]] = {}
    for i, variant in enumerate(variants):
        for name in variant.all_names:
            keys.setdefault(_strip(name), (i, variant))
        if variant.env:
            keys.setdefault(variant.env, (i, variant))
    return keys, variants


def child_argv(preset: Preset, model: str, program: str, build: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """The argv the router starts ``model`` with, and where each option of it was set (``FILE:LINE``)."""
    keys, variants = _options(build)
    chosen: dict[int, tuple[str, str]] = {}  # variant index -> (value, where), global first, the model's own over it
    for section in (preset.global_section, preset.sections[model]):
        if section is None:
            continue
        for key, (value, line) in section.keys.items():
            if key == "version" or key in PRESET_ONLY:
                continue
            if key not in keys:
                close = difflib.get_close_matches(key, [k for k in keys if not k.startswith("LLAMA_")], n=3)
                raise InputError(preset.path, line, f"option {key!r} not recognized in preset {section.name!r} "
                                 f"(llama-server build {build} refuses the file); expected a llama-server option "
                                 "without its dashes or its LLAMA_ARG_ name"
                                 + (f" (did you mean {', '.join(close)}?)" if close else ""))
            index, variant = keys[key]
            if variant.value == "string2":
                raise InputError(preset.path, line, f"{key} takes two values, which a preset cannot give (llama-server "
                                 "refuses: \"has two values, which is not supported yet\"); expected the option on the "
                                 "router's command line")
            if variant.neg and key in {_strip(n) for n in variant.neg}:
                value = "false" if value in TRUTHY else "true"
            chosen[index] = (value, f"{preset.path}:{line}")
    argv: list[str] = [program]
    where: dict[str, str] = {}
    for index in sorted(chosen):
        variant = variants[index]
        value, at = chosen[index]
        names = variant.names or variant.neg
        if set(variant.all_names) & RESERVED or names[-1] in SET_BY_ROUTER:
            continue
        if variant.takes_value:
            argv += [names[-1], value]
        elif value in FALSEY:
            if not variant.neg:
                continue
            argv.append(variant.neg[-1])
        else:
            argv.append(names[-1])
        where[argv[-1] if not variant.takes_value else argv[-2]] = at
    argv += ["--host", CHILD_HOST, "--port", CHILD_PORT, "--alias", model]
    return tuple(argv), where


def router_models_max(fleet: Fleet, service: Service) -> int:
    """The ``--models-max`` of the router that reads ``service``'s preset: what a service of that preset declares
    (``models_max``; fleet.toml refuses two values for one preset), else llama-server's default."""
    declared = {s.models_max for s in fleet.services.values()
                if s.models_preset == service.models_preset and s.models_max is not None}
    return declared.pop() if declared else DEFAULT_MODELS_MAX


def load_on_startup(preset: Preset) -> list[tuple[str, int]]:
    """The models the router loads when it starts (``load-on-startup`` true in their section or in ``[*]``), each
    with the line that says so."""
    found = []
    for name in sorted(preset.sections):
        own = preset.sections[name].keys.get("load-on-startup")
        given = own or (preset.global_section.keys.get("load-on-startup") if preset.global_section else None)
        if given is not None and given[0] in TRUTHY:
            found.append((name, given[1]))
    return found


def _check_startup(preset: Preset, models_max: int) -> None:
    startup = load_on_startup(preset)
    if models_max > 0 and len(startup) > models_max:
        named = ", ".join(n for n, _ in startup[:_STARTUP_NAMED])
        more = f" and {len(startup) - _STARTUP_NAMED} more" if len(startup) > _STARTUP_NAMED else ""
        raise InputError(preset.path, startup[models_max][1], f"{len(startup)} models load on startup "
                         f"({named}{more}) and the router keeps {models_max} (--models-max): "
                         "llama-server refuses to start (\"number of models to load on startup exceeds models_max\"); "
                         "expected at most models_max sections with load-on-startup = true")


def child_start(fleet: Fleet, service: Service) -> tuple[Preset, str, tuple[str, ...]]:
    """The preset, the model's name and the child llama-server's argv of a fleet service that is a model of a router
    preset, refused in one line where llama-server would refuse the file (a bad key of any model, more models loaded
    on startup than ``--models-max``)."""
    assert service.models_preset is not None
    preset = read_preset(service.models_preset)
    name = service.preset_model or service.name
    if name not in preset.sections:
        key = "preset_model" if service.preset_model != service.name else "models_preset"
        raise InputError(fleet.path, fleet.key_index.line(("services", service.name, key)) if fleet.key_index else service.line,
                         f"services.{service.name}.{key}: {service.models_preset.name} has no model {name!r}; expected "
                         f"one of: {', '.join(sorted(preset.sections)) or '(none: the file has no [NAME] section)'} "
                         "(preset_model = \"NAME\")")
    if service.engine != "llama.cpp":
        raise InputError(fleet.path, service.line, f"services.{service.name}: a router preset starts llama-server; "
                         f"expected engine = \"llama.cpp\", not {service.engine!r}")
    build = llama_table_build(service)
    for other in sorted(preset.sections):  # llama-server refuses the whole file for one bad key of any model
        child_argv(preset, other, service.binary, build)
    _check_startup(preset, router_models_max(fleet, service))
    argv, _ = child_argv(preset, name, service.binary, build)
    return preset, name, argv
