"""``fleetgate init PATH...``: fleet.toml written from the files, then the seams judge it.

On copies of the stranger fleets (fixtures/fleets/unit-exec, unit-script) without their hand-written fleet.toml,
init writes a manifest equal in meaning to the hand-written one, and the seams give the very table
tests/test_fleets.py holds for it. What no file says (the host's RAM and cards) is ``"TODO"``, refused in one line
until declared, or read from a stub nvidia-smi with ``--probe``. Compose files and llama-swap configs are read into
the keys their renderers read (``compose``/``compose_service``, ``llama_swap``/``llama_swap_model``).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from fleetgate.cli import main
from fleetgate.errors import InputError
from fleetgate.fleet import Fleet
from fleetgate.init.probe import parse_vulkaninfo
from fleetgate.manifest import load_fleet
from tests.test_fleets import CLEAN, FLEETS, LLAMA_UNIT_SERVICE, _table
from tests.test_mutations import NOT_JUDGED, SEAMS, SKIPPED, run_seams

# unit-script's engine listens on HOST=0.0.0.0 with no key: the hand-written table's engine-auth finding.
UNIT_SCRIPT_AUTH = CLEAN["unit-script"][("qwen", "engine-auth")]

# What init says after "nothing written": the shapes it reads, and the one next step.
NO_ENGINE_NEXT = ("init reads systemd units and Quadlets (.service, .container), compose files, Kubernetes manifests, "
                  "llama-swap configs, router presets (.ini), NixOS modules (.nix: services.llama-cpp, "
                  "systemd.services), Ansible role templates (.service.j2, llama-swap .yaml.j2) and shell scripts whose "
                  "own lines start llama-server, vllm serve or python -m vllm.entrypoints.openai.api_server (by any "
                  "path, after exec, nohup, setsid or env, in the background too); next: run `fleetgate init "
                  "--from-host SPEC DIR` against the host that runs the engines (local://, ssh://user@host), or declare "
                  "the service in fleet.toml by hand, [services.NAME] with host, port, engine and the file that starts "
                  "it (serve_script, unit, compose, kubernetes, llama_swap or models_preset; docs/sources.md)")

# The host of each hand-written stranger fleet, as its author declared it: what init cannot read from any file.
HOSTS = {
    "unit-exec": 'ram_gib = 32\ndevices = [{ name = "CUDA0", vram_bytes = 25769803776 }]\n',
    "unit-script": 'ram_gib = 64\ndevices = [{ name = "CUDA0", vram_bytes = 24152899584 }]\n',
}
# What init names each fleet's one service (the unit's file name): the hand-written names are the author's choice.
NAMES = {"unit-exec": "llama-chat", "unit-script": "llama-server-unit"}


def _bare(tmp_path: Path, name: str) -> Path:
    """A copy of a stranger fleet without its fleet.toml: what a new user has."""
    target = tmp_path / name
    shutil.copytree(FLEETS / name, target, symlinks=True)
    (target / "fleet.toml").unlink()
    return target


def _init(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["init", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _declare_host(toml: Path, host: str) -> None:
    """The one hand edit: the TODO lines of the host replaced by its RAM and cards."""
    lines = toml.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(("ram_gib = ", "devices = "))]
    at = kept.index("[hosts.localhost]\n") + 1
    toml.write_text("".join([*kept[:at], host, *kept[at:]]), encoding="utf-8")


def _meaning(fleet: Fleet) -> set[tuple[object, ...]]:
    """What a service is, without the names its author chose: ports, engine, payload, the files it points at."""
    def rel(path: Path | None) -> str | None:
        return path.relative_to(fleet.root).as_posix() if path is not None else None

    return {(s.port, s.engine, s.binary, s.state, s.payload, rel(s.unit), rel(s.serve_script), rel(s.env_file),
             len(fleet.hosts[s.host].cards)) for s in fleet.services.values()}


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_init_writes_what_the_hand_written_fleet_says(name: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = _bare(tmp_path, name)
    code, out, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    port = {"unit-exec": 8081, "unit-script": 8080}[name]
    assert out.splitlines()[0] == f"wrote {repo / 'fleet.toml'}: 1 service(s) from 1 units: {NAMES[name]} (llama.cpp, port {port})"
    # Until the host is declared, the manifest is refused in one line naming every TODO, never judged with a guess.
    with pytest.raises(InputError) as refused:
        load_fleet(repo / "fleet.toml")
    assert refused.value.message.startswith(
        'hosts.localhost.ram_gib, hosts.localhost.devices.0.name, hosts.localhost.devices.0.vram_bytes = "TODO": left by '
        "fleetgate init")
    _declare_host(repo / "fleet.toml", HOSTS[name])
    written, hand = load_fleet(repo / "fleet.toml"), load_fleet(FLEETS / name / "fleet.toml")
    assert _meaning(written) == _meaning(hand)
    assert written.deploy_root == hand.deploy_root
    assert written.policies == hand.policies == frozenset()


def test_the_seams_refuse_a_written_fleet_until_its_host_is_declared(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                     pytester: pytest.Pytester) -> None:
    # Run as the user runs it: a usage error (exit 4) naming every TODO at its line, no seam judged with a guess.
    repo = _bare(tmp_path, "unit-script")
    assert _init(capsys, str(repo))[0] == 0
    result = pytester.runpytest_inprocess(str(SEAMS), f"--fleet={repo / 'fleet.toml'}", "-p", "no:cacheprovider",
                                          "--import-mode=importlib")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = next(n for n, text in enumerate((repo / "fleet.toml").read_text().splitlines(), 1) if text.startswith("ram_gib"))
    assert [text for text in result.errlines if text.startswith("ERROR")] == [
        f'ERROR: fleetgate: {repo / "fleet.toml"}:{line}: hosts.localhost.ram_gib, hosts.localhost.devices.0.name, '
        'hosts.localhost.devices.0.vram_bytes = "TODO": left by fleetgate init, which no file could tell; declare each '
        "(the comment above it says how, or run `fleetgate init --probe` on the host)"]
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_the_seams_judge_the_written_fleet_as_the_hand_written_one(name: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   pytester: pytest.Pytester) -> None:
    repo = _bare(tmp_path, name)
    assert _init(capsys, str(repo))[0] == 0
    _declare_host(repo / "fleet.toml", HOSTS[name])
    outcomes, texts = run_seams(pytester, repo / "fleet.toml")
    # unit-exec's DynamicUser=yes is no root engine (unit-user passes there, as in the hand-written table).
    changes = {f"{NAMES[name]}:unit-user": "passed"} if name == "unit-exec" else {}
    if name == "unit-script":
        changes[f"{NAMES[name]}:engine-auth"] = UNIT_SCRIPT_AUTH  # HOST=0.0.0.0, no key, as in the hand-written table
    expected = _table(name, NAMES[name], **changes)
    assert outcomes == expected
    # The same table as the hand-written fleet's, under init's names for the fleet and the service.
    assert len(outcomes) == len(CLEAN[name])
    # the failures of the hand-written fleet too: (unit-script) an engine that runs as root; no profile is not judged
    assert set(texts) == {key for key, outcome in expected.items() if outcome not in ("passed", SKIPPED, NOT_JUDGED)}


def test_a_host_declared_without_cards_skips_exactly_the_check_that_needs_them(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str],
                                                                               pytester: pytest.Pytester) -> None:
    # `devices = []` (what the TODO comment offers for a host without a GPU): device-visibility cannot judge
    # and skips naming hosts.localhost.devices; every other outcome is the hand-written fleet's.
    repo = _bare(tmp_path, "unit-script")
    assert _init(capsys, str(repo))[0] == 0
    _declare_host(repo / "fleet.toml", "ram_gib = 64\ndevices = []\n")
    outcomes, _ = run_seams(pytester, repo / "fleet.toml")
    assert outcomes == _table("unit-script", "llama-server-unit", **{"llama-server-unit:device-visibility": SKIPPED,
                                                                     "llama-server-unit:engine-auth": UNIT_SCRIPT_AUTH})


def _stub(tmp_path: Path, name: str, script: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    tool.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_probe_reads_the_cards_from_nvidia_smi_and_needs_no_hand_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                      pytester: pytest.Pytester,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # What nvidia-smi prints on an L4 for this query (name, MiB).
    calls = tmp_path / "calls"
    for key, value in _stub(tmp_path, "nvidia-smi", f'echo "$@" >> {calls}\necho "NVIDIA L4, 23034"\n').items():
        monkeypatch.setenv(key, value)
    repo = _bare(tmp_path, "unit-script")
    code, out, err = _init(capsys, str(repo), "--probe")
    assert (code, err) == (0, "")
    assert calls.read_text(encoding="utf-8") == "--query-gpu=name,memory.total --format=csv,noheader,nounits\n"
    fleet = load_fleet(repo / "fleet.toml")
    host = fleet.hosts["localhost"]
    assert [(d.name, d.vram_bytes) for d in host.devices] == [("CUDA0", 23034 * 1024 * 1024)]
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    assert abs(host.ram_bytes - mem_kib * 1024) <= 0.05 * (1 << 30) + 1
    assert f"then: cd {repo} && pytest --fleet fleet.toml" in out and "TODO" not in out
    outcomes, _ = run_seams(pytester, repo / "fleet.toml")
    assert outcomes == _table("unit-script", "llama-server-unit", **{"llama-server-unit:engine-auth": UNIT_SCRIPT_AUTH})


def test_without_probe_no_tool_of_the_host_is_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    for key, value in _stub(tmp_path, "nvidia-smi", f"echo ran >> {calls}\n").items():
        monkeypatch.setenv(key, value)
    assert _init(capsys, str(_bare(tmp_path, "unit-exec")))[0] == 0
    assert not calls.exists()


def test_probe_without_a_gpu_tool_says_so_and_leaves_the_cards_todo(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    repo = _bare(tmp_path, "unit-exec")
    code, _, err = _init(capsys, str(repo), "--probe")
    assert code == 0
    assert err == "fleetgate init: --probe: none of nvidia-smi, rocm-smi or vulkaninfo is on PATH; the cards stay TODO\n"
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert data["hosts"]["localhost"]["devices"] == [{"name": "TODO", "vram_bytes": "TODO"}]
    assert isinstance(data["hosts"]["localhost"]["ram_gib"], float)


# --- compose and llama-swap: the written keys (their renderers are built on other branches) ---------------------

COMPOSE = """\
services:
  llama:
    image: ghcr.io/ggml-org/llama.cpp:server-cuda
    command: -m /models/${MODEL_FILE:-qwen3-8b.gguf} --port 8080 --host 0.0.0.0 -c 8192
    ports: ["127.0.0.1:${LLAMA_PORT:-9090}:8080"]
    volumes: ["/srv/models:/models:ro"]
  vllm:
    image: vllm/vllm-openai:v0.13.0
    command: ["--model", "/models/Qwen3-8B", "--port", "8000"]
    ports: ["8001:8000"]
    volumes:
      - type: bind
        source: /srv/hf
        target: /models
  webui:
    image: ghcr.io/open-webui/open-webui:main
    ports: ["3000:8080"]
