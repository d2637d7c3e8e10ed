"""The runbooks' index agrees with the pages and with what is deployed (B-DOC-1, 2, 3, 5, 6; INC-27, INC-47, INC-67, INC-82).

The index (``docs_index`` in fleet.toml) is Markdown: each registered page is a list item
``- [TITLE](PAGE.md) — MARKER — ...`` with one status marker; each page opens with ``status: MARKER``.
A page named after a service describes that service, and its marker must say what fleet.toml's ``state``
says: ``active`` is ACTIVE or LIVE, ``undeployed`` is STAGED, ``rollback`` is SUPERSEDED or RETIRED.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fleetgate.checks import check
from fleetgate.failure import Failure
from fleetgate.fleet import Fleet

__all__ = ["IndexEntry", "read_index"]

NAME = "docs-index"
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


@check(NAME, kind="seam", subject="fleet", requires=_has_index, cites=("B-DOC-1", "B-DOC-2", "B-DOC-3", "B-DOC-5", "B-DOC-6"),
       summary="every docs page is registered in the index, every deployed service has a page, and the status "
               "markers say what fleet.toml deploys")
def docs_index(fleet: Fleet) -> None:
    index = fleet.docs_index
    assert index is not None
    entries = read_index(index)
    registered = {entry.page: entry for entry in entries}
    for entry in entries:
        if not entry.page.is_file():
            raise Failure(service=fleet.name, check=NAME, code=f"{NAME}/dead-link", where=f"{index}:{entry.line}",
                          observed=f"the index links {entry.page.name}, which does not exist",
                          expected="every index entry names a page of the docs directory",
                          fix="restore the page or drop the entry (a rename moves both)")
    for service in fleet.services.values():
        page = (index.parent / f"{service.name}.md").resolve()
        listed = registered.get(page)
        if listed is None:
            if service.state == "active":
                raise Failure(service=fleet.name, check=NAME, code=f"{NAME}/service-missing",
                              where=fleet.where("services", service.name),
                              observed=f"{service.name} is deployed but the index has no {page.name} entry",
                              expected="every deployed service in the active-deployment list (B-DOC-5, INC-82)",
                              fix=f"write {page.name} and register it in {index.name}")
            continue
        allowed = ALLOWED[service.state]
        if listed.marker not in allowed:
            raise Failure(service=fleet.name, check=NAME, code=f"{NAME}/index-status", where=f"{index}:{listed.line}",
                          observed=f"the index marks {service.name} {listed.marker or '(no marker)'}",
                          expected=f"{' or '.join(allowed)}: fleet.toml says state = {service.state!r}",
                          fix="sweep the markers in the cutover commit (INC-27, INC-67)")
        status, line = _page_status(page)
        if status != listed.marker:
            raise Failure(service=fleet.name, check=NAME, code=f"{NAME}/page-status",
                          where=f"{page}:{line}" if line else str(page),
                          observed=f"{page.name} says status: {status or '(none)'}",
                          expected=f"{listed.marker}, as the index marks it",
                          fix="the page header and the index move together (INC-67: a header still said LIVE)")
        if service.state == "active":
            for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
                if NOT_YET in text.lower():
                    raise Failure(service=fleet.name, check=NAME, code=f"{NAME}/not-yet-deployed",
                                  where=f"{page}:{number}",
                                  observed=f"{page.name} still says '{text.strip()[:120]}'",
                                  expected="no 'not yet deployed' clause on the page of a deployed service (B-DOC-6)",
                                  fix="retire the clause in the deploy commit")
    for page in sorted(index.parent.glob("*.md")):
        if page.resolve() != index.resolve() and page.resolve() not in registered:
            raise Failure(service=fleet.name, check=NAME, code=f"{NAME}/unregistered-page", where=str(page),
                          observed=f"{page.name} is not linked from {index.name}",
                          expected="every page registered in the index (INC-47)",
                          fix=f"add '- [{page.stem}]({page.name}) — STATUS — one line' to {index.name}")
