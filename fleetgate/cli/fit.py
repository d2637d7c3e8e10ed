"""``fleetgate fit``: the ledger from the command line (``fleetgate profile`` is ``fleetgate.cli.profile``).

    fleetgate fit SERVICE [--sweep-ts] [--json]          a service of the fleet, on its host's cards
    fleetgate fit [--card NAME=SIZE ...] [--json] -- llama-server -m MODEL.gguf [flags]
                                                         any llama-server command line, no fleet
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetgate.checks.seam_vllm_ledger import no_vllm_ledger, service_vllm_ledger
from fleetgate.cli import SUBCOMMANDS, parse_size, resolve_fleet, write_stdout
from fleetgate.engines.llamacpp import parse_llama_server
from fleetgate.errors import InputError
from fleetgate.fleet import GIB, gib
from fleetgate.ledger.accounts import TOTAL_READING, DeviceLedger, Ledger, summarize
from fleetgate.ledger.build import build_ledger
from fleetgate.ledger.devices import DEVICE_KINDS, Card
from fleetgate.ledger.service import service_ledger, service_sweep
from fleetgate.ledger.verdict import SweepRow, Verdict, judge, nearest_fitting, sweep_tensor_split
from fleetgate.ledger.weights import local_cpu_features
from fleetgate.models.gguf_remote import source_profile
from fleetgate.models.profile import load_profile, profile_from_data
from fleetgate.models.rangeread import is_remote
from fleetgate.render.rendered import load_service

__all__ = ["register"]

ROWS: tuple[tuple[str, str], ...] = (
    ("model", "model (blocks)"), ("output", "output"), ("kv", "KV"), ("recurrent", "recurrent (RS)"),
    ("draft", "draft"), ("projector", "projector"), ("compute", "compute"), ("runtime", "runtime"),
)


def register(subparsers: Any) -> None:
    fit = subparsers.add_parser(
        "fit", help=SUBCOMMANDS["fit"][1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print what each device will hold: weights, output layer, KV, recurrent state, drafter, "
                    "projector, compute buffers and the GPU runtime, named as llama-server names its buffers.",
        epilog="A bare command line's devices: --device names them (CUDA0, ROCm1, Vulkan0, Metal, as llama.cpp\n"
               "names them; the name's prefix is the device's kind: CUDA, ROCm, Vulkan, Metal, RPC), and RPC\n"
               "devices come from llama-server's own --rpc after --, named RPC0, RPC1 ... in its order:\n"
               "  fleetgate fit --card RPC0=24G --card RPC1=24G -- llama-server -m M.gguf --rpc h1:50052,h2:50052\n"
               "An RPC device serving a GPU takes its kind after a colon: --card RPC0=80G:CUDA. --card sizes\n"
               "are the total the engine sees (the breakdown's 'total'; on an NVIDIA H200 143,155 MiB where\n"
               "nvidia-smi says 143,771). The host's RAM is --host-ram, never a --card.")
    fit.add_argument("args", nargs="*", metavar="SERVICE | -- llama-server ...",
                     help="a service of the fleet, or (after --) a llama-server command line")
    fit.add_argument("--fleet", metavar="PATH", help="fleet manifest (default: ./fleet.toml, else the ini)")
    fit.add_argument("--json", action="store_true", help="every figure in bytes, per device and per term")
    fit.add_argument("--sweep-ts", action="store_true",
                     help="free VRAM per card and the gap for each -ts step of a two-card split")
    fit.add_argument("--card", action="append", default=[], metavar="NAME=SIZE[:KIND]",
                     help="a device of the command line and its memory (ROCm0=31.86GiB, CUDA0=143155MiB, "
                          "RPC0=24G, RPC0=80G:CUDA); naming no device of the command line is an error")
    fit.add_argument("--host-ram", metavar="SIZE", help="the host's RAM for a bare command line (64G)")
    fit.add_argument("--cpu-features", metavar="LIST",
                     help="the host CPU's flags that decide CPU_REPACK (avx2,avx512f,asimddp ...; 'none'); "
                          "default: this machine's")
    fit.add_argument("--profile", metavar="FILE", help="the target's profile, when -m's GGUF is not at hand")
    fit.add_argument("--draft-profile", metavar="FILE", help="the drafter's profile (--spec-draft-model)")
    fit.add_argument("--projector-profile", metavar="FILE", help="the --mmproj's profile")
    fit.set_defaults(func=_fit)


def _fit(args: argparse.Namespace) -> int:
    words: list[str] = list(args.args)
    if not words:
        raise InputError(Path.cwd(), None, "fleetgate fit: expected SERVICE, or -- llama-server -m MODEL ...")
    word = words[0]
    one_word = len(words) == 1 and not word.startswith("-") and "/" not in word
    if one_word and (word != "llama-server" or _declared(args.fleet, word)):
        return _fit_service(args, word)
    if args.sweep_ts:
        raise InputError(Path.cwd(), None, "--sweep-ts needs a SERVICE (its host declares floor and slack)")
    return _fit_command(args, words)


def _declared(path: str | None, name: str) -> bool:
    """Whether the fleet declares a service ``name``: a declared name wins over reading it as a bare engine
    command line (a fleet whose unit is llama-server.service has a service of that name). With no fleet at all the
    word is the command line."""
    try:
        fleet = resolve_fleet(path, only=name)
    except InputError as exc:
        if exc.message.startswith("no fleet manifest"):
            return False
        raise
    return name in fleet.services


def _fit_service(args: argparse.Namespace, name: str) -> int:
    fleet = resolve_fleet(args.fleet, only=name)
    service = fleet.services.get(name)
    if service is None:
        known = ", ".join(fleet.services)
        raise InputError(fleet.path, None, f"no service {name!r}; expected one of: {known}")
    config = load_service(fleet, service)
    if config.vllm is not None:
        return _fit_vllm(args, config)
    if config.llama is None:
        raise InputError(fleet.path, service.line, f"{name} runs {service.engine}; fleetgate's ledgers are "
                                                   "llama.cpp's and vLLM's")
    if config.profile is None:
        raise InputError(fleet.path, service.line, f"services.{name}: no profile; expected profile = "
                                                   "\"profiles/MODEL.toml\" (`fleetgate profile MODEL.gguf`)")
    try:
        ledger = service_ledger(config)
    except KeyError as exc:
        # the engine's own words (common/arg.cpp parse_device_list): it will not start
        raise InputError(config.rendered.script, None,
                         f"--device names {exc.args[0]!r}; host {config.host.name} has no such card, so llama-server "
                         f"will not start ('error while handling argument \"--device\": invalid device: {exc.args[0]}')"
                         ) from None
    except ValueError as exc:
        raise InputError(config.rendered.script, None, str(exc)) from None
    host = config.host
    floor, slack = host.card_floor_bytes, host.balance_slack_bytes
    verdict = judge(ledger, floor=floor, slack=slack)
    rows = service_sweep(config) if args.sweep_ts or not verdict.fits else []
    if args.sweep_ts and not rows:
        raise InputError(fleet.path, service.line, f"{name} has no two-card --tensor-split to sweep")
    llama = config.llama
    fix = _fix(verdict, rows, llama.tensor_split, f"`fleetgate fit {name} --sweep-ts` prints every step")
    if args.json:
        data = summarize(ledger)
        data["service"] = name
        data["host"]["ram_bytes"] = host.ram_bytes
        data["floor_bytes"] = host.card_floor_bytes
        data["slack_bytes"] = host.balance_slack_bytes
        data["calibrations"] = [{"device": b.device, "context": b.context, "bytes": b.bytes,
                                 "source": b.source}
                                for d in ledger.devices for b in d.buffers if b.basis == "calibrated"]
        data["verdict"] = _verdict_json(verdict, fix)
        if args.sweep_ts:
            data["sweep"] = [{"tensor_split": list(r.tensor_split), "free_bytes": list(r.free),
                              "gap_bytes": r.gap, "floor_ok": list(r.floor_ok), "slack_ok": r.slack_ok}
                             for r in rows]
        write_stdout(json.dumps(data, indent=2) + "\n")
        return verdict.exit_code
    split = ",".join(f"{x:g}" for x in llama.tensor_split) or "by free memory"
    title = (f"{name} on {host.name}: {ledger.shape.n_ctx} tokens = {ledger.shape.n_seq_max} slots x "
             f"{ledger.shape.n_ctx_seq}{' (unified KV)' if ledger.shape.unified else ''}, K/V "
             f"{llama.cache_type_k}/{llama.cache_type_v}, ubatch {ledger.n_ubatch}, -ts {split}")
    head = _verdict_lines(verdict, fix)
    if args.sweep_ts:
        names = [d.card.shown for d in ledger.cards]
        write_stdout("".join(f"{line}\n" for line in head)
               + _sweep_table(title, rows, llama.tensor_split, floor, slack, names) + "\n")
        return verdict.exit_code
    used = (config.profile, config.draft_profile if llama.spec_draft_model else None)
    write_stdout("".join(f"{line}\n" for line in head)
           + _table(title, ledger, floor=floor or 0, slack=slack, cache_ram_mib=llama.cache_ram_mib,
                    ram=host.ram_bytes, reconstructed=[p.name for p in used if p and p.reconstructed],
                    floor_declared=floor is not None) + "\n")
    return verdict.exit_code


def _fit_vllm(args: argparse.Namespace, config: Any) -> int:
    """A vLLM service: the ledger of one rank and the verdict vLLM reaches at start (exit 1: it will not start)."""
    if args.sweep_ts:
        raise InputError(config.fleet.path, config.service.line, f"{config.name} runs vLLM: --sweep-ts is llama.cpp's")
    if reason := no_vllm_ledger(config):
        raise InputError(config.fleet.path, config.service.line, reason)
    ledger = service_vllm_ledger(config)
    if ledger.config_refusal is not None:
        verdict = f"FAILS: will not start: vLLM refuses at config: {ledger.config_refusal}"
    elif not ledger.weights_fit:
        verdict = (f"FAILS: will not start: each rank loads {gib(ledger.weights + ledger.drafter)} of weights "
                   f"into a budget of {gib(ledger.budget)}")
    elif ledger.pool_refusal is not None:
        verdict = f"FAILS: will not start: vLLM refuses: {ledger.pool_refusal}"
    else:
        verdict = ""
    code = 0 if ledger.starts else 1
    if args.json:
        data = {"service": config.name, "engine": "vllm", **ledger.summary(), "exit_code": code}
        write_stdout(json.dumps(data, indent=2) + "\n")
        return code
    vllm = config.vllm
    out = [verdict, ""] if verdict else []
    out += [f"{config.name} on {config.host.name}: vLLM, TP {ledger.tp}, --max-model-len {ledger.max_model_len}, "
            f"--max-num-seqs {ledger.max_num_seqs}, KV {vllm.kv_cache_dtype}",
            f"  per rank ({ledger.card}, {gib(ledger.card_bytes)})     GiB"]
    rows = [("budget", ledger.budget, f"{ledger.utilization:g} x the card"),
            ("weights", ledger.weights, config.profile.name if config.profile else ""),
            ("drafter", ledger.drafter, config.draft_profile.name if config.draft_profile else "none"),
            ("profiled peak", ledger.peak, ledger.peak_basis),
            ("KV pool", ledger.pool, ledger.pool_from),
            ("one sequence", ledger.per_sequence, f"{ledger.max_model_len:,} tokens x {ledger.kv_per_token:,} B + "
                                                  f"{ledger.state_per_sequence:,} B of state")]
    if ledger.null_block:
        rows.insert(5, ("null block", ledger.null_block, f"one {ledger.block_size}-token block vLLM holds back"))
    out += [f"  {label:<16}{value / GIB:>9.2f}   {why}" for label, value, why in rows]
    if ledger.starts:
        out.append(f"  starts: the pool holds {ledger.sequences:.2f} sequences of {ledger.max_model_len:,} tokens "
                   f"(--max-num-seqs {ledger.max_num_seqs}); {ledger.tokens:,} tokens of attention cache")
    out += [f"  note: {n}" for n in ledger.notes]
    write_stdout("\n".join(out) + "\n")
    return code


def _fix(verdict: Verdict, rows: Sequence[SweepRow], current: Sequence[float], sweep: str) -> str | None:
    """What to change when the fit fails: the nearest split that clears every floor (and the slack), or why none."""
    if verdict.fits:
        return None
    limits = f"every card's floor ({gib(verdict.floor)}" + (")" if verdict.floor_declared else
                                                                     ", none declared)")
    if verdict.slack is not None:
        limits += f" and the slack ({gib(verdict.slack)})"
    if not rows:
        return (f"no -ts lever here (a split of two cards is what fleetgate sweeps): shrink what the card holds "
                f"(-c, -ctk/-ctv q8_0, -ub, -ngl, the drafter) until it clears {limits}")
    best = nearest_fitting(rows, current)
    if best is None:
        return (f"no -ts split of these two cards clears {limits} at this shape: lower -c, the KV type, -ub or "
                f"-ngl ({sweep})")
    return (f"-ts {best.tensor_split[0]},{best.tensor_split[1]} clears {limits}: free "
            f"{best.free[0] / GIB:.2f} / {gib(best.free[1])}, gap {gib(best.gap)} "
            f"({sweep})")


def _verdict_lines(verdict: Verdict, fix: str | None) -> list[str]:
    """The failing cards first (the worst at the top), then the fix; nothing when the fit holds."""
    if verdict.fits:
        return []
    if verdict.refusals:  # a process that exits at load holds nothing: the cards' figures are moot
        return [*(f"FAILS: will not start: llama-server refuses: {r.reason} ({r.source})" for r in verdict.refusals),
                ""]
    floor = f"{gib(verdict.floor)}" + ("" if verdict.floor_declared else " (none declared)")
    lines = [f"FAILS: {d.card.shown} keeps {gib(d.free or 0)} free, below its floor of {floor}"
             for d in verdict.failing]
    if verdict.slack_fails and verdict.gap is not None and verdict.slack is not None:
        lines.append(f"FAILS: the cards differ by {gib(verdict.gap)}, over the slack of "
                     f"{gib(verdict.slack)}")
    if fix:
        lines.append(f"fix: {fix}")
    return [*lines, ""]


def _verdict_json(verdict: Verdict, fix: str | None) -> dict[str, Any]:
    return {"fits": verdict.fits, "exit_code": verdict.exit_code, "floor_bytes": verdict.floor,
            "floor_declared": verdict.floor_declared,
            "failing": [{"device": d.card.name, "free_bytes": d.free} for d in verdict.failing],
            "gap_bytes": verdict.gap, "slack_bytes": verdict.slack, "slack_fails": verdict.slack_fails,
            "unsized": list(verdict.unsized), "fix": fix,
            "will_not_start": [r.reason for r in verdict.refusals]}


def _cards(specs: Sequence[str], devices: Sequence[str], rpc: Sequence[str]) -> list[Card]:
    """The --card options of a bare command line, each naming a device the command line has."""
    sizes: dict[str, tuple[int, str | None]] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        name = name.strip()
        size, _, kind = value.partition(":")
        if not sep or not name:
            raise InputError(Path.cwd(), None, f"--card {spec!r}; expected NAME=SIZE, e.g. ROCm0=31.86GiB")
        if name.upper() in ("CPU", "HOST"):
            raise InputError(Path.cwd(), None, f"--card {spec!r}: the host is not a card; expected "
                                               f"--host-ram {size or 'SIZE'}")
        if kind and kind not in DEVICE_KINDS:
            raise InputError(Path.cwd(), None, f"--card {spec!r}: unknown kind {kind!r}; expected one of "
                                               f"{', '.join(DEVICE_KINDS)}")
        kinds = [k for k in DEVICE_KINDS if k != "CPU"]
        if not any(name.startswith(k) for k in kinds):
            raise InputError(Path.cwd(), None, f"--card {spec!r}: {name!r} is no llama.cpp device name; "
                                               f"expected a kind and an index: {', '.join(kinds)}")
        sizes[name] = (parse_size(size, f"--card {spec}"), kind or None)
    local = [n for n in devices if n.lower() != "none"]
    rpc_names = [f"RPC{i}" for i in range(len(rpc))]
    for name in sizes:
        if name.startswith("RPC") and name not in rpc_names:
            raise InputError(Path.cwd(), None, f"--card {name}: the command line has "
                                               f"{len(rpc)} RPC device(s); expected llama-server's own "
                                               "--rpc HOST:PORT,... after --")
        if local and not name.startswith("RPC") and name not in local:
            raise InputError(Path.cwd(), None, f"--card {name}: --device names {', '.join(local)}; "
                                               f"expected a --card for one of them")
    cards = [Card(name=n, vram_bytes=sizes[n][0] if n in sizes else None, kind=sizes.get(n, (0, None))[1])
             for n in local]
    cards += [Card(name=n, vram_bytes=size, kind=kind) for n, (size, kind) in sizes.items()
              if n not in local and not n.startswith("RPC")]
    for i, endpoint in enumerate(rpc):
        given = sizes.get(f"RPC{i}")
        cards.append(Card(name=f"RPC{i}", vram_bytes=given[0] if given else None, buffer_name=f"RPC0[{endpoint}]",
                          endpoint=endpoint, kind=given[1] if given else None))
    return cards


def _fit_command(args: argparse.Namespace, words: Sequence[str]) -> int:
    # argv[0] is the binary's name; a line that starts with a flag gets one
    argv = ["llama-server", *words] if words[0].startswith("-") else list(words)
    config = parse_llama_server(argv)
    where = Path(argv[0])
    for problem in config.problems:
        position = f" (argument {problem.index})" if problem.index is not None else ""
        raise InputError(where, None, f"cannot read this llama-server command line: {problem.flag}"
                                      f"{position}: {problem.message}; expected build 11434's flags")
    remote = None if config.model is not None or args.profile else _remote_model(config, where)
    if remote is not None:
        args.profile = remote
    if config.model is None and args.profile is None:
        raise InputError(where, None, "no model: no -m MODEL.gguf, --model-url or -hf/-hff; expected the model "
                                      "(or --profile FILE.toml)")
    if config.model is not None and not config.model.strip() and args.profile is None:
        raise InputError(where, None, "-m is empty; expected the model's path (or --profile FILE.toml)")

    def profile_of(option: str | None, path: str | None, what: str) -> Any:
        if option and is_remote(option):
            return profile_from_data(source_profile(option)[0], Path(option.rsplit("/", 1)[-1]))
        if option:
            return load_profile(Path(option))
        if path is None:
            return None
        if not Path(path).is_file():
            option = "--profile" if what == "model" else f"--{what}-profile"
            raise InputError(Path(path), None, f"the {what} is not here; expected the GGUF, or pass its "
                                               f"profile with {option}")
        return load_profile(Path(path))

    target = profile_of(args.profile, config.model, "model")
    draft = profile_of(args.draft_profile, config.spec_draft_model, "draft") \
        if config.spec_draft_model else None
    projector = profile_of(args.projector_profile, config.mmproj, "projector") if config.mmproj else None
    cards = _cards(args.card, config.devices, config.rpc)
    ram = parse_size(args.host_ram, "--host-ram") if args.host_ram else None
    if args.cpu_features is None:
        features: frozenset[str] | None = local_cpu_features()
    elif args.cpu_features.strip().lower() == "none":
        features = frozenset()
    else:
        features = frozenset(f.strip().lower() for f in args.cpu_features.split(",") if f.strip())
    try:
        ledger = build_ledger(config, target, cards=cards, draft=draft, projector=projector,
                              cpu_features=features)
    except KeyError as exc:
        raise InputError(where, None,
                         f"--device names {exc.args[0]!r}; expected a --card NAME=SIZE for it") from None
    except ValueError as exc:
        raise InputError(where, None, str(exc)) from None
    verdict = judge(ledger, floor=None, slack=None)
    rows: list[SweepRow] = []
    if not verdict.fits and len(ledger.cards) == 2:
        def ledger_of(llama: Any) -> Ledger:
            return build_ledger(llama, target, cards=cards, draft=draft, projector=projector, cpu_features=features)

        rows = sweep_tensor_split(config, ledger_of, floor=None, slack=None)
    fix = _fix(verdict, rows, config.tensor_split, "--json gives every figure")
    if args.json:
        data = summarize(ledger)
        data["host"]["ram_bytes"] = ram
        data["verdict"] = _verdict_json(verdict, fix)
        write_stdout(json.dumps(data, indent=2) + "\n")
        return verdict.exit_code
    title = (f"{Path(config.model or target.name).name}: {ledger.shape.n_ctx} tokens = "
             f"{ledger.shape.n_seq_max} slots x {ledger.shape.n_ctx_seq}, ubatch {ledger.n_ubatch}")
    write_stdout("".join(f"{line}\n" for line in _verdict_lines(verdict, fix))
           + _table(title, ledger, floor=0, slack=None, cache_ram_mib=config.cache_ram_mib, ram=ram,
                    reconstructed=[p.name for p in (target, draft) if p and p.reconstructed],
                    floor_declared=False) + "\n")
    if verdict.unsized and verdict.fits:
        print(f"fleetgate fit: not judged: no size for {', '.join(verdict.unsized)}; expected --card "
              f"{verdict.unsized[0]}=SIZE", file=sys.stderr)
    return verdict.exit_code


def _flag_value(config: Any, *names: str) -> str | None:
    found = [use for uses in config.parsed.uses.values() for use in uses if use.flag in names]
    return found[-1].value if found else None


def _remote_model(config: Any, where: Path) -> str | None:
    """The model a command line downloads at start (-mu URL, -hf REPO -hff FILE): its header is read by range."""
    url = _flag_value(config, "-mu", "--model-url")
    if url:
        return url
    repo = _flag_value(config, "-hf", "-hfr", "--hf-repo")
    if not repo:
        return None
    name, _, quant = repo.partition(":")
    file = _flag_value(config, "-hff", "--hf-file")
    if file:
        return f"hf://{name}/{file}"
    raise InputError(where, None, f"-hf {repo} names a repository{' and a quant' if quant else ''}, not a file (the "
                                  "engine picks one through the Hub's API); expected -hff FILE.gguf, or --profile "
                                  f"hf://{name}/FILE.gguf")


def _cell(device: DeviceLedger, term: str, unit: int) -> str:
    buffers = [b for b in device.buffers if b.term == term]
    if not buffers:
        return "-"
    mark = " e" if any(b.basis == "estimate" for b in buffers) else (
        " c" if any(b.basis == "calibrated" for b in buffers) else "")
    return f"{sum(b.bytes for b in buffers) / unit:.2f}{mark}"


def _blocks(d: DeviceLedger) -> str:
    text = f"{d.blocks[0]}-{d.blocks[-1]}" if d.blocks else "-"
    return text + (" +out" if d.holds_output else "")


def _table(title: str, ledger: Ledger, *, floor: int | None, slack: int | None, cache_ram_mib: int,
           ram: int | None, reconstructed: Sequence[str], floor_declared: bool = True) -> str:
    devices = list(ledger.devices)
    host = ledger.host
    big = max(d.total for d in (*devices, host)) >= GIB or any(d.card.vram_bytes for d in devices)
    unit, unit_name = (GIB, "GiB") if big else (1 << 20, "MiB")

    def fmt(value: int | None) -> str:
        return "-" if value is None else f"{value / unit:.2f}"

    columns = [d.card.shown for d in devices] + ["host RAM"]
    width = max(12, *(len(c) + 2 for c in columns))
    head = max(len(label) for _, label in ROWS) + 2

    def line(label: str, cells: Sequence[str]) -> str:
        return f"  {label:<{head}}" + "".join(f"{c:>{width}}" for c in cells)

    out = [title, line(unit_name, columns), line("blocks", [*map(_blocks, devices), "input"])]
    for term, label in ROWS:
        if any(d.term(term) for d in (*devices, host)):  # type: ignore[arg-type]
            out.append(line(label, [_cell(d, term, unit) for d in (*devices, host)]))
    out.append(line("total", [fmt(d.total) for d in devices] + [fmt(host.total)]))
    grows = any(d.at_health != d.total for d in devices)
    if grows:
        out.append(line("at health", [fmt(d.at_health) for d in devices] + ["-"]))
    if any(d.card.vram_bytes for d in devices):
        out.append(line("card", [fmt(d.card.vram_bytes) for d in devices] + [fmt(ram)]))
        marks = []
        for d in devices:
            free = d.free
            bad = free is not None and free < (floor or 0)
            marks.append("-" if free is None else f"{fmt(free)}{' !' if bad else ''}")
        out.append(line("free", [*marks, ""]))
    cards = ledger.cards
    checks = []
    if floor is not None and cards:
        short = [d.card.shown for d in cards if d.card.vram_bytes is not None and (d.free or 0) < floor]
        checks.append(f"floor {gib(floor)}{'' if floor_declared else ' (none declared)'}: "
                      + ("FAILS on " + ", ".join(short) if short else "ok"))
    if slack is not None and len(cards) > 1:
        gap = max(d.total for d in cards) - min(d.total for d in cards)
        verdict = "ok" if gap <= slack else "FAILS"
        checks.append(f"gap {gib(gap)}, slack {gib(slack)}: {verdict}")
    state = ledger.slot_state
    cap = cache_ram_mib * (1 << 20)
    cache = (f"prompt cache: one slot's state is {fmt(state.total)} {unit_name} (KV {fmt(state.target_kv)}, "
             f"recurrent {fmt(state.recurrent)}, draft {fmt(state.draft)}, checkpoints "
             f"{fmt(state.checkpoints)})\n  --cache-ram {cache_ram_mib} MiB")
    if cache_ram_mib < 0:
        cache += ": unbounded"
    else:
        cache += ": holds it" if cap >= state.total else ": too small, FAILS"
        if ram is not None:
            cache += f"; half the RAM is {gib(ram / 2)}"
    out += ["", *(f"  {c}" for c in checks), f"  {cache}"]
    if grows:
        out += [f"  total = {TOTAL_READING};", "  at health = once /health answers, before any request"]
    out.append("  c = calibrated on a boot, e = estimate (no boot measured it); the rest is derived"
               + (" from a reconstructed profile:" if reconstructed else ""))
    out += [f"      {name}" for name in reconstructed]
    out.append("  host output = the logits buffer; host model = the mapped token embeddings")
    calibrated = sorted({(b.device, b.context, b.source) for d in devices for b in d.buffers
                         if b.basis == "calibrated"})
    for device, context, source in calibrated:
        out.append(f"  {device} {context}: {source}")
    out += [f"  note: {n}" for n in ledger.notes]
    out += _moved_lines(ledger)
    return "\n".join(out)


def _moved_lines(ledger: Ledger) -> list[str]:
    """The tensors the overrides moved, grouped by override and by the devices between which they moved."""
    if not ledger.moved:
        return []
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for m in ledger.moved:
        groups.setdefault((m.override.origin, m.source, m.target), []).append(m)
    out = [f"  tensor overrides moved {len(ledger.moved)} tensors "
           f"({sum(m.nbytes for m in ledger.moved) / (1 << 20):.2f} MiB):"]
    for (origin, source, target), moved in groups.items():
        names = ", ".join(m.tensor for m in moved)
        out.append(f"    {origin}: {len(moved)} from {source} to {target} "
                   f"({sum(m.nbytes for m in moved) / (1 << 20):.2f} MiB): {names}")
    return out


def _sweep_table(title: str, rows: Sequence[SweepRow], current: Sequence[float], floor: int | None,
                 slack: int | None, names: Sequence[str]) -> str:
    first = round(current[0]) if len(current) == 2 else 0
    shown = list(rows)  # the whole range: the split that fits may be far from this one
    limits = [f"floor {gib(floor)}" if floor is not None else "floor 0.00 GiB (none declared)"]
    if slack is not None:
        limits.append(f"slack {gib(slack)}")
    declared = ", ".join(limits)
    out = [title, f"  -ts sweep ({declared}); one step moves one block",
           f"  {'':2}{'-ts':<8}{names[0] + ' free':>13}{names[1] + ' free':>13}{'gap':>9}  verdict"]
    for r in shown:
        fails = [f"floor on {names[i]}" for i, ok in enumerate(r.floor_ok) if not ok]
        if r.slack_ok is False:
            fails.append("slack")
        marker = ">" if r.tensor_split[0] == first else ""
        cells = [f"{r.free[0] / GIB:.2f}{' !' if not r.floor_ok[0] else '  '}",
                 f"{r.free[1] / GIB:.2f}{' !' if not r.floor_ok[1] else '  '}",
                 f"{r.gap / GIB:.2f}{' !' if r.slack_ok is False else '  '}"]
        verdict = "ok" if not fails else "FAILS " + ", ".join(fails)
        out.append(f"  {marker:<2}{r.tensor_split[0]},{r.tensor_split[1]:<5}{cells[0]:>13}{cells[1]:>13}"
                   f"{cells[2]:>9}  {verdict}{'   <- this service' if marker else ''}")
    out.append("  figures in GiB; ! marks a failing gate")
    return "\n".join(out)

