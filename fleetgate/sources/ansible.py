"""An Ansible role's template (a ``.j2`` unit, a llama-swap config) rendered the way the ``template`` module renders
it, from the variables that plain YAML files of the repository give it, without running Ansible.

The variables, lowest precedence first (Ansible's "Variable precedence", the layers a role's template sees):

1. the role's ``defaults/main.yml`` (or ``.yaml``, or every file of ``defaults/main/``);
2. the inventory's ``group_vars/all`` (a file or a directory of files) beside the playbooks, when the repository has
   exactly one; then the files fleet.toml names in ``ansible_vars`` (which groups a host belongs to is the
   inventory's business, so fleet.toml says it): a group's in the order given, then a host's (one under a
   ``host_vars`` directory), which wins over every group's whatever the order (Ansible's precedence puts inventory
   and playbook ``host_vars`` above every ``group_vars``);
3. the role's ``vars/main.yml``.

A value that is itself a template (``llama_models_dir: "{{ llama_home }}/models"``) is rendered in the same context,
as Ansible does lazily. The engine is Jinja2's sandbox with ``StrictUndefined`` and the ``template`` module's
``trim_blocks``; the few filters every role uses that are Ansible's own (``basename``, ``dirname``, ``bool``,
``mandatory``, ``quote``, ``to_json``, ``comment``) and ``ansible_managed`` are given. What needs Ansible itself -- a fact
(``ansible_default_ipv4``), ``hostvars``, a lookup, a registered result, a vault-encrypted value, another filter --
leaves the service not judged, in one line naming the command that gives the rendered file instead. A template
Jinja2 cannot parse is a broken file (Ansible refuses it too).
"""

from __future__ import annotations

import functools
import json
import posixpath
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fleetgate.errors import InputError, NotRead, read_text
from fleetgate.sources.yaml_bounded import compose_yaml

if TYPE_CHECKING:
    from fleetgate.sources.jinja import Jinja

__all__ = ["RENDERED_FILES", "ansible_vars_files", "render_template", "role_of", "template_variables"]

RENDERED_FILES = ("give the rendered file instead (`ansible-playbook PLAYBOOK --check --diff` shows it, or copy it from "
                  "the host) and declare it")
MAX_OUTPUT = 1 << 20
MAX_ITERATIONS = 100_000
MAX_PASSES = 8


def role_of(template: Path) -> Path | None:
    """The role directory of a template (``roles/NAME/templates/...``), None when it lies in no role."""
    for parent in template.parents:
        if parent.name == "templates" and any((parent.parent / d).is_dir() for d in ("tasks", "defaults", "vars")):
            return parent.parent
    return None


def _yaml_files(base: Path) -> list[Path]:
    """``base.yml``/``base.yaml``/``base`` as a file, or every YAML file of the directory ``base``, in name order."""
    for name in (base.name + ".yml", base.name + ".yaml", base.name):
        candidate = base.with_name(name)
        if candidate.is_file():
            return [candidate]
    if base.is_dir():
        return sorted(p for p in base.iterdir() if p.suffix in (".yml", ".yaml") and p.is_file())
    return []


def ansible_vars_files(root: Path, template: Path, declared: Sequence[Path] = ()) -> list[Path]:
    """The variable files of a template, lowest precedence first (the module's docstring)."""
    role = role_of(template)
    files: list[Path] = []
    if role is not None:
        files += _yaml_files(role / "defaults" / "main")
    alls = sorted({p for d in _group_vars_dirs(root) for p in _yaml_files(d / "all")})
    if len({p.parent if p.parent.name == "all" else p for p in alls}) == 1 or len(alls) == 1:
        files += alls
    files += sorted(declared, key=lambda p: "host_vars" in p.parts)
    if role is not None:
        files += _yaml_files(role / "vars" / "main")
    return files


def _group_vars_dirs(root: Path) -> Iterator[Path]:
    """``group_vars`` directories of the repository, at most three levels down (beside playbooks or an inventory)."""
    for depth in ("", "*/", "*/*/"):
        for found in sorted(root.glob(f"{depth}group_vars")):
            if found.is_dir() and "roles" not in found.relative_to(root).parts:
                yield found


class _Vault:
    """A vault-encrypted value: only Ansible, with the vault password, knows it."""

    def __init__(self, where: str) -> None:
        self.where = where


class _Constructor(yaml.constructor.SafeConstructor):
    pass


