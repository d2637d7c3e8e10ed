"""Co-residence: services that can hold one card at the same time are summed against it (issue 18, item 4).

What can run at once on a host:

- the models of one llama-swap config, as its groups (or matrix) let llama-swap keep them loaded together
  (``fleetgate.sources.llama_swap.SwapConfig.residencies``): all members of a ``swap: false`` group, one member of
  each persistent or non-exclusive group, and one of the exclusive groups;
- the models of one llama.cpp router preset, any ``--models-max`` of them (fleet.toml's ``models_max``, default 4);
- every other active service of the host (a unit, a script, another llama-swap), unless fleet.toml says two
  services never run together (``exclusive_with``).

Each service's share of a card is its ledger there: llama.cpp's (``fleetgate.ledger.service.service_ledger``: weights, KV,
compute, ...), or vLLM's budget (``--gpu-memory-utilization`` x the card, on each of its first TP x PP cards: what
vLLM claims at start). The check fails when some state of two or more services leaves a card less than the host's
``card_floor_gib`` (0 when undeclared); one service alone over a card is card-floor's finding, not this one's.

Kubernetes' device plugin gives a card to one container only: pods granted their cards by it (``nvidia.com/gpu: 1``,
no time-slicing, no ``NVIDIA_VISIBLE_DEVICES`` over it) share none while the node has a card for each, so they are not
summed against one card. Which card each gets is the plugin's: beside a service that uses the node's cards another way
(a host process, a pod that sets ``NVIDIA_VISIBLE_DEVICES``), the sum on a node of several cards is not judged. Pods
that ask for more cards together than the node has cannot all run, and are summed as before.

Host RAM is summed the same way: what each llama.cpp service's ledger books on the host (the weights it keeps there
at ``-ngl 0``, ``--cpu-moe``/``-ot`` experts, a host with no card, KV of layers left on the host, the mapped token
embeddings, host compute) must fit the host's ``ram_gib`` together, so a router whose ``--models-max`` largest
host-kept presets exceed the host fails (the kernel's OOM killer, or swap, takes them). vLLM's host memory (swap
space, ``--cpu-offload-gb``) is not booked: it adds nothing to the sum, which can only miss, never invent a finding.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from fleetgate.checks import NotApplicable, NotJudged, fleet_seam
from fleetgate.errors import InputError
from fleetgate.fleet import GIB, Device, Fleet, Host, Service
from fleetgate.ledger.service import service_ledger
from fleetgate.render.rendered import attempt_of
from fleetgate.render.start import Kubernetes
from fleetgate.render.types import RenderRefused
from fleetgate.sources.llama_swap import read_config
from fleetgate.sources.router_preset import DEFAULT_MODELS_MAX, MAX_RESIDENCIES, read_preset
from fleetgate.visibility import engine_cards

__all__ = ["co_resident_states"]

CO = "co-residence-fits"
_MAX_STATES = 20000


@dataclass(frozen=True)
class _HostStates:
    host: Host
    states: tuple[frozenset[str], ...]
    """Every set of two or more services (or undeclared llama-swap models, as ``MODEL (FILE)``) that can run at once."""
    where: Mapping[str, str]
    """Where each member's co-residence is decided: its llama-swap group, else its fleet.toml entry."""


def _choices(fleet: Fleet, services: list[Service]) -> tuple[list[tuple[frozenset[str], ...]], dict[str, str]]:
    choices: list[tuple[frozenset[str], ...]] = []
    where: dict[str, str] = {}
    configs: dict[object, list[Service]] = {}
    presets: dict[object, list[Service]] = {}
    for service in services:
        if service.models_preset is not None:
            presets.setdefault(service.models_preset, []).append(service)
        elif service.llama_swap is None:
            choices.append((frozenset({service.name}),))
            where[service.name] = fleet.where("services", service.name)
        else:
            configs.setdefault(service.llama_swap, []).append(service)
    for members in configs.values():
        assert members[0].llama_swap is not None
        try:
            config = read_config(members[0].llama_swap, fleet.root, members[0].ansible_vars)
        except InputError as error:
            raise NotApplicable(f"the llama-swap config of {members[0].name} cannot be read ({error}): see "
                                f"serve-script-renders[{members[0].name}]") from None
        named = {s.llama_swap_model or s.name: s.name for s in members}
        for model in config.models:
            label = named.get(model, f"{model} ({config.path.name})")
            group = next((g for g in config.groups if model in g.members), None)
            where[label] = f"{config.path}:{group.line}" if group is not None and group.line else config.where(model)
        choices += [tuple(frozenset(named.get(m, f"{m} ({config.path.name})") for m in option) for option in choice)
                    for choice in config.residencies()]
    for members in presets.values():
        choices += _preset_choices(members, where)
    return choices, where


