"""ExecStart= expanded the way systemd expands it (fleetgate/sources/systemd.py), against systemd.service(5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.fleet import load_fleet
from fleetgate.sources.systemd import expand_exec
from fleetgate.units import Setting

ENV = {"MODEL": "/m/a b.gguf", "EXTRA": "--jinja  --flash-attn on", "QUOTED": '"two words" three', "EMPTY": ""}


def _line(value: str) -> Setting:
    return Setting("Service", "ExecStart", value, Path("x.service"), 7)


@pytest.mark.parametrize(("value", "argv"), [
    # ${NAME}: the value as it is, one word, wherever it stands in the word.
    ("/bin/llama-server -m ${MODEL}", ("/bin/llama-server", "-m", "/m/a b.gguf")),
    ("/bin/llama-server --model=${MODEL}", ("/bin/llama-server", "--model=/m/a b.gguf")),
    # $NAME as a whole word: split at whitespace, quotes in the value group words; empty or unset: no word.
    ("/bin/llama-server $EXTRA", ("/bin/llama-server", "--jinja", "--flash-attn", "on")),
    ("/bin/llama-server $QUOTED", ("/bin/llama-server", "two words", "three")),
    ("/bin/llama-server $EMPTY -c 1", ("/bin/llama-server", "-c", "1")),
    ("/bin/llama-server $UNSET -c 1", ("/bin/llama-server", "-c", "1")),
    # $$ is a dollar; the executable is never substituted; ':' turns substitution off.
    ("/bin/llama-server --alias a$$b", ("/bin/llama-server", "--alias", "a$b")),
    (":/bin/llama-server -m ${MODEL}", ("/bin/llama-server", "-m", "${MODEL}")),
    # '@': the second word is what the program sees as argv[0].
    ("@/bin/llama-server llama -m ${MODEL}", ("/bin/llama-server", "-m", "/m/a b.gguf")),
    # A shell default is no systemd expansion: a variable named "MODEL:-x" is looked up, and none is set.
    ("/bin/llama-server -m ${MODEL:-/x.gguf}", ("/bin/llama-server", "-m", "")),
])
def test_exec_start_expands_as_systemd_does(value: str, argv: tuple[str, ...]) -> None:
    assert expand_exec(_line(value), ENV).argv == argv


def test_unset_and_invalid_references_are_named() -> None:
    line = expand_exec(_line("/bin/llama-server $UNSET ${ALSO} -m ${MODEL:-/x.gguf}"), ENV)
    assert (line.unset, line.invalid) == (("UNSET", "ALSO"), ("MODEL:-/x.gguf",))


def test_an_unterminated_quote_is_one_line_naming_file_and_line() -> None:
    with pytest.raises(InputError) as caught:
        expand_exec(_line('/bin/llama-server --alias "chat'), ENV)
    assert str(caught.value).splitlines() == [str(caught.value)]
    assert "x.service:7" in str(caught.value) and "quote" in str(caught.value)


def test_a_service_needs_a_serve_script_or_a_unit(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text('[fleet]\nname = "f"\n[hosts.h]\nram_gib = 8\ndevices = []\n'
                                         '[services.s]\nhost = "h"\nport = 8080\nengine = "llama.cpp"\n', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_fleet(tmp_path / "fleet.toml")
    assert "fleet.toml:6" in str(caught.value) and "neither serve_script nor unit" in str(caught.value)


def test_an_inline_bash_c_script_is_named_as_not_read_yet(tmp_path: Path) -> None:
    import shutil

    from fleetgate.render import render

    fleet_dir = tmp_path / "fleet"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fleets" / "unit-exec", fleet_dir)
    unit = fleet_dir / "systemd" / "llama-chat.service"
    text = unit.read_text(encoding="utf-8")
    start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    unit.write_text(text.replace(start, "ExecStart=/bin/bash -c 'exec llama-server -m ${MODEL}'"), encoding="utf-8")
    fleet = load_fleet(fleet_dir / "fleet.toml")
    with pytest.raises(InputError) as caught:
        render(fleet, fleet.services["chat"])
    message = str(caught.value)
    assert message.splitlines() == [message]
    assert "llama-chat.service:9" in message and "bash -c with an inline script" in message
