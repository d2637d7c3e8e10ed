"""Speculative decoding is wired the way the engine can load it and will actually draft (B.6)."""

from __future__ import annotations

from fleetgate.checks import service_seam
from fleetgate.checks._common import llama_of
from fleetgate.render.rendered import RenderedService

__all__: list[str] = []


# common/speculative.cpp: these types run a draft context; a chain has exactly one draft context.
CONTEXT_TYPES = frozenset({"draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"})
# ... and these build it from a separate draft model (--spec-draft-model); draft-mtp uses the target's own
# nextn layers (common/common.cpp: shares_model = !has_draft).
NEEDS_DRAFT_MODEL = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
BLOCK_DRAFTERS = frozenset({"draft-dflash", "draft-dspark"})


def _no_speculation(config: RenderedService) -> str | None:
    llama = llama_of(config)
    if not (llama.speculative or llama.spec_draft_model is not None):
        return f"{config.name} passes no --spec-type and no --spec-draft-model: nothing speculative to wire"
    return None


@service_seam(
    cites=("B-SP-1", "B-SP-2", "B-SP-3", "B-SP-6", "B-SP-8", "INC-13", "INC-15", "INC-16"),
    summary="one draft context, a draft model only where the type needs one, depth within the drafter's block",
    requires=_no_speculation,
    engines=("llama.cpp",),
    codes={
        "draft-model-without-type": "`--spec-draft-model` without `--spec-type` (INC-16)",
        "chained-draft-contexts": "two context-backed drafter types in one chain",
        "type-without-draft-model": "a drafter type that needs `--spec-draft-model`, without it",
        "draft-model-under-mtp": "`--spec-draft-model` under `draft-mtp`",
        "mtp-without-nextn": "`draft-mtp` on a model without nextn (MTP) layers",
        "depth-past-block": "`--spec-draft-n-max` past the drafter's block",
        "ngram-window": "the ngram-mod window is not the contract's measured one",
    },
)
def speculative_wiring(config: RenderedService) -> None:
    llama = config.llama
    assert llama is not None
    types = [t for t in llama.spec_types if t != "none"]
    type_use = llama.use("spec_type")
    where_types = config.where_flag(type_use)
    model_use = llama.use("spec_draft_model")

    if llama.spec_draft_model is not None and not types:
        raise speculative_wiring.fail(
            config, "draft-model-without-type",
            cites=("INC-16",), where=config.where_flag(model_use),
            observed=f"--spec-draft-model {llama.spec_draft_model} with no --spec-type",
            expected="a --spec-type naming the drafter: speculation is off unless a type is named (default: none)",
            fix="pass --spec-type (draft-dflash, draft-simple, ...) -- a drafter that loads but never drafts costs VRAM for nothing",
        )
    chained = [t for t in types if t in CONTEXT_TYPES]
    if len(chained) > 1:
        raise speculative_wiring.fail(
            config, "chained-draft-contexts",
            cites=("B-SP-2", "INC-13"), where=where_types,
            observed=f"--spec-type {','.join(types)} chains {len(chained)} context-backed drafters ({', '.join(chained)})",
            expected="at most one of draft-simple/eagle3/mtp/dflash/dspark: a chain has ONE draft context",
            fix=("pick one drafter; draftless ngram types may ride beside it. draft-mtp,draft-dflash dies at load with "
                 "'context type MTP requested but model doesn't contain MTP layers'"),
        )
    needs_model = [t for t in types if t in NEEDS_DRAFT_MODEL]
    if needs_model and llama.spec_draft_model is None:
        raise speculative_wiring.fail(
            config, "type-without-draft-model",
            cites=("B-SP-3",), where=where_types,
            observed=f"--spec-type {','.join(types)} without --spec-draft-model",
            expected=f"{needs_model[0]} loads its drafter from --spec-draft-model",
            fix="pass the drafter GGUF in the branch of the serve script that selects this type",
        )
    if "draft-mtp" in types and llama.spec_draft_model is not None:
        raise speculative_wiring.fail(
            config, "draft-model-under-mtp",
            cites=("B-SP-3", "INC-13"), where=config.where_flag(model_use),
            observed=f"--spec-type draft-mtp with --spec-draft-model {llama.spec_draft_model}",
            expected="no --spec-draft-model under draft-mtp: the MTP context runs on the target's own nextn layers",
            fix="pass --spec-draft-model in the block-diffusion (dflash/dspark) branch of the serve script ONLY",
        )
    if "draft-mtp" in types and config.profile is not None:
        nextn = config.profile.raw.get("model", {}).get("nextn_layers")
        if nextn == 0:
            raise speculative_wiring.fail(
                config, "mtp-without-nextn",
                cites=("B-SP-2",), where=where_types,
                observed=f"--spec-type draft-mtp on {config.profile.name}, which has no nextn (MTP) layers",
                expected="a target GGUF that carries its MTP head",
                fix="use a GGUF with the MTP head, or a separate drafter type",
            )
    blocks = [t for t in types if t in BLOCK_DRAFTERS]
    if blocks and config.draft_profile is not None and config.draft_profile.drafter is not None:
        drafter = config.draft_profile.drafter
        if drafter.block_size is not None:
            anchor = bool(config.draft_profile.raw.get("drafter", {}).get("sample_from_anchor", False))
            # common/speculative.cpp: DFlash denoises [id_last, mask x (block_size-1)]; anchor-first DSpark
            # yields a full block. A larger n_max is clamped at load with a warning.
            limit = drafter.block_size if (blocks[0] == "draft-dspark" and anchor) else drafter.block_size - 1
            if llama.spec_draft_n_max > limit:
                raise speculative_wiring.fail(
                    config, "depth-past-block",
                    cites=("B-SP-1", "B-SP-8"),
                    where=config.where_flag(llama.use("spec_draft_n_max")),
                    observed=(f"--spec-draft-n-max {llama.spec_draft_n_max} with {config.draft_profile.name} "
                              f"(block_size {drafter.block_size})"),
                    expected=f"n_max <= {limit} (block_size - 1): the drafter cannot propose more per step",
                    fix=f"set the draft depth to {limit}; read the drafter's block_size, not its implementation name",
                )
    if "ngram-mod" in types and config.service.contract.ngram_window is not None:
        want = config.service.contract.ngram_window
        have = (llama.spec_ngram_mod_n_min, llama.spec_ngram_mod_n_max)
        if have != want:
            raise speculative_wiring.fail(
                config, "ngram-window",
                cites=("B-SP-6", "INC-15"),
                where=config.where_flag(llama.use("spec_ngram_mod_n_min") or llama.use("spec_ngram_mod_n_max")),
                observed=f"ngram-mod window {have[0]}/{have[1]}",
                expected=f"{want[0]}/{want[1]}, the measured window (fleet.toml contract.ngram_window)",
                fix="shorter is not better: short windows propose on ordinary prose and lose decode speed (E.16)",
            )


