"""Fleet-level findings: what no single file shows (duplicate host:port, a rendered port that is not the
declared one, inf/nan in the manifest)."""

from __future__ import annotations

from fleetgate.checks import NotApplicable, fleet_seam, service_seam
from fleetgate.fleet import Fleet, Service
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose, Kubernetes, QuadletExec, SwapModel, container_run

__all__: list[str] = []

PORT = "rendered-port-matches"


@fleet_seam(
    cites=(),
    summary="every number in fleet.toml is finite (TOML allows inf and nan; no fleet value means them)",
    codes={
        "non-finite": "`inf` or `nan` anywhere in fleet.toml",
    },
)
def fleet_numbers_finite(fleet: Fleet) -> None:
    if not fleet.non_finite:
        return
    first = fleet.non_finite[0]
    raise fleet_numbers_finite.fail(
        fleet, "non-finite",
        where=f"{fleet.path}:{first.line}" if first.line else str(fleet.path),
        observed=f"{len(fleet.non_finite)} value(s) that are not finite numbers",
        details=[f"{bad.key} = {bad.value} (line {bad.line})" for bad in fleet.non_finite],
        expected="finite numbers: an inf RAM or a nan utilisation ceiling silently turns the checks that read it off",
        fix="write the measured figure, or remove the key to take the default",
    )


@fleet_seam(
    cites=(),
    summary="no two active services of a host declare the same port",
    codes={
        "duplicate": "two active services on one host:port (models of one llama-swap config share its port: no clash)",
    },
)
def service_ports_unique(fleet: Fleet) -> None:
    seen: dict[tuple[str, int], str] = {}
    clashes: list[str] = []
    for service in fleet.services.values():
        if service.state != "active":
            # A rollback shares the port of the service it replaces; an undeployed one runs nowhere.
            continue
        key = (service.host, service.port)
        if key in seen and _same_llama_swap(fleet.services[seen[key]], service):
            continue  # models of one llama-swap config: clients reach them all at llama-swap's one port
        if key in seen:
            clashes.append(f"{seen[key]} and {service.name} both on {service.host}:{service.port}")
        else:
            seen[key] = service.name
    if clashes:
        raise service_ports_unique.fail(
            fleet, "duplicate",
            where=fleet.where("services", clashes[0].split(" and ")[1].split(" both")[0], "port"),
            observed=f"{len(clashes)} host:port pair(s) declared by two active services",
            details=clashes,
            expected="one active service per host:port (the second one fails to bind, or the first one is shadowed)",
            fix="give one of them another port, or mark the one that is a fallback state = \"rollback\"",
        )


def _same_llama_swap(first: Service, second: Service) -> bool:
    """Models of one llama-swap config, or of one llama.cpp router preset: one proxy's port for them all."""
    return ((first.llama_swap is not None and first.llama_swap == second.llama_swap)
            or (first.models_preset is not None and first.models_preset == second.models_preset))


def _no_port(config: RenderedService) -> str | None:
    if config.llama is not None or config.vllm is not None:
        return None
    return f"{PORT} does not apply to {config.name}"


