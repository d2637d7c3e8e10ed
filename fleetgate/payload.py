"""A fetch script's payload manifest: the files a service needs, with their declared size and sha256.

The manifest is read the way the fetch script reads it (``while read -r size sha256 path``): one file per
line, three whitespace-separated fields, ``#`` comments and blank lines skipped; ``-`` as the sha256 when
none is recorded. A malformed line is an InputError naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import InputError

__all__ = ["ManifestEntry", "read_manifest"]


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str | None
    where: str


def read_manifest(path: Path) -> list[ManifestEntry]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(path, None, f"cannot read payload manifest: {exc.strerror}") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        words = text.split(None, 2)
        if len(words) != 3 or not words[0].isdigit() or not words[2].startswith("/"):
            raise InputError(path, number, f"expected 'SIZE SHA256 /ABSOLUTE/PATH' (SHA256 '-' when not recorded), got {text!r}")
        sha = words[1].lower()
        if sha != "-" and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
            raise InputError(path, number, f"expected a 64-hex-digit sha256 or '-', got {words[1]!r}")
        entries.append(ManifestEntry(path=words[2], size=int(words[0]), sha256=None if sha == "-" else sha,
                                     where=f"{path}:{number}"))
    return entries
