"""The deploy script's readiness probes can succeed (B-TO-6, B-UN-6, INC-81).

A deploy gates each service on a probe URL (``deploy_probes`` in fleet.toml, read as the deploy script
reads it). A probe that can never succeed burns its whole budget and aborts the run with every later
service left pending: plex's ``http://`` probe against a server that drops plain HTTP off-loopback burned
600 s (INC-81). The probe is held to where the rendered engine listens: its port, its scheme (TLS only when
the argv configures it), an address that reaches the engine from the host the deploy runs on (loopback, or
the host's own address when the engine binds every interface), and a path the engine answers.
"""

from __future__ import annotations

import ipaddress

from fleetgate.checks import check
from fleetgate.config import ServiceConfig
from fleetgate.deploy import Probe, read_probes
from fleetgate.failure import Failure

__all__: list[str] = []

NAME = "deploy-probes"
LOOPBACK = ("localhost",)
_ALL = ("0.0.0.0", "::", "")
# The readiness endpoints the engines answer 200 on once the model is loaded.
HEALTH = {"llama.cpp": ("/health",), "vllm": ("/health",)}


def _deployed(config: ServiceConfig) -> str | None:
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


def _listens(config: ServiceConfig) -> tuple[str, int, bool]:
    """(bind address, port, TLS) of the rendered engine; "" binds every interface."""
    argv = config.rendered.argv
    tls = any(a.split("=", 1)[0].startswith(("--ssl", "--tls")) for a in argv[1:])
    if config.llama is not None:
        return config.llama.host, config.llama.port, tls
    given = _flag(argv, "--port")
    port = config.vllm.port if config.vllm is not None else int(given) if given and given.isdigit() else config.service.port
    return _flag(argv, "--host") or "", port, tls


def _fail(check_name: str, config: ServiceConfig, probe: Probe, *, code: str, observed: str, expected: str,
          fix: str) -> Failure:
    """The failure of one probe branch; the raise site names the branch (``code``)."""
    failure = Failure(service=config.name, check=check_name, code=f"{check_name}/{code}", where=probe.where,
                      observed=f"{probe.url} ({probe.budget_s} s budget): {observed}", expected=expected,
                      fix=fix + "; a probe that cannot succeed burns its whole budget and aborts the run (INC-81)")
    return failure


@check(NAME, kind="seam", subject="service", requires=_deployed, engines=("llama.cpp", "vllm", "openai"),
       cites=("B-TO-6", "B-UN-6", "INC-81"),
       summary="the deploy script's readiness probe for the service can succeed: its scheme, address, port and "
               "path are where the rendered engine answers")
def deploy_probes(config: ServiceConfig) -> None:
    table = config.fleet.deploy_probes
    assert table is not None
    probe = read_probes(table).get(config.name)
    if probe is None:
        raise Failure(
            service=config.name, check=NAME, code=f"{NAME}/missing", where=str(table),
            observed=f"no probe for {config.name}: the deploy restarts its unit and gates on nothing",
            expected=f"'{config.name} http://127.0.0.1:{config.service.port}/health BUDGET' in {table.name}",
            fix="add the service's readiness probe to the table the deploy script reads",
        )
    bind, port, tls = _listens(config)
    if (probe.scheme == "https") != tls:
        raise _fail(NAME, config, probe, code="scheme",
                    observed=f"{probe.scheme}:// against an engine that serves " + ("TLS" if tls else "plain HTTP"),
                    expected=f"{'https' if tls else 'http'}://, the scheme the rendered argv serves",
                    fix="probe with the scheme the engine answers")
    probe_port = probe.port or (443 if probe.scheme == "https" else 80)
    if probe_port != port:
        raise _fail(NAME, config, probe, code="port",
                    observed=f"port {probe_port}, where nothing of {config.name} listens",
                    expected=f"port {port}, as the rendered argv binds it",
                    fix="probe the port the service listens on")
    address = config.host.address
    reaches = (_is_loopback(probe.host) and (bind in _ALL or _is_loopback(bind))) or (
        probe.host == address and (bind in _ALL or bind == address))
    if not reaches:
        bound = "binds every interface" if bind in _ALL else f"binds {bind} only"
        raise _fail(NAME, config, probe, code="host",
                    observed=f"{probe.host} does not reach the engine from {config.service.host}, where the deploy runs: it {bound}",
                    expected="127.0.0.1 (the deploy probes from the service's own host)"
                             + (f", or {address}" if address and bind in _ALL else ""),
                    fix="probe the engine over loopback on its own host")
    paths = HEALTH.get(config.service.engine) or config.service.contract.endpoints
    if paths and probe.path not in paths:
        raise _fail(NAME, config, probe, code="path",
                    observed=f"{probe.path} is not a readiness endpoint of {config.service.engine}",
                    expected=f"one of {', '.join(paths)}",
                    fix="probe /health: it answers 200 only once the model is loaded")
