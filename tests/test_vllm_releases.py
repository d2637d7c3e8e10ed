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
from fleetgate.render.rendered import RenderedService, load_service
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


# fleet.toml's pin, each way of writing it: --swap-space went after 0.17.1, --spec-model came in 0.22.0 (the issue's
# cases; with no pin in fleet.toml the Quadlet's radiance image names 0.13.0).
@pytest.mark.parametrize(("engine_build", "edit", "verdict"), [
    (None, SWAP_SPACE, ("passed", "")),
    ('{ image = "vllm/vllm-openai:v0.32.0" }', SWAP_SPACE, (
        "vllm-argv/unknown-flag", "--swap-space is not an option of vLLM 0.32.0; vLLM removed it with no successor "
        "(the V1 engine never swaps KV blocks to CPU memory): drop it (vLLM 0.8.0 to 0.17.1 have it)")),
    ('{ vllm = "0.32.0" }', SWAP_SPACE, (
        "vllm-argv/unknown-flag", "--swap-space is not an option of vLLM 0.32.0; vLLM removed it with no successor "
        "(the V1 engine never swaps KV blocks to CPU memory): drop it (vLLM 0.8.0 to 0.17.1 have it)")),
    ('{ image = "vllm/vllm-openai:v0.32.0" }', SPEC_MODEL, ("passed", "")),
    ('{ image = "vllm/vllm-openai:v0.13.0" }', SPEC_MODEL, (
        "vllm-argv/unknown-flag", "--spec-model is not an option of vLLM 0.13.0 (vLLM 0.22.0 to 0.34.0 have it)")),
], ids=["no-pin", "image-0.32.0-swap-space", "vllm-0.32.0-swap-space", "image-0.32.0-spec-model",
        "image-0.13.0-spec-model"])
def test_fleet_toml_pins_the_release(tmp_path: Path, engine_build: str | None, edit: Edit,
                                     verdict: tuple[str, str]) -> None:
    assert _verdict(_archon(tmp_path, [edit], engine_build)) == verdict


@pytest.mark.parametrize("engine_build", ['{ vllm = "0.7.3" }', '{ image = "vllm/vllm-openai:v0.7.3" }'])
def test_a_pinned_release_without_a_table_is_not_judged(tmp_path: Path, engine_build: str) -> None:
    config = _archon(tmp_path, [SWAP_SPACE], engine_build)
    pinned = ("image vllm/vllm-openai:v0.7.3" if "image" in engine_build
              else f"engine_build ({config.fleet.where('services', 'frank-archon', 'engine_build')})")
    assert _verdict(config) == ("not judged", (
        "not judged: vLLM 0.7.3 has no recorded option table (fleetgate holds every release from 0.8.0 to 0.34.0); "
        "declare the release the service runs, or record it: python -m tools.extract_vllm_args (it reads "
        f"each release's sdist from PyPI); pinned by {pinned}"))


# The releases the issue names that two held tables could not judge: 0.12 and 0.20.
@pytest.mark.parametrize(("engine_build", "edit", "verdict"), [
    ('{ vllm = "0.12.0" }', SWAP_SPACE, ("passed", "")),
    ('{ vllm = "0.20.0" }', SWAP_SPACE, (
        "vllm-argv/unknown-flag", "--swap-space is not an option of vLLM 0.20.0; vLLM removed it with no successor "
        "(the V1 engine never swaps KV blocks to CPU memory): drop it (vLLM 0.8.0 to 0.17.1 have it)")),
    ('{ vllm = "0.20.0" }', SPEC_MODEL, (
        "vllm-argv/unknown-flag", "--spec-model is not an option of vLLM 0.20.0 (vLLM 0.22.0 to 0.34.0 have it)")),
    ('{ image = "vllm/vllm-openai:v0.12.0" }', (ARCHON, '    --max-num-seqs "$MAXSEQS"',
                                                 '    --max-num-seqs "$MAXSEQS"\n    --task embed'), ("passed", "")),
], ids=["0.12.0-swap-space", "0.20.0-swap-space", "0.20.0-spec-model", "image-0.12.0-task"])
def test_every_release_from_0_8_is_judged(tmp_path: Path, engine_build: str, edit: Edit, verdict: tuple[str, str]) -> None:
    assert _verdict(_archon(tmp_path, [edit], engine_build)) == verdict


def test_no_pin_is_judged_by_the_newest_release_and_says_so(tmp_path: Path) -> None:
    """Nothing pins a release (no engine_build, the Quadlet's image not vLLM's or a fork's): the newest release held
    reads the argv, and the failure and the figures say so with how to pin it."""
    from fleetgate.checks import get_check

    config = _archon(tmp_path, [SWAP_SPACE, (QUADLET, "Image=localhost/radiance-vllm:0.13.0-e060895",
                                             "Image=localhost/our-vllm:custom")])
    note = ("vLLM 0.34.0's table, the newest release held: frank-archon pins no vLLM release; pin the release it runs: "
            "services.frank-archon.engine_build = { vllm = \"X.Y.Z\" }, or an image tag that names it "
            "(vllm/vllm-openai:vX.Y.Z)")
    with pytest.raises(Failure) as failure:
        vllm_argv(config)
    assert (failure.value.code, failure.value.expected.endswith(f"read with {note}")) == ("vllm-argv/unknown-flag", True)
    check = get_check("vllm-argv")
    assert check.figures is not None and dict(check.figures(config)) == {"table": note}


