"""The checks collected from the fleet, the way pytest collects doctests from a text file: with a fleet given
(``--fleet`` or the ``fleetgate_fleet`` ini option), the rootdir's ``seams/`` and ``live/`` hold every module of
``_modules.MODULES`` that is not on disk, at the path and with the node ids a copied module would have
(``seams/test_argv.py::test_engine_accepts_argv[frank-zealot]``). An installed fleetgate is then all a fleet's
repository needs: ``pytest --fleet fleet.toml`` runs every seam, and with ``--endpoint NAME`` the live and host
checks too; ``pytest seams/`` and ``pytest live/ --endpoint NAME`` run one directory where it exists.

``live/`` is supplied only with ``--endpoint`` (or ``--skip-live``), or where it is named on the command line: a run
of the seams never meets the live gate's usage error. A module on disk wins over the supplied one of its path, and
``--ignore`` drops a supplied module like any other. A supplied module's path can be named on the command line
(``pytest seams/test_argv.py::test_engine_accepts_argv``, as pytest prints a failure): collection starts at its
directory (the rootdir when that is not on disk) and keeps what the argument names.

A run given a fleet never ends with pytest's "no tests ran" (exit 5): what was typed selected none of its checks, a
usage error said in one line. A run given none, from a rootdir that holds fleet.toml, that collects nothing says in
one line what to pass; any other project keeps pytest's own answer.

PYTEST_DONT_REWRITE: the package imports this module before pytest registers it (for its one-line error on a
missing requirement), and it holds no test's assert.
"""

from __future__ import annotations

import linecache
import os
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from fleetgate.plugin._modules import DIRECTORIES, MODULES, CheckModule

__all__: list[str] = []

_Argument = tuple[Path, tuple[str, ...]]

_ARGUMENTS = pytest.StashKey[tuple[_Argument, ...]]()
"""The command line's collection arguments, when one of them named a supplied module that pytest could not find
on disk (the items are then held to them)."""
_NARROWED = pytest.StashKey[Path]()
"""The rootdir, when it is collected only because an argument named a supplied module of a directory not on disk."""


def _fleet_given(config: pytest.Config) -> bool:
    return bool(config.getoption("--fleet") or config.getini("fleetgate_fleet"))


def _supplied(config: pytest.Config, path: Path) -> bool:
    """Whether ``path`` is a supplied module or directory of this run that is not on disk."""
    if path.exists() or path.parent == path:
        return False
    directory = path if path.parent == config.rootpath else path.parent
    if directory.parent != config.rootpath or directory.name not in DIRECTORIES:
        return False
    if not (_fleet_given(config) or directory.is_dir()):
        return False
    return path == directory or any(config.rootpath / m.path == path for m in MODULES)


def _parse(config: pytest.Config, argument: str) -> _Argument:
    text, _, names = argument.partition("::")
    path = Path(config.invocation_params.dir, text).resolve()
    return path, tuple(names.split("::")) if names else ()


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """An argument naming a supplied module that is not on disk: collect from its directory (pytest refuses a path
    it cannot find), and keep only what the argument names (``pytest_collection_modifyitems``)."""
    config = session.config
    if config.option.pyargs:
        return
    parsed = tuple(_parse(config, argument) for argument in config.args)
    if not any(_supplied(config, path) for path, _ in parsed):
        return
    starts: list[str] = []
    for argument, (path, _) in zip(config.args, parsed, strict=True):
        if not _supplied(config, path):
            starts.append(argument)
            continue
        directory = path if path.parent == config.rootpath else path.parent
        start = directory if directory.is_dir() else config.rootpath
        starts.append(str(start))
        if start == config.rootpath and not any(p == start or p in start.parents for p, _ in parsed):
            config.stash[_NARROWED] = start
    config.stash[_ARGUMENTS] = parsed
    config.args[:] = starts


def _names_below_file(item: pytest.Item) -> list[str]:
    chain = item.listchain()
    files = [i for i, node in enumerate(chain) if isinstance(node, pytest.File)]
    return [node.name for node in chain[files[-1] + 1:]] if files else [item.name]


def _named(item: pytest.Item, argument: _Argument) -> bool:
    path, names = argument
    if not names:
        return item.path == path or path in item.path.parents
    if item.path != path:
        return False
    below = _names_below_file(item)
    if len(names) > len(below):
        return False
    *outer, last = names
    given = below[len(names) - 1]
    return below[:len(outer)] == outer and (given == last if "[" in last else given.split("[")[0] == last)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    arguments = config.stash.get(_ARGUMENTS, None)
    if arguments is None:
        return
    # Not deselected: what the command line did not name was never asked for. In the arguments' order, as pytest
    # runs the paths it is given.
    order = {item: next((i for i, argument in enumerate(arguments) if _named(item, argument)), None) for item in items}
    items[:] = sorted((item for item in items if order[item] is not None), key=lambda item: order[item] or 0)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if (path / "__init__.py").exists():
        return None
    if path == config.rootpath and _fleet_given(config):
        return _Root.from_parent(parent, path=path)
    if path.parent == config.rootpath and path.name in DIRECTORIES and (_fleet_given(config) or _only_supplied(parent, path)):
        return _Checks.from_parent(parent, path=path)
    return None


