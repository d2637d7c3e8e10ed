"""Timeout chains: the budgets fleet.toml says nest, resolved to the values the env files give them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetgate.envfile import parse_env_file
from fleetgate.errors import InputError
from fleetgate.fleet import Fleet, TimeoutChain
from fleetgate.render.types import Origin

__all__ = ["Budget", "ResolvedChain", "resolve_chains"]


@dataclass(frozen=True)
class Budget:
    name: str
    seconds: float | None
    raw: str | None
    where: str
    problem: str | None = None
    unreadable: bool = False
    """The budget's env file (a client's) cannot be read as its consumer reads it: ``problem`` is its one line."""


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
    """``service_variables(name)`` gives a service's rendered variables (unit env plus sourced files).

    A client's env file that cannot be read is a finding of the chains that hold it, not an error of the run:
    every service is still judged.
    """
    clients: dict[str, dict[str, Origin] | InputError] = {}

    def client_variables(name: str) -> dict[str, Origin] | InputError:
        if name not in clients:
            client = fleet.clients[name]
            try:
                clients[name] = {n: Origin(n, e.value, e.where, "env_file")
                                 for n, e in parse_env_file(client.env_file, client.dialect).items()}
            except InputError as error:
                clients[name] = error
        return clients[name]

    resolved = []
    for chain in fleet.timeouts:
        budgets = []
        for ref in chain.chain:
            if ref.owner is None:
                budgets.append(Budget(ref.name, ref.seconds, None, f"{fleet.path}:{chain.line}"))
                continue
            assert ref.variable is not None
            if ref.owner in fleet.clients:
                read = client_variables(ref.owner)
                if isinstance(read, InputError):
                    where = f"{read.path}:{read.line}" if read.line else str(read.path)
                    budgets.append(Budget(ref.name, None, None, where, str(read), unreadable=True))
                    continue
                variables = read
                file = fleet.clients[ref.owner].env_file
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