@service_seam(
    cites=(),
    summary="the port the serve script passes the engine is the port fleet.toml declares",
    requires=_no_port,
    engines=("llama.cpp", "vllm"),
    codes={
        "run-not-published": "a `docker run`/`podman run` without `--network host` publishes (`-p`) no port for the one the engine binds",
        "run-published-differs": (
            "a `docker run -p HOST:CONTAINER` publishes the engine's port on a host port other than fleet.toml's `port`"
        ),
        "differs": (
            "the port the service really binds (its rendered argv) is not fleet.toml's `port` (through a `docker run -p HOST:CONTAINER`, "
            "the host port; behind llama-swap, the port its `proxy:` forwards to)"
        ),
        "not-published": (
            "a compose service on a bridge network publishes no port for the one the engine listens on inside: no client on the host "
            "reaches it"
        ),
        "published-differs": "a compose service publishes the engine's port on a host port other than fleet.toml's `port` (`ports:`)",
        "quadlet-not-published": (
            "a Quadlet whose `Exec=` is the engine's arguments, not on `Network=host`, publishes (`PublishPort=`) no port "
            "for the one the engine binds in the container"
        ),
        "quadlet-published-differs": (
            "a Quadlet's `PublishPort=HOST:CONTAINER` publishes the engine's port on a host port other than fleet.toml's `port`"
        ),
        "kubernetes-not-targeted": (
            "Services select a Kubernetes workload's pod, and none of their ports forwards (`targetPort`) to the port the "
            "engine listens on: clients of the Service reach nothing"
        ),
        "kubernetes-port-differs": (
            "the Service port that forwards to the engine's port is not fleet.toml's `port` (where clients of the Service "
            "connect)"
        ),
    },
)
def rendered_port_matches(config: RenderedService) -> None:
    if config.llama is not None:
        port, use = config.llama.port, config.llama.use("port")
        default = "llama-server's default 8080"
    else:
        assert config.vllm is not None
        port, use = config.vllm.port, config.vllm.use("port")
        default = "vllm's default 8000"
    if config.service.models_preset is not None:
        raise NotApplicable(f"{config.name} is a model of the router preset {config.service.models_preset.name}: the "
                            "router gives its llama-server a free port when it loads it, and clients reach the "
                            "router's own port (fleet.toml's port)")
    # Behind llama-swap the engine listens where llama-swap forwards (its proxy:), not on llama-swap's own port.
    start = config.rendered.start
    upstream = start.upstream_port if isinstance(start, SwapModel) else None
    declared = config.service.port if upstream is None else upstream
    if isinstance(start, Compose) and start.read is not None and not start.read.host_network:
        _compose_published(config, port, declared)
        return
    if isinstance(start, Kubernetes) and start.read is not None and start.read.selected:
        _service_port(config, port, declared)
        return
    run = container_run(start)
    if run is not None:
        # docker run -p HOST:CONTAINER: clients reach the engine's port through the host port that publishes it.
        published = run.host_port(port)
        if published is None:
            raise rendered_port_matches.fail(
                config, "run-not-published",
                where=str(config.rendered.script),
                observed=(f"the engine listens on {port} in the container"
                          + (f" ({use.flag} {use.value})" if use is not None else f" ({default})")
                          + f", and the {run.client} run line publishes "
                          + (", ".join(f"{p.host_port}:{p.container_port}" for p in run.published) or "no port")),
                expected=f"-p {declared}:{port} (or --network host), so that port {declared} of the host reaches it",
                fix=f"publish the port the engine binds: -p {declared}:{port}",
            )
        if published == declared:
            return
        raise rendered_port_matches.fail(
            config, "run-published-differs",
            where=str(config.rendered.script),
            observed=f"the {run.client} run line publishes the engine's port {port} on host port {published}",
            expected=f"port {declared}, as fleet.toml declares (where clients, the live gate and the other seams look)",
            fix="make the -p host port and fleet.toml's port agree",
        )
    if isinstance(start, QuadletExec) and start.read is not None and start.read.network != "host":
        _quadlet_published(config, port, declared,
                           f" ({use.flag} {use.value})" if use is not None else f" ({default})")
        return
    if port == declared:
        return
    raise rendered_port_matches.fail(
        config, "differs",
        where=config.where_flag(use) if use is not None else str(config.rendered.script),
        observed=(f"the engine listens on {port}" + (f" ({use.flag} {use.value})" if use is not None else f" ({default})")),
        expected=(f"port {declared}, as fleet.toml declares (where clients, the live gate and the other seams look)"
                  if upstream is None else f"port {declared}, where llama-swap's proxy: for this model forwards"),
        fix="make the env file's port and fleet.toml's agree; a client pointed at the declared port reaches nothing or another service",
    )


