"""The ``fleetgate`` command: init | render | fit | profile | incidents | checks | reference.

Subcommands live in their own modules (``SUBCOMMANDS``); each offers ``register(subparsers)`` and sets
``func`` on its parser. Errors about the fleet's files are printed as one line, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgate.errors import InputError, parse_toml, read_text
from fleetgate.fleet import Fleet
from fleetgate.manifest import load_fleet

if TYPE_CHECKING:
    from fleetgate.render.rendered import RenderedService

__all__ = ["argv_lines", "main", "parse_size", "resolve_fleet", "write_stdout"]

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("fleetgate.cli.fit", "the per-device memory ledger of a llama.cpp service or of a llama-server command line"),
    "profile": ("fleetgate.cli.profile",
                "write a model profile (TOML) from a GGUF header, local or by HTTP range, or from a config.json"),
    "reference": ("fleetgate.cli.reference",
                  "start the reference endpoint: run its serve script for real (llama-server + SmolLM2)"),
    "incidents": ("fleetgate.cli.incidents",
                  "the regression catalogue: every past incident, what catches it, how it is reproduced"),
    "checks": ("fleetgate.cli.checks", "every check fleetgate runs: seams (offline), live (the endpoint) and host checks"),
}
"""Command -> (the module whose ``register`` adds it, its one-line help). Only the command asked for is imported:
``fit`` alone brings the whole ledger, and ``fleetgate render`` should not pay for it."""
DEFAULT_FLEET_HINT = "fleet.toml in the current directory, else the fleetgate_fleet ini option of ./pyproject.toml"


_SIZE = re.compile(r"^\s*([0-9.]+)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {unit: 1 << shift for shift, prefix in ((10, "K"), (20, "M"), (30, "G"), (40, "T"))
          for unit in (prefix, prefix + "B", prefix + "IB")} | {"": 1, "B": 1}


def parse_size(text: str, where: str) -> int:
    """A size on the command line (bytes, 31.86GiB, 24G: K, M, G, T count in 1024s); ``where`` names the option."""
    match = _SIZE.match(text)
    unit = (match.group(2) or "").upper() if match else ""
    try:
        value = float(match.group(1)) if match else -1.0
    except ValueError:
        value = -1.0
    if not match or unit not in _UNITS or value <= 0:
        raise InputError(Path.cwd(), None, f"{where}: {text!r} is not a size; expected bytes, 31.86GiB, 24G")
    return int(value * _UNITS[unit])


def write_stdout(text: str) -> int:
    """Write to standard output; a reader that stops early (``| head -1``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # the interpreter flushes stdout again at exit: point it at /dev/null so that flush is quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def resolve_fleet(path: str | None, *, only: str | None = None) -> Fleet:
    """--fleet PATH, else ./fleet.toml, else the fleetgate_fleet ini option of ./pyproject.toml.

    A manifest with inf/nan in it is refused here (the seams report it as ``fleet-numbers-finite``).
    ``only``: the answer is about that one service; the others are not loaded (see ``load_fleet``).
    """
    fleet = _find_fleet(path, only)
    if fleet.non_finite:
        bad = fleet.non_finite[0]
        raise InputError(fleet.path, bad.line, f"{bad.key} = {bad.value}; expected a finite number")
    return fleet


def _find_fleet(path: str | None, only: str | None = None) -> Fleet:
    if path:
        return load_fleet(Path(path), only=only)
    if Path("fleet.toml").exists():
        return load_fleet(Path("fleet.toml"), only=only)
    pyproject = Path("pyproject.toml")
    if pyproject.exists():
        data = parse_toml(read_text(pyproject, "pyproject.toml"), pyproject)
        ini: object = data
        for key in ("tool", "pytest", "ini_options"):
            ini = ini.get(key, {}) if isinstance(ini, dict) else None
        # Anything but tables down to ini_options (`[tool] pytest = "x"`) holds no fleetgate_fleet, as pytest sees it.
        value = ini.get("fleetgate_fleet") if isinstance(ini, dict) else None
        if value is not None:
            if not isinstance(value, str) or not value:
                raise InputError(pyproject, None, f"tool.pytest.ini_options.fleetgate_fleet = {value!r}; expected the path of a fleet.toml")
            return load_fleet(Path(value), only=only)
    raise InputError(Path.cwd(), None, f"no fleet manifest: pass --fleet PATH ({DEFAULT_FLEET_HINT})")


def _render(args: argparse.Namespace) -> int:
    from fleetgate.render.rendered import load_service
    from fleetgate.secrets import MASK, is_secret_name, scrub, scrub_argv, scrub_environment

    fleet = resolve_fleet(args.fleet, only=args.service)
    if args.service not in fleet.services:
        raise InputError(fleet.path, None, f"no service {args.service!r}; expected one of: {', '.join(fleet.services)}")
    config = load_service(fleet, fleet.services[args.service])
    rendered = config.rendered
    if args.json:
        # What the service runs is shown, never its secrets: a key on the command line or in an env file stays there.
        json.dump({"service": config.name, "argv": list(scrub_argv(rendered.argv)), "env": scrub_environment(rendered.env),
                   "inputs": {n: {"value": MASK if is_secret_name(n) and o.value else scrub(o.value), "where": o.where}
                              for n, o in config.variables.items()},
                   "notes": [scrub(note) for note in rendered.notes]},
                  sys.stdout, indent=2)
        print()
        return 0
    started_by = (f"as {config.service.unit.name}" if config.service.unit
                  else f"(compose service {rendered.compose.name}, image {rendered.compose.image})" if rendered.compose
                  else "(no unit declared)")
    print(f"# {config.name}: {rendered.script.relative_to(fleet.root)} {started_by}")
    lines = argv_lines(scrub_argv(rendered.argv), _flag_indices(config))
    print(" \\\n    ".join(lines))
    problems = (config.llama.problems if config.llama else ()) + (config.vllm.problems if config.vllm else ())
    for problem in problems:
        print(f"# {problem.flag}: {scrub(problem.message)}")
    for note in rendered.notes:
        print(f"# note: {scrub(note)}")
    if args.builds:
        for line in _builds_lines(config):
            print(f"# {line}")
    return 0


def _intervals(builds: list[int], recorded: tuple[int, ...]) -> str:
    """Recorded builds as intervals of consecutive recorded builds (``9093-9305, 10108``)."""
    index = {b: i for i, b in enumerate(recorded)}
    runs: list[list[int]] = []
    for build in builds:
        if runs and index[build] == index[runs[-1][1]] + 1:
            runs[-1][1] = build
        else:
            runs.append([build, build])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _builds_lines(config: RenderedService) -> list[str]:
    """``render --builds``: the llama.cpp builds on record whose parser takes every flag of the rendered argv with its
    value, and for each flag and value the builds that refuse it. What engine-accepts-argv skips or does not judge
    is said in its words, and then no build is counted."""
    if config.llama is None:
        return [f"--builds: {config.name} runs {config.service.engine}; option tables per build exist for llama.cpp only"]
    from fleetgate.checks import NotApplicable, get_check
    from fleetgate.checks.seam_argv import NAME, engine_accepts_argv, table_note
    from fleetgate.engines.llama_builds import load_builds
    from fleetgate.failure import Failure

    check = get_check(NAME)
    skipped = check.requires(config) if check.requires is not None else None
    if skipped is not None:
        return [f"{NAME} skips {config.name}: {skipped}" if not skipped.startswith("not judged") else skipped]
    try:
        engine_accepts_argv(config)
    except NotApplicable as reason:
        return [f"{NAME}: {reason}"]
    except Failure:
        pass
    builds = load_builds()
    indices = sorted(_flag_indices(config) or ())
    names = sorted({(w.replace("_", "-") if w.startswith("--") else w) for w in (config.rendered.argv[i] for i in indices)})
    values = sorted({((u.flag.replace("_", "-") if u.flag.startswith("--") else u.flag), u.value)
                     for uses in config.llama.parsed.uses.values() for u in uses
                     if u.index is not None and u.value is not None})
    lines = [f"read with {table_note(config)}"]
    runs = builds.accepting(names, values)
    if not runs:
        lines.append(f"no build from {builds.first} to {builds.last} takes all of its {len(names)} flags with "
                     "their values")
    taken = [b for first, last in runs for b in builds.recorded if first <= b <= last]
    if runs:
        lines.append(f"taken by builds {_intervals(taken, builds.recorded)}: all {len(names)} flags and "
                     f"{len(values)} values")
    for name in names:
        no = [b for b, s in zip(builds.recorded, builds.history(name), strict=True) if s != "live"]
        if no:
            lines.append(f"  {name}: not accepted by {len(no)} of {len(builds.recorded)} builds "
                         f"({_intervals(no, builds.recorded)})")
    for name, value in values:
        have = [b for b, s in zip(builds.recorded, builds.history(name), strict=True) if s == "live"]
        refuse = [b for b in have if not builds.takes_value(name, value, b)]
        if refuse:
            lines.append(f"  {name} {value}: value refused by {len(refuse)} of {len(have)} builds that have the flag "
                         f"({_intervals(refuse, builds.recorded)})")
    lines.append(f"(tables: every one of the {len(builds.published)} published builds, {builds.first} to "
                 f"{builds.last}; python -m tools.extract_llama_args regenerates them)")
    return lines


_NUMBER = re.compile(r"^-(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def _flag_indices(config: RenderedService) -> set[int] | None:
    """argv positions the engine's own option table reads as flags (None when it has none)."""
    parsed = config.llama.parsed if config.llama else config.vllm.parsed if config.vllm else None
    if parsed is None:
        return None
    found = {use.index for uses in parsed.uses.values() for use in uses if use.index is not None}
    found |= {problem.index for problem in parsed.problems if problem.index is not None}
    return found


def argv_lines(argv: Sequence[str], flags: set[int] | None = None) -> list[str]:
    """The binary, then one line per flag with its values beside it (``--reasoning-budget -1``).

    ``flags`` are the positions the engine reads as options; without them a word that starts with a
    dash and is not a number is a flag.
    """
    lines = [shlex.quote(argv[0])]
    for index, arg in enumerate(argv[1:], start=1):
        is_flag = index in flags if flags is not None else arg.startswith("-") and not _NUMBER.match(arg)
        if is_flag or len(lines) == 1:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return lines


VLLM_MODULE = "vllm.entrypoints.openai.api_server"
INIT_EXIT = {0: "fleet.toml written, every file found read", 1: "no engine found: nothing written",
             2: "refused (an existing fleet.toml without --force, a target that is no regular file, --output outside "
                "PATH, a PATH that is no directory, a manifest fleetgate's loader refuses)",
             3: "fleet.toml written, but some files were skipped (each named on stderr, file:line)"}


# What init reads, said when it finds no engine: every shape fleetgate.init.discover has a reader for.
_INIT_READS = ("init reads systemd units and Quadlets (.service, .container), compose files, Kubernetes manifests, "
               "llama-swap configs, router presets (.ini), NixOS modules (.nix: services.llama-cpp, "
               "systemd.services), Ansible role templates (.service.j2, llama-swap .yaml.j2) and shell scripts whose "
               "own lines start llama-server, vllm serve or python -m vllm.entrypoints.openai.api_server (by any "
               "path, after exec, nohup, setsid or env, in the background too)")


def _init(args: argparse.Namespace) -> int:
    """``fleetgate init PATH...``: fleet.toml from the units, compose files and llama-swap configs under PATH."""
    from fleetgate.init import discover, fleet_toml, probe_host
    from fleetgate.init.write import check_target, place, vet

    paths = [Path(p) for p in args.paths]
    root = paths[0]
    if args.from_host:
        from fleetgate.init.from_host import read_host, write_fleet

        host = read_host(args.from_host)
        if not host.processes:
            print(f"fleetgate init: no engine process (llama-server, vllm serve, python -m {VLLM_MODULE}) runs on "
                  f"{args.from_host}; nothing written. next: start the engines, or run init on the repository that "
                  "starts them", file=sys.stderr)
            return 1
        for line in write_fleet(host, args.from_host, root):
            print(f"fleetgate init: {line}", file=sys.stderr)
    if not root.is_dir():
        raise InputError(root, None, "expected the repository's directory (fleet.toml is written there)")
    real_root = root.resolve()
    for other in paths[1:]:
        real = other.resolve()
        if not other.exists() or (real != real_root and real_root not in real.parents):
            raise InputError(other, None, f"expected a directory inside {root}, the first PATH (where fleet.toml goes)")
    output = Path(args.output) if args.output else root / "fleet.toml"
    real_output = output.parent.resolve() / output.name
    if real_root not in real_output.parents:
        raise InputError(output, None, f"--output is outside {root}: init writes only inside the PATH it reads, "
                         "and fleet.toml names its files relative to itself")
    check_target(output, force=args.force)
    discovery = discover(real_output.parent, [p.resolve() for p in paths[1:] or paths])
    facts = None
    problems: list[str] = []
    if args.probe:
        facts, problems = probe_host()
    name = args.name or re.sub(r"[^a-z0-9-]+", "-", real_root.name.lower()).strip("-") or "fleet"
    discovery = vet(real_output, discovery, name=name, facts=facts)
    for note in discovery.notes:
        print(f"fleetgate init: skipped {note}", file=sys.stderr)
    for problem in problems:
        print(f"fleetgate init: {problem}", file=sys.stderr)
    read = ", ".join(f"{n} {kind}" for kind, n in discovery.read.items()) or "no unit, compose file or llama-swap config"
    if not discovery.services:
        print(f"fleetgate init: no engine (llama-server, vllm) found under {', '.join(args.paths)} ({read}); nothing "
              f"written. {_INIT_READS}; next: run `fleetgate init --from-host SPEC DIR` against the host that runs the "
              "engines (local://, ssh://user@host), or declare the service in fleet.toml by hand, [services.NAME] "
              "with host, port, engine and the file that starts it (serve_script, unit, compose, kubernetes, "
              "llama_swap or models_preset; docs/sources.md)", file=sys.stderr)
        return 1
    text = fleet_toml(discovery, name=name, facts=facts)
    place(real_output, text, discovery, force=args.force)
    services = ", ".join(f"{f.name} ({f.engine}, port {f.port})" for f in discovery.services)
    print(f"wrote {output}: {len(discovery.services)} service(s) from {read}: {services}")
    todo = text.count('= "TODO"')
    if todo:
        print(f"  {todo} TODO value(s) left: the host's RAM and cards, which no file says; edit them (or run "
              "`fleetgate init --probe` on the host), then: " + _first_run(output))
    else:
        print(f"  then: {_first_run(output)}")
    return 3 if discovery.notes else 0


def _first_run(output: Path) -> str:
    """The command that runs every seam on the fleet just written: from its directory, which pytest then takes as its
    rootdir, where the plugin supplies the seams' test modules (nothing to copy)."""
    run = f"pytest --fleet {shlex.quote(output.name)}"
    return run if output.parent == Path() else f"cd {shlex.quote(str(output.parent))} && {run}"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default: this process's): the subcommand it names with its own arguments, every
    other one by its name and help only."""
    parser = argparse.ArgumentParser(prog="fleetgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", help="print what a service really runs (its rendered argv)")
    render.add_argument("service")
    render.add_argument("--fleet", metavar="PATH", help=f"fleet manifest (default: {DEFAULT_FLEET_HINT})")
    render.add_argument("--json", action="store_true", help="argv, environment and where each variable was set")
    render.add_argument("--builds", action="store_true",
                        help="llama.cpp: print the range of builds whose parser accepts the rendered argv")
    render.set_defaults(func=_render)
    init = sub.add_parser("init", help="write fleet.toml from the units, compose files and llama-swap configs found",
                          description="Write PATH/fleet.toml from what the files under PATH start: systemd units and "
                          "Quadlets, serve scripts and the env files they name, compose files, llama-swap configs. "
                          "Exit codes: " + "; ".join(f"{k} {v}" for k, v in INIT_EXIT.items()) + ".")
    init.add_argument("paths", nargs="+", metavar="PATH",
                      help="the repository (fleet.toml goes there); more PATHs inside it narrow the walk")
    init.add_argument("--output", metavar="FILE", help="where to write (default PATH/fleet.toml; must be inside PATH)")
    init.add_argument("--force", action="store_true", help="replace an existing fleet.toml")
    init.add_argument("--probe", action="store_true",
                      help="read this machine's cards (nvidia-smi, else rocm-smi) and RAM (/proc/meminfo) into the host")
    init.add_argument("--name", help="the fleet's name (default: PATH's directory name)")
    init.add_argument("--from-host", metavar="SPEC",
                      help="first write what a running host runs into PATH (a new or empty directory), read through "
                      "the testinfra spec (local://, ssh://user@host, docker://NAME, kubectl://POD): each engine "
                      "process's unit and drop-ins as systemd has them with their env files, else a start script of "
                      "its /proc cmdline and environment; secrets written as ***; docs/init.md")
    init.set_defaults(func=_init)
    chosen = next((arg for arg in (sys.argv[1:] if argv is None else argv) if not arg.startswith("-")), None)
    for command, (module, summary) in SUBCOMMANDS.items():
        if command == chosen:
            importlib.import_module(module).register(sub)
        else:
            # Never parsed (argparse picks the command by its first positional): it stands in the list and the help.
            sub.add_parser(command, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except InputError as exc:
        print(f"fleetgate: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`fleetgate fit X | head -1`): stop quietly, as cat and grep do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    except KeyboardInterrupt:
        print("fleetgate: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
