"""What a service's seams cannot cost less than, today's design kept: pytest's own work for as many tests, and the
sandbox's for as many runs, beside what ``pytest seams/`` costs on the same generated fleets (fleet_scale.py's).

For each size it runs, as separate processes:

- ``pytest seams/ --fleet F``: the real run, its CPU and its passed and skipped tests;
- ``pytest`` of a module of trivial tests (``pass`` and ``pytest.skip``), exactly as many passed and skipped as the
  real run had, with fleetgate's plugin loaded (as in any pytest run of this Python) and without it
  (``-p no:fleetgate``): pytest's own cost of that many tests;
- ``benchmarks/seam_runs.py N``: how many sandboxed runs the real run asks for;

and once, in this process, the CPU of one sandboxed ``/bin/true`` (the sandbox's own cost of a run: namespaces,
mounts, the init, nothing of a render). The floor of a service is pytest's cost of its tests plus its sandboxed runs
at ``/bin/true``'s cost. CPU is user + system of the process and every process it waited for. Not a test: run it by
hand on a quiet machine.

    python benchmarks/floors.py --sizes 10 50
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import fleet_scale  # noqa: E402

_TRIVIAL = """import pytest

@pytest.mark.parametrize("i", range({passed}))
def test_passes(i):
    pass

@pytest.mark.parametrize("i", range({skipped}))
def test_skips(i):
    pytest.skip("trivial")
"""


@dataclass
class Size:
    services: int
    seams_cpu: float
    passed: int
    skipped: int
    trivial_cpu: float
    trivial_cpu_without_plugin: float
    sandboxed_runs: int

    @property
    def tests(self) -> int:
        return self.passed + self.skipped


def _counts(output: str) -> tuple[int, int]:
    summary = output.rstrip().splitlines()[-1] if output.strip() else ""
    passed = re.search(r"(\d+) passed", summary)
    skipped = re.search(r"(\d+) skipped", summary)
    if passed is None or re.search(r"\d+ (failed|error)", summary):
        raise SystemExit(f"the seams run did not pass:\n{output[-2000:]}")
    return int(passed.group(1)), int(skipped.group(1)) if skipped else 0


def _median_cpu(argv: list[str], repeat: int, cwd: Path = REPO) -> tuple[float, str]:
    runs = []
    output = ""
    for _ in range(repeat + 1):  # the first is a warm-up
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=fleet_scale._ENV)
        assert process.stdout is not None
        output = process.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(process.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}:\n{output[-2000:]}")
        runs.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(runs[1:]), output


def _sandboxed_runs(services: int) -> int:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "seam_runs.py"), str(services)], capture_output=True,
                          text=True, cwd=REPO, check=True, env=fleet_scale._ENV)
    found = re.search(r"; (\d+) sandboxed runs", done.stdout)
    if found is None:
        raise SystemExit(f"seam_runs.py said nothing countable:\n{done.stdout[-2000:]}")
    return int(found.group(1))


def true_run_cpu(runs: int = 40) -> float:
    """CPU seconds of one sandboxed ``/bin/true`` in a warm process (the median of ``runs``)."""
    from fleetgate import sandbox

    spec = sandbox.SandboxSpec(["/bin/true"], {})
    sandbox.run(spec, what="floors")

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        parent = getattr(sandbox, "_PARENT", None)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + (parent.cpu_seconds() if parent else 0.0)

    each = []
    for _ in range(runs):
        before = cpu()
        sandbox.run(spec, what="floors")
        each.append(cpu() - before)
    return statistics.median(each)


def measure(services: int, repeat: int, work: Path) -> Size:
    fleet = fleet_scale.generate(services, work / f"fleet-{services}")
    seams = [sys.executable, "-m", "pytest", str(REPO / "seams"), "-q", "-p", "no:cacheprovider", f"--fleet={fleet}"]
    seams_cpu, output = _median_cpu(seams, repeat)
    passed, skipped = _counts(output)
    trivial = work / f"trivial-{services}"
    trivial.mkdir()
    (trivial / "test_trivial.py").write_text(_TRIVIAL.format(passed=passed, skipped=skipped), encoding="utf-8")
    plain = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_trivial.py"]
    with_plugin, _ = _median_cpu(plain, repeat, cwd=trivial)
    without_plugin, _ = _median_cpu([*plain, "-p", "no:fleetgate"], repeat, cwd=trivial)
    return Size(services, seams_cpu, passed, skipped, with_plugin, without_plugin, _sandboxed_runs(services))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[10, 50], metavar=("SMALL", "LARGE"))
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each command (after one warm-up)")
    args = parser.parse_args()
    true_cpu = true_run_cpu()
    with tempfile.TemporaryDirectory(prefix="fleetgate-floors-") as tmp:
        small, large = (measure(n, args.repeat, Path(tmp)) for n in args.sizes)
    added = large.services - small.services

    def per(value: float) -> str:
        return f"{value / added * 1000:.1f} ms"

    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; CPU medians of {args.repeat} after a warm-up")
    print(f"# one sandboxed /bin/true: {true_cpu * 1000:.1f} ms of CPU")
    print(f"| what | {small.services} services | {large.services} services | per added service |")
    print("|---|---:|---:|---:|")
    rows = [
        ("`pytest seams/`: tests (passed + skipped)", f"{small.tests}", f"{large.tests}",
         f"{(large.tests - small.tests) / added:.1f} tests"),
        ("`pytest seams/`: CPU", f"{small.seams_cpu:.2f} s", f"{large.seams_cpu:.2f} s", per(large.seams_cpu - small.seams_cpu)),
        ("as many trivial tests, fleetgate's plugin loaded: CPU", f"{small.trivial_cpu:.2f} s", f"{large.trivial_cpu:.2f} s",
         per(large.trivial_cpu - small.trivial_cpu)),
        ("as many trivial tests, `-p no:fleetgate`: CPU", f"{small.trivial_cpu_without_plugin:.2f} s",
         f"{large.trivial_cpu_without_plugin:.2f} s",
         per(large.trivial_cpu_without_plugin - small.trivial_cpu_without_plugin)),
        ("sandboxed runs asked for", f"{small.sandboxed_runs}", f"{large.sandboxed_runs}",
         f"{(large.sandboxed_runs - small.sandboxed_runs) / added:.2f} runs"),
        ("those runs at `/bin/true`'s cost: CPU", f"{small.sandboxed_runs * true_cpu:.2f} s",
         f"{large.sandboxed_runs * true_cpu:.2f} s", per((large.sandboxed_runs - small.sandboxed_runs) * true_cpu)),
    ]
    for row in rows:
        print("| " + " | ".join(row) + " |")
    floor = (large.trivial_cpu_without_plugin - small.trivial_cpu_without_plugin
             + (large.sandboxed_runs - small.sandboxed_runs) * true_cpu)
    print(f"\nfloor per added service (pytest's own tests + the sandbox's own runs): {per(floor)}; "
          f"measured: {per(large.seams_cpu - small.seams_cpu)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