"""

LLAMA_SWAP = """\
startPort: 10001
macros:
  server: /opt/llama/bin/llama-server --host 127.0.0.1
  models: /srv/models
models:
  qwen:
    cmd: |
      # the big one
      ${server} --port ${PORT}
      -m ${models}/qwen.gguf
  gemma:
    cmd: ${server} --port ${PORT} -m ${models}/gemma.gguf
  fixed:
    cmd: llama-server --port 7000 -m /srv/models/fixed.gguf
    proxy: http://127.0.0.1:7000
"""


def _schema_valid(data: dict[str, object]) -> None:
    schema = json.loads(resources.files("fleetgate").joinpath("schema/fleet.schema.json").read_text(encoding="utf-8"))
    host = {"ram_gib": 64, "devices": [{"name": "CUDA0", "vram_bytes": 1 << 34}]}
    jsonschema.validate({**data, "hosts": {"localhost": host}}, schema)


def test_compose_services_that_run_an_engine_are_written_with_their_published_ports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "compose.yaml").write_text(COMPOSE, encoding="utf-8")
    (repo / "deploy" / ".env").write_text("LLAMA_PORT=9191\n", encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert data["services"] == {
        "llama": {"host": "localhost", "port": 9191, "engine": "llama.cpp", "compose": "deploy/compose.yaml",
                  "compose_service": "llama", "payload": ["/srv/models/qwen3-8b.gguf"]},
        "vllm": {"host": "localhost", "port": 8001, "engine": "vllm", "compose": "deploy/compose.yaml",
                 "compose_service": "vllm", "payload": ["/srv/hf/Qwen3-8B"]},
    }
    _schema_valid(data)
    assert "2 service(s) from 1 compose files" in out


def test_llama_swap_models_get_their_ports_as_llama_swap_assigns_them(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.yaml").write_text(LLAMA_SWAP, encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    # Clients reach every model at llama-swap's own port (its default --listen :8080); the engine's port (7000, or
    # ${PORT} from startPort) is where llama-swap forwards, which the renderer reads from the config itself.
    assert data["services"] == {
        "fixed": {"host": "localhost", "port": 8080, "engine": "llama.cpp", "llama_swap": "config.yaml",
                  "llama_swap_model": "fixed", "payload": ["/srv/models/fixed.gguf"]},
        "gemma": {"host": "localhost", "port": 8080, "engine": "llama.cpp", "llama_swap": "config.yaml",
                  "llama_swap_model": "gemma", "payload": ["/srv/models/gemma.gguf"]},
        "qwen": {"host": "localhost", "port": 8080, "engine": "llama.cpp", "llama_swap": "config.yaml",
                 "llama_swap_model": "qwen", "payload": ["/srv/models/qwen.gguf"]},
    }
    _schema_valid(data)


def test_an_unknown_llama_swap_macro_is_one_line_naming_the_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # llama-swap refuses to start on an unknown macro, so the llama-swap reader refuses the whole config: one line
    # (the reader's, at the cmd's line), and no model of it is written.
    repo = _bare(tmp_path, "unit-exec")
    (repo / "config.yaml").write_text(LLAMA_SWAP + "  broken:\n    cmd: llama-server --port ${PORT} -m ${nope}/x.gguf\n",
                                      encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert code == 3
    assert err == (f"fleetgate init: skipped {repo.resolve() / 'config.yaml'}:17: models.broken.cmd: unknown macro "
                   "${nope}; expected one of: MODEL_ID, PORT, models, server (a macro may use only macros defined "
                   "before it): skipped\n")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert sorted(data["services"]) == ["llama-chat"]


# --- refusals and bad files ---------------------------------------------------------------------------------------


def test_an_existing_fleet_toml_is_never_overwritten_without_force(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    repo = _bare(tmp_path, "unit-exec")
    (repo / "fleet.toml").write_text("# mine\n", encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (2, "")
    assert err == (f"fleetgate: {repo / 'fleet.toml'}: exists; init never overwrites a fleet.toml (pass --force to "
                   "replace it, or --output ANOTHER.toml)\n")
    assert (repo / "fleet.toml").read_text(encoding="utf-8") == "# mine\n"
    assert _init(capsys, str(repo), "--force")[0] == 0
    assert "[services.llama-chat]" in (repo / "fleet.toml").read_text(encoding="utf-8")


def test_output_outside_the_path_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    repo = _bare(tmp_path, "unit-exec")
    for outside in (tmp_path / "fleet.toml", repo / ".." / "elsewhere.toml"):
        code, out, err = _init(capsys, str(repo), "--output", str(outside))
        assert (code, out) == (2, "")
        assert err == (f"fleetgate: {outside}: --output is outside {repo}: init writes only inside the PATH it reads, "
                       "and fleet.toml names its files relative to itself\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit-exec"]
    assert not (repo / "fleet.toml").exists()
    assert _init(capsys, str(repo), "--output", str(repo / "candidate.toml"))[0] == 0
    assert (repo / "candidate.toml").is_file()


def test_a_compose_named_file_that_is_not_yaml_is_one_line_and_init_goes_on(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    repo = _bare(tmp_path, "unit-exec")
    (repo / "docker-compose.yml").write_text("services:\n  llama:\n    image: [unclosed\n    ports: x\n",
                                             encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    assert code == 3
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"fleetgate init: skipped {repo.resolve() / 'docker-compose.yml'}:4: not YAML (")
    assert lines[0].endswith("); expected a compose file or a llama-swap config: skipped")
    assert "[services.llama-chat]" in (repo / "fleet.toml").read_text(encoding="utf-8")
    assert out.startswith(f"wrote {repo / 'fleet.toml'}: 1 service(s)")


def test_a_symlink_out_of_the_path_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "other.service").write_text("[Service]\nExecStart=/usr/bin/llama-server --port 9999 -m /m.gguf\n",
                                           encoding="utf-8")
    repo = _bare(tmp_path, "unit-exec")
    (repo / "systemd" / "other.service").symlink_to(outside / "other.service")
    (repo / "elsewhere").symlink_to(outside, target_is_directory=True)
    code, _, err = _init(capsys, str(repo))
    assert code == 3
    assert err == (f"fleetgate init: skipped {repo.resolve() / 'systemd' / 'other.service'}: a symlink to "
                   f"{outside.resolve() / 'other.service'}, outside {repo.resolve()}: not read\n")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert sorted(data["services"]) == ["llama-chat"]


def test_a_path_with_no_engine_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "empty"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "llama.service").write_text("[Service]\nExecStart=/usr/bin/llama-server --port 1\n", encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    assert (code, out) == (1, "")
    assert err == (f"fleetgate init: no engine (llama-server, vllm) found under {repo} (no unit, compose file or "
                   "llama-swap config); nothing written. " + NO_ENGINE_NEXT + "\n")
    assert not (repo / "fleet.toml").exists()


# A Flux repository's app directory as Flux's docs lay one out: the chart's source and the release that installs it,
# its values inline. Written for this test, modelled on helm.toolkit.fluxcd.io/v2 and source.toolkit.fluxcd.io/v1.
FLUX_RELEASE = """\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: chat
  namespace: inference
