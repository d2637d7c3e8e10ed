"""The secret sweep (tests/secret_sweep.py) and its list of the suite's secrets (tests/secrets_used.py).

The planted outputs live in a temporary directory the test removes, not in its ``tmp_path``: the sweep of the
suite's own basetemp would find them there.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetgate.secrets import is_secret_name
from tests import secret_sweep
from tests.secrets_used import SECRETS, fresh, masked

TESTS = Path(__file__).resolve().parent
KEY = SECRETS["PLANTED_KEY"]

KEY_WORD = re.compile(r"(?<![\w$-])(?:sk-|hf_)[\w-]*\d[\w-]*")
"""A key as the suite's tests spell one: OpenAI's ``sk-...`` or the Hub's ``hf_...``, with a digit in it."""

KEY_TEXT = re.compile(r"[\w.+/~=-]{4,}")
"""What a key bound to a secret name is: one word a bearer token may hold (not ``***``, a ``$VARIABLE`` that names
the key, a tokenizer's ``<|im_end|>``, a header injection's CRLF)."""


def _bound_to_secret_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String constants a test binds to a secret name: ``KEY = "..."``, ``api_key="..."``, ``{"HF_TOKEN": "..."}``,
    ``setenv("HF_TOKEN", "...")``."""
    def text(node: ast.AST | None) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    for node in ast.walk(tree):
        pairs: list[tuple[str | None, ast.AST | None]] = []
        if isinstance(node, ast.Assign):
            pairs += [(target.id, node.value) for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.Dict):
            pairs += [(text(key), value) for key, value in zip(node.keys, node.values, strict=True)]
        elif isinstance(node, ast.Call):
            pairs += [(keyword.arg, keyword.value) for keyword in node.keywords]
            if len(node.args) >= 2:
                pairs.append((text(node.args[0]), node.args[1]))
        for name, value in pairs:
            literal = text(value)
            if name and literal and is_secret_name(name) and KEY_TEXT.fullmatch(literal):
                yield node.lineno if hasattr(node, "lineno") else 0, literal


def key_like_literals() -> dict[str, list[str]]:
    """Every key-like literal of tests/ (but this list's own module), with where it is."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "secrets_used.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = str(path.relative_to(TESTS.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for word in KEY_WORD.findall(node.value):
                    found.setdefault(word, []).append(f"{where}:{node.lineno}")
        for line, literal in _bound_to_secret_names(tree):
            found.setdefault(literal, []).append(f"{where}:{line}")
    return found


def test_every_key_like_literal_of_the_tests_is_a_secret_the_sweep_knows() -> None:
    literals = key_like_literals()
    known = set(SECRETS.values())
    assert {value: where for value, where in literals.items() if value not in known} == {}
    # and the list holds no key the tests no longer use (a word of a bigger literal counts: a unit's text)
    everything = "".join(p.read_text(encoding="utf-8") for p in sorted(TESTS.rglob("*.py")) if p.name != "secrets_used.py")
    assert [name for name, value in SECRETS.items() if value not in everything and f'"{name}"' not in everything] == []


def test_a_generated_key_comes_from_the_list() -> None:
    """A key made afresh (``secrets.token_hex``) is one the sweep matches only by its prefix: ``fresh`` gives one."""
    makers = [f"{path.relative_to(TESTS.parent)}:{node.lineno}" for path in sorted(TESTS.rglob("*.py"))
              if path.name != "secrets_used.py"
              for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "secrets"
              and node.attr.startswith("token_")]
    assert makers == []
    key = fresh("sk-env-")
    assert re.fullmatch(r"sk-env-[0-9a-f]{24}", key) and key != fresh("sk-env-")
    with pytest.raises(ValueError, match="a generated key's prefix is one of"):
        fresh("sk-other-")

INNER = ("-p", "tests.secret_sweep", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")
"""An inner run with the sweep's plugin (which this process imported already: pytest cannot rewrite it, and says so)."""


@pytest.fixture
def planted() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="secret-sweep-") as directory:
        yield Path(directory)


def _junit(key: str) -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>\n<testsuites name="pytest tests">\n'
            '<testsuite name="pytest" errors="0" failures="1" skipped="0" tests="1">\n'
            f'<testcase classname="live.test_live" name="test_health"><failure message="401 for {key}"/></testcase>\n'
            '</testsuite>\n</testsuites>\n')


