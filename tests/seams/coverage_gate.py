"""The coverage gate: every failure-raising line of fleetgate/checks built its failure in one of the suite's tests.

Run around the tests (tox's tests env does), with ``FLEETGATE_RAISE_LOG`` naming the same directory:

    python -m tests.seams.coverage_gate --clear DIR   # before: an empty record
    FLEETGATE_RAISE_LOG=DIR pytest -n 2
    python -m tests.seams.coverage_gate DIR            # after: the gate

The raise sites are found by reading the source (tests/seams/raise_sites.py: seam and live alike); where each
failure was built is recorded by every pytest process of the run (tests/seams/raise_log.py). A site that built
no failure in any test fails the gate, named ``file:line`` with its code, because a failure branch nobody has
seen fire is a verdict nobody has checked.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.seams.raise_log import recorded
from tests.seams.raise_sites import raise_sites


def unbuilt(directory: Path) -> tuple[list[str], int]:
    """The raise sites that built no failure in the recorded run (``file:line  codes``), and how many sites there are."""
    if not directory.is_dir() or not any(directory.glob("*.lines")):
        raise SystemExit(f"coverage gate: no record at {directory}: run the tests with FLEETGATE_RAISE_LOG={directory} "
                         "first")
    built = recorded(directory)
    sites = raise_sites()
    missing = [f"{site.where}  [{site.kind}] {' '.join(site.codes) or '(no code)'}"
               for site in sites if (site.path.resolve(), site.line) not in built]
    return missing, len(sites)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--clear":
        shutil.rmtree(argv[1], ignore_errors=True)
        Path(argv[1]).mkdir(parents=True)
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m tests.seams.coverage_gate [--clear] DIR", file=sys.stderr)
        return 2
    missing, total = unbuilt(Path(argv[0]))
    print(f"coverage gate: {total - len(missing)} of {total} failure-raising lines of fleetgate/checks built their "
          "failure in a test")
    for line in missing:
        print(f"  no test built a failure here: {line}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
