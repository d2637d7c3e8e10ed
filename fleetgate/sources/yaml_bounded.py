"""YAML read into PyYAML nodes within bounds, so that no fleet file can make a reader recurse, hang or fill memory.

docker compose and llama-swap parse their files with go-yaml, which refuses what would never finish: an alias inside
the value of its own anchor ("anchor 'a' value contains itself"), and a document whose aliases expand it too far
("document contains excessive aliasing"). Its rule for the latter, mirrored here: every node decoded counts, and a
node decoded because an alias (or a ``<<`` merge of one) leads to it counts as aliased; once more than 100 aliased of
more than 1000 decoded, the aliased share may not pass 99% up to 400 000 decoded nodes, falling evenly to 10% at
4 000 000. fleetgate applies it to the file as composed, before any reader walks it.

The nodes are composed here without recursion (PyYAML's composer recurses once per level), and the nesting, aliases
followed, is bounded well below Python's recursion limit because the readers walk ``<<`` merges recursively: go-yaml
stops at 10 000 levels, fleetgate at ``MAX_DEPTH`` -- far beyond any compose file or llama-swap config.
An anchor may be defined again: an alias names the latest one before it, as the YAML specification and go-yaml say.

Every refusal is one ``InputError`` naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import yaml
from yaml.error import Mark
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode, SequenceNode

from fleetgate.errors import InputError

__all__ = ["MAX_DEPTH", "MAX_DOCUMENTS", "compose_yaml", "compose_yaml_documents", "merged_keys"]

MAX_DEPTH = 200
"""The deepest nesting of collections (aliases followed) any reader walks."""
MAX_DOCUMENTS = 4096
"""The most documents one multi-document stream may hold (a rendered chart has tens)."""

_ALIASES_BEFORE_RATIO = 100
_DECODED_BEFORE_RATIO = 1000
_RATIO_LOW, _RATIO_HIGH = 400_000, 4_000_000


def _allowed_share(decoded: int) -> float:
    """go-yaml's allowed share of aliased nodes among ``decoded`` nodes."""
    if decoded <= _RATIO_LOW:
        return 0.99
    if decoded >= _RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _RATIO_LOW) / (_RATIO_HIGH - _RATIO_LOW)


def _excessive(aliased: int, decoded: int) -> bool:
    return (aliased > _ALIASES_BEFORE_RATIO and decoded > _DECODED_BEFORE_RATIO
            and aliased / decoded > _allowed_share(decoded))


@dataclass(frozen=True)
class _Alias:
    anchor: str
    line: int


@dataclass
class _Open:
    """A collection being composed, and the key waiting for its value when it is a mapping."""

    node: CollectionNode
    key: Node | None = None


@dataclass
class _Composed:
    root: Node | None
    aliases: dict[tuple[int, int], _Alias] = field(default_factory=dict)
    """(id of the collection, slot of the child) -> the alias that put the child there; a mapping's slot is 2 i for
    the key of its i-th pair, 2 i + 1 for the value."""


def compose_yaml(path: Path, text: str, expected: str) -> Node | None:
    """The one document of ``text`` as PyYAML nodes (None when the stream has none), or one ``InputError`` line
    ending with ``expected`` (what the file should be)."""
    documents = _compose_stream(path, text, expected, multi=False)
    return documents[0] if documents else None


def compose_yaml_documents(path: Path, text: str, expected: str) -> list[Node]:
    """Every document of a ``---``-separated stream (kubectl's and helm's manifests), each within the same bounds as
    ``compose_yaml``'s one; an empty document is a null scalar, which a reader skips like any node that is no
    mapping."""
    return _compose_stream(path, text, expected, multi=True)


def _compose_stream(path: Path, text: str, expected: str, *, multi: bool) -> list[Node]:
    try:
        # The reader refuses a character YAML does not allow as the loader is made, before the first event.
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        raise InputError(path, text.count("\n", 0, exc.position) + 1, f"not YAML ({exc.reason}: "
                         f"#x{exc.character:04x}); expected {expected}") from None
    try:
        documents = _compose(cast(_Events, loader), path, expected, multi)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "unreadable"
        raise InputError(path, int(mark.line) + 1 if mark is not None else None,
                         f"not YAML ({problem}); expected {expected}") from None
    except yaml.YAMLError as exc:
        raise InputError(path, None, f"not YAML ({str(exc).splitlines()[0]}); expected {expected}") from None
    finally:
        loader.dispose()
    for composed in documents:
        _check_expansion(path, composed, expected)
    return [composed.root for composed in documents if composed.root is not None]


