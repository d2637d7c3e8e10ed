"""The failure-raising lines of fleetgate/checks, found by reading the source (AST), and the codes they raise.

Every check declares its codes (``fleetgate.checks``: ``codes=`` of its declaration); this finds where each is
raised, so that tests can hold the two to each other and the coverage gate can name the lines no test ran.

A raise site is a ``raise`` or ``return`` of:

- ``X.fail(subject, BRANCH, ...)``, where ``X`` is a module-level declaration (``X = service_seam(NAME, ...)``):
  the code is ``NAME/BRANCH``, each branch of ``A if ... else B`` counted;
- ``check.fail(subject, BRANCH, ...)``, where ``check`` is a parameter (a helper shared by several checks, such
  as the ledger's): the code is ``{check}/BRANCH``, raised for whichever check the caller passes;
- a module function annotated ``-> Failure`` that takes ``code`` and builds its failure with ``X.fail(subject,
  code, ...)``: the code is ``NAME/CODE`` from the call's ``code=`` argument.

``endpoint_sites()`` reads the readiness failures that fleetgate/live/endpoint.py raises for the live checks that
report them (``Failure(code=f"{HEALTH}/loading", ...)``).

Used by tests/seams/test_raise_sites.py and by the coverage gate (tests/seams/coverage_gate.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fleetgate"
CHECKS = PACKAGE / "checks"
ENDPOINT = PACKAGE / "live" / "endpoint.py"
DECLARATIONS = ("service_seam", "chain_seam", "fleet_seam", "live_check", "host_check")


@dataclass(frozen=True)
class Site:
    path: Path
    line: int
    kind: str
    """``seam``, ``live`` or ``host`` (from the module's name)."""
    codes: tuple[str, ...]
    """The rendered failure code (two for ``A if ... else B``); empty when the site gives none it can read."""

    @property
    def where(self) -> str:
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{path}:{self.line}"


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


def declarations(tree: ast.Module, constants: dict[str, str]) -> dict[str, str]:
    """Module-level check declarations: variable -> check name (``PINS = service_seam(NAME, ...)``)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.func.id in DECLARATIONS and node.value.args):
            name = _render(node.value.args[0], constants)
            if name is not None:
                found[node.targets[0].id] = name
    return found


def _fail_owner(call: ast.Call) -> str | None:
    """``X`` of ``X.fail(...)``."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "fail" and isinstance(call.func.value, ast.Name):
        return call.func.value.id
    return None


def _factories(tree: ast.Module, decls: dict[str, str]) -> dict[str, str]:
    """Module functions annotated ``-> Failure`` that take ``code`` and fail a declared check: name -> check name."""
    found: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and isinstance(node.returns, ast.Name | ast.Constant)):
            continue
        returns = node.returns.id if isinstance(node.returns, ast.Name) else node.returns.value
        params = {a.arg for a in node.args.args + node.args.kwonlyargs}
        if returns != "Failure" or "code" not in params:
            continue
        for call in ast.walk(node):
            owner = _fail_owner(call) if isinstance(call, ast.Call) else None
            if owner in decls:
                found[node.name] = decls[owner]
    return found


def _site(path: Path, line: int, call: ast.Call, constants: dict[str, str], decls: dict[str, str],
          factories: dict[str, str]) -> Site | None:
    kind = "live" if path.name.startswith("live_") else "host" if path.name.startswith("host_") else "seam"
    owner = _fail_owner(call)
    if owner is not None and len(call.args) >= 2:
        branch = call.args[1]
        if isinstance(branch, ast.Name) and branch.id not in constants:
            return None  # a factory's own body: its callers are the sites
        check = decls.get(owner, "{" + owner + "}")
        return Site(path, line, kind, tuple(f"{check}/{b}" for b in _render_all(branch, constants)))
    if isinstance(call.func, ast.Name) and call.func.id in factories:
        code = next((k.value for k in call.keywords if k.arg == "code"), None)
        branches = _render_all(code, constants) if code is not None else ()
        return Site(path, line, kind, tuple(f"{factories[call.func.id]}/{b}" for b in branches))
    return None


def raise_sites(checks: Path = CHECKS) -> list[Site]:
    """Every failure-raising line of fleetgate/checks, in file and line order."""
    sites = []
    for path in sorted(checks.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        constants = _constants(tree)
        decls = declarations(tree, constants)
        factories = _factories(tree, decls)
        for node in ast.walk(tree):
            value = node.exc if isinstance(node, ast.Raise) else node.value if isinstance(node, ast.Return) else None
            if isinstance(value, ast.Call):
                site = _site(path, node.lineno, value, constants, decls, factories)
                if site is not None:
                    sites.append(site)
    return sorted(sites, key=lambda s: (str(s.path), s.line))


def endpoint_sites(path: Path = ENDPOINT) -> list[Site]:
    """The readiness failures the endpoint client raises for the live checks that report them."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    constants = _constants(tree)
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Failure":
            code = next((k.value for k in node.keywords if k.arg == "code"), None)
            codes = _render_all(code, constants) if code is not None else ()
            if codes and all("{" not in c for c in codes):
                sites.append(Site(path, node.lineno, "live", codes))
    return sorted(sites, key=lambda s: s.line)


if __name__ == "__main__":
    for site in raise_sites():
        print(f"{site.where}\t{site.kind}\t{' '.join(site.codes) or '-'}")
