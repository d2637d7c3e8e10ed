"""llama-swap's config.yaml read as llama-swap reads it (fleetgate/sources/llama_swap.py), and co-residence.

The expected values are llama-swap's documented behaviour (config.example.yaml, proxy/config/config.go), written out
by hand: ports from startPort in sorted order of the model ids, macros last-defined first, comment lines dropped from
cmd, the (default) group swapping and exclusive.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.render.dispatch import render
from fleetgate.render.start import SwapModel
from fleetgate.sources.llama_swap import DEFAULT_GROUP, SwapGroup, read_config, split_command

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "fleets" / "llama-swap"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_fixture_config_renders_each_model_as_llama_swap_starts_it() -> None:
    config = read_config(FIXTURE / "config" / "llama-swap.yaml")
    # sorted ids: autocomplete < llama3.1:8b < qwen2.5-coder:14b, from startPort 9100
    assert {name: model.port for name, model in config.models.items()} == {
        "autocomplete": 9100, "llama3.1:8b": 9101, "qwen2.5-coder:14b": 9102}
    coder = config.models["qwen2.5-coder:14b"]
    assert coder.argv == ("/usr/local/bin/llama-server", "--host", "127.0.0.1", "--port", "9102", "--n-gpu-layers", "99",
                          "--flash-attn", "on", "--model", "/models/Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf",
                          "--ctx-size", "16384", "--parallel", "1", "--jinja")
    assert coder.proxy == "http://localhost:9102" and coder.proxy_port == 9102
    assert coder.aliases == ("coder",) and coder.ttl == 900 and coder.check_endpoint == "/health"
    llama = config.models["llama3.1:8b"]
    assert llama.argv[-2:] == ("--ctx-size", "8192")  # the model's own macro overrides the global one
    assert {k: v for k, (v, _) in llama.env.items()} == {"GGML_CUDA_ENABLE_UNIFIED_MEMORY": "0"}
    assert llama.use_model_name == "llama-3.1-8b-instruct"
    auto = config.models["autocomplete"]
    assert auto.argv[-6:] == ("--ctx-size", "4096", "--n-gpu-layers", "99", "--flash-attn", "on")  # `\` joins lines
    assert config.groups == (
        SwapGroup("editor", swap=False, exclusive=False, persistent=True, members=("autocomplete",), line=48),
        SwapGroup(DEFAULT_GROUP, swap=True, exclusive=True, persistent=False,
                  members=("llama3.1:8b", "qwen2.5-coder:14b"), line=None))
    assert config.residencies() == ((frozenset({"autocomplete"}),),
                                    (frozenset({"llama3.1:8b"}), frozenset({"qwen2.5-coder:14b"})))


def test_the_fleet_service_is_its_model_with_the_engine_on_the_port_llama_swap_forwards_to() -> None:
    fleet = load_fleet(FIXTURE / "fleet.toml")
    rendered = render(fleet, fleet.services["llama"])
    assert rendered.argv[0] == "llama-server" and rendered.argv[4] == "9101"
    assert rendered.start == SwapModel(upstream_port=9101)
    assert rendered.env["GGML_CUDA_ENABLE_UNIFIED_MEMORY"] == "0"
    assert rendered.inputs["GGML_CUDA_ENABLE_UNIFIED_MEMORY"].where == f"{FIXTURE / 'config' / 'llama-swap.yaml'}:35"
    assert fleet.services["autocomplete"].llama_swap_model == "autocomplete"  # default: the service's own name


def test_ports_default_to_5800_and_only_models_that_use_them_get_one(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, """
models:
  b: {cmd: "llama-server --port ${PORT}"}
  a: {cmd: "llama-server --port ${PORT}"}
  fixed: {cmd: "llama-server --port 9000", proxy: "http://127.0.0.1:9000"}
  c: {cmd: "llama-server --port ${PORT}"}
"""))
    assert {n: m.port for n, m in config.models.items()} == {"a": 5800, "b": 5801, "c": 5802, "fixed": None}
    assert config.models["fixed"].proxy_port == 9000


def test_macros_are_replaced_last_defined_first_and_written_as_go_writes_scalars(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, """
macros:
  bin: llama-server
  temp: 0.70
  one: 1.0
  big: 1000000.0
  flag: true
  quoted: "007"
  args: "--temp ${temp} --x ${one} --y ${big} --z ${flag} --q ${quoted}"
