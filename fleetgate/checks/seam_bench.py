"""Bench harnesses measure what they claim (B.15): each harness a service declares is run under bash with
its program stubbed, like a serve script, and every call it makes is read as that program reads it.

- llama-bench: ``/`` separates devices within one configuration and ``,`` separates sweep values, so a
  comma in ``-ts``/``-dev`` of a multi-card service benches each card alone (B-H-1, INC-20); there is no
  ``-c``, and without ``-d`` a decode test runs at ~zero depth (B-H-2, INC-23); one invocation per cell,
  because a test that cannot allocate calls ``exit(1)`` (B-H-3, INC-22).
- systemd-run: a harness starts from a transient unit with the service unit's memlock limit (B-H-4,
  INC-21).
- ``vllm bench serve``: ``--tokenizer`` (B-H-5, INC-41) and ``--ignore-eos`` (B-H-8, INC-55).
"""

from __future__ import annotations

from dataclasses import replace

from fleetgate.checks import service_seam
from fleetgate.fleet import Bench, Service
from fleetgate.render.rendered import Probe, RenderedService
from fleetgate.render.types import RenderRefused

__all__: list[str] = []


# llama-bench's parameters that take a sweep list (tools/llama-bench/llama-bench.cpp, print_usage).
_SWEEP = {"-b": "batch", "--batch-size": "batch", "-ub": "ubatch", "--ubatch-size": "ubatch", "-p": "n_prompt",
          "--n-prompt": "n_prompt", "-n": "n_gen", "--n-gen": "n_gen", "-d": "n_depth", "--n-depth": "n_depth",
          "-ts": "tensor_split", "--tensor-split": "tensor_split", "-dev": "device", "--device": "device",
          "-fa": "flash_attn", "--flash-attn": "flash_attn", "-ngl": "n_gpu_layers", "--n-gpu-layers": "n_gpu_layers",
          "-ctk": "cache_type_k", "--cache-type-k": "cache_type_k", "-ctv": "cache_type_v",
          "--cache-type-v": "cache_type_v", "-sm": "split_mode", "--split-mode": "split_mode"}


def _no_bench(config: RenderedService) -> str | None:
    if not config.service.benches:
        return f"{config.name} declares no bench harness (services.{config.name}.bench in fleet.toml)"
    return None


def _line(bench: Bench, needle: str) -> str:
    """file:line of the first line of the harness that mentions ``needle`` (for the message only)."""
    for number, text in enumerate(bench.script.read_text(encoding="utf-8").splitlines(), 1):
        if needle in text and not text.lstrip().startswith("#"):
            return f"{bench.script}:{number}"
    return str(bench.script)


def _values(argv: tuple[str, ...]) -> dict[str, list[str]]:
    """Every sweep parameter's values, as llama-bench reads them (a flag given twice adds its values)."""
    found: dict[str, list[str]] = {}
    i = 1
    while i < len(argv):
        flag = argv[i]
        if flag in _SWEEP and i + 1 < len(argv):
            found.setdefault(_SWEEP[flag], []).extend(argv[i + 1].split(","))
            i += 2
            continue
        i += 1
    return found


def _llama_bench(config: RenderedService, bench: Bench, argv: tuple[str, ...]) -> None:
    if "-c" in argv or "--ctx-size" in argv:
        flag = "-c" if "-c" in argv else "--ctx-size"
        raise bench_harness.fail(config, "ctx-not-a-bench-flag", cites=("B-H-2", "INC-23"),
                         where=_line(bench, f" {flag} "),
                         observed=f"{bench.script.name}: llama-bench {flag}: llama-bench has no context flag",
                         expected="the context as a consequence of the test: n_ctx = n_prompt + n_gen + n_depth (-p, -n, -d)",
                         fix="drop -c; put KV in front of the measurement with -d <depth>")
    values = _values(argv)
    llama = config.llama
    cards = len(llama.devices) if llama is not None and llama.devices else 1
    for param, flag in (("tensor_split", "-ts"), ("device", "-dev")):
        parts = values.get(param, [])
        if cards > 1 and len(parts) > 1 and any("/" not in p for p in parts):
            raise bench_harness.fail(config, "comma-splits-devices", cites=("B-H-1", "INC-20"),
                             where=_line(bench, f"{flag} "),
                             observed=f"{bench.script.name}: llama-bench {flag} {','.join(parts)}: ',' separates sweep "
                                      "values, so each value is a one-device configuration",
                             expected=f"{flag} with '/' between the {cards} devices of one configuration (e.g. {'/'.join(parts)})",
                             fix="write the service's comma list with '/' for llama-bench; the comma form silently benches "
                               "each card on its own")
    swept = {p: v for p, v in values.items() if len(v) > 1}
    if swept:
        what = ", ".join(f"{p} {','.join(v)}" for p, v in sorted(swept.items()))
        raise bench_harness.fail(config, "sweep-in-one-invocation", cites=("B-H-3", "INC-22"),
                           where=_line(bench, "llama-bench"),
                           observed=f"{bench.script.name}: one llama-bench call sweeps {what}",
                           expected="one llama-bench invocation per cell",
                           fix="loop over the cells in the harness: a test that cannot allocate calls exit(1) and takes the rest "
                         "of the sweep with it")
    gens = [int(n) for n in values.get("n_gen", ["128"]) if n.isdigit()]
    if any(gens) and not values.get("n_depth"):
        raise bench_harness.fail(config, "no-depth", cites=("B-H-2", "INC-23"),
                         where=_line(bench, "llama-bench"),
                         observed=f"{bench.script.name}: a decode test (-n) without -d: it runs with n_prompt = 0, at ~zero depth",
                         expected="-d <depth>: KV in front of the measurement, like the deployed window",
                         fix="add -d; and read llama-bench's decode figure as the drafterless, single-slot baseline it is")


