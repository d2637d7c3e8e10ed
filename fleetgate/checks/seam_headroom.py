"""vLLM starts beside the other engines of its card (issue 32).

vLLM refuses to start when the free memory of a card is below ``--gpu-memory-utilization`` x its total: its GPU worker
compares the two when it initialises the device, before it loads anything (vllm/v1/worker/gpu_worker.py,
``init_device``: "ValueError: Free memory on device cuda:0 (12.38/287.69 GiB) on startup is less than desired GPU
memory utilization (0.92, 264.67 GiB)", as users' logs quote it). So on a
card that another engine of the fleet also uses, vLLM starts only if that engine leaves it ``utilization x total``:

- two vLLM services on one card: their fractions must sum to at most 1, or the one that starts second refuses
  whatever the model (the first holds its fraction from start to stop);
- vLLM beside llama-server: what llama-server holds on the card (its ledger: weights, KV, compute) must leave
  vLLM's fraction free, or vLLM refuses when llama-server got there first (and llama-server runs out of memory when
  vLLM did).

Which cards a service uses is read from how it starts (``fleetgate.visibility.engine_cards``: a compose GPU grant, a
``docker run --gpus``/``--device``, a Kubernetes limit, narrowed by the visibility variables); vLLM's are the first
tensor x pipeline parallel ones of what it sees, llama-server's its ``--device`` list named as it names what it sees,
and what a llama-server holds there is its ledger on those cards alone. Kubernetes' device plugin gives one card to
one container, so pods that both ask for a GPU through ``resources`` share none, unless the card is shared:
``NVIDIA_VISIBLE_DEVICES=all`` in a pod (NVIDIA's runtime shows it every card of its node), or a time-slicing config
of NVIDIA's device plugin in the repository (replicas of one card go to several pods, with no memory isolation:
NVIDIA's GPU Operator docs, "Time-Slicing GPUs in Kubernetes"). Beside a service that takes the node's cards another
way, which card the plugin gives a pod on a node of several cards is its own: not judged, naming the pin. An MPS
config limits each replica's memory, which is not modelled: not judged. A pod that names no node (no ``nodeSelector``,
``nodeName`` or node affinity) in a fleet of several hosts may run on any of them: not judged, naming what to declare.
Services of one host run at once unless ``exclusive_with`` says they never do; a rollback or undeployed service does
not run.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetgate.checks import NOT_JUDGED, NotApplicable, NotJudged, fleet_seam
from fleetgate.checks._common import profile_missing
from fleetgate.errors import InputError
from fleetgate.fleet import GIB, Device, Fleet, Service
from fleetgate.ledger.service import service_ledger
from fleetgate.render.rendered import RenderedService, attempt_of
from fleetgate.render.start import Kubernetes
from fleetgate.visibility import EngineCards, engine_cards

__all__ = ["cards_of"]


@dataclass(frozen=True)
class _Cards:
    cards: tuple[Device, ...]
    how: str
    plugin: bool = False
    """Granted by Kubernetes' device plugin, which gives a card to one container only."""
    unresolved: str | None = None
    """Why the cards cannot be told (fleetgate.visibility): the pair is not judged."""
    mps: str | None = None
    """A Kubernetes grant shared through the device plugin's MPS (each replica's memory limited): how."""
    unplaced: str | None = None
    """A pod that names no node, in a fleet of several hosts: which one it runs on is the scheduler's."""


def cards_of(config: RenderedService) -> _Cards:
    """The cards a rendered service's engine uses, by how it starts (fleetgate.visibility.engine_cards)."""
    seen = engine_cards(config)
    start = config.rendered.start
    pod = start.read if isinstance(start, Kubernetes) else None
    if pod is None:
        return _Cards(_engine_share(config, seen), seen.how, seen.plugin, seen.unresolved)
    shared = pod.shared
    unplaced = (f"{pod.name} names no node (no nodeSelector, nodeName or node affinity) and the fleet has "
                f"{len(config.fleet.hosts)} hosts: pin it to {config.host.name} with a nodeSelector"
                if not pod.placed and len(config.fleet.hosts) > 1 else None)
    return _Cards(_engine_share(config, seen), seen.how, seen.plugin, seen.unresolved,
                  mps=f"{shared.how} ({shared.where})" if shared is not None and shared.mps else None,
                  unplaced=unplaced)