spec:
  interval: 30m
  chart:
    spec:
      chart: llama-cpp
      version: "0.4.x"
      sourceRef:
        kind: HelmRepository
        name: llm-charts
        namespace: flux-system
  values:
    image:
      tag: server-cuda-b10867
    model:
      path: /models/Qwen3-8B-Q4_K_M.gguf
    resources:
      limits:
        nvidia.com/gpu: 1
"""
FLUX_SOURCE = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata:
  name: llm-charts
  namespace: flux-system
spec:
  interval: 24h
  url: https://charts.example.org/llm
"""


@pytest.mark.parametrize("with_source", [False, True], ids=["release-alone", "source-beside"])
def test_a_flux_helm_release_alone_is_named_with_the_helm_template_line_and_nothing_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], with_source: bool) -> None:
    # The engine is in what Flux renders, not in the release: "no engine" and --from-host would be the wrong next
    # step, so init names the render and exits 1 (nothing written).
    repo = tmp_path / "gitops"
    (repo / "apps" / "chat").mkdir(parents=True)
    (repo / "apps" / "chat" / "release.yaml").write_text(FLUX_RELEASE, encoding="utf-8")
    if with_source:
        (repo / "apps" / "chat" / "source.yaml").write_text(FLUX_SOURCE, encoding="utf-8")
    code, out, err = _init(capsys, str(repo))
    chart = ("chart llama-cpp of HelmRepository llm-charts" if with_source else
             "chart llama-cpp of HelmRepository llm-charts (URL: HelmRepository llm-charts's spec.url)")
    url = "https://charts.example.org/llm" if with_source else "URL"
    assert (code, out) == (1, "")
    assert err == (
        f"fleetgate init: skipped {repo}/apps/chat/release.yaml: apps/chat/release.yaml:1: HelmRelease chat is "
        f"rendered by Flux from {chart}, which fleetgate does not fetch or render: run `helm template chat llama-cpp "
        f"--repo {url} --version '0.4.x' --namespace inference -f values.yaml > rendered.yaml` (the release's "
        "spec.values as values.yaml) and declare kubernetes = \"rendered.yaml\"\n"
        f"fleetgate init: no engine found in the files init reads under {repo} (no unit, compose file or llama-swap "
        "config); nothing written. next: render what the 1 line(s) above name (a Helm chart, a Flux HelmRelease, a "
        "kustomization) with the command each gives, then run init again: it reads the rendered manifests\n")
    assert not (repo / "fleet.toml").exists()


