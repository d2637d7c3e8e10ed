"""The runbooks' index agrees with the pages and with what is deployed (B-DOC-1..6; INC-27, INC-47, INC-60,
INC-66, INC-67, INC-82, INC-86).

The index (``docs_index`` in fleet.toml) is Markdown: each registered page is a list item
``- [TITLE](PAGE.md) — MARKER — ...`` with one status marker; each page opens with ``status: MARKER``.
A page named after a service describes that service, and its marker must say what fleet.toml's ``state``
says: ``active`` is ACTIVE or LIVE, ``undeployed`` is STAGED, ``rollback`` is SUPERSEDED or RETIRED.

The shapes the docs give a service (``docs-shapes``, B-DOC-4) are read from every line of the index (intro,
mermaid topology, list) that names the service and no other, and from the service's own page: ``N x WINDOW``
(or the multiplication sign) is slots by per-slot window, ``WINDOW ctx`` a per-slot window, and an engine named there
(llama.cpp, vLLM, SGLang) must be the service's. The expected shape is the engine's own: llama.cpp's
``--ctx-size`` divided over ``--parallel`` slots (padded as llama_context pads it), vLLM's
``--max-num-seqs`` by ``--max-model-len``, an engine without an argv model its ``shape_flags`` (pool over
slots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fleetgate.checks import fleet_seam, service_seam
from fleetgate.checks.seam_context import declared_shape
from fleetgate.engines.llamacpp import context_shape
from fleetgate.fleet import Fleet
from fleetgate.render.rendered import RenderedService

__all__ = ["IndexEntry", "Shape", "read_index"]

MARKERS = ("ACTIVE", "LIVE", "STAGED", "SUPERSEDED", "RETIRED")
ALLOWED = {"active": ("ACTIVE", "LIVE"), "undeployed": ("STAGED",), "rollback": ("SUPERSEDED", "RETIRED")}
_ITEM = re.compile(r"^\s*[-*]\s+\[[^\]]*\]\((?P<target>[^)#\s]+)\)(?P<rest>.*)$")
NOT_YET = "not yet deployed"


@dataclass(frozen=True)
class IndexEntry:
    page: Path
    marker: str | None
    line: int


def read_index(path: Path) -> list[IndexEntry]:
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _ITEM.match(line)
        if not match or not match.group("target").endswith(".md") or "://" in match.group("target"):
            continue
        words = re.findall(r"[A-Z]+", match.group("rest"))
        marker = next((w for w in words if w in MARKERS), None)
        entries.append(IndexEntry(page=(path.parent / match.group("target")).resolve(), marker=marker, line=number))
    return entries


def _page_status(page: Path) -> tuple[str | None, int | None]:
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines()[:10], start=1):
        if line.lower().startswith("status:"):
            return line.split(":", 1)[1].strip().upper(), number
    return None, None


def _has_index(fleet: Fleet) -> str | None:
    if fleet.docs_index is None:
        return f"{fleet.path.name} names no docs_index: name the runbooks' index page to hold the docs to the fleet"
    return None


@fleet_seam(
    policy="docs-index",
    cites=("B-DOC-1", "B-DOC-2", "B-DOC-3", "B-DOC-5", "B-DOC-6"),
    summary="every docs page is registered in the index, every deployed service has a page, and the status "
               "markers say what fleet.toml deploys",
    requires=_has_index,
    codes={
        "dead-link": "the index links a page that does not exist",
        "service-missing": "an active service without an index entry (B-DOC-5)",
        "index-status": "an index marker that contradicts the service's state (INC-27)",
        "page-status": "a page's `status:` that contradicts its index marker (INC-67)",
        "not-yet-deployed": "\"not yet deployed\" on a deployed service's page (B-DOC-6)",
        "unregistered-page": "a docs page the index does not link (INC-47)",
    },
)
def docs_index(fleet: Fleet) -> None:
    index = fleet.docs_index
    assert index is not None
    entries = read_index(index)
    registered = {entry.page: entry for entry in entries}
    for entry in entries:
        if not entry.page.is_file():
            raise docs_index.fail(fleet, "dead-link", where=f"{index}:{entry.line}",
                             observed=f"the index links {entry.page.name}, which does not exist",
                             expected="every index entry names a page of the docs directory",
                             fix="restore the page or drop the entry (a rename moves both)")
    for service in fleet.services.values():
        page = (index.parent / f"{service.name}.md").resolve()
        listed = registered.get(page)
        if listed is None:
            if service.state == "active":
                raise docs_index.fail(fleet, "service-missing", where=fleet.where("services", service.name),
                                 observed=f"{service.name} is deployed but the index has no {page.name} entry",
                                 expected="every deployed service in the active-deployment list (B-DOC-5, INC-82)",
                                 fix=f"write {page.name} and register it in {index.name}")
            continue
        allowed = ALLOWED[service.state]
        if listed.marker not in allowed:
            raise docs_index.fail(fleet, "index-status", where=f"{index}:{listed.line}",
                             observed=f"the index marks {service.name} {listed.marker or '(no marker)'}",
                             expected=f"{' or '.join(allowed)}: fleet.toml says state = {service.state!r}",
                             fix="sweep the markers in the cutover commit (INC-27, INC-67)")
        status, line = _page_status(page)
        if status != listed.marker:
            raise docs_index.fail(fleet, "page-status", where=f"{page}:{line}" if line else str(page),
                             observed=f"{page.name} says status: {status or '(none)'}",
                             expected=f"{listed.marker}, as the index marks it",
                             fix="the page header and the index move together (INC-67: a header still said LIVE)")
        if service.state == "active":
            for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
                if NOT_YET in text.lower():
                    raise docs_index.fail(fleet, "not-yet-deployed", where=f"{page}:{number}",
                                     observed=f"{page.name} still says '{text.strip()[:120]}'",
                                     expected="no 'not yet deployed' clause on the page of a deployed service (B-DOC-6)",
                                     fix="retire the clause in the deploy commit")
    for page in sorted(index.parent.glob("*.md")):
        if page.resolve() != index.resolve() and page.resolve() not in registered:
            raise docs_index.fail(fleet, "unregistered-page", where=str(page),
                             observed=f"{page.name} is not linked from {index.name}",
                             expected="every page registered in the index (INC-47)",
                             fix=f"add '- [{page.stem}]({page.name}) — STATUS — one line' to {index.name}")


# "3 x 262,144", "2 \u00d7 200,704": slots x per-slot window. The window is a context (four digits or more).
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d{4,})"
_SHAPE = re.compile(rf"(?<![\d,.])(?P<slots>\d{{1,3}})\s*[x\u00d7]\s*(?P<window>{_NUMBER})(?![\d,])")
# "200,192 ctx": a per-slot window on its own.
_CONTEXT = re.compile(rf"(?<![\d,.])(?P<window>{_NUMBER})\s*ctx\b")
# The engines the runbooks name; a line about a service names only its own engine.
ENGINE_WORDS = {"llama.cpp": ("llama.cpp", "llama-server"), "vllm": ("vLLM",), "sglang": ("SGLang",)}


@dataclass(frozen=True)
class Shape:
    slots: int
    window: int
    source: str

    def text(self) -> str:
        return f"{self.slots} x {self.window:,}"


def _shape(config: RenderedService) -> Shape | None:
    """Slots and per-slot window as the engine builds them from the rendered argv."""
    if config.llama is not None:
        n_ctx_train = config.profile.n_ctx_train if config.profile else None
        shape = context_shape(config.llama, n_ctx_train)
        if shape is None:
            return None
        return Shape(shape.n_seq_max, shape.n_ctx_seq,
                     f"--ctx-size {config.llama.ctx_size} / --parallel {config.llama.n_slots}")
    if config.vllm is not None and config.vllm.max_num_seqs and config.vllm.max_model_len:
        return Shape(config.vllm.max_num_seqs, config.vllm.max_model_len,
                     f"--max-num-seqs {config.vllm.max_num_seqs}, --max-model-len {config.vllm.max_model_len}")
    if config.llama is None and config.vllm is None and (pool := declared_shape(config)) is not None:
        return Shape(pool.slots, pool.per_slot,
                     f"{pool.pool_where} {pool.pool} / {pool.slots_where} {pool.slots}, fleet.toml shape_flags")
    return None


def _no_shape(config: RenderedService) -> str | None:
    if config.fleet.docs_index is None:
        return _has_index(config.fleet)
    if _shape(config) is None:
        return (f"{config.name}'s rendered command line gives no slots x window fleetgate can read "
                f"(engine {config.service.engine}): the docs' shapes cannot be held to it")
    return None


def _mentions(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")


_WORD = re.compile(r"[\w-]+")


def _lines_about(config: RenderedService) -> list[tuple[Path, int, str]]:
    """Lines of the index and of the service's page that name this service and no other."""
    index = config.fleet.docs_index
    assert index is not None
    names = frozenset(config.fleet.services)
    by_words = all(_WORD.fullmatch(n) for n in names)
    own = _mentions(config.name)
    others = [] if by_words else [_mentions(n) for n in sorted(names) if n != config.name]
    found = []
    page = (index.parent / f"{config.name}.md").resolve()
    for path, whole_page in ((index, False), (page, True)):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if by_words:
            # A name of word characters and dashes (fleet.toml's schema) is mentioned where it is a whole run of
            # them: each line's runs (read once per text), looked up, say what one pattern per service says.
            for number, line, words in _words_of_lines(text):
                if (whole_page or config.name in words) and not any(w in names and w != config.name for w in words):
                    found.append((path, number, line))
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if (whole_page or own.search(line)) and not any(o.search(line) for o in others):
                found.append((path, number, line))
    return found


