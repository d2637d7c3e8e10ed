"""llama.cpp's router presets (``llama-server --models-preset FILE.ini``) read as llama-server reads them
(fleetgate/sources/router_preset.py), and co-residence under ``--models-max``.

The expected values are written out by hand from llama.cpp's common/preset.cpp and tools/server/server-models.cpp:
the INI grammar (comments after ``;`` or ``#`` end a value, quotes are kept, a repeated key keeps its last value, a
repeated header starts its section afresh, keys before a header are the model ``default``), keys as option names
without dashes or as ``LLAMA_ARG_*`` names, each option rendered once under its last name, false switches as their
negative name, and ``--host 127.0.0.1 --port PORT --alias NAME`` set by the router.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.render.dispatch import render
from fleetgate.render.start import PresetModel
from fleetgate.sources.router_preset import child_argv, load_on_startup, read_preset

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "fleets" / "router-preset"
BUILD = 11434


def _preset(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.ini"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_fixture_preset_renders_each_model_as_the_router_starts_it() -> None:
    preset = read_preset(FIXTURE / "config" / "models.ini")
    assert sorted(preset.sections) == ["llama-3.1-8b", "qwen2.5-coder-1.5b", "qwen2.5-coder-14b"]
    assert preset.global_section is not None and preset.global_section.line == 5
    argv, _ = child_argv(preset, "qwen2.5-coder-14b", "llama-server", BUILD)
    # [*] under the model's own keys; `c` is --ctx-size, `temp` --temperature (each option's last name); the
    # `# the coder's sampling` comment ends the value
    assert argv[0] == "llama-server"
    assert argv[-6:] == ("--host", "127.0.0.1", "--port", "0", "--alias", "qwen2.5-coder-14b")
    assert set(_pairs(argv[1:-6])) == {("--ctx-size", "16384"), ("--flash-attn", "on"), ("--jinja",),
                                       ("--model", "/models/Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf"),
                                       ("--n-gpu-layers", "99"), ("--parallel", "1"), ("--temperature", "0.7")}
    llama, _ = child_argv(preset, "llama-3.1-8b", "llama-server", BUILD)
    assert ("--ctx-size", "8192") in set(_pairs(llama[1:-6]))  # LLAMA_ARG_CTX_SIZE is the same option
    auto, _ = child_argv(preset, "qwen2.5-coder-1.5b", "llama-server", BUILD)
    pairs = set(_pairs(auto[1:-6]))
    # no-jinja = true over [*]'s jinja = true: the negative name; load-on-startup is the router's, not the child's
    assert ("--no-jinja",) in pairs and ("--jinja",) not in pairs
    assert not any("load-on-startup" in word for word in auto)
    assert load_on_startup(preset) == [("qwen2.5-coder-1.5b", 25)]


def _pairs(words: tuple[str, ...]) -> list[tuple[str, ...]]:
    """argv words grouped as each flag with its value (a switch alone)."""
    found: list[tuple[str, ...]] = []
    for word in words:
        if word.startswith("--") or not found:
            found.append((word,))
        else:
            found[-1] = (*found[-1], word)
    return found


def test_the_ini_grammar_is_llama_cpps_not_configparsers(tmp_path: Path) -> None:
    preset = read_preset(_preset(tmp_path, (
        "c = 1024\n"                          # before any header: the model `default`
        "[a]\n"
        "model = \"/m/a b.gguf\"  ; quotes kept\n"
        "alias=x#no space needed before a comment\n"
        "ctx-size = 512\n"
        "ctx-size = 2048\n"                   # a repeated key keeps its last value
        "[b]\n"
        "temp = 0.5\n"
        "[b]\n"                               # a repeated header starts the section afresh
        "top-k = 20\n"
        "   ; an indented comment\n"
        "\n")))
    assert sorted(preset.sections) == ["a", "b", "default"]
    a = preset.sections["a"].keys
    assert a["model"] == ('"/m/a b.gguf"', 3)
    assert a["alias"] == ("x", 4)
    assert a["ctx-size"] == ("2048", 6)
    assert dict(preset.sections["b"].keys) == {"top-k": ("20", 10)}
    assert dict(preset.sections["default"].keys) == {"c": ("1024", 1)}


def test_a_version_key_before_the_first_header_makes_no_phantom_default_model(tmp_path: Path) -> None:
    # llama.cpp's parser files top-level keys under `default` and skips `version`: nothing is left to load
    preset = read_preset(_preset(tmp_path, (
        "version = 1\n"
        "\n"
        "[*]\n"
        "n-gpu-layers = 99\n"
        "[qwen3-8b]\n"
        "model = /models/Qwen3-8B-Q4_K_M.gguf\n")))
    assert sorted(preset.sections) == ["qwen3-8b"]
    assert preset.residencies(4) == ((frozenset({"qwen3-8b"}),),)
    # a top-level key that is an option is llama.cpp's model `default`, and an explicit [default] stays a section
    kept = read_preset(_preset(tmp_path, "version = 1\nc = 2048\n[a]\nm = /m/a.gguf\n"))
    assert sorted(kept.sections) == ["a", "default"]
    headed = read_preset(_preset(tmp_path, "[default]\nversion = 1\n[a]\nm = /m/a.gguf\n"))
    assert sorted(headed.sections) == ["a", "default"]


def test_the_router_sets_host_port_and_alias_and_drops_its_own_options(tmp_path: Path) -> None:
    preset = read_preset(_preset(tmp_path, (
        "[*]\napi-key = secret\nmodels-max = 2\nport = 9000\n"
        "[m]\nm = /m/x.gguf\nhost = 0.0.0.0\nwarmup = false\nkv-unified = off\nmetrics = 0\n")))
    argv, _ = child_argv(preset, "m", "llama-server", BUILD)
    # warmup false -> --no-warmup; kv-unified off -> --no-kv-unified; --metrics has no negative name: dropped
    assert set(_pairs(argv[1:])) == {("--model", "/m/x.gguf"), ("--no-warmup",), ("--no-kv-unified",),
                                     ("--host", "127.0.0.1"), ("--port", "0"), ("--alias", "m")}


BAD = {
    "not-ini": ("[a]\nmodel /m/x.gguf\n", 2, "'model /m/x.gguf' is neither [SECTION], KEY = VALUE"),
    "indented-key": ("[a]\n  c = 4096\n", 2, "'c = 4096' is neither [SECTION], KEY = VALUE"),
    "header-junk": ("[a] x\n", 1, "'[a] x' is neither [SECTION], KEY = VALUE"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_naming_file_and_line(case: str, tmp_path: Path) -> None:
    text, line, message = BAD[case]
    with pytest.raises(InputError) as raised:
        read_preset(_preset(tmp_path, text))
    said = str(raised.value)
    assert "\n" not in said
    assert said.startswith(f"{tmp_path / 'models.ini'}:{line}: {message}"), said


def test_a_key_that_is_no_llama_server_option_is_one_line_at_its_line(tmp_path: Path) -> None:
    preset = read_preset(_preset(tmp_path, "[*]\nngl = 99\n[a]\nctx-sise = 4096\n"))
    with pytest.raises(InputError) as raised:
        child_argv(preset, "a", "llama-server", BUILD)
    assert str(raised.value) == (
        f"{tmp_path / 'models.ini'}:4: option 'ctx-sise' not recognized in preset 'a' (llama-server build 11434 "
        "refuses the file); expected a llama-server option without its dashes or its LLAMA_ARG_ name (did you mean "
        "ctx-size?)")


def _fixture(tmp_path: Path, edits: list[tuple[str, str, str]]) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(FIXTURE, target)
    for file, old, new in edits:
        text = (target / file).read_text(encoding="utf-8")
        assert text.count(old) == 1
        (target / file).write_text(text.replace(old, new), encoding="utf-8")
    return target / "fleet.toml"


def test_the_fleet_service_is_its_section_with_the_routers_port_in_its_environment() -> None:
    fleet = load_fleet(FIXTURE / "fleet.toml")
    rendered = render(fleet, fleet.services["llama"])
    assert rendered.argv[0] == "llama-server" and rendered.start == PresetModel()
    assert rendered.env["LLAMA_SERVER_ROUTER_PORT"] == "8080"


def test_a_model_the_preset_lacks_is_one_line_at_fleet_toml(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, [("fleet.toml", 'preset_model = "llama-3.1-8b"', 'preset_model = "llama-3-8b"')])
    fleet = load_fleet(fleet_toml)
    with pytest.raises(InputError) as raised:
        render(fleet, fleet.services["llama"])
    assert str(raised.value) == (
        f"{fleet_toml}:27: services.llama.preset_model: models.ini has no model 'llama-3-8b'; expected one of: "
        'llama-3.1-8b, qwen2.5-coder-1.5b, qwen2.5-coder-14b (preset_model = "NAME")')


def test_a_bad_key_in_another_model_stops_every_model_of_the_file(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, [("config/models.ini", "temp     = 0.7", "temprature = 0.7")])
    fleet = load_fleet(fleet_toml)
    with pytest.raises(InputError) as raised:
        render(fleet, fleet.services["llama"])
    assert str(raised.value).startswith(f"{fleet_toml.parent / 'config' / 'models.ini'}:14: option 'temprature' not "
                                        "recognized in preset 'qwen2.5-coder-14b'")


def test_more_models_loaded_on_startup_than_models_max_is_refused(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, [("config/models.ini", "[*]\n", "[*]\nload-on-startup = true\n"),
                                     ("fleet.toml", 'preset_model = "llama-3.1-8b"\n',
                                      'preset_model = "llama-3.1-8b"\nmodels_max = 2\n')])
    fleet = load_fleet(fleet_toml)
    with pytest.raises(InputError) as raised:
        render(fleet, fleet.services["coder"])
    assert str(raised.value).startswith(
        f"{fleet_toml.parent / 'config' / 'models.ini'}:6: 3 models load on startup (llama-3.1-8b, qwen2.5-coder-1.5b, "
        "qwen2.5-coder-14b) and the router keeps 2 (--models-max): llama-server refuses to start")


def test_models_max_says_which_models_are_loaded_together(tmp_path: Path) -> None:
    preset = read_preset(_preset(tmp_path, "[a]\nc = 1\n[b]\nc = 1\n[c]\nc = 1\n"))
    everything = ((frozenset({"a", "b", "c"}),),)
    assert preset.residencies(4) == everything
    assert preset.residencies(0) == everything  # 0 or less: no limit
    assert preset.residencies(2) == ((frozenset({"a", "b"}), frozenset({"a", "c"}), frozenset({"b", "c"})),)
    assert preset.residencies(1) == ((frozenset({"a"}), frozenset({"b"}), frozenset({"c"})),)


def test_two_models_max_for_one_preset_are_one_line_at_fleet_toml(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, [("fleet.toml", 'preset_model = "llama-3.1-8b"\n',
                                      'preset_model = "llama-3.1-8b"\nmodels_max = 2\n'),
                                     ("fleet.toml", 'preset_model = "qwen2.5-coder-1.5b"\n',
                                      'preset_model = "qwen2.5-coder-1.5b"\nmodels_max = 3\n')])
    with pytest.raises(InputError) as raised:
        load_fleet(fleet_toml)
    assert str(raised.value) == (
        f"{fleet_toml}:38: services.autocomplete.models_max: 3, and services.llama.models_max is 2 for the same "
        "router preset; expected one value (one router, one --models-max)")


def test_init_reads_a_preset_and_leaves_other_ini_files(tmp_path: Path) -> None:
    from fleetgate.init import discover

    (tmp_path / "models.ini").write_text("[*]\nngl = 99\n[Qwen3-8B]\nm = /models/qwen3-8b.gguf\n[no-model]\nc = 1\n",
                                         encoding="utf-8")
    (tmp_path / "setup.ini").write_text("[metadata]\nname = thing\n", encoding="utf-8")  # keys no option has
    (tmp_path / "tox.ini").write_text("[tox]\n  envlist = py3\n", encoding="utf-8")  # not llama.cpp's grammar
    found = discover(tmp_path, render_scripts=False)
    assert [(f.name, f.port, f.payload, f.models_preset, f.preset_model) for f in found.services] == [
        ("qwen3-8b", 8080, ("/models/qwen3-8b.gguf",), "models.ini", "Qwen3-8B")]
    assert sorted((n.path.name, n.line) for n in found.notes) == [("tox.ini", 2)]
    assert found.read == {"router presets": 1}
