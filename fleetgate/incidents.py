"""The regression catalogue: past incidents and the edits to the example fleet that reproduce them.

Each entry (fixtures/incidents/ID.toml) names the incident, the mutation, and every failure the mutated
fleet must show -- as ``"subject: failure code"`` -- and nothing else. ``apply`` writes the mutated copy;
the suite's own tests run the seams on it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import InputError, parse_toml

__all__ = ["Entry", "Expectation", "Mutation", "apply", "load_catalogue"]


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


def _skip(path: Path, item: object) -> tuple[str, str]:
    subject, _, check = item.partition(": ") if isinstance(item, str) else ("", "", "")
    if not subject or not check or "/" in check or " " in check:
        raise InputError(path, None, f"skip: {item!r}; expected 'SUBJECT: check' or 'SUBJECT: *', "
                                     "e.g. 'frank-medium: card-floor'")
    return subject, check


@dataclass(frozen=True)
class Entry:
    path: Path
    id: str
    name: str
    summary: str
    cites: tuple[str, ...]
    mutations: tuple[Mutation, ...]
    expect: tuple[Expectation, ...]
    skip: tuple[tuple[str, str], ...] = ()
    """(subject, check) pairs the mutation turns into skips: the check can no longer see the subject.
    A check of ``*`` is every other seam of the subject (a service that no longer renders)."""


def load_catalogue(directory: Path) -> list[Entry]:
    entries = []
    for path in sorted(directory.glob("*.toml")):
        data = parse_toml(path.read_text(encoding="utf-8"), path)
        try:
            entries.append(Entry(
                path=path,
                id=data["id"],
                name=data["name"],
                summary=data["summary"],
                cites=tuple(data.get("cites", ())),
                mutations=tuple(Mutation(file=m["file"], replace=m.get("replace"), with_=m.get("with"),
                                         create=m.get("create")) for m in data["mutation"]),
                expect=tuple(_expectation(path, e) for e in data["expect"]),
                skip=tuple(_skip(path, s) for s in data.get("skip", ())),
            ))
        except KeyError as exc:
            raise InputError(path, None, f"missing key {exc.args[0]!r}; expected id, name, summary, expect, [[mutation]]") from None
    return entries


def apply(entry: Entry, fleet_dir: Path, target: Path) -> Path:
    """Copy the fleet at ``fleet_dir`` to ``target``, apply the entry's mutations, return the new fleet.toml."""
    shutil.copytree(fleet_dir, target, symlinks=True)
    for mutation in entry.mutations:
        file = target / mutation.file
        if mutation.create is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(mutation.create.lstrip("\n"), encoding="utf-8")
            continue
        text = file.read_text(encoding="utf-8")
        if mutation.replace is None or mutation.with_ is None:
            raise InputError(entry.path, None, f"mutation of {mutation.file}: expected replace/with or create")
        count = text.count(mutation.replace)
        if count != 1:
            raise InputError(entry.path, None, f"mutation of {mutation.file}: {mutation.replace!r} occurs {count} times; "
                                               "expected exactly once")
        file.write_text(text.replace(mutation.replace, mutation.with_), encoding="utf-8")
    return target / "fleet.toml"
