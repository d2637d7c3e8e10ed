"""Each unit and Quadlet seam fails on its misconfiguration of the example fleet, with its own failure code,
and nothing else fails (the clean fleet passing every seam is tests/test_mutations.py's first test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.harness import Mutation, edit, failures, new_file

MEDIUM = "scripts/frank-medium.service"
ZEALOT = "scripts/frank-zealot.service"
QUADLET = "dankserver/frank-archon/quadlet/frank-archon.container"
ARCHON_ENV = "dankserver/frank-archon/frank-archon.env"

CASES: dict[str, tuple[list[Mutation], set[tuple[str, str]]]] = {
    "INC-35 no install target": (
        [edit(MEDIUM, "[Install]\nWantedBy=multi-user.target\n", "")],
        {("frank-medium", "unit-install/no-wanted-by")}),
    "B-UN-2 Quadlet in the system target": (
        [edit(QUADLET, "WantedBy=default.target", "WantedBy=multi-user.target")],
        {("frank-archon", "unit-install/wrong-target")}),
    "B-UN-1 User=root": (
        [edit(ZEALOT, "User=dank", "User=root")],
        {("frank-zealot", "unit-user/root")}),
    "B-UN-1 no User=": (
        [edit("scripts/frank-dragoon.service", "User=dank\n", "")],
        {("frank-dragoon", "unit-user/missing")}),
    "B-RAM-4 LimitMEMLOCK removed": (
        [edit(MEDIUM, "LimitMEMLOCK=infinity\n", "")],
        {("frank-medium", "unit-memlock/missing")}),
    "B-RAM-4 LimitMEMLOCK=8M": (
        [edit(MEDIUM, "LimitMEMLOCK=infinity", "LimitMEMLOCK=8M")],
        {("frank-medium", "unit-memlock/limited")}),
    "B-UN-2 no Restart=": (
        [edit(QUADLET, "Restart=on-failure\n", "")],
        {("frank-archon", "unit-restart/no-restart")}),
    "INC-53 optional EnvironmentFile=- in /tmp": (
        [new_file("scripts/frank-zealot.service.d/ptq1.conf",
                  "[Service]\nEnvironmentFile=-/tmp/zealot-arm-current.env\n")],
        {("frank-zealot", "unit-env-files/outside-repo")}),
    "B-SH-3 arguments to a script that takes none": (
        [edit(MEDIUM, "scripts/serve-frank-medium.sh\n", "scripts/serve-frank-medium.sh --ctx-size 262144\n")],
        {("frank-medium", "unit-exec-args/refused")}),
    "B-UN-5 two active services on one port": (
        [edit("fleet.toml", 'state = "undeployed"\nhost = "rtx3090"\nport = 7772', 'host = "rtx3090"\nport = 7771')],
        {("frank-zealot", "unit-ports/taken"), ("frank-tts", "unit-ports/taken")}),
    "INC-36 registry-prefixed Image=": (
        [edit(QUADLET, "Image=localhost/radiance-vllm:0.13.0-e060895", "Image=ghcr.io/radiance/vllm:0.13.0-e060895")],
        {("frank-archon", "quadlet-image/not-local-tag")}),
    "INC-79 no compile-cache volume": (
        [edit(QUADLET, "Volume=/home/dank/.cache/frank-archon:/root/.cache\n", "")],
        {("frank-archon", "quadlet-compile-cache/not-persisted")}),
    "INC-85 host model path to the container": (
        [edit(ARCHON_ENV, "SNAP=/models/", "SNAP=/home/dank/models/")],
        {("frank-archon", "container-paths/not-mounted")}),
    "B-VL-14 host drafter path to the container": (
        [edit(ARCHON_ENV, "SPEC_MODEL=/models/", "SPEC_MODEL=/home/dank/models/")],
        {("frank-archon", "container-paths/not-mounted")}),
    "B-VL-16 template not committed": (
        [edit(ARCHON_ENV, "qwen-sharp-v22.5.0.jinja", "qwen-sharp-v22.6.0.jinja")],
        {("frank-archon", "container-paths/missing-in-repo")}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unit_seam_fails_on_its_mutation(case: str, pytester: pytest.Pytester, tmp_path: Path) -> None:
    mutations, expected = CASES[case]
    found = failures(pytester, tmp_path, *mutations)
    assert set(found) == expected, "\n\n".join(found.values())
    for text in found.values():
        for label in ("where:", "observed:", "expected:", "fix:"):
            assert f"  {label}" in text
        assert "Traceback" not in text
