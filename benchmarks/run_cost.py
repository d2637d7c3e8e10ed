"""What one sandboxed run costs, and what of it a session saves: CPU of the sandbox parent (and of every process of
its runs, which it waits for) per run, for runs made one request each (``sandbox.run``) and in sessions
(``sandbox.run_many``), from a bare ``/bin/true`` up to a whole render of the example fleet's frank-zealot, layer by
layer. Run by hand, on a machine as quiet as you can find; the parent's CPU is read in clock ticks, so each figure is
the mean of ``--runs`` runs.

    python benchmarks/run_cost.py --runs 64
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=64)
    args = parser.parse_args()
    # this tree's fleetgate, not an editable install of another
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
    sys.path.insert(0, str(REPO))
    from fleetgate import sandbox
    from fleetgate.manifest import load_fleet
    from fleetgate.render import dispatch as render

    assert sandbox.__file__ is not None and sandbox.__file__.startswith(str(REPO))
    assert sandbox.sandbox_problem() is None, sandbox.sandbox_problem()
    fleet = load_fleet(REPO / "fixtures" / "fleet" / "fleet.toml")
    steps = render._render_steps(fleet, fleet.services["frank-zealot"], None, None, (), render.RENDER_TIMEOUT_S)
    spec, what = next(steps)
    no_preamble = {k: v for k, v in spec.env.items() if k != "BASH_ENV"}
    layers = [
        ("`/bin/true`, nothing else in the sandbox", sandbox.SandboxSpec(command=["/bin/true"], env={})),
        ("`/bin/true` in the render's layout (stubs, tools, the repository)", dataclasses.replace(spec, command=["/bin/true"])),
        ("`bash -c true` in it", dataclasses.replace(spec, command=["/bin/bash", "-c", "true"], env=no_preamble)),
        ("`bash -c true` in it, the preamble read (BASH_ENV)", dataclasses.replace(spec, command=["/bin/bash", "-c", "true"])),
        ("frank-zealot's render: its serve script, the preamble, the stubbed engine", spec),
    ]
    print("| what runs | one request per run: CPU per run | in sessions of "
          f"{sandbox.SESSION_JOBS}: CPU per run |")
    print("|---|---:|---:|")
    sandbox.run_many([(spec, what)])
    for name, layer in layers:
        cells = []
        for many in (False, True):
            before = sandbox._PARENT.cpu_seconds() if sandbox._PARENT else 0.0
            if many:
                sandbox.run_many([(layer, what)] * args.runs)
            else:
                for _ in range(args.runs):
                    sandbox.run(layer, what=what)
            assert sandbox._PARENT is not None
            cells.append(f"{(sandbox._PARENT.cpu_seconds() - before) / args.runs * 1000:.1f} ms")
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
