"""The failure-raising lines of fleetgate/checks, found by reading the source (AST), and the codes they raise.

Every check declares its codes (``fleetgate.checks``: ``codes=`` of its declaration); this finds where each is
raised, so that tests can hold the two to each other and the coverage gate can name the lines no test ran.

A raise site is a ``raise`` or ``return`` of:

- ``X.fail(subject, BRANCH, ...)``, where ``X`` is a check: a module function whose decorator declares it
  (``@service_seam(..., codes=...)``, whatever the factory, ``.needing(...)`` or not): the code is ``NAME/BRANCH``
  (``NAME`` the decorator's ``name=``, else the function's name in kebab-case), each branch of ``A if ... else B``
  counted; a module-level ``X`` that is no declaration gives no code (the site is unread, and a test says so);
- ``check.fail(subject, BRANCH, ...)``, where ``check`` is a parameter of a helper shared by several checks (the
  ledger's, systemd's): its codes are ``NAME/BRANCH`` for each declaration a call of the helper passes as ``check``
  (none: the site is unread);
- a module function annotated ``-> Failure`` that takes ``code`` and builds its failure with ``X.fail(subject,
  code, ...)``: the code is ``NAME/CODE`` from the call's ``code=`` argument.

``endpoint_sites()`` reads the readiness failures that fleetgate/live/endpoint.py raises for the live checks that
report them (``Failure(code=f"{HEALTH}/loading", ...)``).

Used by tests/seams/test_raise_sites.py and by the coverage gate (tests/seams/coverage_gate.py).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fleetgate"
CHECKS = PACKAGE / "checks"
ENDPOINT = PACKAGE / "live" / "endpoint.py"


@dataclass(frozen=True)
class Site:
    path: Path
    line: int
    kind: str
    """``seam``, ``live`` or ``host`` (from the module's name)."""
    codes: tuple[str, ...]
    """The rendered failure code (two for ``A if ... else B``); empty when the site gives none it can read."""
    shared: bool = False
    """A helper's site: it raises its branch for each check its callers pass (``codes``: one per such check)."""

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


def _declaration(function: ast.stmt) -> ast.Call | None:
    """The decorator call that declares ``function`` a check (``@service_seam(..., codes=...)``, or its
    ``.needing(...)``), or None."""
    if not isinstance(function, ast.FunctionDef):
        return None
    for decorator in function.decorator_list:
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr == "needing" and isinstance(decorator.func.value, ast.Call)):
            decorator = decorator.func.value
        if isinstance(decorator, ast.Call) and any(keyword.arg == "codes" for keyword in decorator.keywords):
            return decorator
    return None


def _declared_name(function: ast.FunctionDef, call: ast.Call, constants: dict[str, str]) -> str | None:
    named = next((keyword.value for keyword in call.keywords if keyword.arg == "name"), None)
    return function.name.replace("_", "-") if named is None else _render(named, constants)


def declarations(tree: ast.Module, constants: dict[str, str]) -> dict[str, str]:
    """The module's checks: function -> check name (``@service_seam(codes={...}) def contract_pins``).

    A declaration is known by what it declares, not by the factory's name: any decorator call of a module function
    that takes ``codes=``. A list of factory names missed ``attempt_seam``: its branches read as a shared helper's,
    which excused the same branch of every other check."""
    found: dict[str, str] = {}
    for node in tree.body:
        call = _declaration(node)
        if call is not None and isinstance(node, ast.FunctionDef):
            name = _declared_name(node, call, constants)
            if name is not None:
                found[node.name] = name
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


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (assigned or imported)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {alias.asname or alias.name.partition(".")[0] for alias in node.names}
    return names


def _site(path: Path, line: int, call: ast.Call, constants: dict[str, str], decls: dict[str, str],
          factories: dict[str, str], module_names: set[str]) -> Site | None:
    kind = "live" if path.name.startswith("live_") else "host" if path.name.startswith("host_") else "seam"
    owner = _fail_owner(call)
    if owner is not None and len(call.args) >= 2:
        branch = call.args[1]
        if isinstance(branch, ast.Name) and branch.id not in constants:
            return None  # a factory's own body: its callers are the sites
        if owner in module_names and owner not in decls:
            return Site(path, line, kind, ())  # a check this reader cannot name: unread, never a shared helper's
        check = decls.get(owner, "{" + owner + "}")
        return Site(path, line, kind, tuple(f"{check}/{b}" for b in _render_all(branch, constants)))
    if isinstance(call.func, ast.Name) and call.func.id in factories:
        code = next((k.value for k in call.keywords if k.arg == "code"), None)
        branches = _render_all(code, constants) if code is not None else ()
        return Site(path, line, kind, tuple(f"{factories[call.func.id]}/{b}" for b in branches))
    return None


