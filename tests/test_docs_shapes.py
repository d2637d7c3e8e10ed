"""A user finds the shapes fleetgate reads in its docs: issue 32 began with real fleets whose generators (Nix,
Ansible, Kubernetes, Helm) no page named. The README names every kind of file init reads, and docs/sources.md lists
every fixture fleet the suite proves a shape on."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SHAPES = ("systemd units", "Quadlets", "compose", "`docker run`", "Kubernetes", "helm template", "kustomize",
          "NixOS", "Ansible", "llama-swap", "router presets", "serve scripts")
"""What init reads (tests/test_init.py's NO_ENGINE_NEXT says the same to a user whose repository holds none)."""


def test_the_readme_names_every_shape_init_reads() -> None:
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert [shape for shape in SHAPES if shape not in readme] == []


def test_docs_sources_lists_every_fixture_fleet() -> None:
    text = (REPO / "docs" / "sources.md").read_text(encoding="utf-8")
    table = text[text.index("## Fixture fleets"):text.index("## Not read yet")]
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M))
    on_disk = {p.name for p in (REPO / "fixtures" / "fleets").iterdir() if (p / "fleet.toml").exists()}
    assert listed == on_disk
