"""Units and Quadlets as systemd and Quadlet read them (B-UN-1/2, B-RAM-4, B-SH-3, B-VL-13..16, INC-35/36/53/79/85).

Every check reads the unit the renderer already parsed (``config.rendered.unit``: the unit file and its
drop-ins, in systemd's order) and the rendered argv; none re-reads a file. A systemd unit is the root unit
shape (``User=``, ``WantedBy=multi-user.target``); a Quadlet is a rootless container unit
(``WantedBy=default.target``, a local image tag, volumes for everything the engine reads).
"""

from __future__ import annotations

import re
import shlex
from itertools import pairwise

from fleetgate.checks import service_seam
from fleetgate.policies import policy_on
from fleetgate.render.rendered import Probe, RenderedService
from fleetgate.render.start import Compose, Kubernetes, QuadletExec, container_run, quadlet_of
from fleetgate.render.types import RenderRefused, map_to_repo
from fleetgate.sources.systemd import expand_exec
from fleetgate.units import Setting, Unit

__all__ = ["UNIT_ENGINES", "not_a_quadlet", "unit_of", "user_unit"]


UNIT_ENGINES = ("llama.cpp", "vllm", "openai")
_STARTS = {"quadlet": "a rootless Quadlet starts with the user manager", "systemd": "a root unit starts with the system"}


def unit_of(config: RenderedService) -> Unit | None:
    return config.rendered.unit


def _has_unit(config: RenderedService) -> str | None:
    match config.rendered.start:
        case Compose(read=compose) if compose is not None:
            return f"{config.name} is a compose service ({compose.path.name}): no systemd unit to hold"
        case Kubernetes(read=pod) if pod is not None:
            return f"{config.name} is a Kubernetes container ({pod.workload}): no systemd unit to hold"
    if config.rendered.unit is None:
        return f"{config.name} has no unit in fleet.toml: declare unit = PATH (the systemd unit or Quadlet that starts it)"
    return None


def _systemd(config: RenderedService) -> str | None:
    unit = config.rendered.unit
    if unit is not None and unit.kind == "quadlet":
        return f"{config.name} is a rootless Quadlet: it runs as the user whose manager starts it, not as User="
    return _has_unit(config)


def not_a_quadlet(config: RenderedService) -> str | None:
    unit = config.rendered.unit
    if unit is not None and unit.kind == "systemd":
        return f"{config.name} is a systemd unit, not a Quadlet .container: no image or volumes to hold"
    return _has_unit(config)


def _rocm(config: RenderedService) -> str | None:
    if not any(d.name.startswith("ROCm") for d in config.host.devices if d.serves):
        return f"{config.service.host} has no ROCm card: the unlimited memlock is for ROCm's staging buffers"
    return _systemd(config)


def _service_section(unit: Unit) -> str:
    return "Container" if unit.kind == "quadlet" else "Service"


