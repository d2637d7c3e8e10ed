"""The fleetgate command: what a service runs, and one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fleetgate.cli import main

FLEET = Path(__file__).resolve().parents[1] / "fixtures" / "fleet"


def test_render_prints_the_argv_the_serve_script_builds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "frank-medium", "--fleet", str(FLEET / "fleet.toml")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "llama-server \\"
    assert "    --tensor-split 35,30 \\" in out.splitlines()
    assert "    --spec-type draft-mtp \\" in out.splitlines()


def test_render_header_names_the_unit_or_says_there_is_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "frank-medium", "--fleet", str(FLEET / "fleet.toml")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "# frank-medium: scripts/serve-frank-medium.sh as frank-medium.service"
    assert main(["render", "reference", "--fleet", str(FLEET / "fleet.toml")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "# reference: scripts/serve-reference.sh (no unit declared)"


def test_render_json_names_where_each_variable_was_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "frank-zealot", "--fleet", str(FLEET / "fleet.toml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["argv"][0] == "llama-server"
    assert data["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert data["inputs"]["CTX_SIZE"]["where"].endswith("scripts/frank-zealot.env:13")
    assert data["notes"] == []  # nothing assumed: every file the render needed is the repository's


def test_render_says_what_it_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    fleet = Path(__file__).resolve().parents[1] / "fixtures" / "fleets" / "unit-bash-c" / "fleet.toml"
    assert main(["render", "mistral", "--fleet", str(fleet)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# note: ")]
    assert notes == [
        "# note: /opt/llama.cpp/build/bin: the repository does not hold this directory, which the script enters (cd); "
        "rendered in an empty placeholder of it",
        "# note: /opt/llama.cpp/build/bin/llama-server: the engine is started by this path, which the repository does "
        "not hold; stubbed there",
    ]


def test_an_unknown_service_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "frank-nope", "--fleet", str(FLEET / "fleet.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no service 'frank-nope'; expected one of: frank-medium" in err


def test_a_malformed_env_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(FLEET, fleet)
    env = fleet / "scripts" / "frank-medium.env"
    env.write_text(env.read_text() + 'BROKEN="never closed\n')
    assert main(["render", "frank-medium", "--fleet", str(fleet / "fleet.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fleetgate: {env}:")
    assert "unterminated quote" in err and err.count("\n") == 1


def test_render_prints_every_value_beside_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "frank-medium", "--fleet", str(FLEET / "fleet.toml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "    --reasoning-budget -1 \\" in lines
    assert not any(line.strip() in ("-1", "-1 \\") for line in lines)
    # Every line after the binary is one flag and its values, as the engine reads them.
    assert all(line.lstrip().startswith("-") for line in lines[2:])


def test_argv_lines_without_an_option_table_treat_negative_numbers_as_values() -> None:
    from fleetgate.cli import argv_lines

    argv = ["engine", "--budget", "-1", "--scale", "-0.5", "-v", "--pair", "a", "b", "--exp", "-1e3"]
    assert argv_lines(argv) == ["engine", "--budget -1", "--scale -0.5", "-v", "--pair a b", "--exp -1e3"]


def test_a_broken_pyproject_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\nfleetgate_fleet = 'x'\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["render", "frank-medium"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetgate: pyproject.toml:1: not valid TOML") and err.count("\n") == 1


def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    # `fleetgate render X | head -1`: the reader goes away after one line.
    command = (f"{sys.executable} -c 'from fleetgate.cli import main; raise SystemExit(main())' render frank-medium "
               f"--fleet {FLEET / 'fleet.toml'} --json | head -1")
    done = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", command], capture_output=True, timeout=120, check=False)
    assert done.stdout == b"{\n"
    assert done.stderr == b""


def test_checks_counts_the_seams_the_docs_list_codes_for(capsys: pytest.CaptureFixture[str]) -> None:
    """`fleetgate checks --counts` is what the README points at for counts: it must agree with docs/seams.md's
    code table, an independent record (one row per failure code)."""
    assert main(["checks", "--counts"]) == 0
    printed = dict(reversed(line.split(" ", 1)) for line in capsys.readouterr().out.splitlines())
    page = (Path(__file__).parent.parent / "docs" / "seams.md").read_text(encoding="utf-8")
    codes = re.findall(r"^\| `([A-Za-z-]+)/[a-z-]+` \|", page, flags=re.MULTILINE)
    # The seams that declare no code (they only ever say "not judged") are listed above the table, one per line.
    codeless = re.findall(r"^- `([a-z-]+)` \(.*not judged", page, flags=re.MULTILINE)
    assert codeless == ["profile-declared"]
    assert int(printed["seam"]) == len(set(codes) | set(codeless))
    assert int(printed["checks"]) == sum(int(printed[kind]) for kind in ("seam", "live", "host"))


def test_checks_lists_the_live_checks_docs_live_describes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checks", "--kind", "live"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    page = (Path(__file__).parent.parent / "docs" / "live.md").read_text(encoding="utf-8")
    described = re.findall(r"^\| `(live-[a-z-]+)` \|", page, flags=re.MULTILINE)
    assert [row.split()[1] for row in rows[:-2]] == sorted(described)
    assert rows[-1] == f"0 seam; {len(described)} live; 0 host; {len(described)} checks"


def test_checks_codes_prints_the_seam_codes_docs_seams_lists(capsys: pytest.CaptureFixture[str]) -> None:
    """`fleetgate checks --codes` prints each declared code with what fired: for the seams, exactly the rows of
    docs/seams.md's code table."""
    assert main(["checks", "--codes", "--kind", "seam"]) == 0
    printed = [line.split(None, 1) for line in capsys.readouterr().out.splitlines()]
    page = (Path(__file__).parent.parent / "docs" / "seams.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([A-Za-z-]+/[a-z0-9-]+)` \| (.*) \|$", page, flags=re.MULTILINE)
    assert sorted((code, what) for code, what in printed) == sorted(rows)


def test_a_command_imports_only_its_own_module() -> None:
    """``fleetgate render`` does not pay for the ledger (``fit``) or the catalogue (``incidents``); ``--help`` still
    lists every command with its line, and each command's own parser is the module's."""
    import subprocess
    import sys

    from fleetgate.cli import SUBCOMMANDS

    probe = ("import sys; from fleetgate.cli import main; code = main(sys.argv[1:]); "
             f"print(sorted(m for m in sys.modules if m in {sorted(module for module, _ in SUBCOMMANDS.values())!r}))")
    render = subprocess.run([sys.executable, "-c", probe, "render", "frank-tts", "--fleet", str(FLEET / "fleet.toml")],
                            capture_output=True, text=True, timeout=120, check=True)
    assert render.stdout.splitlines()[-1] == "['fleetgate.cli.render']", render.stdout
    checks = subprocess.run([sys.executable, "-c", probe, "checks", "--count"], capture_output=True, text=True, timeout=120,
                            check=True)
    assert checks.stdout.splitlines()[-1] == "['fleetgate.cli.checks']", checks.stdout
    helped = subprocess.run([sys.executable, "-m", "fleetgate.cli", "--help"], capture_output=True, text=True, timeout=120,
                            check=False)
    listed = " ".join(helped.stdout.split())
    for command, (_, summary) in SUBCOMMANDS.items():
        assert f"{command} {summary}" in listed, (command, helped.stdout)