def test_init_on_the_example_fleet_finds_every_llama_server_and_vllm_it_runs(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # The example fleet: a unit -> script -> llama-server (frank-medium, frank-zealot), a rootless Quadlet -> script
    # -> vllm serve (frank-archon), a serve script no unit starts (the reference). frank-dragoon (halogen) and frank-tts
    # (a shim) run engines init does not know by name: they stay the user's to declare, with `binary =`.
    repo = tmp_path / "fleet"
    shutil.copytree(FLEETS.parent / "fleet", repo, symlinks=True)
    (repo / "fleet.toml").unlink()
    code, out, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    written = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    hand = tomllib.loads((FLEETS.parent / "fleet" / "fleet.toml").read_text(encoding="utf-8"))
    assert written["fleet"]["deploy_root"] == hand["fleet"]["deploy_root"]
    keys = ("port", "engine", "unit", "serve_script", "env_file", "payload")
    expected = {name: {k: hand["services"][name][k] for k in keys if k in hand["services"][name]}
                for name in ("frank-archon", "frank-medium", "frank-zealot", "reference")}
    # frank-medium's argv loads the model and its mmproj; the DFlash drafter it also declares is another arm's.
    expected["frank-medium"]["payload"] = expected["frank-medium"]["payload"][:2]
    expected["serve-reference"] = expected.pop("reference")
    assert {name: {k: v for k, v in s.items() if k in keys} for name, s in written["services"].items()} == expected
    assert "4 service(s) from 5 units, 1 serve scripts" in out


INLINE = """\
[Service]
Environment=MODEL=/srv/models/m.gguf
ExecStart=/bin/bash -c {script}
"""


@pytest.mark.parametrize(("script", "service", "note"), [
    ("'ulimit -l unlimited; exec /opt/llama/bin/llama-server -m \"$MODEL\" --port 8090 --jinja'",
     {"host": "localhost", "port": 8090, "engine": "llama.cpp", "unit": "llm.service", "payload": ["/srv/models/m.gguf"]},
     None),
    ("'exec llama-server -m \"$MODEL --port 8090'", None,
     "llm.service:3: ExecStart= runs bash -c with a script init cannot split (No closing quotation); expected every "
     "quote closed"),
])
def test_a_unit_running_bash_c_is_read_for_the_engine_it_execs(script: str, service: dict[str, object] | None,
                                                               note: str | None, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "llm.service").write_text(INLINE.format(script=script), encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    if service is None:
        assert (code, err) == (1, f"fleetgate init: skipped {repo.resolve()}/{note}\nfleetgate init: no engine "
                               f"(llama-server, vllm) found under {repo} (1 units); nothing written. {NO_ENGINE_NEXT}\n")
        return
    assert (code, err) == (0, "")
    assert tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))["services"] == {"llm": service}


