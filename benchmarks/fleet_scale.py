"""How fleetgate scales with the size of a fleet: generated fleets of N services, timed end to end, this
checkout beside a previous design (``--baseline REV``) in the same run.

A fleet of N services is the example fleet (fixtures/fleet) plus clones of its services under new
names and ports until there are N: each clone gets its own copy of the directories its unit, env
file and serve script live in, with the deployed paths in them (and its port) rewritten, so every
clone renders on its own the way the original does. For each size and each design the benchmark runs,
as separate processes, and reports the median of ``--repeat`` runs after one warm-up:

- ``pytest seams/ --fleet F`` (one process; with ``--xdist``, also ``-n auto``);
- ``fleetgate render SERVICE --fleet F`` (one service's answer, a process of its own: interpreter start,
  imports and the render);

and, once per design, one service's render inside a warm process (``render()`` called 20 times).
CPU is user + system time of the process and of every process it waited for (the renders' sandboxes,
workers, the sandbox parent: a process waits for it at exit). It checks that every generated fleet passes
every seam (a benchmark of failing runs would time the wrong thing). It is not a test: run it by hand, on
a quiet machine where you can.

    python benchmarks/fleet_scale.py --sizes 10 50 200 500 --repeat 3 --baseline e36eddb

The baseline is ``git archive REV`` unpacked in a temporary directory and imported from there (this
checkout's editable install set aside for those runs only).
"""

from __future__ import annotations

import argparse
import json
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
    # A clone runs where its original runs, on the same cards: declared never to run beside any other service of its
    # host, so that the clones are not a co-residence the example fleet does not have (vllm-start-headroom's finding).
    on_host: dict[str, list[str]] = {}
    for name in [*originals, *(clone for _, clone, _, _ in clones)]:
        source = next((s for s, c, _, _ in clones if c == name), name)
        on_host.setdefault(data["services"][source]["host"], []).append(name)
    for i, (source, name, _, _) in enumerate(clones):
        others = [other for other in on_host[data["services"][source]["host"]] if other != name]
        header, _, rest = extra[i].partition("\n")
        extra[i] = f"{header}\nexclusive_with = {json.dumps(others)}\n{rest}"
    # A waiver names its service: a clone of a waived service is waived the same way (its original's finding).
    for waiver in data.get("waivers", []):
        for source, name, _, _ in clones:
            if waiver.get("service") == source:
                extra.append("[[waivers]]\n" + "".join(
                    f"{key} = {_toml_value(name if key == 'service' else value)}\n" for key, value in waiver.items()))
    manifest.write_text(text + "\n" + "\n".join(extra), encoding="utf-8")
    _register_clones(target, data, clones)
    return manifest


def _toml_value(value: object) -> str:
    """A waiver's value as TOML writes it: strings quoted, dates bare."""
    return json.dumps(value) if isinstance(value, str) else str(value)


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
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=_ENV)
    assert process.stdout is not None
    output = process.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode, output)


WARM_UP = True
# Bytecode is written (as in a user's install): a PYTHONDONTWRITEBYTECODE of this shell would make every process
# compile every module again, and time that instead.
# The repository's conftest.py runs the suite's engine preflight (a llama-server started and stopped) in every pytest
# session here: fleetgate's own test suite's cost, not the seams', so it is marked done.
_ENV = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")},
        "FLEETGATE_ENGINE_PREFLIGHT": "1"}


def median_run(argv: list[str], repeat: int) -> Run:
    if WARM_UP:
        timed(argv)  # warm-up: imports, page cache
    runs = [timed(argv) for _ in range(repeat)]
    middle = sorted(runs, key=lambda r: r.wall)[len(runs) // 2]
    middle.peak_rss_mib = max(r.peak_rss_mib for r in runs)
    middle.cpu = statistics.median(r.cpu for r in runs)
    return middle


# Imports fleetgate from ROOT (this checkout's editable install set aside), then runs what follows.
_LAUNCH = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]; "
           "sys.path.insert(0, {root!r}); ")
_IN_PROCESS = """
import resource, sys, time
from fleetgate.manifest import load_fleet
from fleetgate.render.dispatch import render
from fleetgate import sandbox
fleet = load_fleet(sys.argv[1])
service = fleet.services[sys.argv[2]]
def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    parent = getattr(sandbox, "_PARENT", None)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + (parent.cpu_seconds() if parent else 0.0)
render(fleet, service)
walls, cpus = [], []
for _ in range(20):
    c, w = cpu(), time.perf_counter()
    render(fleet, service)
    walls.append(time.perf_counter() - w)
    cpus.append(cpu() - c)
walls.sort(); cpus.sort()
print(f"{walls[10] * 1000:.1f} {cpus[10] * 1000:.1f}")
"""


