"""``fleetgate incidents``: the regression catalogue in the terminal, one id looked up, or as Markdown pages."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from fleetgate.errors import InputError
from fleetgate.ids import definitions
from fleetgate.incidents import Entry, default_catalogue, load_catalogue

__all__ = ["counts", "markdown_pages", "register"]

ORDER = ("offline", "live", "host", "offline (pending)", "not checkable")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "incidents",
        help="the regression catalogue: every past incident, what catches it, how it is reproduced",
        description="List the catalogue's incidents (default), show one id (an incident, an invariant B-*, "
        "a live check C-* or a fleetgate rule FG-*), count them by how they are caught, or write one "
        "Markdown page per incident.",
    )
    parser.add_argument("--catalogue", metavar="DIR", help="the entries' directory (default: fixtures/incidents of this checkout)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--id", metavar="ID", help="show one incident, invariant, live check or rule")
    what.add_argument("--counts", action="store_true", help="how many incidents are caught offline, live, on the host, or not at all")
    what.add_argument("--markdown", metavar="DIR", help="write one Markdown page per incident, an index and the ids page into DIR")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    directory = Path(args.catalogue) if args.catalogue else default_catalogue()
    if not directory.is_dir():
        raise InputError(directory, None, "no catalogue here: expected a directory of INC-nn.toml entries (--catalogue DIR)")
    entries = load_catalogue(directory)
    incidents = [e for e in entries if e.is_incident]
    if args.id:
        print(_show(args.id, entries))
        return 0
    if args.counts:
        for line in counts(incidents):
            print(line)
        return 0
    if args.markdown:
        out = Path(args.markdown)
        out.mkdir(parents=True, exist_ok=True)
        pages = markdown_pages(incidents)
        for name, text in pages.items():
            (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {len(pages)} pages to {out}")
        return 0
    width = max(len(e.name) for e in incidents)
    print(f"{'id':<7} {'caught':<17} {'name':<{width}}  codes / guard")
    for entry in incidents:
        guard = ", ".join(entry.codes) or f"({entry.reproduction.check})"
        print(f"{entry.id:<7} {entry.caught:<17} {entry.name:<{width}}  {guard}")
    print()
    print("; ".join(counts(incidents)))
    return 0


def counts(incidents: list[Entry]) -> list[str]:
    tally = Counter(e.caught for e in incidents)
    return [f"{tally.get(kind, 0)} {kind}" for kind in ORDER] + [f"{len(incidents)} incidents"]


def _show(key: str, entries: list[Entry]) -> str:
    for entry in entries:
        if entry.id == key:
            return _entry_text(entry)
    known = definitions()
    if key in known:
        d = known[key]
        lines = [f"{d.id} ({d.kind}, {d.section})", f"  rule: {d.rule}"]
        lines += [f"  {k}: {v}" for k, v in d.fields]
        guarded = [e.id for e in entries if key in e.cites]
        if guarded:
            lines.append(f"  incidents: {', '.join(guarded)}")
        return "\n".join(lines)
    raise InputError(Path(key), None, "no such id: expected an incident INC-nn, an invariant B-*, a live check C-* or a rule FG-*")


def _reproduction_lines(entry: Entry) -> list[str]:
    r = entry.reproduction
    if r.kind == "mutation":
        lines = ["a mutation of the example fleet (fixtures/fleet/):"]
        for m in entry.mutations:
            if m.create is not None:
                lines.append(f"  create {m.file}")
            else:
                lines.append(f"  {m.file}: {m.replace!r} -> {m.with_!r}")
        lines.append("fails exactly: " + ", ".join(f"{e.code} on {e.subject}" for e in entry.expect))
        return lines
    if r.kind == "server":
        return [f"a misconfigured real llama-server: {r.test}", f"fails the live check {r.check}"]
    if r.kind == "host":
        return [f"a host fault, caught by {r.check}: {r.pending}"]
    if r.kind == "pending":
        return [f"offline, pending {r.check}: {r.pending}"]
    return [f"not checkable: {r.reason}", f"closest guard: {r.check}"]


def _entry_text(entry: Entry) -> str:
    lines = [f"{entry.id} {entry.name} ({entry.date}; {entry.service})", f"  symptom: {entry.symptom}",
             f"  cause:   {entry.cause}", f"  fix:     {entry.fix}", f"  caught:  {entry.caught}"]
    if entry.codes:
        lines.append(f"  codes:   {', '.join(entry.codes)}")
    lines += [f"  {line}" for line in _reproduction_lines(entry)]
    known = definitions()
    for cited in entry.cites:
        if cited in known:
            lines.append(f"  {cited}: {known[cited].rule}")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_pages(incidents: list[Entry]) -> dict[str, str]:
    """``INC-nn.md`` per incident, ``README.md`` (the index) and ``ids.md`` (every B-*, C-*, FG-* id)."""
    known = definitions()
    pages: dict[str, str] = {}
    for entry in incidents:
        lines = [f"# {entry.id} `{entry.name}`", "", "<!-- generated by `fleetgate incidents --markdown docs/incidents`; do not edit -->", "",
                 "| | |", "|---|---|", f"| date | {_md(entry.date)} |", f"| service | {_md(entry.service)} |",
                 f"| symptom | {_md(entry.symptom)} |", f"| root cause | {_md(entry.cause)} |", f"| fix | {_md(entry.fix)} |",
                 f"| caught | {entry.caught} |", f"| seed | {_md(entry.seed)} |", ""]
        if entry.codes:
            lines += ["## Failure codes that catch it", ""] + [f"- `{code}`" for code in entry.codes] + [""]
        lines += ["## Reproduction", ""]
        body = _reproduction_lines(entry)
        if entry.reproduction.kind == "mutation":
            lines.append(body[0])
            lines.append("")
            lines += [f"- `{m.file}`: " + ("created" if m.create is not None else f"`{_md(m.replace or '')}` → `{_md(m.with_ or '')}`")
                      for m in entry.mutations]
            lines += ["", "The seams on the mutated copy fail with exactly:", ""]
            lines += [f"- `{e.code}` on `{e.subject}`" for e in entry.expect]
        else:
            lines += [_md(line) for line in body]
        if entry.cites:
            lines += ["", "## Rules it cites", ""]
            lines += [f"- [{c}](ids.md#{c.lower()}): {_md(known[c].rule) if c in known else '(undefined)'}" for c in entry.cites]
        pages[f"{entry.id}.md"] = "\n".join(lines) + "\n"
    index = ["# The regression catalogue", "", "<!-- generated by `fleetgate incidents --markdown docs/incidents`; do not edit -->", "",
             "Every past incident of the example fleet, what catches it and how it is reproduced. "
             "`fleetgate incidents` prints this table; `pytest --incident INC-nn` runs the checks that guard one; "
             "[ids.md](ids.md) defines every invariant (B-\\*), live check (C-\\*) and fleetgate rule (FG-\\*).", "",
             "Counts: " + "; ".join(counts(incidents)) + ".", "",
             "| id | name | date | service | caught | codes / closest guard |", "|---|---|---|---|---|---|"]
    for entry in incidents:
        guard = ", ".join(f"`{c}`" for c in entry.codes) or _md(entry.reproduction.check or "")
        index.append(f"| [{entry.id}]({entry.id}.md) | `{entry.name}` | {_md(entry.date)} | {_md(entry.service)} | {entry.caught} | {guard} |")
    pages["README.md"] = "\n".join(index) + "\n"
    ids = ["# Invariants, live checks and rules", "", "<!-- generated by `fleetgate incidents --markdown docs/incidents`; do not edit -->", ""]
    section = None
    for d in known.values():
        if d.section != section:
            section = d.section
            ids += [f"## {section}", ""]
        ids += [f"### {d.id}", "", f"{_md(d.rule)}", ""] + [f"- {k}: {_md(v)}" for k, v in d.fields]
        guarded = [e.id for e in incidents if d.id in e.cites]
        if guarded:
            ids.append("- incidents: " + ", ".join(f"[{i}]({i}.md)" for i in guarded))
        ids.append("")
    pages["ids.md"] = "\n".join(ids)
    return pages