def _enclosing(tree: ast.Module) -> dict[int, ast.FunctionDef]:
    """id(node) -> the innermost function that holds it."""
    found: dict[int, ast.FunctionDef] = {}
    for function in ast.walk(tree):  # breadth first: an inner function comes after, and wins
        if isinstance(function, ast.FunctionDef):
            for node in ast.walk(function):
                found[id(node)] = function
    return found


_Helper = tuple[Site, str, str, int]
"""A helper's site, its function, the parameter that takes the check and its position (-1: keyword only)."""
_Passed = dict[str, list[tuple[ast.Call, dict[str, str]]]]
"""Called name -> its calls, each with the declarations of the calling module."""


@functools.lru_cache(maxsize=256)
def _module(text: str, filename: str) -> tuple[list[Site], list[_Helper], _Passed]:
    # Kept by text: a test that deletes one site at a time reads only the changed module again.
    path = Path(filename)
    tree = ast.parse(text, filename)
    constants = _constants(tree)
    decls = declarations(tree, constants)
    factories = _factories(tree, decls)
    module_names = _module_names(tree)
    enclosing = _enclosing(tree)
    sites: list[Site] = []
    helpers: list[_Helper] = []
    calls: _Passed = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else node.func.attr \
                if isinstance(node.func, ast.Attribute) else None
            if called is not None:
                calls.setdefault(called, []).append((node, decls))
        if not isinstance(node, ast.Raise | ast.Return):
            continue
        value = node.exc if isinstance(node, ast.Raise) else node.value
        if not isinstance(value, ast.Call):
            continue
        site = _site(path, node.lineno, value, constants, decls, factories, module_names)
        if site is None:
            continue
        owner = _fail_owner(value)
        function = enclosing.get(id(node))
        parameters = [a.arg for a in function.args.posonlyargs + function.args.args] if function else []
        if owner is not None and owner not in decls and function is not None and owner in parameters + [
                a.arg for a in function.args.kwonlyargs]:
            helpers.append((site, function.name, owner, parameters.index(owner) if owner in parameters else -1))
        else:
            sites.append(site)
    return sites, helpers, calls


def _passed(call: ast.Call, parameter: str, position: int) -> ast.expr | None:
    """What ``call`` passes for ``parameter`` (at ``position``)."""
    keyword = next((k.value for k in call.keywords if k.arg == parameter), None)
    return keyword if keyword is not None else call.args[position] if 0 <= position < len(call.args) else None


def raise_sites(checks: Path = CHECKS) -> list[Site]:
    """Every failure-raising line of fleetgate/checks, in file and line order."""
    sites: list[Site] = []
    helpers: list[_Helper] = []
    calls: _Passed = {}
    for path in sorted(checks.glob("*.py")):
        own, helped, called = _module(path.read_text(encoding="utf-8"), str(path))
        sites += own
        helpers += helped
        for name, found in called.items():
            calls.setdefault(name, []).extend(found)
    for site, function, parameter, position in helpers:
        passed = [(_passed(call, parameter, position), decls) for call, decls in calls.get(function, [])]
        names = sorted({decls[arg.id] for arg, decls in passed if isinstance(arg, ast.Name) and arg.id in decls})
        branches = [code.split("/", 1)[1] for code in site.codes]
        sites.append(Site(site.path, site.line, site.kind, tuple(f"{n}/{b}" for n in names for b in branches), shared=True))
    return sorted(sites, key=lambda s: (str(s.path), s.line))


def own_codes(checks: Path = CHECKS) -> set[str]:
    """The codes each declaration lists in its own ``codes={...}`` (a live check's own word for a transport branch
    among them), as against those its factory adds."""
    found: set[str] = set()
    for path in sorted(checks.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        constants = _constants(tree)
        for node in tree.body:
            call = _declaration(node)
            if call is None or not isinstance(node, ast.FunctionDef):
                continue
            name = _declared_name(node, call, constants)
            codes = next((k.value for k in call.keywords if k.arg == "codes"), None)
            if name is not None and isinstance(codes, ast.Dict):
                found |= {f"{name}/{key.value}" for key in codes.keys
                          if isinstance(key, ast.Constant) and isinstance(key.value, str)}
    return found


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
