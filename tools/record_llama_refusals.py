"""Record which argvs one llama-server build refuses, once, as data (llama_server_refusals_BUILD.json).

``python -m tools.record_llama_refusals PATH/TO/llama-server BUILD > fleetgate/engines/llama_server_refusals_BUILD.json``

Building an older llama-server takes minutes, too long for CI; so a build other than the test
environment's is started once, for every case below, with a model path that does not exist: it either
refuses its arguments ("error: invalid argument", "error while handling argument") and exits, or gets
past its parser to the model load. The suite then holds the seam to the record: the seam refuses a case
read as BUILD exactly when that build did (tests/test_llama_builds.py).

The cases: the flags of issue 20 (``--no-mmap``, ``--draft-max``, ``--no-webui``/``--no-ui``, ``-dio``/
``--load-mode dio``, ``--draft-n-max``) and every flag name whose state differs between BUILD and 11434
in the tables (llama_server_builds.json), each with a value its handler takes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from fleetgate.engines.llama_builds import Variant, load_builds

__all__ = ["cases"]

ISSUE_CASES: tuple[tuple[str, ...], ...] = (
    ("--no-mmap",), ("--mmap",), ("--draft-max", "4"), ("--draft", "4"), ("--no-webui",), ("--no-ui",),
    ("-dio",), ("--direct-io",), ("--load-mode", "dio"), ("--load-mode", "none"), ("--draft-n-max", "4"),
    ("--spec-draft-n-max", "4"), ("--cache-ram-mib", "5"), ("--ctx-size", "4096"), ("--ctx-size", "abc"),
    ("--host=0.0.0.0",),
)
# Values that a handler of the kind takes without looking further (no file, no device is opened at parse).
_VALUE = {"int": "1", "string": "x", "string2": "1"}


def _args(name: str, variant: Variant) -> tuple[str, ...] | None:
    if not variant.takes_value or name in variant.neg:
        return (name,)
    if variant.value == "string" and not variant.enum:
        return None  # what a free string does (a path, a device, a template) is not the parser's business
    value = variant.enum[0] if variant.enum else _VALUE[variant.value]
    return (name, value, value) if variant.value == "string2" else (name, value)


def cases(build: int) -> list[tuple[str, ...]]:
    builds = load_builds()
    resolved = builds.resolve(build)
    if resolved is None:
        raise SystemExit(f"no table for build {build}")
    found = list(ISSUE_CASES)
    here = {n: v for v in builds.at(resolved.sample) for n in v.all_names}
    there = {n: v for v in builds.at(11434) for n in v.all_names}
    for name in sorted(set(here) ^ set(there) | {n for n in here if n in there and (here[n].removed is None)
                                                 != (there[n].removed is None)}):
        variant = here.get(name) or there[name]
        args = _args(name, variant)
        if args is not None and args not in found and not name.startswith(("-h", "--help", "--usage", "--version")):
            found.append(args)
    return found


def run_case(binary: str, args: tuple[str, ...], port: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        command = [binary, "-m", os.path.join(home, "absent.gguf"), "--host", "127.0.0.1", "--port", str(port), *args]
        done = subprocess.run(command, capture_output=True, timeout=60, check=False,
                              env={"PATH": "/usr/bin:/bin", "HOME": home})
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    refused = "error: invalid argument" in output or "error while handling" in output
    started = "failed to load model" in output or "llama_server: initializing" in output or "loading model" in output
    lines = [line for line in output.splitlines() if "error" in line.lower()]
    return {"args": list(args), "outcome": "refused" if refused else "started" if started else "unclear",
            "line": (lines[0] if lines else output.strip().splitlines()[-1] if output.strip() else "")[:300]}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: python -m tools.record_llama_refusals PATH/TO/llama-server BUILD\n")
        return 2
    binary, build = argv[1], int(argv[2])
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=False)
    record = {
        "build": build,
        "recorded_by": f"python -m tools.record_llama_refusals llama-server {build}",
        "binary": next((line.strip() for line in (version.stdout + version.stderr).splitlines() if "version" in line), ""),
        "cases": [run_case(binary, args, 18000 + i) for i, args in enumerate(cases(build))],
    }
    json.dump(record, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
