"""A render says its start shape once (``Rendered.start``) and its readers match on the shape's type: ``Rendered``
keeps no field per shape. The two questions that span shapes (the ``docker run`` line a script ran, the Quadlet
``[Container]`` the engine runs in) are answered once, in fleetgate.render.start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fleetgate.render.start import (
    Compose,
    InlineScript,
    Kubernetes,
    PresetModel,
    QuadletExec,
    ServeScript,
    Start,
    SwapModel,
    UnitExec,
    container_run,
    quadlet_of,
)
from fleetgate.render.types import Rendered

REPO = Path(__file__).resolve().parents[1]
PER_SHAPE = ("compose", "kubernetes", "container", "quadlet_container")
"""The per-shape properties ``Rendered`` had, each read from ``start`` and now gone: a name a reader would reach for."""
READ = re.compile(r"\brendered\.(" + "|".join(PER_SHAPE) + r")\b")
LEFT: dict[str, set[str]] = {}
"""The modules that still read a per-shape property of a render, and which: none is left."""


NOT_RENDERED = {"fleetgate/init/units.py"}
"""Modules whose ``rendered`` is no ``Rendered``: init's ``ScriptRender`` keeps the ``docker run`` line it saw as a
field of its own."""


def test_no_module_reads_a_per_shape_property_of_a_render() -> None:
    readers: dict[str, set[str]] = {}
    for path in sorted((REPO / "fleetgate").rglob("*.py")):
        if path.relative_to(REPO).as_posix() in NOT_RENDERED:
            continue
        found = set(READ.findall(path.read_text(encoding="utf-8")))
        if found:
            readers[path.relative_to(REPO).as_posix()] = found
    assert readers == LEFT


def test_the_scan_sees_a_per_shape_read() -> None:
    """What the test above relies on: each spelling a reader used is seen, the start's own record is not."""
    source = ("pod = config.rendered.kubernetes\nrun = rendered.container\nq = config.rendered.quadlet_container\n"
              "c = rendered.compose\nread = rendered.start.read\n")
    assert sorted(READ.findall(source)) == ["compose", "container", "kubernetes", "quadlet_container"]


def test_rendered_keeps_no_field_per_shape() -> None:
    properties = {name for name, value in vars(Rendered).items() if isinstance(value, property)}
    assert properties == {"args"}
    assert not set(PER_SHAPE) & {*vars(Rendered), *Rendered.__dataclass_fields__}


# Stand-ins for the readers' records: the two questions only hand back what the shape carries.
RUN: Any = object()
QUADLET: Any = object()
READ_RECORD: Any = object()
UNIT: Any = object()
SETTING: Any = object()


@pytest.mark.parametrize(("start", "run", "quadlet"), [
    (ServeScript(), None, None),
    (ServeScript(container=RUN), RUN, None),
    (ServeScript(quadlet=QUADLET), None, QUADLET),
    (ServeScript(container=RUN, quadlet=QUADLET), RUN, QUADLET),
    (InlineScript(UNIT, SETTING), None, None),
    (InlineScript(UNIT, SETTING, container=RUN), RUN, None),
    (QuadletExec(UNIT), None, None),
    (QuadletExec(UNIT, READ_RECORD), None, READ_RECORD),
    (UnitExec(UNIT, SETTING), None, None),
    (Compose(READ_RECORD), None, None),
    (Kubernetes(READ_RECORD), None, None),
    (SwapModel(8080), None, None),
    (PresetModel(), None, None),
])
def test_the_questions_that_span_shapes(start: Start, run: object, quadlet: object) -> None:
    assert (container_run(start), quadlet_of(start)) == (run, quadlet)
