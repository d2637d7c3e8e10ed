"""``fleetgate render SERVICE``: what a service really runs (its rendered argv), its environment with where each
variable was set (``--json``), and the llama.cpp builds whose parser takes it (``--builds``)."""

from __future__ import annotations

import argparse
import json
import sys

from fleetgate.checks import NotApplicable
from fleetgate.checks.seam_argv import engine_accepts_argv, table_note
from fleetgate.cli import DEFAULT_FLEET_HINT, SUBCOMMANDS, argv_lines, flag_indices, resolve_fleet
from fleetgate.engines.llama_builds import load_builds
from fleetgate.errors import InputError
from fleetgate.failure import Failure
from fleetgate.render.rendered import RenderedService, load_service
from fleetgate.render.start import Compose
from fleetgate.secrets import MASK, is_secret_name, scrub, scrub_argv, scrub_environment

__all__: list[str] = []


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    render = subparsers.add_parser("render", help=SUBCOMMANDS["render"][1])
    render.add_argument("service")
    render.add_argument("--fleet", metavar="PATH", help=f"fleet manifest (default: {DEFAULT_FLEET_HINT})")
    render.add_argument("--json", action="store_true", help="argv, environment and where each variable was set")
    render.add_argument("--builds", action="store_true",
                        help="llama.cpp: print the range of builds whose parser accepts the rendered argv")
    render.set_defaults(func=_render)


def _render(args: argparse.Namespace) -> int:
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
    compose = rendered.start.read if isinstance(rendered.start, Compose) else None
    started_by = (f"as {config.service.unit.name}" if config.service.unit
                  else f"(compose service {compose.name}, image {compose.image})" if compose
                  else "(no unit declared)")
    print(f"# {config.name}: {rendered.script.relative_to(fleet.root)} {started_by}")
    lines = argv_lines(scrub_argv(rendered.argv), flag_indices(config))
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

    check = engine_accepts_argv
    skipped = check.requires(config) if check.requires is not None else None
    if skipped is not None:
        return [f"{check.name} skips {config.name}: {skipped}" if not skipped.startswith("not judged") else skipped]
    try:
        check(config)
    except NotApplicable as reason:
        return [f"{check.name}: {reason}"]
    except Failure:
        pass
    builds = load_builds()
    indices = sorted(flag_indices(config) or ())
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
