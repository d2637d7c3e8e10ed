"""What a run knows, for machines: per-test properties (JUnit, JSON lines) and the fleetgate report.

Each test of a check carries properties named ``fleetgate.*`` (service, check, failure code, cited
ids, the incidents it guards, the figures the check derived, what a live check measured). They travel
as the report's ``user_properties``, so they survive xdist and land in JUnit and in pytest-reportlog's
JSON lines alike. ``FleetReport`` gathers them, per service, into the document a dashboard reads
(``--fleetgate-report PATH``), valid against ``schema/report.schema.json``.

Nothing here imports pytest; no value of the environment is ever written (the API key included).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fleetgate.secrets import MASK, SECRET_FLAGS, is_secret_name, scrub, scrub_argv

__all__ = [
    "JSON_PROPERTIES",
    "PREFIX",
    "FleetReport",
    "ServiceResult",
    "case_properties",
    "live_properties",
    "redact",
    "redact_json",
    "report_schema",
]

PREFIX = "fleetgate."
SCHEMA_VERSION = 1
JSON_PROPERTIES = frozenset({"figures", "measured"})
"""Properties whose text is a JSON object; the others are plain text."""


def case_properties(
    *,
    service: str,
    check: str,
    cites: Sequence[str],
    code: str | None = None,
    figures: Mapping[str, Any] | None = None,
    waiver: str | None = None,
    note: str | None = None,
    not_judged: str | None = None,
) -> list[tuple[str, str]]:
    """The ``fleetgate.*`` properties of one test case, as (name, text) pairs (JUnit wants text)."""
    props = [
        (f"{PREFIX}service", service),
        (f"{PREFIX}check", check),
    ]
    if code is not None:
        props.append((f"{PREFIX}code", code))
    props.append((f"{PREFIX}cites", ",".join(cites)))
    props.append((f"{PREFIX}incidents", ",".join(c for c in cites if c.startswith("INC-"))))
    if figures:
        props.append((f"{PREFIX}figures", json.dumps(figures, sort_keys=True)))
    if waiver is not None:
        props.append((f"{PREFIX}waiver", waiver))
    if note is not None:
        props.append((f"{PREFIX}note", note))
    if not_judged is not None:
        props.append((f"{PREFIX}not_judged", not_judged))
    return props


def live_properties(*, measured: Mapping[str, float], spent_tokens: int, requests: int, elapsed: float) -> list[tuple[str, str]]:
    """What a live check measured and spent."""
    return [
        (f"{PREFIX}measured", json.dumps(dict(measured), sort_keys=True)),
        (f"{PREFIX}spent_tokens", str(spent_tokens)),
        (f"{PREFIX}requests", str(requests)),
        (f"{PREFIX}elapsed_s", f"{elapsed:.3f}"),
    ]


def redact(text: str, names: Iterable[str]) -> str:
    """``text`` with the value of every named environment variable written as ``$NAME`` (the key the gate was given),
    and every other secret in it scrubbed (``fleetgate.secrets``: keys and tokens the gate was never given)."""
    for name in names:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, f"${name}")
    return scrub(text)


def redact_json(value: Any, names: Iterable[str]) -> Any:
    """A JSON document with every string in it redacted as ``redact`` does text, and the string value of every key
    named like a secret (``HF_TOKEN``, ``api_key``) masked: structurally, so the document stays JSON (text-level
    scrubbing turned llama.cpp's ``"has_next_token": true`` into ``"has_next_token": ***``)."""
    names = tuple(names)
    if isinstance(value, str):
        return redact(value, names)
    if isinstance(value, list):
        if any(isinstance(v, str) and v.partition("=")[0] in SECRET_FLAGS for v in value):
            value = list(scrub_argv([str(v) for v in value]))  # an argv kept as a list: a flag's value is its next word
        return [redact_json(v, names) for v in value]
    if isinstance(value, dict):
        return {redact(str(k), names): MASK if is_secret_name(str(k)) and isinstance(v, str) and v
                else redact_json(v, names) for k, v in value.items()}
    return value


@dataclass
class ServiceResult:
    outcomes: dict[str, int] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    headroom: dict[str, int] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    balance_margin: int | None = None
    prompt_cache: dict[str, int] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    spent_tokens: int = 0
    requests: int = 0
    live: bool = False
    not_judged: list[str] = field(default_factory=list)
    """Each distinct line of the service's not-judged checks, once, in the order met."""
    unjudged: int = 0
    """How many of its checks were not judged (skipped, or failed under --fleetgate-strict)."""

    def margins(self) -> list[tuple[str, int]]:
        """Every margin the seams derived, in bytes, named: the smallest is the tightest."""
        found = [(f"headroom on {card} (free above the floor)", value) for card, value in self.headroom.items()]
        if self.balance_margin is not None:
            found.append(("balance slack left between the cards", self.balance_margin))
        if "margin_bytes" in self.prompt_cache:
            found.append(("prompt cache above one slot's state", self.prompt_cache["margin_bytes"]))
        if "ram_margin_bytes" in self.prompt_cache:
            found.append(("prompt cache below half the host RAM", self.prompt_cache["ram_margin_bytes"]))
        return found

    def tightest(self) -> tuple[str, int] | None:
        margins = self.margins()
        return min(margins, key=lambda m: m[1]) if margins else None


class FleetReport:
    """Per-service results gathered from test reports (in the controller under xdist)."""

    def __init__(self) -> None:
        self.services: dict[str, ServiceResult] = {}

    def add(self, nodeid: str, outcome: str, properties: Sequence[tuple[str, object]]) -> None:
        props = {str(k): v for k, v in properties}
        service = props.get(f"{PREFIX}service")
        check = props.get(f"{PREFIX}check")
        if not isinstance(service, str) or not isinstance(check, str):
            return
        result = self.services.setdefault(service, ServiceResult())
        unjudged = props.get(f"{PREFIX}not_judged")
        if isinstance(unjudged, str):
            # pytest counts it among the skips (or the failures, strict): the report counts it apart.
            outcome = "not-judged" if outcome == "skipped" else outcome
            result.unjudged += 1
            if unjudged not in result.not_judged:
                result.not_judged.append(unjudged)
        result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
        entry: dict[str, Any] = {"check": check, "outcome": outcome, "test": nodeid}
        if isinstance(unjudged, str):
            entry["not_judged"] = unjudged
        code = props.get(f"{PREFIX}code")
        if isinstance(code, str):
            entry["code"] = code
        waiver = props.get(f"{PREFIX}waiver")
        if isinstance(waiver, str):
            entry["waiver"] = waiver
        note = props.get(f"{PREFIX}note")
        if isinstance(note, str):
            entry["note"] = note
        transcript = props.get(f"{PREFIX}transcript")
        if isinstance(transcript, str):
            entry["transcript"] = transcript
        result.checks.append(entry)
        figures = props.get(f"{PREFIX}figures")
        if isinstance(figures, str):
            self._figures(result, json.loads(figures))
        measured = props.get(f"{PREFIX}measured")
        if isinstance(measured, str):
            result.live = True
            result.measured.update({k: float(v) for k, v in json.loads(measured).items()})
            result.spent_tokens += int(str(props.get(f"{PREFIX}spent_tokens", 0)))
            result.requests += int(str(props.get(f"{PREFIX}requests", 0)))

    @staticmethod
    def _figures(result: ServiceResult, figures: Mapping[str, Any]) -> None:
        result.headroom.update({str(k): int(v) for k, v in figures.get("headroom_bytes", {}).items()})
        result.free.update({str(k): int(v) for k, v in figures.get("free_bytes", {}).items()})
        if "balance_margin_bytes" in figures:
            result.balance_margin = int(figures["balance_margin_bytes"])
        result.prompt_cache.update({str(k): int(v) for k, v in figures.get("prompt_cache", {}).items()})

    def document(self, *, fleet: str, exit_status: int | None = None) -> dict[str, Any]:
        services: dict[str, Any] = {}
        for name in sorted(self.services):
            result = self.services[name]
            tightest = result.tightest()
            entry: dict[str, Any] = {
                "outcomes": {k: result.outcomes[k] for k in sorted(result.outcomes)},
                "checks": sorted(result.checks, key=lambda c: (c["check"], c["test"])),
                "headroom_bytes": dict(sorted(result.headroom.items())),
                "free_bytes": dict(sorted(result.free.items())),
                "balance_margin_bytes": result.balance_margin,
                "prompt_cache": dict(sorted(result.prompt_cache.items())) or None,
                "tightest_margin": {"what": tightest[0], "bytes": tightest[1]} if tightest else None,
                "not_judged": list(result.not_judged),
            }
            if result.live:
                entry["live"] = {
                    "measured": dict(sorted(result.measured.items())),
                    "spent_tokens": result.spent_tokens,
                    "requests": result.requests,
                }
            services[name] = entry
        return {
            "fleetgate_report": SCHEMA_VERSION,
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "fleet": fleet,
            "exit_status": exit_status,
            "services": services,
        }


def report_schema() -> dict[str, Any]:
    text = resources.files("fleetgate").joinpath("schema/report.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
