"""Timeouts nest inside-out with strict > (B-TO-1..4, INC-45, INC-46)."""

from __future__ import annotations

from fleetgate.checks import chain_seam
from fleetgate.timeouts import ResolvedChain

__all__: list[str] = []


@chain_seam(
    cites=("B-TO-1", "B-TO-2", "B-TO-3", "B-TO-4"),
    summary="each waiter's budget is strictly longer than the budget of what it waits on",
    codes={
        "client-env-unreadable": (
            "a client's env file (fleet.toml `[clients]`) cannot be read as its dialect reads it: each chain that holds the client fails "
            "with the reader's one line (file, line, what was expected); every service is still judged"
        ),
        "budget-not-seconds": "a budget of a chain is unset or not a number of seconds",
        "not-strictly-longer": "a waiter's budget is not strictly longer than what it waits on",
    },
)
def timeouts_nest(resolved: ResolvedChain) -> None:
    cites = resolved.chain.cites
    for budget in resolved.budgets:
        if budget.unreadable:
            owner = budget.name.split(":")[0]
            raise timeouts_nest.fail(
                resolved, "client-env-unreadable",
                where=budget.where, cites=cites,
                observed=f"{owner}'s env file cannot be read as its consumer reads it: {budget.problem}",
                expected=f"{budget.name} read from an env file in the dialect fleet.toml declares for {owner}",
                fix=f"fix that line of {owner}'s env file, or declare the dialect that reads it ([clients.{owner}] dialect)",
            )
    for budget in resolved.budgets:
        if budget.problem is not None:
            raise timeouts_nest.fail(
                resolved, "budget-not-seconds",
                where=budget.where, cites=cites,
                observed=budget.problem,
                expected=f"{budget.name} set to a number of seconds",
                fix=f"set {budget.name.split(':')[-1]} in its env file, or drop it from the chain in fleet.toml",
            )
    for inner, outer in zip(resolved.budgets, resolved.budgets[1:], strict=False):
        assert inner.seconds is not None and outer.seconds is not None
        if not outer.seconds > inner.seconds:
            relation = "equal to" if outer.seconds == inner.seconds else "shorter than"
            raise timeouts_nest.fail(
                resolved, "not-strictly-longer",
                cites=cites,
                where=outer.where if outer.raw is not None else inner.where,
                observed=f"{outer.name} = {outer.seconds:g} s is {relation} {inner.name} = {inner.seconds:g} s",
                expected=f"{outer.name} > {inner.name} (strictly: {resolved.chain.why})",
                fix=(f"equal budgets expire at the same instant, and the outer waiter gives up on work the inner one "
                     f"is still finishing: make {outer.name} at least one round-trip longer than {inner.name}"
                     if outer.raw is not None else
                     f"bring {inner.name} under {outer.seconds:g} s"),
            )
