"""The deploy probes table is read as scripts/deploy.sh reads it; bad lines are one line naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.deploy import read_probes
from fleetgate.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def test_the_example_fleets_table() -> None:
    probes = read_probes(REPO / "fixtures" / "fleet" / "scripts" / "deploy.probes")
    assert sorted(probes) == ["frank-archon", "frank-dragoon", "frank-medium", "frank-tts", "frank-zealot"]
    zealot = probes["frank-zealot"]
    assert (zealot.scheme, zealot.host, zealot.port, zealot.path, zealot.budget_s) == ("http", "127.0.0.1", 7771, "/health", 600)
    assert zealot.where.endswith("deploy.probes:8")


@pytest.mark.parametrize(("line", "message"), [
    ("frank-zealot http://127.0.0.1:7771/health", "expected 'SERVICE URL BUDGET_SECONDS'"),
    ("frank-zealot http://127.0.0.1:7771/health ten", "expected 'SERVICE URL BUDGET_SECONDS'"),
    ("frank-zealot tcp://127.0.0.1:7771 600", "expected an http:// or https:// URL"),
    ("frank-zealot http://127.0.0.1:77x1/health 600", "expected an http:// or https:// URL"),
])
def test_a_bad_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    table = tmp_path / "deploy.probes"
    table.write_text(f"# probes\n\n{line}\n", encoding="utf-8")
    with pytest.raises(InputError) as raised:
        read_probes(table)
    assert raised.value.line == 3
    assert message in str(raised.value)


def test_a_second_probe_for_one_service_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "deploy.probes"
    table.write_text("a http://127.0.0.1:1/health 1\na http://127.0.0.1:2/health 1\n", encoding="utf-8")
    with pytest.raises(InputError) as raised:
        read_probes(table)
    assert raised.value.line == 2
