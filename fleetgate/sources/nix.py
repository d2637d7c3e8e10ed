"""A NixOS configuration's engine unit, read from a ``.nix`` file without evaluating Nix.

NixOS turns two kinds of option into the systemd unit that starts an engine:

- ``services.llama-cpp`` (nixpkgs ``nixos/modules/services/misc/llama-cpp.nix``): its documented options are
  ``enable``, ``package``, ``model``, ``modelsDir``, ``extraFlags``, ``host`` (default ``127.0.0.1``), ``port``
  (default 8080) and ``openFirewall``. The module's unit ``llama-cpp.service`` runs
  ``PACKAGE/bin/llama-server --host HOST --port PORT [-m MODEL] [--models-dir DIR] EXTRAFLAGS...``, every argument
  escaped by ``utils.escapeSystemdExecArgs`` (a JSON string, ``%`` and ``$`` doubled), with ``DynamicUser=true``,
  ``Restart=on-failure`` and ``wantedBy = [ "multi-user.target" ]``;
- ``systemd.services.NAME`` written by hand: ``serviceConfig`` keys become ``[Service]`` settings (a list one line
  per item, a boolean ``true``/``false``), ``environment`` becomes ``Environment=``, ``wantedBy`` becomes
  ``[Install] WantedBy=``. The same attribute set also amends the module's unit (``systemd.services.llama-cpp``).

The reader knows the subset of Nix these configurations use: a module function's argument pattern, attribute sets
(dotted paths merged, ``rec``), ``let ... in`` bindings and references to them, strings (``"..."``, ``''...''``) whose
``${...}`` names a binding, a package (``pkgs.X``) or ``toString`` of a number, lists (and ``++`` of lists),
numbers, booleans, ``null``, paths, and ``lib.mkForce``/``lib.mkDefault``/``lib.mkOverride N`` around a value.
Anything else (``import``, ``if``, ``with``, ``//``, a function call, ``lib.mkIf``) is not read: a value the unit
needs that is one of them makes the service not judged, with the command that gives the unit NixOS generates.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleetgate.errors import InputError, NotRead, read_text
from fleetgate.units import Setting, Unit, unit_from_settings

__all__ = ["GENERATED_UNIT", "NixUnits", "NotRead", "nix_units", "read_nix_unit"]


GENERATED_UNIT = ("give the generated unit instead (`nixos-rebuild build`, then `cp -L result/etc/systemd/system/NAME"
                  ".service` into the repository: result is a link into the store) and declare it as unit")

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_TOKENS = 200_000
ENGINES = ("llama-server", "vllm")


# --- tokens -------------------------------------------------------------------------------------------------------


def _beyond(path: Path, line: int, what: str) -> NotRead:
    """Syntax the reader's subset does not hold (valid Nix or not: Nix itself would say): not judged, never a finding."""
    return NotRead(path, line, f"not judged: {what} is Nix this reader does not read; {GENERATED_UNIT}")


@dataclass(frozen=True)
class _Tok:
    kind: str  # id, int, float, str, istr, path, op, eof
    text: str
    line: int
    parts: tuple[str | tuple[str, int], ...] = ()
    """A string's pieces: literal text, or (the ``${...}`` source, its line)."""


_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_'\-]*")
_NUM = re.compile(r"\d+(\.\d+)?")
_PATH = re.compile(r"(?:\.{1,2}|~)?(?:/[A-Za-z0-9._\-+]+)+/?|<[A-Za-z0-9._\-+/]+>")
_OPS = ("...", "//", "++", "==", "!=", "<=", ">=", "&&", "||", "->", "{", "}", "[", "]", "(", ")", "=", ";", ".",
        ",", ":", "?", "@", "+", "-", "*", "/", "!", "<", ">")


def _interpolation(text: str, i: int, line: int, path: Path) -> tuple[str, int]:
    """The source of ``${...}`` starting at ``text[i]`` (after ``${``) and where it ends, braces and strings nested."""
    depth, j = 1, i
    while j < len(text):
        c = text[j]
        if c == '"':
            j += 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i:j], j + 1
        j += 1
    raise InputError(path, line, "an unclosed ${ in a string; expected a closing }")


