"""What a service's runbook requires of its engine is what the engine is started with (B-UN-12, B-CTX-8).

The runbooks state a service's required settings in a table, as the seeds' runbooks do ("Deployed
configuration": one row per setting, the setting and its value in backticks, several joined by `` / ``):

    | setting | value | why |
    |---|---|---|
    | `HALOGEN_CACHE_INPLACE` | `1` | keeps the KV rows in the pool (B-UN-12) |
    | `--kv-positions` / `--slots` | `401408` / `2` | two conversations of 200,704 positions |

A setting that starts with ``-`` is a flag of the rendered argv (its last value, as argparse-style engines
read it); any other is a variable of the engine's environment as the serve script execs it. This is how an
engine fleetgate has no argv model for (halogen) is held to its runbook: its cache knob is an environment
variable its unit's env file sets, which nothing else reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fleetgate.checks import service_seam
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []

HEADING = "deployed configuration"
_CELL = re.compile(r"`([^`]*)`")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    line: int


def _page(config: RenderedService) -> Path | None:
    index = config.fleet.docs_index
    if index is None:
        return None
    page = (index.parent / f"{config.name}.md").resolve()
    return page if page.is_file() else None


def _table(page: Path) -> list[tuple[int, str]] | None:
    """The rows (line, text) of the table under the page's ``## Deployed configuration`` heading."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.startswith("#") and line.lstrip("#").strip().lower() == HEADING), None)
    if start is None:
        return None
    rows: list[tuple[int, str]] = []
    for number, line in enumerate(lines[start + 1:], start=start + 2):
        if line.startswith("#"):
            break
        if line.strip().startswith("|"):
            rows.append((number, line))
        elif rows and line.strip():
            break
    return rows[2:]  # the header row and the |---| rule


def _no_runbook_table(config: RenderedService) -> str | None:
    if config.fleet.docs_index is None:
        return (f"{config.fleet.path.name} names no docs_index: the runbooks (docs/{config.name}.md beside it) "
                "cannot be read")
    page = _page(config)
    if page is None:
        return f"{config.name} has no runbook page {config.name}.md beside the docs index"
    if _table(page) is None:
        return (f"{page.name} has no '## Deployed configuration' table: list there the settings its runbook "
                "requires (| `SETTING` | `VALUE` | why |)")
    return None


def _settings(config: RenderedService, page: Path, rows: list[tuple[int, str]]) -> list[Setting]:
    found: list[Setting] = []
    for number, row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        names = _CELL.findall(cells[0]) if cells else []
        values = _CELL.findall(cells[1]) if len(cells) > 1 else []
        if not names or len(names) != len(values) or not all(_ENV.match(n) or _FLAG.match(n) for n in names):
            raise runbook_settings.fail(
                config, "bad-row",
                where=f"{page}:{number}",
                observed=f"'{row.strip()[:160]}'",
                expected=("| `SETTING` | `VALUE` | why |: each setting a flag (`--kv-positions`) or an environment "
                          "variable (`HALOGEN_CACHE_INPLACE`) in backticks, as many values as settings, "
                          "several joined by ' / '"),
                fix="write the row as the table's other rows are written, or move the prose out of the table",
            )
        found.extend(Setting(n, v, number) for n, v in zip(names, values, strict=True))
    return found


def _flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    """The last value the argv gives a flag (``--flag value`` or ``--flag=value``); '' for a bare switch."""
    value: str | None = None
    for i, word in enumerate(argv[1:], start=1):
        name, eq, inline = word.partition("=")
        if name != flag:
            continue
        if eq:
            value = inline
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        else:
            value = ""
    return value


@service_seam(
    policy="docs-index",
    cites=("B-UN-12", "B-CTX-8", "B-DOC-4"),
    summary="every setting the service's runbook requires (its Deployed configuration table: flags and engine "
               "environment) is what the rendered engine runs with",
    requires=_no_runbook_table,
    engines=("llama.cpp", "vllm", "openai"),
    codes={
        "bad-row": (
            "a row of a runbook's `## Deployed configuration` table without a backticked setting (flag or variable) and as many backticked "
            "values, named at its file and line"
        ),
        "flag-differs": "a flag the runbook requires, absent from the rendered argv or with another value",
        "env-differs": (
            "an engine environment variable the runbook requires, unset or with another value (halogen's `HALOGEN_CACHE_INPLACE=1`, "
            "B-UN-12)"
        ),
    },
)
def runbook_settings(config: RenderedService) -> None:
    page = _page(config)
    assert page is not None
    rows = _table(page)
    assert rows is not None
    argv, env = config.rendered.argv, config.rendered.env
    for setting in _settings(config, page, rows):
        required = f"{page}:{setting.line}"
        if setting.name.startswith("-"):
            have = _flag_value(argv, setting.name)
            if have != setting.value:
                raise runbook_settings.fail(
                    config, "flag-differs",
                    cites=("B-DOC-4", "B-CTX-8"), where=required,
                    observed=(f"the engine is started with {setting.name} {have}" if have is not None
                              else f"the rendered argv has no {setting.name}"),
                    expected=f"{setting.name} {setting.value}, as the runbook requires ({required})",
                    details=[f"rendered by {config.rendered.script}"],
                    fix="change the env file (or the serve script) to what the runbook requires, or re-key the "
                        "runbook in the same commit that changes the deployment",
                )
            continue
        have = env.get(setting.name)
        if have != setting.value:
            origin = config.variables.get(setting.name)
            raise runbook_settings.fail(
                config, "env-differs",
                cites=("B-UN-12",),
                where=origin.where if origin is not None else str(config.rendered.script),
                observed=(f"the engine starts with {setting.name}={have}" if have is not None
                          else f"the engine's environment has no {setting.name}: it runs the engine's default"),
                expected=f"{setting.name}={setting.value}, as the runbook requires ({required})",
                fix=("set it in the env file the unit reads; an engine without an argv model takes its cache knobs "
                     "from its environment, and nothing else would notice the default"),
            )
