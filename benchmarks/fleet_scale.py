"""How fleetgate scales with the size of a fleet: generated fleets of N services, timed end to end.

A fleet of N services is the example fleet (fixtures/fleet) plus clones of its services under new
names and ports until there are N: each clone gets its own copy of the directories its unit, env
file and serve script live in, with the deployed paths in them (and its port) rewritten, so every
clone renders on its own the way the original does. For each size the benchmark runs, as separate
processes, and reports the median wall time of ``--repeat`` runs after one warm-up:

- ``pytest seams/ --fleet F`` (one process) and with ``-n auto``;
- ``fleetgate render SERVICE --fleet F`` (one service's answer);

with the time per service and the peak RSS of the largest process of the run (``wait4``). It checks
that every generated fleet passes every seam (a benchmark of failing runs would time the wrong
thing). It is not a test: run it by hand, on a quiet machine where you can.

    python benchmarks/fleet_scale.py --sizes 10 50 200 500 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "fleet"
SEAMS = REPO / "seams"
FIRST_PORT = 20000


def _service_blocks(text: str) -> dict[str, str]:
    """The text of every ``[services.NAME]`` table and its sub-tables, by service name."""
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        header = re.match(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*$", line)
        if header:
            parts = header.group(1).split(".")
            current = parts[1] if parts[0] == "services" and len(parts) > 1 else None
        if current is not None:
            blocks.setdefault(current, []).append(line)
    return {name: "".join(lines) for name, lines in blocks.items()}


def generate(size: int, target: Path) -> Path:
    """The example fleet plus clones of its services, ``size`` services in all; returns fleet.toml."""
    shutil.copytree(EXAMPLE, target)
    manifest = target / "fleet.toml"
    text = manifest.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    deploy_root = data["fleet"]["deploy_root"].rstrip("/")
    blocks = _service_blocks(text)
    originals = list(data["services"])
    extra: list[str] = []
    clones: list[tuple[str, str, int, int]] = []
    for k in range(max(0, size - len(originals))):
        source = originals[k % len(originals)]
        raw = data["services"][source]
        name = f"{source}-{k:04d}"
        port = FIRST_PORT + k
        own = [raw[key] for key in ("unit", "env_file", "serve_script") if key in raw]
        directories = sorted({str(Path(f).parent) for f in own})
        base = f"clones/{name}"
        block = blocks[source]
        for directory in directories:
            shutil.copytree(EXAMPLE / directory, target / base / directory, dirs_exist_ok=True)
            block = block.replace(f'"{directory}/', f'"{base}/{directory}/')
        block = re.sub(rf"^(\s*\[\[?\s*services\.){re.escape(source)}\b", rf"\g<1>{name}", block, flags=re.M)
        block = re.sub(r"^port = \d+", f"port = {port}", block, flags=re.M)
        for file in own:
            path = target / base / file
            body = path.read_text(encoding="utf-8")
            for directory in directories:
                body = body.replace(f"{deploy_root}/{directory}", f"{deploy_root}/{base}/{directory}")
            body = re.sub(rf"\b{raw['port']}\b", str(port), body)
            path.write_text(body, encoding="utf-8")
        extra.append(block)
        clones.append((source, name, raw["port"], port))
    manifest.write_text(text + "\n" + "\n".join(extra), encoding="utf-8")
    _register_clones(target, data, clones)
    return manifest


def _register_clones(target: Path, fleet: dict[str, object], clones: list[tuple[str, str, int, int]]) -> None:
    """What the fleet-level files say of each original, said of its clones too: the deploy script's probe and
    payload gate, the docs page and its index entry, the alert rules that name the original's job."""
    probes = fleet.get("deploy_probes")
    if isinstance(probes, str):
        path = target / probes
        lines = path.read_text(encoding="utf-8").splitlines()
        by_name = {line.split()[0]: line for line in lines if line.strip() and not line.startswith("#")}
        lines += [by_name[source].replace(source, name, 1).replace(f":{old}/", f":{new}/")
                  for source, name, old, new in clones if source in by_name]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    deploy = fleet.get("deploy_script")
    if isinstance(deploy, str):
        # The deploy script's payload gate keys each service's payload by name (a case arm): a clone loads its
        # original's payload, so it gets the original's arm.
        path = target / deploy
        lines = path.read_text(encoding="utf-8").splitlines()
        for source, name, _, _ in clones:
            arm = next((i for i, line in enumerate(lines) if line.lstrip().startswith(f"{source}) payload=")), None)
            if arm is not None:
                lines.insert(arm + 1, lines[arm].replace(f"{source})", f"{name})", 1))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    index = fleet.get("docs_index")
    if isinstance(index, str):
        path = target / index
        lines = path.read_text(encoding="utf-8").splitlines()
        for source, name, _, _ in clones:
            page = path.parent / f"{source}.md"
            if page.is_file():
                (path.parent / f"{name}.md").write_text(page.read_text(encoding="utf-8").replace(source, name),
                                                        encoding="utf-8")
            entry = next((i for i, line in enumerate(lines) if line.startswith(f"- [{source}]({source}.md)")), None)
            if entry is not None:
                lines.insert(entry + 1, lines[entry].replace(source, name))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rules = fleet.get("rules")
    for rule_file in rules if isinstance(rules, list) else []:
        path = target / str(rule_file)
        text = path.read_text(encoding="utf-8")
        for source, name, _, _ in clones:
            # A rule is a "- alert:" item up to the next one; a rule naming the original's job is repeated.
            items = re.split(r"(?m)^(?=      - alert: )", text)
            own = [item for item in items if f'job="{source}"' in item]
            for item in own:
                clone = item.replace(f'job="{source}"', f'job="{name}"')
                clone = re.sub(r"(- alert: \w+)", rf"\g<1>{re.sub(r'[^A-Za-z0-9]', '', name.title())}", clone, count=1)
                text = text.replace(item, item.rstrip("\n") + "\n" + clone.rstrip("\n") + "\n", 1)
        path.write_text(text, encoding="utf-8")


