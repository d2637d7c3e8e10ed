"""The regression catalogue: past incidents, the failure codes that catch them, and their reproductions.

Each entry (``fixtures/incidents/INC-nn.toml``) tells one incident's story (date, service, symptom,
root cause, fix) and how it is reproduced:

- ``mutation``: an edit to the example fleet; the seams on the edited copy fail with exactly the
  entry's failure codes (``fleetgate.runner.reproduce`` runs them in this process, ``tests/test_catalogue.py``
  in CI);
- ``server``: a misconfigured real llama-server in ``tests/live`` that fails the named live check;
- ``host``: a host fault, caught by a host check against the running machine; ``test`` names the test in
  tests/host that reproduces it (``tests/test_catalogue_ids.py`` holds the test to the entry's codes and
  ``tests/test_catalogue.py`` runs it);
- ``pending``: an offline check another branch is building; the entry names it;
- ``none``: why it cannot be checked, and the closest guard.

Entries whose id is a rule (``B-*``, ``FG-*``) rather than an incident live in ``rules/``: mutations that
show a rule failing where no single incident does.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fleetgate.errors import InputError, parse_toml

__all__ = [
    "KINDS",
    "Entry",
    "Expectation",
    "Mutation",
    "Reproduction",
    "apply",
    "default_catalogue",
    "guarding",
    "load_catalogue",
]

KINDS = ("mutation", "server", "host", "pending", "none")
CAUGHT = {"mutation": "offline", "server": "live", "host": "host", "pending": "offline (pending)", "none": "not checkable"}
_STORY = ("name", "date", "service", "symptom", "cause", "fix")


@dataclass(frozen=True)
class Mutation:
    file: str
    replace: str | None
    with_: str | None
    create: str | None


@dataclass(frozen=True)
class Expectation:
    """One failure the mutated fleet must show: its subject and its failure code (``check/branch``)."""

    subject: str
    code: str

    @property
    def check(self) -> str:
        return self.code.split("/", 1)[0]


def _expectation(path: Path, item: object) -> Expectation:
    subject, _, code = item.partition(": ") if isinstance(item, str) else ("", "", "")
    if not subject or "/" not in code or " " in code:
        raise InputError(path, None, f"expect: {item!r}; expected 'SUBJECT: check/code', e.g. "
                                     "'frank-medium: speculative-wiring/draft-model-without-type'")
    return Expectation(subject=subject, code=code)


def _skip(path: Path, item: object, key: str = "skip") -> tuple[str, str]:
    subject, _, check = item.partition(": ") if isinstance(item, str) else ("", "", "")
    if not subject or not check or "/" in check or " " in check:
        raise InputError(path, None, f"{key}: {item!r}; expected 'SUBJECT: check' or 'SUBJECT: *', "
                                     "e.g. 'frank-medium: card-floor'")
    return subject, check


@dataclass(frozen=True)
class Reproduction:
    kind: str
    check: str | None = None
    """The check that catches it (server, host, pending), or the closest guard (none)."""
    test: str | None = None
    """server: the test in tests/live whose misconfigured server reproduces it; host: the test in tests/host."""
    pending: str | None = None
    """pending/host: the check being built, and where."""
    reason: str | None = None
    """none: why no check can see it."""


@dataclass(frozen=True)
class Entry:
    path: Path
    incident: bool
    """An incident of the catalogue (INC-nn.toml at its top level), not a rule or branch mutation."""
    id: str
    name: str
    date: str
    service: str
    seed: str
    symptom: str
    cause: str
    fix: str
    cites: tuple[str, ...]
    codes: tuple[str, ...]
    """The failure codes that catch it: the expectations' codes, or those of the live/host check."""
    reproduction: Reproduction
    mutations: tuple[Mutation, ...]
    expect: tuple[Expectation, ...]
    skip: tuple[tuple[str, str], ...] = ()
    """(subject, check) pairs the mutation turns into skips: the check can no longer see the subject.
    A check of ``*`` is every other seam of the subject (a service that no longer renders)."""
    passes: tuple[tuple[str, str], ...] = ()
    """(subject, check) pairs the mutation makes applicable (a skip on the clean fleet) and that pass."""
    not_judged: tuple[tuple[str, str], ...] = ()
    """(subject, check) pairs the mutation leaves applicable but unjudgeable (a declaration removed): not judged."""

    @property
    def is_incident(self) -> bool:
        return self.incident

    @property
    def caught(self) -> str:
        return CAUGHT[self.reproduction.kind]