def _sweep(capsys: pytest.CaptureFixture[str], *roots: Path) -> tuple[int, list[str]]:
    status = secret_sweep.main([str(root) for root in roots])
    out, err = capsys.readouterr()
    assert err == ""
    return status, out.splitlines()


def test_a_key_in_an_output_is_named_file_line_masked(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generated = fresh("hf_env_")
    (planted / "run").mkdir()
    (planted / "run" / "junit.xml").write_text(_junit(KEY), encoding="utf-8")
    transcript = planted / "run" / "out" / "gate-transcripts" / "reference" / "live-chat.json"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"service": "reference", "exchanges": [
        {"request": {"headers": {"Authorization": f"Bearer {generated}"}}}]}, indent=1) + "\n", encoding="utf-8")
    (planted / "run" / "out" / "gate.json").write_text(
        json.dumps({"fleetgate_report": 1, "services": {"reference": {"not_judged": [f"--api-key {KEY}"]}}}, indent=2),
        encoding="utf-8")
    (planted / "run" / "run.jsonl").write_text(
        '{"pytest_version": "9.0", "$report_type": "SessionStart"}\n'
        + json.dumps({"$report_type": "TestReport", "sections": [["Captured stdout call", f"key {KEY}"]]}) + "\n",
        encoding="utf-8")
    (planted / "run" / "stdout").write_text(f"collected 1 item\nHF_TOKEN={KEY}\n", encoding="utf-8")
    (planted / "run" / "stderr").write_text("", encoding="utf-8")
    (planted / secret_sweep.SECTIONS).write_text(f"live/test_x.py::test_y [call] Captured stdout call:3: PLANTED_KEY "
                                                 f"({masked(KEY)})\n", encoding="utf-8")
    status, lines = _sweep(capsys, planted)
    assert status == 1
    shown = masked(KEY)
    assert lines[1:] == [
        f"  {planted}/{secret_sweep.SECTIONS}:1: a test report held a secret: live/test_x.py::test_y [call] "
        f"Captured stdout call:3: PLANTED_KEY ({shown})",
        f"  {planted}/run/junit.xml:4: JUnit holds PLANTED_KEY ({shown})",
        f"  {planted}/run/run.jsonl:2: report log holds PLANTED_KEY ({shown})",
        f"  {planted}/run/stdout:2: pytester output holds PLANTED_KEY ({shown})",
        f"  {planted}/run/out/gate.json:6: fleetgate report holds PLANTED_KEY ({shown})",
        f"  {planted}/run/out/gate-transcripts/reference/live-chat.json:7: transcript holds generated hf_env_ "
        f"({masked(generated)})",
    ]
    assert lines[0] == ("secret sweep: 7 outputs read (1 JUnit, 1 fleetgate report, 2 pytester output, 1 report log, "
                        "1 report sections, 1 transcript), 6 secrets found")
    assert not [line for line in lines if KEY in line or generated in line]
    assert shown == "sk-s***(25 chars)"


