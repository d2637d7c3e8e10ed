"""--parallel divides the context; the per-slot window stays inside the trained window (B.5).

An engine fleetgate has no argv model for (halogen, as frank-dragoon runs it) names in fleet.toml the flags that
give its slots and pool (``shape_flags``); ``slots-divide-pool`` holds that shape to the contract the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleetgate.checks import service_seam
from fleetgate.checks._common import llama_of, no_profile
from fleetgate.engines.llamacpp import context_shape
from fleetgate.policies import policy_on
from fleetgate.render.rendered import RenderedService

__all__ = ["declared_shape"]


def _serves_a_model(config: RenderedService) -> str | None:
    """A router (``--models-preset`` and no ``-m``) loads no model itself: each preset section is a llama-server of
    its own with its own ``--ctx-size`` (issue 32: a router declared by hand failed ``no-ctx-size``)."""
    llama = llama_of(config)
    preset = llama.use("models_preset")
    if preset is not None and not llama.model:
        return (f"{config.name} is a llama.cpp router (--models-preset {preset.value}): it loads no model and has "
                "no context of its own; declare each preset section as a service (models_preset, preset_model) to "
                "judge its --ctx-size")
    return None


@service_seam(
    policy_codes={"slot-padding": "slot-padding"},
    cites=("B-CTX-1", "B-CTX-5", "INC-07"),
    summary="--ctx-size divides exactly into --parallel slots, and each slot is the window clients are told",
    requires=_serves_a_model,
    engines=("llama.cpp",),
    codes={
        "no-ctx-size": "no `--ctx-size`: the pool is the GGUF's trained context",
        "slot-padding": "`--ctx-size` is not slots x a multiple of 256: llama.cpp pads it (policy `slot-padding`)",
        "fewer-slots-than-clients": "fewer slots than the contract's `slots` (conversations run at once, INC-07)",
        "slot-not-client-window": "the per-slot window is not the contract's `context_window`",
    },
)
def slots_divide_context(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    n_ctx_train = config.profile.n_ctx_train if config.profile else None
    ctx_use = llama.use("ctx_size")
    where = config.where_flag(ctx_use)
    if llama.ctx_size == 0:
        raise slots_divide_context.fail(
            config, "no-ctx-size",
            where=str(config.rendered.script),
            observed="no --ctx-size: the pool is whatever the GGUF's trained context is",
            expected="an explicit --ctx-size, so the pool and the slot window are the fleet's decision",
            fix="pass --ctx-size (slots x per-slot window) from the env file",
        )
    shape = context_shape(llama, n_ctx_train)
    assert shape is not None
    if not shape.unified and llama.ctx_size != shape.n_ctx and policy_on(config.fleet, "slot-padding"):
        raise slots_divide_context.fail(
            config, "slot-padding",
            where=where,
            observed=(f"--ctx-size {llama.ctx_size} over {shape.n_seq_max} slots: llama.cpp pads each slot to "
                      f"{shape.n_ctx_seq} and the pool to {shape.n_ctx}"),
            expected="--ctx-size = slots x per-slot window, each slot a multiple of 256",
            fix=f"set the context to {shape.n_ctx_seq * shape.n_seq_max} (or a per-slot window that is a multiple of 256)",
        )
    slots = config.service.contract.slots
    if slots is not None and shape.n_seq_max < slots:
        raise slots_divide_context.fail(
            config, "fewer-slots-than-clients",
            cites=("B-CTX-1", "INC-07"),
            where=config.where_flag(llama.use("parallel") or llama.use("ctx_size")),
            observed=(f"--parallel {llama.n_slots}: {shape.n_seq_max} slot(s) for the {slots} conversations clients "
                      "run at once"),
            expected=f"at least {slots} slots (fleet.toml contract slots): every further conversation queues "
                     "behind a running one (51 s for the second agent loop's first turn)",
            fix=f"--parallel divides the context, trading window for concurrency: --parallel {slots} with "
                f"--ctx-size {slots} x the per-slot window",
        )
    window = config.service.contract.context_window
    if window is not None and shape.n_ctx_seq != window:
        raise slots_divide_context.fail(
            config, "slot-not-client-window",
            where=where,
            observed=(f"each of {shape.n_seq_max} slots holds {shape.n_ctx_seq} tokens "
                      f"(--ctx-size {llama.ctx_size} / --parallel {llama.n_slots}"
                      f"{', unified KV' if shape.unified else ''})"),
            expected=f"{window} per slot: the context_window clients are told (fleet.toml contract), "
                     "beyond which a prompt is a hard 400",
            fix=f"--parallel divides the context: set --ctx-size to {window} x {shape.n_seq_max} = "
                f"{window * shape.n_seq_max}, or tell clients {shape.n_ctx_seq}",
        )


def _no_trained_window(config: RenderedService) -> str | None:
    extrapolation = config.service.extrapolation
    if extrapolation is not None and not math.isfinite(extrapolation.max_ratio):
        # The manifest's inf/nan is fleet-numbers-finite's finding; no window can be held to it.
        return (f"services.{config.name}.extrapolation.max_ratio is {extrapolation.max_ratio}, not a ratio "
                "(fleet-numbers-finite reports it): declare the finite ratio the extrapolation was measured to")
    return no_profile(config, "n_ctx_train")


def rope_extension(config: RenderedService) -> tuple[float, str]:
    """How far the argv's RoPE scaling stretches the trained window, and how that was read (src/llama-context.cpp,
    llama_context: ``rope_freq_scale`` is ``--rope-freq-scale`` or 1 / ``--rope-scale``; a scaling type of ``none``,
    passed or the GGUF's own, never scales). 1.0 when nothing stretches it."""
    llama, profile = config.llama, config.profile
    assert llama is not None and profile is not None
    kind_use = llama.use("rope_scaling")
    kind = (kind_use.value or "") if kind_use is not None else (profile.rope_scaling or "none")
    scale_use, freq_use = llama.use("rope_scale"), llama.use("rope_freq_scale")
    factor = 1.0
    try:
        if freq_use is not None and freq_use.value:
            factor = 1.0 / float(freq_use.value) if float(freq_use.value) > 0 else 1.0
        elif scale_use is not None and scale_use.value:
            factor = float(scale_use.value)
    except ValueError:
        return 1.0, "no RoPE scaling read (engine-accepts-argv names the value)"
    if kind not in ("linear", "yarn") or not math.isfinite(factor) or factor <= 1.0:
        return 1.0, f"RoPE scaling {kind or 'none'}" + (f" (a factor of {factor:g} unused)" if factor > 1.0 else "")
    return factor, f"RoPE scaling {kind} x {factor:g}"


