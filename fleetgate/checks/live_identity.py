"""Liveness and identity: the endpoint answers, and it serves what the files declare (C.1, C-CAP-1).

Health and the model list cannot see the payload (INC-53: /health 200, /v1/models echoed the alias,
e2e green -- and the process served another model). /props can: the loaded file, the slots, the
per-slot window and the sampler defaults, all compared with the rendered config.
"""

from __future__ import annotations

import math
from typing import Any

from fleetgate.checks import check
from fleetgate.live.client import EndpointError
from fleetgate.live.endpoint import LiveEndpoint

HEALTH = "live-health"
ALIAS = "live-alias"
PAYLOAD = "live-payload"
SLOTS = "live-slots"
SAMPLER = "live-sampler-defaults"


def _has_props(endpoint: LiveEndpoint) -> bool:
    return endpoint.dialect.has_props


@check(
    HEALTH,
    kind="live",
    subject="endpoint",
    cites=("C-L-1", "INC-48"),
    summary="the endpoint answers its health probe with 200 within the bound",
)
def live_health(endpoint: LiveEndpoint) -> None:
    path = endpoint.dialect.health_path
    if path is None:
        path = "/health" if "/health" in endpoint.contract.endpoints else "/v1/models"
    try:
        reply = endpoint.get(path, timeout=min(endpoint.timeout, 10.0))
    except EndpointError as error:
        raise endpoint.unreachable(HEALTH, error, cites=("C-L-1", "INC-48")) from None
    if reply.status != 200:
        loading = reply.status == 503
        raise endpoint.fail(
            HEALTH,
            where=reply.url,
            cites=("C-L-1",),
            observed=reply.brief(),
            expected=f"GET {path} answers 200",
            fix=(
                "the model is still loading: wait for 'model loaded' in the log and run the gate again"
                if loading
                else "read the engine's log: a 5xx health answer means the engine is up but not serving"
            ),
        )
    endpoint.note(f"200 in {reply.elapsed * 1000:.0f} ms")
    endpoint.measure("health_ms", reply.elapsed * 1000)


@check(
    ALIAS,
    kind="live",
    subject="endpoint",
    cites=("C-L-2", "INC-53"),
    summary="/v1/models lists the alias the files declare (clients address the model by it)",
)
def live_alias(endpoint: LiveEndpoint) -> None:
    alias = endpoint.contract.alias
    body = endpoint.get_json(ALIAS, "/v1/models", cites=("C-L-2",))
    served: list[str] = []
    data = body.get("data") if isinstance(body, dict) else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict):
            if isinstance(entry.get("id"), str):
                served.append(entry["id"])
            aliases = entry.get("aliases")
            if isinstance(aliases, list):
                served += [a for a in aliases if isinstance(a, str) and a not in served]
    if alias is None:
        endpoint.note(f"serves {', '.join(served) or 'nothing'} (no alias declared)")
        return
    if alias not in served:
        raise endpoint.fail(
            ALIAS,
            where=endpoint.where_flag("alias") if endpoint.config else endpoint.where_contract("alias"),
            cites=("C-L-2", "INC-53"),
            observed=f"/v1/models lists {', '.join(repr(s) for s in served) or 'no model'}",
            expected=f"{alias!r}, the alias the rendered config passes",
            fix="the running process was not started from these files (a drop-in, a manual start, a stale "
            "unit): "
            "restart the unit and check DropInPaths, then the process argv",
        )
    endpoint.note(f"serves {alias!r}")


def _props(endpoint: LiveEndpoint, check_name: str) -> dict[str, Any]:
    body = endpoint.get_json(check_name, "/props", cites=("C-CAP-1",))
    if not isinstance(body, dict):
        raise endpoint.fail(
            check_name,
            observed=f"/props answered {type(body).__name__}, not an object",
            expected="llama-server's /props document",
            fix="is this llama-server?",
        )
    return body


