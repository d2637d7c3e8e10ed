"""docker run / podman run lines read as the client's flag parser reads them (fleetgate/sources/docker_run.py)."""

from __future__ import annotations

import pytest

from fleetgate.sources.docker_run import Published, engine_of_image, parse_client

IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"


@pytest.mark.parametrize("argv", [
    # --flag value and --flag=value; a boolean with =; clustered shorts, the last one taking the next word.
    ("docker", "run", "--name", "x", "-p", "8081:8080", "--rm=true", IMAGE, "-m", "/m.gguf"),
    ("docker", "run", "--name=x", "--publish=8081:8080", "-it", IMAGE, "-m", "/m.gguf"),
    ("docker", "run", "-itp", "8081:8080", "--name", "x", IMAGE, "-m", "/m.gguf"),
    ("docker", "run", "-p8081:8080", "--name", "x", "--", IMAGE, "-m", "/m.gguf"),
    # Global options before the subcommand, the long subcommand, podman.
    ("docker", "--context", "gpu", "container", "run", "-p", "8081:8080", "--name", "x", IMAGE, "-m", "/m.gguf"),
    ("podman", "--log-level", "info", "run", "-p", "8081:8080", "--name", "x", IMAGE, "-m", "/m.gguf"),
])
def test_options_take_their_values_and_the_image_ends_them(argv: tuple[str, ...]) -> None:
    run = parse_client(argv)
    assert run is not None
    assert (run.image, run.command, run.name, run.host_port(8080)) == (IMAGE, ("-m", "/m.gguf"), "x", 8081)
    assert run.engine_argv() == ("/app/llama-server", "-m", "/m.gguf")


@pytest.mark.parametrize("argv", [("docker", "pull", IMAGE), ("docker", "ps"), ("podman", "rm", "-f", "x"),
                                  ("docker", "container", "ls")])
def test_other_subcommands_are_no_run(argv: tuple[str, ...]) -> None:
    assert parse_client(argv) is None


def test_values_that_look_like_images_stay_values() -> None:
    # Every value of these options is a word that is not an option: the parser must not take it for the image.
    run = parse_client(("docker", "run", "--health-cmd", "curl -f localhost:8080/health", "--health-interval", "30s",
                        "--ulimit", "memlock=-1", "--shm-size", "16g", "--ipc", "host", "--restart", "unless-stopped",
                        "--security-opt", "label=disable", "-w", "/app", "-u", "1000:1000", "--pull", "always",
                        "--platform", "linux/amd64", "--log-opt", "max-size=10m", "vllm/vllm-openai:v0.10.1",
                        "--model", "Qwen/Qwen3-8B"))
    assert run is not None
    assert (run.image, run.engine, run.engine_argv()) == ("vllm/vllm-openai:v0.10.1", "vllm",
                                                         ("vllm", "serve", "--model", "Qwen/Qwen3-8B"))


def test_ports_volumes_gpus_and_the_entrypoint() -> None:
    run = parse_client(("docker", "run", "-p", "127.0.0.1:9000:8080/tcp", "-p", "8081", "-v", "/srv/models:/models:ro",
                        "-v", "hf-cache:/root/.cache", "--gpus", '"device=1"', "--device=/dev/kfd", "--entrypoint",
                        "/app/llama-server", "--network", "bridge", IMAGE, "-m", "/models/a/m.gguf"))
    assert run is not None
    assert run.published == (Published("127.0.0.1", 9000, 8080), Published("", None, 8081))
    assert (run.host_port(8080), run.host_port(8081), run.host_port(1234)) == (9000, None, None)
    assert (run.host_path("/models/a/m.gguf"), run.host_path("/root/.cache/x"), run.host_path("/other")) == (
        "/srv/models/a/m.gguf", None, None)  # a named volume has no host path
    assert (run.gpus, run.devices, run.engine_argv()[0]) == (('"device=1"',), ("/dev/kfd",), "/app/llama-server")
    host = parse_client(("docker", "run", "--net=host", IMAGE, "--port", "8085"))
    assert host is not None and host.host_port(8085) == 8085


def test_group_add_is_every_group_in_order() -> None:
    run = parse_client(("podman", "run", "--group-add", "video", "--group-add=render", "--group-add", "keep-groups",
                        "--device", "/dev/kfd", IMAGE))
    assert run is not None and (run.groups, run.user) == (("video", "render", "keep-groups"), None)


def test_a_line_the_client_would_refuse_says_why() -> None:
    assert parse_client(("docker", "run", "--rm", "-e")) is not None
    assert parse_client(("docker", "run", "--rm", "-e")).problems == ("-e without its value", "no image")  # type: ignore[union-attr]
    assert parse_client(("docker", "run", "--name")).problems == ("--name without its value", "no image")  # type: ignore[union-attr]


@pytest.mark.parametrize(("image", "engine"), [
    ("ghcr.io/ggml-org/llama.cpp:server", "llama.cpp"), ("ghcr.io/ggml-org/llama.cpp:server-cuda-b6300", "llama.cpp"),
    ("ghcr.io/ggerganov/llama.cpp:server-vulkan", "llama.cpp"), ("ghcr.io/ggml-org/llama.cpp:full-cuda", None),
    ("ghcr.io/ggml-org/llama.cpp:light", None), ("vllm/vllm-openai", "vllm"), ("vllm/vllm-openai:latest@sha256:ab", "vllm"),
    ("docker.io/vllm/vllm-openai:v0.10.1", "vllm"), ("localhost:5000/llama.cpp:server", None), ("nginx", None),
])
def test_engine_images_by_their_repository_and_tag(image: str, engine: str | None) -> None:
    assert engine_of_image(image) == engine
