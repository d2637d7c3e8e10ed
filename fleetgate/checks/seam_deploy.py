"""The deploy script's readiness probes can succeed (B-TO-6, B-UN-6, INC-81); its payload-existence gate names
the files the unit loads (B-MM-4, B-SW-1, INC-76).

A deploy gates each service on a probe URL (``deploy_probes`` in fleet.toml, read as the deploy script
reads it). A probe that can never succeed burns its whole budget and aborts the run with every later
service left pending: plex's ``http://`` probe against a server that drops plain HTTP off-loopback burned
600 s (INC-81). The probe is held to where the rendered engine listens: its port, its scheme (TLS only when
the argv configures it), an address that reaches the engine from the host the deploy runs on (loopback, or
the host's own address when the engine binds every interface), and a path the engine answers.

``deploy-payload``: the deploy script (``deploy_script`` in fleet.toml) is run the way an operator runs it,
``SCRIPT HOST --service NAME``, in the render's sandbox with ``ssh`` stubbed (each call recorded, none made)
and nothing of the operator's environment, so every ``${VAR:-default}`` takes its default. Its payload gate
is each ``ssh HOST test -e FILE`` call (``-f``, ``-r``, ``-s``, ``-d`` alike; the remote command split as the
remote shell splits it). Every file the gate tests must be one the env files or fleet.toml's payload name, and
every payload file of the env file that the rendered argv loads must be tested: a swap that re-points the env file and the serve script
but not the deploy script's ``LLM_<SVC>_MODEL_FILE``/``LLM_<SVC>_MMPROJ`` defaults gates on files the unit no
longer loads (INC-76). Where a stale default was set is bash's own trace of the run.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import replace

from fleetgate.checks import service_seam
from fleetgate.checks.seam_swap import payload_variables
from fleetgate.deploy import Probe, read_probes
from fleetgate.failure import Failure
from fleetgate.render.rendered import Probe as RenderProbe
from fleetgate.render.rendered import RenderedService
from fleetgate.render.types import RenderRefused

__all__: list[str] = []

NAME = "deploy-probes"
LOOPBACK = ("localhost",)
_ALL = ("0.0.0.0", "::", "")
# The readiness endpoints the engines answer 200 on once the model is loaded.
HEALTH = {"llama.cpp": ("/health",), "vllm": ("/health",)}


def _deployed(config: RenderedService) -> str | None:
    if config.fleet.deploy_probes is None:
        return (f"{config.fleet.path.name} names no deploy_probes: name the deploy script's probe table to hold "
                "each deploy's readiness gate to the service")
    if config.rendered.unit is None:
        return f"{config.name} has no unit: the deploy script does not deploy it"
    return None


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _flag(argv: tuple[str, ...], name: str) -> str | None:
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
    return value


def _listens(config: RenderedService) -> tuple[str, int, bool]:
    """(bind address, port, TLS) of the rendered engine; "" binds every interface."""
    argv = config.rendered.argv
    tls = any(a.split("=", 1)[0].startswith(("--ssl", "--tls")) for a in argv[1:])
    if config.llama is not None:
        return config.llama.host, config.llama.port, tls
    given = _flag(argv, "--port")
    port = config.vllm.port if config.vllm is not None else int(given) if given and given.isdigit() else config.service.port
    return _flag(argv, "--host") or "", port, tls


def _fail(config: RenderedService, probe: Probe, *, code: str, observed: str, expected: str, fix: str) -> Failure:
    """The failure of one probe branch; the raise site names the branch (``code``)."""
    return deploy_probes.fail(config, code, where=probe.where, observed=f"{probe.url} ({probe.budget_s} s budget): {observed}",
                      expected=expected,
                      fix=fix + "; a probe that cannot succeed burns its whole budget and aborts the run (INC-81)")


@service_seam(
    policy="deploy-probes",
    cites=("B-TO-6", "B-UN-6", "INC-81"),
    summary="the deploy script's readiness probe for the service can succeed: its scheme, address, port and "
               "path are where the rendered engine answers",
    requires=_deployed,
    engines=("llama.cpp", "vllm", "openai"),
    codes={
        "missing": "a service the deploy script deploys with no readiness probe (B-TO-6)",
        "scheme": "a probe scheme the rendered engine does not serve (https without TLS flags, or http with them) (INC-81)",
        "port": "a probe port other than the rendered port",
        "host": (
            "a probe address that does not reach the engine from its own host (another machine, or a loopback-bound engine probed "
            "off-loopback) (B-UN-6)"
        ),
        "path": "a probe path that is not a readiness endpoint of the engine (`/health`, or the contract's endpoints)",
    },
)
def deploy_probes(config: RenderedService) -> None:
    table = config.fleet.deploy_probes
    assert table is not None
    probe = read_probes(table).get(config.name)
    if probe is None:
        raise deploy_probes.fail(
            config, "missing",
            where=str(table),
            observed=f"no probe for {config.name}: the deploy restarts its unit and gates on nothing",
            expected=f"'{config.name} http://127.0.0.1:{config.service.port}/health BUDGET' in {table.name}",
            fix="add the service's readiness probe to the table the deploy script reads",
        )
    bind, port, tls = _listens(config)
    if (probe.scheme == "https") != tls:
        raise _fail(config, probe, code="scheme",
                    observed=f"{probe.scheme}:// against an engine that serves " + ("TLS" if tls else "plain HTTP"),
                    expected=f"{'https' if tls else 'http'}://, the scheme the rendered argv serves",
                    fix="probe with the scheme the engine answers")
    probe_port = probe.port or (443 if probe.scheme == "https" else 80)
    if probe_port != port:
        raise _fail(config, probe, code="port",
                    observed=f"port {probe_port}, where nothing of {config.name} listens",
                    expected=f"port {port}, as the rendered argv binds it",
                    fix="probe the port the service listens on")
    address = config.host.address
    reaches = (_is_loopback(probe.host) and (bind in _ALL or _is_loopback(bind))) or (
        probe.host == address and (bind in _ALL or bind == address))
    if not reaches:
        bound = "binds every interface" if bind in _ALL else f"binds {bind} only"
        raise _fail(config, probe, code="host",
                    observed=f"{probe.host} does not reach the engine from {config.service.host}, where the deploy runs: it {bound}",
                    expected="127.0.0.1 (the deploy probes from the service's own host)"
                             + (f", or {address}" if address and bind in _ALL else ""),
                    fix="probe the engine over loopback on its own host")
    paths = HEALTH.get(config.service.engine) or config.service.contract.endpoints
    if paths and probe.path not in paths:
        raise _fail(config, probe, code="path",
                    observed=f"{probe.path} is not a readiness endpoint of {config.service.engine}",
                    expected=f"one of {', '.join(paths)}",
                    fix="probe /health: it answers 200 only once the model is loaded")


# ssh(1)'s options that take a value (OpenSSH ssh.c, the getopt string): the first other word is the host.
_SSH_VALUED = set("bceilmopBDEFIJLOPQRSwW")
_EXISTS = ("-e", "-f", "-r", "-s", "-d")


def _loads(config: RenderedService, path: str) -> bool:
    return any(arg == path or arg.endswith(f"={path}") for arg in config.rendered.args)


def _gated(config: RenderedService) -> str | None:
    if config.fleet.deploy_script is None:
        return (f"{config.fleet.path.name} names no deploy_script: name the deploy script to hold its payload gate "
                "to the files each unit loads")
    if config.rendered.unit is None:
        return f"{config.name} has no unit: the deploy script does not deploy it"
    if not any(_loads(config, origin.value) for origin in payload_variables(config)):
        return (f"no variable of {config.name}'s env files names a declared payload file that the unit loads: "
                "nothing for the deploy's payload gate to name")
    return None


def _remote_command(argv: tuple[str, ...]) -> list[str]:
    """The words the remote shell runs for one recorded ``ssh`` call (ssh joins them with spaces)."""
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        letters = argv[i][1:]
        for n, letter in enumerate(letters):
            if letter in _SSH_VALUED:
                i += 1 if n + 1 < len(letters) else 2
                break
        else:
            i += 1
    if i < len(argv) and argv[i] == "--":
        i += 1
    try:
        return shlex.split(" ".join(argv[i + 1:]))
    except ValueError:
        return []


def _tested(calls: tuple[tuple[str, ...], ...]) -> list[str]:
    """The files the gate's ``ssh HOST test -e FILE`` (or ``[ -e FILE ]``) calls test, in call order."""
    found: list[str] = []
    for argv in calls:
        words = _remote_command(argv)
        if not words or words[0] not in ("test", "["):
            continue
        found += [words[i + 1] for i in range(1, len(words) - 1) if words[i] in _EXISTS and words[i + 1].startswith("/")]
    return list(dict.fromkeys(found))


