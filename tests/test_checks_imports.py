"""What a check may import, read from the source (every ``import`` of every module of fleetgate/checks/, module-level,
function-local and type-only alike): a check gets what it needs from its subject, never by starting the sandbox or
reading a file itself.

- **The sandbox and the renderer**: no check imports them, nor the functions of ``fleetgate.render.rendered`` that render.
  A check that needs the service rendered another way asks its subject (``RenderedService.probe``), so the run's
  renderer makes each render once and counts it (``fleetgate.render.rendered.Renderer``, ``benchmarks/seam_runs.py``).
- **The readers** (env files, units, GGUF headers, profiles, manifests, the start-shape sources): the imports that are
  left are listed below, each with what it reads, so the list can only shrink. A new one fails here; one that is gone
  fails too, until it is struck from the list.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKS = REPO / "fleetgate" / "checks"

SANDBOX = ("fleetgate.sandbox", "fleetgate.render.dispatch", "fleetgate.render.script", "fleetgate.render.inputs",
           "fleetgate.render.serve_script", "fleetgate.render.unit_exec", "fleetgate.render.compose",
           "fleetgate.render.kubernetes", "fleetgate.render.llama_swap", "fleetgate.render.router_preset",
           "fleetgate.render.quadlet")
"""What runs a fleet's bash, and the renderer that runs it."""
RENDERING = ("render", "load_service", "attempt_service", "attempt_services", "Renderer")
"""The names of ``fleetgate.render.rendered`` that render (a check asks its subject instead)."""
READERS = ("fleetgate.envfile", "fleetgate.units", "fleetgate.models", "fleetgate.payload", "fleetgate.deploy",
           "fleetgate.manifest", "fleetgate.sources")
"""What reads a file of the fleet (or a model's) the way its consumer reads it."""

LEFT = {
    ("live_identity", "fleetgate.models"): "the served model's GGUF header, read from disk beside the endpoint",
    ("seam_swap", "fleetgate.payload"): "the fetch script's payload manifest",
    ("seam_swap", "fleetgate.models"): "each payload file's profile (its size)",
    ("host_payload", "fleetgate.payload"): "the fetch script's payload manifest, to compare with the host's files",
    ("seam_deploy", "fleetgate.deploy"): "the deploy script's readiness-probe table",
    ("seam_proxy", "fleetgate.envfile"): "the routing proxy's env file",
    ("seam_quadlet", "fleetgate.units"): "the Unit and Setting types of the rendered unit",
    ("seam_units", "fleetgate.units"): "the Unit and Setting types of the rendered unit",
    ("seam_units", "fleetgate.sources"): "systemd's ExecStart= expansion, applied to the unit's own line",
    ("seam_coresidence", "fleetgate.sources"): "a llama-swap config's groups and a router preset's models-max",
    ("seam_container_user", "fleetgate.sources"): "the engine an image reference names (a function of the text)",
}
"""The reader imports left, by (check module, reader): each is a fact a reader should hand the check instead."""


def _imports(path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, the names imported from it, line) of every import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # a check module's package is fleetgate.checks: one dot is it, two are fleetgate
            base = {0: "", 1: "fleetgate.checks"}.get(node.level, "fleetgate")
            module = ".".join(part for part in (base, node.module or "") if part)
            names = tuple(alias.name for alias in node.names)
            found.append((module, names, node.lineno))
            # `from fleetgate import render` imports a module by a name
            found += [(f"{module}.{name}", (), node.lineno) for name in names]
    return found


def _under(module: str, roots: tuple[str, ...]) -> str | None:
    return next((root for root in roots if module == root or module.startswith(root + ".")), None)


def _check_modules() -> list[Path]:
    return sorted(CHECKS.glob("*.py"))


def test_no_check_imports_the_sandbox_or_renders() -> None:
    offenders = []
    for path in _check_modules():
        for module, names, line in _imports(path):
            if (root := _under(module, SANDBOX)) is not None:
                offenders.append(f"fleetgate/checks/{path.name}:{line}: imports {root}")
            rendering = sorted(set(names) & set(RENDERING)) if module == "fleetgate.render.rendered" else []
            if rendering:
                offenders.append(f"fleetgate/checks/{path.name}:{line}: imports {', '.join(rendering)} from fleetgate.render.rendered")
    offenders = list(dict.fromkeys(offenders))
    assert offenders == [], "\n".join([*offenders, "ask the subject instead: RenderedService.probe(overrides, args=..., service=...)"])


def test_the_reader_imports_left_are_the_listed_ones() -> None:
    found: dict[tuple[str, str], list[str]] = {}
    for path in _check_modules():
        for module, _, line in _imports(path):
            if (root := _under(module, READERS)) is not None:
                found.setdefault((path.stem, root), []).append(f"fleetgate/checks/{path.name}:{line}")
    new = [f"{', '.join(sorted(set(found[key])))}: imports {key[1]}" for key in sorted(set(found) - set(LEFT))]
    gone = [f"{module} no longer imports {reader}: strike it from LEFT" for module, reader in sorted(set(LEFT) - set(found))]
    assert new + gone == [], "\n".join([*new, *gone, "a reader hands the check its facts; a check never reads a file"])


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Module-level, function-local, type-only and relative imports are all seen (what the two tests above rely on)."""
    source = tmp_path / "seam_x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import fleetgate.sandbox\n"
        "from fleetgate.render.rendered import RenderedService, load_service\n"
        "if TYPE_CHECKING:\n"
        "    from fleetgate.units import Unit\n"
        "def f() -> None:\n"
        "    from fleetgate.sources.llama_swap import read_config\n"
        "from ..render import types\n",
        encoding="utf-8")
    seen = {(module, line) for module, _, line in _imports(source)}
    assert {("fleetgate.sandbox", 2), ("fleetgate.render.rendered", 3), ("fleetgate.units", 5),
            ("fleetgate.sources.llama_swap", 7), ("fleetgate.render.types", 8)} <= seen
    assert [names for module, names, _ in _imports(source) if module == "fleetgate.render.rendered"] == [
        ("RenderedService", "load_service")]