@dataclass
class Design:
    name: str
    root: Path

    def python(self) -> list[str]:
        return [sys.executable, "-c", _LAUNCH.format(root=str(self.root))]

    def seams(self, fleet: Path, extra: list[str]) -> list[str]:
        code = _LAUNCH.format(root=str(self.root)) + "import pytest; sys.exit(pytest.main(sys.argv[1:]))"
        return [sys.executable, "-c", code, str(self.root / "seams"), "-q", "-p", "no:cacheprovider", f"--fleet={fleet}",
                *extra]

    def render_cli(self, fleet: Path) -> list[str]:
        code = _LAUNCH.format(root=str(self.root)) + "from fleetgate.cli import main; sys.exit(main(sys.argv[1:]))"
        return [sys.executable, "-c", code, "render", "frank-zealot", "--fleet", str(fleet)]

    def render_in_process(self, fleet: Path) -> tuple[float, float]:
        code = _LAUNCH.format(root=str(self.root)) + _IN_PROCESS
        done = subprocess.run([sys.executable, "-c", code, str(fleet), "frank-zealot"], capture_output=True, text=True,
                              cwd=REPO, check=True, env=_ENV)
        wall, cpu = done.stdout.split()
        return float(wall), float(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 200, 500])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="auto", help="the -n of the xdist runs (default auto)")
    parser.add_argument("--xdist", action="store_true", help="time -n WORKERS runs too")
    parser.add_argument("--baseline", metavar="REV", help="a git revision to time beside this checkout (git archive)")
    parser.add_argument("--candidate", metavar="REV", help="time this git revision (git archive) instead of the "
                        "checkout itself, so that editing the checkout during a long run changes nothing")
    parser.add_argument("--no-warm-up", action="store_true", help="no warm-up run before the timed ones")
    args = parser.parse_args()
    global WARM_UP
    WARM_UP = not args.no_warm_up
    with tempfile.TemporaryDirectory(prefix="fleetgate-bench-base-") as base_dir:
        designs = [Design("this checkout", REPO)]
        if args.candidate:
            designs = [Design(args.candidate, _unpacked(args.candidate, Path(base_dir) / "candidate"))]
        if args.baseline:
            designs.append(Design(f"baseline {args.baseline}", _unpacked(args.baseline, Path(base_dir) / "baseline")))
        return _bench(args, designs)


def _unpacked(revision: str, target: Path) -> Path:
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def _bench(args: argparse.Namespace, designs: list[Design]) -> int:
    warm = "after one warm-up" if WARM_UP else "no warm-up"
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; median of {args.repeat} "
          f"{warm}; TMPDIR={tempfile.gettempdir()}")
    print("# wall: elapsed seconds; CPU: user+system seconds of the run's processes (renders, sandbox parent and "
          "workers included); +/service: CPU per service added since the previous size")
    xdist_head = f" -n {args.workers} wall | -n {args.workers} CPU |" if args.xdist else ""
    print(f"| design | services | tests | wall | CPU | CPU/service | +/service | peak RSS |{xdist_head} "
          "render one (CLI): wall | render one (CLI): CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.xdist else "") + "---:|---:|")
    previous: dict[str, tuple[int, float]] = {}
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="fleetgate-bench-") as tmp:
            fleet = generate(size, Path(tmp) / "fleet")
            for design in designs:
                one = median_run(design.seams(fleet, []), args.repeat)
                outcome = one.output.strip().splitlines()[-1] if one.output.strip() else ""
                if one.returncode != 0 or re.search(r"\d+ (failed|errors?)\b", outcome):
                    print(one.output[-3000:], file=sys.stderr)
                    raise SystemExit(f"{design.name}: the generated fleet of {size} services does not pass every seam")
                tests = re.search(r"(\d+) passed", outcome)
                count = tests.group(1) if tests else "?"
                last = previous.get(design.name)
                marginal = f"{(one.cpu - last[1]) / (size - last[0]) * 1000:.1f} ms" if last else "-"
                previous[design.name] = (size, one.cpu)
                many_cells = ""
                if args.xdist:
                    many = median_run(design.seams(fleet, ["-n", args.workers]), args.repeat)
                    if many.returncode != 0:
                        print(many.output[-3000:], file=sys.stderr)
                        raise SystemExit(f"{design.name} -n {args.workers}: the fleet of {size} services does not pass")
                    many_cells = f" {many.wall:.2f} s | {many.cpu:.2f} s |"
                render = median_run(design.render_cli(fleet), args.repeat)
                print(f"| {design.name} | {size} | {count} | {one.wall:.2f} s | {one.cpu:.2f} s | "
                      f"{one.cpu / size * 1000:.1f} ms | {marginal} | {one.peak_rss_mib:.0f} MiB |{many_cells} "
                      f"{render.wall * 1000:.0f} ms | {render.cpu * 1000:.0f} ms |", flush=True)
    with tempfile.TemporaryDirectory(prefix="fleetgate-bench-") as tmp:
        fleet = generate(6, Path(tmp) / "fleet")
        print("\n| design | one service's render in a warm process (frank-zealot, median of 20): wall | CPU |")
        print("|---|---:|---:|")
        for design in designs:
            wall, cpu = design.render_in_process(fleet)
            print(f"| {design.name} | {wall:.1f} ms | {cpu:.1f} ms |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
