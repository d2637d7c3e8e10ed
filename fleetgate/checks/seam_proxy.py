"""A routing proxy in front of single-card replicas: its routing (B-UN-14; INC-37, INC-38) and the load it is
sized for against a card's KV pool (the capacity law of INC-39, INC-40).

The proxy (``[proxies.NAME]`` in fleet.toml, the retired frank-medium-proxy of S002) is configured by an env file,
read in the dialect its consumer reads it (a Quadlet's ``EnvironmentFile=``: podman, quotes kept):

- ``proxy-routing``: ``ROUTING`` is ``adaptive`` (the proxy's default when unset): only a continuation -- a request
  of more than one message -- is pinned to the replica that served its prefix; everything else spreads by counter.
  ``affinity`` hashes every prefix, so a same-prefix cold burst lands on one card (INC-37: 29.8 s against 18.6 s);
  ``roundrobin`` makes every other turn of a conversation pay a cold prefill. ``AFFINITY_BYTES`` is 4096 (the
  proxy's own window when unset): "the identity of a conversation is its first 4 KiB", and a prefix shorter than
  the window "is indistinguishable from its own tail", so a wider window leaves every conversation under it
  unpinned (INC-38).
- ``proxy-capacity``: on the card that carries the most conversations -- ``ceil(count / replicas)``, whatever the
  placement ("placement can decide *which* card is over, not whether one is") -- each conversation's cached prefix
  and each sequence generating at once draw on the one pool: ``per_card x tokens`` cached plus ``live x tokens``,
  where ``live`` is ``per_card``, or ``LARGE_LIMIT`` when admission holds conversations over ``LARGE_TOKENS`` to
  that many at a time. Over the replica's pool (its boot ledger, ``replica_kv_pool``) the co-tenants evict each
  other turn by turn, and no placement or admission setting changes that: "2 x 50k of cached prefix plus the 50k
  of the sequence currently generating -- 150k against 122,636" (S002).
"""

from __future__ import annotations

import math

from fleetgate.checks import NotApplicable, fleet_seam
from fleetgate.envfile import EnvEntry, parse_env_file
from fleetgate.errors import InputError
from fleetgate.fleet import Fleet, Proxy

__all__ = ["ROUTINGS"]

ROUTING = "proxy-routing"
ROUTINGS = ("adaptive", "roundrobin", "affinity")
"""The proxy's policies (S002): ``adaptive`` is its default."""
AFFINITY_BYTES = 4096
_WHY_NOT = {
    "affinity": "hashes every prefix, fresh ones included: a same-prefix cold burst goes to one card (INC-37: 30.1 s "
                "against 18.6 s by counter)",
    "roundrobin": "pins nothing: every other turn of a conversation lands on the card without its prefix and pays a "
                  "cold prefill (2676 ms against 1095 ms warm)",
}


def _has_proxy(fleet: Fleet) -> str | None:
    if not fleet.proxies:
        return f"{fleet.path.name} declares no [proxies.NAME]: no routing proxy to hold to its routing and capacity"
    return None


def _int(entry: EnvEntry, *, minimum: int) -> int:
    value = entry.value.strip()
    if not value.isdigit() or int(value) < minimum:
        raise InputError(entry.path, entry.line, f"{entry.name}={entry.value!r}; expected a whole number >= {minimum}")
    return int(value)