@service_seam(
    cites=("B-UN-1", "B-UN-2", "INC-35"),
    summary="the unit is installed into the target that starts it at boot (multi-user for root units, default for Quadlets)",
    requires=_has_unit,
    engines=UNIT_ENGINES,
    codes={
        "no-wanted-by": "the unit has no `[Install] WantedBy=`: it stays dark after a reboot (INC-35)",
        "wrong-target": "`WantedBy=` is not multi-user.target (root unit) or default.target (Quadlet)",
    },
)
def unit_install(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    target = "default.target" if unit.kind == "quadlet" else "multi-user.target"
    wanted = unit.all("Install", "WantedBy")
    targets = [t for s in wanted for t in s.value.split()]
    quadlet = quadlet_of(config.rendered.start)
    if quadlet is not None and quadlet.rootful is not None and "multi-user.target" in targets:
        return  # the system manager's default.target is multi-user's (or graphical's, which wants it)
    if not wanted:
        raise unit_install.fail(
            config, "no-wanted-by",
            where=str(unit.path),
            observed="no [Install] WantedBy=: `systemctl enable` has nothing to link, the service stays dark after a reboot",
            expected=f"[Install] WantedBy={target}",
            fix=f"add [Install] WantedBy={target}" + (" (and Linger=yes for the user)" if unit.kind == "quadlet" else ""),
        )
    if target not in targets:
        raise unit_install.fail(
            config, "wrong-target",
            where=wanted[-1].where,
            observed=f"WantedBy={' '.join(targets)}",
            expected=f"WantedBy={target} ({_STARTS[unit.kind]})",
            fix=f"install the unit into {target}",
        )


# systemd.unit(5), "Specifiers": %u/%U/%h/%g/%G name the user (and group) of the service *manager*, "not influenced by
# the User= setting": in a system unit that is root, whatever the author meant by them.
_MANAGER_SPECIFIERS = re.compile(r"%[uUhgG]")
# systemd's parse_boolean: the spellings DynamicUser= takes as yes.
_YES = ("1", "yes", "y", "true", "t", "on")


def user_unit(unit: Unit) -> bool:
    """A unit of a user manager: installed under a ``systemd/user`` directory (~/.config/systemd/user,
    /etc/systemd/user, /usr/lib/systemd/user), as the repository lays it out. Its specifiers name that user, and it
    runs as that user whatever User= says; a unit anywhere else is read as a system unit, which runs as root unless
    User= (or DynamicUser=) says otherwise."""
    parts = unit.path.parts
    return any(a == "systemd" and b == "user" for a, b in pairwise(parts))


def _system_unit(config: RenderedService) -> str | None:
    quadlet = quadlet_of(config.rendered.start)
    if quadlet is not None and quadlet.rootful is not None:
        return (f"{config.name} is a rootful Quadlet ({quadlet.rootful}): podman runs the engine as its container's "
                "user (User= in [Container]), which container-user judges")
    reason = _systemd(config)
    if reason is not None:
        return reason
    unit = config.rendered.unit
    assert unit is not None
    if user_unit(unit):
        return (f"{config.name}'s unit {unit.path.name} is a user unit (under systemd/user/): it runs as the user whose "
                "manager starts it, and User= does not apply")
    run = container_run(config.rendered.start)
    if run is not None:
        return (f"{config.name}'s unit starts a container ({run.client} run): the engine runs as "
                "the container's user, not as the unit's User=")
    return None


@service_seam(
    policy_codes={"not-named": "service-user"},
    cites=("B-UN-1",),
    summary="a system unit runs the engine as an unprivileged user, never as root (no User=, User=root, or a manager "
            "specifier that resolves to root)",
    requires=_system_unit,
    engines=UNIT_ENGINES,
    codes={
        "missing": "a system unit without `User=` (or `DynamicUser=yes`): the engine runs as root",
        "root": "`User=root` (or `User=0`)",
        "specifier": (
            "`User=`/`Group=` holds %u, %U, %h, %g or %G: in a system unit these name the service manager's user, root, not "
            "the user the author meant"
        ),
        "not-named": "a `DynamicUser=yes` unit under the service-user policy, which asks for a named `User=`",
    },
)
def unit_user(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    for key in ("User", "Group"):
        setting = unit.last("Service", key)
        written = setting.written if setting is not None else None
        if setting is None or written is None or not _MANAGER_SPECIFIERS.search(written):
            continue
        raise unit_user.fail(
            config, "specifier",
            where=setting.where,
            observed=(f"{key}={written}: in a system unit systemd resolves it to {setting.value!r}, the user of the "
                      "service manager (root), not the user the unit is for: the engine runs as root"),
            expected=f"{key}= naming the service's own unprivileged {key.lower()} literally",
            fix=f"write the {key.lower()} by name ({key}=llama), or install the unit under ~/.config/systemd/user "
                "as a user unit and drop User= (systemd.unit(5), Specifiers)",
        )
    user = unit.last("Service", "User")
    dynamic = unit.last("Service", "DynamicUser")
    if user is None and dynamic is not None and dynamic.value.strip().lower() in _YES:
        if policy_on(config.fleet, "service-user"):
            raise unit_user.fail(
                config, "not-named",
                where=dynamic.where,
                observed="DynamicUser=yes and no User=: systemd allocates a transient user at each start",
                expected="User= naming the fleet's service user (policy service-user)",
                fix="add User= with the fleet's service user, or drop service-user from [fleet] policies",
            )
        return
    if user is None or not user.value.strip():
        raise unit_user.fail(
            config, "missing",
            where=str(unit.path) if user is None else user.where,
            observed="no User= (an empty one resets it): systemd runs the engine as root",
            expected="User= naming an unprivileged service user (or DynamicUser=yes)",
            fix="add User= to [Service]",
        )
    if user.value in ("root", "0"):
        raise unit_user.fail(
            config, "root",
            where=user.where,
            observed=f"User={user.value}",
            expected="an unprivileged service user, not root",
            fix="run the engine as an unprivileged user; only the unit itself is root's",
        )


@service_seam(
    policy="unlimited-memlock",
    cites=("B-RAM-4", "INC-21"),
    summary="a ROCm engine's unit grants unlimited locked memory for the staging buffers",
    requires=_rocm,
    engines=("llama.cpp", "vllm"),
    codes={
        "missing": "a ROCm engine's unit without `LimitMEMLOCK=` (INC-21)",
        "limited": "`LimitMEMLOCK=` other than infinity",
    },
)
def unit_memlock(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    limit = unit.last("Service", "LimitMEMLOCK")
    if limit is None:
        raise unit_memlock.fail(
            config, "missing",
            where=str(unit.path),
            observed="no LimitMEMLOCK=: the engine gets the default 8 MiB of locked memory and the load fails",
            expected="LimitMEMLOCK=infinity",
            fix="add LimitMEMLOCK=infinity to [Service] (ROCm pins its staging buffers)",
        )
    if limit.value.strip().lower() != "infinity":
        raise unit_memlock.fail(
            config, "limited",
            where=limit.where,
            observed=f"LimitMEMLOCK={limit.value}",
            expected="LimitMEMLOCK=infinity (an SSH shell's 8 MiB is what failed the load, INC-21)",
            fix="set LimitMEMLOCK=infinity",
        )


# systemd.service(5), Restart=: the values systemd parses; anything else is ignored with a warning.
_RESTART_VALUES = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")


@service_seam(
    cites=("B-UN-2",),
    summary="the unit restarts the engine when it dies (Restart=on-failure or always)",
    requires=_has_unit,
    engines=UNIT_ENGINES,
    codes={
        "invalid-value": (
            "a `Restart=` value systemd does not parse (`Restart=${RESTART_MODE}`: no variable is expanded there): it is ignored and "
            "`Restart=no` applies"
        ),
        "no-restart": "no `Restart=` (or `Restart=no`)",
    },
)
def unit_restart(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    restart = unit.last("Service", "Restart")
    if restart is not None and restart.value.strip() not in (*_RESTART_VALUES, ""):
        expanded = "$" in restart.value or "%" in restart.value
        raise unit_restart.fail(
            config, "invalid-value",
            where=restart.where,
            observed=(f"Restart={restart.value}: "
                      + ("systemd expands no variable in Restart= (only in Exec*= lines), so " if expanded else "")
                      + "systemd logs 'Failed to parse service restart specifier, ignoring' and keeps the default "
                      "Restart=no: a dead engine stays dead"),
            expected=f"Restart= one of {', '.join(_RESTART_VALUES)}, written literally",
            fix="write Restart=on-failure (or always) in the unit itself; an env file cannot set it",
        )
    if restart is None or restart.value in ("no", ""):
        raise unit_restart.fail(
            config, "no-restart",
            where=restart.where if restart else str(unit.path),
            observed=f"Restart={restart.value}" if restart else "no Restart=: systemd leaves a dead engine dead",
            expected="Restart=on-failure (or always)",
            fix="add Restart=on-failure to [Service]",
        )


@service_seam(
    cites=("B-SH-4", "INC-53"),
    summary="every EnvironmentFile= of the unit and its drop-ins, optional '-' ones included, is a file of this repository",
    requires=_has_unit,
    engines=UNIT_ENGINES,
    codes={
        "outside-repo": "an `EnvironmentFile=`, optional `-` ones included, outside this repository (INC-53)",
        "literal-expansion": (
            "a shell expansion (`${MODEL_PATH:-/path}`, `$(...)`) in an `EnvironmentFile=` value, which expands nothing, reaches the "
            "engine's argv or its own variables as those characters"
        ),
    },
)
def unit_env_files(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    _literal_expansions(config)
    for setting in unit.all(_service_section(unit), "EnvironmentFile"):
        optional = setting.value.startswith("-")
        path = setting.value.lstrip("-")
        local = map_to_repo(config.fleet, path)
        template = config.service.env_template
        if template is not None and template.writes in (None, path):
            continue  # fleet.toml declares the repository's template and the script that renders this file
        if local is None or not local.is_file():
            raise unit_env_files.fail(
                config, "outside-repo",
                where=setting.where,
                observed=(f"EnvironmentFile={setting.value}: "
                          + ("optional, so systemd loads it whenever it exists on the host -- a render cannot see it"
                             if optional else "not a file of this repository")),
                expected=f"env files of this repository only (deployed under {config.fleet.deploy_root})",
                fix="retire the drop-in or line; a bench arm's env file in /tmp boots while /health stays green",
            )


# A shell expansion systemd does not perform: ${NAME:-x} ${NAME-x} ${NAME:=x} ${NAME+x} ${NAME:?x}, $(...), `...`.
_SHELL_ONLY = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=+?][^}]*\}|\$\(|`")


# The environment an engine reads (its own variables, the GPU runtimes', the model hub's); the rest of what a serve
# script exports is the script's business.
_ENGINE_READS = ("LLAMA_", "VLLM_", "GGML_", "HF_", "CUDA_", "HIP_", "ROCR_", "HSA_", "NCCL_", "PYTORCH_")


def _literal_expansions(config: RenderedService) -> None:
    """An EnvironmentFile= value written for a shell (``${MODEL_PATH:-/models/x.gguf}``) is kept literally by
    systemd (src/basic/env-file.c expands nothing): when that literal reaches the engine's argv or environment,
    the engine is handed the characters ``${...}`` instead of a path."""
    rendered = config.rendered
    read = [value for name, value in rendered.env.items() if name.startswith(_ENGINE_READS)]
    reached = (*rendered.argv[1:], *read)
    for origin in rendered.inputs.values():
        if origin.via != "EnvironmentFile=":
            continue
        match = _SHELL_ONLY.search(origin.value)
        if match is None:
            continue
        literal = match.group(0)
        if not any(literal in word for word in reached):
            continue
        raise unit_env_files.fail(
            config, "literal-expansion",
            where=origin.where,
            observed=(f"{origin.name}={origin.value}: an EnvironmentFile= (systemd's, podman's) expands nothing, so the "
                      "engine is "
                      f"handed the characters {literal!r}"),
            expected="a plain value (systemd sets it as written; a default belongs in the serve script)",
            fix=f"write the value itself ({origin.name}=/path/to/file), or move the default into the script: "
                f"\"${{{origin.name}:-...}}\" there is bash's to expand",
        )


def _exec_args(config: RenderedService, unit: Unit) -> tuple[Setting, tuple[str, ...]] | None:
    if unit.kind == "quadlet":
        setting = unit.last("Container", "Exec")
        if setting is None:
            return None
        words = shlex.split(setting.value)
        return setting, tuple(words[1:])
    starts = unit.all("Service", "ExecStart")
    if not starts:
        return None
    setting = starts[-1]
    words = shlex.split(setting.value.lstrip("-@+!:"))
    for i, word in enumerate(words):
        local = map_to_repo(config.fleet, word)
        if local is not None and local.resolve() == config.rendered.script:
            return setting, tuple(words[i + 1:])
    return None


def _shell_expansions(config: RenderedService, setting: Setting) -> None:
    """systemd expands ExecStart= itself (and a Quadlet's Exec=, which the generator copies into ExecStart=), and a
    shell's expansion is not systemd's."""
    env = {name: origin.value for name, origin in config.rendered.inputs.items()}
    if setting.key == "Exec":  # after the image on the generated line: every word is expanded
        setting = Setting(setting.section, setting.key, f"podman {setting.value}", setting.path, setting.line)
    line = expand_exec(setting, env)
    if line.invalid:
        name = line.invalid[0]
        plain = re.match(r"[A-Za-z_][A-Za-z0-9_]*", name)
        variable = plain.group(0) if plain else "NAME"
        raise unit_exec_args.fail(
            config, "shell-expansion",
            where=setting.where,
            observed=(f"{setting.key}= holds ${{{name}}}: systemd substitutes only $NAME and ${{NAME}}, so it looks up a "
                      f"variable literally named {name!r}, finds none, and passes an empty string"),
            expected="${NAME} or $NAME only (systemd.service(5), Command lines); a default belongs in Environment=",
            fix=f"set the default with Environment={variable}=... (an EnvironmentFile= line overrides it) and write "
                f"${{{variable}}} in {setting.key}=",
        )


def _exec_probes(config: RenderedService) -> list[Probe]:
    """The render ``unit-exec-args`` asks: the serve script with the arguments ``ExecStart=`` (or ``Exec=``) passes."""
    unit = unit_of(config)
    if unit is None or (isinstance(config.rendered.start, QuadletExec) and config.rendered.start.read is not None):
        return []
    if unit.kind == "systemd" and unit.all("Service", "ExecStart") and config.rendered.script == unit.path:
        return []
    found = _exec_args(config, unit)
    return [Probe(args=found[1])] if found is not None and found[1] else []


@service_seam(
    probes=_exec_probes,
    cites=("B-SH-3",),
    summary="the arguments ExecStart= (or a Quadlet's Exec=) passes are ones the serve script takes",
    requires=_has_unit,
    engines=UNIT_ENGINES,
    codes={
        "shell-expansion": (
            "`${NAME:-x}` (or another shell-only form) in `ExecStart=` (or a Quadlet's `Exec=`): systemd looks up a variable named "
            "`NAME:-x` and passes an empty "
            "string"
        ),
        "refused": "the serve script refuses the arguments `ExecStart=` passes (B-SH-3)",
    },
)
def unit_exec_args(config: RenderedService) -> None:
    unit = unit_of(config)
    assert unit is not None
    if unit.kind == "systemd" and unit.all("Service", "ExecStart"):
        _shell_expansions(config, unit.all("Service", "ExecStart")[-1])
        if config.rendered.script == unit.path:
            return  # ExecStart= runs the engine itself: no serve script to pass arguments to
    start = config.rendered.start
    quadlet = start.read if isinstance(start, QuadletExec) else None
    if quadlet is not None:
        if quadlet.exec_setting is not None:
            _shell_expansions(config, quadlet.exec_setting)
        return  # Exec= is the engine's own arguments: no serve script to pass them to
    found = _exec_args(config, unit)
    if found is None or not found[1]:
        return
    setting, args = found
    try:
        config.probe(args=args)
    except RenderRefused as refused:
        raise unit_exec_args.fail(
            config, "refused",
            where=setting.where,
            observed=f"{setting.key}= passes {shlex.join(args)}; with them the serve script {refused.message}",
            expected="only arguments the serve script takes (this fleet's scripts take none: every tunable is in the env file)",
            details=[f"stderr: {line}" for line in refused.stderr.strip().splitlines()[-2:]],
            fix=f"move the arguments into the env file and drop them from {setting.key}=",
        ) from None