models:
  m:
    cmd: |
      # a comment line, dropped
      ${bin} ${args}
      --alias '${MODEL_ID} chat'
      --port ${PORT}
"""))
    assert config.models["m"].argv == ("llama-server", "--temp", "0.7", "--x", "1", "--y", "1e+06", "--z", "true",
                                       "--q", "007", "--alias", "m chat", "--port", "5800")


def test_yaml_anchors_and_merge_keys_are_read_as_yaml_reads_them(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, """
x-defaults: &defaults
  ttl: 300
  cmd: llama-server --port ${PORT} --model /m/base.gguf
models:
  base: *defaults
  tuned:
    <<: *defaults
    cmd: llama-server --port ${PORT} --model /m/tuned.gguf
"""))
    assert config.models["base"].argv[-1] == "/m/base.gguf" and config.models["base"].ttl == 300
    assert config.models["tuned"].argv[-1] == "/m/tuned.gguf" and config.models["tuned"].ttl == 300


def test_cmd_is_split_as_posix_words_not_run_by_a_shell() -> None:
    assert split_command('llama-server --model "/a b/c.gguf" \\\n  --x $HOME --y \'q"q\' # not-a-comment') == [
        "llama-server", "--model", "/a b/c.gguf", "--x", "$HOME", "--y", 'q"q', "#", "not-a-comment"]


def test_aliases_may_be_strings_or_objects_and_a_model_without_port_needs_its_proxy(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, """
models:
  a: {cmd: "llama-server --port ${PORT}", aliases: [x, {id: y, name: Y}]}
"""))
    assert config.models["a"].aliases == ("x", "y")
    with pytest.raises(InputError) as raised:
        read_config(_config(tmp_path, "models:\n  a:\n    cmd: llama-server --port 9000\n"))
    assert str(raised.value).startswith(f"{tmp_path / 'config.yaml'}:3: models.a: proxy 'http://localhost:${{PORT}}' uses "
                                        "${PORT} but cmd does not")


def test_groups_and_a_matrix_say_which_models_run_at_once(tmp_path: Path) -> None:
    config = read_config(_config(tmp_path, """
models:
  a: {cmd: "llama-server --port ${PORT}"}
  b: {cmd: "llama-server --port ${PORT}"}
  c: {cmd: "llama-server --port ${PORT}"}
  d: {cmd: "llama-server --port ${PORT}"}
groups:
  pair: {swap: false, members: [a, b]}
  side: {exclusive: false, members: [c]}
"""))
    assert config.residencies() == ((frozenset({"c"}),), (frozenset({"a", "b"}), frozenset({"d"})))
    matrix = read_config(_config(tmp_path, """
models:
  alpha: {cmd: "llama-server --port ${PORT}"}
  beta: {cmd: "llama-server --port ${PORT}"}
  gamma: {cmd: "llama-server --port ${PORT}"}
  lone: {cmd: "llama-server --port ${PORT}"}
matrix:
  vars: {a: alpha, b: beta, g: gamma}
  sets:
    chat: "a | b & g"
    all: "+chat & g"