def _engine_share(config: RenderedService, seen: EngineCards) -> tuple[Device, ...]:
    """Of the cards an engine sees, those it loads onto: vLLM's first TP x PP ranks; llama-server's ``--device``
    list (named as the engine names what it sees), or every card it sees unless ``-ngl 0`` keeps the model on the
    host."""
    cards = tuple(d for _, d in seen.cards)
    if config.vllm is not None:
        pp_use = config.vllm.use("pipeline_parallel_size")
        pp = int(pp_use.value) if pp_use is not None and pp_use.value and pp_use.value.isdigit() else 1
        return cards[:max(1, config.vllm.tensor_parallel_size) * max(1, pp)]
    if config.llama is not None:
        if config.llama.n_gpu_layers.strip() == "0":
            return ()
        if config.llama.devices == ("none",):
            return ()
        if config.llama.devices:
            named = (seen.device(n) for n in config.llama.devices)
            return tuple(d for d in named if d is not None)
    return cards


def _config(fleet: Fleet, service: Service) -> RenderedService | None:
    """The run's render of a neighbour (rendered now where the run made none); None where it does not render."""
    try:
        return attempt_of(fleet, service).config
    except InputError:  # fleet.toml itself: every other seam says it
        return None


def _running(fleet: Fleet) -> dict[str, list[Service]]:
    hosts: dict[str, list[Service]] = {}
    for service in fleet.services.values():
        if service.state == "active":
            hosts.setdefault(service.host, []).append(service)
    return hosts


def _pairs(fleet: Fleet) -> list[tuple[Service, Service]]:
    """(a vLLM service, another service of its host that can run beside it)."""
    pairs = []
    for services in _running(fleet).values():
        for vllm in (s for s in services if s.engine == "vllm"):
            for other in services:
                if other is vllm or other.name in vllm.exclusive_with or vllm.name in other.exclusive_with:
                    continue
                pairs.append((vllm, other))
    return pairs


def _alone(fleet: Fleet) -> str | None:
    if _pairs(fleet):
        return None
    return (f"no vLLM service of {fleet.name} runs beside another service of its host (services of one host run at "
            "once unless exclusive_with says otherwise): no card is shared with vLLM")


def _held(other: RenderedService, card: Device) -> int | None:
    """What a llama-server service holds on a card (its ledger), None without a profile."""
    if other.profile is None:
        return None
    try:
        ledger = service_ledger(other)
    except (KeyError, ValueError):
        raise NotApplicable(f"{other.name}'s ledger cannot place it on {other.host.name}'s cards: see "
                            f"card-floor[{other.name}]") from None
    return next((device.total for device in ledger.cards if device.card.host_name == card.name), 0)