def _quadlet_published(config: RenderedService, port: int, declared: int, how: str) -> None:
    """A Quadlet's container on podman's own network: clients on the host reach the engine through the host port its
    ``PublishPort=`` maps to the port the engine binds."""
    start = config.rendered.start
    assert isinstance(start, QuadletExec) and start.read is not None
    quadlet = start.read
    mapping = next((p for p in quadlet.published if p.container_port == port and p.host_port is not None), None)
    if mapping is None:
        raise rendered_port_matches.fail(
            config, "quadlet-not-published",
            where=str(quadlet.path),
            observed=(f"the engine listens on {port} in the container{how}, and the Quadlet publishes "
                      + (", ".join(f"{p.host_port or '(any)'}:{p.container_port}" for p in quadlet.published)
                         or "no port")),
            details=[f"{p.where}: PublishPort= {p.host_port or '(any)'}:{p.container_port}" for p in quadlet.published],
            expected=f"PublishPort={declared}:{port} (or Network=host), so that port {declared} of the host reaches it",
            fix=f"publish the port the engine binds: PublishPort=127.0.0.1:{declared}:{port}",
        )
    if mapping.host_port == declared:
        return
    raise rendered_port_matches.fail(
        config, "quadlet-published-differs",
        where=mapping.where,
        observed=f"PublishPort= publishes the engine's port {port} on host port {mapping.host_port}",
        expected=f"port {declared}, as fleet.toml declares (where clients, the live gate and the other seams look)",
        fix="make the PublishPort= host port and fleet.toml's port agree",
    )


def _service_port(config: RenderedService, port: int, declared: int) -> None:
    """Clients of a Kubernetes workload that Services select connect to a Service's port, which forwards to the
    container port its targetPort names (a pod no Service selects is reached on the engine's own port)."""
    start = config.rendered.start
    assert isinstance(start, Kubernetes) and start.read is not None
    pod = start.read
    targeting = pod.targeting(port)
    if not targeting:
        raise rendered_port_matches.fail(
            config, "kubernetes-not-targeted",
            where=pod.service_ports[0].where if pod.service_ports else pod.command_where,
            observed=(f"the engine listens on {port} in {pod.name}, and no port of Service "
                      f"{', '.join(pod.selected)} forwards to it"),
            details=[f"{p.where}: Service {p.service} port {p.port} -> "
                     f"{p.target if p.target is not None else '(a named port the container does not have)'}"
                     for p in pod.service_ports],
            expected=f"a Service port {declared} with targetPort {port} (or the name of the containerPort {port})",
            fix="point the Service's targetPort at the port the engine listens on (or pass the engine the port the "
                "Service targets)",
        )
    if any(p.port == declared for p in targeting):
        return
    raise rendered_port_matches.fail(
        config, "kubernetes-port-differs",
        where=targeting[0].where,
        observed=(f"Service {targeting[0].service} forwards port {', '.join(str(p.port) for p in targeting)} to the "
                  f"engine's port {port}"),
        expected=f"port {declared}, as fleet.toml declares (where clients and the live gate look)",
        fix="make the Service's port and fleet.toml's port agree",
    )


def _compose_published(config: RenderedService, port: int, declared: int) -> None:
    """In a compose service on a bridge network clients reach the port ``ports:`` publishes, not the engine's own."""
    start = config.rendered.start
    assert isinstance(start, Compose) and start.read is not None
    compose = start.read
    mapped = compose.published(port)
    if mapped is None:
        raise rendered_port_matches.fail(
            config, "not-published",
            where=compose.ports[0].where if compose.ports else compose.command_where,
            observed=(f"the engine listens on {port} inside the container, and no ports: entry of {compose.name} "
                      "publishes it"),
            details=[f"{p.where}: {p.published or '(ephemeral)'} -> {p.target}/{p.protocol}" for p in compose.ports],
            expected=f"a ports: entry publishing container port {port} on host port {declared} (\"{declared}:{port}\")",
            fix="publish the port the engine listens on (or pass the engine the container port ports: publishes); "
                "nothing outside the container reaches an unpublished port",
        )
    if mapped.published != declared:
        raise rendered_port_matches.fail(
            config, "published-differs",
            where=mapped.where,
            observed=(f"ports: publishes the engine's port {port} on host port "
                      f"{mapped.published if mapped.published is not None else '(an ephemeral one docker picks)'}"),
            expected=f"host port {declared}, as fleet.toml declares (where clients and the live gate look)",
            fix="make the published port in ports: (or the .env variable it reads) and fleet.toml's port agree",
        )
