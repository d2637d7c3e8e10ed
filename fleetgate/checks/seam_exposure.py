"""An engine other machines can reach asks for an API key (issue 32): a universal security finding, not a house rule.

Where an engine is reachable from is read from how it starts, the way each consumer binds it:

- a process of the host (a unit, a script, ``bash -c``): the address the engine listens on; llama-server listens on
  127.0.0.1 unless ``--host``/``LLAMA_ARG_HOST`` says otherwise (common/arg.cpp, ``--host``), vLLM on every address
  unless ``--host`` names one (its OpenAI server binds uvicorn to ``host=None``);
- a container (compose, ``docker run``, a Quadlet): the address its port is published on (``ports:``, ``-p``,
  ``PublishPort=``; none given: every address of the host), or the engine's own with the host's network;
- a Kubernetes pod: a NodePort (or LoadBalancer) Service, which opens the port on every node.

An API key is ``--api-key``, ``--api-key-file`` or ``LLAMA_API_KEY`` for llama-server, ``--api-key`` or
``VLLM_API_KEY`` for vLLM. llama-server drops empty keys (common/arg.cpp: ``if (!key.empty())``), so
``--api-key ""`` from an empty variable is no key at all. No key's value is shown.
"""

from __future__ import annotations

import ipaddress

from fleetgate.checks import service_seam
from fleetgate.failure import Deferred
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose, Kubernetes, container_run, quadlet_of

Reach = tuple[str, "str | Deferred"]

__all__ = ["EXPOSED", "reach"]

EXPOSED = "engine-auth"

_EVERY = ("0.0.0.0", "::", "[::]", "*", "")


def _beyond_host(address: str) -> bool:
    """Whether an address the engine binds is reachable from another machine: every address, or one that is not
    loopback. A Unix socket (llama-server takes a path ending in .sock) is not."""
    text = address.strip()
    if text in _EVERY:
        return True
    if text.endswith(".sock") or text == "localhost":
        return False
    try:
        return not ipaddress.ip_address(text.strip("[]")).is_loopback
    except ValueError:
        return True  # a host name: whatever it resolves to, it is not the loopback name


def _engine_host(config: RenderedService) -> tuple[str, str]:
    """The address the engine itself binds, and how that was read."""
    if config.llama is not None:
        use = config.llama.use("host")
        return config.llama.host, (f"{use.flag} {config.llama.host}" if use is not None
                                   else "no --host: llama-server's default 127.0.0.1")
    assert config.vllm is not None
    use = config.vllm.use("host")
    if use is None or use.value is None:
        return "", "no --host: vLLM binds every address"
    return use.value, f"--host {use.value or repr(use.value)}"


def _published(host_ip: str | None, port: int | None, where: str) -> Reach | None:
    shown = f"{host_ip}:{port}" if host_ip else f"{port} (no address: every address of the host)"
    return (shown, where) if _beyond_host(host_ip or "") else None


def reach(config: RenderedService) -> Reach | str | None:
    """How other machines reach the engine: (what, where), None when only the host (or its containers) can, or a
    string: why the check does not apply."""
    rendered = config.rendered
    port = config.llama.port if config.llama is not None else config.vllm.port if config.vllm is not None else None
    start = rendered.start
    compose = start.read if isinstance(start, Compose) else None
    if compose is not None:
        if compose.host_network:
            return _bound(config)
        for mapping in compose.ports:
            if mapping.target == port and mapping.protocol == "tcp":
                found = _published(mapping.host_ip, mapping.published, mapping.where)
                if found is not None:
                    return (f"compose publishes the engine's port {port} on {found[0]}", found[1])
        return None
    pod = start.read if isinstance(start, Kubernetes) else None
    if pod is not None:
        for service_port in pod.service_ports:
            if service_port.node_port is not None and service_port.target == port:
                return (f"the Service {service_port.service} opens node port {service_port.node_port} on every node "
                        f"to the engine's port {port}", service_port.where)
        return (f"{config.name} is reached only through ClusterIP Services: inside the cluster, as the cluster's "
                "network policies allow")
    run = container_run(start)
    if run is not None:
        if run.network == "host":
            return _bound(config)
        for item in run.published:
            if item.container_port == port and item.protocol == "tcp":
                found = _published(item.host_ip, item.host_port, str(rendered.script))
                if found is not None:
                    return (f"{run.client} run publishes the engine's port {port} on {found[0]}", found[1])
        return None
    quadlet = quadlet_of(start)
    if quadlet is not None:
        if quadlet.network == "host":
            return _bound(config)
        for publish in quadlet.published:
            if publish.container_port != port:
                continue
            found = _published(publish.host_ip, publish.host_port, publish.where)
            if found is not None:
                return (f"PublishPort= publishes the engine's port {port} on {found[0]}", found[1])
        return None
    return _bound(config)


