"""After a payload swap every consumer names the same files, at the size the fetch script declares
(B-SW-1, B-SW-2, B-SW-3, INC-02, INC-68, INC-76).

Consumers: fleet.toml's ``payload`` (what the host must hold) and the fetch script's manifest
(``payload_manifest``: what is fetched and verified). What the engine loads is already held to the declared
payload by the render (a serve script's file test answers "exists" only for declared payload). Sizes are
held to the payload's profile (``file_bytes``: the GGUF header's file, or the seeds' figure for a
reconstructed profile), matched through the rendered argv or, for a file the argv does not name (a sidecar
kept for a rollback), the profile's ``file`` (else its model name); a profiled sidecar that matches no
manifest file fails rather than passing unseen.

``payload-defaults`` holds the serve script's own defaults (``${MODEL:-/path}``) to the env file's payload
(B-SW-2, INC-68): the script is rendered again with each payload variable of the env file unset, as bash
would run it if the env file lost the line, and what it then loads (or tests for and refuses) must be the
file the env file names. The deploy script's defaults are ``deploy-payload``'s (seam_deploy.py, INC-76).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fleetgate.checks import service_seam
from fleetgate.models.profile import Profile, load_profile
from fleetgate.payload import read_manifest
from fleetgate.render.rendered import Probe, RenderedService
from fleetgate.render.types import Origin, Rendered, RenderRefused

__all__ = ["payload_variables"]

_PAYLOAD_FLAGS = {"--model", "-m", "--mmproj", "-mm", "--spec-draft-model", "-md", "--model-draft"}


def _has_manifest(config: RenderedService) -> str | None:
    if config.service.payload_manifest is None:
        return (f"{config.name} declares no payload_manifest in fleet.toml: name the fetch script's manifest "
                "('SIZE SHA256 PATH' per file) to hold the payload's consumers together")
    return None


def _argv_payload(config: RenderedService) -> dict[str, str]:
    """flag -> path for every payload file the rendered argv names."""
    argv = config.rendered.argv
    return {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i] in _PAYLOAD_FLAGS}


def _profiles(config: RenderedService) -> list[tuple[str, Profile]]:
    found = []
    for flag, path in (("--model", config.service.profile), ("--spec-draft-model", config.service.draft_profile),
                       ("--mmproj", config.service.projector_profile)):
        if path is not None:
            found.append((flag, load_profile(path)))
    return found


@service_seam(
    policy="payload-manifest",
    cites=("B-SW-1", "B-SW-3", "INC-02", "INC-76"),
    summary="fleet.toml and the fetch manifest name one payload, at the profiled size",
    requires=_has_manifest,
    codes={
        "not-in-manifest": "a declared payload file the fetch manifest does not fetch (B-SW-1)",
        "not-declared": "the fetch manifest fetches a file the payload does not declare",
        "profile-unmatched": (
            "a profiled sidecar the argv does not name matches no manifest file (by the profile's `file`, else its name): its size cannot "
            "be held"
        ),
        "size-differs": "a manifest size other than the file's profiled size (INC-02, B-SW-3)",
    },
)
def payload_consistency(config: RenderedService) -> None:
    manifest_path = config.service.payload_manifest
    assert manifest_path is not None
    manifest = {entry.path: entry for entry in read_manifest(manifest_path)}
    declared = set(config.service.payload)
    where_payload = config.fleet.where("services", config.name, "payload")
    for path in sorted(declared - set(manifest)):
        raise payload_consistency.fail(
            config, "not-in-manifest",
            where=str(manifest_path),
            observed=f"{path} is declared payload ({where_payload}) but the fetch manifest does not fetch or verify it",
            expected="every payload file in the manifest, with its size",
            fix="add the file to the manifest (size from the Hub, sha256 from its LFS oid), or drop it from payload",
        )
    for path in sorted(set(manifest) - declared):
        raise payload_consistency.fail(
            config, "not-declared",
            where=manifest[path].where,
            observed=f"the fetch manifest fetches {path}, which fleet.toml's payload does not declare",
            expected=f"the manifest and payload ({where_payload}) name the same files",
            fix="a swap updates every consumer in one pass: fleet.toml, env file, serve script, fetch and deploy scripts",
        )
    by_name = {PurePosixPath(path).name: entry for path, entry in manifest.items()}
    by_stem = {PurePosixPath(path).stem: entry for path, entry in manifest.items()}
    argv = _argv_payload(config)
    for flag, profile in _profiles(config):
        if profile.file_bytes is None:
            continue
        given = next((p for f, p in argv.items() if f == flag or (flag == "--model" and f == "-m")), None)
        if given:
            entry = manifest.get(given)
        else:  # a sidecar the argv does not name: the file the profile names, else its model name
            entry = by_name.get(profile.file or "") or by_stem.get(profile.name)
            if entry is None:
                raise payload_consistency.fail(
                    config, "profile-unmatched",
                    where=str(profile.path),
                    observed=(f"the {flag.lstrip('-')} profile ({profile.name}, {profile.file_bytes:,} B) matches no file "
                              "of the fetch manifest, and the rendered argv does not name one"),
                    expected=f"[model] file = the payload file's name, one of: {', '.join(sorted(by_name))}",
                    fix="name the file in the profile's [model] file, or drop the profile that no payload file carries",
                )
        if entry is not None and entry.size != profile.file_bytes:
            raise payload_consistency.fail(
                config, "size-differs",
                where=entry.where,
                observed=f"{PurePosixPath(entry.path).name}: the manifest declares {entry.size:,} B",
                expected=f"{profile.file_bytes:,} B, the file's size ({profile.name} profile)",
                fix="take the size from the Hub's file listing, not from a partial download (INC-02: --verify-only "
                    "then fails on a byte-correct payload)",
            )


def payload_variables(config: RenderedService) -> list[Origin]:
    """The env file's variables whose value is a declared payload file (MODEL=, MMPROJ=, CHECKPOINT=)."""
    declared = set(config.service.payload)
    return [origin for origin in config.variables.values() if origin.value in declared]


