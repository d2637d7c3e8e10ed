"""Env files read as systemd, podman and bash read them (systemd.exec(5), podman-run(1), bash(1))."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.envfile import parse_env_text
from fleetgate.errors import InputError

PATH = Path("example.env")


def values(text: str, dialect: str) -> dict[str, str]:
    return parse_env_text(text, PATH, dialect).values_dict()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('A="two words"\n', {"A": "two words"}),
        ("A='single $NOT expanded'\n", {"A": "single $NOT expanded"}),
        ("A = spaced  \n", {"A": "spaced"}),
        ("A=x # not a comment mid-line\n", {"A": "x # not a comment mid-line"}),
        ("# comment\n; also a comment\nA=1\n", {"A": "1"}),
        ("A=first \\\n  second\n", {"A": "first   second"}),
        ('A="line one\nline two"\n', {"A": "line one\nline two"}),
        ('A="esc \\" \\$ \\\\ \\n kept"\n', {"A": 'esc " $ \\ \\n kept'}),
        ("A=$HOME/x\n", {"A": "$HOME/x"}),
        ("A=1\nA=2\n", {"A": "2"}),
        ("A=\n", {"A": ""}),
        # systemd honours quotes only at the start of a value
        ('A=pre"quoted part"post\n', {"A": 'pre"quoted part"post'}),
    ],
)
def test_systemd_dialect(text: str, expected: dict[str, str]) -> None:
    assert values(text, "systemd") == expected


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("A=1\nexport B=2\n", 2, "systemd EnvironmentFile has no 'export'"),
        ("A=1\n\nJUSTAWORD\n", 3, "expected NAME=VALUE (systemd EnvironmentFile)"),
        ('A=1\nB="never closed\n', 2, "unterminated quote"),
        ("1A=x\n", 1, "'1A' is not a variable name"),
    ],
)
def test_systemd_dialect_refuses_what_systemd_would_ignore(text: str, line: int, fragment: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_env_text(text, PATH, "systemd")
    assert raised.value.line == line
    assert fragment in str(raised.value)
    assert str(raised.value).startswith(f"example.env:{line}: ")
    assert "\n" not in str(raised.value)


def test_podman_dialect_keeps_quotes_and_whitespace() -> None:
    text = 'A="quoted"\n  B=lead trimmed, trail kept  \n# c\nC=x=y\n'
    assert values(text, "podman") == {"A": '"quoted"', "B": "lead trimmed, trail kept  ", "C": "x=y"}


def test_podman_bare_name_is_refused() -> None:
    with pytest.raises(InputError, match=r"example.env:2: bare 'HOSTVAR' copies the host's own value"):
        parse_env_text("A=1\nHOSTVAR\n", PATH, "podman")


def test_the_same_line_reads_differently_per_dialect() -> None:
    line = 'MODEL="/models/x.gguf"\n'
    assert values(line, "systemd")["MODEL"] == "/models/x.gguf"
    assert values(line, "podman")["MODEL"] == '"/models/x.gguf"'
    assert values(line, "bash")["MODEL"] == "/models/x.gguf"


def test_bash_dialect_expands_and_keeps_lines(tmp_path: Path) -> None:
    env = tmp_path / "x.env"
    env.write_text('# header\nBASE=/m\nMODEL="$BASE/x.gguf"\nN=$((2 * 3))\n', encoding="utf-8")
    parsed = parse_env_text(env.read_text(), env, "bash")
    assert parsed.values_dict() == {"BASE": "/m", "MODEL": "/m/x.gguf", "N": "6"}
    assert parsed["MODEL"].line == 3
    assert parsed["N"].where == f"{env}:4"


def test_bash_dialect_syntax_error_names_the_line(tmp_path: Path) -> None:
    env = tmp_path / "x.env"
    env.write_text("A=1\nB=(unclosed\n", encoding="utf-8")
    with pytest.raises(InputError) as raised:
        parse_env_text(env.read_text(), env, "bash")
    assert raised.value.line is not None and raised.value.line >= 2
    assert ": bash: " in str(raised.value)