def _preset_choices(members: list[Service], where: dict[str, str]) -> list[tuple[frozenset[str], ...]]:
    """A router preset's models as the router keeps them loaded: any ``--models-max`` of them at once."""
    assert members[0].models_preset is not None
    try:
        preset = read_preset(members[0].models_preset)
    except InputError as error:
        raise NotApplicable(f"the router preset of {members[0].name} cannot be read ({error}): see "
                            f"serve-script-renders[{members[0].name}]") from None
    named = {s.preset_model or s.name: s.name for s in members}
    declared = {s.models_max for s in members if s.models_max is not None}  # one value: fleet.py refuses two
    models_max = declared.pop() if declared else DEFAULT_MODELS_MAX
    # counted before they are listed: any 4 of 200 models are 64 million sets
    count = preset.residency_count(models_max)
    if count >= _MAX_STATES or count > MAX_RESIDENCIES:  # the host's product counts each choice plus "none"
        raise NotApplicable(f"the router of {preset.path.name} can keep any {models_max} of its {len(preset.sections)} "
                            f"models loaded: more than the {_MAX_STATES} combinations this check enumerates: declare a "
                            "smaller models_max (the router's --models-max) for its services")
    for model in preset.sections:
        where[named.get(model, f"{model} ({preset.path.name})")] = (
            f"{preset.where(model)} (the router keeps up to {models_max} models loaded: --models-max)" if models_max > 0
            else f"{preset.where(model)} (--models-max {models_max}: the router keeps every model loaded)")
    return [tuple(frozenset(named.get(m, f"{m} ({preset.path.name})") for m in option) for option in choice)
            for choice in preset.residencies(models_max)]


def co_resident_states(fleet: Fleet) -> list[_HostStates]:
    """Per host, the sets of two or more active services that can run at the same time."""
    found = []
    for host in fleet.hosts.values():
        services = [s for s in fleet.services.values() if s.host == host.name and s.state == "active"]
        if not services:
            continue
        choices, where = _choices(fleet, services)
        size = 1
        for choice in choices:
            size *= len(choice) + 1
        if size > _MAX_STATES:
            raise NotApplicable(f"{host.name}'s services can be loaded in {size} combinations, more than the "
                                f"{_MAX_STATES} this check enumerates: declare exclusive_with for services that never "
                                "run together")
        apart = {frozenset({s.name, other}) for s in services for other in s.exclusive_with}
        states: list[frozenset[str]] = []
        for combination in itertools.product(*((frozenset(), *choice) for choice in choices)):
            state = frozenset().union(*combination)
            if len(state) < 2 or any(pair <= state for pair in apart):
                continue
            if not any(state <= other for other in states):
                states = [other for other in states if not other <= state] + [state]
        if states:
            found.append(_HostStates(host, tuple(states), where))
    return found


def _nothing_shared(fleet: Fleet) -> str | None:
    try:
        if co_resident_states(fleet):
            return None
    except NotApplicable as reason:
        return str(reason)
    return (f"no two active services of {fleet.name} can run on one host at once: nothing shares a card (services of "
            "one host are co-resident unless exclusive_with says they never run together)")


HOST_RAM = "host RAM"
"""The key of a service's share of its host's RAM among its cards' in ``_usage``."""


