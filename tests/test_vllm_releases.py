"""vLLM releases judged exactly (issue 33): the release a service pins (fleet.toml, compose, Quadlet image tags and
``engine_build = { vllm }``), a pinned release with no recorded table not judged, vLLM's dotted config arguments,
and the successor vLLM names for an option it removed or renamed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetgate.checks import NotJudged
from fleetgate.checks.seam_vllm_argv import release_of, vllm_argv
from fleetgate.engines.vllm import image_release, load_release, read_argv
from fleetgate.errors import InputError
from fleetgate.failure import Failure
from fleetgate.manifest import load_fleet
from fleetgate.rendered import RenderedService, load_service
from fleetgate.sources.docker_run import engine_of_image
from tests.fleet_edits import Edit, edited_fleet

REPO = Path(__file__).resolve().parents[1]
ARCHON = "dankserver/frank-archon/serve-frank-archon.sh"
ARCHON_DECLARE = 'serve_script = "dankserver/frank-archon/serve-frank-archon.sh"'
QUADLET = "dankserver/frank-archon/quadlet/frank-archon.container"
SWAP_SPACE = (ARCHON, '    --max-num-seqs "$MAXSEQS"', '    --max-num-seqs "$MAXSEQS"\n    --swap-space 4')
SPEC_MODEL = (ARCHON, '    --max-num-seqs "$MAXSEQS"', '    --max-num-seqs "$MAXSEQS"\n    --spec-model /models/drafter')


def _archon(tmp_path: Path, edits: list[Edit], engine_build: str | None = None) -> RenderedService:
    if engine_build is not None:
        edits = [*edits, ("fleet.toml", ARCHON_DECLARE, f"{ARCHON_DECLARE}\nengine_build = {engine_build}")]
    fleet = load_fleet(edited_fleet(tmp_path, edits))
    return load_service(fleet, fleet.services["frank-archon"])


def _verdict(config: RenderedService) -> tuple[str, str]:
    try:
        vllm_argv(config)
    except Failure as failure:
        assert failure.code is not None
        return failure.code, str(failure.observed)
    except NotJudged as reason:
        return "not judged", str(reason)
    return "passed", ""


@pytest.mark.parametrize(("image", "release"), [
    ("vllm/vllm-openai:v0.32.0", "0.32.0"),
    ("vllm/vllm-openai:0.32.0", "0.32.0"),
    ("docker.io/vllm/vllm-openai:v0.13.0", "0.13.0"),
    ("vllm/vllm-openai:v0.8.5.post1", "0.8.5.post1"),
    ("vllm/vllm-openai:v0.11.0-cu128", "0.11.0"),
    ("vllm/vllm-openai-rocm:v0.32.0", "0.32.0"),
    ("vllm/vllm-cpu:v0.32.0", "0.32.0"),
    ("vllm/vllm-openai:v0.32.0@sha256:" + "0" * 64, "0.32.0"),
    ("vllm/vllm-openai:latest", None),
    ("vllm/vllm-openai:nightly", None),
    ("vllm/vllm-openai", None),
    ("localhost/radiance-vllm:0.13.0-e060895", None),  # a fork's local tag: not vLLM's own image
    ("ghcr.io/ggml-org/llama.cpp:server-b6300", None),
])
def test_the_release_an_image_tag_pins(image: str, release: str | None) -> None:
    assert image_release(image) == release


def test_vllm_cpu_images_run_vllm_serve() -> None:
    assert (engine_of_image("vllm/vllm-cpu:v0.32.0"), engine_of_image("vllm/vllm-openai-rocm:latest"),
            engine_of_image("vllm/vllm-proxy:v1")) == ("vllm", "vllm", None)


# fleet.toml's pin, each way of writing it: --swap-space is 0.13.0's alone, --spec-model 0.32.0's alone.
@pytest.mark.parametrize(("engine_build", "edit", "verdict"), [
    (None, SWAP_SPACE, ("passed", "")),
    ('{ image = "vllm/vllm-openai:v0.32.0" }', SWAP_SPACE, (
        "vllm-argv/unknown-flag", "--swap-space is not an option of vLLM 0.32.0; vLLM removed it with no successor "
        "(the V1 engine never swaps KV blocks to CPU memory): drop it (vLLM 0.13.0 has it)")),
    ('{ vllm = "0.32.0" }', SWAP_SPACE, (
        "vllm-argv/unknown-flag", "--swap-space is not an option of vLLM 0.32.0; vLLM removed it with no successor "
        "(the V1 engine never swaps KV blocks to CPU memory): drop it (vLLM 0.13.0 has it)")),
    ('{ image = "vllm/vllm-openai:v0.32.0" }', SPEC_MODEL, ("passed", "")),
    ('{ image = "vllm/vllm-openai:v0.13.0" }', SPEC_MODEL, (
        "vllm-argv/unknown-flag", "--spec-model is not an option of vLLM 0.13.0 (vLLM 0.32.0 has it)")),
], ids=["no-pin", "image-0.32.0-swap-space", "vllm-0.32.0-swap-space", "image-0.32.0-spec-model",
        "image-0.13.0-spec-model"])
def test_fleet_toml_pins_the_release(tmp_path: Path, engine_build: str | None, edit: Edit,
                                     verdict: tuple[str, str]) -> None:
    assert _verdict(_archon(tmp_path, [edit], engine_build)) == verdict


@pytest.mark.parametrize("engine_build", ['{ vllm = "0.20.0" }', '{ image = "vllm/vllm-openai:v0.20.0" }'])
def test_a_pinned_release_without_a_table_is_not_judged(tmp_path: Path, engine_build: str) -> None:
    config = _archon(tmp_path, [SWAP_SPACE], engine_build)
    pinned = ("image vllm/vllm-openai:v0.20.0" if "image" in engine_build
              else f"engine_build ({config.fleet.where('services', 'frank-archon', 'engine_build')})")
    assert _verdict(config) == ("not judged", (
        "not judged: vLLM 0.20.0 has no recorded option table; declare a recorded release (0.13.0, 0.32.0) or record "
        "it: python -m fleetgate.engines.vllm_wheel vllm-0.20.0-*.whl > fleetgate/engines/vllm_release_0.20.0.json "
        f"(pip download --no-deps vllm==0.20.0 gives the wheel); pinned by {pinned}"))


@pytest.mark.parametrize(("engine_build", "message"), [
    ('{ image = "vllm/vllm-openai:v0.32.0", vllm = "0.13.0" }',
     "services.frank-archon.engine_build: the image tag pins vLLM 0.32.0 but vllm = '0.13.0'; expected one release "
     "(drop vllm, or the tag's release)"),
    ('{ vllm = "0.32.0", version = "0.13.0" }',
     "services.frank-archon.engine_build: vllm = '0.32.0' but version = '0.13.0'; expected one release (drop version)"),
])
def test_two_releases_in_one_pin_are_one_line(tmp_path: Path, engine_build: str, message: str) -> None:
    edits = [("fleet.toml", ARCHON_DECLARE, f"{ARCHON_DECLARE}\nengine_build = {engine_build}")]
    path = edited_fleet(tmp_path, edits)
    with pytest.raises(InputError) as error:
        load_fleet(path)
    line = path.read_text(encoding="utf-8").splitlines().index(f"engine_build = {engine_build}") + 1
    assert str(error.value) == f"{path}:{line}: {message}"


def test_a_quadlet_running_vllms_image_pins_its_release(tmp_path: Path) -> None:
    config = _archon(tmp_path, [(QUADLET, "Image=localhost/radiance-vllm:0.13.0-e060895",
                                 "Image=vllm/vllm-openai:v0.32.0")])
    assert config.service.engine_build is not None
    assert (release_of(config), config.service.engine_build.image) == ("0.32.0", "vllm/vllm-openai:v0.32.0")


def test_a_compose_image_pins_its_release(tmp_path: Path) -> None:
    target = tmp_path / "compose-vllm"
    shutil.copytree(REPO / "fixtures" / "fleets" / "compose-vllm", target, symlinks=True)
    compose = target / "compose.yaml"
    compose.write_text(compose.read_text(encoding="utf-8").replace(
        "image: vllm/vllm-openai:v0.13.0", "image: vllm/vllm-cpu:v0.32.0"), encoding="utf-8")
    fleet = load_fleet(target / "fleet.toml")
    config = load_service(fleet, fleet.services["qwen"])
    assert config.service.engine_build is not None
    assert (release_of(config), config.service.engine_build.floating) == ("0.32.0", False)


# vLLM's dotted config arguments: merged into the group's JSON; the group must be the release's, a key of
# --speculative-config is judged by SpeculativeConfig's fields, a key of another group is not judged.
@pytest.mark.parametrize(("version", "argv", "problems", "unjudged"), [
    ("0.13.0", ["--structured-outputs-config.backend", "xgrammar"], [], ["--structured-outputs-config.backend"]),
    ("0.32.0", ["--structured-outputs-config.backend=xgrammar"], [], ["--structured-outputs-config.backend"]),
    ("0.32.0", ["--compilation_config.level", "3", "--max-num-seqs", "4"], [], ["--compilation-config.level"]),
    ("0.13.0", ["-cc.level", "3"], [], ["-cc.level"]),
    ("0.32.0", ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens=3"], [], []),
    ("0.13.0", ["--speculative-config.methd", "ngram"],
     [("speculative-config", "'methd' is not a field of SpeculativeConfig in vLLM 0.13.0")], []),
    ("0.13.0", ["--speculative-config.method", "dflash"],
     [("speculative-config", "method 'dflash' is not one of ngram, medusa, mlp_speculator, draft_model, suffix, eagle, "
                             "eagle3, deepseek_mtp, mimo_mtp, glm4_moe_mtp, ernie_mtp, qwen3_next_mtp, "
                             "longcat_flash_mtp, mtp, pangu_ultra_moe_mtp")], []),
    ("0.13.0", ["--engram-config.layers", "4"],
     [("unknown-flag", "--engram-config.layers: --engram-config is not an option of vLLM 0.13.0 (vLLM 0.32.0 has it), "
                       "so it has no keys to set")], []),
    ("0.32.0", ["--engram-config.layers", "4"], [], ["--engram-config.layers"]),
    ("0.32.0", ["--max-model-len.value", "4"],
     [("bad-value", '--max-model-len.value: --max-model-len is not a config group of vLLM 0.32.0 (vLLM reads the keys '
                    'as --max-model-len {"value": 4}, and expects an integer (or 25.6k, 1M, 2Gi-style))')], []),
    ("0.32.0", ["--compilation-config.level"],
     [("missing-value", "--compilation-config.level expects a value")], []),
])
def test_dotted_config_arguments(version: str, argv: list[str], problems: list[tuple[str, str]],
                                 unjudged: list[str]) -> None:
    reading = read_argv(["vllm", "serve", "/m", *argv], load_release(version))
    assert ([(p.kind, p.message) for p in reading.problems], reading.unjudged) == (problems, unjudged)


def test_a_key_of_a_group_whose_fields_are_not_recorded_is_not_judged(tmp_path: Path) -> None:
    edit = (ARCHON, '    --max-num-seqs "$MAXSEQS"', '    --max-num-seqs "$MAXSEQS"\n'
            "    --structured-outputs-config.backend xgrammar")
    assert _verdict(_archon(tmp_path, [edit], '{ vllm = "0.32.0" }')) == ("not judged", (
        "not judged: --structured-outputs-config.backend: vLLM 0.32.0 has the config group "
        "--structured-outputs-config, but its recorded table lists the fields of --speculative-config alone, so the "
        "key is not judged; give the setting as a flag of its own where the release has one, or record the group's "
        "fields beside the release's table"))


# What vLLM names in place of an option it removed (fleetgate/engines/vllm_successors.json).
@pytest.mark.parametrize(("version", "flag", "message"), [
    ("0.32.0", "--disable-log-requests",
     "--disable-log-requests is not an option of vLLM 0.32.0; vLLM replaced it with --enable-log-requests, inverted: "
     "requests are logged only when that flag is given, so drop --disable-log-requests to keep them unlogged "
     "(vLLM 0.13.0 has it)"),
    ("0.13.0", "--task",
     "--task is not an option of vLLM 0.13.0; vLLM replaced it with --runner (generate, pooling) and --convert "
     "(embed, classify, reward): --task embed is --runner pooling --convert embed, a generative --task is dropped"),
    ("0.32.0", "--calculate-kv-scales", "--calculate-kv-scales is not an option of vLLM 0.32.0 (vLLM 0.13.0 has it)"),
])
def test_a_removed_option_names_its_successor(version: str, flag: str, message: str) -> None:
    reading = read_argv(["vllm", "serve", "/m", flag, "embed"] if flag == "--task" else ["vllm", "serve", "/m", flag],
                        load_release(version))
    assert [(p.kind, p.message) for p in reading.problems] == [("unknown-flag", message)]


def test_the_disable_flag_still_parses_at_the_release_that_has_it() -> None:
    assert read_argv(["vllm", "serve", "/m", "--disable-log-requests"], load_release("0.13.0")).problems == []