def _tokens(text: str, path: Path) -> list[_Tok]:
    toks: list[_Tok] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        if len(toks) > MAX_TOKENS:
            raise InputError(path, line, f"more than {MAX_TOKENS} tokens; expected a NixOS configuration module")
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise InputError(path, line, "an unclosed /* comment; expected */")
            line += text.count("\n", i, end)
            i = end + 2
        elif c == '"':
            start_line, j = line, i + 1
            parts: list[str | tuple[str, int]] = []
            buf: list[str] = []
            while True:
                if j >= n:
                    raise InputError(path, start_line, "an unclosed string; expected a closing \"")
                ch = text[j]
                if ch == '"':
                    break
                if ch == "\\" and j + 1 < n:
                    buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(text[j + 1], text[j + 1]))
                    line += text[j + 1] == "\n"
                    j += 2
                elif text.startswith("${", j):
                    if buf:
                        parts.append("".join(buf))
                        buf = []
                    source, j = _interpolation(text, j + 2, line, path)
                    parts.append((source, line))
                    line += source.count("\n")
                else:
                    line += ch == "\n"
                    buf.append(ch)
                    j += 1
            if buf:
                parts.append("".join(buf))
            toks.append(_Tok("str", "", start_line, tuple(parts)))
            i = j + 1
        elif text.startswith("''", i):
            start_line, j = line, i + 2
            parts = []
            buf = []
            while True:
                if j >= n:
                    raise InputError(path, start_line, "an unclosed '' string; expected a closing ''")
                if text.startswith("'''", j):
                    buf.append("''")
                    j += 3
                elif text.startswith("''$", j):
                    buf.append("$")
                    j += 3
                elif text.startswith("''\\", j) and j + 3 < n:
                    buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(text[j + 3], text[j + 3]))
                    j += 4
                elif text.startswith("''", j):
                    break
                elif text.startswith("${", j):
                    if buf:
                        parts.append("".join(buf))
                        buf = []
                    source, j = _interpolation(text, j + 2, line, path)
                    parts.append((source, line))
                    line += source.count("\n")
                else:
                    line += text[j] == "\n"
                    buf.append(text[j])
                    j += 1
            if buf:
                parts.append("".join(buf))
            toks.append(_Tok("istr", "", start_line, tuple(_dedent(parts))))
            i = j + 2
        elif (m := _PATH.match(text, i)) and (c in "./~<" and (c != "<" or m.group().endswith(">"))):
            toks.append(_Tok("path", m.group(), line))
            i = m.end()
        elif m := _NUM.match(text, i):
            toks.append(_Tok("float" if m.group(1) else "int", m.group(), line))
            i = m.end()
        elif m := _ID.match(text, i):
            toks.append(_Tok("id", m.group(), line))
            i = m.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise _beyond(path, line, f"{c!r}")
            toks.append(_Tok("op", op, line))
            i += len(op)
    toks.append(_Tok("eof", "", line))
    return toks


def _dedent(parts: list[str | tuple[str, int]]) -> list[str | tuple[str, int]]:
    """An indented string's common indentation removed and its first line dropped when blank, as Nix does."""
    text = "".join(p if isinstance(p, str) else "\0" for p in parts)
    lines = text.split("\n")
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines[1:] if ln.strip(" ")]
    if lines and lines[0].strip(" ") and not lines[0].startswith(" "):
        indents.append(0)
    cut = min(indents) if indents else 0
    out_lines = [lines[0]] + [ln[cut:] for ln in lines[1:]]
    if out_lines and not out_lines[0].strip(" "):
        out_lines = out_lines[1:]
    if out_lines and not out_lines[-1].strip(" "):
        out_lines[-1] = ""
    joined = "\n".join(out_lines)
    sources = iter(p for p in parts if not isinstance(p, str))
    result: list[str | tuple[str, int]] = []
    for k, piece in enumerate(joined.split("\0")):
        if k:
            result.append(next(sources))
        if piece:
            result.append(piece)
    return result


# --- values -------------------------------------------------------------------------------------------------------


