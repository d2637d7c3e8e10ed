"""NixOS modules and Ansible templates: any text is a unit, or one line (not judged or bad input), never a traceback;
the Nix reader's bounds hold on deep nesting."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fleetgate.sources.ansible import render_template
from fleetgate.sources.nix import nix_units, read_nix_unit
from tests.fuzz._oneline import assert_reads_or_one_line

NIXISH = st.sampled_from([*"{}[]();=.:,@?\"'$\\#/* \n\t-+!<>ab1", "''", "${", "let ", " in ", "rec ", "inherit ",
                          "services.llama-cpp", "systemd.services.x", "serviceConfig", "ExecStart", "enable = true;",
                          "extraFlags", "lib.mkForce ", "toString ", "pkgs.llama-cpp", "/bin/llama-server", "true",
                          "null", "/*", "*/", "''${", "'''"])
NIX = st.lists(NIXISH, max_size=120).map("".join)


@given(st.one_of(NIX, st.text(max_size=200)))
def test_any_nix_file_is_units_or_one_line(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.nix"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        units = assert_reads_or_one_line(lambda: nix_units(path))
        for name in getattr(units, "units", {}):
            assert_reads_or_one_line(lambda n=name: read_nix_unit(path, n))


JINJAISH = st.sampled_from([*"{}%#|.()[]'\" \nab1", "{{ ", " }}", "{% ", " %}", "for x in ", "endfor", "if ",
                            "endif", "range(", "llama_port", "models_dir", " | default(1)", " | ipaddr", "*", "**",
                            "__class__", "ExecStart=", "[Service]\n"])
JINJA = st.lists(JINJAISH, max_size=60).map("".join)


@given(JINJA)
def test_any_template_renders_or_is_one_line(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        role = Path(tmp) / "roles" / "r"
        (role / "templates").mkdir(parents=True)
        (role / "defaults").mkdir()
        (role / "defaults" / "main.yml").write_text("llama_port: 8080\nmodels_dir: /srv/m\n", encoding="utf-8")
        path = role / "templates" / "x.service.j2"
        path.write_text(text, encoding="utf-8")
        assert_reads_or_one_line(lambda: render_template(path, Path(tmp)))