def _only_supplied(parent: pytest.Collector, path: Path) -> bool:
    """Named on the command line without a fleet, and holding no test module of its own: the supplied modules, which
    then say in one line that a fleet is needed."""
    named = parent.session.isinitpath(path, with_parents=True) or any(
        p == path or path in p.parents for p, _ in parent.config.stash.get(_ARGUMENTS, ()))
    return named and not any(path.glob("test_*.py"))


def _by_name(nodes: Iterable[pytest.Collector | pytest.Item]) -> list[pytest.Collector | pytest.Item]:
    # pytest collects a directory's entries by name: a supplied module takes the place its file would have.
    return sorted(nodes, key=lambda node: node.path.name)


def _wanted(collector: pytest.Collector, directory: Path) -> bool:
    """``live/``'s modules only for a run of the live gate, or one that names the directory (and is then told to
    choose an endpoint)."""
    config = collector.config
    return (directory.name != "live" or bool(config.getoption("--endpoint")) or bool(config.getoption("--skip-live"))
            or collector.session.isinitpath(directory, with_parents=True)
            or any(path == directory or directory in path.parents for path, _ in config.stash.get(_ARGUMENTS, ())))


class _Directory(pytest.Directory):
    """A directory's own entries, collected as ``pytest.Dir`` collects them (which is final: a collector of more is
    a ``Directory`` of its own)."""

    def _on_disk(self) -> list[pytest.Collector | pytest.Item]:
        if not self.path.is_dir():
            return []
        found: list[pytest.Collector | pytest.Item] = []
        for entry in sorted(os.scandir(self.path), key=lambda entry: entry.name):
            path = Path(entry.path)
            if entry.is_dir():
                if not self.session.isinitpath(path, with_parents=True) and self.ihook.pytest_ignore_collect(
                        collection_path=path, config=self.config):
                    continue
                directory = self.ihook.pytest_collect_directory(path=path, parent=self)
                found += [directory] if directory is not None else []
            elif entry.is_file():
                if not self.session.isinitpath(path) and self.ihook.pytest_ignore_collect(collection_path=path,
                                                                                           config=self.config):
                    continue
                found += self.ihook.pytest_collect_file(file_path=path, parent=self)
        return found


class _Root(_Directory):
    """The rootdir: its own entries, and ``seams/`` and ``live/`` where they are not on disk."""

    def collect(self) -> Iterable[pytest.Collector | pytest.Item]:
        children = self._on_disk()
        if self.config.stash.get(_NARROWED, None) == self.path:
            named = [path for path, _ in self.config.stash[_ARGUMENTS]]
            children = [c for c in children if any(c.path == p or c.path in p.parents for p in named)]
        for name in DIRECTORIES:
            path = self.path / name
            if not path.exists() and _wanted(self, path) and not self.ihook.pytest_ignore_collect(collection_path=path,
                                                                                                   config=self.config):
                children.append(_Checks.from_parent(self, path=path))
        return _by_name(children)


class _Checks(_Directory):
    """``seams/`` or ``live/`` of the rootdir, on disk or not: its files, and every supplied module not among them."""

    def collect(self) -> Iterable[pytest.Collector | pytest.Item]:
        children = self._on_disk()
        if not _wanted(self, self.path):
            return _by_name(children)
        for module in MODULES:
            path = self.config.rootpath / module.path
            if path.parent != self.path or path.exists():
                continue
            if not self.session.isinitpath(path) and self.ihook.pytest_ignore_collect(collection_path=path, config=self.config):
                continue
            children.append(_Supplied.from_parent(self, path=path, check_module=module))
        return _by_name(children)


class _Supplied(pytest.Module):
    """A supplied module: its text (``CheckModule.source``) run as a module at its path, which pytest shows in a
    failure's traceback and a skip's location."""

    def __init__(self, *args: Any, check_module: CheckModule, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.check_module = check_module

    def _getobj(self) -> types.ModuleType:
        source = self.check_module.source()
        filename = str(self.path)
        module = types.ModuleType(f"fleetgate_{self.check_module.directory}.{Path(self.check_module.filename).stem}",
                                  self.check_module.about)
        module.__file__ = filename
        exec(compile(source, filename, "exec"), module.__dict__)
        # A traceback through a supplied test reads its lines here: the file is not on disk.
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        for check in self.check_module.checks:
            # collected whatever python_functions says
            getattr(module, CheckModule.function(check)).__test__ = True
        return module


def _fleet_here(config: pytest.Config) -> Path | None:
    manifest = config.rootpath / "fleet.toml"
    return manifest if manifest.is_file() else None


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """A fleet's repository run without naming its fleet collects nothing: say what to pass instead of "no tests ran".
    Another project (no fleet.toml at its rootdir) keeps pytest's own answer."""
    config = session.config
    if session.items or _fleet_given(config) or config.option.pyargs or _fleet_here(config) is None:
        return
    raise pytest.UsageError(
        "fleetgate: no fleet given, and fleet.toml is at the rootdir: pass --fleet fleet.toml, or set "
        'fleetgate_fleet = "fleet.toml" in the ini file ([tool.pytest.ini_options] of pyproject.toml)')


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run given a fleet that ran no test ends as a usage error, said in one line: exit 5 would read as "this
    project has no tests", and a fleet always has checks (what was typed selected none of them)."""
    config = session.config
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or not _fleet_given(config):
        return
    session.exitstatus = pytest.ExitCode.USAGE_ERROR
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.write_line("fleetgate: the fleet was given but no test ran: the arguments, -k, -m, --check or "
                            "--incident selected none of its checks (pytest --fleet FLEET --collect-only lists them)")