# (fork, what needs the build, the minimum build, the rule): features a fork gained at a known build.
MINIMUMS = (
    ("vendor", "draft-mtp with a quantized V cache", 10777, "B-SP-10"),
)


def _no_engine_build(config: RenderedService) -> str | None:
    if config.service.engine_build is None:
        return (f"{config.name} declares no engine_build in fleet.toml: declare {{ fork, number }} to hold the build "
                "to the minimums its features need (B-SP-10)")
    return None


def _needs(config: RenderedService, feature: str) -> bool:
    llama = config.llama
    assert llama is not None
    if feature == "draft-mtp with a quantized V cache":
        return "draft-mtp" in llama.spec_types and llama.cache_type_v != "f16"
    raise AssertionError(feature)


@service_seam(
    cites=("B-SP-10",),
    summary="the declared engine build is at least the one that brought each feature the rendered argv uses "
               "(vendor fork: draft-mtp with a quantized V cache needs build 10777)",
    requires=_no_engine_build,
    engines=("llama.cpp",),
    codes={
        "below-minimum": (
            "the declared engine build (`engine_build = { fork, number }`) is older than the build that brought a feature the argv uses "
            "(vendor 10777: draft-mtp with a quantized V cache, B-SP-10)"
        ),
    },
)
def engine_build_minimum(config: RenderedService) -> None:
    build, llama = config.service.engine_build, config.llama
    assert build is not None and llama is not None
    for fork, feature, minimum, rule in MINIMUMS:
        if build.fork == fork and build.number is not None and build.number < minimum and _needs(config, feature):
            raise engine_build_minimum.fail(
                config, "below-minimum",
                cites=(rule,),
                where=config.fleet.where("services", config.name, "engine_build"),
                observed=(f"{fork} build {build.number} runs {feature} (--spec-type {','.join(llama.spec_types)}, "
                          f"--cache-type-v {llama.cache_type_v})"),
                expected=f"{fork} build >= {minimum}: the minimum build that runs {feature}",
                fix=f"upgrade the {fork} build to {minimum} or later, or run the V cache at f16 / speculation off",
            )