@check(
    PAYLOAD,
    kind="live",
    subject="endpoint",
    cites=("C-ID-2", "C-L-8", "INC-53", "INC-49"),
    applies=_has_props,
    summary="/props model_path is the payload the rendered config loads (health cannot see the payload)",
)
def live_payload(endpoint: LiveEndpoint) -> None:
    props = _props(endpoint, PAYLOAD)
    loaded = props.get("model_path")
    expected = endpoint.contract.model_path
    if expected is None:
        endpoint.note(f"loaded {loaded} (no --model rendered)")
        return
    if loaded != expected:
        raise endpoint.fail(
            PAYLOAD,
            where=endpoint.where_flag("model"),
            cites=("C-ID-2", "INC-53"),
            observed=f"/props model_path = {loaded!r}",
            expected=f"{expected!r}, the --model the serve script renders",
            fix="the process serves another payload than the files say: check DropInPaths, "
            "/proc/<MainPID>/cmdline, "
            "then restart the unit from the repository's env file",
        )
    endpoint.note(f"loaded {loaded}")


@check(
    SLOTS,
    kind="live",
    subject="endpoint",
    cites=("C-ID-6", "C-CAP-13", "B-CTX-1", "INC-83"),
    applies=_has_props,
    summary="/props total_slots and per-slot n_ctx equal the rendered --parallel and --ctx-size / --parallel",
)
def live_slots(endpoint: LiveEndpoint) -> None:
    props = _props(endpoint, SLOTS)
    contract = endpoint.contract
    slots = props.get("total_slots")
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    problems = []
    if contract.n_slots is not None and slots != contract.n_slots:
        problems.append(f"{slots} slots, not {contract.n_slots}")
    if contract.slot_ctx is not None and n_ctx != contract.slot_ctx:
        problems.append(f"{n_ctx} tokens per slot, not {contract.slot_ctx}")
    if problems:
        raise endpoint.fail(
            SLOTS,
            where=endpoint.where_flag("ctx_size"),
            cites=("C-ID-6", "C-CAP-13"),
            observed=f"/props: {'; '.join(problems)}",
            expected=(
                f"{contract.n_slots} slots of {contract.slot_ctx} tokens (--ctx-size / --parallel as "
                "rendered; "
                f"clients are told {contract.context_window})"
            ),
            fix="the process runs another context shape than the env file: a prompt the clients think "
            "fits is "
            "refused with a hard 400; restart from the env file, or fix the env file and tell clients",
        )
    endpoint.note(f"{slots} slots x {n_ctx} tokens")


def _has_sampler(endpoint: LiveEndpoint) -> bool:
    return endpoint.dialect.has_props and bool(endpoint.contract.sampler)


@check(
    SAMPLER,
    kind="live",
    subject="endpoint",
    cites=("C-CAP-1", "B-UN-8"),
    applies=_has_sampler,
    summary="the sampler defaults a client gets (temperature, top_k, top_p, min_p) are the rendered ones",
)
def live_sampler_defaults(endpoint: LiveEndpoint) -> None:
    props = _props(endpoint, SAMPLER)
    settings = props.get("default_generation_settings")
    params = settings.get("params") if isinstance(settings, dict) else None
    params = params if isinstance(params, dict) else {}
    wrong: list[str] = []
    first_dest = ""
    for key, want in endpoint.contract.sampler.items():
        have = params.get(key)
        # /props reports float32 values (0.2 reads back as 0.20000000298...).
        if not isinstance(have, int | float) or not math.isclose(
            float(have), want, rel_tol=1e-5, abs_tol=1e-6
        ):
            wrong.append(
                f"{key} = {have:.6g}, not {want:g}"
                if isinstance(have, int | float)
                else f"{key} = {have!r}, not {want:g}"
            )
            first_dest = first_dest or ("temp" if key == "temperature" else key)
    if wrong:
        raise endpoint.fail(
            SAMPLER,
            where=endpoint.where_flag(first_dest),
            cites=("C-CAP-1", "B-UN-8"),
            observed="/props default_generation_settings: " + "; ".join(wrong),
            expected=", ".join(f"{k} {v:g}" for k, v in endpoint.contract.sampler.items()) + " (as rendered)",
            fix="clients that send no sampler settings get the process's defaults: restart from the env file",
        )
    endpoint.note(", ".join(f"{k} {v:g}" for k, v in endpoint.contract.sampler.items()))