@dataclass
class Attrs:
    line: int
    entries: dict[str, tuple[object, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Opaque:
    """An expression the reader does not evaluate, kept by its first line and a short spelling."""

    text: str
    line: int


@dataclass(frozen=True)
class Ref:
    """A name (``cfg.port``, ``pkgs.llama-cpp``): a binding of the file, or something only evaluation knows."""

    path: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class NixStr:
    parts: tuple[str | tuple[str, int], ...]
    line: int


@dataclass(frozen=True)
class NixPath:
    text: str
    line: int


@dataclass(frozen=True)
class NixList:
    items: tuple[object, ...]
    line: int


_OVERRIDES = {("lib", "mkForce"), ("mkForce",), ("lib", "mkDefault"), ("mkDefault",), ("lib", "mkOverride"),
              ("mkOverride",)}
_TO_STRING = {("toString",), ("builtins", "toString"), ("lib", "toString")}


class _Parser:
    def __init__(self, toks: list[_Tok], path: Path) -> None:
        self.toks, self.pos, self.path, self.depth = toks, 0, path, 0

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def take(self) -> _Tok:
        tok = self.peek()
        self.pos += 1
        return tok

    def at(self, text: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind in ("op", "id") and tok.text == text

    def expect(self, text: str) -> _Tok:
        tok = self.take()
        if tok.text != text or tok.kind not in ("op", "id"):
            shown = tok.text or tok.kind
            raise _beyond(self.path, tok.line, f"{shown!r} where the reader expects {text!r}")
        return tok

    def module(self) -> object:
        self.formals()
        value = self.expr()
        if self.peek().kind != "eof":
            raise _beyond(self.path, self.peek().line, f"{self.peek().text!r} after the module's value")
        return value

    def formals(self) -> None:
        """``{ config, pkgs, ... }:`` or ``args@{ ... }:`` or ``name:``: the module function's head, skipped."""
        while True:
            if self.peek().kind == "id" and self.at(":", 1):
                self.pos += 2
                continue
            if self.peek().kind == "id" and self.at("@", 1):
                self.pos += 2
            if not self.at("{"):
                return
            after = self.lambda_ahead()
            if not after:
                return
            self.pos += after

    def lambda_ahead(self) -> int:
        """How many tokens a ``{ a, b ? x, ... }:`` (or ``{ ... }@args:``) head takes here; 0 when it is a set."""
        depth, k = 0, 0
        while self.peek(k).kind != "eof":
            tok = self.peek(k)
            if tok.kind == "op" and tok.text in "{[(":
                depth += 1
            elif tok.kind == "op" and tok.text in "}])":
                depth -= 1
                if depth == 0:
                    break
            elif depth == 1 and tok.kind == "op" and tok.text in ("=", ";"):
                return 0  # a binding: an attribute set, not a function's head
            k += 1
        after = k + 1
        if self.at("@", after) and self.peek(after + 1).kind == "id":
            after += 2
        return after + 1 if self.at(":", after) else 0

    def expr(self) -> object:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InputError(self.path, self.peek().line, f"nested deeper than {MAX_DEPTH}; expected a NixOS module")
        try:
            return self._expr()
        finally:
            self.depth -= 1

    def _expr(self) -> object:
        tok = self.peek()
        if self.at("let"):
            self.take()
            bindings = Attrs(tok.line)
            while not self.at("in"):
                if self.peek().kind == "eof":
                    raise InputError(self.path, tok.line, "a let with no in; expected `let NAME = VALUE; ... in`")
                self.binding(bindings)
            self.take()
            body = self.expr()
            return _Let(bindings, body) if not isinstance(body, Opaque) else body
        if tok.kind == "id" and tok.text in ("with", "assert", "if", "import"):
            return self.opaque(tok)
        if (tok.kind == "id" and (self.at(":", 1) or self.at("@", 1))) or (self.at("{") and self.lambda_ahead()):
            return self.opaque(tok)
        left = self.application()
        while self.at("++") or self.at("//") or self.at("+") or self.at("==") or self.at("&&") or self.at("||") \
                or self.at("!=") or self.at("->") or self.at("-") or self.at("*"):
            op = self.take()
            right = self.application()
            if op.text == "++" and isinstance(left, NixList) and isinstance(right, NixList):
                left = NixList(left.items + right.items, left.line)
            else:
                left = Opaque(f"... {op.text} ...", op.line)
        return left

    def opaque(self, tok: _Tok) -> Opaque:
        """Skip an expression the reader does not evaluate, up to the ``;`` ``]`` or ``}`` that ends it."""
        depth = 0
        while self.peek().kind != "eof":
            t = self.peek()
            if t.kind == "op" and t.text in "{[(":
                depth += 1
            elif t.kind == "op" and t.text in "}])":
                if depth == 0:
                    break
                depth -= 1
            elif t.kind == "op" and t.text == ";" and depth == 0:
                break
            self.take()
        return Opaque(tok.text, tok.line)

    def application(self) -> object:
        tok = self.peek()
        head = self.select()
        args: list[object] = []
        while self.starts_operand():
            args.append(self.select())
        if not args:
            return head
        if isinstance(head, Ref) and head.path in _OVERRIDES:
            return args[-1]
        if isinstance(head, Ref) and head.path in _TO_STRING and len(args) == 1:
            return _ToString(args[0], tok.line)
        return Opaque(".".join(head.path) if isinstance(head, Ref) else "a function call", tok.line)

    def starts_operand(self) -> bool:
        tok = self.peek()
        if tok.kind in ("int", "float", "str", "istr", "path"):
            return True
        if tok.kind == "id":
            return tok.text not in ("in", "then", "else", "or")
        return tok.kind == "op" and tok.text in ("{", "[", "(")

    def select(self) -> object:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InputError(self.path, self.peek().line, f"nested deeper than {MAX_DEPTH}; expected a NixOS module")
        try:
            return self._select()
        finally:
            self.depth -= 1

    def _select(self) -> object:
        tok = self.take()
        if tok.kind == "int":
            return int(tok.text)
        if tok.kind == "float":
            return Opaque(tok.text, tok.line)
        if tok.kind in ("str", "istr"):
            return NixStr(tok.parts, tok.line)
        if tok.kind == "path":
            return NixPath(tok.text, tok.line)
        if tok.kind == "id":
            if tok.text in ("true", "false"):
                return tok.text == "true"
            if tok.text == "null":
                return None
            if tok.text == "rec" and self.at("{"):
                return self.attrs(self.take())
            names = [tok.text]
            while self.at("."):
                self.take()
                part = self.take()
                if part.kind == "id":
                    names.append(part.text)
                elif part.kind == "str" and all(isinstance(p, str) for p in part.parts):
                    names.append("".join(str(p) for p in part.parts))
                else:
                    return self.opaque(part)
            if self.at("or"):
                self.take()
                self.select()
                return Opaque(".".join(names), tok.line)
            return Ref(tuple(names), tok.line)
        if tok.kind == "op" and tok.text == "{":
            return self.attrs(tok)
        if tok.kind == "op" and tok.text == "[":
            items: list[object] = []
            while not self.at("]"):
                if self.peek().kind == "eof":
                    raise InputError(self.path, tok.line, "an unclosed list; expected ]")
                items.append(self.select())
            self.take()
            return NixList(tuple(items), tok.line)
        if tok.kind == "op" and tok.text == "(":
            value = self.expr()
            self.expect(")")
            if self.at("."):
                return self.opaque(self.peek())
            return value
        if tok.kind == "op" and tok.text in ("!", "-"):
            self.select()
            return Opaque(tok.text, tok.line)
        raise _beyond(self.path, tok.line, f"{tok.text or tok.kind!r} where the reader expects a value")

    def attrs(self, open_tok: _Tok) -> Attrs:
        result = Attrs(open_tok.line)
        while not self.at("}"):
            if self.peek().kind == "eof":
                raise InputError(self.path, open_tok.line, "an unclosed attribute set; expected }")
            self.binding(result)
        self.take()
        return result

    def binding(self, into: Attrs) -> None:
        tok = self.peek()
        if self.at("inherit"):
            self.take()
            source: object = None
            if self.at("("):
                self.take()
                source = self.expr()
                self.expect(")")
            while not self.at(";"):
                name = self.take()
                if name.kind != "id":
                    raise _beyond(self.path, name.line, f"{name.text!r} in inherit")
                inherited: object = Ref((name.text,), name.line) if source is None else _Select(source, name.text, name.line)
                into.entries[name.text] = (inherited, name.line)
            self.take()
            return
        names: list[str | None] = []
        while True:
            part = self.take()
            if part.kind == "id":
                names.append(part.text)
            elif part.kind == "str" and all(isinstance(p, str) for p in part.parts):
                names.append("".join(str(p) for p in part.parts))
            elif part.kind == "str":
                names.append(None)  # a name built by interpolation
            else:
                raise _beyond(self.path, part.line, f"{part.text or part.kind!r} where the reader expects an attribute name")
            if not self.at("."):
                break
            self.take()
        self.expect("=")
        value = self.expr()
        self.expect(";")
        if None in names:
            return  # a name only evaluation knows: not one of the options read
        _merge(into, [n for n in names if n is not None], value, tok.line, self.path)


@dataclass(frozen=True)
class _Let:
    bindings: Attrs
    body: object


@dataclass(frozen=True)
class _ToString:
    value: object
    line: int


@dataclass(frozen=True)
class _Select:
    source: object
    name: str
    line: int


def _merge(into: Attrs, names: list[str], value: object, line: int, path: Path) -> None:
    head, rest = names[0], names[1:]
    if not rest:
        old = into.entries.get(head)
        if old is not None and isinstance(old[0], Attrs) and isinstance(value, Attrs):
            for key, (v, ln) in value.entries.items():
                _merge(old[0], [key], v, ln, path)
            return
        if old is not None:
            raise InputError(path, line, f"{head} is defined twice (also on line {old[1]}); Nix refuses the module")
        into.entries[head] = (value, line)
        return
    old = into.entries.get(head)
    if old is None:
        child = Attrs(line)
        into.entries[head] = (child, line)
    elif isinstance(old[0], Attrs):
        child = old[0]
    else:
        raise InputError(path, line, f"{head} is defined twice (also on line {old[1]}); Nix refuses the module")
    _merge(child, rest, value, line, path)


# --- evaluation of the subset -------------------------------------------------------------------------------------


MAX_STEPS = 20_000
"""Values forced and strings built in one file: ``let a = "${b}${b}"; b = "${c}${c}"; ...`` doubles at each level."""


class _Scope:
    def __init__(self, path: Path, bindings: list[Attrs], steps: list[int] | None = None) -> None:
        self.path, self.bindings = path, bindings
        self.steps = steps if steps is not None else [MAX_STEPS]

    def step(self, line: int) -> None:
        self.steps[0] -= 1
        if self.steps[0] < 0:
            raise InputError(self.path, line, f"the values the unit needs expand past {MAX_STEPS} steps; expected a "
                             "NixOS module that names its values")

    def lookup(self, ref: Ref, seen: frozenset[tuple[str, ...]] = frozenset()) -> object:
        if ref.path in seen:
            return Opaque(".".join(ref.path), ref.line)
        for attrs in reversed(self.bindings):
            if ref.path[0] in attrs.entries:
                value: object = attrs.entries[ref.path[0]][0]
                for name in ref.path[1:]:
                    value = self.force(value, seen | {ref.path})
                    if not isinstance(value, Attrs) or name not in value.entries:
                        return Opaque(".".join(ref.path), ref.line)
                    value = value.entries[name][0]
                return self.force(value, seen | {ref.path})
        return ref

    def force(self, value: object, seen: frozenset[tuple[str, ...]] = frozenset()) -> object:
        if isinstance(value, Ref):
            return self.lookup(value, seen)
        if isinstance(value, _Select):
            source = self.force(value.source, seen)
            if isinstance(source, Attrs) and value.name in source.entries:
                return self.force(source.entries[value.name][0], seen)
            return Opaque(value.name, value.line)
        if isinstance(value, _Let):
            return _Scope(self.path, [*self.bindings, value.bindings], self.steps).force(value.body, seen)
        return value

    def string(self, value: object, option: str, line: int) -> str:
        """A string, path, number or package of the configuration as NixOS writes it into the unit."""
        self.step(line)
        value = self.force(value)
        if isinstance(value, bool) or value is None:
            raise self.unread(option, line, "true/false/null where a string is expected")
        if isinstance(value, int):
            return str(value)
        if isinstance(value, _ToString):
            inner = self.force(value.value)
            if isinstance(inner, int) and not isinstance(inner, bool):
                return str(inner)
            return self.string(inner, option, line)
        if isinstance(value, NixPath):
            return value.text
        if isinstance(value, Ref):
            if value.path[0] == "pkgs" or value.path[:2] == ("config", "services"):
                return _store(value)
            raise self.unread(option, value.line, f"`{'.'.join(value.path)}`, a name only evaluation knows")
        if isinstance(value, NixStr):
            out: list[str] = []
            for part in value.parts:
                if isinstance(part, str):
                    out.append(part)
                    continue
                source, at = part
                inner_value = _parse_fragment(source, at, self.path)
                out.append(self.string(inner_value, option, at))
                if sum(map(len, out)) > MAX_BYTES:
                    raise InputError(self.path, at, f"{option} expands past {MAX_BYTES} bytes; expected a NixOS module "
                                     "that names its values")
            return "".join(out)
        if isinstance(value, Opaque) and value.text.startswith("pkgs."):
            # A package built another way (``pkgs.llama-cpp.override { cudaSupport = true; }``): its store path is
            # known only after evaluation, and the unit needs only the program under it.
            return _store(Ref(tuple(value.text.split(".")[:2]), value.line))
        shown = value.text if isinstance(value, Opaque) else type(value).__name__
        shown = shown if "..." in shown else f"{shown} ..."
        raise self.unread(option, getattr(value, "line", line), f"`{shown}`, which only evaluation gives")

    def strings(self, value: object, option: str, line: int) -> list[str]:
        value = self.force(value)
        if not isinstance(value, NixList):
            shown = value.text if isinstance(value, Opaque) else "not a list"
            raise self.unread(option, getattr(value, "line", line), f"`{shown} ...`, where a list of strings is expected")
        return [self.string(item, option, value.line) for item in value.items]

    def unread(self, option: str, line: int, what: str) -> NotRead:
        return NotRead(self.path, line, f"not judged: {option} is {what} (fleetgate reads Nix without evaluating "
                       f"it); {GENERATED_UNIT}")


def _store(ref: Ref) -> str:
    """A package in a unit: its store path is known only after evaluation, its name is what the unit needs."""
    return f"/nix/store/{'.'.join(ref.path[1:])}"


@functools.lru_cache(maxsize=4096)
def _parse_fragment(source: str, line: int, path: Path) -> object:
    toks = _tokens(source, path)
    toks = [_Tok(t.kind, t.text, t.line + line - 1, t.parts) for t in toks]
    parser = _Parser(toks, path)
    value = parser.expr()
    if parser.peek().kind != "eof":
        return Opaque(source.strip()[:40], line)
    return value


# --- the units ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NixUnits:
    """The engine units a ``.nix`` file declares, by unit name (``llama-cpp``, ``systemd.services.NAME``'s NAME)."""

    path: Path
    units: Mapping[str, int]
    """unit name -> the line that declares it."""
    engines: Mapping[str, str | None]
    """unit name -> the engine binary its ExecStart= runs (None: not read; the reason in ``unread``)."""
    unread: Mapping[str, NotRead]


def _top(path: Path) -> tuple[_Scope, Attrs]:
    text = read_text(path, "the Nix file")
    if len(text.encode("utf-8", "surrogateescape")) > MAX_BYTES:
        raise InputError(path, None, f"larger than {MAX_BYTES} bytes; expected a NixOS configuration module")
    value = _Parser(_tokens(text, path), path).module()
    bindings: list[Attrs] = []
    while isinstance(value, _Let):
        bindings.append(value.bindings)
        value = value.body
    if not isinstance(value, Attrs):
        raise NotRead(path, getattr(value, "line", None), "not judged: the module's value is not an attribute set "
                      f"this reader can read; {GENERATED_UNIT}")
    scope = _Scope(path, bindings)
    config = value.entries.get("config")
    if config is not None and isinstance(scope.force(config[0]), Attrs):
        return scope, scope.force(config[0])  # type: ignore[return-value]
    return scope, value


def _attrs(scope: _Scope, parent: Attrs | None, *names: str) -> tuple[Attrs | None, int]:
    node: object = parent
    line = parent.line if parent is not None else 0
    for name in names:
        node = scope.force(node)
        if not isinstance(node, Attrs) or name not in node.entries:
            return None, line
        node, line = node.entries[name]
    node = scope.force(node)
    return (node if isinstance(node, Attrs) else None), line


def nix_units(path: Path) -> NixUnits:
    """Every unit of the file that starts an engine or may (``services.llama-cpp``, a ``systemd.services.NAME`` with
    an ``ExecStart`` or ``script`` naming an engine), each read or the reason it is not."""
    scope, top = _top(path)
    units: dict[str, int] = {}
    engines: dict[str, str | None] = {}
    unread: dict[str, NotRead] = {}
    llama, line = _attrs(scope, top, "services", "llama-cpp")
    if llama is not None:
        units["llama-cpp"] = line
    services, _ = _attrs(scope, top, "systemd", "services")
    for name, (value, at) in (services.entries.items() if services is not None else ()):
        if name == "llama-cpp" and "llama-cpp" in units:
            continue
        config = scope.force(value)
        if isinstance(config, Attrs) and _mentions_engine(config):
            units[name] = at
    for name in units:
        try:
            unit = read_nix_unit(path, name, _read=(scope, top))
            exec_start = unit.all("Service", "ExecStart")
            first = exec_start[-1].value.split()[0].strip('"') if exec_start else ""
            engines[name] = next((e for e in ENGINES if first.rsplit("/", 1)[-1] == e), None)
        except NotRead as exc:
            engines[name] = None
            unread[name] = exc
    return NixUnits(path, units, engines, unread)


def _mentions_engine(config: Attrs) -> bool:
    def words(value: object) -> Iterator[str]:
        if isinstance(value, NixStr):
            yield from (p if isinstance(p, str) else p[0] for p in value.parts)
        elif isinstance(value, NixList):
            for item in value.items:
                yield from words(item)
        elif isinstance(value, Attrs):
            for v, _ in value.entries.values():
                yield from words(v)
        elif isinstance(value, Ref):
            yield ".".join(value.path)
    picked = [config.entries[k][0] for k in ("script", "serviceConfig") if k in config.entries]
    return any(re.search(r"(?:^|[/\s.])(?:llama-server|vllm)\b", w) for v in picked for w in words(v))


def _escape_arg(arg: str) -> str:
    """utils.escapeSystemdExecArgs of one argument: a JSON string with ``%`` and ``$`` doubled."""
    return json.dumps(arg).replace("%", "%%").replace("$", "$$")


def _systemd_value(scope: _Scope, value: object, option: str, line: int) -> list[str]:
    """A serviceConfig value as NixOS writes it: a list is one line per item, a boolean true/false."""
    value = scope.force(value)
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, NixList):
        return [v for item in value.items for v in _systemd_value(scope, item, option, value.line)]
    return [scope.string(value, option, line)]


def read_nix_unit(path: Path, name: str | None, *, _read: tuple[_Scope, Attrs] | None = None) -> Unit:
    """The unit NixOS generates for ``name`` (``llama-cpp`` for ``services.llama-cpp``, or ``systemd.services.NAME``)
    from the file, as ``fleetgate.units.Unit`` whose settings name the ``.nix`` line each comes from."""
    scope, top = _read if _read is not None else _top(path)
    if name is None:
        found = nix_units(path)
        if len(found.units) != 1:
            listed = ", ".join(found.units) or "none"
            raise InputError(path, None, f"{len(found.units)} engine units ({listed}); expected nix_unit = the one "
                             "this service is")
        name = next(iter(found.units))
    settings: list[Setting] = []

    def add(section: str, key: str, value: str, line: int) -> None:
        settings.append(Setting(section, key, value, path, line))

    llama, llama_line = _attrs(scope, top, "services", "llama-cpp") if name == "llama-cpp" else (None, 0)
    if llama is not None:
        add_llama_cpp(scope, llama, llama_line, add)
    hand, hand_line = _attrs(scope, top, "systemd", "services", name)
    if llama is None and hand is None:
        raise InputError(path, None, f"no services.llama-cpp or systemd.services.{name}; expected the unit's options")
    if hand is not None:
        _systemd_service(scope, name, hand, hand_line, add)
    return unit_from_settings(path, f"{name}.service", tuple(settings))


def add_llama_cpp(scope: _Scope, cfg: Attrs, line: int, add: object) -> None:
    """The module's unit: its documented options, its defaults where the file leaves one out."""
    assert callable(add)
    enable = scope.force(cfg.entries.get("enable", (False, line))[0])
    if enable is not True:
        raise NotRead(scope.path, cfg.entries.get("enable", (None, line))[1],
                      "not judged: services.llama-cpp.enable is not true here (the unit is generated only where it "
                      f"is; a lib.mkIf or another module may set it); {GENERATED_UNIT}")

    def option(key: str) -> tuple[object, int] | None:
        return cfg.entries.get(key)

    package = option("package")
    program = (scope.string(package[0], "services.llama-cpp.package", package[1]) if package is not None
               else "/nix/store/llama-cpp") + "/bin/llama-server"
    host = option("host")
    port = option("port")
    args = ["--host", scope.string(host[0], "services.llama-cpp.host", host[1]) if host else "127.0.0.1",
            "--port", scope.string(port[0], "services.llama-cpp.port", port[1]) if port else "8080"]
    for key, flag in (("model", "-m"), ("modelsDir", "--models-dir")):
        given = option(key)
        if given is not None and scope.force(given[0]) is not None:
            args += [flag, scope.string(given[0], f"services.llama-cpp.{key}", given[1])]
    flags = option("extraFlags")
    if flags is not None:
        args += scope.strings(flags[0], "services.llama-cpp.extraFlags", flags[1])
    exec_line = flags[1] if flags is not None else line
    add("Unit", "Description", "LLaMA C++ server", line)
    add("Unit", "After", "network.target", line)
    add("Service", "Type", "idle", line)
    add("Service", "KillSignal", "SIGINT", line)
    add("Service", "ExecStart", " ".join([program, *(_escape_arg(a) for a in args)]), exec_line)
    add("Service", "Restart", "on-failure", line)
    add("Service", "RestartSec", "300", line)
    add("Service", "PrivateDevices", "false", line)
    add("Service", "DynamicUser", "true", line)
    add("Install", "WantedBy", "multi-user.target", line)


def _systemd_service(scope: _Scope, name: str, cfg: Attrs, line: int, add: object) -> None:
    assert callable(add)
    prefix = f"systemd.services.{name}"
    for key, (value, at) in cfg.entries.items():
        if key == "serviceConfig":
            config = scope.force(value)
            if not isinstance(config, Attrs):
                raise scope.unread(f"{prefix}.serviceConfig", at, "not an attribute set")
            for setting, (v, ln) in config.entries.items():
                for text in _systemd_value(scope, v, f"{prefix}.serviceConfig.{setting}", ln):
                    add("Service", setting, text, ln)
        elif key == "environment":
            env = scope.force(value)
            if not isinstance(env, Attrs):
                raise scope.unread(f"{prefix}.environment", at, "not an attribute set")
            for var, (v, ln) in env.entries.items():
                # NixOS writes each as a JSON string and leaves % and $ as they are (systemd then reads specifiers).
                text = scope.string(v, f"{prefix}.environment.{var}", ln)
                add("Service", "Environment", json.dumps(f"{var}={text}"), ln)
        elif key in ("wantedBy", "requiredBy"):
            for target in scope.strings(value, f"{prefix}.{key}", at):
                add("Install", "WantedBy" if key == "wantedBy" else "RequiredBy", target, at)
        elif key in ("script", "preStart"):
            if key == "script":
                raise scope.unread(f"{prefix}.script", at, "a shell script NixOS writes to the store and runs")
        elif key in ("description", "after", "requires", "wants"):
            continue