def merged_keys(node: Node) -> dict[str, Node]:
    """A mapping's string keys and their values, ``<<`` merges applied as YAML says (the keys written in the mapping
    win, then the merged mappings in order); a node that is no mapping has none. The nesting is bounded by
    ``compose_yaml``, so the merges' recursion is too."""
    if not isinstance(node, MappingNode):
        return {}
    own: dict[str, Node] = {}
    merged: dict[str, Node] = {}
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge":
            for source in value.value if isinstance(value, SequenceNode) else [value]:
                for name, item in merged_keys(source).items():
                    merged.setdefault(name, item)
        elif isinstance(key, ScalarNode):
            own.setdefault(key.value, value)
    return {**merged, **own}


# --------------------------------------------------------------------------------------------------------- composing

class _Events(Protocol):
    """The part of PyYAML's loader this composer drives (its stubs leave these untyped)."""

    def get_event(self) -> Event: ...
    def check_event(self, *choices: type[Event]) -> bool: ...
    def resolve(self, kind: type[Node], value: str | None, implicit: Any) -> str: ...


def _mark(event: Event) -> Mark:
    # The pure-Python parser's events always carry marks (PyYAML's stubs allow None and the C parser's type).
    return cast(Mark, event.start_mark)


def _line(event: Event) -> int:
    return int(_mark(event).line) + 1


def _compose(loader: _Events, path: Path, expected: str, multi: bool) -> list[_Composed]:
    loader.get_event()  # the stream's start
    documents: list[_Composed] = []
    while not loader.check_event(StreamEndEvent):
        start = loader.get_event()
        if documents and not multi:
            raise InputError(path, _line(start), f"a second YAML document in the file; expected {expected} as one "
                             "document")
        if len(documents) >= MAX_DOCUMENTS:
            raise InputError(path, _line(start), f"more than {MAX_DOCUMENTS} YAML documents in the file; expected "
                             f"{expected}")
        assert isinstance(start, DocumentStartEvent)  # PyYAML's parser yields one after a stream's start, or an end
        composed = _Composed(None)
        composed.root = _compose_node(loader, path, expected, composed)
        loader.get_event()  # the document's end
        documents.append(composed)
    return documents


def _compose_node(loader: _Events, path: Path, expected: str, composed: _Composed) -> Node:
    anchors: dict[str, Node] = {}
    open_: list[_Open] = []
    while True:
        event = loader.get_event()
        alias: _Alias | None = None
        if isinstance(event, AliasEvent):
            name = str(event.anchor)
            if name not in anchors:
                raise InputError(path, _line(event), f"not YAML (the alias *{name} names no anchor before it); expected "
                                 f"{expected} with &{name} defined before *{name}")
            node: Node = anchors[name]
            alias = _Alias(name, _line(event))
        elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
            node = open_.pop().node
            node.end_mark = event.end_mark
        elif isinstance(event, ScalarEvent):
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(ScalarNode, event.value, event.implicit)
            node = ScalarNode(tag, event.value, _mark(event), cast(Mark, event.end_mark), style=event.style)
            if event.anchor is not None:
                anchors[event.anchor] = node
        elif isinstance(event, CollectionStartEvent):
            if len(open_) >= MAX_DEPTH:
                raise InputError(path, _line(event), f"YAML nested deeper than {MAX_DEPTH} levels; expected {expected}")
            kind: type[CollectionNode] = SequenceNode if isinstance(event, SequenceStartEvent) else MappingNode
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(kind, None, event.implicit)
            collection = kind(tag, [], _mark(event), None, flow_style=event.flow_style)
            if event.anchor is not None:
                anchors[event.anchor] = collection
            open_.append(_Open(collection))
            continue
        else:  # pragma: no cover - PyYAML's parser yields nothing else inside a document
            raise InputError(path, _line(event), f"not YAML (an unexpected {type(event).__name__}); expected {expected}")
        if not open_:
            return node
        parent = open_[-1]
        if isinstance(parent.node, SequenceNode):
            slot = len(parent.node.value)
            parent.node.value.append(node)
        elif parent.key is None:
            slot = 2 * len(parent.node.value)
            parent.key = node
        else:
            slot = 2 * len(parent.node.value) + 1
            parent.node.value.append((parent.key, node))
            parent.key = None
        if alias is not None:
            composed.aliases[(id(parent.node), slot)] = alias


