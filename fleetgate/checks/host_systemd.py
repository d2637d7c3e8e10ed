"""Host checks on systemd's own view of a service's unit (INC-53, INC-88, INC-35, B-UN-1/2, B-RAM-4, C-H-6).

Each reads ``systemctl show`` through testinfra (``HostTarget.systemd``): what the manager really loaded,
drop-ins and environment files included -- the files in the repository cannot say what else is on the host.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fleetgate.checks import Check, host_check
from fleetgate.host import HostReadError, HostTarget, SystemdUnit, environment_files, limit_bytes
from fleetgate.render.types import map_to_repo

__all__: list[str] = []


def _has_unit(target: HostTarget) -> str | None:
    if target.unit is None:
        return f"{target.name} has no unit in fleet.toml, so there is no systemd state to read"
    return None


SYSTEMD_CODES = {
    "not-loaded": "the service manager has no such unit loaded (LoadState is not loaded)",
    "systemctl-failed": "no service manager answered systemctl (not root, or not the Quadlet's user)",
}
"""What every check that reads the unit through systemctl can fail with besides its own codes."""


def _read(target: HostTarget, check: Check[HostTarget]) -> SystemdUnit:
    __tracebackhide__ = True
    try:
        unit = target.systemd()
    except HostReadError as exc:
        raise check.fail(target, "systemctl-failed", where=target.spec,
                         observed=str(exc), expected=f"systemd's view of {target.unit}",
                         fix="run the check where systemctl can reach the manager (root, or the Quadlet's user)") from None
    assert unit is not None
    if unit.get("LoadState") != "loaded":
        raise check.fail(target, "not-loaded", where=f"{target.spec} {unit.command}",
                         observed=f"LoadState={unit.get('LoadState') or '(none)'}",
                         expected=f"{unit.name} loaded by the {'user' if unit.user_manager else 'system'} manager",
                         fix="install the unit from this repository and `systemctl daemon-reload`")
    return unit


@host_check(
    cites=("INC-88", "INC-75", "INC-09"),
    summary="the unit is active and has not restarted (NRestarts=0)",
    requires=_has_unit,
    codes={
        **SYSTEMD_CODES,
        "inactive": "systemd shows the unit not active (ActiveState is not `active`): the engine is not running",
        "restarted": "the unit has restarted (NRestarts > 0): the engine died and systemd started it again (INC-88)",
    },
)
def host_unit_state(target: HostTarget) -> None:
    unit = _read(target, host_unit_state)
    where = f"{target.spec} {unit.command}"
    if unit.get("ActiveState") != "active":
        raise host_unit_state.fail(target, "inactive", where=where,
                               observed=f"ActiveState={unit.get('ActiveState')} SubState={unit.get('SubState')}",
                               expected="ActiveState=active",
                               fix=f"journalctl -u {unit.name}: find why the engine is not running before anything else")
    restarts = unit.get("NRestarts")
    if restarts not in ("", "0"):
        raise host_unit_state.fail(target, "restarted", where=where,
                               observed=f"NRestarts={restarts}: the engine died and systemd started it again",
                               expected="NRestarts=0 (a healthy endpoint can be a crash loop between two probes)",
                               fix=f"journalctl -u {unit.name}: the restarts' cause (pin gate, boot slack, OOM) is in the log")


@host_check(
    cites=("INC-53", "B-SH-4"),
    summary="systemd loaded only the repository's drop-ins, and no EnvironmentFile= (optional ones too) outside it",
    requires=_has_unit,
    codes={
        **SYSTEMD_CODES,
        "foreign-drop-in": "systemd loaded a drop-in (DropInPaths) that is not one of the repository's (INC-53)",
        "env-file-outside": "the unit loads an `EnvironmentFile=` (optional `-` ones too) from outside the repository (INC-53)",
    },
)
def host_unit_drop_ins(target: HostTarget) -> None:
    unit = _read(target, host_unit_drop_ins)
    where = f"{target.spec} {unit.command}"
    rendered = target.config.rendered.unit
    assert rendered is not None
    ours = {path.name for path in rendered.drop_ins}
    for path in " ".join(unit.properties.get("DropInPaths", [])).split():
        drop_in = PurePosixPath(path)
        if drop_in.parent.name != f"{unit.name}.d" or drop_in.name not in ours:
            raise host_unit_drop_ins.fail(target, "foreign-drop-in", where=where,
                                      observed=f"DropInPaths has {path}, which is not a drop-in of this repository",
                                      expected=("only " + ", ".join(sorted(ours))) if ours else "no drop-ins (the repository has none)",
                                      details=[f"DropInPaths={' '.join(unit.properties.get('DropInPaths', []))}"],
                                      fix=f"retire {path} (move it out of the unit's drop-in directory) and restart {unit.name}")
    for path, optional in environment_files(unit.properties.get("EnvironmentFiles", [])):
        local = map_to_repo(target.config.fleet, path)
        if local is None or not local.is_file():
            raise host_unit_drop_ins.fail(target, "env-file-outside", where=where,
                                      observed=(f"EnvironmentFiles={path}" + (" (optional: loaded whenever it exists)" if optional else "")
                                                + ", outside this repository"),
                                      expected=f"env files of this repository only (deployed under {target.config.fleet.deploy_root})",
                                      fix="retire the drop-in or line that names it; a bench env file boots while /health stays green")


def _declares_limits(target: HostTarget) -> str | None:
    unit = target.config.rendered.unit
    if unit is None:
        return _has_unit(target)
    if unit.last("Service", "LimitMEMLOCK") is None and unit.last("Service", "User") is None:
        return f"{target.name}'s unit declares neither LimitMEMLOCK= nor User=: nothing to hold the manager to"
    return None


@host_check(
    cites=("B-RAM-4", "B-UN-1", "INC-21"),
    summary="the manager runs the unit with the LimitMEMLOCK= and User= the unit file declares",
    requires=_declares_limits,
    codes={
        **SYSTEMD_CODES,
        "memlock-differs": "the manager runs the unit with another `LimitMEMLOCK=` than the unit file declares (B-RAM-4)",
        "user-differs": "the manager runs the unit as another `User=` than the unit file declares (B-UN-1)",
    },
)
def host_unit_limits(target: HostTarget) -> None:
    unit = _read(target, host_unit_limits)
    where = f"{target.spec} {unit.command}"
    rendered = target.config.rendered.unit
    assert rendered is not None
    memlock = rendered.last("Service", "LimitMEMLOCK")
    if memlock is not None:
        declared = limit_bytes(memlock.value)
        shown = limit_bytes(unit.get("LimitMEMLOCK") or "0")
        if declared != shown:
            raise host_unit_limits.fail(target, "memlock-differs", where=where,
                                    observed=f"LimitMEMLOCK={unit.get('LimitMEMLOCK')}",
                                    expected=f"LimitMEMLOCK={memlock.value} ({memlock.where})",
                                    fix="a drop-in or an older unit file overrides the limit: `systemctl cat` it, retire the override")
    user = rendered.last("Service", "User")
    if user is not None and unit.get("User") != user.value:
        raise host_unit_limits.fail(target, "user-differs", where=where,
                                observed=f"User={unit.get('User') or '(none: root)'}",
                                expected=f"User={user.value} ({user.where})",
                                fix="install the repository's unit file and `systemctl daemon-reload`")


@host_check(
    cites=("B-UN-2", "INC-35", "C-H-6"),
    summary="the unit comes back after a reboot: enabled, and for a rootless Quadlet its user lingers",
    requires=_has_unit,
    codes={
        **SYSTEMD_CODES,
        "no-linger": "the rootless Quadlet's user does not linger: the unit starts only at that user's login (INC-35)",
        "not-enabled": "the unit is not enabled (UnitFileState is not `enabled`): it does not start at boot",
    },
)
def host_boot_persistence(target: HostTarget) -> None:
    if target.quadlet:
        # A Quadlet's unit is generated from the .container file on every daemon-reload, enabled by its
        # [Install] section (the unit-install seam); what a reboot needs besides is the user manager itself.
        user = target.quadlet_user()
        linger = f"/var/lib/systemd/linger/{user}"
        if user is None or not target.host.file(linger).exists:
            raise host_boot_persistence.fail(target, "no-linger", where=f"{target.spec} {linger}",
                                  observed=f"{user or 'the owner of ' + str(target.config.fleet.deploy_root)} does not linger: "
                                           "the user manager, and the Quadlet with it, starts only at that user's login",
                                  expected="Linger=yes for the Quadlet's user",
                                  fix=f"loginctl enable-linger {user or 'USER'}")
        _read(target, host_boot_persistence)
        return
    unit = _read(target, host_boot_persistence)
    state = unit.get("UnitFileState")
    if state != "enabled":
        raise host_boot_persistence.fail(target, "not-enabled", where=f"{target.spec} {unit.command}",
                              observed=f"UnitFileState={state or '(none)'}",
                              expected="enabled: the unit starts at boot",
                              fix=f"systemctl enable {unit.name}")
