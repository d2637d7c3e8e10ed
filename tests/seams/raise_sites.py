"""The failure-raising lines of fleetgate/checks, found by reading the source (AST), and their codes.

A raise site is ``raise Failure(...)``, ``raise X.f(...)`` where ``f`` is a function of fleetgate
annotated to return a ``Failure`` (a failure factory: ``endpoint.fail``), or ``return Failure(...)``
in a function of fleetgate/checks. Each site's code is read from its ``code=`` argument and rendered
with the module's string constants (``f"{NAME}/no-mmproj"`` -> ``vision-mmproj/no-mmproj``); a code
without a slash is a branch of the check named by the call's first argument (``endpoint.fail(CHAT,
code="garbage")``). A factory that takes no ``code`` names the branch itself (``unreachable``: one per
transport error kind) and its sites are listed as ``CHECK/<factory>``.

Used by tests/seams/test_raise_sites.py and by the coverage gate (tests/seams/coverage_gate.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fleetgate"
CHECKS = PACKAGE / "checks"


@dataclass(frozen=True)
class Site:
    path: Path
    line: int
    kind: str
    """``seam`` or ``live`` (from the module's name)."""
    codes: tuple[str, ...]
    """The rendered failure code (two for ``code=A if ... else B``); empty when the site gives none."""
    own_code: bool = False
    """The factory names the branch itself (no ``code`` argument to give)."""

    @property
    def where(self) -> str:
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{path}:{self.line}"


def _annotation_is_failure(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Failure"
    if isinstance(node, ast.Constant):
        return node.value == "Failure"
    if isinstance(node, ast.Attribute):
        return node.attr == "Failure"
    return False


def failure_factories() -> dict[str, str]:
    """Functions of fleetgate annotated ``-> Failure``, by name: ``param`` when the caller passes the code,
    ``own`` when the function sets it itself, ``none`` when no code is given at all."""
    factories: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _annotation_is_failure(node.returns):
                params = [a.arg for a in node.args.args + node.args.kwonlyargs]
                sets_code = any(isinstance(call, ast.Call) and _callee(call) == "Failure"
                                and any(k.arg == "code" for k in call.keywords) for call in ast.walk(node))
                factories[node.name] = "param" if "code" in params else "own" if sets_code else "none"
    return factories


def _constants(tree: ast.Module) -> dict[str, str]:
    constants: dict[str, str] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            constants[node.targets[0].id] = node.value.value
    return constants


def _render_all(node: ast.expr, constants: dict[str, str]) -> tuple[str, ...]:
    if isinstance(node, ast.IfExp):
        return _render_all(node.body, constants) + _render_all(node.orelse, constants)
    code = _render(node, constants)
    return (code,) if code is not None else ()


def _render(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id, "{" + node.id + "}")
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append(_render(value.value, constants) or "{?}")
        return "".join(parts)
    return None


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _site(path: Path, line: int, call: ast.Call, constants: dict[str, str], factories: dict[str, str]) -> Site | None:
    name = _callee(call)
    kind = "live" if path.name.startswith("live_") else "host" if path.name.startswith("host_") else "seam"
    if name != "Failure" and name not in factories:
        return None
    code_arg = next((k.value for k in call.keywords if k.arg == "code"), None)
    check = _render(call.args[0], constants) if call.args else None
    if name != "Failure" and factories[name] == "own":
        return Site(path, line, kind, (f"{check}/<{name}>",), own_code=True)
    if code_arg is None:
        return Site(path, line, kind, ())
    codes = _render_all(code_arg, constants)
    return Site(path, line, kind, tuple(c if "/" in c or check is None else f"{check}/{c}" for c in codes))


def raise_sites(checks: Path = CHECKS, factories: dict[str, str] | None = None) -> list[Site]:
    """Every failure-raising line of fleetgate/checks, in file and line order."""
    factories = failure_factories() if factories is None else factories
    sites = []
    for path in sorted(checks.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        constants = _constants(tree)
        for node in ast.walk(tree):
            value = node.exc if isinstance(node, ast.Raise) else node.value if isinstance(node, ast.Return) else None
            if isinstance(value, ast.Call):
                site = _site(path, node.lineno, value, constants, factories)
                if site is not None:
                    sites.append(site)
    return sorted(sites, key=lambda s: (str(s.path), s.line))


if __name__ == "__main__":
    for site in raise_sites():
        print(f"{site.where}\t{site.kind}\t{' '.join(site.codes) or '-'}")
