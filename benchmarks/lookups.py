"""Four lookups the seams make once per service or per flag, before and after they were indexed, in one process (CPU
time, the best of three): a build table's option by name, the environment's secrets per scrub, fleet.toml's key index,
the deploy probe table. The "before" of each is the previous code path, put back for the measurement.

    python benchmarks/lookups.py            # the generated fleets of benchmarks/fleet_scale.py at 50 and 200 services
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_scale

from fleetgate import deploy, secrets, toml_keys
from fleetgate.engines.llama_builds import load_builds
from fleetgate.manifest import load_fleet


def best(make: Callable[[], object], repeat: int = 3) -> float:
    """The least CPU of ``repeat`` calls, in ms."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        make()
        times.append(time.process_time() - start)
    return min(times) * 1000


def main() -> int:
    builds = load_builds()
    keys = sorted({name for variant in builds.variants for name in variant.all_names})[:200]
    samples = list(builds.sampled)[-5:]

    def scan(key: str, sample: int) -> object:
        # before: every option of the build scanned for the name
        for variant in tuple(v for v in builds.variants if any(a <= sample <= b for a, b in v.seen)):
            if key in variant.all_names:
                return variant
        return None

    lookups = len(keys) * len(samples)
    old = best(lambda: [scan(k, s) for s in samples for k in keys])
    new = best(lambda: [builds._grammar(k, s, env=False) for s in samples for k in keys])
    print(f"a build table's option by name: {old / lookups * 1000:.1f} -> {new / lookups * 1000:.1f} us per lookup "
          f"({len(builds.variants)} options)")
    pattern = secrets._SECRET_NAME
    old = best(lambda: [{v for k, v in os.environ.items() if pattern.search(k) and len(v) >= 4} for _ in range(500)])
    new = best(lambda: [secrets._environment_secrets() for _ in range(500)])
    print(f"the environment's secrets, per scrub: {old / 500 * 1000:.1f} -> {new / 500 * 1000:.1f} us "
          f"({len(os.environ)} variables)")
    for size in (50, 200):
        _fleet_lookups(size)
    return 0


def _fleet_lookups(size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fleetgate-lookups-") as tmp:
        toml = fleet_scale.generate(size, Path(tmp) / "fleet")
        cached = toml_keys._index
        toml_keys._index = toml_keys.KeyIndex  # type: ignore[assignment]  # before: an index per question
        old = best(lambda: load_fleet(toml))
        toml_keys._index = cached
        new = best(lambda: load_fleet(toml))
        fleet = load_fleet(toml)
        table = fleet.deploy_probes
        assert table is not None
        parse = deploy._parse
        deploy._parse = parse.__wrapped__  # type: ignore[assignment]  # before: the table parsed per service
        old_probes = best(lambda: [deploy.read_probes(table) for _ in fleet.services])
        deploy._parse = parse
        new_probes = best(lambda: [deploy.read_probes(table) for _ in fleet.services])
        print(f"{size} services: load_fleet {old:.1f} -> {new:.1f} ms; the deploy probe table read once per service "
              f"{old_probes:.1f} -> {new_probes:.1f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
