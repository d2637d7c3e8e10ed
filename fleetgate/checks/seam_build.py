"""The engine's build script targets the host's cards and bundles the runtime at the loader's depth.

The script a service declares as its build (``services.NAME.build``) runs under bash with the build tool
stubbed and every writing tool recorded, like a serve script:

- the configure step's GPU targets are the host's architecture and nothing else (B-DV-5, INC-18);
- the bundled rocBLAS/hipBLASLt device code lands at ``<build>/lib/<library>/library``, where the loader
  looks for it next to ``<build>/bin`` -- ``cp -r SRC DST/`` with a missing DST lands one level too
  shallow (B-UN-3, INC-01). Where a copy lands is worked out as ``cp`` does it, from the directories
  the script created before it.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace

from fleetgate.checks import Lacks, service_seam
from fleetgate.fleet import Bench, Service
from fleetgate.render.rendered import Probe, RenderedService
from fleetgate.render.types import Rendered, RenderRefused

__all__ = ["NAME"]

NAME = "build-script"
_TARGET_KEYS = ("AMDGPU_TARGETS", "GPU_TARGETS", "CMAKE_HIP_ARCHITECTURES", "CMAKE_CUDA_ARCHITECTURES")
_RUNTIME = ("rocblas", "hipblaslt")


def _build_of(config: RenderedService) -> Bench | Lacks:
    if config.service.build is None:
        return Lacks(f"{config.name} declares no build script (services.{config.name}.build in fleet.toml)")
    return config.service.build


def _build_run(config: RenderedService, build: Bench) -> Service:
    """The build script run as the service's, its build tool stubbed."""
    return replace(config.service, name=f"{config.name}:build", binary=build.binary, serve_script=build.script,
                   env_file=None, unit=None)


def _build_probes(config: RenderedService) -> list[Probe]:
    build = _build_of(config)
    return [] if isinstance(build, Lacks) else [Probe(service=_build_run(config, build))]


def _defines(argv: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for i, arg in enumerate(argv):
        define = arg[2:] if arg.startswith("-D") and len(arg) > 2 else (argv[i + 1] if arg == "-D" and i + 1 < len(argv) else None)
        if define and "=" in define:
            key, _, value = define.partition("=")
            found[key.split(":", 1)[0]] = value
    return found


def _build_dir(argv: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "-B" and i + 1 < len(argv):
            return argv[i + 1].rstrip("/")
        if arg.startswith("-B") and len(arg) > 2:
            return arg[2:].rstrip("/")
    return None


def _landings(rendered: Rendered) -> dict[str, str]:
    """Where each recursively copied directory lands, as cp does it: into DST when DST exists, else AS DST."""
    dirs: set[str] = set()
    landed: dict[str, str] = {}
    for call in rendered.writes:
        tool, args = call[0], [a for a in call[1:] if not a.startswith("-")]
        flags = [a for a in call[1:] if a.startswith("-")]
        if tool == "mkdir":
            for d in args:
                d = posixpath.normpath(d)
                if any("p" in f for f in flags):
                    parts = d.split("/")
                    dirs.update("/".join(parts[:n]) for n in range(2, len(parts) + 1))
                else:
                    dirs.add(d)
        elif tool == "cp" and any(c in f for f in flags for c in "rRa") and len(args) >= 2:
            dst = posixpath.normpath(args[-1])
            for src in args[:-1]:
                src = posixpath.normpath(src)
                target = posixpath.join(dst, posixpath.basename(src)) if dst in dirs else dst
                landed[src] = target
                dirs.add(target)
    return landed


@service_seam(
    policy="build-script",
    probes=_build_probes,
    cites=("B-DV-5", "B-UN-3", "INC-01", "INC-18"),
    summary="the engine's build targets the host's GPU architecture and bundles its runtime at the loader's depth",
    codes={
        "does-not-run": "the build script never runs its build tool",
        "wrong-gpu-target": "the build targets another GPU architecture than the host's (INC-18)",
        "runtime-off-depth": "bundled rocBLAS/hipBLASLt device code lands off the loader's depth (INC-01)",
    },
).needing(_build_of)
def build_script(config: RenderedService, build: Bench) -> None:
    try:
        rendered = config.probe(service=_build_run(config, build))
    except RenderRefused as refused:
        raise build_script.fail(config, "does-not-run", cites=("B-DV-5",),
                         where=f"{build.script}:{refused.line}" if refused.line else str(build.script),
                         observed=f"the build script never runs {build.binary}: {refused.message}",
                         expected=f"a build that runs {build.binary}",
                         fix="fix the script (it runs under bash with the build tool stubbed)") from None
    calls = (*rendered.extra_invocations, rendered.argv)
    configure = next((argv for argv in calls if _build_dir(argv) is not None), None)
    arch = config.host.gpu_arch
    if configure is not None and arch is not None:
        defines = _defines(configure)
        targets = {key: defines[key] for key in _TARGET_KEYS if key in defines}
        wrong = {key: value for key, value in targets.items() if value.replace(",", ";").split(";") != [arch]}
        if not targets or wrong:
            shown = ", ".join(f"{k}={v}" for k, v in (wrong or targets).items()) or "no GPU target"
            raise build_script.fail(config, "wrong-gpu-target", cites=("B-DV-5", "INC-18"),
                             where=str(build.script),
                             observed=f"the configure step builds for {shown}",
                             expected=f"exactly {arch}, the architecture of host {config.host.name}'s cards "
                                      f"({config.fleet.where('hosts', config.host.name, 'gpu_arch')})",
                             fix=f"build for {arch} only: a sibling architecture's binary links, loads the model and then "
                                 "segfaults")
    prefix = _build_dir(configure) if configure is not None else None
    if prefix is None:
        return
    landed = _landings(rendered)
    for library in _RUNTIME:
        want = f"{prefix}/lib/{library}/library"
        sources = [s for s in landed if s.endswith(f"/{library}/library") or s.endswith(f"/{library}")]
        for src in sources:
            got = landed[src] if src.endswith("/library") else f"{landed[src]}/library"
            if got != want:
                raise build_script.fail(config, "runtime-off-depth", cites=("B-UN-3", "INC-01"), where=str(build.script),
                                 observed=f"cp -r {src} lands at {got}",
                                 expected=f"{want}: the fixed depth {library} reads its device code from next to bin/",
                                 details=["a destination that does not exist yet is created AS the copy, one level too "
                                          "shallow; the engine then answers /health and dies on the first request"],
                                 fix="create every destination before copying into it (mkdir -p), or copy SRC/. into the "
                                     "full destination path")