@fleet_seam(
    policy="routing-proxy",
    cites=("B-UN-14", "INC-37", "INC-38"),
    summary="a routing proxy pins only continuations (ROUTING=adaptive) and knows a conversation by its first 4 KiB "
               "(AFFINITY_BYTES)",
    requires=_has_proxy,
    codes={
        "not-adaptive": (
            "a routing proxy's `ROUTING` other than `adaptive`: `affinity` hashes fresh prefixes and sends a same-prefix burst to one card "
            "(INC-37), `roundrobin` pins no continuation (B-UN-14)"
        ),
        "affinity-window": (
            "`AFFINITY_BYTES` other than 4096: wider, every conversation shorter than the window never pins (INC-38); narrower, "
            "conversations sharing that much prefix are taken for one (B-UN-14)"
        ),
    },
)
def proxy_routing(fleet: Fleet) -> None:
    for proxy in fleet.proxies.values():
        env = parse_env_file(proxy.config, proxy.dialect)
        routing = env.get("ROUTING")
        if routing is not None and routing.value != "adaptive":
            known = routing.value in ROUTINGS
            raise proxy_routing.fail(
                fleet, "not-adaptive",
                where=routing.where,
                cites=("B-UN-14", "INC-37"),
                observed=f"{proxy.name}: ROUTING={routing.value}: " + (_WHY_NOT[routing.value] if known else
                                                        f"not a policy of the proxy ({', '.join(ROUTINGS)})"),
                expected="ROUTING=adaptive: continuations pinned to the replica that holds their prefix, new work spread "
                         "by counter (19.97 s burst, 1095 ms warm turn)",
                fix="set ROUTING=adaptive (or drop the line: it is the proxy's default); roundrobin and affinity are "
                    "there to re-measure the choice, not to serve",
            )
        window = env.get("AFFINITY_BYTES")
        size = _int(window, minimum=1) if window is not None else AFFINITY_BYTES
        if window is not None and size != AFFINITY_BYTES:
            raise proxy_routing.fail(
                fleet, "affinity-window",
                where=window.where,
                cites=("B-UN-14", "INC-38"),
                observed=f"{proxy.name}: AFFINITY_BYTES={window.value}: a conversation is known by its first {size:,} bytes"
                         + ("; one shorter than that cannot be told from its own tail, so its turns hash differently "
                            "and never pin (INC-38)" if size > AFFINITY_BYTES else
                            "; conversations that share that much prefix (a system prompt) are taken for one and pinned "
                            "together"),
                expected=f"AFFINITY_BYTES={AFFINITY_BYTES} (4 KiB), the window the proxy was measured and tested with",
                fix="set AFFINITY_BYTES=4096 (or drop the line: it is the proxy's default)",
            )


def _capacity(proxy: Proxy) -> tuple[int, int, int, int, str, str]:
    """(cards, per card, live, need, how live was counted, where the replicas are named) for one proxy."""
    if proxy.pool_tokens is None or proxy.conversations is None or proxy.conversation_tokens is None:
        raise NotApplicable(f"{proxy.name} declares no replica_kv_pool and conversations in fleet.toml: nothing to hold "
                            "its load against")
    env = parse_env_file(proxy.config, proxy.dialect)
    replicas = env.get("REPLICAS")
    if replicas is None or not replicas.value.split():
        raise NotApplicable(f"{proxy.config.name} names no REPLICAS: the cards the load is spread over are unknown")
    cards = len(replicas.value.split())
    per_card = math.ceil(proxy.conversations / cards)
    live, how = per_card, f"every conversation on the card generating at once ({per_card})"
    large, limit = env.get("LARGE_TOKENS"), env.get("LARGE_LIMIT")
    if large is not None and limit is not None:
        threshold, most = _int(large, minimum=0), _int(limit, minimum=1)
        if proxy.conversation_tokens > threshold and most < per_card:
            live, how = most, f"LARGE_LIMIT={most} ({limit.where}): admission holds requests over {threshold:,} tokens to {most} per card"
    need = (per_card + live) * proxy.conversation_tokens
    return cards, per_card, live, need, how, replicas.where


@fleet_seam(
    policy="routing-proxy",
    cites=("INC-39", "INC-40"),
    summary="the load a routing proxy is sized for -- cached prefixes plus live sequences on the fullest card -- fits "
               "a replica's KV pool, whatever the placement or admission",
    requires=_has_proxy,
    codes={
        "over-pool": (
            "the load a proxy is sized for (`conversations` in fleet.toml), on its fullest card -- cached prefixes plus live sequences, "
            "live held to `LARGE_LIMIT` where admission applies -- exceeds a replica's KV pool (`replica_kv_pool`): no placement or "
            "admission changes the sum (INC-39, INC-40)"
        ),
    },
)
def proxy_capacity(fleet: Fleet) -> None:
    for proxy in fleet.proxies.values():
        len_replicas, per_card, live, need, how, where_replicas = _capacity(proxy)
        tokens = proxy.conversation_tokens
        assert proxy.pool_tokens is not None and proxy.conversations is not None and tokens is not None
        if need > proxy.pool_tokens:
            raise proxy_capacity.fail(
                fleet, "over-pool",
                where=fleet.where("proxies", proxy.name, "conversations"),
                observed=(f"{proxy.name}: {per_card} x {tokens:,} cached + {live} x {tokens:,} live = {need:,} tokens on one card: "
                          f"{proxy.conversations} conversations over the {len_replicas} replicas of {where_replicas} put "
                          f"{per_card} on one card whatever the placement; live counted as {how}"),
                expected=f"at most {proxy.pool_tokens:,} tokens, the replica's KV pool ({proxy.pool_boot})",
                details=["live sequences and cached prefixes draw on the same pool: over it, the card's co-tenants evict "
                         "each other turn by turn and every evicted turn pays a cold prefill (INC-39, INC-40)"],
                fix="fewer or smaller conversations in flight (context compaction), or another card: neither placement by "
                    "load nor admission of large requests changes the sum",
            )