def _vault(constructor: _Constructor, node: yaml.Node) -> _Vault:
    return _Vault(f"line {node.start_mark.line + 1}")


def _unsafe(constructor: _Constructor, node: yaml.Node) -> Any:
    return constructor.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else None


# Ansible's own tags, on a constructor of this module only (add_constructor's typing wants a loader class).
_Constructor.yaml_constructors = {**yaml.constructor.SafeConstructor.yaml_constructors, "!vault": _vault,
                                  "!unsafe": _unsafe}


def _load(path: Path) -> dict[str, Any]:
    node = compose_yaml(path, read_text(path, "the Ansible variables file"), "an Ansible variables file (a mapping)")
    if node is None:
        return {}
    try:
        data = _Constructor().construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(path, mark.line + 1 if mark else None, f"{getattr(exc, 'problem', exc)}; expected plain YAML "
                         "variables") from None
    if not isinstance(data, dict):
        raise InputError(path, node.start_mark.line + 1, "the file is not a mapping; expected NAME: VALUE variables")
    return {str(k): v for k, v in data.items()}


def template_variables(files: Sequence[Path]) -> tuple[dict[str, Any], dict[str, Path]]:
    """Every variable of the files, the later file winning, and the file that set each."""
    merged: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    for file in files:
        for key, value in _load(file).items():
            merged[key] = value
            origin[key] = file
    return merged, origin


def _jinja() -> type[Jinja]:
    """Jinja2's sandbox and errors (``fleetgate.sources.jinja``), imported on first use and looked up again on every
    use, never kept here: a template compiles to code that imports ``jinja2.runtime`` by name, so an environment kept
    from a Jinja2 that was since dropped from ``sys.modules`` (pytester's inline runs restore it) would render its
    sentinel ``missing`` where a value belongs."""
    # Lazy, fleetgate's one import of Jinja2 (about 45 ms): only a repository with an Ansible template renders one,
    # and every `pytest seams/` imports this reader.
    from fleetgate.sources.jinja import Jinja

    return Jinja


def _environment(budget: list[int]) -> Any:
    jinja = _jinja()
    SecurityError = jinja.SecurityError

    def bounded_range(*args: int) -> Iterator[int]:
        for i in range(*args):
            budget[0] -= 1
            if budget[0] < 0:
                raise SecurityError(f"loops over more than {MAX_ITERATIONS} items in all")
            yield i

    def to_bool(value: Any) -> bool:
        # Ansible's bool filter: yes/on/1/true (any case) are true
        return value if isinstance(value, bool) else str(value).strip().lower() in ("yes", "on", "1", "true", "y", "t")

    def mandatory(value: Any, msg: str | None = None) -> Any:
        return value  # StrictUndefined already refuses an undefined value

    env = jinja.Bounded(MAX_OUTPUT, undefined=jinja.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
                        autoescape=False)
    env.globals["range"] = bounded_range
    env.globals["ansible_managed"] = "Ansible managed"
    env.filters.update({"basename": posixpath.basename, "dirname": posixpath.dirname, "bool": to_bool,
                        "mandatory": mandatory, "quote": lambda v: shlex.quote(str(v)),
                        "to_json": lambda v, **_: json.dumps(v),
                        "comment": lambda v, **_: "\n".join(f"# {line}" for line in str(v).splitlines())})
    env.filters = {name: _guarded(f) for name, f in env.filters.items()}
    return env


def _guarded(function: Any) -> Any:
    """A filter that refuses a value only Ansible knows before it looks at it (``basename`` of a vault value)."""
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, _Sealed):
                arg._refuse()
        return function(*args, **kwargs)
    return guarded


def _unread(path: Path, line: int | None, what: str) -> NotRead:
    return NotRead(path, line, f"not judged: {what}; {RENDERED_FILES}")