def _usage(fleet: Fleet, host: Host, name: str) -> dict[str, int]:
    """What one service holds on each card of its host, by card name, and on the host's RAM (``HOST_RAM``)."""
    try:
        # the run's render of it, when the run has made one
        config = attempt_of(fleet, fleet.services[name]).config
    except (RenderRefused, InputError):
        config = None
    if config is None:
        raise NotApplicable(f"{name} did not render: see serve-script-renders[{name}]") from None
    if config.vllm is not None:
        pp_use = config.vllm.use("pipeline_parallel_size")
        pp = int(pp_use.value) if pp_use is not None and pp_use.value and pp_use.value.isdigit() else 1
        ranks = max(1, config.vllm.tensor_parallel_size) * max(1, pp)
        seen = engine_cards(config)
        if seen.unresolved:
            raise NotApplicable(f"which cards {name} uses: {seen.unresolved}")
        # its ranks are the first cards it is shown, not the host's first
        return {card.name: int(config.vllm.gpu_memory_utilization * card.vram_bytes)
                for _, card in seen.cards[:ranks]}
    if config.llama is None:
        raise NotApplicable(f"{name} runs {config.service.engine}, which fleetgate has no ledger for: declare "
                            f"services.{name}.exclusive_with for the services it never runs beside")
    if config.profile is None:
        raise NotApplicable(f"{name} can run beside other services of {host.name} and declares no profile: declare "
                            f"services.{name}.profile (`fleetgate profile MODEL.gguf`) so its share of the card is known")
    try:
        ledger = service_ledger(config)
    except (KeyError, ValueError):
        raise NotApplicable(f"{name}'s ledger cannot place it on {host.name}'s cards: see card-floor[{name}]") from None
    return {**{device.card.host_name: device.total for device in ledger.cards}, HOST_RAM: ledger.host.total}


def _exclusive(fleet: Fleet, name: str) -> int | None:
    """How many cards Kubernetes' device plugin gives a service's container for itself alone; None where its cards
    are not an exclusive plugin grant (a host process, a shared or time-sliced card, NVIDIA_VISIBLE_DEVICES)."""
    config = attempt_of(fleet, fleet.services[name]).config
    start = config.rendered.start if config is not None else None
    pod = start.read if isinstance(start, Kubernetes) else None
    if config is None or pod is None or pod.gpus is None or pod.gpus.indices is None:
        return None
    return len(pod.gpus.indices) if engine_cards(config).plugin else None


def _on_card(fleet: Fleet, found: _HostStates, state: frozenset[str], usage: dict[str, dict[str, int]],
             card: Device) -> tuple[str, ...]:
    """What a state of co-resident services holds on one card: pods of the device plugin's exclusive grants hold
    cards of their own while the node has one for each, and are summed with nobody. The members summed."""
    exclusive = {n: _exclusive(fleet, n) for n in state}
    plugin = {n: c for n, c in exclusive.items() if c is not None}
    others = [n for n in state if n not in plugin]
    if not plugin or len(found.host.cards) < 2 or sum(plugin.values()) > len(found.host.cards):
        return tuple(state)
    beside = [n for n in others if any(k != HOST_RAM and v for k, v in usage[n].items())]
    if beside:
        raise NotJudged(f"the device plugin picks which of {found.host.name}'s {len(found.host.cards)} cards "
                        f"{', '.join(sorted(plugin))} get{'s' if len(plugin) == 1 else ''}, and {', '.join(beside)} "
                        "uses the node's cards another way: pin the pod's card (NVIDIA_VISIBLE_DEVICES=INDEX in its "
                        "env, or a node of its own declared as its own host), or declare exclusive_with")
    return tuple(others) if len(others) > 1 else ()  # one alone over its card is card-floor's finding


