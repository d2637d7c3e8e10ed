"""ExecStart= expanded the way systemd expands it (fleetgate/sources/systemd.py), against systemd.service(5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
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


def _unit_exec_fleet(tmp_path: Path, exec_start: str, extra: str = ""):  # type: ignore[no-untyped-def]
    import shutil

    fleet_dir = tmp_path / "fleet"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fleets" / "unit-exec", fleet_dir)
    unit = fleet_dir / "systemd" / "llama-chat.service"
    text = unit.read_text(encoding="utf-8")
    start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    unit.write_text(text.replace(start, exec_start + extra), encoding="utf-8")
    return load_fleet(fleet_dir / "fleet.toml")


@pytest.mark.parametrize(("exec_start", "argv"), [
    # systemd substitutes ${NAME} inside the -c string before bash sees it; an unbraced $NAME inside a word is left
    # to bash, which finds the same value in the environment systemd gives it.
    ("ExecStart=/bin/bash -c 'exec llama-server -m ${MODEL} --port $PORT'",
     ("llama-server", "-m", "/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf", "--port", "8081")),
    # $$ is systemd's dollar: bash sees $CTX and expands it itself.
    ("ExecStart=/bin/bash -c 'exec llama-server -c $${CTX}'", ("llama-server", "-c", "16384")),
    # ${CTX:-4096} is no systemd expansion: systemd substitutes an empty string, so bash never sees the default.
    ("ExecStart=/bin/bash -c 'exec llama-server -c \"${CTX:-4096}\"'", ("llama-server", "-c", "")),
    # $$ keeps the default for bash: ${CTX:-4096} reaches the shell, which has CTX from the env file.
    ("ExecStart=/bin/bash -c 'exec llama-server -c \"$${CTX:-4096}\"'", ("llama-server", "-c", "16384")),
    # sh -c, env(1) in front with an assignment, shell options, $0 and positional arguments after the string.
    ("ExecStart=/bin/sh -c 'exec llama-server -c \"$1\" --alias \"$0\"' chat 2048", ("llama-server", "-c", "2048", "--alias", "chat")),
    ("ExecStart=/usr/bin/env FOO=bar bash -euo pipefail -c 'test -n \"$FOO\"; exec llama-server --alias \"$FOO\"'",
     ("llama-server", "--alias", "bar")),
    # A multi-step inline script: a test, a computed value, then the engine by an absolute path.
    ("ExecStart=/bin/bash -c 'n=$$(( SLOTS * 2 )); [ -f \"$MODEL\" ] || exit 1; "
     "exec /usr/local/bin/llama-server -m \"$MODEL\" -np \"$n\"'",
     ("llama-server", "-m", "/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf", "-np", "2")),
])
def test_an_inline_script_renders_after_systemds_expansion(tmp_path: Path, exec_start: str,
                                                           argv: tuple[str, ...]) -> None:
    from fleetgate.render.dispatch import render

    fleet = _unit_exec_fleet(tmp_path, exec_start)
    result = render(fleet, fleet.services["chat"])
    assert result.argv == argv
    assert result.script == fleet.services["chat"].unit
    assert result.env["MODEL"] == "/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"


def test_sh_c_is_named_as_rendered_by_bash(tmp_path: Path) -> None:
    from fleetgate.render.dispatch import render

    fleet = _unit_exec_fleet(tmp_path, "ExecStart=/bin/sh -c 'exec llama-server'")
    notes = render(fleet, fleet.services["chat"]).notes
    assert len(notes) == 1 and "llama-chat.service:9" in notes[0] and "rendered by bash" in notes[0]


@pytest.mark.parametrize(("exec_start", "said"), [
    ("ExecStart=/bin/bash -c 'exec llama-server -m ${MODEL}", "quote"),  # unterminated quote
    ("ExecStart=/bin/bash -c 'if true; then exec llama-server'", "does not parse"),
    ("ExecStart=/bin/bash -c", "without a command string"),
])
def test_a_broken_inline_script_is_one_line_naming_file_and_line(tmp_path: Path, exec_start: str, said: str) -> None:
    from fleetgate.render.dispatch import render

    fleet = _unit_exec_fleet(tmp_path, exec_start)
    with pytest.raises(InputError) as caught:
        render(fleet, fleet.services["chat"])
    message = str(caught.value)
    assert message.splitlines() == [message]
    assert "llama-chat.service:9" in message and said in message, message


def test_an_inline_script_that_exits_names_the_exec_start_line(tmp_path: Path) -> None:
    from fleetgate.render.dispatch import render
    from fleetgate.render.types import RenderRefused

    fleet = _unit_exec_fleet(tmp_path, "ExecStart=/bin/bash -c 'echo no model >&2; exit 3'")
    with pytest.raises(RenderRefused) as caught:
        render(fleet, fleet.services["chat"])
    assert caught.value.line == 9 and "exited 3" in caught.value.message


def _install_fleet(tmp_path: Path, install: str):  # type: ignore[no-untyped-def]
    import shutil

    fleet_dir = tmp_path / "fleet"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fleets" / "unit-install-env", fleet_dir)
    (fleet_dir / "install.sh").write_text(install, encoding="utf-8")
    return fleet_dir


def test_an_env_file_rendered_by_an_install_script_is_read_where_the_template_sets_it(tmp_path: Path) -> None:
    from fleetgate.render.dispatch import render

    # sudo runs the rest of its line; systemctl and chown are stubs; nothing leaves the sandbox.
    fleet_dir = _install_fleet(tmp_path, "#!/bin/bash\nset -e\ncd \"$(dirname \"$0\")\"\nsudo -E mkdir -p /etc/default\n"
                                         "sed 's|@MODEL_DIR@|/m|; s|@PORT@|8080|' config/llama-server.env.in | "
                                         "sudo tee /etc/default/llama-server >/dev/null\nsudo chown root /etc/default/llama-server\n"
                                         "systemctl daemon-reload\n")
    fleet = load_fleet(fleet_dir / "fleet.toml")
    on_this_machine = Path("/etc/default/llama-server").exists()
    result = render(fleet, fleet.services["llama"])
    assert Path("/etc/default/llama-server").exists() == on_this_machine  # written inside the sandbox only
    assert result.argv[1:5] == ("--model", "/m/Llama-3.1-8B-Instruct-Q4_K_M.gguf", "--port", "8080")
    template = fleet_dir / "config" / "llama-server.env.in"
    assert {name: origin.where for name, origin in result.inputs.items()} == {
        "LLAMA_MODEL": f"{template}:2", "LLAMA_PORT": f"{template}:3", "LLAMA_CTX": f"{template}:4",
        "LLAMA_SLOTS": f"{template}:5", "LLAMA_NGL": f"{template}:6"}


def test_an_install_script_that_writes_no_env_file_is_one_line(tmp_path: Path) -> None:
    from fleetgate.render.dispatch import render

    fleet_dir = _install_fleet(tmp_path, "#!/bin/bash\necho 'run me as root' >&2\nexit 4\n")
    fleet = load_fleet(fleet_dir / "fleet.toml")
    with pytest.raises(InputError) as caught:
        render(fleet, fleet.services["llama"])
    message = str(caught.value)
    assert message.splitlines() == [message]
    assert message.startswith(f"{fleet_dir / 'install.sh'}: the install script ({fleet_dir / 'fleet.toml'}:17) exited 4 "
                              "without writing /etc/default/llama-server: run me as root; expected it to render"), message
