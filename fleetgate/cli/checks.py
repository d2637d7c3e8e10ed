"""``fleetgate checks``: the registry in the terminal, so that docs never copy a count by hand."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from fleetgate.checks import REGISTRY, Check, load_all
from fleetgate.cli import SUBCOMMANDS

__all__ = ["code_lines", "counts", "register"]

KINDS = ("seam", "live", "host")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "checks",
        help=SUBCOMMANDS["checks"][1],
        description="List every registered check with its kind, subject and summary, or count them by kind.",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--counts", action="store_true", help="how many seam, live and host checks there are")
    what.add_argument("--codes", action="store_true",
                      help="every failure code each check declares, with what fired (what --deselect, waivers and "
                      "JUnit properties name)")
    parser.add_argument("--kind", choices=KINDS, help="only the checks of one kind")
    parser.set_defaults(func=_run)


def _registered() -> list[Check[Any]]:
    load_all()
    return sorted(REGISTRY.values(), key=lambda c: (KINDS.index(c.kind), c.name))


def counts(checks: list[Check[Any]]) -> list[str]:
    tally: Counter[str] = Counter(c.kind for c in checks)
    return [f"{tally.get(kind, 0)} {kind}" for kind in KINDS] + [f"{len(checks)} checks"]


def code_lines(checks: list[Check[Any]]) -> list[str]:
    """``CODE  what fired``, one line per declared code, checks in the listing's order."""
    codes = [(code, what) for c in checks for code, what in c.codes.items()]
    width = max((len(code) for code, _ in codes), default=0)
    return [f"{code:<{width}}  {what}" for code, what in codes]


def _run(args: argparse.Namespace) -> int:
    checks = _registered()
    if args.counts:
        for line in counts(checks):
            print(line)
        return 0
    shown = [c for c in checks if args.kind in (None, c.kind)]
    if args.codes:
        for line in code_lines(shown):
            print(line)
        return 0
    width = max(len(c.name) for c in shown)
    for c in shown:
        print(f"{c.kind:<5} {c.name:<{width}}  {c.subject:<14} {c.summary}")
    print()
    print("; ".join(counts(shown)))
    return 0
