"""deploy-payload names the file and line where bash set a stale default, however the default is spelt.

The catalogue (INC-76) shows the branch firing; here the location it reports is held to the line the stale value
was made on: a ``${VAR:=x}`` default, a default composed from another variable, a default in a sourced file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetgate.checks import get_check
from fleetgate.failure import Failure
from fleetgate.manifest import load_fleet
from fleetgate.render.rendered import load_service

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"
DEPLOY = "scripts/deploy.sh"
MMPROJ = "LLM_ZEALOT_MMPROJ=${LLM_ZEALOT_MMPROJ:-/home/dank/models/Ternary-Bonsai-2-9B-GGUF/mmproj-Q8_0.gguf}"
OLD = "/home/dank/models/Ternary-Bonsai-2-27B-GGUF/mmproj-Q8_0.gguf"


def _failure(tmp_path: Path, new: str, extra: dict[str, str] | None = None) -> Failure:
    target = tmp_path / "fleet"
    shutil.copytree(FLEET, target, symlinks=True)
    script = target / DEPLOY
    text = script.read_text(encoding="utf-8")
    assert text.count(MMPROJ) == 1
    script.write_text(text.replace(MMPROJ, new), encoding="utf-8")
    for name, content in (extra or {}).items():
        (target / name).write_text(content, encoding="utf-8")
    fleet = load_fleet(target / "fleet.toml")
    config = load_service(fleet, fleet.services["frank-zealot"])
    with pytest.raises(Failure) as raised:
        get_check("deploy-payload")(config)
    assert raised.value.code == "deploy-payload/other-payload"
    return raised.value


def _line(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line)


def test_an_assign_default_is_found_on_its_line(tmp_path: Path) -> None:
    failure = _failure(tmp_path, f': "${{LLM_ZEALOT_MMPROJ:={OLD}}}"')
    script = tmp_path / "fleet" / DEPLOY
    line = _line(script, ': "${LLM_ZEALOT_MMPROJ:=')
    assert failure.where == f"{script}:{line}"


def test_a_default_composed_from_another_variable_is_found_where_it_is_composed(tmp_path: Path) -> None:
    failure = _failure(tmp_path, "old=/home/dank/models/Ternary-Bonsai-2-27B-GGUF\n"
                                 "LLM_ZEALOT_MMPROJ=${LLM_ZEALOT_MMPROJ:-$old/mmproj-Q8_0.gguf}")
    script = tmp_path / "fleet" / DEPLOY
    line = _line(script, "LLM_ZEALOT_MMPROJ=${LLM_ZEALOT_MMPROJ:-$old/")
    assert failure.where == f"{script}:{line}"


def test_a_default_in_a_sourced_file_is_found_in_that_file(tmp_path: Path) -> None:
    failure = _failure(tmp_path, 'source "$here/deploy.defaults"',
                       {"scripts/deploy.defaults": f"# the 3090's payload\nLLM_ZEALOT_MMPROJ=${{LLM_ZEALOT_MMPROJ:-{OLD}}}\n"})
    assert failure.where == f"{tmp_path / 'fleet' / 'scripts' / 'deploy.defaults'}:2"
