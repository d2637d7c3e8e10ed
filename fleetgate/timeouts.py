"""Timeout chains: the budgets fleet.toml says nest, resolved to the values the env files give them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetgate.envfile import parse_env_file
from fleetgate.fleet import Fleet, TimeoutChain
from fleetgate.render import Origin

__all__ = ["Budget", "ResolvedChain", "resolve_chains"]


@dataclass(frozen=True)
class Budget:
    name: str
    seconds: float | None
    raw: str | None
    where: str
    problem: str | None = None


@dataclass(frozen=True)
class ResolvedChain:
    chain: TimeoutChain
    budgets: tuple[Budget, ...]
    where: str

    @property
    def name(self) -> str:
        return self.chain.name

    @property
    def ordering(self) -> str:
        return " < ".join(b.name for b in self.budgets)


def resolve_chains(fleet: Fleet, service_variables: Callable[[str], dict[str, Origin]]) -> list[ResolvedChain]:
    """``service_variables(name)`` gives a service's rendered variables (unit env plus sourced files)."""
    resolved = []
    for chain in fleet.timeouts:
        budgets = []
        for ref in chain.chain:
            if ref.owner is None:
                budgets.append(Budget(ref.name, ref.seconds, None, f"{fleet.path}:{chain.line}"))
                continue
            assert ref.variable is not None
            if ref.owner in fleet.clients:
                client = fleet.clients[ref.owner]
                variables = {n: Origin(n, e.value, e.where, "env_file")
                             for n, e in parse_env_file(client.env_file, client.dialect).items()}
                file = client.env_file
            else:
                variables = service_variables(ref.owner)
                file = fleet.services[ref.owner].env_file or fleet.services[ref.owner].serve_script
            origin = variables.get(ref.variable)
            if origin is None:
                budgets.append(Budget(ref.name, None, None, str(file), f"{ref.variable} is not set in {file.name}"))
                continue
            try:
                seconds = float(origin.value)
            except ValueError:
                budgets.append(Budget(ref.name, None, origin.value, origin.where,
                                      f"{ref.variable}={origin.value!r} is not a number of seconds"))
                continue
            budgets.append(Budget(ref.name, seconds, origin.value, origin.where))
        resolved.append(ResolvedChain(chain, tuple(budgets), f"{fleet.path}:{chain.line}"))
    return resolved
