"""vLLM's argv as the pinned release reads it, and flags the fleet's rules forbid (INC-88, B-VL-8, B-FIT-12).

The release is the one the service pins (``engine_build = { vllm = "X.Y.Z" }`` or ``{ version }``, the tag of a
vLLM image in fleet.toml, compose, ``docker run``, a Kubernetes container or a Quadlet, or the release a Quadlet's
``Image=`` tag names); a service that pins none, or pulls a tag that floats, is read with the newest release held,
and its figures and failures say so with how to pin it; a pinned release with no recorded table is not judged. The release's options, value
parsers and ``--speculative-config`` schema come from its wheel (fleetgate/engines/vllm_release*.json, read by
``tools.vllm_wheel``); a Quadlet whose image is the radiance fork adds that fork's flags and drafter
method.
"""

from __future__ import annotations

import re
import shlex

from fleetgate.checks import NotJudged, service_seam
from fleetgate.engines.vllm import (
    RADIANCE,
    Fork,
    declared_release,
    image_release,
    load_release,
    newest,
    read_argv,
    read_as_vllm,
    unrecorded,
)
from fleetgate.failure import Deferred
from fleetgate.render.rendered import RenderedService

__all__ = ["fork_of", "release_of"]

FORBIDDEN = "forbidden-flags"


def fork_of(config: RenderedService) -> Fork | None:
    """The vLLM fork a service runs, from its Quadlet's image reference (localhost/radiance-vllm:TAG)."""
    unit = config.rendered.unit
    image = unit.last("Container", "Image") if unit is not None and unit.kind == "quadlet" else None
    if image is not None and RADIANCE.name in image.value:
        return RADIANCE
    return None


_TAG_RELEASE = re.compile(r"v?(\d+\.\d+\.\d+)(?:[-+][\w.-]+)?")
"""A tag that names a release: ``v0.13.0``, or a local build of it (``0.13.0-e060895``)."""


def release_note(config: RenderedService) -> str:
    """Which release's table reads the service's argv, and, where nothing pins one, that the newest held does and
    how to pin it."""
    pinned = release_of(config)
    if pinned is not None:
        return f"vLLM {pinned}'s table (pinned by {_pinned_by(config, pinned)})"
    build = config.service.engine_build
    pin = (f"pin the release it runs: services.{config.name}.engine_build = {{ vllm = \"X.Y.Z\" }}, or an image "
           "tag that names it (vllm/vllm-openai:vX.Y.Z)")
    if build is not None and build.image is not None and build.floating:
        return (f"vLLM {newest()}'s table, the newest release held: {config.name} pulls {build.image}, whose tag floats "
                f"(the next pull may run another release); {pin}")
    return f"vLLM {newest()}'s table, the newest release held: {config.name} pins no vLLM release; {pin}"


def release_of(config: RenderedService) -> str | None:
    """The vLLM release whose options read the service's argv: the one its engine_build or its vLLM image pins, else
    the release its Quadlet's ``Image=`` tag names (a fork's image: ``radiance-vllm:0.13.0-e060895``); None when
    nothing pins one."""
    build = config.service.engine_build
    pinned = declared_release(build.version, build.image) if build is not None else None
    if pinned is not None:
        return pinned
    image = _quadlet_image(config)
    tag = image.split("@", 1)[0].rpartition(":")[2] if image is not None and ":" in image else ""
    named = _TAG_RELEASE.fullmatch(tag)
    return named.group(1) if named else None


def _quadlet_image(config: RenderedService) -> str | None:
    unit = config.rendered.unit
    image = unit.last("Container", "Image") if unit is not None and unit.kind == "quadlet" else None
    return image.value if image is not None else None


def _pinned_by(config: RenderedService, version: str) -> str:
    build = config.service.engine_build
    if build is None:
        return f"the Quadlet's image {_quadlet_image(config)}"
    if build.image is not None and image_release(build.image) == version:
        return f"image {build.image}"
    return f"engine_build ({config.fleet.where('services', config.name, 'engine_build')})"


def _where(config: RenderedService, flag: str) -> str | Deferred:
    assert config.vllm is not None
    dest = flag.lstrip("-").replace("-", "_")
    # a flag with no use of its own (one vLLM does not know) is where the argv is written: the script, a compose
    # service's or a manifest's command line, a Quadlet's Exec=
    return config.where_flag(config.vllm.use(dest))


