"""Env files in every dialect: arbitrary bytes read as a value or one line; systemd quoting round-trips."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.envfile import parse_env_file, parse_env_text
from fleetgate.errors import InputError
from fleetgate.sandbox import SandboxUnavailable
from tests.fuzz._oneline import assert_reads_or_one_line

PATH = Path("fuzz.env")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters that matter to the three dialects, plus anything at all.
SHELLISH = st.sampled_from(list("AZaz09_=#;'\"\\$`{}()[]<>|&* \t\n\r\0é-./:%!~"))
TEXT = st.one_of(st.text(SHELLISH, max_size=200), st.text(max_size=200))


@given(TEXT, st.sampled_from(["systemd", "podman"]))
def test_systemd_and_podman_read_anything_as_values_or_one_line(text: str, dialect: str) -> None:
    result = assert_reads_or_one_line(lambda: parse_env_text(text, PATH, dialect))  # type: ignore[arg-type]
    if not isinstance(result, InputError):
        for name, entry in result.items():
            assert NAME.match(name) and entry.line >= 1


@given(st.binary(max_size=300), st.sampled_from(["systemd", "podman"]))
def test_any_bytes_in_a_file_are_read_or_one_line(data: bytes, dialect: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.env"
        path.write_bytes(data)
        assert_reads_or_one_line(lambda: parse_env_file(path, dialect))  # type: ignore[arg-type]


VALUE = st.text(st.characters(blacklist_characters="\0\r", blacklist_categories=("Cs",)), max_size=60)


@given(st.from_regex(NAME, fullmatch=True).filter(lambda n: len(n) < 40), VALUE)
def test_a_double_quoted_systemd_value_reads_back_as_written(name: str, value: str) -> None:
    quoted = "".join("\\" + c if c in '"\\`$' else c for c in value)
    assert parse_env_text(f'{name}="{quoted}"\n', PATH, "systemd")[name].value == value


@given(st.from_regex(NAME, fullmatch=True).filter(lambda n: len(n) < 40), st.text(st.characters(blacklist_characters="\0\r\n",
                                                                                             blacklist_categories=("Cs",)), max_size=60))
def test_podman_keeps_the_value_literally(name: str, value: str) -> None:
    assert parse_env_text(f"{name}={value}\n", PATH, "podman")[name].value == value


@given(st.text(SHELLISH, max_size=80))
def test_bash_reads_anything_in_its_sandbox_as_values_or_one_line(text: str) -> None:
    result = assert_reads_or_one_line(lambda: parse_env_text(text, PATH, "bash"))
    # The sandbox itself failing is no answer about the file: that would make this property vacuous.
    assert not isinstance(result, SandboxUnavailable), str(result)


# Mostly what the plain dialect holds, with what sends a file to bash mixed in: a name bash treats as its own, a
# character bash would expand, quote, split or glob.
_PLAINISH_NAME = st.one_of(st.sampled_from(["A", "MODEL", "x_1", "if", "export", "PORT", "TZ"]),
                           st.sampled_from(["_", "PATH", "PS4", "LC_ALL", "HOME", "SHLVL"]))
_PLAINISH_VALUE = st.one_of(st.text(st.sampled_from(list("az09_./:,@%+=-")), max_size=12),
                            st.text(st.sampled_from(list("az09_./:,@%+=-~$'\" \t#\\*{}!é")), max_size=12))
_PLAINISH_LINE = st.one_of(
    st.sampled_from(["", "  ", "\t", "# a comment", "  # $x 'q' \\"]),
    st.tuples(st.sampled_from(["", "  ", "\t", "export ", " export\t"]), _PLAINISH_NAME,
              st.one_of(st.just("="), st.sampled_from(["+=", " ="])), _PLAINISH_VALUE,
              st.one_of(st.sampled_from(["", " ", "\t", " # c"]), st.just("#c"))).map("".join),
)


@given(st.lists(_PLAINISH_LINE, max_size=6).map("\n".join), st.booleans())
def test_a_plain_bash_file_read_without_bash_is_what_bash_sets(text: str, newline: bool) -> None:
    """The bash dialect's plain files (NAME=VALUE lines bash takes as written) are read without starting bash: what
    is read must be what bash, sourcing the file in its sandbox, sets, at the same lines."""
    from fleetgate.envfile import _read_plain, _source_with_bash

    text += "\n" if newline else ""
    plain = _read_plain(text, PATH)
    if plain is not None:
        assert [(e.name, e.value, e.line) for e in plain] == [(e.name, e.value, e.line) for e in _source_with_bash(text, PATH)]