@lru_cache(maxsize=64)
def _words_of_lines(text: str) -> tuple[tuple[int, str, frozenset[str]], ...]:
    return tuple((number, line, frozenset(_WORD.findall(line))) for number, line in enumerate(text.splitlines(), start=1))


@service_seam(
    policy="docs-index",
    cites=("B-DOC-4", "INC-60", "INC-66", "INC-82", "INC-86"),
    summary="the shapes (slots x window, ctx) and the engine the index and the service's page give are "
               "what the env files render",
    requires=_no_shape,
    engines=("llama.cpp", "vllm", "openai"),
    codes={
        "shape-differs": (
            "an index line (intro, mermaid node, list item) or the service's page gives slots x window other than the rendered shape "
            "(INC-60, INC-82, B-DOC-4)"
        ),
        "context-differs": "a `WINDOW ctx` the rendered per-slot window is not (INC-66)",
        "engine-differs": "a line about the service names another engine (llama.cpp, vLLM, SGLang) (INC-86)",
    },
)
def docs_shapes(config: RenderedService) -> None:
    shape = _shape(config)
    assert shape is not None
    for path, number, line in _lines_about(config):
        for match in _SHAPE.finditer(line):
            slots, window = int(match.group("slots")), int(match.group("window").replace(",", ""))
            if (slots, window) != (shape.slots, shape.window):
                raise docs_shapes.fail(
                    config, "shape-differs",
                    where=f"{path}:{number}",
                    observed=f"the docs describe {config.name} as {match.group(0)}: '{line.strip()[:140]}'",
                    expected=f"{shape.text()}, as the env files render it ({shape.source})",
                    fix="re-key the intro, topology and list to the deployed shape in the commit that changes it "
                        "(INC-60: the index still said 2 x 200,704 after the 3 x 262,144 cutover)",
                )
        for match in _CONTEXT.finditer(line):
            window = int(match.group("window").replace(",", ""))
            if window != shape.window:
                raise docs_shapes.fail(
                    config, "context-differs",
                    where=f"{path}:{number}",
                    observed=f"the docs give {config.name} {match.group(0)}: '{line.strip()[:140]}'",
                    expected=f"{shape.window:,} ctx per slot, as the env files render it ({shape.source})",
                    fix="correct the row in the commit that raises or lowers the context (INC-66)",
                )
        for engine, words in ENGINE_WORDS.items():
            if engine == config.service.engine:
                continue
            said = next((w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w])", line)), None)
            if said is not None:
                raise docs_shapes.fail(
                    config, "engine-differs",
                    where=f"{path}:{number}",
                    observed=f"the docs say {config.name} runs {said}: '{line.strip()[:140]}'",
                    expected=f"{config.service.engine}, the engine fleet.toml declares and the serve script execs",
                    fix="catch the entry up with the cutover (INC-86: the index entries missed the SGLang cutover)",
                )
