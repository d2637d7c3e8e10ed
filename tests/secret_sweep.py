"""The secret sweep: no secret the suite uses (tests/secrets_used.py) is in anything the suite's runs wrote as output.

Run after the tests over their ``--basetemp`` (tox's tests env does), like the coverage gate:

    python -m tests.secret_sweep --clear DIR   # before: DIR made, its parents too (pytest makes none)
    pytest -n 2 --basetemp=DIR
    python -m tests.secret_sweep DIR...        # after: the sweep

DIR lies outside the checkout: pytester's runs inside it would find this repository's pyproject.toml and conftest.py.

Each test's own files are there (pytest keeps every ``tmp_path`` of the last run). Which of them are outputs is told by
what pytest and fleetgate write, not by which test wrote them, so a new test's outputs are swept without a word here:

- JUnit XML (``--junitxml``): an ``.xml`` file whose root is ``<testsuites>`` or ``<testsuite>``;
- pytest-reportlog's JSON lines (``--report-log``): a file whose first line is a JSON object with ``$report_type``;
- the fleetgate report (``--fleetgate-report``): a ``.json`` file whose object has ``fleetgate_report``;
- the live checks' transcripts: every file under a ``STEM-transcripts`` directory (fleetgate.plugin's
  ``transcripts_dir``, beside the report);
- a file fleetgate's CLI says it wrote in its first line (``fleetgate init``'s fleet.toml, ``fleetgate profile``'s);
- pytester's outputs: a run's ``stdout`` and ``stderr``, which pytester keeps side by side in the test's directory;
- the report sections that held a secret, which this module's plugin records (``SECTIONS``, below).

Everything else a test wrote is an input (a fleet's env file or unit holding a key, to prove it scrubbed) or an
engine's own log (the engine is given its key), and is not read. A finding is ``file:line``, the output's kind, and the
secret's name with a masked form: the sweep's own output is an output too.

The plugin (``install``, called by tests/conftest.py) reads the captured output and the longrepr of every test report
in the controlling process (xdist's workers send theirs there). A report that holds a secret fails the session and is
recorded, masked, in ``SECTIONS`` at the top of the basetemp, which the sweep then names. Nothing in its hooks raises.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.secrets_used import found_in

SECTIONS = "secret-sweep-report-sections.txt"
"""The plugin's record of every test report section that held a secret, one finding a line, masked."""

_WRITTEN_BY = ("# Written by `fleetgate init`", "# written by `fleetgate profile")
"""The first words of a file fleetgate's CLI wrote (fleetgate/init/manifest_text.py, fleetgate/cli/profile.py)."""

_HEAD = 4096
"""How much of a file its kind is told by."""


def kind_of(path: Path, root: Path) -> str | None:
    """What output ``path`` (under ``root``) is, or None for an input."""
    if path.name == SECTIONS:
        return "report sections"
    if any(part.endswith("-transcripts") for part in path.relative_to(root).parts[:-1]):
        return "transcript"
    if path.name in ("stdout", "stderr") and (path.parent / ("stderr" if path.name == "stdout" else "stdout")).is_file():
        return "pytester output"
    try:
        with path.open("rb") as file:
            head = file.read(_HEAD).decode("utf-8", errors="replace")
    except OSError:
        return None
    start = head.lstrip()
    if path.suffix == ".xml" and start.startswith("<?xml"):
        start = start.partition("?>")[2].lstrip()
    if path.suffix == ".xml" and start.startswith(("<testsuites", "<testsuite")):
        return "JUnit"
    if start.startswith("{") and '"$report_type"' in head.partition("\n")[0]:
        return "report log"
    if path.suffix == ".json" and start.startswith("{") and '"fleetgate_report"' in head:
        return "fleetgate report" if _is_report(path) else None
    if head.startswith(_WRITTEN_BY):
        return "fleetgate CLI output"
    return None


def _is_report(path: Path) -> bool:
    try:
        document = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and "fleetgate_report" in document


def outputs(roots: Iterable[Path]) -> Iterator[tuple[Path, str]]:
    """Every output under ``roots`` with its kind, in path order; links are not followed (a test's link to an input
    outside is no output)."""
    for root in roots:
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = Path(directory) / name
                if path.is_symlink() or not path.is_file():
                    continue
                kind = kind_of(path, root)
                if kind is not None:
                    yield path, kind


def findings(path: Path, kind: str) -> list[str]:
    """``file:line: kind holds NAME (masked)`` for each secret of each line of ``path``; a report sections record is
    a finding each line, as it stands (the plugin wrote it masked)."""
    found = []
    with path.open(encoding="utf-8", errors="replace") as file:
        for number, line in enumerate(file, 1):
            if kind == "report sections":
                found.append(f"{path}:{number}: a test report held a secret: {line.rstrip()}")
                continue
            for name, shown in found_in(line):
                found.append(f"{path}:{number}: {kind} holds {name} ({shown})")
    return found