@service_seam(
    cites=("B-VL-8", "B-VL-11"),
    summary="every flag is one the pinned vLLM release (and its fork) knows, every value parses as vLLM parses it, "
               "--speculative-config fits SpeculativeConfig",
    figures=lambda config: {"table": release_note(config)},
    engines=("vllm",),
    codes={
        "unknown-flag": (
            "an option the service's vLLM release (`engine_build = { vllm }`, a vLLM image's tag or a Quadlet's `Image=` tag; "
            "every release from 0.8.0 held; the newest where nothing pins one) and its fork do not have, named with the "
            "successor vLLM names for it"
        ),
        "ambiguous-flag": "an abbreviation that is a prefix of several options",
        "missing-value": "an option that takes a value, given none",
        "bad-value": "a value vLLM's parser refuses (type, choice, JSON)",
        "speculative-config": "`--speculative-config` outside `SpeculativeConfig`'s fields, types or methods",
    },
)
def vllm_argv(config: RenderedService) -> None:
    version = release_of(config) or newest()
    not_recorded = unrecorded(version)
    if not_recorded is not None:
        # another release's table would refuse what this one takes and take what it refuses
        raise NotJudged(f"{not_recorded}; pinned by {_pinned_by(config, version)}")
    fork = fork_of(config)
    release = load_release(version).with_fork(fork)
    reading = read_argv(config.rendered.argv, release)
    problems = reading.problems
    if problems:
        first = problems[0]
        raise vllm_argv.fail(config, "unknown-flag" if first.kind == "unknown-flag"
                                    else "ambiguous-flag" if first.kind == "ambiguous-flag"
                                    else "missing-value" if first.kind == "missing-value"
                                    else "bad-value" if first.kind == "bad-value"
                                    else "speculative-config",
                              where=_where(config, first.flag),
                              observed=first.message,
                              details=[p.message for p in problems[1:]],
                              expected=f"an argv vLLM {release.version}{f' ({fork.name} fork)' if fork else ''} accepts: the "
                                       f"engine refuses this at start, after the container is up; read with "
                                       f"{release_note(config)}",
                              fix="spell the flag as the release defines it (vllm serve --help), or fix the value where it is set")
    if "--speculative-config" in reading.unjudged:
        raise NotJudged(f"not judged: --speculative-config: vLLM {release.version}'s SpeculativeConfig declares no annotated "
                        "fields or no method literal, so its schema is not recorded; pin a release from 0.8.5 on to have it "
                        "judged")
    if reading.unjudged:
        groups = sorted({key.partition(".")[0] for key in reading.unjudged})
        raise NotJudged(f"not judged: {', '.join(reading.unjudged)}: vLLM {release.version} has the config group "
                        f"{', '.join(groups)}, but its dataclass has no such field, and whether the release refuses an "
                        "unknown key there is not recorded; spell the key as the group's dataclass names it (vllm serve "
                        "--help=<group>)")


def _no_engine_argv(config: RenderedService) -> str | None:
    if config.vllm is not None or config.llama is not None:
        return None
    return f"{FORBIDDEN} does not apply to {config.name}"


@service_seam(
    policy="forbidden-flags",
    cites=("INC-88", "B-VL-8", "B-FIT-12"),
    summary="no --expert-precise-memory on vLLM (INC-88), no --fit on for llama.cpp (B-FIT-12)",
    requires=_no_engine_argv,
    engines=("llama.cpp", "vllm"),
    codes={
        "expert-precise-memory": "`--expert-precise-memory` deployed (INC-88, B-VL-8)",
        "fit-on": "`--fit on` (B-FIT-12)",
    },
)
def forbidden_flags(config: RenderedService) -> None:
    argv = config.rendered.argv
    if config.vllm is not None:
        found, _ = read_as_vllm(argv, load_release().with_fork(RADIANCE))
        if "--expert-precise-memory" in found:
            raise forbidden_flags.fail(
                config, "expert-precise-memory",
                where=str(config.rendered.script), cites=("INC-88", "B-VL-8"),
                observed="--expert-precise-memory is deployed: 31.73 of 31.86 GiB planned, ~0.13 GiB left at boot",
                expected="the flag absent (the serve script may keep it as an opt-in, off)",
                fix="drop --expert-precise-memory: graph capture allocates transiently and the engine dies in a restart loop",
            )
        return
    for i, word in enumerate(argv[1:], start=1):
        name, eq, inline = word.partition("=")
        if name in ("--fit", "-fit"):
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value == "on":
                raise forbidden_flags.fail(
                    config, "fit-on",
                    cites=("B-FIT-12",),
                    where=config.where_variable("FIT") if "FIT" in config.variables else str(config.rendered.script),
                    observed=f"{shlex.join(argv[i:i + (1 if eq else 2)])}: llama-server shrinks unset context and layers to fit",
                    expected="--fit off with --gpu-layers 999: everything on the cards, nothing resized behind the seams' back",
                    fix="set FIT=off; the fit is fleetgate's ledger, checked before the deploy",
                )