@service_seam(
    cites=("B-CTX-2", "B-CTX-3", "B-CTX-4"),
    summary="no slot reaches past the model's trained window unless the fleet declares the extrapolation",
    requires=_no_trained_window,
    engines=("llama.cpp",),
    codes={
        "past-trained-window": "a slot reaches past the trained window, undeclared",
    },
)
def slot_within_trained_window(config: RenderedService) -> None:
    llama, profile = config.llama, config.profile
    assert llama is not None and profile is not None and profile.n_ctx_train is not None
    shape = context_shape(llama, profile.n_ctx_train)
    assert shape is not None
    extrapolation = config.service.extrapolation
    stretch, rope = rope_extension(config)
    ratio = max(extrapolation.max_ratio if extrapolation else 1.0, stretch)
    limit = int(profile.n_ctx_train * ratio)
    if shape.n_ctx_seq > limit:
        declared = (f" x the declared {ratio:g} extrapolation ({extrapolation.why})" if extrapolation else "")
        raise slot_within_trained_window.fail(
            config, "past-trained-window",
            where=config.where_flag(llama.use("ctx_size")),
            observed=(f"each slot holds {shape.n_ctx_seq} positions = {shape.n_ctx_seq / profile.n_ctx_train:.2f}x "
                      f"the trained {profile.n_ctx_train} of {profile.name}"
                      f" (the GGUF's rope scaling: {profile.rope_scaling or 'unknown'}; the argv's: {rope})"),
            expected=f"at most {limit} per slot: the trained window{declared}",
            fix=("positions past the trained window extrapolate on the base rope: lower --ctx-size or raise "
                 "--parallel, stretch the rope (--rope-scaling yarn --rope-scale N, where the model takes it), or "
                 "declare [services.NAME.extrapolation] with the ratio and why it is acceptable"),
        )