# ------------------------------------------------------------------------------------------------ expansion bounds

def _children(node: Node) -> Iterator[tuple[int, Node]]:
    if isinstance(node, SequenceNode):
        yield from enumerate(node.value)
    elif isinstance(node, MappingNode):
        for i, (key, value) in enumerate(node.value):
            yield 2 * i, key
            yield 2 * i + 1, value


def _check_expansion(path: Path, composed: _Composed, expected: str) -> None:
    """Refuse an alias inside its own anchor's value, nesting past ``MAX_DEPTH`` through aliases, and go-yaml's
    excessive aliasing -- in time linear in the file, without expanding anything."""
    assert composed.root is not None
    sizes, heights = _measure(path, composed, expected)
    # The document walked in order, as go-yaml decodes it: a node written in place is one step; an alias is one step,
    # then its anchor's whole value, aliased. Within an alias the aliased share only rises and the allowed share only
    # falls, so go-yaml refuses somewhere inside an alias exactly when it refuses at its last node: an alias is one
    # jump here, never an expansion.
    decoded, aliased = 1, 0  # the document node
    # (node, collections around it, the alias that put it there)
    pending: list[tuple[Node, int, _Alias | None]] = [(composed.root, 0, None)]
    while pending:
        node, around, alias = pending.pop()
        if alias is not None:
            if around + heights[id(node)] > MAX_DEPTH:
                raise InputError(path, alias.line, f"the alias *{alias.anchor} nests the YAML deeper than {MAX_DEPTH} "
                                 f"levels; expected {expected}")
            decoded += 1 + sizes[id(node)]
            aliased += sizes[id(node)]
            if _excessive(aliased, decoded):
                raise InputError(path, alias.line, f"excessive aliasing: with the alias *{alias.anchor} the document is "
                                 f"mostly copies of anchored values; expected {expected} whose aliases repeat less "
                                 "(go-yaml, which docker compose and llama-swap use, refuses it)")
            continue
        decoded += 1
        if _excessive(aliased, decoded):
            raise InputError(path, int(node.start_mark.line) + 1, f"excessive aliasing before this node; expected "
                             f"{expected} whose aliases repeat less (go-yaml, which docker compose and llama-swap use, "
                             "refuses it)")
        pending += [(child, around + 1, composed.aliases.get((id(node), slot)))
                    for slot, child in reversed(list(_children(node)))]


def _measure(path: Path, composed: _Composed, expected: str) -> tuple[dict[int, int], dict[int, int]]:
    """Each node's size (nodes decoded, an alias one more) and height (collections nested, itself included) with its
    aliases expanded, computed once per node; an alias that reaches back into the node being measured is refused."""
    assert composed.root is not None
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Node, bool]] = [(composed.root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            in_progress.discard(id(node))
            size, height = 1, 0
            for slot, child in _children(node):
                size += sizes[id(child)] + (1 if (id(node), slot) in composed.aliases else 0)
                height = max(height, heights[id(child)])
            sizes[id(node)] = size
            heights[id(node)] = height + 1 if isinstance(node, CollectionNode) else 0
            continue
        if id(node) in sizes:
            continue
        in_progress.add(id(node))
        stack.append((node, True))
        for slot, child in _children(node):
            if id(child) in in_progress:
                alias = composed.aliases[(id(node), slot)]
                raise InputError(path, alias.line, f"the alias *{alias.anchor} lies inside the value of its own anchor "
                                 f"&{alias.anchor} (line {int(child.start_mark.line) + 1}), which would never end; "
                                 f"expected {expected} (go-yaml refuses: anchor '{alias.anchor}' value contains itself)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes, heights
