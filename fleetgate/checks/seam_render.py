"""The serve script starts the engine, from files of this repository (B-SH-3, B-SH-4, INC-53)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from fleetgate.checks import NotJudged, attempt_seam
from fleetgate.errors import NotRead
from fleetgate.render.rendered import ServiceAttempt
from fleetgate.render.types import Origin

__all__: list[str] = []


@attempt_seam(
    cites=("B-SH-3", "B-SH-4", "B-MM-2", "B-SP-5", "INC-53"),
    summary="the serve script, run as its unit runs it, starts the engine and reads only this repository's env files",
    codes={
        "broken-input": (
            "a file that starts the service (unit, drop-in, env file, script, profile) cannot be read as its consumer reads it, or names "
            "another script or a file outside the repository: that service fails in one line, every other service is judged (INC-53's "
            "bench arm)"
        ),
        "refused": "the serve script exits without starting the engine",
        "undeclared-env-file": "the script reads an env file other than the declared one",
        "sources-outside-repo": "the script sources a file outside this repository (INC-53)",
    },
)
def serve_script_renders(attempt: ServiceAttempt) -> None:
    fleet, service = attempt.fleet, attempt.service
    if attempt.broken is not None:
        broken = attempt.broken
        if isinstance(broken, NotRead):
            # A generated file read without its generator (Nix, Ansible): a fact missing, not a finding.
            raise NotJudged(str(broken).replace("not judged: ", "", 1))
        raise serve_script_renders.fail(
            service.name, "broken-input",
            where=f"{broken.path}:{broken.line}" if broken.line else str(broken.path),
            observed=broken.message,
            expected=(f"the files that start {service.name} (unit, drop-ins, env files, serve script, profiles) read "
                      "the way their consumers read them, each naming only this repository's files"),
            fix="correct the file and line named above; every other seam of this service skips until it renders",
        )
    if attempt.refused is not None:
        refused = attempt.refused
        where = f"{refused.path}:{refused.line}" if refused.line else str(refused.path)
        outside = next((s for s in refused.sourced if not s.inside_repo), None)
        if outside is not None:
            _outside_repo(service.name, fleet.deploy_root, outside.target, outside.caller, refused.inputs, refused.message)
        raise serve_script_renders.fail(
            service.name, "refused",
            where=where,
            observed=refused.message,
            expected=f"it execs {service.binary} with the unit's environment and the declared payload present",
            details=[f"stderr: {line}" for line in refused.stderr.strip().splitlines()[-3:]],
            fix=("make every file the script needs part of the fleet: payload files in fleet.toml's payload list, "
                 "env files in this repository (no bench-window drop-ins pointing at /tmp)"),
        )
    config = attempt.config
    assert config is not None
    for sourced in config.rendered.sourced:
        if not sourced.inside_repo:
            _outside_repo(service.name, fleet.deploy_root, sourced.target, sourced.caller, config.rendered.inputs, None)
    declared = service.env_file
    read = [s for s in config.rendered.sourced if s.inside_repo]
    if declared is not None and read and service.unit is not None and config.rendered.unit is not None \
            and config.rendered.unit.kind == "systemd" and not config.rendered.unit.all("Service", "EnvironmentFile"):
        names = [s.target.rsplit("/", 1)[-1] for s in read]
        if declared.name not in names:
            raise serve_script_renders.fail(
                service.name, "undeclared-env-file",
                where=read[-1].caller,
                observed=f"the serve script reads {', '.join(s.target for s in read)}",
                expected=f"it reads the declared env file {declared.relative_to(fleet.root)}",
                fix="point the unit or the script at the declared env file, or declare the one it really reads",
            )


def _outside_repo(service: str, deploy_root: str | None, target: str, caller: str,
                  inputs: Mapping[str, Origin], outcome: str | None) -> NoReturn:
    setter = next((o for o in inputs.values() if o.value == target), None)
    raise serve_script_renders.fail(
        service, "sources-outside-repo",
        where=setter.where if setter else caller,
        observed=(f"the serve script ({caller}) sources {target}, outside this repository"
                  + (f", because {setter.name} is set by {setter.via}" if setter else "")),
        expected=f"only env files of this repository (deployed under {deploy_root})",
        details=[outcome] if outcome else [],
        fix=("retire the drop-in or variable that points the unit at another env file (a bench arm boots while "
             "/health stays green); the repository's env file is production"),
    )