def test_a_floating_vllm_tag_says_it_floats(tmp_path: Path) -> None:
    from fleetgate.checks import get_check

    config = _archon(tmp_path, [(QUADLET, "Image=localhost/radiance-vllm:0.13.0-e060895", "Image=vllm/vllm-openai:latest")])
    check = get_check("vllm-argv")
    assert check.figures is not None
    assert dict(check.figures(config)) == {"table": (
        "vLLM 0.34.0's table, the newest release held: frank-archon pulls vllm/vllm-openai:latest, whose tag floats "
        "(the next pull may run another release); pin the release it runs: services.frank-archon.engine_build = "
        "{ vllm = \"X.Y.Z\" }, or an image tag that names it (vllm/vllm-openai:vX.Y.Z)")}


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
# --speculative-config is judged by SpeculativeConfig's fields, a key of another group is taken where the group's
# dataclass has it and not judged where it does not; 0.8.x reads no dotted argument at all.
_ENGRAM = "0.30.0 to 0.34.0"


@pytest.mark.parametrize(("version", "argv", "problems", "unjudged"), [
    ("0.13.0", ["--structured-outputs-config.backend", "xgrammar"], [], []),
    ("0.32.0", ["--structured-outputs-config.backend=xgrammar"], [], []),
    # 0.32.0's CompilationConfig has mode and no longer level (0.13.0's has both)
    ("0.32.0", ["--compilation_config.mode", "3", "--max-num-seqs", "4"], [], []),
    ("0.32.0", ["--compilation_config.level", "3"], [], ["--compilation-config.level"]),
    ("0.13.0", ["-cc.level", "3"], [], []),
    ("0.32.0", ["--compilation-config.no_such_key", "3"], [], ["--compilation-config.no_such_key"]),
    ("0.8.0", ["--compilation-config.level", "3"],
     [("unknown-flag", "--compilation-config.level is not an option of vLLM 0.8.0")], []),
    ("0.32.0", ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens=3"], [], []),
    ("0.13.0", ["--speculative-config.methd", "ngram"],
     [("speculative-config", "'methd' is not a field of SpeculativeConfig in vLLM 0.13.0")], []),
    ("0.13.0", ["--speculative-config.method", "dflash"],
     [("speculative-config", "method 'dflash' is not one of deepseek_mtp, draft_model, eagle, eagle3, ernie_mtp, "
                             "glm4_moe_mtp, longcat_flash_mtp, medusa, mimo_mtp, mlp_speculator, mtp, ngram, "
                             "pangu_ultra_moe_mtp, qwen3_next_mtp, suffix")], []),
    ("0.13.0", ["--engram-config.layers", "4"],
     [("unknown-flag", "--engram-config.layers: --engram-config is not an option of vLLM 0.13.0 (vLLM "
                       f"{_ENGRAM} have it), so it has no keys to set")], []),
    ("0.32.0", ["--engram-config.use_thp", "true"], [], []),
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


def test_a_key_the_groups_dataclass_lacks_is_not_judged(tmp_path: Path) -> None:
    edit = (ARCHON, '    --max-num-seqs "$MAXSEQS"', '    --max-num-seqs "$MAXSEQS"\n'
            "    --structured-outputs-config.bakend xgrammar")
    assert _verdict(_archon(tmp_path, [edit], '{ vllm = "0.32.0" }')) == ("not judged", (
        "not judged: --structured-outputs-config.bakend: vLLM 0.32.0 has the config group --structured-outputs-config, "
        "but its dataclass has no such field, and whether the release refuses an unknown key there is not recorded; "
        "spell the key as the group's dataclass names it (vllm serve --help=<group>)"))


def test_the_issues_dotted_argument_passes_at_both_releases_that_accept_it(tmp_path: Path) -> None:
    edit = (ARCHON, '    --max-num-seqs "$MAXSEQS"', '    --max-num-seqs "$MAXSEQS"\n'
            "    --structured-outputs-config.backend xgrammar")
    assert [_verdict(_archon(tmp_path / v, [edit], f'{{ vllm = "{v}" }}')) for v in ("0.13.0", "0.32.0")] == [
        ("passed", ""), ("passed", "")]


# What vLLM names in place of an option it removed (fleetgate/engines/vllm_successors.json).
@pytest.mark.parametrize(("version", "flag", "message"), [
    ("0.32.0", "--disable-log-requests",
     "--disable-log-requests is not an option of vLLM 0.32.0; vLLM replaced it with --enable-log-requests, inverted: "
     "requests are logged only when that flag is given, so drop --disable-log-requests to keep them unlogged "
     "(vLLM 0.8.0 to 0.16.0 have it)"),
    ("0.13.0", "--task",
     "--task is not an option of vLLM 0.13.0; vLLM replaced it with --runner (generate, pooling) and --convert "
     "(embed, classify, reward): --task embed is --runner pooling --convert embed, a generative --task is dropped "
     "(vLLM 0.8.0 to 0.12.0 have it)"),
    ("0.32.0", "--calculate-kv-scales", "--calculate-kv-scales is not an option of vLLM 0.32.0 (vLLM 0.8.0 to 0.27.1 "
               "have it)"),
])
def test_a_removed_option_names_its_successor(version: str, flag: str, message: str) -> None:
    reading = read_argv(["vllm", "serve", "/m", flag, "embed"] if flag == "--task" else ["vllm", "serve", "/m", flag],
                        load_release(version))
    assert [(p.kind, p.message) for p in reading.problems] == [("unknown-flag", message)]


def test_the_disable_flag_still_parses_at_the_release_that_has_it() -> None:
    assert read_argv(["vllm", "serve", "/m", "--disable-log-requests"], load_release("0.13.0")).problems == []


def test_a_docker_run_image_pins_its_release(tmp_path: Path) -> None:
    """`docker run vllm/vllm-openai:TAG` in a serve script pins the release as fleet.toml's image would."""
    target = tmp_path / "docker-run"
    shutil.copytree(REPO / "fixtures" / "fleets" / "docker-run", target, symlinks=True)
    env = target / "config" / "coder.env"
    env.write_text("\n".join("IMAGE=vllm/vllm-openai:v0.32.0" if line.startswith("IMAGE=") else line
                             for line in env.read_text(encoding="utf-8").splitlines()) + "\n", encoding="utf-8")
    script = target / "scripts" / "run-coder.sh"
    text = script.read_text(encoding="utf-8")
    script.write_text(text[:text.index('  "$IMAGE" \\')] + '  "$IMAGE" \\\n  --model /models/coder --max-num-seqs 4\n',
                      encoding="utf-8")
    manifest = target / "fleet.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('engine = "llama.cpp"', 'engine = "vllm"'),
                        encoding="utf-8")
    fleet = load_fleet(manifest)
    config = load_service(fleet, fleet.services["coder"])
    assert config.service.engine_build is not None
    assert (release_of(config), config.service.engine_build.image) == ("0.32.0", "vllm/vllm-openai:v0.32.0")


def test_a_kubernetes_image_pins_its_release(tmp_path: Path) -> None:
    target = tmp_path / "kubernetes"
    shutil.copytree(REPO / "fixtures" / "fleets" / "kubernetes", target, symlinks=True)
    deployment = target / "deploy" / "vllm" / "deployment.yaml"
    deployment.write_text(deployment.read_text(encoding="utf-8").replace(
        "image: vllm/vllm-openai:v0.13.0", "image: vllm/vllm-openai:v0.32.0"), encoding="utf-8")
    fleet = load_fleet(target / "fleet.toml")
    config = load_service(fleet, fleet.services["qwen"])
    assert config.service.engine_build is not None
    assert (release_of(config), config.service.engine_build.floating) == ("0.32.0", False)


def test_a_release_whose_speculative_schema_is_not_read_leaves_it_not_judged(tmp_path: Path) -> None:
    """0.8.0 to 0.8.4 declare SpeculativeConfig without a method literal: its schema is not recorded, so a
    --speculative-config there is not judged, never refused for want of a method list (the radiance fork's dflash
    included)."""
    assert _verdict(_archon(tmp_path, [], '{ vllm = "0.8.4" }')) == ("not judged", (
        "not judged: --speculative-config: vLLM 0.8.4's SpeculativeConfig declares no annotated fields or no method "
        "literal, so its schema is not recorded; pin a release from 0.8.5 on to have it judged"))
    spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    assert read_argv(["vllm", "serve", "/m", "--speculative-config", spec], load_release("0.8.5")).problems == []


def test_the_extractor_reads_what_the_data_says_of_a_real_sdist(tmp_path: Path) -> None:
    """One release's sdist read again (FLEETGATE_FETCH_SDISTS=1, as CI sets it): its options, speculative schema and
    metrics are what vllm_releases.json holds for it."""
    import json
    import os
    import urllib.request

    from tools import extract_vllm_args

    if os.environ.get("FLEETGATE_FETCH_SDISTS") != "1":
        pytest.skip("FLEETGATE_FETCH_SDISTS=1 is not set: reading vLLM sdists from PyPI is left to CI")
    with urllib.request.urlopen(extract_vllm_args.INDEX, timeout=120) as answer:
        index = json.load(answer)
    found, origin = extract_vllm_args.release_sources("0.8.5", index["releases"]["0.8.5"], tmp_path)
    read = extract_vllm_args.release_table("0.8.5", found, origin)
    release = load_release("0.8.5")
    assert sorted(tuple(o["names"]) for o in read["options"]) == sorted(o.names for o in release.options)
    assert (sorted(read["speculative_config"]["methods"]), {m["name"]: m["type"] for m in read["metrics"]},
            read["dotted"]) == (sorted(release.speculative_methods), dict(release.metrics), release.dotted)