def test_a_second_path_outside_the_first_or_a_first_path_that_is_no_directory_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _bare(tmp_path, "unit-exec")
    code, out, err = _init(capsys, str(repo), str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (f"fleetgate: {tmp_path}: expected a directory inside {repo}, the first PATH (where fleet.toml "
                   "goes)\n")
    unit = repo / "systemd" / "llama-chat.service"
    assert _init(capsys, str(unit)) == (2, "", f"fleetgate: {unit}: expected the repository's directory (fleet.toml is "
                                              "written there)\n")
    assert not (repo / "fleet.toml").exists()
    # A second PATH inside the first narrows the walk to it.
    assert _init(capsys, str(repo), str(repo / "env"))[0] == 1
    assert _init(capsys, str(repo), str(repo / "systemd"))[0] == 0


def test_output_in_a_subdirectory_names_only_the_files_under_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # fleet.toml names files relative to itself and confined to its directory: the env file beside systemd/ is out
    # of its reach, so its variables are unknown and the port is the engine's default, said in one line.
    repo = _bare(tmp_path, "unit-exec")
    code, _, err = _init(capsys, str(repo), "--output", str(repo / "systemd" / "fleet.toml"))
    assert code == 3
    assert err == (f"fleetgate init: skipped {repo.resolve()}/systemd/llama-chat.service:8: EnvironmentFile=/etc/llama/"
                   "env/chat.env is not a file of this repository (under the deploy_root found); its variables are "
                   "unknown to init\n")
    service = tomllib.loads((repo / "systemd" / "fleet.toml").read_text(encoding="utf-8"))["services"]["llama-chat"]
    assert service == {"host": "localhost", "port": 8080, "engine": "llama.cpp", "unit": "llama-chat.service"}


def test_probe_reads_rocm_smi_where_there_is_no_nvidia_smi(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # rocm-smi's --json form for two 32 GiB cards (the figures of the example fleet's R9700s).
    answer = json.dumps({f"card{i}": {"VRAM Total Memory (B)": "34208743424", "VRAM Total Used Memory (B)": "1000"}
                         for i in (0, 1)})
    stub = _stub(tmp_path, "rocm-smi", f"[ \"$*\" = '--showmeminfo vram --json' ] || exit 9\necho '{answer}'\n")
    monkeypatch.setenv("PATH", stub["PATH"].split(os.pathsep)[0] + os.pathsep + "/usr/bin:/bin")
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an nvidia-smi in /usr/bin, which --probe asks first")
    repo = _bare(tmp_path, "unit-exec")
    code, _, err = _init(capsys, str(repo), "--probe")
    assert (code, err) == (0, "")
    fleet = load_fleet(repo / "fleet.toml")
    assert [(d.name, d.vram_bytes) for d in fleet.hosts["localhost"].devices] == [("ROCm0", 34208743424),
                                                                                 ("ROCm1", 34208743424)]


VULKANINFO_DATA = Path(__file__).parent / "data" / "vulkaninfo"


def test_probe_reads_vulkaninfo_where_there_is_neither_smi(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # vulkaninfo on a two-R9700 box with a Raphael iGPU and Mesa's llvmpipe (tests/data/vulkaninfo: the summary whole,
    # the text output cut to each GPU's properties and memory heaps, in the shape Vulkan-Tools' vulkaninfo prints).
    summary, text = VULKANINFO_DATA / "summary.txt", VULKANINFO_DATA / "text.txt"
    stub = _stub(tmp_path, "vulkaninfo", f'case "$*" in\n  --summary) cat {summary} ;;\n  --text) cat {text} ;;\n'
                                          '  *) exit 9 ;;\nesac\n')
    monkeypatch.setenv("PATH", stub["PATH"].split(os.pathsep)[0] + os.pathsep + "/usr/bin:/bin")
    if shutil.which("nvidia-smi") or shutil.which("rocm-smi"):
        pytest.skip("this machine has nvidia-smi or rocm-smi in /usr/bin, which --probe asks first")
    repo = _bare(tmp_path, "unit-exec")
    code, _, err = _init(capsys, str(repo), "--probe")
    assert (code, err) == (0, "")
    fleet = load_fleet(repo / "fleet.toml")
    # llama.cpp's Vulkan backend: the discrete and integrated GPUs in the loader's order, llvmpipe left out; a card's
    # memory is the sum of its device-local heaps (31.61 GiB + 256 MiB on the first card, whose BAR is not resized),
    # an integrated GPU's every heap.
    assert [(d.name, d.vram_bytes) for d in fleet.hosts["localhost"].devices] == [
        ("Vulkan0", 33940307968 + 268435456), ("Vulkan1", 34208743424), ("Vulkan2", 536870912 + 33285996544)]


@pytest.mark.parametrize(("summary", "text", "message"), [
    ("Devices:\n========\n", "", "vulkaninfo --summary: no GPU<N>: section; expected its Devices: list"),
    ("GPU0:\n\tapiVersion = 1.4.305\n", "", "vulkaninfo --summary: GPU0 has no deviceType/deviceName line"),
    ("GPU0:\n\tdeviceType = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\n\tdeviceName = Card\n", "GPU0:\nmemoryHeaps: count = 0\n",
     "vulkaninfo --text: GPU0 (Card) has no memoryHeaps[N]: size = BYTES lines; expected its "
     "VkPhysicalDeviceMemoryProperties"),
])
def test_vulkaninfo_not_in_its_documented_shape_is_one_line(summary: str, text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_vulkaninfo(summary, text)
    assert str(caught.value) == message


# --- every fixture fleet: init, then the seams, against the hand-written fleet's exact table ---------------------

# What init names each fixture fleet's services (the unit's file name, the compose service, the llama-swap model id)
# -> the name the fleet's author chose in the hand-written fleet.toml. The fleet's name is passed with --name.
INIT_NAMES: dict[str, dict[str, str]] = {
    "compose-llama": {"chat": "chat"},
    "compose-include": {"chat": "chat"},
    "compose-vllm": {"vllm": "qwen"},
    "docker-run": {"llama-coder": "coder"},
    "llama-swap": {"qwen2-5-coder-14b": "coder", "llama3-1-8b": "llama", "autocomplete": "autocomplete"},
    "router-preset": {"qwen2-5-coder-14b": "coder", "llama-3-1-8b": "llama", "qwen2-5-coder-1-5b": "autocomplete"},
    "unit-bash-c": {"llama-mistral": "mistral"},
    "unit-exec": {"llama-chat": "chat"},
    "unit-install-env": {"llama": "llama"},
    "unit-script": {"llama-server-unit": "qwen"},
    "kubernetes": {"vllm-qwen": "qwen", "llama-gemma": "gemma"},
    "kubernetes-sharing": {"vllm-chat": "chat", "vllm-coder": "coder"},
    "nixos": {"llama-cpp": "chat", "llama-coder": "coder"},
    "ansible": {"llama-server-unit": "chat", "coder": "coder", "small": "small"},
    "start-scripts": {"start-vllm": "qwen", "start-llama": "gemma"},
    "compose-rocm": {"chat": "chat", "embed": "embed"},
    "compose-router": {"qwen2-5-coder-14b": "coder", "llama-3-1-8b": "llama", "qwen2-5-coder-1-5b": "autocomplete"},
    "kustomize": {"mistral-vllm": "mistral-vllm"},
    "helm-output": {"chat-llama-server": "chat-llama-server"},
    "quadlet": {"llama-chat": "chat", "vllm-qwen": "qwen"},
}
# What init says on stderr for a fixture fleet (it then exits 3: fleet.toml written, some files not read): the chart
# named with the command that renders it, and a model on a PersistentVolumeClaim, which no host path holds.
INIT_ERR = {
    "kubernetes": "fleetgate init: skipped {repo}/charts/chat/Chart.yaml: charts/chat/Chart.yaml belongs to the Helm "
                  "chart charts/chat, which fleetgate does not render: run `helm template RELEASE charts/chat -f "
                  "charts/chat/values.yaml > rendered.yaml` and declare kubernetes = \"rendered.yaml\"\n"
                  "fleetgate init: skipped {repo}/deploy/llama/statefulset.yaml:28: StatefulSet/llama-gemma container "
                  "server: the model /models/gemma-3-12b-it-Q4_K_M.gguf lies on no hostPath volume; payload left out\n",
    # Each kustomization once (not its resources or patches), with the command that builds it; the build's output,
    # kept beside them, is read.
    "kustomize": "".join(
        f"fleetgate init: skipped {{repo}}/deploy/{d}/kustomization.yaml: deploy/{d}/kustomization.yaml is a "
        f"kustomization, which fleetgate does not build: run `kustomize build deploy/{d} > rendered.yaml` (or "
        f"`kubectl kustomize deploy/{d}`) and declare kubernetes = \"rendered.yaml\"\n"
        for d in ("base", "overlays/gpu-node")),
    # The chart once, at its Chart.yaml; its rendered output beside it is read.
    "helm-output": "fleetgate init: skipped {repo}/charts/llama-server/Chart.yaml: charts/llama-server/Chart.yaml "
                   "belongs to the Helm chart charts/llama-server, which fleetgate does not render: run `helm template "
                   "RELEASE charts/llama-server -f charts/llama-server/values.yaml > rendered.yaml` and declare "
                   "kubernetes = \"rendered.yaml\"\n",
}

# Where the written fleet is judged otherwise than the hand-written one, because the hand-written fleet.toml declares
# something no file of the repository says: (subject, check) -> the written fleet's outcome. Each entry says why.
# The only such declarations among the fixture fleets are model profiles (`profile = "profiles/..."`), which the
# ledger issue covers (fitting before the download): no start file names one.
_PROFILE_SEAMS = ("profile-declared", "slot-within-trained-window", "card-floor", "prompt-cache-holds-slot")
WRITTEN_DIFFERS: dict[str, dict[tuple[str, str], str]] = {
    # compose-vllm's qwen declares profiles/qwen3-8b-fp8.toml: without it vllm-starts cannot size the weights
    # against the card and is not judged, naming services.NAME.profile.
    "compose-vllm": {("qwen", "vllm-starts"): NOT_JUDGED},
    # The same for the kubernetes fleet's vLLM Deployment (its profile is declared by hand).
    # init puts both workloads on one host (which node runs a pod is the scheduler's): vllm-start-headroom has a pair
    # to judge, and passes, since the device plugin gives each container its own card.
    "kubernetes": {("qwen", "vllm-starts"): NOT_JUDGED, ("rack", "vllm-start-headroom"): "passed"},
    # The same for the Quadlet fleet's vLLM (its profile is declared by hand).
    "quadlet": {("qwen", "vllm-starts"): NOT_JUDGED},
    "llama-swap": {
        # Each model declares a profile by hand: without one, the ledger's seams judge it as the hand-written
        # no-profile llama.cpp service of tests/test_fleets.py (each of these is not judged, one line) ...
        **{(service, check): LLAMA_UNIT_SERVICE[check] for service in ("coder", "llama", "autocomplete")
           for check in _PROFILE_SEAMS},
        # ... and co-residence-fits cannot sum the autocomplete model beside a chat model: it skips naming the
        # profiles to declare.
        ("workstation", "co-residence-fits"): SKIPPED,
    },
    # The same for the router preset's three models: each hand-written service declares its profile ...
    "router-preset": {
        **{(service, check): LLAMA_UNIT_SERVICE[check] for service in ("coder", "llama", "autocomplete")
           for check in _PROFILE_SEAMS},
        # ... so co-residence-fits cannot sum the three models the router keeps loaded: it skips naming the profiles.
        ("studio", "co-residence-fits"): SKIPPED,
    },
    # The same for the router in compose.
    "compose-router": {
        **{(service, check): LLAMA_UNIT_SERVICE[check] for service in ("coder", "llama", "autocomplete")
           for check in _PROFILE_SEAMS},
        ("lab", "co-residence-fits"): SKIPPED,
    },
}


def _hand_host(name: str) -> str:
    """The hand-written fleet's one host, as TOML lines: what init leaves TODO (the test's one hand edit)."""
    hosts = tomllib.loads((FLEETS / name / "fleet.toml").read_text(encoding="utf-8"))["hosts"]
    # init writes one host; a fleet of several nodes with the same cards (kubernetes) is judged on its first.
    host = next(iter(hosts.values()))
    devices = ", ".join(f'{{ name = "{d["name"]}", vram_bytes = {d["vram_bytes"]} }}' for d in host["devices"])
    return f"ram_gib = {host['ram_gib']}\ndevices = [{devices}]\n"


def test_every_fixture_fleet_is_compared() -> None:
    assert sorted(INIT_NAMES) == sorted(CLEAN) == sorted(p.name for p in FLEETS.iterdir() if p.is_dir())
    assert set(WRITTEN_DIFFERS) <= set(CLEAN)


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_init_then_the_seams_give_the_hand_written_fleets_table(name: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 pytester: pytest.Pytester) -> None:
    repo = _bare(tmp_path, name)
    fleet_name = tomllib.loads((FLEETS / name / "fleet.toml").read_text(encoding="utf-8"))["fleet"]["name"]
    code, _, err = _init(capsys, str(repo), "--name", fleet_name)
    assert (code, err) == (3 if name in INIT_ERR else 0, INIT_ERR.get(name, "").format(repo=repo)), err
    written = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert sorted(written["services"]) == sorted(INIT_NAMES[name])
    _declare_host(repo / "fleet.toml", _hand_host(name))
    outcomes, texts = run_seams(pytester, repo / "fleet.toml")
    renamed = {(INIT_NAMES[name].get(subject, subject), check): outcome for (subject, check), outcome in outcomes.items()}
    expected = {**CLEAN[name], **WRITTEN_DIFFERS.get(name, {})}
    assert renamed == expected
    for text in texts.values():
        assert "Traceback" not in text


# -- the port clients reach, read from what starts the process in front (issue 32) ---------------------------------

def test_llama_swaps_listen_address_in_its_unit_is_every_models_port(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.yaml").write_text(LLAMA_SWAP, encoding="utf-8")
    (repo / "llama-swap.service").write_text(
        "[Unit]\nDescription=llama-swap\n\n[Service]\n"
        "ExecStart=/usr/local/bin/llama-swap --config /etc/llama-swap/config.yaml --listen 0.0.0.0:10434\n"
        "Restart=always\n\n[Install]\nWantedBy=multi-user.target\n", encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    text = (repo / "fleet.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    assert {name: service["port"] for name, service in data["services"].items()} == {
        "fixed": 10434, "gemma": 10434, "qwen": 10434}
    assert "port = 10434  # llama-swap's --listen in llama-swap.service:5" in text
    _schema_valid(data)


def test_the_routers_port_and_models_max_come_from_its_unit_and_the_router_is_no_service(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "systemd").mkdir(parents=True)
    (repo / "models.ini").write_text("version = 1\n\n[*]\nn-gpu-layers = 99\nc = 8192\n\n"
                                     "[qwen3-8b]\nmodel = /srv/models/Qwen3-8B-Q4_K_M.gguf\n\n"
                                     "[gemma-3-4b]\nmodel = /srv/models/gemma-3-4b-it-Q4_K_M.gguf\n", encoding="utf-8")
    (repo / "systemd" / "llama-server.service").write_text(
        "[Service]\nExecStart=/opt/llama.cpp/build/bin/llama-server --models-preset /etc/llama.cpp/models.ini "
        "--host 0.0.0.0 --port 8081 --models-max 3\n", encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert data["services"] == {
        "gemma-3-4b": {"host": "localhost", "port": 8081, "engine": "llama.cpp", "models_preset": "models.ini",
                       "preset_model": "gemma-3-4b", "models_max": 3,
                       "payload": ["/srv/models/gemma-3-4b-it-Q4_K_M.gguf"]},
        "qwen3-8b": {"host": "localhost", "port": 8081, "engine": "llama.cpp", "models_preset": "models.ini",
                     "preset_model": "qwen3-8b", "models_max": 3, "payload": ["/srv/models/Qwen3-8B-Q4_K_M.gguf"]},
    }
    _schema_valid(data)


def test_a_router_in_compose_is_no_service_and_its_models_get_its_published_port_models_max_and_mounts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compose-router's container runs llama-server --models-preset /etc/llama/models.ini --models-max 2 --port 8080,
    published on 127.0.0.1:${ROUTER_PORT:-9090}, the preset bind-mounted from llama/models.ini and the models from
    /data/gguf. The .env sets ROUTER_PORT=9091 here and the container keeps 3: both are read."""
    repo = _bare(tmp_path, "compose-router")
    (repo / ".env").write_text("ROUTER_PORT=9091\n", encoding="utf-8")
    compose = (repo / "compose.yaml").read_text(encoding="utf-8")
    (repo / "compose.yaml").write_text(compose.replace('- "2"', '- "3"'), encoding="utf-8")
    code, _, err = _init(capsys, str(repo), "--name", "lab")
    assert (code, err) == (0, "")
    text = (repo / "fleet.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    shared = {"host": "localhost", "port": 9091, "engine": "llama.cpp", "models_preset": "llama/models.ini",
              "models_max": 3}
    assert data["services"] == {
        "qwen2-5-coder-14b": {**shared, "preset_model": "qwen2.5-coder-14b",
                              "payload": ["/data/gguf/Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf"]},
        "llama-3-1-8b": {**shared, "preset_model": "llama-3.1-8b",
                         "payload": ["/data/gguf/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"]},
        "qwen2-5-coder-1-5b": {**shared, "preset_model": "qwen2.5-coder-1.5b",
                               "payload": ["/data/gguf/qwen2.5-coder-1.5b-q8_0.gguf"]},
    }
    assert "port = 9091  # the router's published port in compose.yaml:5" in text
    _schema_valid(data)


ROUTER_SCRIPT = ("#!/bin/bash\ncd \"$(dirname \"$0\")\"\nexec /opt/llama.cpp/build/bin/llama-server --models-preset "
                 "./{preset} --models-max 2 --host 127.0.0.1 --port 8077\n")


def test_a_router_a_plain_script_starts_is_no_service_and_gives_its_models_its_port_and_models_max(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(FLEETS / "compose-router" / "llama" / "models.ini", repo / "models.ini")
    (repo / "start-router.sh").write_text(ROUTER_SCRIPT.format(preset="models.ini"), encoding="utf-8")
    code, _, err = _init(capsys, str(repo), "--name", "rs")
    assert (code, err) == (0, "")
    text = (repo / "fleet.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    assert {name: (s["port"], s["models_max"], s["preset_model"]) for name, s in data["services"].items()} == {
        "qwen2-5-coder-14b": (8077, 2, "qwen2.5-coder-14b"), "llama-3-1-8b": (8077, 2, "llama-3.1-8b"),
        "qwen2-5-coder-1-5b": (8077, 2, "qwen2.5-coder-1.5b")}
    assert text.count("port = 8077  # the router's --port in start-router.sh\n") == 3
    _schema_valid(data)


def test_a_router_on_a_preset_the_repository_lacks_is_one_line_and_no_service(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "start-router.sh").write_text(ROUTER_SCRIPT.format(preset="presets.ini"), encoding="utf-8")
    code, _, err = _init(capsys, str(repo), "--name", "rs")
    assert code == 1 and not (repo / "fleet.toml").exists()
    assert (f"fleetgate init: skipped {repo}/start-router.sh: start-router.sh starts llama-server as a router on the preset "
            "./presets.ini, which is no file of the repository: its models are not read (keep the preset in the "
            "repository, or declare each model as a service)\n") in err


def test_a_compose_service_named_llama_server_gets_its_published_port_and_a_name_fit_reads_as_a_service(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # fleet.toml's port is where clients reach the engine: the host side of "9292:8080" (docs/sources.md, compose)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "docker-compose.yml").write_text(
        "services:\n  llama-server:\n    image: ghcr.io/ggml-org/llama.cpp:server-rocm\n"
        "    ports:\n      - \"9292:8080\"\n    devices:\n      - /dev/kfd\n      - /dev/dri\n"
        "    group_add:\n      - video\n      - render\n    volumes:\n      - /srv/models:/models:ro\n"
        "    command: -m /models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf -ngl 99\n", encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    toml = repo / "fleet.toml"
    data = tomllib.loads(toml.read_text(encoding="utf-8"))
    assert data["services"] == {
        "llama-server-compose": {"host": "localhost", "port": 9292, "engine": "llama.cpp",
                                 "compose": "docker-compose.yml", "compose_service": "llama-server",
                                 "payload": ["/srv/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"]}}
    # The false class: the name init wrote, handed to `fleetgate fit`, is the service, never an engine command
    # line (exit 2). The user's next steps first: the host filled in, and the model's profile declared (here the
    # llama-swap fixture's profile of the same GGUF, as `fleetgate profile` would write it on the host).
    _declare_host(toml, 'ram_gib = 64\ndevices = [{ name = "ROCm0", vram_bytes = 25753026560 }]\n')
    (repo / "profiles").mkdir()
    shutil.copy(FLEETS / "llama-swap" / "profiles" / "llama-3.1-8b-instruct-q4_k_m.toml", repo / "profiles")
    text = toml.read_text(encoding="utf-8").replace(
        'payload = ["/srv/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"]\n',
        'payload = ["/srv/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"]\n'
        'profile = "profiles/llama-3.1-8b-instruct-q4_k_m.toml"\n')
    toml.write_text(text, encoding="utf-8")
    code = main(["fit", "llama-server-compose", "--fleet", str(toml)])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    # No -c, -np, -ctk/-ctv, -ub or -ts in the command: llama-server's defaults, each its own reading of the argv --
    # the trained context (131072, the profile's n_ctx_train) over 4 automatic slots sharing one unified KV cache,
    # f16 K and V, a 512-token micro-batch, the split by free memory.
    assert out.splitlines()[0] == ("llama-server-compose on localhost: 131072 tokens = 4 slots x 131072 (unified KV), "
                                   "K/V f16/f16, ubatch 512, -ts by free memory")


# Plain start scripts no unit starts, as repositories write them: each is a service with serve_script, its port and
# model as the render (in the sandbox, the engine stubbed) gives them.
PLAIN_SCRIPTS = {
    "start-vllm.sh": ('#!/usr/bin/env bash\nset -euo pipefail\nVENV="${VENV:-/opt/vllm/.venv}"\nnvidia-smi -L\n'
                      'nohup "$VENV/bin/vllm" serve Qwen/Qwen3-8B --port 8010 > /var/log/vllm.log 2>&1 &\n'
                      'echo "vLLM started"\n'),
    "run_api.sh": ("#!/bin/bash\nsource /opt/venv/bin/activate 2>/dev/null || true\n"
                   "exec python3 -m vllm.entrypoints.openai.api_server --model /models/qwen --port 8011\n"),
    "launch.sh": ('#!/bin/bash\ncd "$(dirname "$0")"\n'
                  "./llama.cpp/build/bin/llama-server -m /models/m.gguf --port 8012 &\nwait\n"),
}


def test_plain_start_scripts_are_found_with_their_port(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "scripts"
    repo.mkdir()
    for name, text in PLAIN_SCRIPTS.items():
        (repo / name).write_text(text, encoding="utf-8")
    code, _, err = _init(capsys, str(repo))
    assert (code, err) == (0, "")
    data = tomllib.loads((repo / "fleet.toml").read_text(encoding="utf-8"))
    assert {name: (s["engine"], s["port"], s["serve_script"], s.get("payload"))
            for name, s in data["services"].items()} == {
        "start-vllm": ("vllm", 8010, "start-vllm.sh", None),
        "run-api": ("vllm", 8011, "run_api.sh", ["/models/qwen"]),
        "launch": ("llama.cpp", 8012, "launch.sh", ["/models/m.gguf"]),
    }