def _deploy_run(config: RenderedService) -> RenderProbe:
    """``deploy.sh HOST --service NAME`` run as the service's, ssh stubbed."""
    script = config.fleet.deploy_script
    assert script is not None
    pseudo = replace(config.service, name=f"{config.name}:deploy", binary="ssh", serve_script=script,
                     env_file=None, unit=None)
    return RenderProbe(args=(config.service.host, "--service", config.name), service=pseudo)


@service_seam(
    policy="deploy-payload",
    probes=lambda config: [_deploy_run(config)],
    cites=("B-MM-4", "B-SW-1", "INC-76"),
    summary="the deploy script's payload-existence gate, run with its defaults, tests the files the env file "
               "names and the unit loads: model and mmproj",
    requires=_gated,
    engines=("llama.cpp", "vllm", "openai"),
    codes={
        "does-not-run": "`deploy.sh HOST --service NAME` exits before any `ssh` call: the gate cannot be seen",
        "other-payload": (
            "the deploy script's payload gate, run with its defaults (`LLM_<SVC>_MODEL_FILE`, `LLM_<SVC>_MMPROJ`), tests a file the env "
            "file does not name: a default left on a retired payload, at the file and line bash set it (INC-76, B-SW-1)"
        ),
        "untested": "a payload file the unit loads (model, mmproj) that the deploy's gate never tests (B-MM-4)",
    },
)
def deploy_payload(config: RenderedService) -> None:
    script = config.fleet.deploy_script
    assert script is not None
    host = config.service.host
    planned = _deploy_run(config)
    try:
        run = config.probe(service=planned.service, args=planned.args)
    except RenderRefused as refused:
        raise deploy_payload.fail(
            config, "does-not-run",
            where=f"{script}:{refused.line}" if refused.line else str(script),
            observed=f"{script.name} {host} --service {config.name} calls no ssh: {refused.message}",
            expected="a deploy that tests the unit's payload on the host before it restarts anything",
            fix="fix the script (it runs under bash with ssh stubbed, each call recorded and none made)",
        ) from None
    tested = _tested((*run.extra_invocations, run.argv))
    payload = payload_variables(config)
    # A file the fleet still knows -- an env file's variable names it, or fleet.toml declares it (a sidecar kept
    # for a rollback arm, a Quadlet's host directory) -- is not stale; anything else is a retired payload.
    named = {origin.value for origin in config.variables.values()} | set(config.service.payload)
    listed = [f"{origin.name}={origin.value} ({origin.where})" for origin in payload]
    stale = [path for path in tested if path not in named]
    if stale:
        wheres = [run.first_traced(path) or str(script) for path in stale]
        raise deploy_payload.fail(
            config, "other-payload",
            where=wheres[0],
            observed=(f"{script.name} {host} --service {config.name} gates on {stale[0]}, which neither the env file nor "
                      "fleet.toml's payload names"),
            expected="the gate tests the payload the env file names: " + "; ".join(listed),
            details=[f"stale: {path} (set at {where})" for path, where in zip(stale, wheres, strict=True)],
            fix="a swap re-points every consumer in one pass (INC-76): point the deploy script's LLM_<SVC>_MODEL_FILE / "
                "LLM_<SVC>_MMPROJ defaults at the env file's payload",
        )
    untested = [origin for origin in payload if _loads(config, origin.value) and origin.value not in tested]
    if untested:
        origin = untested[0]
        raise deploy_payload.fail(
            config, "untested",
            where=str(script),
            observed=(f"{script.name} {host} --service {config.name} never tests {origin.value} "
                      f"({origin.name}, {origin.where}), which the unit loads"
                      + (f"; it tests {', '.join(tested)}" if tested else "; it tests no file")),
            expected="the gate tests every payload file the unit loads, the mmproj included (B-MM-4)",
            details=[f"untested: {o.name}={o.value} ({o.where})" for o in untested],
            fix="add the file to the service's payload gate, so a deploy refuses before restarting a unit that "
                "cannot load it",
        )
