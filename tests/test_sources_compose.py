"""A compose service read the way compose reads it (fleetgate/sources/compose.py), against the compose specification.

Interpolation (compose-spec 12-interpolation.md), environment / env_file precedence, command and entrypoint, the
images' own entrypoints (llama.cpp's .devops/cuda.Dockerfile and tools.sh, vLLM's docker/Dockerfile), ports, bind
mounts and GPU grants; and every bad input as one line naming the file, the line and what was expected.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.sources.compose import ComposeService, Grant, PortMap, interpolate, read_compose

ENV = {"SET": "x", "EMPTY": "", "PORT": "8081"}


@pytest.mark.parametrize(("text", "expected"), [
    ("${SET}", "x"), ("$SET", "x"), ("a${SET}b", "axb"), ("$SET-y", "x-y"),
    ("${UNSET}", ""), ("$UNSET", ""),
    # :- on unset or empty, - on unset only
    ("${UNSET:-d}", "d"), ("${EMPTY:-d}", "d"), ("${SET:-d}", "x"),
    ("${UNSET-d}", "d"), ("${EMPTY-d}", ""), ("${SET-d}", "x"),
    # :+ when set and non-empty, + when set
    ("${SET:+alt}", "alt"), ("${EMPTY:+alt}", ""), ("${UNSET:+alt}", ""),
    ("${SET+alt}", "alt"), ("${EMPTY+alt}", "alt"), ("${UNSET+alt}", ""),
    # ? only refuses when it has to
    ("${SET:?msg}", "x"), ("${EMPTY?msg}", ""),
    # $$ is a dollar; defaults nest
    ("a$$b", "a$b"), ("$${SET}", "${SET}"), ("${UNSET:-${PORT}}", "8081"), ("${UNSET:-${ALSO:-z}}", "z"),
    ("${UNSET:-a:b}", "a:b"),
])
def test_interpolation_is_compose_s(text: str, expected: str) -> None:
    assert interpolate(text, ENV, "c.yaml", 3) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("${UNSET:?set UNSET}", "UNSET is not set: set UNSET"),
    ("${EMPTY:?no}", "EMPTY is empty: no"),
    ("${UNSET?}", "UNSET is not set: required variable"),
    ("${SET", "never closed"),
    ("${SET:-x", "never closed"),
    ("${SET%x}", "no compose substitution"),
    ("cost $5", "starts no variable"),
])
def test_a_refused_interpolation_is_one_line_at_its_line(text: str, why: str) -> None:
    with pytest.raises(InputError) as caught:
        interpolate(text, ENV, "c.yaml", 3)
    message = str(caught.value)
    assert message.splitlines() == [message]
    assert message.startswith("c.yaml:3: ") and why in message


FLEET = """[fleet]
name = "f"
deploy_root = "/opt/f"
[hosts.h]
ram_gib = 8
devices = [{{ name = "CUDA0", vram_bytes = 25769803776 }}, {{ name = "CUDA1", vram_bytes = 25769803776 }}]
[services.chat]
host = "h"
port = 8081
engine = "{engine}"
compose = "compose.yaml"
{extra}
"""


def _read(tmp_path: Path, compose: str, *, engine: str = "llama.cpp", extra: str = "",
          files: dict[str, str] | None = None) -> ComposeService:
    (tmp_path / "fleet.toml").write_text(FLEET.format(engine=engine, extra=extra), encoding="utf-8")
    (tmp_path / "compose.yaml").write_text(compose, encoding="utf-8")
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    fleet = load_fleet(tmp_path / "fleet.toml")
    return read_compose(fleet, fleet.services["chat"])


def _refused(tmp_path: Path, compose: str, **kwargs: object) -> tuple[int | None, str]:
    with pytest.raises(InputError) as caught:
        _read(tmp_path, compose, **kwargs)  # type: ignore[arg-type]
    error = caught.value
    assert str(error).splitlines() == [str(error)], "one line"
    assert error.path.name in ("compose.yaml", ".env", "llama.env"), error.path
    return error.line, error.message


SERVER = "services:\n  chat:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda\n"


def test_dotenv_quotes_comments_and_interpolation(tmp_path: Path) -> None:
    read = _read(tmp_path, SERVER + "    command: [-m, /m/$A, --alias, '${B}', -c, '${C}', --api-key, '${D}']\n",
                 files={".env": "# a comment\nexport A=one.gguf # trailing comment\nB='${A} kept'\nC=\"4096\"\n"
                                "D=\"k\\\"ey ${C} \\$C\"\n"})
    assert read.argv == ("llama-server", "-m", "/m/one.gguf", "--alias", "${A} kept", "-c", "4096", "--api-key",
                         'k"ey 4096 $C')
    # A string command is interpolated first, then split: a quote a value brings in is a quote of the command line.
    split = _read(tmp_path, SERVER + "    command: --alias ${B}\n")
    assert split.argv == ("llama-server", "--alias", "${A}", "kept")
    assert read.project["A"].where == f"{tmp_path / '.env'}:2"


def test_the_host_environment_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FROM_SHELL", "/x.gguf")
    read = _read(tmp_path, SERVER + "    command: [-m, '${FROM_SHELL:-/default.gguf}', --alias, $ONLY_SHELL]\n")
    assert read.argv == ("llama-server", "-m", "/default.gguf", "--alias", "")
    assert read.unset == ("ONLY_SHELL",)


def test_environment_wins_over_env_file_and_the_image_sets_the_host(tmp_path: Path) -> None:
    read = _read(tmp_path, SERVER + (
        "    env_file:\n      - a.env\n      - path: missing.env\n        required: false\n"
        "    environment:\n      LLAMA_ARG_CTX_SIZE: 8192\n      LLAMA_ARG_JINJA: true\n      FROM_SHELL:\n"),
        files={"a.env": "LLAMA_ARG_CTX_SIZE=4096\nLLAMA_ARG_ALIAS=chat\n"})
    assert {k: o.value for k, o in read.env.items()} == {
        "LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_CTX_SIZE": "8192", "LLAMA_ARG_ALIAS": "chat", "LLAMA_ARG_JINJA": "true"}
    assert (read.env["LLAMA_ARG_CTX_SIZE"].via, read.env["LLAMA_ARG_ALIAS"].via) == ("environment", "env_file")
    listed = _read(tmp_path, SERVER + "    env_file: a.env\n    environment:\n      - LLAMA_ARG_ALIAS=x=y\n      - BARE\n")
    assert {k: o.value for k, o in listed.env.items()}["LLAMA_ARG_ALIAS"] == "x=y" and "BARE" not in listed.env


@pytest.mark.parametrize(("service", "argv"), [
    # the server image's entrypoint is /app/llama-server: command is its arguments
    ("    image: ghcr.io/ggml-org/llama.cpp:server-cuda\n    command: '-m /m/a.gguf --alias \"two words\"'\n",
     ("llama-server", "-m", "/m/a.gguf", "--alias", "two words")),
    ("    image: ghcr.io/ggml-org/llama.cpp:server\n    command: [-m, /m/a.gguf, -c, 4096]\n",
     ("llama-server", "-m", "/m/a.gguf", "-c", "4096")),
    # the full image runs tools.sh: --server (or -s) starts llama-server with the rest
    ("    image: ghcr.io/ggml-org/llama.cpp:full-cuda\n    command: --server -m /m/a.gguf\n",
     ("llama-server", "-m", "/m/a.gguf")),
    ("    image: ghcr.io/ggml-org/llama.cpp:full-cuda-b10867\n    command: [-s, -m, /m/a.gguf]\n",
     ("llama-server", "-m", "/m/a.gguf")),
    # entrypoint: replaces the image's
    ("    image: local/llama\n    entrypoint: /llama-server\n    command: -m /m/a.gguf\n", ("llama-server", "-m", "/m/a.gguf")),
    ("    image: ghcr.io/ggml-org/llama.cpp:server-cuda\n    entrypoint: [/app/llama-server, --jinja]\n"
     "    command: >\n      -m /m/a.gguf\n      -c 8192\n", ("llama-server", "--jinja", "-m", "/m/a.gguf", "-c", "8192")),
])
def test_command_and_entrypoint(tmp_path: Path, service: str, argv: tuple[str, ...]) -> None:
    assert _read(tmp_path, "services:\n  chat:\n" + service).argv == argv


@pytest.mark.parametrize(("service", "argv"), [
    ("    image: vllm/vllm-openai:v0.13.0\n    command: --model /m/q --port 8000\n",
     ("vllm", "serve", "--model", "/m/q", "--port", "8000")),
    ("    image: vllm/vllm-openai:latest\n    command: [/m/q, --max-model-len, '8192']\n",
     ("vllm", "serve", "/m/q", "--max-model-len", "8192")),
    ("    image: vllm/vllm-openai:v0.8.5\n    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
     "    command: --model /m/q\n", ("vllm", "serve", "--model", "/m/q")),
])
def test_the_vllm_image_runs_vllm_serve(tmp_path: Path, service: str, argv: tuple[str, ...]) -> None:
    assert _read(tmp_path, "services:\n  chat:\n" + service, engine="vllm").argv == argv


def test_the_image_tag_gives_the_engine_build(tmp_path: Path) -> None:
    pinned = _read(tmp_path, "services:\n  chat:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b10867\n")
    floating = _read(tmp_path, SERVER)
    vllm = _read(tmp_path, "services:\n  chat:\n    image: vllm/vllm-openai:v0.13.0\n", engine="vllm")
    assert pinned.engine_build is not None and pinned.engine_build.number == 10867
    assert floating.engine_build is not None and (floating.engine_build.number, floating.engine_build.floating) == (None, True)
    assert vllm.engine_build is not None and vllm.engine_build.version == "0.13.0"
    line, message = _refused(tmp_path, "services:\n  chat:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b10867\n",
                             extra="engine_build = { number = 10901 }")
    assert (line, message.split(";")[0]) == (3, "image ghcr.io/ggml-org/llama.cpp:server-cuda-b10867 pins build 10867 "
                                                 "but fleet.toml's engine_build number = 10901")


def test_ports_short_and_long(tmp_path: Path) -> None:
    read = _read(tmp_path, SERVER + (
        "    ports:\n      - 8080\n      - '8081:8080'\n      - 127.0.0.1:9000:9001/udp\n      - '[::1]:7000:7001'\n"
        "      - target: 8002\n        published: '8003'\n        host_ip: 0.0.0.0\n"))
    assert [(p.target, p.published, p.host_ip, p.protocol) for p in read.ports] == [
        (8080, None, None, "tcp"), (8080, 8081, None, "tcp"), (9001, 9000, "127.0.0.1", "udp"),
        (7001, 7000, "::1", "tcp"), (8002, 8003, "0.0.0.0", "tcp")]
    assert read.published(8080) == PortMap(8080, 8081, None, "tcp", f"{tmp_path / 'compose.yaml'}:6")
    assert _read(tmp_path, SERVER + "    network_mode: host\n").host_network


def test_bind_mounts_map_container_paths_to_host_paths(tmp_path: Path) -> None:
    read = _read(tmp_path, SERVER + (
        "    volumes:\n      - /srv/models:/models:ro\n      - ./templates:/models/templates\n      - cache:/root/.cache\n"
        "      - ~/.cache/huggingface:/root/.cache/huggingface\n"
        "      - type: bind\n        source: /data\n        target: /data\n      - type: volume\n        source: v\n"
        "        target: /v\n"))
    assert [(m.source, m.target) for m in read.mounts] == [
        ("/srv/models", "/models"), ("/opt/f/templates", "/models/templates"), ("/data", "/data")]
    assert read.host_path("/models/a.gguf") == "/srv/models/a.gguf"
    assert read.host_path("/models/templates/chat.jinja") == "/opt/f/templates/chat.jinja"  # the deepest mount
    assert read.host_path("/root/.cache/x") is None


@pytest.mark.parametrize(("service", "indices", "how"), [
    ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
     "            - {driver: nvidia, count: 1, capabilities: [gpu]}\n", (0,), "devices[0]"),
    ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
     "            - {driver: nvidia, device_ids: ['1'], capabilities: [gpu]}\n", (1,), "devices[0]"),
    ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
     "            - {driver: nvidia, count: all, capabilities: [gpu]}\n", None, "count: all"),
    ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
     "            - {capabilities: [gpu]}\n", None, "every card"),
    ("    gpus: all\n", None, "gpus: all"),
    ("    gpus:\n      - device_ids: ['0', '1']\n", (0, 1), "gpus[0]"),
    ("    runtime: nvidia\n", None, "runtime: nvidia"),
    ("    runtime: nvidia\n    environment:\n      NVIDIA_VISIBLE_DEVICES: '1'\n", (1,), "NVIDIA_VISIBLE_DEVICES=1"),
])
def test_which_cards_the_container_gets(tmp_path: Path, service: str, indices: tuple[int, ...] | None, how: str) -> None:
    grant = _read(tmp_path, SERVER + service).gpus
    assert isinstance(grant, Grant) and grant.indices == indices and how in grant.how


def test_no_grant_is_no_gpu(tmp_path: Path) -> None:
    assert _read(tmp_path, SERVER).gpus is None
    other = _read(tmp_path, SERVER + "    deploy:\n      resources:\n        reservations:\n          devices:\n"
                  "            - {driver: foo, count: 1, capabilities: [tpu]}\n")
    assert other.gpus is None


def test_merge_keys_and_anchors(tmp_path: Path) -> None:
    read = _read(tmp_path, "x-gpu: &gpu\n  deploy:\n    resources:\n      reservations:\n        devices:\n"
                 "          - {count: 1, capabilities: [gpu]}\nservices:\n  chat:\n    <<: *gpu\n"
                 "    image: ghcr.io/ggml-org/llama.cpp:server-cuda\n")
    assert read.gpus is not None and read.gpus.indices == (0,)


def test_compose_service_names_another_service(tmp_path: Path) -> None:
    read = _read(tmp_path, "services:\n  llm:\n    image: ghcr.io/ggml-org/llama.cpp:server\n",
                 extra='compose_service = "llm"')
    assert (read.name, read.line) == ("llm", 3)


# Bad input: one line naming the file, the line and what was expected.
def test_not_yaml(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, "services:\n  chat:\n    image: [unclosed\n    command: x\n")
    assert line == 4 and message.startswith("not YAML (") and "expected a compose file" in message


def test_no_such_compose_service(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, "name: p\nservices:\n  web:\n    image: nginx\n  db:\n    image: pg\n")
    assert (line, message) == (3, "no compose service 'chat'; expected one of: web, db (set compose_service in fleet.toml)")


# include: and extends: (compose-spec 14-include.md, 05-services.md extends, 13-merge.md)
def _values(read: ComposeService) -> dict[str, str]:
    return {key: origin.value for key, origin in read.env.items()}


def test_include_short_form_joins_the_services_of_another_project(tmp_path: Path) -> None:
    read = _read(tmp_path, "include:\n  - llm/compose.yaml\nservices:\n  web:\n    image: nginx\n", files={
        "llm/compose.yaml": SERVER + "    env_file: llm.env\n    command: [-m, '/models/${MODEL}']\n"
                            "    volumes:\n      - ./models:/models\n    ports: ['8081:8080']\n",
        "llm/llm.env": "LLAMA_ARG_CTX_SIZE=4096\n", "llm/.env": "MODEL=a.gguf\n"})
    assert read.argv == ("llama-server", "-m", "/models/a.gguf")
    assert _values(read) == {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_CTX_SIZE": "4096"}
    # relative paths are the included file's own directory's; where a value was set is the included file's line
    assert [(m.source, m.target) for m in read.mounts] == [("/opt/f/llm/models", "/models")]
    assert (read.path, read.line) == (tmp_path / "llm" / "compose.yaml", 3)
    assert read.ports == (PortMap(8080, 8081, None, "tcp", f"{tmp_path / 'llm' / 'compose.yaml'}:8"),)
    assert read.project["MODEL"].where == f"{tmp_path / 'llm' / '.env'}:1"


def test_include_long_form_later_files_override_and_project_directory_holds_relative_paths(tmp_path: Path) -> None:
    read = _read(tmp_path, (
        "include:\n  - path: [stack/base.yaml, stack/gpu.yaml]\n    project_directory: run\n"
        "    env_file: stack/vars.env\n"), files={
        "stack/base.yaml": SERVER + "    command: [-m, '/models/${MODEL}', -c, '4096']\n    env_file: tuning.env\n"
                                    "    environment:\n      LLAMA_ARG_N_PARALLEL: '1'\n",
        "stack/gpu.yaml": "services:\n  chat:\n    command: [-m, '/models/${MODEL}', -ngl, '99']\n"
                          "    environment:\n      - LLAMA_ARG_N_PARALLEL=2\n      - LLAMA_ARG_FLASH_ATTN=on\n",
        "stack/vars.env": "MODEL=b.gguf\n", "run/tuning.env": "LLAMA_ARG_BATCH=512\n"})
    assert read.argv == ("llama-server", "-m", "/models/b.gguf", "-ngl", "99")
    assert _values(read) == {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_BATCH": "512", "LLAMA_ARG_N_PARALLEL": "2",
                             "LLAMA_ARG_FLASH_ATTN": "on"}
    assert read.env["LLAMA_ARG_N_PARALLEL"].where == f"{tmp_path / 'stack' / 'gpu.yaml'}:5"


def test_the_including_project_s_variables_win_over_an_included_env(tmp_path: Path) -> None:
    read = _read(tmp_path, "include:\n  - llm/compose.yaml\n", files={
        ".env": "MODEL=main.gguf\n", "llm/.env": "MODEL=included.gguf\nCTX=2048\n",
        "llm/compose.yaml": SERVER + "    command: [-m, '/m/${MODEL}', -c, '${CTX}']\n"})
    assert read.argv == ("llama-server", "-m", "/m/main.gguf", "-c", "2048")


def test_extends_in_the_same_file_merges_as_compose_does(tmp_path: Path) -> None:
    read = _read(tmp_path, (
        "services:\n  base:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b10867\n"
        "    command: [-m, /m/base.gguf, -c, '8192']\n    environment:\n      LLAMA_ARG_N_PARALLEL: '1'\n"
        "      LLAMA_ARG_JINJA: 'true'\n    ports: ['8081:8080', '9090:9090']\n"
        "    volumes: [/srv/a:/models, /srv/cache:/cache]\n"
        "    deploy:\n      resources:\n        reservations:\n          devices:\n"
        "            - {driver: nvidia, device_ids: ['0'], capabilities: [gpu]}\n"
        "  chat:\n    extends: base\n    command: [-m, /m/chat.gguf]\n"
        "    environment:\n      - LLAMA_ARG_N_PARALLEL=4\n      - LLAMA_ARG_JINJA\n"
        "    ports: ['8081:8080', '8082:8080']\n    volumes: ['/srv/b:/models:ro']\n"
        "    deploy:\n      resources:\n        limits:\n          memory: 8g\n"))
    assert read.argv == ("llama-server", "-m", "/m/chat.gguf")  # command replaced, not appended
    # environment merged key by key; a bare KEY takes the shell's value (unknown), so the base's is gone too
    assert _values(read) == {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_N_PARALLEL": "4"}
    # ports appended, the same entry once; volumes one per target, the later in the earlier's place
    assert [(p.published, p.target) for p in read.ports] == [(8081, 8080), (9090, 9090), (8082, 8080)]
    assert [(m.source, m.target) for m in read.mounts] == [("/srv/b", "/models"), ("/srv/cache", "/cache")]
    assert read.gpus is not None and read.gpus.indices == (0,)  # deploy merged key by key
    assert (read.line, read.engine_build and read.engine_build.number) == (16, 10867)


def test_extends_of_another_file_keeps_that_file_s_relative_paths(tmp_path: Path) -> None:
    read = _read(tmp_path, "services:\n  chat:\n    extends:\n      file: common/llm.yaml\n      service: llm\n"
                 "    env_file: chat.env\n", files={
                     "common/llm.yaml": SERVER.replace("chat", "llm") + "    env_file: base.env\n    command: [-m, '/models/${MODEL}']\n"
                                                 "    volumes: [./models:/models]\n",
                     "common/base.env": "LLAMA_ARG_CTX_SIZE=4096\nLLAMA_ARG_ALIAS=base\n",
                     "chat.env": "LLAMA_ARG_ALIAS=chat\n", ".env": "MODEL=c.gguf\n"})
    # the extended file is interpolated with the extending project's variables
    assert read.argv == ("llama-server", "-m", "/models/c.gguf")
    assert _values(read) == {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_ALIAS": "chat"}
    assert read.env["LLAMA_ARG_CTX_SIZE"].where == f"{tmp_path / 'common' / 'base.env'}:1"
    assert [(m.source, m.target) for m in read.mounts] == [("/opt/f/common/models", "/models")]


def test_a_chain_of_extends_is_followed(tmp_path: Path) -> None:
    read = _read(tmp_path, "services:\n  chat:\n    extends: mid\n    command: [-m, /m/a.gguf]\n"
                 "  mid:\n    extends: {file: base.yaml, service: gpu}\n    environment: {LLAMA_ARG_CTX_SIZE: '2048'}\n",
                 files={"base.yaml": "services:\n  gpu:\n    extends: image\n    runtime: nvidia\n"
                                     "  image:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
                                     "    environment: {LLAMA_ARG_CTX_SIZE: '1024', LLAMA_ARG_FA: 'on'}\n"})
    assert read.argv == ("llama-server", "-m", "/m/a.gguf")
    assert _values(read) == {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_FA": "on"}
    assert read.gpus is not None and read.gpus.how.startswith("runtime: nvidia")


def _refused_at(tmp_path: Path, compose: str, files: dict[str, str]) -> str:
    with pytest.raises(InputError) as caught:
        _read(tmp_path, compose, files=files)
    assert str(caught.value).splitlines() == [str(caught.value)], "one line"
    return str(caught.value).replace(str(tmp_path) + "/", "")


def test_a_missing_included_file_is_one_line(tmp_path: Path) -> None:
    assert _refused_at(tmp_path, "include:\n  - llm/missing.yaml\n", {}) == (
        "compose.yaml:2: include[0]: llm/missing.yaml: no such file (looked for llm/missing.yaml); expected a "
        f"compose file of the repository, relative to {tmp_path}")


def test_an_included_file_outside_the_repository_by_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "llm.yaml").write_text(SERVER, encoding="utf-8")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "llm.yaml").symlink_to(outside / "llm.yaml")
    message = _refused_at(repo, "include:\n  - path: llm.yaml\n", {})
    assert message == (f"compose.yaml:2: include[0].path: llm.yaml resolves outside the fleet repository "
                       f"({outside / 'llm.yaml'}); expected a compose file of the repository")


def test_an_include_cycle_is_one_line(tmp_path: Path) -> None:
    message = _refused_at(tmp_path, "include:\n  - a/a.yaml\nservices: {}\n", {
        "a/a.yaml": "include:\n  - ../b.yaml\nservices: {}\n", "b.yaml": "include:\n  - a/a.yaml\nservices: {}\n"})
    assert message == ("b.yaml:2: include[0]: a/a.yaml: an include cycle (compose.yaml -> a/a.yaml -> b.yaml -> "
                       "a/a.yaml); expected included files that do not include the file back")


def test_an_extends_cycle_is_one_line(tmp_path: Path) -> None:
    message = _refused_at(tmp_path, "services:\n  chat:\n    extends: {file: base.yaml, service: a}\n", {
        "base.yaml": "services:\n  a:\n    extends: b\n  b:\n    extends: {file: base.yaml, service: a}\n"})
    assert message == ("base.yaml:3: services.a.extends: a cycle (compose.yaml:chat -> base.yaml:a -> base.yaml:b -> "
                       "base.yaml:a); expected extends that end at a service which extends none")


def test_a_service_defined_by_the_file_and_an_included_one_is_refused(tmp_path: Path) -> None:
    message = _refused_at(tmp_path, "include:\n  - llm.yaml\n" + SERVER, {"llm.yaml": SERVER + "    command: [-c, '1']\n"})
    assert message == ("compose.yaml:5: services.chat: defined here and in llm.yaml:3, which include: brings in; "
                       "expected one definition of each service (compose: services.chat conflicts with imported "
                       "resource)")
    # the same definition twice (two included files that include one common file) is one service
    read = _read(tmp_path, "include:\n  - a.yaml\n  - b.yaml\n", files={
        "a.yaml": "include: [common.yaml]\nservices: {}\n", "b.yaml": "include: [common.yaml]\nservices: {}\n",
        "common.yaml": SERVER})
    assert (read.path, read.argv) == (tmp_path / "common.yaml", ("llama-server",))


@pytest.mark.parametrize(("compose", "files", "expected"), [
    ("services:\n  chat:\n    extends: {file: nope.yaml, service: llm}\n", {},
     "compose.yaml:3: services.chat.extends.file: nope.yaml: no such file (looked for nope.yaml); expected a compose "
     "file of the repository, relative to ."),
    ("services:\n  chat:\n    extends: {file: base.yaml, service: llm}\n", {"base.yaml": "services:\n  web: {}\n"},
     "compose.yaml:3: services.chat.extends: no service 'llm' in base.yaml; expected one of: web"),
    ("services:\n  chat:\n    extends: llm\n  web:\n    image: nginx\n", {},
     "compose.yaml:3: services.chat.extends: no service 'llm' in compose.yaml; expected one of: web"),
    ("services:\n  chat:\n    extends: {file: base.yaml}\n", {},
     "compose.yaml:3: services.chat.extends: no service; expected service: NAME (and file: FILE)"),
    ("include: llm.yaml\n", {}, "compose.yaml:1: include: expected a list of files, got the str 'llm.yaml'"),
])
def test_extends_and_include_that_compose_refuses(tmp_path: Path, compose: str, files: dict[str, str],
                                                  expected: str) -> None:
    message = _refused_at(tmp_path, compose, files)
    assert message == expected.replace("relative to .", f"relative to {tmp_path}")


def test_an_env_file_outside_the_repository(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, SERVER + "    env_file:\n      - ../../etc/llama.env\n")
    assert line == 5 and message.startswith("env_file ../../etc/llama.env: resolves outside the fleet repository")
    assert message.endswith("expected a file of the repository (relative to the compose file)")


def test_a_required_env_file_that_is_missing(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, SERVER + "    env_file: llama.env\n")
    assert line == 4 and message.startswith("env_file llama.env: no such file")


def test_a_required_variable_unset(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, SERVER + "    command:\n      - -m\n      - /models/${MODEL:?set MODEL in .env}\n",
                             files={".env": "OTHER=1\n"})
    assert line == 6 and message.startswith("${MODEL:?set MODEL in .env}: MODEL is not set: set MODEL in .env; expected "
                                            "MODEL in the .env file beside the compose file")


def test_a_required_variable_of_another_service_refuses_too(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, SERVER + "  web:\n    image: nginx:${NGINX_TAG:?pin the tag}\n")
    assert line == 5 and message.startswith("${NGINX_TAG:?pin the tag}: NGINX_TAG is not set")


def test_a_command_that_is_neither_string_nor_list(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, SERVER + "    command:\n      model: /m/a.gguf\n")
    assert (line, message) == (5, "services.chat.command: expected a string or a list of arguments, got a mapping")


def test_an_unterminated_quote_in_a_string_command(tmp_path: Path) -> None:
    line, message = _refused(tmp_path, SERVER + "    command: -m /m/a.gguf --alias \"chat\n")
    assert line == 4 and message.startswith("services.chat.command: No closing quotation")
    assert "expected a command line with every quote closed" in message


def test_a_bad_dotenv_line(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        _read(tmp_path, SERVER, files={".env": "A=1\nnot an assignment\n"})
    assert (caught.value.path.name, caught.value.line) == (".env", 2)
    assert caught.value.message == "'not an assignment': expected KEY=VALUE (a compose env file)"


@pytest.mark.parametrize(("service", "line", "start"), [
    ("    image: ghcr.io/ggml-org/llama.cpp:full-cuda\n    command: -m /m/a.gguf\n", 4,
     "services.chat: the ghcr.io/ggml-org/llama.cpp:full-cuda image runs /app/tools.sh"),
    ("    image: ghcr.io/ggml-org/llama.cpp:light-cuda\n", 3,
     "services.chat: fleetgate does not know the entrypoint of image ghcr.io/ggml-org/llama.cpp:light-cuda"),
    ("    image: ghcr.io/ggml-org/llama.cpp:server\n    entrypoint: [/bin/sh, -c, 'exec llama-server']\n", 4,
     "services.chat: the container runs /bin/sh -c exec llama-server; expected llama-server itself"),
    ("    image: ghcr.io/ggml-org/llama.cpp:server\n    ports:\n      - '8080-8081:8080'\n", 5,
     "services.chat.ports[0]: the port range 8080-8081"),
    ("    image: ghcr.io/ggml-org/llama.cpp:server\n    deploy:\n      resources:\n        reservations:\n"
     "          devices:\n            - {driver: nvidia, count: 1}\n", 8,
     "services.chat.deploy.resources.reservations.devices[0]: no capabilities"),
])
def test_a_start_fleetgate_cannot_read_says_so(tmp_path: Path, service: str, line: int, start: str) -> None:
    got_line, message = _refused(tmp_path, "services:\n  chat:\n" + service)
    assert got_line == line and message.startswith(start), message


def test_a_broken_compose_file_is_that_service_s_finding_not_a_traceback(tmp_path: Path) -> None:
    from fleetgate.render.rendered import attempt_service

    (tmp_path / "fleet.toml").write_text(FLEET.format(engine="llama.cpp", extra=""), encoding="utf-8")
    (tmp_path / "compose.yaml").write_text("services: [\n", encoding="utf-8")
    fleet = load_fleet(tmp_path / "fleet.toml")
    attempt = attempt_service(fleet, fleet.services["chat"])
    assert attempt.config is None and attempt.broken is not None
    assert str(attempt.broken).startswith(f"{tmp_path / 'compose.yaml'}:2: not YAML (")


def test_fleetgate_render_names_the_compose_service_and_its_image(capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.cli import main

    fleet = Path(__file__).resolve().parents[1] / "fixtures" / "fleets" / "compose-llama" / "fleet.toml"
    assert main(["render", "chat", "--fleet", str(fleet)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "# chat: docker/compose.yaml (compose service chat, image ghcr.io/ggml-org/llama.cpp:server-cuda-b10867)",
        "llama-server \\", "    -m /models/gemma-3-12b-it-Q4_K_M.gguf \\", "    -ngl 99 \\", "    -np 2 \\",
        "    --port 8080"]
    assert main(["render", "chat", "--json", "--fleet", str(fleet)]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    # where each value was set: the .env beside the compose file, the env_file, environment: (which wins)
    assert inputs["MODEL_FILE"]["where"].endswith("docker/.env:2")
    assert inputs["LLAMA_ARG_ALIAS"]["where"].endswith("docker/llama.env:4")
    assert inputs["LLAMA_ARG_CTX_SIZE"]["value"] == "16384"
    assert inputs["LLAMA_ARG_CTX_SIZE"]["where"].endswith("docker/compose.yaml:14")


def test_a_finding_names_the_env_line_that_set_the_value(pytester: pytest.Pytester, tmp_path: Path) -> None:
    import shutil

    from tests.test_mutations import run_seams

    fleet = tmp_path / "compose-vllm"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fleets" / "compose-vllm", fleet)
    dotenv = fleet / ".env"
    dotenv.write_text(dotenv.read_text(encoding="utf-8").replace("MAX_MODEL_LEN=16384", "MAX_MODEL_LEN=131072"),
                      encoding="utf-8")
    outcomes, texts = run_seams(pytester, fleet / "fleet.toml")
    # 131072 is past the model's max_position_embeddings: vLLM refuses it at config, before sizing the pool
    assert outcomes[("qwen", "vllm-starts")] == "vllm-starts/max-model-len-over-model"
    assert "  where:    .env:3 (MAX_MODEL_LEN)" in texts[("qwen", "vllm-starts")].splitlines()


def test_the_gpu_device_nodes_and_group_add_a_non_root_user_needs_are_read(tmp_path: Path) -> None:
    """`devices:` keeps the GPU nodes by their host path; `group_add:` names (interpolated from `.env`) and GIDs."""
    read = _read(tmp_path, SERVER + "    devices: [/dev/kfd, '/dev/dri/renderD128:/dev/dri/renderD128', /dev/snd]\n"
                                    "    group_add: [video, '${RENDER_GID}', 992]\n",
                 files={".env": "RENDER_GID=110\n"})
    assert read.device_nodes == ("/dev/kfd", "/dev/dri/renderD128")
    assert read.groups == ("video", "110", "992")
    assert read.groups_where == f"{tmp_path}/compose.yaml:5"
    (tmp_path / "bare").mkdir()
    bare = _read(tmp_path / "bare", SERVER)
    assert (bare.device_nodes, bare.groups) == ((), ())
