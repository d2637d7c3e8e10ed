"""Mutations of the example fleet for the host engineer's seams, through the catalogue's own harness.

A mutation is a list of ``Mutation`` (the catalogue's edit type, applied by ``fleetgate.incidents.apply``);
``failures`` runs every seam on the mutated copy (``tests.test_mutations.run_seams``) and returns each
failure by (subject, failure code) -- the first line of the failure, as the plugin prints it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.incidents import Entry, Mutation, apply
from tests.test_mutations import FLEET, run_seams

__all__ = ["Mutation", "edit", "failures", "new_file"]


def edit(file: str, replace: str, with_: str) -> Mutation:
    return Mutation(file=file, replace=replace, with_=with_, create=None)


def new_file(file: str, text: str) -> Mutation:
    return Mutation(file=file, replace=None, with_=None, create=text)


def failures(pytester: pytest.Pytester, tmp_path: Path, *mutations: Mutation) -> dict[tuple[str, str], str]:
    entry = Entry(path=tmp_path / "inline.toml", id="inline", name="inline", summary="", cites=(),
                  mutations=tuple(mutations), expect=())
    fleet_toml = apply(entry, FLEET, tmp_path / "fleet")
    recorder = run_seams(pytester, fleet_toml)
    found: dict[tuple[str, str], str] = {}
    for report in recorder.getfailures():
        text = str(report.longrepr)
        subject, _, rest = text.splitlines()[0].partition(": ")
        found[(subject, rest.split(" [")[0])] = text
    return found
