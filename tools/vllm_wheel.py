"""Read a vLLM release's argument and metric definitions without importing vLLM.

``tools.extract_vllm_args`` reads every release's sdist with ``read_sources`` into vllm_releases.json;
``python -m tools.vllm_wheel PATH/TO/vllm-X.whl`` prints one wheel's reading (``pip download --no-deps
vllm==X`` gives the wheel), which must agree with what the committed data holds for that release.

What is read, as Python source parsed with ``ast`` (nothing of vLLM runs):

- the ``add_argument`` calls of ``EngineArgs.add_cli_args`` / ``AsyncEngineArgs.add_cli_args``
  (vllm/engine/arg_utils.py), and every field of ``FrontendArgs`` plus ``make_arg_parser``'s own
  arguments (vllm/entrypoints/openai/cli_args.py): each option's names and how its value is parsed. The
  kind follows the rules of ``_compute_kwargs`` in arg_utils.py, applied to the annotation of the config
  dataclass field that ``get_kwargs`` reads (vllm/config/*.py): a dataclass is JSON, ``bool`` is a
  ``--x/--no-x`` pair, a ``Literal`` is a choice, a collection takes one or more values, then ``int``,
  ``float``, ``dict`` (JSON) and ``str``;
- ``SpeculativeConfig``'s fields and the ``SpeculativeMethod`` literal (vllm/config/speculative.py), the
  schema ``--speculative-config`` is validated against;
- every metric vLLM's Prometheus logger registers (``name="vllm:..."`` with its counter/gauge/histogram
  class) in vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["read_wheel"]

_CONFIG_DIR = "vllm/config/"
_ARG_UTILS = "vllm/engine/arg_utils.py"
_CLI_ARGS = "vllm/entrypoints/openai/cli_args.py"
# Where later releases keep FrontendArgs and make_arg_parser (0.32: vllm/entrypoints/launchers/).
_CLI_ARGS_PATHS = (_CLI_ARGS, "vllm/entrypoints/launchers/cli_args.py", "vllm/entrypoints/common/cli_args.py")
_METRICS = ("vllm/v1/metrics/loggers.py", "vllm/v1/spec_decode/metrics.py")
_SPEC = "vllm/config/speculative.py"
# Where FlexibleArgumentParser lives, release by release.
_PARSER_PATHS = ("vllm/utils.py", "vllm/utils/__init__.py", "vllm/utils/argparse_utils.py")
# human_readable_int in arg_utils.py: these int fields also take "25.6k", "1M", "2Gi".
_HUMAN_READABLE = {"max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes"}


class _Types:
    """Annotations of config dataclass fields and module-level type aliases, from the sources' AST."""

    def __init__(self, sources: dict[str, ast.Module]) -> None:
        self.classes: dict[str, dict[str, ast.expr]] = {}
        self.bases: dict[str, list[str]] = {}
        self.aliases: dict[str, ast.expr] = {}
        for module in sources.values():
            for node in module.body:
                if isinstance(node, ast.ClassDef):
                    fields = {n.target.id: n.annotation for n in node.body
                              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
                    self.classes.setdefault(node.name, fields)
                    self.bases.setdefault(node.name, [b.id for b in node.bases if isinstance(b, ast.Name)])
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.aliases.setdefault(node.targets[0].id, node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    self.aliases.setdefault(node.target.id, node.value)

    def fields_with_bases(self, name: str) -> dict[str, ast.expr]:
        """A dataclass's fields with those it inherits (0.32: FrontendArgs(BaseFrontendArgs)), bases first."""
        fields: dict[str, ast.expr] = {}
        for base in self.bases.get(name, ()):
            if base in self.classes:
                fields.update(self.fields_with_bases(base))
        fields.update(self.classes.get(name, {}))
        return fields

    def parts(self, node: ast.expr | None, depth: int = 0) -> Iterator[tuple[str, Any]]:
        """The union members of an annotation: ("literal", values), ("name", "int"), ("class", name), ..."""
        if node is None or depth > 12:
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            yield from self.parts(node.left, depth + 1)
            yield from self.parts(node.right, depth + 1)
        elif isinstance(node, ast.Constant):
            if node.value is None:
                yield ("none", None)
            elif isinstance(node.value, str):
                yield from self.parts(ast.parse(node.value, mode="eval").body, depth + 1)
        elif isinstance(node, ast.Subscript):
            head = _name(node.value)
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head == "Literal":
                yield ("literal", tuple(self.literal_values(items, depth + 1)))
            elif head == "Optional":
                yield from self.parts(items[0], depth + 1)
                yield ("none", None)
            elif head == "Union":
                for item in items:
                    yield from self.parts(item, depth + 1)
            elif head == "Annotated":
                yield from self.parts(items[0], depth + 1)
            elif head in ("list", "tuple", "set", "List", "Tuple", "Set", "Sequence"):
                yield ("collection", head.lower())
            elif head in ("dict", "Dict", "Mapping"):
                yield ("name", "dict")
            elif head == "type":
                yield ("other", head)
            else:
                yield ("other", head)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            name = _name(node)
            if name in ("int", "float", "str", "bool", "dict"):
                yield ("name", name)
            elif name in self.aliases and depth < 12:
                yield from self.parts(self.aliases[name], depth + 1)
            elif name in self.classes:
                yield ("class", name)
            else:
                yield ("other", name)

    def literal_values(self, items: list[ast.expr], depth: int) -> Iterator[Any]:
        for item in items:
            if isinstance(item, ast.Constant):
                yield item.value
            else:
                for kind, value in self.parts(item, depth + 1):
                    if kind == "literal":
                        yield from value

    def kind(self, annotation: ast.expr | None, field: str) -> dict[str, Any]:
        """How argparse reads the value, by the order of the rules in arg_utils.py's _compute_kwargs."""
        parts = list(self.parts(annotation))
        kinds = {k for k, _ in parts}
        names = {v for k, v in parts if k == "name"}
        optional = "none" in kinds
        if "class" in kinds:
            # a config dataclass: the keys its dotted arguments (--X-config.KEY) may set are its fields
            group = next(v for k, v in parts if k == "class")
            return {"kind": "json", "keys": sorted(f for f in self.fields_with_bases(group) if not f.startswith("_"))}
        if "bool" in names:
            return {"kind": "bool"}
        if "literal" in kinds:
            values = [v for k, vs in parts if k == "literal" for v in vs]
            if "none" in kinds:
                values.append("None")
            return {"kind": "choice", "choices": [str(v) for v in values]}
        if "collection" in kinds:
            return {"kind": "list"}
        if "int" in names:
            return {"kind": "int", "human_readable": field in _HUMAN_READABLE, "optional": optional}
        if "float" in names:
            return {"kind": "float", "optional": optional}
        if "dict" in names:
            return {"kind": "json"}
        return {"kind": "str"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _functions(module: ast.Module, name: str) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            yield node


def _options_of(function: ast.FunctionDef, types: _Types) -> Iterator[dict[str, Any]]:
    sources: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _name(node.value.func) == "get_kwargs":
            target = node.targets[0]
            if isinstance(target, ast.Name) and node.value.args:
                sources[target.id] = _name(node.value.args[0])
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and _name(node.func) == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("-"):
            continue
        option: dict[str, Any] = {"names": names, "kind": "str"}
        for keyword in node.keywords:
            source = keyword.value
            if keyword.arg is None and isinstance(source, ast.Dict):
                # **{**X_kwargs["field"], "default": None}: the same field's kwargs with another default
                source = next((v for k, v in zip(source.keys, source.values, strict=True) if k is None), source)
            if keyword.arg is None and isinstance(source, ast.Subscript):
                var = _name(source.value)
                field = source.slice.value if isinstance(source.slice, ast.Constant) else None
                cls = sources.get(var)
                if cls and isinstance(field, str):
                    option.update(types.kind(types.classes.get(cls, {}).get(field), field))
                    option["config"] = f"{cls}.{field}"
            elif keyword.arg == "action":
                action = keyword.value.value if isinstance(keyword.value, ast.Constant) else _name(keyword.value)
                if action in ("store_true", "store_false"):
                    option["kind"] = "flag"
                elif action == "BooleanOptionalAction":
                    option["kind"] = "bool"
            elif keyword.arg == "type":
                kind = _name(keyword.value) if not isinstance(keyword.value, ast.Call) else _name(keyword.value.func)
                option["kind"] = {"int": "int", "float": "float", "str": "str"}.get(kind, option["kind"])
            elif keyword.arg == "choices" and isinstance(keyword.value, (ast.List, ast.Tuple)):
                option["kind"] = "choice"
                option["choices"] = [str(e.value) for e in keyword.value.elts if isinstance(e, ast.Constant)]
        yield option


def wanted(name: str) -> bool:
    """Whether a file of a release (a wheel's or an sdist's, relative to the package root) is one read here."""
    return ((name.startswith(_CONFIG_DIR) and name.endswith(".py")) or name == "vllm/config.py"
            or name in (_ARG_UTILS, *_CLI_ARGS_PATHS, *_METRICS, *_PARSER_PATHS))


def read_wheel(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        files = {n: wheel.read(n).decode("utf-8") for n in names if wanted(n)}
        version = next((n.split("/")[0].removesuffix(".dist-info").split("-")[1] for n in names
                        if n.endswith(".dist-info/METADATA")), "unknown")
    return read_sources(files, version, path.name)


def read_sources(files: dict[str, str], version: str, origin: str) -> dict[str, Any]:
    """One release's options, speculative-config schema and metrics from its sources (``vllm/...`` paths)."""
    sources = {n: ast.parse(text, filename=n) for n, text in files.items() if wanted(n) and n not in _PARSER_PATHS}
    types = _Types(sources)
    options: list[dict[str, Any]] = []
    for function in _functions(sources[_ARG_UTILS], "add_cli_args"):
        options += _options_of(function, types)
    cli_path = next(p for p in _CLI_ARGS_PATHS if p in sources)
    cli = sources[cli_path]
    for function in _functions(cli, "make_arg_parser"):
        options += _options_of(function, types)
    for field, annotation in types.fields_with_bases("FrontendArgs").items():
        option = {"names": [f"--{field.replace('_', '-')}"], **types.kind(annotation, field), "config": f"FrontendArgs.{field}"}
        if field in ("allowed_origins", "allowed_methods", "allowed_headers"):
            option["kind"] = "json"  # cli_args.py sets type=json.loads for these three
        if field == "middleware":
            option["kind"] = "str"
        options.append(option)
    for option in options:
        if option["kind"] == "bool":
            option["names"] = [*option["names"], *(f"--no-{n[2:]}" for n in option["names"] if n.startswith("--"))]
    spec_fields = types.classes.get("SpeculativeConfig", {})
    speculative = {
        "fields": {name: {k: v for k, v in types.kind(annotation, name).items() if k != "keys"}
                   for name, annotation in spec_fields.items() if not name.startswith("_")},
        "methods": [str(v) for k, vs in types.parts(types.aliases.get("SpeculativeMethod")) if k == "literal" for v in vs],
    }
    metrics = []
    for source in _METRICS:
        for node in ast.walk(sources[source]) if source in sources else ():
            if not isinstance(node, ast.Call):
                continue
            name = next((k.value.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)
                         and isinstance(k.value.value, str) and k.value.value.startswith("vllm:")), None)
            if name is None:
                continue
            func = _name(node.func).lower()
            kind = next((t for t in ("counter", "gauge", "histogram") if t in func), "unknown")
            metrics.append({"name": name, "type": kind, "source": source})
    parser = next((text for name, text in files.items() if "class FlexibleArgumentParser" in text), "")
    return {
        "release": version,
        # FlexibleArgumentParser: argparse's abbreviations unless it turns them off; dotted --X.KEY arguments where
        # it builds nested dicts from them
        "abbreviations": re.search(r"allow_abbrev\s*=\s*False", parser) is None,
        "dotted": "create_nested_dict" in parser,
        "generated_from": f"{origin}: {_ARG_UTILS}, {cli_path}, {_SPEC}, {', '.join(_METRICS)} (read with ast, not imported)",
        "options": options,
        "speculative_config": speculative,
        "metrics": sorted(metrics, key=lambda m: m["name"]),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m tools.vllm_wheel PATH/TO/vllm-X.whl\n")
        return 2
    json.dump(read_wheel(Path(argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