def test_outputs_without_a_key_pass(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (planted / "junit.xml").write_text(_junit("$FLEETGATE_API_KEY"), encoding="utf-8")
    (planted / "gate.json").write_text(json.dumps({"fleetgate_report": 1, "services": {}}), encoding="utf-8")
    status, lines = _sweep(capsys, planted)
    assert (status, lines) == (0, ["secret sweep: 2 outputs read (1 JUnit, 1 fleetgate report), 0 secrets found"])


def test_inputs_that_hold_a_key_on_purpose_are_not_read(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fleet's env file and unit hold the key to prove it scrubbed, the engine's log shows the argv it was given, a
    JSON that is no report and an XML that is no JUnit name it: none is an output of fleetgate or pytest."""
    fleet = planted / "fleet"
    (fleet / "scripts").mkdir(parents=True)
    (fleet / "scripts" / "reference.env").write_text(f"export LLAMA_API_KEY={KEY}\n", encoding="utf-8")
    (fleet / "llama.service").write_text(f"[Service]\nEnvironment=HF_TOKEN={KEY}\n", encoding="utf-8")
    (fleet / "fleet.toml").write_text(f'[fleet]\nname = "x"\n# {KEY}\n', encoding="utf-8")
    (planted / "llama-server.log").write_text(f"main: --api-key {KEY}\n", encoding="utf-8")
    (planted / "config.json").write_text(json.dumps({"api_key": KEY}), encoding="utf-8")
    (planted / "pom.xml").write_text(f'<?xml version="1.0"?>\n<project>{KEY}</project>\n', encoding="utf-8")
    (planted / "stdout").write_text(KEY, encoding="utf-8")  # pytester writes stdout with stderr beside it
    (planted / "linked.xml").symlink_to(planted / "elsewhere.xml")
    status, lines = _sweep(capsys, planted)
    assert (status, lines) == (0, ["secret sweep: 0 outputs read (none), 0 secrets found"])


def test_fleetgate_init_s_manifest_is_an_output(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (planted / "fleet.toml").write_text(f"# Written by `fleetgate init` from the files of this repository.\n"
                                        f"# --api-key {KEY}\n", encoding="utf-8")
    status, lines = _sweep(capsys, planted)
    assert (status, lines) == (1, ["secret sweep: 1 outputs read (1 fleetgate CLI output), 1 secrets found",
                                   f"  {planted}/fleet.toml:2: fleetgate CLI output holds PLANTED_KEY ({masked(KEY)})"])


def test_the_sweep_says_how_to_use_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert secret_sweep.main([]) == 2
    assert capsys.readouterr().err == "usage: python -m tests.secret_sweep [--clear DIR | DIR...]\n"
    (tmp_path / "old" / "gw0").mkdir(parents=True)
    assert secret_sweep.main(["--clear", str(tmp_path / "old")]) == 0
    assert secret_sweep.main(["--clear", str(tmp_path / "new" / "basetemp")]) == 0
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == ["new", "new/basetemp", "old"]
    assert secret_sweep.main([str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (f"secret sweep: no directory {tmp_path / 'none'}: run the tests with "
                                       "--basetemp=DIR first\n")


def test_a_report_section_that_holds_a_key_is_found() -> None:
    report = pytest.TestReport(
        "tests/test_x.py::test_y", ("tests/test_x.py", 1, "test_y"), {}, "failed", f"E   assert '{KEY}' == ''", "call",
        sections=[("Captured stdout call", f"first\nsent {KEY}\n"), ("Captured stderr call", "nothing\n")])
    assert secret_sweep.report_findings(report) == [
        f"tests/test_x.py::test_y [call] Captured stdout call:2: PLANTED_KEY ({masked(KEY)})",
        f"tests/test_x.py::test_y [call] longrepr:1: PLANTED_KEY ({masked(KEY)})"]
    clean = pytest.TestReport("t.py::t", ("t.py", 1, "t"), {}, "passed", None, "call", sections=[("Captured log call", "ok")])
    assert secret_sweep.report_findings(clean) == []


def test_the_plugin_fails_a_run_whose_test_printed_a_key(pytester: pytest.Pytester, planted: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The test passes; its captured output held the key: the run fails, naming it masked, and the record it leaves
    in the basetemp fails the sweep. Nothing of the run shows the key."""
    pytester.makepyfile(test_leak=f"def test_prints_a_key():\n    print('sent {KEY}')\n\n\ndef test_quiet():\n    pass\n")
    basetemp = planted / "basetemp"
    result = pytester.runpytest_inprocess(*INNER, f"--basetemp={basetemp}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2)
    section = [line for line in result.outlines if "secret sweep" in line or line.startswith("test_leak.py")]
    shown = masked(KEY)
    assert section[-1] == f"test_leak.py::test_prints_a_key [call] Captured stdout call:1: PLANTED_KEY ({shown})"
    assert KEY not in result.stdout.str() + result.stderr.str()
    capsys.readouterr()
    status, lines = _sweep(capsys, basetemp)
    assert (status, lines) == (1, [
        "secret sweep: 1 outputs read (1 report sections), 1 secrets found",
        f"  {basetemp}/{secret_sweep.SECTIONS}:1: a test report held a secret: test_leak.py::test_prints_a_key [call] "
        f"Captured stdout call:1: PLANTED_KEY ({shown})"])


def test_the_plugin_leaves_a_clean_run_alone(pytester: pytest.Pytester, planted: Path) -> None:
    pytester.makepyfile(test_clean="def test_prints():\n    print('sent $FLEETGATE_API_KEY')\n")
    result = pytester.runpytest_inprocess(*INNER, f"--basetemp={planted / 'basetemp'}")
    assert result.ret == pytest.ExitCode.OK
    assert not (planted / "basetemp" / secret_sweep.SECTIONS).exists()
