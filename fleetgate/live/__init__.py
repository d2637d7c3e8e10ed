"""The live gate's library: reach a running endpoint and hold it to the contract its files declare.

``connect()`` renders the service the way it runs on this machine, derives its contract, and opens
a bounded HTTP client to it. What that machine gives the serve script beyond its files (a ``LocalRender``) is
the caller's to say; nothing here guesses it. Nothing here imports pytest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.engines.vllm import parse_vllm
from fleetgate.errors import InputError
from fleetgate.fleet import LOOPBACK, Fleet, Service
from fleetgate.live.client import Client, EndpointError, Reply, StreamReply
from fleetgate.live.contract import LiveContract, derive_contract
from fleetgate.live.dialects import Dialect, dialect_for
from fleetgate.live.endpoint import BUDGET_TOKENS, CheckRecord, LiveEndpoint
from fleetgate.live.metrics import RuleSelector, RuleThreshold, rule_selectors, rule_thresholds
from fleetgate.render.dispatch import render
from fleetgate.render.rendered import RenderedService, load_service

__all__ = [
    "BUDGET_TOKENS",
    "CheckRecord",
    "Client",
    "Dialect",
    "EndpointError",
    "LiveContract",
    "LiveEndpoint",
    "LocalRender",
    "Reply",
    "RuleSelector",
    "RuleThreshold",
    "StreamReply",
    "connect",
    "declared_port",
    "default_url",
    "live_config",
]

DEFAULT_API_KEY_ENV = "FLEETGATE_API_KEY"


@dataclass(frozen=True)
class LocalRender:
    """What the machine that runs the engine gives its serve script beyond what the files say, for the live
    render: variables (a model directory that differs per machine) and the files that exist there besides the
    declared payload."""

    overrides: Mapping[str, str] = field(default_factory=dict)
    payload: tuple[str, ...] = ()


def live_config(
    fleet: Fleet, service: Service, overrides: Mapping[str, str] | None = None, present: tuple[str, ...] = ()
) -> RenderedService:
    """The service rendered as it runs here: ``overrides`` are variables this machine supplies, ``present``
    files that exist here besides the declared payload."""
    config = load_service(fleet, service)
    if not overrides:
        return config
    rendered = render(fleet, service, overrides=dict(overrides), payload=(*service.payload, *present))
    return replace(
        config,
        rendered=rendered,
        llama=parse_llama_server(rendered.argv, rendered.env) if config.llama is not None else None,
        vllm=parse_vllm(rendered.argv) if config.vllm is not None else None,
        _where_cache={},
    )


def declared_port(config: RenderedService) -> int:
    """The port the service's files say its engine listens on: the rendered ``--port``, else fleet.toml's."""
    if config.llama is not None:
        return config.llama.port
    if config.vllm is not None and config.vllm.port:
        return config.vllm.port
    return config.service.port


def default_url(fleet: Fleet, config: RenderedService) -> str:
    """Where the service listens: its host's ``address`` (loopback when it binds loopback only: the gate
    then runs on that host). A host without an address is an error: the gate never guesses 127.0.0.1."""
    service = config.service
    listen, port = None, service.port
    if config.llama is not None:
        listen, port = config.llama.host, config.llama.port
    elif config.vllm is not None:
        port = config.vllm.port or service.port
    address = fleet.host_of(service).address
    if address is None:
        raise InputError(
            fleet.path,
            service.line,
            f"services.{service.name}: host {service.host!r} has no address, so the gate cannot tell where "
            f"{service.name} listens; declare hosts.{service.host}.address, or pass --base-url "
            f"{service.name}=URL",
        )
    if listen in LOOPBACK:
        address = "127.0.0.1"
    return f"http://{address}:{port}"


def connect(
    fleet: Fleet,
    service: Service,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    timeout: float = 60.0,
    wait_ready: float = 0.0,
    overrides: Mapping[str, str] | None = None,
    present: tuple[str, ...] = (),
) -> LiveEndpoint:
    """A live endpoint for one service of the fleet. Bad files raise InputError (one line)."""
    if service.state == "undeployed":
        raise InputError(
            fleet.path,
            service.line,
            f'services.{service.name} is state = "undeployed": nothing listens there to check',
        )
    config = live_config(fleet, service, overrides, present)
    contract = derive_contract(config)
    variable = contract.api_key_env or api_key_env or DEFAULT_API_KEY_ENV
    client = Client(base_url or default_url(fleet, config), api_key=os.environ.get(variable), timeout=timeout)
    return LiveEndpoint(
        name=service.name,
        url=client.base_url,
        contract=contract,
        dialect=dialect_for(service.engine),
        client=client,
        config=config,
        rules=tuple(rule_selectors(fleet.rules)),
        rule_thresholds=tuple(rule_thresholds(fleet.rules)),
        timeout=timeout,
        api_key_variable=variable,
        wait_ready=wait_ready,
    )