def sweep(roots: list[Path]) -> tuple[list[str], dict[str, int]]:
    """The findings under ``roots`` and how many outputs of each kind were read."""
    found: list[str] = []
    counts: dict[str, int] = {}
    for path, kind in outputs(roots):
        counts[kind] = counts.get(kind, 0) + 1
        found += findings(path, kind)
    return found, counts


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--clear":
        # pytest empties an explicit basetemp itself, but makes no parent of it
        shutil.rmtree(argv[1], ignore_errors=True)
        Path(argv[1]).mkdir(parents=True)
        return 0
    if not argv or any(arg.startswith("-") for arg in argv):
        print("usage: python -m tests.secret_sweep [--clear DIR | DIR...]", file=sys.stderr)
        return 2
    roots = [Path(arg) for arg in argv]
    missing = [str(root) for root in roots if not root.is_dir()]
    if missing:
        print(f"secret sweep: no directory {', '.join(missing)}: run the tests with --basetemp=DIR first", file=sys.stderr)
        return 2
    found, counts = sweep(roots)
    read = ", ".join(f"{counts[kind]} {kind}" for kind in sorted(counts)) or "none"
    print(f"secret sweep: {sum(counts.values())} outputs read ({read}), {len(found)} secrets found")
    for line in found:
        print(f"  {line}")
    return 1 if found else 0


# -- the plugin: test reports' captured output and longrepr, in the controlling process ----------------------------


class ReportSweep:
    """Every test report's sections and longrepr, held to no secret. Runs where the reports end up: the controlling
    process under xdist (the workers' reports reach it), the one process without."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.found: list[str] = []
        self.errors: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        try:
            self.found += report_findings(report)
        except Exception as exc:  # a report hook that raises is pytest's INTERNALERROR: say it at the end instead
            self.errors.append(f"{report.nodeid}: {type(exc).__name__}: {exc}")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        try:
            self.found += report_findings(report)
        except Exception as exc:
            self.errors.append(f"{report.nodeid}: {type(exc).__name__}: {exc}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        try:
            if (self.found or self.errors) and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            if self.found:
                self._record()
        except Exception as exc:
            self.errors.append(f"pytest_sessionfinish: {type(exc).__name__}: {exc}")

    def _record(self) -> None:
        factory = getattr(self.config, "_tmp_path_factory", None)
        if factory is None:
            return
        # the basetemp this run uses (an explicit one is emptied on its first use: a record of an earlier run goes)
        target = Path(factory.getbasetemp()) / SECTIONS
        target.write_text("".join(f"{line}\n" for line in self.found), encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        try:
            if self.found:
                terminalreporter.section("secret sweep: a test report held a secret", sep="-", red=True)
                for line in self.found:
                    terminalreporter.write_line(line)
            if self.errors:
                terminalreporter.section("secret sweep: reports not read", sep="-", red=True)
                for line in self.errors:
                    terminalreporter.write_line(line)
        except Exception:  # the summary is the last word: nothing is left to tell of a failure here
            pass


_PHASES = ("setup", "call", "teardown")


def report_findings(report: pytest.TestReport | pytest.CollectReport) -> list[str]:
    """``nodeid [when] section:line: NAME (masked)`` for each secret in the report's captured sections and longrepr."""
    when = getattr(report, "when", "collect")
    # a report carries the sections of its item's earlier phases too (teardown's holds call's): each is read once, in
    # the report of its own phase
    texts = [(title, text) for title, text in report.sections
             if title.rpartition(" ")[2] == when or title.rpartition(" ")[2] not in _PHASES]
    if report.longrepr is not None:
        texts.append(("longrepr", report.longreprtext))
    found = []
    for title, text in texts:
        for number, line in enumerate(str(text).splitlines(), 1):
            for name, shown in found_in(line):
                found.append(f"{report.nodeid} [{when}] {title}:{number}: {name} ({shown})")
    return found


def install(config: pytest.Config) -> None:
    """Register the plugin where the reports end up: not in an xdist worker."""
    if not hasattr(config, "workerinput") and not config.pluginmanager.has_plugin("secret-sweep-reports"):
        config.pluginmanager.register(ReportSweep(config), "secret-sweep-reports")


def pytest_configure(config: pytest.Config) -> None:
    # for ``-p tests.secret_sweep`` (a run of the suite has it from tests/conftest.py)
    install(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
