"""llama-server's argv read as build 11434 reads it -- and checked against the real binary's own parser."""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from fleetgate.engines.llama_builds import load_builds
from fleetgate.engines.llama_help import parse_help
from fleetgate.engines.llamacpp import OPTIONS, _table, context_shape, parse_llama_server
from tests.engine import llama_server_binary


def test_aliases_and_underscores_read_as_one_flag() -> None:
    config = parse_llama_server(["llama-server", "-c", "4096", "--ubatch_size", "256", "-np", "2", "-md", "/d.gguf"])
    assert (config.ctx_size, config.ubatch_size, config.parallel, config.spec_draft_model) == (4096, 256, 2, "/d.gguf")


def test_environment_first_then_the_command_line_wins() -> None:
    env = {"LLAMA_ARG_CTX_SIZE": "8192", "LLAMA_ARG_CACHE_RAM": "1024"}
    config = parse_llama_server(["llama-server", "--ctx-size", "4096"], env)
    assert config.ctx_size == 4096
    assert config.cache_ram_mib == 1024
    use = config.use("cache_ram")
    assert use is not None and use.index is None and use.flag == "LLAMA_ARG_CACHE_RAM"


def test_a_repeated_flag_keeps_its_last_value_but_spec_types_accumulate() -> None:
    config = parse_llama_server(["llama-server", "-c", "1", "-c", "2", "--spec-type", "draft-mtp", "--spec-type", "ngram-mod"])
    assert config.ctx_size == 2
    assert config.spec_types == ("draft-mtp", "ngram-mod")


def test_defaults_of_build_11434() -> None:
    config = parse_llama_server(["llama-server"])
    assert (config.parallel, config.n_slots, config.unified_kv) == (-1, 4, True)
    assert (config.cache_ram_mib, config.ctx_checkpoints, config.batch_size, config.ubatch_size) == (8192, 32, 2048, 512)
    assert config.spec_types == ("none",) and not config.speculative


def test_tensor_split_takes_commas_and_slashes() -> None:
    assert parse_llama_server(["llama-server", "-ts", "36/29"]).tensor_split == (36.0, 29.0)
    assert parse_llama_server(["llama-server", "-ts", "35,30"]).tensor_split == (35.0, 30.0)


def test_flag_positions_point_into_the_engine_argv() -> None:
    argv = ["llama-server", "--model", "/m.gguf", "--cache-ram", "16384"]
    use = parse_llama_server(argv).use("cache_ram")
    assert use is not None and argv[use.index or 0] == "--cache-ram"


@pytest.mark.parametrize(
    ("ctx", "parallel", "unified", "n_ctx", "n_ctx_seq"),
    [
        (393216, 2, False, 393216, 196608),
        (786432, 3, False, 786432, 262144),
        (1000, 1, False, 1024, 1024),  # padded to 256
        (1000, 3, False, 1536, 512),  # each slot padded, the pool rounded to slots x slot
        (4096, -1, True, 4096, 4096),  # -np -1: 4 slots sharing one unified pool
        (8192, 2, True, 8192, 8192),
    ],
)
def test_context_shape_mirrors_llama_context(ctx: int, parallel: int, unified: bool, n_ctx: int, n_ctx_seq: int) -> None:
    argv = ["llama-server", "-c", str(ctx), "-np", str(parallel)] + (["-kvu"] if unified and parallel > 0 else [])
    shape = context_shape(parse_llama_server(argv), None)
    assert shape is not None
    assert (shape.n_ctx, shape.n_ctx_seq, shape.unified) == (n_ctx, n_ctx_seq, unified)


def test_committed_flag_list_is_the_real_binarys() -> None:
    """fleetgate's list of accepted flags equals what build 11434's own --help prints."""
    help_text = subprocess.run([str(llama_server_binary()), "--help"], capture_output=True, text=True,
                               timeout=60, check=False).stdout
    live = parse_help(help_text)
    committed = json.loads(resources.files("fleetgate.engines").joinpath("llama_server_flags.json").read_text())
    assert [o["names"] for o in committed["options"]] == [o["names"] for o in live]
    assert committed["options"] == live


def test_interpreted_options_match_the_binarys_names_and_environment() -> None:
    entries = {name: o for o in json.loads(resources.files("fleetgate.engines").joinpath("llama_server_flags.json")
                                           .read_text())["options"] for name in o["names"]}
    for option in OPTIONS:
        entry = entries[option.names[0]]
        assert set(option.names + option.neg_names) == set(entry["names"]), option.dest
        assert option.takes_value == entry["takes_value"], option.dest
        assert option.env == entry["env"], option.dest