@fleet_seam(
    cites=(),
    summary="services that can hold one card at once (llama-swap groups that are not exclusive, two units on one "
               "host) fit it together",
    requires=_nothing_shared,
    codes={
        "over-card": (
            "services that can run at once on one host (llama-swap groups that keep models loaded together, models a llama.cpp router "
            "keeps loaded under `--models-max`, two services of one host not declared `exclusive_with`) do not fit a card together, "
            "leaving its floor (docs/sources.md, \"Co-residence\")"
        ),
        "over-ram": (
            "services that can run at once on one host (the `--models-max` largest presets of a llama.cpp router among "
            "them) book more host RAM in their ledgers (weights kept on the host, host KV, mapped embeddings) than "
            "the host declares"
        ),
    },
)
def co_residence_fits(fleet: Fleet) -> None:
    over: list[tuple[int, _HostStates, Device, list[str], dict[str, dict[str, int]]]] = []
    over_ram: tuple[_HostStates, list[str], dict[str, dict[str, int]]] | None = None
    for found in co_resident_states(fleet):
        undeclared = sorted({m for state in found.states for m in state if m not in fleet.services})
        if undeclared:
            raise NotApplicable(f"llama-swap (or the router) can load {', '.join(undeclared)} beside services of "
                                f"{found.host.name}, and no service declares them: declare a service with "
                                "llama_swap_model = \"MODEL\" (preset_model = \"NAME\" for a router preset) and its "
                                "profile for each")
        usage: dict[str, dict[str, int]] = {}
        unknown: list[str] = []
        for name in sorted(set().union(*found.states)):
            try:
                usage[name] = _usage(fleet, found.host, name)
            except NotApplicable as reason:
                unknown.append(str(reason))
        if unknown:
            raise NotApplicable("; ".join(unknown))
        floor = found.host.card_floor_bytes or 0
        for card in found.host.cards:
            summed = [_on_card(fleet, found, state, usage, card) for state in found.states]
            counted = max(summed, key=lambda s: sum(usage[n].get(card.name, 0) for n in s))
            total = sum(usage[n].get(card.name, 0) for n in counted)
            if card.vram_bytes - total < floor:
                members = sorted(counted, key=lambda n: (-usage[n].get(card.name, 0), n))
                over.append((total - card.vram_bytes + floor, found, card, members, usage))
        ram = found.host.ram_bytes
        state = max(found.states, key=lambda s: sum(usage[n].get(HOST_RAM, 0) for n in s))
        held = sum(usage[n].get(HOST_RAM, 0) for n in state)
        if ram and held > ram and not over_ram:
            over_ram = (found, sorted(state, key=lambda n: (-usage[n].get(HOST_RAM, 0), n)), usage)
    if not over:
        if over_ram is not None:
            _over_ram(fleet, *over_ram)
        return
    _, found, card, members, usage = max(over, key=lambda o: o[0])
    floor = found.host.card_floor_bytes or 0
    total = sum(usage[n].get(card.name, 0) for n in members)
    raise co_residence_fits.fail(
        fleet, "over-card",
        where=found.where[members[0]],
        observed=(f"{' + '.join(members)} can run at once on {found.host.name}'s {card.name}: {total / GIB:.2f} GiB of "
                  f"{card.vram_bytes / GIB:.2f} GiB"),
        details=[*(f"{name}: {usage[name].get(card.name, 0) / GIB:.2f} GiB on {card.name} ({found.where[name]})"
                   for name in members),
                 *(f"{o[1].host.name}'s {o[2].name} is {o[0] / GIB:.2f} GiB short too" for o in over
                   if (o[1].host.name, o[2].name) != (found.host.name, card.name))],
        expected=f"their sum within {card.name}'s {card.vram_bytes / GIB:.2f} GiB, leaving the floor of {floor / GIB:.2f} GiB",
        fix=(("make the llama-swap group swap (swap: true) or exclusive, so llama-swap unloads one before loading the "
              "other; or shrink a context; " if any(fleet.services[n].llama_swap is not None for n in members) else
              "start the router with a smaller --models-max (and declare it: models_max), so it unloads one before "
              "loading another; or shrink a context; "
              if any(fleet.services[n].models_preset is not None for n in members) else
              "shrink a context or move one to another card; ")
             + "for services that never run together, declare exclusive_with in fleet.toml"),
    )


def _over_ram(fleet: Fleet, found: _HostStates, members: list[str], usage: dict[str, dict[str, int]]) -> None:
    __tracebackhide__ = True
    ram = found.host.ram_bytes
    held = sum(usage[n].get(HOST_RAM, 0) for n in members)
    preset = any(fleet.services[n].models_preset is not None for n in members)
    raise co_residence_fits.fail(
        fleet, "over-ram",
        where=found.where[members[0]],
        observed=(f"{' + '.join(members)} can run at once on {found.host.name}: {held / GIB:.2f} GiB of host RAM "
                  f"booked, and the host has {ram / GIB:.2f} GiB"),
        details=[f"{name}: {usage[name].get(HOST_RAM, 0) / GIB:.2f} GiB of host RAM ({found.where[name]})"
                 for name in members],
        expected=f"their host bookings within {found.host.name}'s {ram / GIB:.2f} GiB (hosts.{found.host.name}.ram_gib)",
        fix=(("start the router with a smaller --models-max (and declare it: models_max), so it unloads one before "
              "loading another; " if preset else "")
             + "offload more layers to the cards (-ngl), shrink a context, or declare exclusive_with for services "
               "that never run together"),
    )
