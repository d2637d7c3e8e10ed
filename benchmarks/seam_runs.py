"""What one ``pytest seams/`` asks the sandbox for on a generated fleet (benchmarks/fleet_scale.py's): the sandboxed
runs, by the seam (or render) that asked, and the ``bash -n`` parses of scripts. Counts, not times: they do not move
with the machine's load.

    python benchmarks/seam_runs.py 50                # this checkout
    python benchmarks/seam_runs.py 50 --root DIR     # another tree (git archive REV | tar -x -C DIR)

The first sandboxed run of a process is the sandbox's probe; it is counted under whatever asked first.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", type=int, help="services in the generated fleet")
    parser.add_argument("--root", type=Path, default=REPO, help="the tree whose fleetgate and seams/ run (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    # This tree's editable install set aside, so that ROOT's fleetgate is the one imported.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
    sys.path[:0] = [str(root), str(REPO / "benchmarks")]
    import fleet_scale
    import pytest

    import fleetgate.sandbox as sandbox

    if not sandbox.__file__ or not sandbox.__file__.startswith(str(root)):
        raise SystemExit(f"fleetgate was imported from {sandbox.__file__}, not from {root}")
    runs: collections.Counter[str] = collections.Counter()
    exchange = sandbox._exchange

    def counted(request: Any, wait: float) -> Any:
        names = [f"{Path(f.filename).stem}.{f.name}" for f in traceback.extract_stack()[:-1] if "/fleetgate/" in f.filename]
        if any(n.startswith("envfile.") for n in names):
            asked = "an env file read by bash"
        else:
            asked = next((n for n in reversed(names) if n.startswith("seam_") or n == "rendered.load_service"),
                         (names or ["?"])[-1])
        runs[asked] += 1
        return exchange(request, wait)

    sandbox._exchange = counted
    parses = 0
    popen = subprocess.Popen.__init__

    def init(self: subprocess.Popen[bytes], argv: Any, *rest: Any, **options: Any) -> None:
        nonlocal parses
        if isinstance(argv, list) and argv[:1] == ["/bin/bash"] and "-n" in argv:
            parses += 1
        popen(self, argv, *rest, **options)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign,assignment]
    with tempfile.TemporaryDirectory(prefix="fleetgate-runs-") as tmp:
        fleet = fleet_scale.generate(args.size, Path(tmp) / "fleet")
        code = pytest.main([str(root / "seams"), "-q", "-p", "no:cacheprovider", f"--fleet={fleet}"])
    print(f"# {args.size} services, {root}: pytest exit {code}; {sum(runs.values())} sandboxed runs, {parses} bash -n")
    for asked, count in runs.most_common():
        print(f"{count:6d}  {asked}")
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