# Each argv, with a model that does not exist: the real binary either stops in its argument parser or
# gets past it to the model load. fleetgate must agree on which.
ORACLE_CASES = [
    ["--ctx-size", "4096"],
    ["--ctx_size", "4096"],
    ["--cache-ram-mib", "5"],
    ["--ctx-size"],
    ["--ctx-size", "abc"],
    ["--top-k", "2.5"],
    ["--temp", "0.7x"],
    ["--temp", "warm"],
    ["-ts", "35,30", "-sm", "layer"],
    ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"],
    ["--no-kv-unified", "-np", "2"],
    ["--metrics", "--slots", "--jinja"],
    ["-md", "/nonexistent-draft.gguf", "--spec-draft-n-max", "x"],
    ["--totally-unknown"],
    # Build 11434 dropped --no-mmap and -dio for --load-mode (10878); -ot's placeholder has spaces in --help.
    ["--no-mmap"],
    ["-dio"],
    ["--load-mode", "none"],
    ["--draft-max", "4"],
    ["--draft-n-max", "4"],
    ["-ot", "exps=CPU"],
]


@pytest.mark.parametrize("args", ORACLE_CASES, ids=[" ".join(a) for a in ORACLE_CASES])
def test_parse_agrees_with_the_real_binary(args: list[str], tmp_path: Path) -> None:
    argv = ["llama-server", "-m", str(tmp_path / "absent.gguf"), "--port", "1", *args]
    done = subprocess.run([str(llama_server_binary()), *argv[1:]], capture_output=True, text=True, timeout=60, check=False)
    output = done.stdout + done.stderr
    engine_rejects = "error: invalid argument" in output or "error while handling" in output
    # Past its argument parser the server starts up (and then fails on the absent model or the port).
    assert engine_rejects or "llama_server: initializing" in output, output[-400:]
    assert bool(parse_llama_server(argv).problems) == engine_rejects, output[-400:]


# --- values: the seam refuses a value exactly when the real llama-server refuses it at start -----------

def _engine_refuses(args: list[str], env: dict[str, str] | None = None) -> bool:
    """Start the real llama-server of build 11434 with a model path that does not exist: it either refuses
    the arguments and exits before loading anything, or gets as far as loading the (absent) model. It runs
    in a network namespace of its own, so nothing it does can listen or connect."""
    binary = llama_server_binary()
    command = ["unshare", "--user", "--map-root-user", "--net", "--", str(binary),
               "-m", "/nonexistent/fleetgate-probe.gguf", "--host", "127.0.0.1", *args]
    done = subprocess.run(command, env={"PATH": "/usr/bin:/bin", **(env or {})}, capture_output=True, timeout=60, check=False)
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    reached_the_model = "failed to load model" in output
    assert done.returncode != 0, output[-2000:]  # the model does not exist: it never serves
    return not reached_the_model


def _seam_refuses(args: list[str], env: dict[str, str] | None = None) -> bool:
    config = parse_llama_server(["llama-server", "-m", "/nonexistent/fleetgate-probe.gguf", "--host", "127.0.0.1", *args], env)
    return bool(config.problems)


def _example_fleet_pairs() -> list[tuple[str, str]]:
    """Every (flag, value) the example fleet's llama.cpp services pass, as rendered."""
    from fleetgate.config import load_service
    from fleetgate.manifest import load_fleet

    fleet = load_fleet(Path(__file__).resolve().parents[1] / "fixtures" / "fleet" / "fleet.toml")
    pairs: list[tuple[str, str]] = []
    for service in fleet.services.values():
        if service.engine != "llama.cpp":
            continue
        config = load_service(fleet, service)
        assert config.llama is not None
        for dest, uses in config.llama.parsed.uses.items():
            if not _table().by_dest[dest].takes_value:
                continue
            for use in uses:
                # Device names depend on the backends of the machine that runs the binary, not on the build.
                if use.index is not None and use.value is not None and use.flag not in DEVICE_FLAGS:
                    pairs.append((use.flag, use.value))
    return sorted(set(pairs))


DEVICE_FLAGS = {"-dev", "--device", "--spec-draft-device", "-devd", "--device-draft"}
# Values that a careless edit produces, for every flag the example fleet uses.
BAD_VALUES = ["abc", "", "99999999999", "-2147483649", "maybe", "1e39", " 7", "7x", "-5", "2.5", "yes", "none,bogus", "bogus,none"]


