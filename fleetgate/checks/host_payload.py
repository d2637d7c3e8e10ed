"""Host check: the payload files exist on the host with the size and sha256 the fetch manifest declares
(B-SW-3, INC-02, INC-17).

A manifest entry is looked for where the engine was given it: the rendered argv's path of the same file
name when the argv names one (a machine that keeps its models elsewhere renders them there), else the
manifest's own path. Hashing reads the whole file on the host (``sha256sum``), as ``--verify-only`` does.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fleetgate.checks import host_check
from fleetgate.host import HostTarget
from fleetgate.payload import read_manifest

__all__: list[str] = []


def _has_manifest(target: HostTarget) -> str | None:
    if target.config.service.payload_manifest is None:
        return f"{target.name} declares no payload_manifest in fleet.toml: no declared sizes or sha256 to hold its files to"
    return None


@host_check(
    cites=("B-SW-3", "INC-02", "INC-17"),
    summary="every payload file of the fetch manifest is on the host with its declared size and sha256",
    requires=_has_manifest,
    codes={
        "missing": "a file of the fetch manifest is not on the host, where the argv (else the manifest) puts it",
        "size-differs": "a payload file on the host is not the size the fetch manifest declares (a partial download, another file)",
        "sha256-differs": "a payload file's sha256 on the host is not the one the fetch manifest declares",
    },
)
def host_payload(target: HostTarget) -> None:
    manifest = target.config.service.payload_manifest
    assert manifest is not None
    given = {PurePosixPath(arg).name: arg for arg in target.config.rendered.argv if arg.startswith("/")}
    for entry in read_manifest(manifest):
        path = given.get(PurePosixPath(entry.path).name, entry.path)
        file = target.host.file(path)
        where = f"{target.spec} {path}"
        if not file.exists:
            raise host_payload.fail(target, "missing", where=where,
                             observed=f"{path} does not exist on the host",
                             expected=f"the payload file the manifest declares ({entry.where})",
                             fix="fetch it with the service's fetch script")
        size = file.size
        if size != entry.size:
            raise host_payload.fail(target, "size-differs", where=where,
                             observed=f"{path} is {size:,} B", expected=f"{entry.size:,} B ({entry.where})",
                             fix="a partial download or another file: fetch again (or correct the manifest from the Hub)")
        if entry.sha256 is not None:
            digest = file.sha256sum
            if digest != entry.sha256:
                raise host_payload.fail(target, "sha256-differs", where=where,
                                 observed=f"sha256 {digest}", expected=f"sha256 {entry.sha256} ({entry.where})",
                                 fix="the bytes are not the declared file: fetch again and compare with the Hub's LFS oid")
