"""``fleetgate reference``: run the fleet's reference endpoint (a real llama-server) in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from fleetgate.cli import SUBCOMMANDS, resolve_fleet
from fleetgate.errors import InputError
from fleetgate.reference import ReferenceError, exit_cause, start
from fleetgate.secrets import scrub_argv

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reference",
        help=SUBCOMMANDS["reference"][1],
        description="Run the serve script of the fleet's 'reference' service for real, wait for /health, "
        "prove the "
        "process runs the argv the seams render, and serve until interrupted. Then: "
        "pytest live/ --endpoint reference",
    )
    parser.add_argument("--fleet", metavar="PATH", help="fleet manifest (default: as for fleetgate render)")
    parser.add_argument("--service", default="reference", help="the service to run (default: reference)")
    parser.add_argument("--port", type=int, help="listen on this loopback port instead of the declared one")
    parser.add_argument("--log", metavar="FILE", help="llama-server's log (default: a temporary file)")
    parser.add_argument(
        "--wait", type=float, default=60.0, metavar="SECONDS", help="bound on startup (default 60)"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    fleet = resolve_fleet(args.fleet)
    if args.service not in fleet.services:
        raise InputError(
            fleet.path, None, f"no service {args.service!r}; expected one of: {', '.join(fleet.services)}"
        )
    log = (
        Path(args.log)
        if args.log
        else Path(tempfile.mkdtemp(prefix="fleetgate-reference-")) / "llama-server.log"
    )
    try:
        server = start(fleet, fleet.services[args.service], port=args.port, log=log, wait=args.wait)
    except ReferenceError as exc:
        print(f"fleetgate reference: {exc}", file=sys.stderr)
        return 1
    stop = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(
        f"reference: {server.url} (pid {server.pid}, healthy in {server.started_in:.1f} s, log {server.log})"
    )
    print(f"  runs: {' '.join(scrub_argv(server.argv))}")
    base = "" if args.port is None else f" --base-url {server.url}"
    print(f"  check it: pytest live/ --endpoint {args.service}{base}")
    try:
        while not stop and server.process.poll() is None:
            time.sleep(0.2)
    finally:
        code = server.process.poll()
        server.stop()
    if code is not None:
        said = exit_cause(code) or f"exited {code}"
        print(f"fleetgate reference: llama-server {said}; log {server.log}", file=sys.stderr)
        return 1
    return 0