def _value_cases() -> list[tuple[str, str]]:
    cases = _example_fleet_pairs()
    flags = sorted({flag for flag, _ in cases} - {"-m", "--model", "--mmproj", "--chat-template-file", "--spec-draft-model"})
    cases += [(flag, value) for flag in flags if flag != "--host" for value in BAD_VALUES]
    # Whether a host name resolves is the host's resolver's business; addresses and the empty name are the build's.
    cases += [("--host", value) for value in ("", "127.0.0.1", "0.0.0.0")]
    # A sample of the build's other integer flags (every tenth), with a non-number and an out-of-range number.
    ints = sorted(n for v in load_builds().at(11434) if v.value == "int" and v.removed is None for n in v.all_names)
    sample = [f for f in ints if f.startswith("--")][::10]
    cases += [(flag, value) for flag in sample for value in ("abc", "99999999999", "3")]
    cases += [("--draft", "4"), ("--spec-ngram-mod-n-min", "1025"), ("--spec-ngram-mod-n-max", "-1"), ("-np", "0"),
              ("--reasoning-budget", "-2"), ("--spec-draft-n-max", "-1"), ("-ts", ",".join(["1"] * 16)), ("-ts", "1/2/3"),
              ("--temp", "inf"), ("--temp", "nan"), ("--top-p", "0x1p3"), ("-ngl", "all"), ("-ngl", "auto"), ("-ngl", "al")]
    return cases


@pytest.mark.parametrize(("flag", "value"), _value_cases())
def test_the_seam_refuses_a_value_exactly_when_llama_server_does(flag: str, value: str) -> None:
    assert _seam_refuses([flag, value]) == _engine_refuses([flag, value])


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LLAMA_ARG_FLASH_ATTN", "yes"), ("LLAMA_ARG_FLASH_ATTN", "auto"), ("LLAMA_ARG_THREADS", "abc"), ("LLAMA_ARG_THREADS", "4"),
     ("LLAMA_ARG_TOP_K", "20000000000"), ("LLAMA_ARG_JINJA", "maybe"), ("LLAMA_ARG_JINJA", "off"), ("LLAMA_ARG_CACHE_TYPE_K", ""),
     ("LLAMA_ARG_N_PARALLEL", "0"), ("LLAMA_ARG_SPEC_TYPE", "draft-mtp"), ("LLAMA_ARG_SPEC_TYPE", "mtp")],
)
def test_environment_values_are_refused_exactly_when_llama_server_does(variable: str, value: str) -> None:
    assert _seam_refuses([], {variable: value}) == _engine_refuses([], {variable: value})


@pytest.mark.parametrize(
    ("edits", "code", "details"),
    [
        ([("FLASH_ATTN=on", "FLASH_ATTN=yes"), ("TOP_K=20", "TOP_K=20000000000")], "engine-accepts-argv/refused-value",
         ["--flash-attn: unknown value for --flash-attn: 'yes'", "--top-k: '20000000000' is out of the range of an int"]),
        ([("CACHE_TYPE_K=f16", "CACHE_TYPE_K=")], "engine-accepts-argv/refused-value",
         ["--cache-type-k: unknown value for --cache-type-k: ''"]),
    ],
)
def test_a_value_the_engine_refuses_fails_the_argv_seam_with_its_code(
        tmp_path: Path, edits: list[tuple[str, str]], code: str, details: list[str]) -> None:
    import shutil

    from fleetgate.checks.seam_argv import engine_accepts_argv
    from fleetgate.config import load_service
    from fleetgate.failure import Failure
    from fleetgate.manifest import load_fleet

    fleet_dir = tmp_path / "fleet"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fleet", fleet_dir)
    env = fleet_dir / "scripts" / "frank-medium.env"
    text = env.read_text(encoding="utf-8")
    for old, new in edits:
        assert f"\n{old}\n" in text, old
        text = text.replace(f"\n{old}\n", f"\n{new}\n")
    env.write_text(text, encoding="utf-8")
    fleet = load_fleet(fleet_dir / "fleet.toml")
    config = load_service(fleet, fleet.services["frank-medium"])
    with pytest.raises(Failure) as failure:
        engine_accepts_argv(config)
    assert failure.value.code == code
    assert [d.split("] ", 1)[-1][: len(expected)] for d, expected in zip(failure.value.details, details, strict=True)] == details