"""))
    # & binds tighter than |: [a], [b, g]; +chat & g: [a, g], [b, g]; lone is in no set and runs alone
    assert matrix.matrix == (frozenset({"alpha"}), frozenset({"beta", "gamma"}), frozenset({"alpha", "gamma"}))
    assert matrix.residencies() == ((*matrix.matrix, frozenset({"lone"})),)


# Bad input: one line naming the file, the line and what was expected.
BAD = {
    "not-yaml": ("models:\n  a: {cmd: [unclosed\n", 3, "not YAML"),
    "unknown-macro": ("macros:\n  x: 1\nmodels:\n  a:\n    cmd: llama-server --port ${PORT} --ctx ${ctxx}\n", 5,
                      "models.a.cmd: unknown macro ${ctxx}; expected one of: MODEL_ID, PORT, x"),
    "macro-defined-after-use": ("macros:\n  a: \"${b}\"\n  b: x\nmodels:\n  m:\n    cmd: llama-server ${a} --port ${PORT}\n",
                                6, "models.m.cmd: unknown macro ${b}"),
    "no-cmd": ("models:\n  a:\n    proxy: http://127.0.0.1:9000\n", 2, "models.a: no cmd; expected cmd:"),
    "group-unknown-model": ("models:\n  a: {cmd: \"llama-server --port ${PORT}\"}\ngroups:\n  g:\n    members:\n"
                            "      - a\n      - b\n", 7, "groups.g.members: 'b' is not a model of this config; expected one of: a"),
    "member-twice": ("models:\n  a: {cmd: \"llama-server --port ${PORT}\"}\ngroups:\n  g: {members: [a]}\n"
                     "  h: {members: [a]}\n", 5, "groups.h.members: 'a' is already a member of group g"),
    "reserved-macro": ("macros:\n  PORT: 1\nmodels:\n  a: {cmd: llama-server}\n", 2, "macros.PORT: a reserved name"),
    "unclosed-quote": ("models:\n  a:\n    cmd: \"llama-server --port ${PORT} --alias 'x\"\n", 3,
                       "models.a.cmd: No closing quotation; expected a command with every quote closed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_naming_file_and_line(case: str, tmp_path: Path) -> None:
    text, line, message = BAD[case]
    with pytest.raises(InputError) as raised:
        read_config(_config(tmp_path, text))
    said = str(raised.value)
    assert "\n" not in said
    assert said.startswith(f"{tmp_path / 'config.yaml'}:{line}: {message}"), said


def _fixture(tmp_path: Path, old: str, new: str, file: str = "fleet.toml") -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(FIXTURE, target)
    text = (target / file).read_text(encoding="utf-8")
    assert text.count(old) == 1
    (target / file).write_text(text.replace(old, new), encoding="utf-8")
    return target / "fleet.toml"


def test_a_llama_swap_model_the_config_lacks_is_one_line_at_fleet_toml(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, 'llama_swap_model = "llama3.1:8b"', 'llama_swap_model = "llama3:8b"')
    fleet = load_fleet(fleet_toml)
    with pytest.raises(InputError) as raised:
        render(fleet, fleet.services["llama"])
    assert str(raised.value) == (
        f"{fleet_toml}:27: services.llama.llama_swap_model: llama-swap.yaml has no model 'llama3:8b'; expected one of: "
        'autocomplete, llama3.1:8b, qwen2.5-coder:14b (llama_swap_model = "NAME")')


def test_a_model_that_runs_another_program_is_one_line_at_its_cmd(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, "      ${server} --host 127.0.0.1 --port ${PORT} \\",
                          "      /usr/bin/docker run --rm -p ${PORT}:8080 ghcr.io/ggml-org/llama.cpp:server \\",
                          "config/llama-swap.yaml")
    fleet = load_fleet(fleet_toml)
    with pytest.raises(InputError) as raised:
        render(fleet, fleet.services["autocomplete"])
    assert str(raised.value).startswith(f"{fleet_toml.parent / 'config' / 'llama-swap.yaml'}:40: models.autocomplete.cmd "
                                        "runs docker; expected llama-server itself")


def test_exclusive_with_must_name_another_service(tmp_path: Path) -> None:
    fleet_toml = _fixture(tmp_path, 'llama_swap_model = "llama3.1:8b"\n',
                          'llama_swap_model = "llama3.1:8b"\nexclusive_with = ["autocompletion"]\n')
    with pytest.raises(InputError) as raised:
        load_fleet(fleet_toml)
    assert str(raised.value) == (f"{fleet_toml}:28: services.llama.exclusive_with: 'autocompletion' names no other "
                                 "service; expected one of: coder, autocomplete")


def test_two_units_on_one_host_are_co_resident_unless_declared_exclusive(tmp_path: Path) -> None:
    from fleetgate.checks.seam_coresidence import co_resident_states

    target = tmp_path / "unit-exec"
    shutil.copytree(REPO / "fixtures" / "fleets" / "unit-exec", target)
    second = ('\n[services.chat-small]\nhost = "box"\nport = 8082\nengine = "llama.cpp"\n'
              'unit = "systemd/llama-chat.service"\n')
    with (target / "fleet.toml").open("a", encoding="utf-8") as out:
        out.write(second)
    states = co_resident_states(load_fleet(target / "fleet.toml"))
    assert [(s.host.name, s.states) for s in states] == [("box", (frozenset({"chat", "chat-small"}),))]
    with (target / "fleet.toml").open("a", encoding="utf-8") as out:
        out.write('exclusive_with = ["chat"]\n')
    assert co_resident_states(load_fleet(target / "fleet.toml")) == []
