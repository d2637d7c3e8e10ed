"""The coverage gate: every failure-raising line of fleetgate/checks is executed by the suite's tests.

Run after ``coverage run -m pytest ...`` and ``coverage combine`` (tox's tests env does both):

    python -m tests.seams.coverage_gate [DATA_FILE]

The raise sites are found by reading the source (tests/seams/raise_sites.py: seam and live alike). A
site that no test executed fails the gate, named ``file:line`` with its code, because a failure branch
nobody has seen fire is a verdict nobody has checked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import coverage

from tests.seams.raise_sites import REPO, raise_sites


def unexecuted(data_file: Path) -> tuple[list[str], int]:
    """The raise sites no test executed (``file:line  codes``), and how many sites there are."""
    if not data_file.is_file():
        raise SystemExit(f"coverage gate: no coverage data at {data_file}: run the tests under `coverage run` "
                         "and `coverage combine` first")
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    measured = {Path(name).resolve(): set(data.lines(name) or ()) for name in data.measured_files()}
    sites = raise_sites()
    missing = [f"{site.where}  [{site.kind}] {' '.join(site.codes) or '(no code)'}"
               for site in sites if site.line not in measured.get(site.path.resolve(), set())]
    return missing, len(sites)


def main(argv: list[str]) -> int:
    data_file = Path(argv[0]) if argv else REPO / ".coverage"
    missing, total = unexecuted(data_file)
    print(f"coverage gate: {total - len(missing)} of {total} failure-raising lines of fleetgate/checks executed")
    for line in missing:
        print(f"  not executed by any test: {line}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