@fleet_seam(
    cites=(),
    summary="vLLM's --gpu-memory-utilization is free on each card it shares with another engine of the fleet, so it "
            "starts whichever engine came first",
    requires=_alone,
    codes={
        "fractions-over-card": (
            "two vLLM services share a card and their `--gpu-memory-utilization` sum past 1: the one that starts "
            "second refuses (free memory below its fraction of the card)"
        ),
        "beside-engine": (
            "vLLM shares a card with a llama-server whose ledger there leaves less free than vLLM's "
            "`--gpu-memory-utilization` x the card: vLLM refuses to start when llama-server got there first"
        ),
    },
)
def vllm_start_headroom(fleet: Fleet) -> None:
    unjudged: list[str] = []
    for vllm_service, other_service in _pairs(fleet):
        vllm = _config(fleet, vllm_service)
        other = _config(fleet, other_service)
        if vllm is None or other is None or vllm.vllm is None:
            name = vllm_service.name if vllm is None else other_service.name
            unjudged.append(f"{name} did not render: see serve-script-renders[{name}]")
            continue
        mine, theirs = cards_of(vllm), cards_of(other)
        if mine.unresolved or theirs.unresolved:
            unresolved = mine if mine.unresolved else theirs
            name = vllm_service.name if mine.unresolved else other_service.name
            unjudged.append(f"which cards {name} uses: {(unresolved.unresolved or '').removeprefix(NOT_JUDGED)}")
            continue
        if mine.plugin and theirs.plugin:
            continue  # the device plugin gives each container its own cards
        picked = next((c for c in (mine, theirs) if c.plugin), None)
        if (picked is not None and mine.cards and theirs.cards
                and len(picked.cards) < len(vllm.host.cards)):
            # the plugin knows nothing of a card another container takes by NVIDIA_VISIBLE_DEVICES or a host process
            plugin_name, beside = ((vllm_service.name, other_service.name) if picked is mine
                                   else (other_service.name, vllm_service.name))
            unjudged.append(f"the device plugin picks which of {vllm.host.name}'s {len(vllm.host.cards)} cards "
                            f"{plugin_name} gets, and {beside} uses the node's cards another way: pin the pod's card "
                            "(NVIDIA_VISIBLE_DEVICES=INDEX in its env, or a node of its own declared as its own host)")
            continue
        # each said once, whichever of the two services the pair starts from
        placement = [c.unplaced for c in (mine, theirs) if c.unplaced]
        if placement:
            unjudged += [f"which node shares a card is the scheduler's: {p}" for p in placement]
            continue
        shared_mps = sorted(c.mps for c in (mine, theirs) if c.mps)
        if shared_mps:
            unjudged.append(f"{shared_mps[0]}: MPS limits each replica's memory, which fleetgate does not model, so "
                            f"whether {' and '.join(sorted((vllm_service.name, other_service.name)))} start beside "
                            "each other is not judged")
            continue
        shared = [card for card in mine.cards if card in theirs.cards]
        if not shared:
            continue
        fraction = vllm.vllm.gpu_memory_utilization
        where = vllm.where_flag(vllm.vllm.use("gpu_memory_utilization"))
        for card in shared:
            total = card.vram_bytes
            if other.vllm is not None:
                theirs_fraction = other.vllm.gpu_memory_utilization
                if fraction + theirs_fraction <= 1 + 1e-9:
                    continue
                raise vllm_start_headroom.fail(
                    fleet, "fractions-over-card",
                    where=where,
                    observed=(f"{vllm_service.name} (--gpu-memory-utilization {fraction:g}) and {other_service.name} "
                              f"(--gpu-memory-utilization {theirs_fraction:g}) both use {card.name} of "
                              f"{vllm_service.host}: {fraction + theirs_fraction:g} of the card"),
                    details=[f"{vllm_service.name}: {mine.how}", f"{other_service.name}: {theirs.how}"],
                    expected=(f"fractions that sum to 1 or less on a shared card: the one that starts second needs "
                              f"its fraction of {total / GIB:.2f} GiB free, and vLLM refuses to start below it"),
                    fix=("lower the fractions so they sum to 1 or less, give each service its own card (device_ids, "
                         "CUDA_VISIBLE_DEVICES), or declare exclusive_with if they never run together"),
                )
            if other.llama is None:
                unjudged.append(f"{other_service.name} runs {other_service.engine} on {card.name} beside "
                                f"{vllm_service.name}, and fleetgate has no ledger for it: declare "
                                f"services.{other_service.name}.exclusive_with if they never run together")
                continue
            held = _held(other, card)
            if held is None:
                unjudged.append(profile_missing(other).removeprefix(NOT_JUDGED))
                continue
            free = total - held
            if free >= fraction * total:
                continue
            raise vllm_start_headroom.fail(
                fleet, "beside-engine",
                where=where,
                observed=(f"{other_service.name} (llama.cpp) holds {held / GIB:.2f} GiB of {card.name} "
                          f"({total / GIB:.2f} GiB), leaving {free / GIB:.2f} GiB; {vllm_service.name} asks "
                          f"--gpu-memory-utilization {fraction:g} = {fraction * total / GIB:.2f} GiB free at start"),
                details=[f"{vllm_service.name}: {mine.how}", f"{other_service.name}: {theirs.how}"],
                expected=(f"at most {(1 - held / total):.3f} for vLLM's fraction beside {other_service.name}, or the "
                          "two on separate cards"),
                fix=(f"lower --gpu-memory-utilization to {max(0.0, (free / total) - 0.005):.2f} or less, give each "
                     "service its own card, or declare exclusive_with if they never run together"),
            )
    if unjudged:
        raise NotJudged("; ".join(dict.fromkeys(unjudged)))