@dataclass
class Run:
    wall: float
    cpu: float
    """User + system seconds of the process and every process it waited for (bash renders, workers)."""
    peak_rss_mib: float
    returncode: int
    output: str


def timed(argv: list[str]) -> Run:
    """Run ``argv``; wall time and the peak RSS of its largest process (wait4 of the child)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO)
    assert process.stdout is not None
    output = process.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode, output)


def median_run(argv: list[str], repeat: int) -> Run:
    timed(argv)  # warm-up: imports, page cache
    runs = [timed(argv) for _ in range(repeat)]
    middle = sorted(runs, key=lambda r: r.wall)[len(runs) // 2]
    middle.peak_rss_mib = max(r.peak_rss_mib for r in runs)
    middle.cpu = statistics.median(r.cpu for r in runs)
    return middle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 200, 500])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="auto", help="the -n of the xdist runs (default auto)")
    parser.add_argument("--no-xdist", action="store_true", help="time one process only")
    args = parser.parse_args()
    python = sys.executable
    seams = [python, "-m", "pytest", str(SEAMS), "-q", "-p", "no:cacheprovider"]
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; median of {args.repeat} "
          f"after one warm-up; TMPDIR={tempfile.gettempdir()}")
    print("# wall: elapsed seconds; CPU: user+system seconds of the run's processes (renders and workers "
          "included); +/service: CPU per service added since the previous size")
    print(f"| services | tests | wall | CPU | CPU/service | +/service | peak RSS | -n {args.workers} wall | "
          f"-n {args.workers} CPU | -n peak RSS (largest process) | render one: wall | render one: CPU |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    previous: tuple[int, float] | None = None
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="fleetgate-bench-") as tmp:
            fleet = generate(size, Path(tmp) / "fleet")
            one = median_run([*seams, f"--fleet={fleet}"], args.repeat)
            outcome = one.output.strip().splitlines()[-1] if one.output.strip() else ""
            if one.returncode != 0 or "failed" in outcome or "error" in outcome:
                print(one.output[-3000:], file=sys.stderr)
                raise SystemExit(f"the generated fleet of {size} services does not pass every seam")
            tests = re.search(r"(\d+) passed", outcome)
            count = tests.group(1) if tests else "?"
            marginal = f"{(one.cpu - previous[1]) / (size - previous[0]) * 1000:.1f} ms" if previous else "-"
            previous = (size, one.cpu)
            if args.no_xdist:
                many_cells = "- | - | -"
            else:
                many = median_run([*seams, f"--fleet={fleet}", "-n", args.workers], args.repeat)
                if many.returncode != 0:
                    print(many.output[-3000:], file=sys.stderr)
                    raise SystemExit(f"-n {args.workers}: the fleet of {size} services does not pass every seam")
                many_cells = f"{many.wall:.2f} s | {many.cpu:.2f} s | {many.peak_rss_mib:.0f} MiB"
            render = median_run([python, "-m", "fleetgate.cli", "render", "frank-zealot", "--fleet", str(fleet)], args.repeat)
            print(f"| {size} | {count} | {one.wall:.2f} s | {one.cpu:.2f} s | {one.cpu / size * 1000:.1f} ms | {marginal} | "
                  f"{one.peak_rss_mib:.0f} MiB | {many_cells} | {render.wall * 1000:.0f} ms | {render.cpu * 1000:.0f} ms |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
