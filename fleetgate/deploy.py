"""The deploy script's readiness probes: which URL gates each service's deploy, and for how long.

``deploy_probes`` in fleet.toml names the table the deploy script reads (``while read -r service url
budget``): one service per line, ``SERVICE URL BUDGET_SECONDS``, ``#`` comments and blank lines skipped.
A malformed line is an InputError naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from fleetgate.errors import InputError

__all__ = ["Probe", "read_probes"]


@dataclass(frozen=True)
class Probe:
    service: str
    url: str
    scheme: str
    host: str
    port: int | None
    path: str
    budget_s: int
    where: str


def read_probes(path: Path) -> dict[str, Probe]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read the deploy probes: {exc.strerror}") from None
    # deploy-probes asks once per service: the table is parsed once per text, not once per service of the fleet
    return dict(_parse(path, text))


@lru_cache(maxsize=8)
def _parse(path: Path, text: str) -> dict[str, Probe]:
    lines = text.splitlines()
    probes: dict[str, Probe] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        words = text.split()
        if len(words) != 3 or not words[2].isdigit():
            raise InputError(path, number, f"expected 'SERVICE URL BUDGET_SECONDS', got {text!r}")
        service, url, budget = words
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise InputError(path, number, f"expected an http:// or https:// URL with a host (and a valid port), got {url!r}")
        if service in probes:
            raise InputError(path, number, f"{service} already has a probe at {probes[service].where}; expected one per service")
        probes[service] = Probe(service=service, url=url, scheme=parts.scheme, host=parts.hostname, port=port,
                                path=parts.path or "/", budget_s=int(budget), where=f"{path}:{number}")
    return probes
