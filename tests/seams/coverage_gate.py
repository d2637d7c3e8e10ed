"""The coverage gate: every failure-raising line of fleetgate/checks built its failure in one of the suite's tests.

Run around the tests (tox's tests env does), with ``FLEETGATE_RAISE_LOG`` naming the same directory:

    python -m tests.seams.coverage_gate --clear DIR   # before: an empty record
    FLEETGATE_RAISE_LOG=DIR pytest -n 2
    python -m tests.seams.coverage_gate DIR            # after: the gate

The raise sites are found by reading the source (tests/seams/raise_sites.py: seam and live alike); where each
failure was built, and with which code, is recorded by every pytest process of the run (tests/seams/raise_log.py). A
site that built no failure in any test fails the gate, named ``file:line`` with its code, because a failure branch
nobody has seen fire is a verdict nobody has checked. So does a failure whose code no raise site on its stack names
(``misread``): the log says which code each site really built, and a site the reader cannot read (a factory it does not
know, as ``attempt_seam`` once was) shows there as a code built where the reader sees none.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from fleetgate.checks import REGISTRY, TRANSPORT_CODES, load_checks
from tests.seams.raise_log import built, recorded
from tests.seams.raise_sites import CHECKS, Site, endpoint_sites, own_codes, raise_sites


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


def _the_clients(code: str, own: set[str]) -> bool:
    """A transport code the endpoint client builds for any live check (no site of the check names it)."""
    check = REGISTRY.get(code.split("/", 1)[0])
    return (check is not None and check.kind == "live" and code.split("/", 1)[1] in TRANSPORT_CODES
            and code not in own)


def misread(directory: Path, sites: list[Site] | None = None) -> list[str]:
    """The failures the recorded run built whose code no raise site on their stack names (``file:line  code``, the
    innermost line of fleetgate/checks): the reader's code-to-site map held to the codes the sites really built. A
    failure a test made by calling ``Check.fail`` itself (no check module on its stack) is none of a site's."""
    load_checks()
    sites = [*(raise_sites() if sites is None else sites), *endpoint_sites()]
    by_line: dict[tuple[Path, int], list[Site]] = {}
    for site in sites:
        by_line.setdefault((site.path.resolve(), site.line), []).append(site)
    own = own_codes()
    registry = (CHECKS / "__init__.py").resolve()
    found = set()
    for code, stack in built(directory):
        outside = [where for where in stack if where[0] != registry]
        if not outside or _the_clients(code, own):
            continue
        if not any(code in site.codes for where in stack for site in by_line.get(where, [])):
            found.add(f"{outside[0][0].name}:{outside[0][1]}  {code}")
    return sorted(found)


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
    unread = misread(Path(argv[0]))
    for line in unread:
        print(f"  a failure was built here with a code no raise site on its stack names (the reader missed it): {line}")
    return 1 if missing or unread else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