def default_catalogue() -> Path:
    """The catalogue of the example fleet, next to the package in a checkout."""
    return Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _str(data: Mapping[str, Any], key: str, path: Path, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or (default is None and not value.strip()):
        raise InputError(path, None, f"{key!r}: expected a non-empty string")
    return value


def _load_entry(path: Path, *, catalogue: bool) -> Entry:
    data = parse_toml(path.read_text(encoding="utf-8"), path)
    # An incident is an INC-nn entry of the catalogue itself; rules/ and fixtures/branches hold mutations.
    incident = catalogue and str(data.get("id", "")).startswith("INC-")
    if not incident and "symptom" not in data and "summary" in data:
        data["symptom"] = data["summary"]  # a rule mutation says in one line what the operator saw
    story = {k: _str(data, k, path, None if incident or k == "name" else "") for k in _STORY}
    repro = data.get("reproduction", {"kind": "mutation"})
    if not isinstance(repro, dict) or repro.get("kind") not in KINDS:
        raise InputError(path, None, f"[reproduction] kind: expected one of {', '.join(KINDS)}")
    reproduction = Reproduction(kind=repro["kind"], check=repro.get("check"), test=repro.get("test"),
                                pending=repro.get("pending"), reason=repro.get("reason"))
    try:
        mutations = tuple(Mutation(file=m["file"], replace=m.get("replace"), with_=m.get("with"), create=m.get("create"))
                          for m in data.get("mutation", ()))
        expect = tuple(_expectation(path, e) for e in data.get("expect", ()))
        skip = tuple(_skip(path, s) for s in data.get("skip", ()))
        passes = tuple(_skip(path, s, "passes") for s in data.get("passes", ()))
        not_judged = tuple(_skip(path, s, "not_judged") for s in data.get("not_judged", ()))
    except KeyError as exc:
        raise InputError(path, None, f"missing key {exc.args[0]!r}; [[mutation]] needs file (and replace/with or create)") from None
    problems = _problems(reproduction, mutations, expect, data, incident=incident) or _twice(expect)
    if problems:
        raise InputError(path, None, problems)
    codes = tuple(dict.fromkeys(e.code for e in expect)) if expect else tuple(data.get("codes", ()))
    return Entry(path=path, incident=incident, id=_str(data, "id", path), seed=str(data.get("seed", "")),
                 cites=tuple(data.get("cites", ())),
                 codes=codes, reproduction=reproduction, mutations=mutations, expect=expect, skip=skip, passes=passes,
                 not_judged=not_judged, **story)


def _twice(expect: tuple[Expectation, ...]) -> str:
    """A check fails a subject once, with one code: a second expectation of the pair could never be met."""
    seen: dict[tuple[str, str], str] = {}
    for e in expect:
        earlier = seen.setdefault((e.subject, e.check), e.code)
        if earlier != e.code:
            return (f"expect: '{e.subject}: {earlier}' and '{e.subject}: {e.code}': a check fails a subject with one "
                    "code; keep the one that fires")
    return ""


def _problems(repro: Reproduction, mutations: tuple[Mutation, ...], expect: tuple[Expectation, ...], data: Mapping[str, Any],
              *, incident: bool) -> str:
    if repro.kind == "mutation":
        # An incident is caught: it fails. A branch or rule mutation may only turn a pass into a skip (or leave it
        # not judged).
        if not mutations or (incident and not expect) or not (expect or data.get("skip") or data.get("not_judged")):
            return "a mutation reproduction needs [[mutation]] and expect = ['SUBJECT: check/code', ...]"
    elif mutations or expect:
        return f"[[mutation]] and expect belong to a mutation reproduction, not {repro.kind!r}"
    if repro.kind == "server" and not (repro.check and repro.test):
        return "a server reproduction names the live check and the test in tests/live that starts the server"
    if repro.kind == "pending" and not (repro.check and repro.pending):
        return "a pending reproduction names the check and what it is pending on"
    if repro.kind == "host" and not (repro.check and (repro.test or repro.pending)):
        return "a host reproduction names the host check and the test in tests/host that reproduces it (test)"
    if repro.kind == "none" and not (repro.reason and repro.check):
        return "a 'none' reproduction gives the reason it cannot be checked and the closest guard (check)"
    if repro.kind in ("server", "host") and not data.get("codes"):
        return f"a {repro.kind} reproduction lists the failure codes that catch it (codes)"
    return ""


def load_catalogue(directory: Path | None = None, *, rules: bool = True, incidents: bool | None = None) -> list[Entry]:
    """Every entry under ``directory`` (its own entries first, then rule mutations from rules/).

    The INC-nn entries of a directory named ``incidents`` (or ``incidents=True``) are incidents and tell
    their story; other directories (fixtures/branches, rules/) hold mutations.
    """
    directory = directory or default_catalogue()
    catalogue = directory.name == "incidents" if incidents is None else incidents
    entries = [_load_entry(path, catalogue=catalogue) for path in sorted(directory.glob("*.toml"))]
    if rules:
        entries += [_load_entry(path, catalogue=False) for path in sorted((directory / "rules").glob("*.toml"))]
    seen: dict[str, Path] = {}
    for entry in entries:
        if not entry.incident:
            continue
        if entry.id in seen:
            raise InputError(entry.path, None, f"id {entry.id} is already the id of {seen[entry.id].name}")
        if entry.path.stem != entry.id:
            raise InputError(entry.path, None, f"id {entry.id!r}: expected the file's name, {entry.path.stem!r}")
        seen[entry.id] = entry.path
    return entries


@cache
def _guards(directory: Path) -> Mapping[str, tuple[str, ...]]:
    by_code: dict[str, list[str]] = {}
    for entry in load_catalogue(directory, rules=False):
        for code in entry.codes:
            by_code.setdefault(code, []).append(entry.id)
    return {code: tuple(ids) for code, ids in by_code.items()}


def guarding(code: str, directory: Path | None = None) -> tuple[str, ...]:
    """The incidents a failure code guards: the entries caught by exactly that code."""
    directory = directory or default_catalogue()
    if not directory.is_dir():
        return ()
    try:
        return _guards(directory).get(code, ())
    except InputError:
        return ()  # a broken entry is reported by `fleetgate incidents` and the catalogue's tests


def apply(entry: Entry, fleet_dir: Path, target: Path) -> Path:
    """Copy the fleet at ``fleet_dir`` to ``target``, apply the entry's mutations, return the new fleet.toml."""
    shutil.copytree(fleet_dir, target, symlinks=True)
    for mutation in entry.mutations:
        file = target / mutation.file
        if mutation.create is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(mutation.create.lstrip("\n"), encoding="utf-8")
            continue
        if not file.is_file():
            raise InputError(entry.path, None, f"mutation of {mutation.file}: no such file in the fleet")
        text = file.read_text(encoding="utf-8")
        if mutation.replace is None or mutation.with_ is None:
            raise InputError(entry.path, None, f"mutation of {mutation.file}: expected replace/with or create")
        count = text.count(mutation.replace)
        if count != 1:
            raise InputError(entry.path, None, f"mutation of {mutation.file}: {mutation.replace!r} occurs {count} times; "
                                               "expected exactly once")
        file.write_text(text.replace(mutation.replace, mutation.with_), encoding="utf-8")
    return target / "fleet.toml"