def _names_payload(config: RenderedService) -> str | None:
    if not payload_variables(config):
        return (f"no variable of {config.name}'s env files names a declared payload file: nothing whose serve-script "
                "default could name another (declare the payload in fleet.toml and set it in the env file)")
    return None


def _unset_each(config: RenderedService) -> list[Probe]:
    """The renders ``payload-defaults`` asks: one per payload variable, that variable unset."""
    return [Probe({origin.name: None}) for origin in payload_variables(config)]


@service_seam(
    probes=_unset_each,
    cites=("B-SW-2", "B-SW-1", "INC-68"),
    summary="with a payload variable unset, the serve script's default names the env file's payload, not a retired one",
    requires=_names_payload,
    codes={
        "other-payload": (
            "with a payload variable of the env file unset, the serve script's default (`${MODEL:-...}`) loads or tests another file than "
            "the env file names (B-SW-2, INC-68)"
        ),
    },
)
def payload_defaults(config: RenderedService) -> None:
    declared = set(config.service.payload)
    variables = payload_variables(config)

    def unset_one(origin: Origin) -> Rendered | RenderRefused:
        try:
            return config.probe({origin.name: None})
        except RenderRefused as refused:
            return refused

    # One render per variable, each its own sandboxed bash: made ahead, with the service's other probes, by the run's
    # renderer (``probes=_unset_each``), so asking them one after another waits for nothing.
    results = [unset_one(origin) for origin in variables]
    for origin, unset in zip(variables, results, strict=True):
        if isinstance(unset, RenderRefused):
            refused = unset
            # The default names a file the host is not declared to hold: the script tested it and refused.
            # (A test the script runs with the env file intact too is not the default's doing.)
            usual = {(t.op, t.path) for t in config.rendered.tests}
            others = [t for t in refused.tests if not t.answer and t.path.startswith("/") and t.path not in declared
                      and (t.op, t.path) not in usual]
            if others:
                _other(config, origin, others[0].path, others[0].caller)
            continue  # no default at all (an unbound variable under set -u, or a refusal): nothing retired
        loaded = [a for a in unset.args if a.startswith("/") and a not in config.rendered.args]
        if loaded:
            _other(config, origin, loaded[0], "the rendered argv with the variable unset")


def _other(config: RenderedService, origin: Origin, path: str, how: str) -> None:
    __tracebackhide__ = True
    raise payload_defaults.fail(
        config, "other-payload",
        where=str(config.rendered.script),
        observed=f"with {origin.name} unset the serve script uses {path} ({how})",
        expected=f"its default to name the env file's payload: {origin.value} ({origin.where})",
        fix=("a swap re-keys every consumer in one pass (INC-68): point the script's ${" + origin.name + ":-...} default "
             "at the new payload, or drop the default so a missing env line refuses"),
    )