def _bound(config: RenderedService) -> Reach | None:
    address, how = _engine_host(config)
    if not _beyond_host(address):
        return None
    use = config.llama.use("host") if config.llama is not None else config.vllm.use("host") if config.vllm else None
    return f"the engine listens on {address or 'every address'} ({how})", config.where_flag(use)


def _key(config: RenderedService) -> tuple[bool, str | None]:
    """(a key is set, the flag or variable that sets an empty one)."""
    if config.llama is not None:
        empty = None
        for dest in ("api_key", "api_key_file"):
            use = config.llama.use(dest)
            if use is None:
                continue
            if dest == "api_key" and any(k.strip() for k in (use.value or "").split(",")):
                return True, None
            if dest == "api_key_file" and (use.value or "").strip():
                return True, None
            empty = use.flag
        return False, empty
    assert config.vllm is not None
    use = config.vllm.use("api_key")
    if use is not None and (use.value or "").strip():
        return True, None
    env = config.rendered.env.get("VLLM_API_KEY")
    if env is not None and env.strip():
        return True, None
    return False, use.flag if use is not None else "VLLM_API_KEY" if env is not None else None


def _not_reached(config: RenderedService) -> str | None:
    found = reach(config)
    if isinstance(found, str):
        return found
    if found is None:
        return f"{config.name} is reached from its host only (loopback, or a container port that is not published)"
    return None


@service_seam(
    cites=(),
    summary="an engine other machines can reach (every address, a published port, a NodePort) asks for an API key",
    requires=_not_reached,
    engines=("llama.cpp", "vllm"),
    codes={
        "no-key": ("the engine is reachable from other machines (it listens on every address, or its port is published "
                   "there) and takes no API key (`--api-key`, `--api-key-file`, `LLAMA_API_KEY`, `VLLM_API_KEY`)"),
        "empty-key": ("the engine is reachable from other machines and its API key is empty (`--api-key \"$KEY\"` with "
                      "KEY unset): llama-server drops an empty key, so nothing is asked"),
    },
)
def engine_auth(config: RenderedService) -> None:
    found = reach(config)
    assert isinstance(found, tuple)
    what, where = found
    has_key, empty = _key(config)
    if has_key:
        return
    engine = "llama-server" if config.llama is not None else "vLLM"
    # Worded around the secret scrubber: a secret flag followed by a word reads as the flag and its value.
    flags = "--api-key-file PATH or LLAMA_API_KEY" if config.llama is not None else "VLLM_API_KEY (or --api-key)"
    raise engine_auth.fail(
        config, "empty-key" if empty is not None else "no-key",
        where=where,
        observed=(f"{what}; the value given to {empty!r} is empty, so {engine} asks for no key" if empty is not None
                  else f"{what}; it takes no API key, so anyone who reaches the port runs the model"),
        expected=f"an API key ({flags}) on an engine other machines reach, or an address only this host reaches",
        fix=(f"give the engine a key ({flags}) from a file the unit or the secret store provides, or bind 127.0.0.1 "
             "(publish 127.0.0.1:PORT:PORT) and put an authenticating proxy in front; a network you trust is a "
             "waiver with its reason ([[waivers]] in fleet.toml), not a default"),
    )
