"""``fleetgate init PATH...``: fleet.toml from the units, compose files, llama-swap configs and scripts under PATH, or
from what a running host runs (``--from-host``)."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

# The modules, not their names: each function is looked up when init runs, so that a test replaces one of them where
# it lives (tests/hostile/test_init_writes.py races a file into place between vet and place).
from fleetgate import init as found
from fleetgate.cli import SUBCOMMANDS
from fleetgate.errors import InputError
from fleetgate.init import from_host, write

__all__: list[str] = []


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    init = subparsers.add_parser("init", help=SUBCOMMANDS["init"][1],
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
    paths = [Path(p) for p in args.paths]
    root = paths[0]
    if args.from_host:
        host = from_host.read_host(args.from_host)
        if not host.processes:
            print(f"fleetgate init: no engine process (llama-server, vllm serve, python -m {VLLM_MODULE}) runs on "
                  f"{args.from_host}; nothing written. next: start the engines, or run init on the repository that "
                  "starts them", file=sys.stderr)
            return 1
        for line in from_host.write_fleet(host, args.from_host, root):
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
    write.check_target(output, force=args.force)
    discovery = found.discover(real_output.parent, [p.resolve() for p in paths[1:] or paths])
    facts = None
    problems: list[str] = []
    if args.probe:
        facts, problems = found.probe_host()
    name = args.name or re.sub(r"[^a-z0-9-]+", "-", real_root.name.lower()).strip("-") or "fleet"
    discovery = write.vet(real_output, discovery, name=name, facts=facts)
    for note in discovery.notes:
        print(f"fleetgate init: skipped {note}", file=sys.stderr)
    for problem in problems:
        print(f"fleetgate init: {problem}", file=sys.stderr)
    read = ", ".join(f"{n} {kind}" for kind, n in discovery.read.items()) or "no unit, compose file or llama-swap config"
    rendered_first = sum(1 for note in discovery.notes if note.render_first)
    if not discovery.services and rendered_first:
        # The engines may well be there, in what helm or kustomize prints: "no engine" and --from-host would send
        # the user away from the one step that lets init read them.
        print(f"fleetgate init: no engine found in the files init reads under {', '.join(args.paths)} ({read}); "
              f"nothing written. next: render what the {rendered_first} line(s) above name (a Helm chart, a Flux "
              "HelmRelease, a kustomization) with the command each gives, then run init again: it reads the "
              "rendered manifests", file=sys.stderr)
        return 1
    if not discovery.services:
        print(f"fleetgate init: no engine (llama-server, vllm) found under {', '.join(args.paths)} ({read}); nothing "
              f"written. {_INIT_READS}; next: run `fleetgate init --from-host SPEC DIR` against the host that runs the "
              "engines (local://, ssh://user@host), or declare the service in fleet.toml by hand, [services.NAME] "
              "with host, port, engine and the file that starts it (serve_script, unit, compose, kubernetes, "
              "llama_swap or models_preset; docs/sources.md)", file=sys.stderr)
        return 1
    text = found.fleet_toml(discovery, name=name, facts=facts)
    write.place(real_output, text, discovery, force=args.force)
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
