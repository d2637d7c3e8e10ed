"""What one ``pytest seams/`` asks the sandbox for on a generated fleet (benchmarks/fleet_scale.py's): the sandbox
sessions, by the seam (or render) that asked, the runs made in them, and the ``bash -n`` parses of scripts; with
``--baseline REV``, the same fleets run by a previous design too, printed side by side. Counts, not times: they do not
move with the machine's load.

A session is one request to the sandbox parent (``fleetgate.sandbox._exchange``): one manager and unsharer, one user,
UTS and network namespace with its id maps. A run is one command the sandbox runs (a serve script, a probe of it, an
env file read by bash), each in mount and PID namespaces, a tmpfs and an init of its own; a design before sessions
makes one session per run.

    python benchmarks/seam_runs.py 6 10 50 200 --baseline 4255105   # this checkout beside 4255105, same fleets
    python benchmarks/seam_runs.py 50 --root DIR                    # another tree (git archive REV | tar -x -C DIR)

A size of 6 or less is the example fleet itself. Each design runs in a process of its own, with the suite's engine
preflight (the repository's conftest.py) marked done: it is fleetgate's own test suite's, not the seams'. The first
sandboxed run of a process is the sandbox's probe; it is counted under whatever asked first. Where the design has one,
the run's renderer (``fleetgate.render.rendered.Renderer``) says what it rendered and what it answered again from its cache.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import marshal
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+", help="services in each generated fleet")
    parser.add_argument("--root", type=Path, default=REPO, help="the tree whose fleetgate and seams/ run (default: this one)")
    parser.add_argument("--baseline", metavar="REV", help="a git revision to count beside it (git archive)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--by-seam", action="store_true", help="list the runs by the seam that asked, per design")
    args = parser.parse_args()
    if args.child is not None:
        return _child(args.root.resolve(), args.child)
    sys.path.insert(0, str(REPO / "benchmarks"))
    import fleet_scale

    with tempfile.TemporaryDirectory(prefix="fleetgate-runs-") as tmp:
        designs = [("this checkout" if args.root.resolve() == REPO else str(args.root), args.root.resolve())]
        if args.baseline:
            base = Path(tmp) / "baseline"
            base.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            designs.append((f"baseline {args.baseline}", base))
        print("| design | services | pytest exit | sandbox sessions | sessions per service | +sessions per added service | "
              "runs in them | runs per service | `bash -n` | renders made / answered again (the run's renderer) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        previous: dict[str, tuple[int, int]] = {}
        listings: list[str] = []
        for size in args.sizes:
            fleet = fleet_scale.generate(size, Path(tmp) / f"fleet-{size}")
            services = len(_services(fleet))
            for name, root in designs:
                env = {**os.environ, "FLEETGATE_ENGINE_PREFLIGHT": "1"}
                env.pop("PYTHONPATH", None)
                done = subprocess.run([sys.executable, __file__, "0", "--root", str(root), "--child", str(fleet)],
                                      capture_output=True, text=True, env=env, cwd=root)
                try:
                    counts = json.loads(done.stdout.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{name}: no counts for {size} services") from None
                total = sum(counts["runs"].values())
                last = previous.get(name)
                marginal = f"{(total - last[1]) / (services - last[0]):.2f}" if last and services > last[0] else "-"
                previous[name] = (services, total)
                renderer = (f"{counts['renders']} / {counts['reused']}" if counts.get("renders") is not None else
                            "no renderer")
                print(f"| {name} | {services} | {counts['exit']} | {total} | {total / services:.2f} | {marginal} | "
                      f"{counts['jobs']} | {counts['jobs'] / services:.2f} | {counts['parses']} | {renderer} |", flush=True)
                listings.append(f"# {services} services, {name}: {total} sandbox sessions, {counts['distinct']} of them "
                                "different requests\n" + "\n".join(
                    f"{count:6d}  {asked}" for asked, count in sorted(counts["runs"].items(), key=lambda kv: -kv[1])))
                by = counts.get("renders_by") or {}
                if by:
                    listings.append(f"# {services} services, {name}: {sum(by.values())} renders, by what asked "
                                    "(per service)\n" + "\n".join(
                        f"{count:6d}  {count / services:5.2f}  {asked}"
                        for asked, count in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))))
        if args.by_seam:
            print("\n" + "\n".join(listings))
    return 0


def _services(fleet: Path) -> list[str]:
    import tomllib

    return list(tomllib.loads(fleet.read_text(encoding="utf-8")).get("services", {}))


def _count_renders(rendered: Any) -> collections.Counter[str]:
    """Every render the run's renderer makes (``render`` alone, ``render_many`` ahead), by the check that declared it
    (``probes=``, through the planner), else the check running when it was asked (a probe no check declared: where a
    failure's flag value comes from), else each service's own render. A design without these names counts none."""
    import fleetgate.runner as runner

    renders_by: collections.Counter[str] = collections.Counter()
    real_planned = getattr(runner, "planned_probes", None)
    real_render, real_many = getattr(rendered, "render", None), getattr(rendered, "render_many", None)
    if real_planned is None or real_render is None or real_many is None:
        return renders_by
    declared: dict[tuple[Any, ...], str] = {}

    def key(fleet: Any, service: Any, overrides: Any, args: Any) -> tuple[Any, ...]:
        return (id(fleet), repr(service), tuple(sorted((overrides or {}).items())), tuple(args or ()))

    def planned(config: Any, scope: object = None) -> list[Any]:
        found: list[Any] = []
        names = [scope] if isinstance(scope, str) and scope in runner.REGISTRY else list(runner.REGISTRY)
        for name in names:
            for probe in real_planned(config, name):
                declared.setdefault(key(config.fleet, probe.service or config.service, probe.overrides, probe.args),
                                    f"{name} (declared)")
                found.append(probe)
        return found

    def tally(fleet: Any, service: Any, overrides: Any, args: Any) -> None:
        asked = declared.get(key(fleet, service, overrides, args))
        if asked is None:
            scope = runner.plan_scope()
            asked = (f"{scope} (not declared)" if scope and (overrides or args) else
                     "each service's own render" if not overrides and not args else "? (not declared, no check running)")
        renders_by[asked] += 1

    def render(fleet: Any, service: Any, *rest: Any, **options: Any) -> Any:
        tally(fleet, service, options.get("overrides"), options.get("args"))
        return real_render(fleet, service, *rest, **options)

    def render_many(fleet: Any, requests: Any) -> Any:
        for request in requests:
            tally(fleet, request.service, request.overrides, request.args)
        return real_many(fleet, requests)

    runner.planned_probes = planned
    rendered.render, rendered.render_many = render, render_many
    return renders_by


def _child(root: Path, fleet: Path) -> int:
    # This tree's editable install set aside, so that ROOT's fleetgate is the one imported.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
    sys.path[:0] = [str(root)]
    import pytest

    import fleetgate.render.rendered as rendered
    import fleetgate.sandbox as sandbox

    if not sandbox.__file__ or not sandbox.__file__.startswith(str(root)):
        raise SystemExit(f"fleetgate was imported from {sandbox.__file__}, not from {root}")
    runs: collections.Counter[str] = collections.Counter()
    jobs = 0
    asked_for: set[str] = set()
    exchange = sandbox._exchange

    def counted(request: Any, wait: float) -> Any:
        nonlocal jobs
        # a session (``jobs``) is one sandbox made, its runs each in mount and PID namespaces of their own
        jobs += len(request["jobs"]) if isinstance(request.get("jobs"), list) else 1
        # two requests alike (its deadline aside) would be one render asked twice: what a cache could answer
        asked_for.add(hashlib.sha256(marshal.dumps({k: v for k, v in request.items() if k != "deadline"})).hexdigest())
        names = [f"{Path(f.filename).stem}.{f.name}" for f in traceback.extract_stack()[:-1] if "/fleetgate/" in f.filename]
        if any(n.startswith("envfile.") for n in names):
            asked = "an env file read by bash"
        elif any(n.startswith("sandbox.session") for n in names):
            # a batch's sessions go side by side, each from a thread of its own: what asked is not on its stack
            asked = "a batch of renders made ahead (services' own renders, declared probes)"
        else:
            asked = next((n for n in reversed(names) if n.startswith("seam_") or n in ("rendered.load_service",
                                                                                      "rendered.attempt_services")),
                         (names or ["?"])[-1])
        runs[asked] += 1
        return exchange(request, wait)

    sandbox._exchange = counted  # type: ignore[assignment]
    renders_by = _count_renders(rendered)
    renderers: list[Any] = []
    renderer_class = getattr(rendered, "Renderer", None)
    if renderer_class is not None:
        made = renderer_class.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            made(self, *args, **kwargs)
            renderers.append(self)

        renderer_class.__init__ = init
    parses = 0
    popen = subprocess.Popen.__init__

    def popen_init(self: subprocess.Popen[bytes], argv: Any, *rest: Any, **options: Any) -> None:
        nonlocal parses
        if isinstance(argv, list) and argv[:1] == ["/bin/bash"] and "-n" in argv:
            parses += 1
        popen(self, argv, *rest, **options)

    subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign,assignment]
    code = pytest.main([str(root / "seams"), "-q", "-p", "no:cacheprovider", f"--fleet={fleet}"])
    counts = {"exit": int(code), "runs": dict(runs), "jobs": jobs, "parses": parses, "distinct": len(asked_for),
              "renders_by": dict(renders_by),
              "renders": sum(r.renders for r in renderers) if renderer_class is not None else None,
              "reused": sum(r.reused for r in renderers) if renderer_class is not None else None}
    print("\n" + json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