def _systemd_run(config: RenderedService, bench: Bench, argv: tuple[str, ...]) -> None:
    props: dict[str, str] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--property="):
            key, _, value = arg.removeprefix("--property=").partition("=")
            props[key] = value
        elif arg in ("-p", "--property") and i + 1 < len(argv):
            key, _, value = argv[i + 1].partition("=")
            props[key] = value
            i += 1
        i += 1
    unit = config.rendered.unit
    user = unit.last("Service", "User") if unit is not None else None
    # B-H-4: memlock unlimited for the ROCm staging buffers (whatever the unit says: unit-memlock judges it).
    wanted = {"LimitMEMLOCK": "infinity", **({"User": user.value} if user else {})}
    missing = {k: v for k, v in wanted.items() if props.get(k) != v}
    if missing:
        raise bench_harness.fail(config, "not-the-units-limits", cites=("B-H-4", "B-RAM-4", "INC-21"),
                           where=_line(bench, "systemd-run"),
                           observed=f"{bench.script.name}: systemd-run " + " ".join(f"{k}={props.get(k, '(unset)')}" for k in missing),
                           expected="the service unit's " + ", ".join(f"{k}={v}" for k, v in missing.items())
                         + f" ({unit.path if unit is not None else 'its unit'})",
                           fix="pass --property=LimitMEMLOCK=infinity --property=User=... : a shell's 8 MiB of memlock fails the "
                         "load for a reason that has nothing to do with the model")


def _vllm_bench(config: RenderedService, bench: Bench, argv: tuple[str, ...]) -> None:
    if argv[1:3] != ("bench", "serve"):
        return
    args = set(argv) | {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    if "--tokenizer" not in args:
        raise bench_harness.fail(config, "no-tokenizer", cites=("B-H-5", "INC-41"),
                         where=_line(bench, "vllm bench"),
                         observed=(f"{bench.script.name}: vllm bench serve without --tokenizer: the client resolves the "
                                   "served alias on HuggingFace"),
                         expected="--tokenizer /models/<snapshot> (with /models mounted)",
                         fix="pass --tokenizer: without it the run is green-looking and produces no numbers")
    if "--ignore-eos" not in args:
        raise bench_harness.fail(config, "no-ignore-eos", cites=("B-H-8", "INC-55"),
                         where=_line(bench, "vllm bench"),
                         observed=(f"{bench.script.name}: vllm bench serve without --ignore-eos: generations stop on "
                                   "their own, so the decode rate reads low"),
                         expected="--ignore-eos, so every request generates its --random-output-len",
                         fix="add --ignore-eos and read the engine's own timings")


_READERS = {"llama-bench": _llama_bench, "systemd-run": _systemd_run, "vllm": _vllm_bench}


def _bench_run(config: RenderedService, bench: Bench) -> Service:
    """A bench harness run as the service's, its program stubbed."""
    return replace(config.service, name=f"{config.name}:{bench.script.name}", binary=bench.binary,
                   serve_script=bench.script, env_file=None, unit=None)


def _bench_probes(config: RenderedService) -> list[Probe]:
    return [Probe(service=_bench_run(config, bench)) for bench in config.service.benches]


@service_seam(
    policy="bench-harness",
    probes=_bench_probes,
    cites=("B-H-1", "B-H-2", "B-H-3", "B-H-4", "B-H-5", "B-H-8", "INC-20", "INC-21", "INC-22", "INC-23", "INC-41",
              "INC-55"),
    summary="the bench harnesses a service declares call their programs the way those programs measure it",
    requires=_no_bench,
    codes={
        "ctx-not-a-bench-flag": "a harness passes `-c` to llama-bench, which has none (B-H-2)",
        "comma-splits-devices": "llama-bench `-ts`/`-dev` with `,`: each card benched alone (INC-20)",
        "sweep-in-one-invocation": "one llama-bench call sweeps several cells (INC-22)",
        "no-depth": "a llama-bench decode test without `-d` runs at ~zero depth (INC-23)",
        "not-the-units-limits": "the transient unit lacks the service unit's memlock limit or user (INC-21)",
        "no-tokenizer": "`vllm bench serve` without `--tokenizer` (INC-41)",
        "no-ignore-eos": "`vllm bench serve` without `--ignore-eos` (INC-55)",
        "does-not-run": "a harness never calls its program",
    },
)
def bench_harness(config: RenderedService) -> None:
    for bench in config.service.benches:
        try:
            rendered = config.probe(service=_bench_run(config, bench))
        except RenderRefused as refused:
            raise bench_harness.fail(config, "does-not-run", cites=("B-H-3",),
                             where=f"{bench.script}:{refused.line}" if refused.line else str(bench.script),
                             observed=f"{bench.script.name}: the harness never calls {bench.binary}: {refused.message}",
                             expected=f"a harness that runs {bench.binary}",
                             fix="fix the harness (it runs under bash with the program stubbed, like a serve script)") from None
        reader = _READERS.get(bench.binary)
        if reader is None:
            continue
        for argv in (*rendered.extra_invocations, rendered.argv):
            reader(config, bench, argv)