@dataclass(frozen=True)
class PoolShape:
    slots: int
    pool: int
    slots_where: str
    pool_where: str

    @property
    def per_slot(self) -> int:
        return self.pool // self.slots


def _flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    value = None
    for i, arg in enumerate(argv[1:], start=1):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
    return value


def declared_shape(config: RenderedService) -> PoolShape | None:
    """Slots and pool of an engine read through the flags fleet.toml names (``shape_flags``); None when the
    argv does not give both as positive integers."""
    flags = config.service.shape_flags
    if flags is None:
        return None
    slots, pool = _flag_value(config.rendered.argv, flags.slots), _flag_value(config.rendered.argv, flags.pool)
    if not (slots and pool and slots.isdigit() and pool.isdigit() and int(slots) > 0):
        return None
    return PoolShape(int(slots), int(pool), flags.slots, flags.pool)


def _no_shape_flags(config: RenderedService) -> str | None:
    if config.llama is not None or config.vllm is not None:
        return f"{config.name}'s engine has its own argv model: slots-divide-context and the memory seams hold its shape"
    if config.service.shape_flags is None:
        return (f"{config.name} declares no shape_flags in fleet.toml: name the flags that give its slots and pool "
                "({ slots = \"--slots\", pool = \"--kv-positions\" }) to hold its window to the contract")
    return None


@service_seam(
    cites=("B-CTX-8", "B-CTX-1", "B-CTX-5"),
    summary="an engine without an argv model (halogen): the slots divide its pool exactly, and each slot is the "
               "window clients are told",
    requires=_no_shape_flags,
    engines=("openai",),
    codes={
        "flag-missing": (
            "an engine without an argv model (halogen) whose rendered argv lacks a `shape_flags` flag, or gives it no positive integer"
        ),
        "uneven": "a pool the slots do not divide exactly",
        "slot-not-client-window": "pool / slots other than the contract's `context_window` (B-CTX-8: dragoon's 401,408 = 2 x 200,704)",
    },
)
def slots_divide_pool(config: RenderedService) -> None:
    flags = config.service.shape_flags
    assert flags is not None
    shape = declared_shape(config)
    if shape is None:
        given = {f: _flag_value(config.rendered.argv, f) for f in (flags.slots, flags.pool)}
        raise slots_divide_pool.fail(
            config, "flag-missing",
            where=str(config.rendered.script),
            observed="the rendered argv gives " + ", ".join(f"{f} {v if v is not None else '(absent)'}" for f, v in given.items()),
            expected=f"{flags.slots} and {flags.pool} as positive integers (fleet.toml shape_flags): the engine's "
                     "defaults are not the fleet's decision",
            fix=f"pass {flags.slots} and {flags.pool} from the env file",
        )
    if shape.pool % shape.slots:
        raise slots_divide_pool.fail(
            config, "uneven",
            where=str(config.rendered.script),
            observed=f"{shape.pool_where} {shape.pool} over {shape.slots_where} {shape.slots}: "
                     f"{shape.pool / shape.slots:,.1f} positions per slot",
            expected=f"a pool of slots x per-slot window ({shape.slots} x {shape.per_slot} = {shape.slots * shape.per_slot})",
            fix="set the pool to slots x the window clients are told",
        )
    window = config.service.contract.context_window
    if window is not None and shape.per_slot != window:
        raise slots_divide_pool.fail(
            config, "slot-not-client-window",
            where=str(config.rendered.script),
            observed=(f"each of {shape.slots} slots holds {shape.per_slot} positions ({shape.pool_where} {shape.pool} / "
                      f"{shape.slots_where} {shape.slots})"),
            expected=f"{window} per slot: the context_window clients are told (fleet.toml contract)",
            fix=f"the slots divide the pool: set {shape.pool_where} to {window} x {shape.slots} = {window * shape.slots}, "
                f"or tell clients {shape.per_slot}",
        )
