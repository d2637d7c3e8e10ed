"""A NixOS module's engine unit read without evaluating Nix (fleetgate/sources/nix.py): the unit nixpkgs'
services.llama-cpp module generates from its documented options, a hand-written systemd.services entry, the subset of
Nix read, and what is beyond it (one not-judged line naming the generated unit to give instead)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.sources.nix import NotRead, nix_units, read_nix_unit

REPO = Path(__file__).resolve().parents[1]
NIXOS = REPO / "fixtures" / "fleets" / "nixos"


def _settings(path: Path, name: str | None) -> list[tuple[str, str, str, int]]:
    return [(s.section, s.key, s.value, s.line) for s in read_nix_unit(path, name).settings]


def test_the_modules_unit_has_its_documented_defaults_and_the_options_given() -> None:
    # nixpkgs nixos/modules/services/misc/llama-cpp.nix: --host and --port first, then -m, then extraFlags, each
    # argument a JSON string (utils.escapeSystemdExecArgs); the amendment of systemd.services.llama-cpp applies after.
    assert _settings(NIXOS / "modules" / "llm.nix", "llama-cpp") == [
        ("Unit", "Description", "LLaMA C++ server", 8),
        ("Unit", "After", "network.target", 8),
        ("Service", "Type", "idle", 8),
        ("Service", "KillSignal", "SIGINT", 8),
        ("Service", "ExecStart", '/nix/store/llama-cpp/bin/llama-server "--host" "127.0.0.1" "--port" "8012" "-m" '
         '"/var/lib/models/Qwen3-8B-Q4_K_M.gguf" "--ctx-size" "16384" "--n-gpu-layers" "99" "--parallel" "2" "--jinja"',
         14),
        ("Service", "Restart", "on-failure", 8),
        ("Service", "RestartSec", "300", 8),
        ("Service", "PrivateDevices", "false", 8),
        ("Service", "DynamicUser", "true", 8),
        ("Install", "WantedBy", "multi-user.target", 8),
        ("Service", "Environment", '"CUDA_VISIBLE_DEVICES=0"', 23),
    ]
    assert read_nix_unit(NIXOS / "modules" / "llm.nix", None).host_name == "llama-cpp.service"


def test_a_hand_written_service_is_its_service_config_environment_and_wanted_by() -> None:
    assert _settings(NIXOS / "modules" / "coder.nix", "llama-coder") == [
        ("Install", "WantedBy", "multi-user.target", 14),
        ("Service", "Environment", '"CUDA_VISIBLE_DEVICES=1"', 17),
        ("Service", "ExecStart", "/nix/store/llama-cpp/bin/llama-server --host 127.0.0.1 --port 8013 -m "
         "/var/lib/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf -c 8192 -ngl 99 --parallel 1", 21),
        ("Service", "User", "llm", 22),
        ("Service", "Group", "llm", 23),
        ("Service", "Restart", "on-failure", 24),
        ("Service", "RestartSec", "5", 25),
    ]


def test_files_with_no_engine_unit_list_none() -> None:
    for name in ("flake.nix", "hosts/atlas/configuration.nix", "hosts/atlas/hardware-configuration.nix"):
        assert dict(nix_units(NIXOS / name).units) == {}


SUBSET = r'''{ pkgs, lib, ... }@args:
let
  common = rec { port = 8000; flags = [ "--port" (toString port) ]; };
  inherit (common) flags;
  /* a comment */ home = "/var/lib/vllm";
in {
  config = {
    systemd.services."vllm-qwen" = {
      wantedBy = [ "multi-user.target" ];
      environment.HF_HOME = home;
      environment.VLLM_NOTE = ''
        home is ''${HOME}
      '';
      serviceConfig = {
        ExecStart = lib.mkForce ("${pkgs.python3Packages.vllm}/bin/vllm serve Qwen/Qwen3-8B " + "");
        DynamicUser = true;
        SupplementaryGroups = [ "video" "render" ];
      };
    };
  };
}
'''


def test_the_subset_let_rec_inherit_indented_strings_lists_and_config(tmp_path: Path) -> None:
    path = tmp_path / "vllm.nix"
    path.write_text(SUBSET, encoding="utf-8")
    # `+` of two strings is beyond the subset: one line naming the option.
    with pytest.raises(NotRead) as caught:
        read_nix_unit(path, "vllm-qwen")
    assert str(caught.value) == (
        f"{path}:15: not judged: systemd.services.vllm-qwen.serviceConfig.ExecStart is `... + ...`, which only "
        "evaluation gives (fleetgate reads Nix without evaluating it); give the generated unit instead (`nixos-rebuild "
        "build`, then `cp -L result/etc/systemd/system/NAME.service` into the repository: result is a link into the "
        "store) and declare it as unit")
    path.write_text(SUBSET.replace(' " + "")', '")'), encoding="utf-8")
    assert _settings(path, None) == [
        ("Install", "WantedBy", "multi-user.target", 9),
        ("Service", "Environment", '"HF_HOME=/var/lib/vllm"', 10),
        # ''${ is a literal ${ (the indented string's indentation and first line dropped).
        ("Service", "Environment", '"VLLM_NOTE=home is ${HOME}\\n"', 11),
        ("Service", "ExecStart", "/nix/store/python3Packages.vllm/bin/vllm serve Qwen/Qwen3-8B", 15),
        ("Service", "DynamicUser", "true", 16),
        ("Service", "SupplementaryGroups", "video", 17),
        ("Service", "SupplementaryGroups", "render", 17),
    ]


@pytest.mark.parametrize(("text", "line", "message"), [
    ('{ services.llama-cpp.port = "8080; }', 1, "an unclosed string; expected a closing \""),
    ("{ a = 1; a = 2; }", 1, "a is defined twice (also on line 1); Nix refuses the module"),
    ("{\n  a = " + "[" * 80 + "]" * 80 + ";\n}", 2, "nested deeper than 64; expected a NixOS module"),
    # Each binding twice the one after it: 2**40 characters if built.
    ("let\n" + "".join(f'  a{i} = "${{a{i + 1}}}${{a{i + 1}}}";\n' for i in range(40)) + '  a40 = "x";\nin {\n'
     "  systemd.services.s.serviceConfig.ExecStart = \"/bin/llama-server ${a0}\";\n}\n", 36,
     "the values the unit needs expand past 20000 steps; expected a NixOS module that names its values"),
])
def test_bad_nix_is_one_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "bad.nix"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        nix_units(path)
    assert not isinstance(caught.value, NotRead)
    assert str(caught.value) == f"{path}:{line}: {message}"


# Syntax outside the reader's subset, whether Nix takes it or not: not judged, never a finding about the fleet.
@pytest.mark.parametrize(("text", "line", "what"), [
    ("{ a = 1 }", 1, "'}' where the reader expects ';'"),
    ("{\n  a = $x;\n}", 2, "'$'"),
    ("{ a = assert true; 1; }", 1, "'1' where the reader expects an attribute name"),
])
def test_nix_beyond_the_subset_is_not_judged(tmp_path: Path, text: str, line: int, what: str) -> None:
    path = tmp_path / "other.nix"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(NotRead) as caught:
        nix_units(path)
    assert str(caught.value) == (f"{path}:{line}: not judged: {what} is Nix this reader does not read; give the "
                                 "generated unit instead (`nixos-rebuild build`, then `cp -L "
                                 "result/etc/systemd/system/NAME.service` into the repository: result is a link into "
                                 "the store) and declare it as unit")


def test_a_module_not_enabled_is_not_judged_and_an_mkif_is_beyond_the_subset(tmp_path: Path) -> None:
    path = tmp_path / "llm.nix"
    path.write_text("{ config, lib, ... }: lib.mkIf config.gpu.enable {\n  services.llama-cpp.enable = true;\n}\n",
                    encoding="utf-8")
    with pytest.raises(NotRead) as caught:
        nix_units(path)
    assert caught.value.line == 1
    path.write_text("{\n  services.llama-cpp = {\n    model = /srv/m.gguf;\n  };\n}\n", encoding="utf-8")
    units = nix_units(path)
    assert dict(units.engines) == {"llama-cpp": None}
    assert str(units.unread["llama-cpp"]).startswith(f"{path}:2: not judged: services.llama-cpp.enable is not true")


# What `nixos-rebuild build` writes for the module's unit (result/etc/systemd/system/llama-cpp.service, copied out of
# the store with cp -L): an ordinary unit, read as every unit is.
GENERATED = """[Unit]
After=network.target
Description=LLaMA C++ server

[Service]
Environment="LOCALE_ARCHIVE=/nix/store/0000000000000000000000000000000a-glibc-locales-2.40/lib/locale/locale-archive"
Environment="PATH=/nix/store/0000000000000000000000000000000b-coreutils-9.5/bin"
Environment="CUDA_VISIBLE_DEVICES=0"
DynamicUser=true
ExecStart=/nix/store/0000000000000000000000000000000c-llama-cpp-5760/bin/llama-server "--host" "127.0.0.1" "--port" "8012" \
"-m" "/var/lib/models/Qwen3-8B-Q4_K_M.gguf" "--ctx-size" "16384"
KillSignal=SIGINT
Restart=on-failure
RestartSec=300
Type=idle

[Install]
WantedBy=multi-user.target
"""


def test_the_generated_unit_given_instead_is_read_by_init(tmp_path: Path) -> None:
    from fleetgate.init import discover

    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "llama-cpp.service").write_text(GENERATED, encoding="utf-8")
    found = discover(tmp_path).services
    assert [(f.name, f.port, f.unit, f.payload) for f in found] == [
        ("llama-cpp", 8012, "units/llama-cpp.service", ("/var/lib/models/Qwen3-8B-Q4_K_M.gguf",))]