def render_template(template: Path, root: Path, declared: Sequence[Path] = ()) -> str:
    """The template's output as the ``template`` module writes it, from the role's and inventory's plain variables."""
    jinja = _jinja()
    files = ansible_vars_files(root, template, declared)
    variables, origin = template_variables(files)
    text = read_text(template, "the template")
    budget = [MAX_ITERATIONS]
    env = _environment(budget)
    try:
        compiled = env.from_string(text)
    except jinja.TemplateAssertionError as exc:
        # a filter or test Jinja2 lacks: Ansible's own (ipaddr, regex_replace, ...) or a collection's
        raise _unread(template, exc.lineno, exc.message or str(exc)) from None
    except jinja.TemplateSyntaxError as exc:
        raise InputError(template, exc.lineno, f"{exc.message}; expected a Jinja2 template Ansible can render") from None
    except jinja.TemplateError as exc:
        raise _unread(template, None, str(exc)) from None
    context = _resolved(env, variables, origin)
    try:
        out: list[str] = []
        size = 0
        for piece in compiled.generate(context):
            size += len(piece)
            if size > MAX_OUTPUT:
                raise InputError(template, None, f"renders to more than {MAX_OUTPUT} characters; expected a unit or a "
                                 "config file")
            out.append(piece)
    except jinja.UndefinedError as exc:
        raise _unread(template, _template_line(exc), f"{exc.message} here: a fact, a registered result, hostvars or "
                      "a variable of a group this host is in (declare that group's file in ansible_vars) only Ansible "
                      "gives") from None
    except jinja.SecurityError as exc:
        raise InputError(template, _template_line(exc), f"the template is refused: {exc}") from None
    except _Unusable as exc:
        shown = exc.path.relative_to(root) if root in exc.path.parents else exc.path
        raise _unread(template, _template_line(exc), f"{exc.name} ({shown}) {exc.reason}") from None
    except jinja.TemplateError as exc:
        raise _unread(template, _template_line(exc), f"{exc}") from None
    except RecursionError:
        raise InputError(template, None, "the template recurses without end (a macro calling itself); expected one "
                         "that renders") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise InputError(template, _template_line(exc), f"the template fails as Ansible would: {exc}") from None
    return "".join(out)


def _template_line(exc: BaseException) -> int | None:
    """The template's line of a render error, from the traceback frame Jinja2 maps to it."""
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return getattr(exc, "lineno", None) or line


def _resolved(env: Any, variables: Mapping[str, Any], origin: Mapping[str, Path]) -> dict[str, Any]:
    """Variables whose values are templates rendered in the same context, as Ansible renders them when used; one that
    cannot be rendered without Ansible (a fact, hostvars) says so where the template uses it, never its raw text."""
    context: dict[str, Any] = dict(variables)
    failed: dict[str, str] = {}
    for _ in range(MAX_PASSES):
        changed = False
        failed = {}
        for key, value in list(context.items()):
            if isinstance(value, str) and ("{{" in value or "{%" in value):
                try:
                    rendered = env.from_string(value).render(_visible(context, key, origin, {}))
                except _Unusable as exc:
                    failed[key] = f"needs {exc.name}, which {exc.reason}"
                    continue
                except (_jinja().TemplateError, TypeError, ValueError, RecursionError) as exc:
                    failed[key] = f"is a template only Ansible renders ({getattr(exc, 'message', None) or exc})"
                    continue
                if rendered != value:
                    context[key] = rendered
                    changed = True
        if not changed:
            break
    return _visible(context, None, origin, failed)


def _visible(context: Mapping[str, Any], skip: str | None, origin: Mapping[str, Path],
             failed: Mapping[str, str]) -> dict[str, Any]:
    """The context with every value only Ansible knows (vault-encrypted, or a template of a fact) an object whose use
    says which variable, which file and why."""
    out: dict[str, Any] = {}
    for key, value in context.items():
        if key == skip:
            continue
        if isinstance(value, _Vault):
            out[key] = _Sealed(key, origin.get(key, Path()), f"is vault-encrypted ({value.where}), which only Ansible "
                               "with the vault password reads")
        elif key in failed:
            out[key] = _Sealed(key, origin.get(key, Path()), failed[key])
        else:
            out[key] = value
    return out


class _Unusable(Exception):
    def __init__(self, name: str, path: Path, reason: str) -> None:
        super().__init__(f"{name} {reason}")
        self.name, self.path, self.reason = name, path, reason


class _Sealed:
    """A variable whose value only Ansible knows: using it in any way raises ``_Unusable``."""

    def __init__(self, name: str, path: Path, reason: str) -> None:
        self.name, self.path, self.reason = name, path, reason

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise _Unusable(self.name, self.path, self.reason)

    __str__ = __iter__ = __len__ = __bool__ = __int__ = __float__ = __getattr__ = __getitem__ = __eq__ = _refuse
    __hash__ = None  # type: ignore[assignment]
