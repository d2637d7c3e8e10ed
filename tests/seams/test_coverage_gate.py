"""The coverage gate's record: a process that builds a failure records its raise site, and the gate names every
site that built none (tests/seams/raise_log.py, tests/seams/coverage_gate.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.seams import coverage_gate
from tests.seams.raise_log import built as failures_built
from tests.seams.raise_log import recorded
from tests.seams.raise_sites import REPO, raise_sites

ENTRY = REPO / "fixtures" / "branches" / "service-ports-unique.duplicate.toml"
CODES = {"service-ports-unique/duplicate", "co-residence-fits/over-card", "docs-index/index-status",
         "vllm-start-headroom/beside-engine",
         # the example fleet's engine-auth failures are built too, then waived (fleet.toml [[waivers]])
         "engine-auth/no-key"}

# A process of its own, recording as every pytest process of the tests env does: the mutation's seams run, and
# its failures are built.
SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.seams.raise_log import install
install(Path(sys.argv[2]))
from fleetgate.incidents import apply, load_catalogue
from fleetgate.runner import run_seams
entry = next(e for e in load_catalogue(Path(sys.argv[3]).parent) if e.path.name == Path(sys.argv[3]).name)
codes = sorted(o.code for o in run_seams(apply(entry, Path(sys.argv[1]) / "fixtures" / "fleet", Path(sys.argv[4]))) if o.code)
print(" ".join(codes))
"""


def test_the_record_holds_the_sites_that_built_a_failure_and_the_gate_names_the_rest(tmp_path: Path) -> None:
    record = tmp_path / "record"
    assert coverage_gate.main(["--clear", str(record)]) == 0
    with pytest.raises(SystemExit, match="no record at"):
        coverage_gate.unbuilt(record)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO), str(record), str(ENTRY), str(tmp_path / "fleet")],
                          capture_output=True, text=True, timeout=120, check=True)
    assert set(done.stdout.split()) == CODES, done.stdout + done.stderr
    built = recorded(record)
    sites = raise_sites()
    fired = {site for site in sites if (site.path.resolve(), site.line) in built}
    # each code the run raised was built at a site that names it; no site of another code was recorded
    assert {code for site in fired for code in site.codes} >= CODES
    assert all(set(site.codes) & CODES for site in fired), [s.where for s in fired]
    missing, total = coverage_gate.unbuilt(record)
    assert total == len(sites)
    assert len(missing) == total - len(fired)
    assert not any(site.where in line for site in fired for line in missing)
    # the log's code beside each stack agrees with the reader's map: every failure's code is named by a site on its stack
    assert {code for code, _ in failures_built(record)} == CODES
    assert coverage_gate.misread(record) == []


def test_a_failure_built_where_the_reader_sees_another_code_fails_the_gate(tmp_path: Path) -> None:
    """Issue 31: the reader once read serve-script-renders' ``refused`` (an ``attempt_seam``) as a shared helper's
    branch. A code the log saw built at a site whose code the reader reads otherwise is such a misreading, named by the
    gate with its line."""
    (site,) = [s for s in raise_sites() if s.codes == ("unit-exec-args/refused",)]
    record = tmp_path / "record"
    record.mkdir()
    (record / "1.lines").write_text(f"serve-script-renders/refused\t{site.path}:{site.line}\n"
                                    f"unit-exec-args/refused\t{site.path}:{site.line}\n", encoding="utf-8")
    assert coverage_gate.misread(record) == [f"seam_units.py:{site.line}  serve-script-renders/refused"]
    # a failure a test made by calling Check.fail itself has no site of a check module on its stack: none of the gate's
    registry = site.path.parent / "__init__.py"
    (record / "2.lines").write_text(f"example-refusal/known\t{registry}:1\n", encoding="utf-8")
    assert coverage_gate.misread(record) == [f"seam_units.py:{site.line}  serve-script-renders/refused"]
