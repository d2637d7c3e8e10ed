"""Strangers' fleets (fixtures/fleets/NAME): universal rules judge them, house rules stay off unless they opt in.

Each fixture fleet is modelled on a shape real public repositories use, and keeps none of the example fleet's
conventions. Its seams give exactly the table written here; the misses real configs showed (a stray positional,
``Restart=${VAR}``, a shell default in an env file or in ``ExecStart=``) are mutations of it with their own codes;
harmless variants of the same lines must pass.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import pytest

from fleetgate.checks import load_all, policy_checks, policy_codes
from fleetgate.policies import POLICIES
from tests.fleet_edits import Edit, edited_fleet
from tests.test_misses_round3 import (
    EMBED,
    EMBEDDINGS_CONTRACT,
    EMBEDDINGS_PRESET,
    GEMMA,
    GEMMA_COMMAND,
    GEMMA_GGUF,
    LLAMA_IMAGE,
    REUSE,
    VOLUME_COMPOSE,
    _declared,
    _second,
)
from tests.test_mutations import NOT_JUDGED, PASSED, SKIPPED, run_seams

REPO = Path(__file__).resolve().parents[1]
FLEETS = REPO / "fixtures" / "fleets"

# Universal seams of one llama.cpp service under a systemd unit, on one card, with no profile and no contract:
# what each does on it, by hand.
LLAMA_UNIT_SERVICE = {
    "engine-accepts-argv": PASSED,
    # No profile: not judged (one line, naming `fleetgate profile`), never a failure: the ledger's seams need it.
    "profile-declared": NOT_JUDGED,
    "slots-divide-context": PASSED,  # 16384 / 2 slots, no contract window to compare
    "slot-within-trained-window": NOT_JUDGED,  # no profile: the trained window is unknown
    "device-visibility": PASSED,
    "card-floor": NOT_JUDGED,  # no profile
    "card-balance": SKIPPED,  # one card: nothing to balance, profile or not
    "drafter-kv-fits": SKIPPED,  # no drafter
    "prompt-cache-holds-slot": NOT_JUDGED,  # the default cache cap is bounded; the slot state needs the profile
    "speculative-wiring": SKIPPED,  # nothing speculative
    "engine-build-minimum": SKIPPED,  # no engine_build declared
    "vision-mmproj": SKIPPED,  # the contract says nothing of images
    "contract-pins": SKIPPED,  # the contract pins nothing
    "serve-script-renders": PASSED,
    "empty-means-omit": SKIPPED,  # no omittable variable declared
    "rendered-port-matches": PASSED,
    "payload-defaults": PASSED,  # MODEL names the declared payload
    "unit-install": PASSED,
    # The fixtures' system units mostly name no User=: the engine runs as root, a universal finding (unit-exec's
    # DynamicUser=yes and docker-run's container are the exceptions, below).
    "unit-user": "unit-user/missing",
    "unit-restart": PASSED,
    "unit-env-files": PASSED,
    "unit-exec-args": PASSED,
    "container-paths": SKIPPED,  # a systemd unit, not a Quadlet
    "drafter-placement": SKIPPED,  # no drafter
    "engine-auth": SKIPPED,  # --host 127.0.0.1 (or a port published on 127.0.0.1): only the host reaches it
    "cache-reuse-kept": SKIPPED,  # no --cache-reuse
    "volume-variables": SKIPPED,  # no compose file or Quadlet mounts anything
    "embeddings-served": SKIPPED,  # no --pooling, no /v1/embeddings in a contract
    "container-user": SKIPPED,  # no container: unit-user holds the unit's user
    "tools-need-jinja": SKIPPED,  # no contract promises tool calls
    "chat-template": SKIPPED,  # no --chat-template-file, and no contract promises tool calls
}
# The fleet as a whole, and the checks with no subject in it.
FLEET_LEVEL = {
    "fleet-numbers-finite": PASSED,
    "service-ports-unique": PASSED,
    "rules-exported": SKIPPED,  # no rules, no dashboards: nothing to hold to the engines' series
    "co-residence-fits": SKIPPED,  # one service: nothing shares its card
    "vllm-start-headroom": SKIPPED,  # no vLLM beside another engine of its host
}
NO_SUBJECT = ("slots-divide-pool", "vllm-memory-knobs", "vllm-argv", "vllm-starts", "vllm-mm-limits", "vllm-speculative-depth",
              "timeouts-nest")
# Every policy's checks: one skip each, for the whole fleet, naming how to turn the policy on.
POLICY_CHECKS = tuple(check for policy in POLICIES for check in policy_checks(policy))


def _table(fleet: str, service: str, **changes: str) -> dict[tuple[str, str], str]:
    table = {(service, check): outcome for check, outcome in LLAMA_UNIT_SERVICE.items()}
    table.update({(fleet, check): outcome for check, outcome in FLEET_LEVEL.items()})
    table.update({("fleet", check): SKIPPED for check in (*NO_SUBJECT, *POLICY_CHECKS)})
    for key, outcome in changes.items():
        subject, _, check = key.partition(":")
        table[(subject, check)] = outcome
    return table


def _copy(tmp_path: Path, name: str, edits: list[Edit]) -> Path:
    target = tmp_path / name
    shutil.copytree(FLEETS / name, target, symlinks=True)
    for file, old, new in edits:
        text = (target / file).read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
        (target / file).write_text(text.replace(old, new), encoding="utf-8")
    return target / "fleet.toml"


# A compose service (fleetgate.sources.compose) has no unit: the unit seams skip, and its bind mounts hold the paths
# the engine is given (container-paths). By hand, for each fixture:
NO_UNIT = {f"{check}": SKIPPED for check in ("unit-install", "unit-user", "unit-restart", "unit-env-files",
                                              "unit-exec-args")}
# A compose service's volumes: paths written without a variable, or with one the .env sets.
COMPOSE_VOLUMES = {"volume-variables": PASSED}
# An engine image (llama.cpp's server images, vllm/vllm-openai) sets no USER, and nothing sets the container's user:
# the engine runs as root (docs/seams.md, container-user: a true finding of each fixture that runs one).
IMAGE_ROOT = {"container-user": "container-user/image-root"}
# vLLM in compose on one 24 GiB card: what each vLLM seam does on it.
VLLM_COMPOSE_SERVICE = {
    "vllm-argv": PASSED,  # every flag is one vLLM 0.13.0 (the image tag) knows
    "vllm-starts": PASSED,  # 8.2 GiB of weights in 0.90 x 24 GiB = 21.6 GiB; one 16,384-token sequence is 2.25 GiB
    "vllm-memory-knobs": SKIPPED,  # no fill ceiling or measured pool declared
    "vllm-mm-limits": SKIPPED,  # the contract says nothing of images
    "vllm-speculative-depth": SKIPPED,  # nothing drafts
    "device-visibility": PASSED,  # count: 1 grants CUDA0
    "serve-script-renders": PASSED,
    "empty-means-omit": SKIPPED,
    "rendered-port-matches": PASSED,  # "${VLLM_PORT:-8000}:8000" publishes --port 8000 on 8000, fleet.toml's port
    "payload-defaults": SKIPPED,  # no env variable names a host payload path (the container sees /models)
    "container-paths": PASSED,  # --model /models/Qwen3-8B-FP8 is /srv/models/Qwen3-8B-FP8, the declared payload
    # "8000:8000" publishes the port on every address of the host, and vLLM is given no key (docs/seams.md,
    # engine-auth: a true finding of this fleet, which its table now holds).
    "engine-auth": "engine-auth/no-key",
    **NO_UNIT,
    **COMPOSE_VOLUMES,
    **IMAGE_ROOT,
}
LLAMA_ONLY = tuple(c for c in LLAMA_UNIT_SERVICE if c not in VLLM_COMPOSE_SERVICE)


def _compose_vllm_table() -> dict[tuple[str, str], str]:
    table = {("qwen", check): outcome for check, outcome in VLLM_COMPOSE_SERVICE.items()}
    table.update({("tiwaz", check): outcome for check, outcome in FLEET_LEVEL.items()})
    no_subject = (*LLAMA_ONLY, "slots-divide-pool", "timeouts-nest")
    table.update({("fleet", check): SKIPPED for check in (*no_subject, *POLICY_CHECKS)})
    return table


# The same seams on a model of a llama-swap config with a profile, on one card: no unit, no env file; the ledger's
# seams see it.
SWAP_MODEL = {
    **LLAMA_UNIT_SERVICE,
    "profile-declared": PASSED,
    "slot-within-trained-window": PASSED,
    "card-floor": PASSED,  # each model alone fits the 16 GiB card
    "card-balance": SKIPPED,  # one card
    "prompt-cache-holds-slot": PASSED,
    "payload-defaults": SKIPPED,  # no env file names the payload: llama-swap's cmd names the GGUF itself
    **dict.fromkeys(("unit-install", "unit-user", "unit-restart", "unit-env-files", "unit-exec-args"), SKIPPED),  # no unit
}


def _swap_table() -> dict[tuple[str, str], str]:
    table = {(service, check): outcome for service in ("coder", "llama", "autocomplete")
             for check, outcome in SWAP_MODEL.items()}
    # The three share llama-swap's port (not a clash), and the coder or the llama beside the persistent
    # autocomplete model (11.82 + 2.32 GiB) fit the card.
    table.update({("workstation", check): outcome for check, outcome in FLEET_LEVEL.items()})
    table[("workstation", "co-residence-fits")] = PASSED
    table.update({("fleet", check): SKIPPED for check in (*NO_SUBJECT, *POLICY_CHECKS)})
    return table


# A model of a llama.cpp router preset: the child llama-server the router starts for it. The router gives the child a
# free port when it loads it, so the engine's port is not held to fleet.toml's (the router's) port.
PRESET_MODEL = {**SWAP_MODEL, "rendered-port-matches": SKIPPED}


def _preset_table() -> dict[tuple[str, str], str]:
    table = {(service, check): outcome for service in ("coder", "llama", "autocomplete")
             for check, outcome in PRESET_MODEL.items()}
    # The three share the router's port (not a clash); --models-max 4 (the default) keeps all three loaded at once,
    # and together they fit the 24 GiB card.
    table.update({("studio", check): outcome for check, outcome in FLEET_LEVEL.items()})
    table[("studio", "co-residence-fits")] = PASSED
    table.update({("fleet", check): SKIPPED for check in (*NO_SUBJECT, *POLICY_CHECKS)})
    return table


# A Kubernetes workload (fleetgate.sources.kubernetes): no unit, and no volume path is interpolated (volume-variables
# skips). Its model lies under a hostPath volumeMount, on the declared payload (container-paths passes).
K8S_HELD = {**NO_UNIT, "container-paths": PASSED, "volume-variables": SKIPPED}


def _kubernetes_table() -> dict[tuple[str, str], str]:
    # vLLM's Deployment reads like compose-vllm's service: the image pins 0.13.0, one nvidia.com/gpu, and the Service
    # port 80 forwards to the container's named port http (8000), fleet.toml's port being the Service's.
    table = {("qwen", check): outcome for check, outcome in {**VLLM_COMPOSE_SERVICE, **K8S_HELD}.items()}
    # Its Service is ClusterIP: only the cluster reaches it, as the cluster's network policies allow.
    table[("qwen", "engine-auth")] = SKIPPED
    # llama-server's StatefulSet: the server-cuda-b10867 image pins the build; the model on the claim has no profile.
    gemma = _table("rack", "gemma", **{f"gemma:{c}": o for c, o in K8S_HELD.items() if c != "container-paths"},
                   **{"gemma:engine-build-minimum": PASSED, "gemma:payload-defaults": SKIPPED,
                      # its model is on the StatefulSet's claim: what the claim holds is no file of the repository
                      "gemma:container-paths": NOT_JUDGED,
                      # its NodePort Service opens 30080 on every node to an engine that asks no key
                      "gemma:engine-auth": "engine-auth/no-key", "gemma:container-user": "container-user/image-root"})
    table.update(gemma)
    for check in ("vllm-argv", "vllm-starts", "vllm-memory-knobs", "vllm-mm-limits", "vllm-speculative-depth"):
        table.pop(("fleet", check))
    table.update({("fleet", check): SKIPPED for check in ("slots-divide-pool", "timeouts-nest")})
    return table


def _kubernetes_sharing_table() -> dict[tuple[str, str], str]:
    # Two vLLM Deployments on a one-node cluster whose device plugin time-slices the card (deploy/gpu/time-slicing.yaml):
    # each reads like the kustomize fixture's (the image pins 0.13.0, a ClusterIP Service, no profile sizes the
    # checkpoint, so vllm-starts is not judged).
    service = {**VLLM_COMPOSE_SERVICE, **K8S_HELD, "engine-auth": SKIPPED, "vllm-starts": NOT_JUDGED}
    table = {(name, check): outcome for name in ("chat", "coder") for check, outcome in service.items()}
    table.update({("homelab", check): outcome for check, outcome in FLEET_LEVEL.items()})
    # Both pods' nvidia.com/gpu: 1 is a replica of the one card: 0.55 + 0.40 of it leaves each room to start.
    table[("homelab", "vllm-start-headroom")] = PASSED
    # co-residence books each vLLM's fraction of the card: 0.95 of it together.
    table[("homelab", "co-residence-fits")] = PASSED
    no_subject = (*LLAMA_ONLY, "slots-divide-pool", "timeouts-nest")
    table.update({("fleet", check): SKIPPED for check in (*no_subject, *POLICY_CHECKS)})
    return table


def _nixos_table() -> dict[tuple[str, str], str]:
    # Two units NixOS generates (fleetgate.sources.nix), each pinned to one of the host's two cards by
    # CUDA_VISIBLE_DEVICES. The module's unit runs with DynamicUser=true, the hand-written one as User=llm: neither is
    # root. No env file names the payload (the model is written in the .nix file itself).
    table: dict[tuple[str, str], str] = {}
    for service in ("chat", "coder"):
        table.update(_table("atlas", service, **{f"{service}:unit-user": PASSED, f"{service}:payload-defaults": SKIPPED,
                                                 # two cards on the host: card-balance asks for the profile first
                                                 f"{service}:card-balance": NOT_JUDGED}))
    # Two services share the host: co-residence needs each one's profile to sum them, and skips naming both.
    table[("atlas", "co-residence-fits")] = SKIPPED
    return table


def _ansible_table() -> dict[tuple[str, str], str]:
    # The role's unit template renders to a unit whose ExecStart= is the engine (User=llama: not root); the llama-swap
    # template's two models read as llama-swap's own (no unit, no env file). No profile anywhere.
    table = _table("orin", "chat", **{"chat:unit-user": PASSED, "chat:payload-defaults": SKIPPED})
    swap = {**LLAMA_UNIT_SERVICE, "payload-defaults": SKIPPED,
            **dict.fromkeys(("unit-install", "unit-user", "unit-restart", "unit-env-files", "unit-exec-args"), SKIPPED)}
    table.update({(service, check): outcome for service in ("coder", "small") for check, outcome in swap.items()})
    # Three services on the one card with no profile: co-residence skips naming the profiles to declare.
    table[("orin", "co-residence-fits")] = SKIPPED
    return table


def _start_scripts_table() -> dict[tuple[str, str], str]:
    # Two plain start scripts, no unit and no env file. vLLM from a virtualenv in the background: nothing pins its
    # release, so the newest release held judges its argv (and says so); no profile sizes its checkpoint, so
    # vllm-starts is not judged; its model is a hub id, no host file. llama-server exec'd from a build tree on the
    # second card, the model written in the script. nvidia-smi (the pre-flight of both) is stubbed in the render.
    qwen = {**VLLM_COMPOSE_SERVICE, "vllm-argv": PASSED, "vllm-starts": NOT_JUDGED, "container-paths": SKIPPED,
            "volume-variables": SKIPPED, "engine-auth": SKIPPED, "container-user": SKIPPED}  # --host 127.0.0.1, no container
    table = {("qwen", check): outcome for check, outcome in qwen.items()}
    table.update(_table("box", "gemma", **{f"gemma:{c}": o for c, o in NO_UNIT.items()},
                        **{"gemma:payload-defaults": SKIPPED, "gemma:card-balance": NOT_JUDGED}))
    for check in ("vllm-argv", "vllm-starts", "vllm-memory-knobs", "vllm-mm-limits", "vllm-speculative-depth"):
        table.pop(("fleet", check))
    # Two services on the host with no profile: co-residence skips naming the profiles to declare. vLLM's card is
    # not the llama-server's (CUDA_VISIBLE_DEVICES 0 and 1): vLLM's fraction has its card to itself.
    table[("box", "co-residence-fits")] = SKIPPED
    table[("box", "vllm-start-headroom")] = PASSED
    return table


def _compose_rocm_table() -> dict[tuple[str, str], str]:
    # Two llama.cpp ROCm containers, each given /dev/kfd and every render node (docker's devices:), narrowed to one
    # card by HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES: each sees one of the host's two cards, so neither "has no
    # GPU". The image tag pins build 10867; the model directory is bind-mounted from the .env's MODELS_DIR; each port
    # is published on 127.0.0.1 only. No profile.
    per_service = {**NO_UNIT, **COMPOSE_VOLUMES, **IMAGE_ROOT, "container-paths": PASSED, "engine-build-minimum": PASSED,
                   "payload-defaults": SKIPPED, "card-balance": NOT_JUDGED}
    table: dict[tuple[str, str], str] = {}
    for service in ("chat", "embed"):
        table.update(_table("workstation", service, **{f"{service}:{c}": o for c, o in per_service.items()}))
    # The embedder is started with --embeddings --pooling mean, which serves /v1/embeddings as asked.
    table[("embed", "embeddings-served")] = PASSED
    # Two services on the host with no profile: co-residence skips naming the profiles to declare.
    table[("workstation", "co-residence-fits")] = SKIPPED
    return table


def _compose_router_table() -> dict[tuple[str, str], str]:
    # llama-server as a router in one compose container: its three preset models are the services, each judged as
    # the router-preset fixture's are (the child's port is the router's pick). The container's --models-max 2
    # (declared: models_max = 2) keeps two loaded at once: the coder (14.83 GiB) and the llama (7.09 GiB) fit the
    # 24 GiB card together, as does any other pair.
    table = {(service, check): outcome for service in ("coder", "llama", "autocomplete")
             for check, outcome in PRESET_MODEL.items()}
    table.update({("lab", check): outcome for check, outcome in FLEET_LEVEL.items()})
    table[("lab", "co-residence-fits")] = PASSED
    table.update({("fleet", check): SKIPPED for check in (*NO_SUBJECT, *POLICY_CHECKS)})
    return table


def _kustomize_table() -> dict[tuple[str, str], str]:
    # kubectl kustomize's output of the overlay (rendered/gpu-node.yaml): vLLM's Deployment as the kubernetes
    # fixture's, its image tag set by the overlay (v0.13.0), reached through a ClusterIP Service. No profile sizes the
    # checkpoint: vllm-starts is not judged. The base's and the overlay's own files are inputs of the build, not read
    # as manifests.
    service = {**VLLM_COMPOSE_SERVICE, **K8S_HELD, "engine-auth": SKIPPED, "vllm-starts": NOT_JUDGED}
    table = {("mistral-vllm", check): outcome for check, outcome in service.items()}
    table.update({("cluster", check): outcome for check, outcome in FLEET_LEVEL.items()})
    no_subject = (*LLAMA_ONLY, "slots-divide-pool", "timeouts-nest")
    table.update({("fleet", check): SKIPPED for check in (*no_subject, *POLICY_CHECKS)})
    return table


def _helm_output_table() -> dict[tuple[str, str], str]:
    # The chart's rendered output (rendered/chat.yaml): llama-server from ggml-org's ROCm image, whose tag pins build
    # 10867; one amd.com/gpu from the device plugin (the MI100 node's one card); the model on a hostPath; a ClusterIP
    # Service (only the cluster reaches it); the pod runs as UID 1000. No profile. Given /dev/kfd and a render node by
    # AMD's device plugin, it holds GIDs 44 and 110 (supplementalGroups): whether they own the nodes is the host's,
    # which declares no device_gids, so container-user is not judged (docs/seams.md, container-user/no-device-group).
    service = {**K8S_HELD, "engine-build-minimum": PASSED, "payload-defaults": SKIPPED, "engine-auth": SKIPPED,
               "container-user": NOT_JUDGED}
    return _table("mi100", "chat-llama-server", **{f"chat-llama-server:{c}": o for c, o in service.items()})


# A rootless Quadlet whose Exec= is the engine's arguments (fleetgate.render.quadlet): a rootless Quadlet runs as the
# user whose manager starts it (unit-user and container-user skip, naming it); each Volume= holds the path the engine
# is given (container-paths), written without a variable (volume-variables); PublishPort= publishes the engine's port on
# the host's loopback only (engine-auth skips) at fleet.toml's port (rendered-port-matches); no env file names the
# payload (the model is written in Exec=).
QUADLET_EXEC = {"unit-user": SKIPPED, "container-user": SKIPPED, "container-paths": PASSED, "volume-variables": PASSED,
                "engine-auth": SKIPPED, "payload-defaults": SKIPPED, "rendered-port-matches": PASSED}


def _quadlet_table() -> dict[tuple[str, str], str]:
    # vLLM's own image: its tag pins 0.13.0 (every flag is one it knows), its profile sizes the checkpoint within
    # 0.90 x 24 GiB of its card (CUDA_VISIBLE_DEVICES=1). The unit seams read the .container: WantedBy=default.target,
    # Restart=on-failure, no EnvironmentFile=, Exec= passes the engine's arguments (no serve script to hand them to).
    qwen = {**VLLM_COMPOSE_SERVICE, **QUADLET_EXEC,
            **dict.fromkeys(("unit-install", "unit-restart", "unit-env-files", "unit-exec-args"), PASSED)}
    table = {("qwen", check): outcome for check, outcome in qwen.items()}
    # llama-server's image tag pins build 10867; --ctx-size ${CTX} is 16384 from [Service] Environment=, 2 slots; no
    # profile, and two cards on the host: card-balance asks for the profile first.
    table.update(_table("rig", "chat", **{f"chat:{c}": o for c, o in QUADLET_EXEC.items()},
                        **{"chat:engine-build-minimum": PASSED, "chat:card-balance": NOT_JUDGED}))
    for check in ("vllm-argv", "vllm-starts", "vllm-memory-knobs", "vllm-mm-limits", "vllm-speculative-depth"):
        table.pop(("fleet", check))
    # Two services on the host, one with no profile: co-residence skips naming it. vLLM's card is not llama-server's
    # (CUDA_VISIBLE_DEVICES 1 and 0): its fraction has the card to itself.
    table[("rig", "co-residence-fits")] = SKIPPED
    table[("rig", "vllm-start-headroom")] = PASSED
    return table


CLEAN = {
    # HOST=0.0.0.0 and no key: reachable from the network, a true finding (docs/seams.md, engine-auth).
    "unit-script": _table("l4-box", "qwen", **{"qwen:engine-auth": "engine-auth/no-key"}),
    # DynamicUser=yes: systemd allocates a transient unprivileged user.
    "unit-exec": _table("homelab", "chat", **{"chat:unit-user": PASSED}),
    # llama.cpp's server-cuda image: the tag pins build 10867 (engine-build-minimum now has a build to hold), the
    # container's paths are bind-mounted, port 8080 inside is published on 127.0.0.1:8081.
    "compose-llama": _table("den", "chat", **{f"chat:{c}": o for c, o in {**NO_UNIT, **COMPOSE_VOLUMES, **IMAGE_ROOT}.items()},
                            **{"chat:container-paths": PASSED, "chat:engine-build-minimum": PASSED,
                               "chat:payload-defaults": SKIPPED}),
    "compose-vllm": _compose_vllm_table(),
    # The same engine split over include: and extends: (the service defined in llm/compose.yaml, its image, mount and
    # card in llm/base.yaml): it reads to the same seams as compose-llama's one file.
    "compose-include": _table("attic", "chat", **{f"chat:{c}": o for c, o in {**NO_UNIT, **COMPOSE_VOLUMES, **IMAGE_ROOT}.items()},
                              **{"chat:container-paths": PASSED, "chat:engine-build-minimum": PASSED,
                                 "chat:payload-defaults": SKIPPED}),
    "unit-bash-c": _table("team-box", "mistral"),
    # The image tag pins build 10500: the build is known, so engine-build-minimum judges it (nothing it runs needs
    # a minimum).
    # The unit runs `docker run`: the engine runs as the container's user, not as the unit's User=.
    # -p "${PORT}:8080" publishes on every address of the host; the image binds 0.0.0.0 (LLAMA_ARG_HOST) and no key
    # is given: a true finding (docs/seams.md, engine-auth).
    "docker-run": _table("garage", "coder", **{"coder:engine-build-minimum": PASSED, "coder:unit-user": SKIPPED,
                                               "coder:engine-auth": "engine-auth/no-key",
                                               "coder:container-user": "container-user/image-root"}),
    # The env file is rendered by install.sh from the repository's template (env_file = { template, script }).
    "unit-install-env": _table("den", "llama"),
    "llama-swap": _swap_table(),
    "router-preset": _preset_table(),
    "kubernetes": _kubernetes_table(),
    "kubernetes-sharing": _kubernetes_sharing_table(),
    "nixos": _nixos_table(),
    "ansible": _ansible_table(),
    "start-scripts": _start_scripts_table(),
    "compose-rocm": _compose_rocm_table(),
    "compose-router": _compose_router_table(),
    "kustomize": _kustomize_table(),
    "helm-output": _helm_output_table(),
    "quadlet": _quadlet_table(),
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_a_strangers_fleet_gives_exactly_its_table(name: str, pytester: pytest.Pytester) -> None:
    outcomes, texts = run_seams(pytester, FLEETS / name / "fleet.toml")
    assert outcomes == CLEAN[name]
    # No message carries the example fleet's names to another fleet.
    for text in texts.values():
        for word in ("dank", "frank", "dankserver", "R9700"):
            assert word not in text, text


ABSENT = "absent"
"""A (subject, check) of the clean table that a miss takes away (a seam with no subject gains one)."""


def _added(service: str, outcomes: dict[str, str]) -> dict[str, str]:
    """A service a miss adds: its outcome on every seam, as ``service:check`` keys."""
    return {f"{service}:{check}": outcome for check, outcome in outcomes.items()}


def _broken(fleet: str, service: str) -> dict[str, str]:
    """A service whose files cannot be read: serve-script-renders says which line; every other seam of it skips."""
    changes = {f"{service}:{check}": SKIPPED for (subject, check) in CLEAN[fleet] if subject == service}
    changes[f"{service}:serve-script-renders"] = "serve-script-renders/broken-input"
    return changes


def _k8s_template_mount(host: str | None, key: str = "qwen3.jinja") -> list[Edit]:
    """vLLM's Deployment handed ``--chat-template /templates/KEY`` from a volume at /templates: a hostPath of
    ``host``, or (None) the ConfigMap vllm-qwen-templates."""
    source = (f"          hostPath:\n            path: {host}\n" if host is not None
              else "          configMap:\n            name: vllm-qwen-templates\n")
    return [("deploy/vllm/deployment.yaml", '            - "8"\n',
             f'            - "8"\n            - --chat-template\n            - /templates/{key}\n'),
            ("deploy/vllm/deployment.yaml", "              readOnly: true\n",
             "              readOnly: true\n            - name: templates\n              mountPath: /templates\n"),
            ("deploy/vllm/deployment.yaml", "      volumes:\n", f"      volumes:\n        - name: templates\n{source}")]


K8S_TEMPLATE_CONFIG_MAP: list[Edit] = [("deploy/vllm/configmap.yaml", 'HF_HUB_OFFLINE: "1"\n',
                                         'HF_HUB_OFFLINE: "1"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n'
                                         '  name: vllm-qwen-templates\n  namespace: llm\ndata:\n'
                                         '  chat.jinja: "{{ messages }}"\n')]


QUADLET_AMD: list[Edit] = [
    ("systemd/llama-chat.container", "AddDevice=nvidia.com/gpu=all", "AddDevice=/dev/kfd\nAddDevice=/dev/dri"),
    ("systemd/llama-chat.container", "server-cuda-b10867", "server-rocm-b10867"),
    ("systemd/llama-chat.container", "CUDA_VISIBLE_DEVICES=0", "HIP_VISIBLE_DEVICES=0")]
"""The quadlet fixture's llama-server on AMD: the ROCm image, /dev/kfd and every render node, pinned by HIP."""


def _quadlet_rootful_user(lines: str) -> list[Edit]:
    """The quadlet fixture installed rootful (/etc/containers), its llama-server container given ``lines``."""
    return [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"', 'deploy_root = "/etc/containers"'),
            ("systemd/llama-chat.container", "ContainerName=llama-chat\n", f"ContainerName=llama-chat\n{lines}")]


# (fleet, edits, the outcomes that change): each a miss real configs showed, or a harmless variant that must pass.
_COMPOSE_MODEL_BIND = "      - type: bind\n        source: /srv/llm/models\n        target: /models\n        read_only: true\n"

MISSES: dict[str, tuple[str, list[Edit], dict[str, str]]] = {
    # A variable meant to hold a switch holds its value: `$JINJA` is `true`, a stray positional llama-server refuses.
    "stray-positional": ("unit-script", [("config/llama-server.env", "JINJA=--jinja", "JINJA=true")],
                         {"qwen:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    # In a system unit %u, %U, %h, %g and %G name the manager's user, root, not the user the author meant.
    **{f"user-specifier-{letter}": ("unit-script", [("systemd/llama-server.service", "Type=simple",
                                                     f"Type=simple\nUser=%{letter}")],
                                    {"qwen:unit-user": "unit-user/specifier"}) for letter in "uUh"},
    **{f"group-specifier-{letter}": ("unit-script", [("systemd/llama-server.service", "Type=simple",
                                                      f"Type=simple\nUser=llama\nGroup=%{letter}")],
                                     {"qwen:unit-user": "unit-user/specifier"}) for letter in "gG"},
    # Empty, the unquoted `$JINJA` is no word at all: nothing stray.
    "empty-flag-variable": ("unit-script", [("config/llama-server.env", "JINJA=--jinja", "JINJA=")], {}),
    # systemd expands no variable in Restart=: it ignores the line and keeps Restart=no.
    "restart-variable": ("unit-script", [("systemd/llama-server.service", "Restart=on-failure",
                                          "Restart=${RESTART_MODE}")],
                         {"qwen:unit-restart": "unit-restart/invalid-value"}),
    "restart-always": ("unit-script", [("systemd/llama-server.service", "Restart=on-failure", "Restart=always")], {}),
    # A shell default in a systemd env file is kept literally and reaches --model as those characters; the payload
    # variable then names no declared file, so payload-defaults has nothing to compare.
    "env-file-shell-default": ("unit-script", [("config/llama-server.env", "MODEL=/srv/models/Qwen3-8B-Q4_K_M.gguf",
                                                "MODEL=${MODEL_PATH:-/srv/models/Qwen3-8B-Q4_K_M.gguf}")],
                               {"qwen:unit-env-files": "unit-env-files/literal-expansion",
                                "qwen:payload-defaults": SKIPPED}),
    # The same text in a variable the engine never sees is harmless.
    "env-file-unused-shell-text": ("unit-script", [("config/llama-server.env", "HOST=0.0.0.0",
                                                    "HOST=0.0.0.0\nNOTE=${HOME:-/root}")], {}),
    # In ExecStart=, ${MODEL:-x} names a variable literally called "MODEL:-x": systemd passes an empty string, which
    # llama-server takes as --model's value (the unit's cause and the argv's effect, each by its own code).
    "exec-start-shell-default": ("unit-exec", [("systemd/llama-chat.service", "--model ${MODEL}",
                                                "--model ${MODEL:-/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf}")],
                                 {"chat:unit-exec-args": "unit-exec-args/shell-expansion",
                                  "chat:engine-accepts-argv": "engine-accepts-argv/empty-value"}),
    # An empty variable in a value position: ${CTX} is one empty word in ExecStart= ('' for --ctx-size); an
    # unbraced $CTX is no word at all, so --ctx-size takes --parallel as its value. Either is named by its flag.
    "exec-start-empty-value": ("unit-exec", [("env/chat.env", "CTX=16384", "CTX=")],
                               {"chat:engine-accepts-argv": "engine-accepts-argv/empty-value",
                                "chat:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    "exec-start-flag-as-value": ("unit-exec", [("env/chat.env", "CTX=16384", "CTX="),
                                               ("systemd/llama-chat.service", "--ctx-size ${CTX}", "--ctx-size $CTX")],
                                 {"chat:engine-accepts-argv": "engine-accepts-argv/flag-as-value",
                                  "chat:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    # `$$` is systemd's literal dollar; ${CTX} from Environment= is overridden by the env file, as systemd does.
    "exec-start-dollar-dollar": ("unit-exec", [("systemd/llama-chat.service", "--host 127.0.0.1",
                                                "--host 127.0.0.1 --alias chat$$1")], {}),
    # A stray positional reaches the engine's argv through ExecStart= too (an unquoted $EXTRA_ARGS word split).
    "exec-start-stray-positional": ("unit-exec", [("env/chat.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                                   'EXTRA_ARGS="--jinja true --flash-attn on"')],
                                    {"chat:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    # engine-auth (issue 32): an engine other machines reach asks for a key. A key file passes; a key from an empty
    # variable is no key (llama-server drops empty keys); loopback is reached by the host alone.
    "auth-key-file": ("unit-script", [("config/llama-server.env", "JINJA=--jinja",
                                       "JINJA=--jinja --api-key-file /etc/llama/api-keys")],
                      {"qwen:engine-auth": PASSED}),
    "auth-key-in-environment": ("unit-script", [("systemd/llama-server.service", "Type=simple",
                                                 "Type=simple\nEnvironment=LLAMA_API_KEY=fixture-not-a-secret")],
                                {"qwen:engine-auth": PASSED}),
    "auth-empty-key": ("unit-script", [("bin/serve.sh", '  --port "$PORT" \\\n', '  --port "$PORT" \\\n  --api-key "${API_KEY:-}" \\\n')],
                       # the empty word is --api-key's value (engine-accepts-argv names it), and no key (engine-auth)
                       {"qwen:engine-auth": "engine-auth/empty-key",
                        "qwen:engine-accepts-argv": "engine-accepts-argv/empty-value"}),
    "auth-loopback": ("unit-script", [("config/llama-server.env", "HOST=0.0.0.0", "HOST=127.0.0.1")],
                      {"qwen:engine-auth": SKIPPED}),
    "auth-ipv6-every-address": ("unit-exec", [("systemd/llama-chat.service", "--host 127.0.0.1", "--host ::")],
                                {"chat:engine-auth": "engine-auth/no-key"}),
    "auth-compose-loopback": ("compose-vllm", [("compose.yaml", '"${VLLM_PORT:-8000}:8000"',
                                                '"127.0.0.1:${VLLM_PORT:-8000}:8000"')],
                              {"qwen:engine-auth": SKIPPED}),
    "auth-compose-empty-key": ("compose-vllm", [("compose.yaml", "      HF_HUB_OFFLINE: \"1\"\n",
                                                 "      HF_HUB_OFFLINE: \"1\"\n      VLLM_API_KEY: ${VLLM_API_KEY:-}\n")],
                               {"qwen:engine-auth": "engine-auth/empty-key"}),
    "auth-compose-key": ("compose-vllm", [("compose.yaml", "      HF_HUB_OFFLINE: \"1\"\n",
                                           "      HF_HUB_OFFLINE: \"1\"\n      VLLM_API_KEY: fixture-not-a-secret\n")],
                         {"qwen:engine-auth": PASSED}),
    "auth-cluster-ip": ("kubernetes", [("deploy/llama/statefulset.yaml", "  type: NodePort\n", ""),
                                       ("deploy/llama/statefulset.yaml", "      nodePort: 30080\n", "")],
                        {"gemma:engine-auth": SKIPPED}),
    # vllm-start-headroom (issue 32): a second engine on compose-vllm's one card, granted it by count: 1.
    # A second vLLM (an embedding model, no profile) at 0.30 beside the first's 0.90: the one that starts second
    # refuses; co-residence-fits sums the two budgets past the card as well.
    "headroom-two-vllm": ("compose-vllm", [*_second("embed", "vllm/vllm-openai:v0.13.0",
                                                    "--model /models/Qwen3-Embedding-0.6B --port 8001 "
                                                    "--gpu-memory-utilization 0.30"),
                                           _declared("embed", "vllm", EMBED)],
                          {"tiwaz:vllm-start-headroom": "vllm-start-headroom/fractions-over-card",
                           "tiwaz:co-residence-fits": "co-residence-fits/over-card",
                           **_added("embed", {**VLLM_COMPOSE_SERVICE, "vllm-starts": NOT_JUDGED,  # no profile
                                              "engine-auth": SKIPPED})}),  # published on 127.0.0.1
    # gemma-3-270m's llama-server (its profile: 1.02 GiB on the card at 32768 positions) beside vLLM raised to 0.97,
    # which asks 23.28 GiB of the 24 free at start.
    "headroom-beside-llama": ("compose-vllm", [*_second("chat", LLAMA_IMAGE, GEMMA_COMMAND),
                                               _declared("chat", "llama.cpp", GEMMA_GGUF, f"profiles/{GEMMA.name}"),
                                               ("compose.yaml", "--gpu-memory-utilization 0.90",
                                                "--gpu-memory-utilization 0.97")],
                              {"tiwaz:vllm-start-headroom": "vllm-start-headroom/beside-engine",
                               "tiwaz:co-residence-fits": "co-residence-fits/over-card",
                               **_added("chat", {**LLAMA_UNIT_SERVICE, **NO_UNIT, **COMPOSE_VOLUMES, **IMAGE_ROOT,
                                                 # the profile: the ledger's seams judge it
                                                 "profile-declared": PASSED, "slot-within-trained-window": PASSED,
                                                 "card-floor": PASSED, "prompt-cache-holds-slot": PASSED,
                                                 # the image tag pins b10867; the payload is the declared one
                                                 "engine-build-minimum": PASSED, "container-paths": PASSED,
                                                 "payload-defaults": SKIPPED}),
                               # the llama.cpp seams now have a subject
                               **{f"fleet:{check}": ABSENT for check in LLAMA_ONLY}}),
    # cache-reuse-kept (issue 32) on unit-exec: beside a projector (no profile needed); on gemma-3-270m (its profile,
    # 15 of 18 blocks windowed) without --swa-full; on an M-RoPE architecture.
    "reuse-multimodal": ("unit-exec", REUSE["reuse-multimodal"][0], {"chat:cache-reuse-kept": "cache-reuse-kept/multimodal"}),
    **{case: ("unit-exec", REUSE[case][0],
              {"chat:cache-reuse-kept": code, "chat:profile-declared": PASSED, "chat:card-floor": PASSED,
               "chat:prompt-cache-holds-slot": PASSED, "chat:slot-within-trained-window": PASSED})
       for case, code in (("reuse-sliding-window", "cache-reuse-kept/sliding-window"),
                          ("reuse-m-rope", "cache-reuse-kept/no-shift"))},
    # volume-variables (issue 32): ${MODELS} that no .env sets is ':/models', no bind mount: the model is not mounted.
    "volume-unset": ("compose-vllm", VOLUME_COMPOSE["unset"][0],
                     {"qwen:volume-variables": "volume-variables/compose-unset",
                      "qwen:container-paths": "container-paths/compose-not-mounted"}),
    # embeddings-served (issue 32): a preset section with pooling and no embeddings; a contract that lists them.
    "embeddings-preset-pooling": ("router-preset", EMBEDDINGS_PRESET["pooling-only"][0],
                                  {"coder:embeddings-served": "embeddings-served/pooling-only"}),
    "embeddings-contract": ("unit-exec", EMBEDDINGS_CONTRACT["contract-without-flag"][0],
                            {"chat:embeddings-served": "embeddings-served/contract-endpoint"}),
    # container-user (issue 32): who the containerised engine runs as, as its start file says.
    "user-compose-uid": ("compose-llama", [("docker/compose.yaml", "    restart: unless-stopped\n",
                                            '    restart: unless-stopped\n    user: "1000:1000"\n')],
                         {"chat:container-user": PASSED}),
    "user-compose-root": ("compose-llama", [("docker/compose.yaml", "    restart: unless-stopped\n",
                                             "    restart: unless-stopped\n    user: root\n")],
                          {"chat:container-user": "container-user/root"}),
    "user-docker-uid": ("docker-run", [("scripts/run-coder.sh", "  --gpus all \\\n", "  --gpus all -u 1000:1000 \\\n")],
                        {"coder:container-user": PASSED}),
    "user-docker-root": ("docker-run", [("scripts/run-coder.sh", "  --gpus all \\\n", "  --gpus all --user=0 \\\n")],
                         {"coder:container-user": "container-user/root"}),
    # runAsNonRoot alone on an image whose USER is root: the kubelet refuses the container.
    "user-k8s-non-root-alone": ("kubernetes", [("deploy/llama/statefulset.yaml", "          args: [\"-m\"",
                                                "          securityContext:\n            runAsNonRoot: true\n"
                                                "          args: [\"-m\"")],
                                {"gemma:container-user": "container-user/non-root-refused"}),
    # The pod's runAsUser, under the container's runAsNonRoot: it starts as 1000.
    "user-k8s-pod-uid": ("kubernetes", [("deploy/llama/statefulset.yaml", "      nodeSelector:\n",
                                         "      securityContext:\n        runAsUser: 1000\n      nodeSelector:\n"),
                                        ("deploy/llama/statefulset.yaml", "          args: [\"-m\"",
                                         "          securityContext:\n            runAsNonRoot: true\n"
                                         "          args: [\"-m\"")],
                         {"gemma:container-user": PASSED}),
    # The container's runAsUser 0 over the pod's 1000.
    "user-k8s-container-root": ("kubernetes", [("deploy/llama/statefulset.yaml", "      nodeSelector:\n",
                                                "      securityContext:\n        runAsUser: 1000\n      nodeSelector:\n"),
                                               ("deploy/llama/statefulset.yaml", "          args: [\"-m\"",
                                                "          securityContext:\n            runAsUser: 0\n"
                                                "          args: [\"-m\"")],
                                {"gemma:container-user": "container-user/root"}),
    # tools-need-jinja (issue 32): a contract that promises tool calls, jinja on by default, then turned off.
    "tools-jinja-default": ("unit-exec", [("fleet.toml", 'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n',
                                           'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n\n'
                                           "[services.chat.contract]\ntools = true\n"),
                                          ("env/chat.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                           'EXTRA_ARGS="--flash-attn on"')],
                            # the template is the GGUF's own, and the model is not on this machine
                            {"chat:tools-need-jinja": PASSED, "chat:chat-template": NOT_JUDGED}),
    "tools-no-jinja": ("unit-exec", [("fleet.toml", 'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n',
                                      'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n\n'
                                      "[services.chat.contract]\ntools = true\n"),
                                     ("env/chat.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                      'EXTRA_ARGS="--no-jinja --flash-attn on"')],
                       {"chat:tools-need-jinja": "tools-need-jinja/no-jinja"}),
    # chat-template (issue 32): a --chat-template-file under deploy_root that the repository does not hold stops
    # llama-server at start; one outside the repository, or a builtin name, cannot be read here.
    "chat-template-missing": ("unit-exec", [("env/chat.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                             'EXTRA_ARGS="--jinja --flash-attn on --chat-template-file '
                                             '/etc/llama/templates/chat.jinja"')],
                              {"chat:chat-template": "chat-template/missing-file"}),
    "chat-template-outside": ("unit-exec", [("env/chat.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                             'EXTRA_ARGS="--jinja --flash-attn on --chat-template-file '
                                             '/usr/share/llama/chat.jinja"'),
                                            ("fleet.toml", 'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n',
                                             'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n\n'
                                             "[services.chat.contract]\ntools = true\n")],
                              {"chat:chat-template": NOT_JUDGED, "chat:tools-need-jinja": PASSED}),
    "chat-template-builtin": ("unit-exec", [("env/chat.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                             'EXTRA_ARGS="--jinja --flash-attn on --chat-template chatml"'),
                                            ("fleet.toml", 'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n',
                                             'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n\n'
                                             "[services.chat.contract]\ntools = true\n")],
                              {"chat:chat-template": NOT_JUDGED, "chat:tools-need-jinja": PASSED}),
    # A runAsUser that is no UID: the manifest cannot be read as the kubelet reads it, one line.
    "user-k8s-not-a-uid": ("kubernetes", [("deploy/llama/statefulset.yaml", "          args: [\"-m\"",
                                           "          securityContext:\n            runAsUser: llama\n"
                                           "          args: [\"-m\"")],
                           _broken("kubernetes", "gemma")),
    # Compose: the port clients reach is the published one; the engine's --port must be what ports: publishes.
    "compose-published-differs": ("compose-llama", [("docker/.env", "LLAMA_PORT=8081", "LLAMA_PORT=8082")],
                                  {"chat:rendered-port-matches": "rendered-port-matches/published-differs"}),
    "compose-engine-port-unpublished": ("compose-llama", [("docker/compose.yaml", '"--port", "8080"',
                                                           '"--port", "9090"')],
                                        {"chat:rendered-port-matches": "rendered-port-matches/not-published"}),
    "compose-vllm-published-differs": ("compose-vllm", [(".env", "VLLM_PORT=8000", "VLLM_PORT=8001")],
                                       {"qwen:rendered-port-matches": "rendered-port-matches/published-differs"}),
    # Without VLLM_PORT in .env, ${VLLM_PORT:-8000} publishes 8000; on the host network the engine's port is the host's.
    "compose-vllm-port-default": ("compose-vllm", [(".env", "VLLM_PORT=8000\n", "")], {}),
    "compose-vllm-host-network": ("compose-vllm", [("compose.yaml", 'ports:\n      - "${VLLM_PORT:-8000}:8000"',
                                                    "network_mode: host")], {}),
    # A container sees no GPU unless it is granted one; a device id the host does not have fails at start.
    "compose-no-gpu": ("compose-llama", [("docker/compose.yaml", "    deploy:\n", "    x-deploy:\n")],
                       {"chat:device-visibility": "device-visibility/compose-no-gpu"}),
    "compose-unknown-device": ("compose-llama", [("docker/compose.yaml", 'device_ids: ["0"]', 'device_ids: ["1"]')],
                               {"chat:device-visibility": "device-visibility/compose-unknown-device"}),
    # AMD (ROCm: /dev/kfd and the render nodes) and Vulkan (render nodes alone) cards are granted as device nodes,
    # the way the ROCm and Vulkan images' own compose examples pass them; group_add only gives the permission.
    "compose-amd-devices": ("compose-llama", [("docker/compose.yaml", "server-cuda-b10867", "server-rocm-b10867"),
                                              ("docker/compose.yaml", "    deploy:\n",
                                               "    devices:\n      - /dev/kfd\n      - /dev/dri\n"
                                               "    group_add: [video, render]\n    x-deploy:\n")], {}),
    "compose-vulkan-render-node": ("compose-llama", [("docker/compose.yaml", "    deploy:\n",
                                                      '    devices: ["/dev/dri/renderD128:/dev/dri/renderD128"]\n'
                                                      "    x-deploy:\n")], {}),
    # GGML_VK_VISIBLE_DEVICES indexes the Vulkan devices as HIP_VISIBLE_DEVICES does ROCm's: past the one card, none.
    "compose-vulkan-visible-past": ("compose-llama", [("docker/compose.yaml", "    deploy:\n",
                                                       "    devices: [/dev/dri]\n    x-deploy:\n"),
                                                      ("docker/compose.yaml", "      - LLAMA_ARG_CTX_SIZE",
                                                       "      - GGML_VK_VISIBLE_DEVICES=1\n      - LLAMA_ARG_CTX_SIZE")],
                                    {"chat:device-visibility": "device-visibility/nothing-visible"}),
    "compose-hip-visible-past": ("compose-llama", [("docker/compose.yaml", "    deploy:\n",
                                                    "    devices: [/dev/kfd, /dev/dri]\n    x-deploy:\n"),
                                                   ("docker/compose.yaml", "      - LLAMA_ARG_CTX_SIZE",
                                                    "      - HIP_VISIBLE_DEVICES=1\n      - LLAMA_ARG_CTX_SIZE")],
                                 {"chat:device-visibility": "device-visibility/nothing-visible"}),
    "compose-gpus-all": ("compose-llama", [("docker/compose.yaml", 'device_ids: ["0"]', "count: all")], {}),
    "compose-runtime-nvidia": ("compose-llama", [("docker/compose.yaml", "    deploy:\n", "    runtime: nvidia\n    x-deploy:\n")],
                               {}),
    # Two tensor-parallel ranks on the one card count: 1 grants.
    "compose-vllm-tp-past-grant": ("compose-vllm", [("compose.yaml", "--max-num-seqs 8", "--max-num-seqs 8 --tensor-parallel-size 2")],
                                   {"qwen:device-visibility": "device-visibility/too-few-visible"}),
    # The model path inside the container: a mount that does not hold it, a host file the payload does not name.
    "compose-model-not-mounted": ("compose-llama", [("docker/compose.yaml", "target: /models", "target: /weights")],
                                  {"chat:container-paths": "container-paths/compose-not-mounted"}),
    # The model on what no file of the repository shows (a named volume, long and short form; an anonymous volume a
    # download fills): not judged, never compose-not-mounted (the path is mounted). A named volume mounted deeper
    # than a bind mount hides it there, as docker does.
    "compose-model-named-volume": ("compose-llama", [("docker/compose.yaml", "      - type: bind\n        source: /srv/llm/models\n",
                                                      "      - type: volume\n        source: models\n")],
                                   {"chat:container-paths": NOT_JUDGED}),
    "compose-model-named-volume-short": ("compose-llama", [("docker/compose.yaml", _COMPOSE_MODEL_BIND,
                                                            "      - models:/models:ro\n")],
                                         {"chat:container-paths": NOT_JUDGED}),
    "compose-model-anonymous-volume": ("compose-llama", [("docker/compose.yaml", _COMPOSE_MODEL_BIND,
                                                          "      - /models\n")],
                                       {"chat:container-paths": NOT_JUDGED}),
    "compose-named-volume-over-bind": ("compose-llama", [("docker/compose.yaml", "        read_only: true\n",
                                                          "        read_only: true\n      - cache:/models/cache\n")],
                                       {}),
    # A bind mount of the repository's own directory: the file the engine is given there must be committed.
    "compose-template-not-committed": ("compose-llama", [("docker/compose.yaml", "        read_only: true\n",
                                                          "        read_only: true\n      - ./templates:/templates:ro\n"),
                                                         ("docker/compose.yaml", '"--port", "8080"]',
                                                          '"--port", "8080", "--chat-template-file", "/templates/chat.jinja"]')],
                                       {"chat:container-paths": "container-paths/compose-missing-in-repo"}),
    "compose-payload-undeclared": ("compose-llama", [("docker/.env", "MODEL_FILE=gemma-3-12b-it-Q4_K_M.gguf",
                                                      "MODEL_FILE=gemma-3-27b-it-Q4_K_M.gguf")],
                                   {"chat:container-paths": "container-paths/payload-undeclared"}),
    "compose-short-volume": ("compose-llama", [("docker/compose.yaml", "      - type: bind\n        source: /srv/llm/models\n"
                                                "        target: /models\n        read_only: true\n",
                                                "      - /srv/llm/models:/models:ro\n")], {}),
    # The ~31 GB FP8 checkpoint the house first tried on the 24 GiB card: vLLM stops while loading it.
    "compose-vllm-31gb-checkpoint": ("compose-vllm", [("compose.yaml", "/models/Qwen3-8B-FP8", "/models/Qwen3-30B-A3B-FP8"),
                                                      ("fleet.toml", '"/srv/models/Qwen3-8B-FP8"', '"/srv/models/Qwen3-30B-A3B-FP8"'),
                                                      ("fleet.toml", "qwen3-8b-fp8.toml", "qwen3-30b-a3b-fp8.toml")],
                                     {"qwen:vllm-starts": "vllm-starts/weights-exceed-budget"}),
    # A compose file that cannot be read as compose reads it is that service's one finding; its other seams skip.
    "compose-required-variable-unset": ("compose-llama", [("docker/.env", "MODEL_FILE=gemma-3-12b-it-Q4_K_M.gguf\n", "")],
                                        _broken("compose-llama", "chat")),
    "compose-not-yaml": ("compose-llama", [("docker/compose.yaml", "    ports:\n", "    ports: [\n")],
                         _broken("compose-llama", "chat")),
    # entrypoint: '' drops the image's entrypoint: command is then the whole command line.
    "compose-entrypoint-reset": ("compose-llama", [("docker/compose.yaml", 'command: ["-m",',
                                                    'entrypoint: ""\n    command: ["/app/llama-server", "-m",')], {}),
    # MAX_MODEL_LEN from .env: one 131,072-token sequence needs 18 GiB of KV, the pool is at most 13.4 GiB. 131,072
    # is past the checkpoint's max_position_embeddings (40,960), which vLLM refuses at config unless the container's
    # environment allows it (issue 35); allowed, the pool is what stops it.
    "compose-vllm-pool-below-one-sequence": ("compose-vllm", [(".env", "MAX_MODEL_LEN=16384", "MAX_MODEL_LEN=131072"),
                                                              ("compose.yaml", "      VLLM_LOGGING_LEVEL: INFO\n",
                                                               "      VLLM_LOGGING_LEVEL: INFO\n"
                                                               '      VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"\n')],
                                             {"qwen:vllm-starts": "vllm-starts/pool-below-one-sequence"}),
    # the same length without that permission: refused at config, before any pool is sized
    "compose-vllm-max-model-len-over-model": ("compose-vllm", [(".env", "MAX_MODEL_LEN=16384", "MAX_MODEL_LEN=131072")],
                                              {"qwen:vllm-starts": "vllm-starts/max-model-len-over-model"}),
    # The old image entrypoint (python3 -m vllm.entrypoints.openai.api_server) reads the same flags.
    "compose-vllm-api-server": ("compose-vllm", [("compose.yaml", "    command: >\n",
                                                  '    entrypoint: ["python3", "-m", "vllm.entrypoints.openai.api_server"]\n'
                                                  "    command: >\n")], {}),
    # bash -c in ExecStart=: systemd expands ${CTX:-16384} inside the -c string before bash runs it, and passes an
    # empty string (bash never sees the default); `$${...}` is the harmless spelling that hands bash the default.
    "bash-c-systemd-eats-default": ("unit-bash-c", [("systemd/llama-mistral.service", '"$${CTX:-16384}"', '"${CTX:-16384}"')],
                                    {"mistral:unit-exec-args": "unit-exec-args/shell-expansion",
                                     "mistral:engine-accepts-argv": "engine-accepts-argv/empty-value",
                                     "mistral:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    "bash-c-stray-positional": ("unit-bash-c", [("env/mistral.env", 'EXTRA_ARGS="--jinja --flash-attn on"',
                                                 'EXTRA_ARGS="--jinja true --flash-attn on"')],
                                {"mistral:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    "bash-c-port-differs": ("unit-bash-c", [("env/mistral.env", "PORT=8090", "PORT=8091")],
                            {"mistral:rendered-port-matches": "rendered-port-matches/differs"}),
    # The same inline script under sh -c, and with the engine started by its absolute path in the build tree.
    "bash-c-as-sh": ("unit-bash-c", [("systemd/llama-mistral.service", "ExecStart=/bin/bash -c", "ExecStart=/bin/sh -c")], {}),
    "bash-c-absolute-engine": ("unit-bash-c", [("systemd/llama-mistral.service",
                                                "cd /opt/llama.cpp/build/bin && exec ./llama-server",
                                                "exec /opt/llama.cpp/build/bin/llama-server")], {}),
    # docker run: the engine binds 8080 in the container; -p must publish it on fleet.toml's port.
    "docker-port-not-published": ("docker-run", [("scripts/run-coder.sh", '-p "${PORT}:8080"', '-p "${PORT}:8081"')],
                                  {"coder:rendered-port-matches": "rendered-port-matches/run-not-published",
                                   "coder:engine-auth": SKIPPED}),  # the engine's port is not published at all
    "docker-host-port-differs": ("docker-run", [("config/coder.env", "PORT=8000", "PORT=8001")],
                                 {"coder:rendered-port-matches": "rendered-port-matches/run-published-differs"}),
    "docker-stray-positional": ("docker-run", [("scripts/run-coder.sh", "  --jinja\n", "  --jinja true\n")],
                                {"coder:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    # Harmless spellings of the same run line: --flag=value with an address, host networking, podman.
    "docker-publish-equals": ("docker-run", [("scripts/run-coder.sh", '-p "${PORT}:8080"',
                                              '--publish="127.0.0.1:${PORT}:8080"')],
                              {"coder:engine-auth": SKIPPED}),  # published on loopback only
    "docker-network-host": ("docker-run", [("scripts/run-coder.sh", '-p "${PORT}:8080"', "--network host"),
                                           ("scripts/run-coder.sh", "--port 8080", '--port "$PORT"')], {}),
    # device-visibility reads docker run's grant as fleetgate.visibility does (issue 32): no --gpus, no GPU --device,
    # no NVIDIA_VISIBLE_DEVICES, and the container sees no GPU; a CDI name grants the card as --gpus all does.
    "docker-no-gpus": ("docker-run", [("scripts/run-coder.sh", "  --gpus all \\\n", "")],
                       {"coder:device-visibility": "device-visibility/container-no-gpu"}),
    "docker-cdi-device": ("docker-run", [("scripts/run-coder.sh", "--gpus all", "--device nvidia.com/gpu=all")], {}),
    "docker-nvidia-visible-none": ("docker-run", [("scripts/run-coder.sh", "--gpus all",
                                                   "--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=none")],
                                   {"coder:device-visibility": "device-visibility/nothing-visible"}),
    "podman-container-run": ("docker-run", [("scripts/run-coder.sh", "exec docker run", "exec podman container run")], {}),
    # The install script renders another port than fleet.toml's: found through the rendered env file.
    "install-port-differs": ("unit-install-env", [("install.sh", "PORT=${PORT:-8080}", "PORT=${PORT:-8081}")],
                             {"llama:rendered-port-matches": "rendered-port-matches/differs"}),
    # A shell default written into the template reaches the systemd env file literally (sed copies it).
    "template-shell-default": ("unit-install-env", [("config/llama-server.env.in", "LLAMA_CTX=8192",
                                                     "LLAMA_CTX=${CTX:-8192}")],
                               {"llama:unit-env-files": "unit-env-files/literal-expansion",
                                "llama:engine-accepts-argv": "engine-accepts-argv/refused-value",
                                "llama:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    # The script takes the model directory from its environment: its default is what the render sees.
    "install-model-dir": ("unit-install-env", [("install.sh", 'echo "llama.service installed', 'echo "installed')], {}),
    # llama-swap: a chat group that keeps both chat models loaded (swap: false) beside the persistent autocomplete
    # model: 11.82 + 6.09 + 2.32 GiB on a 16 GiB card, though each fits alone.
    "swap-group-not-swapping": ("llama-swap", [("config/llama-swap.yaml", "groups:\n",
                                                'groups:\n  chat:\n    swap: false\n    members: ["qwen2.5-coder:14b", '
                                                '"llama3.1:8b"]\n')],
                                {"workstation:co-residence-fits": "co-residence-fits/over-card"}),
    # The same group swapping its members but leaving the other groups loaded (exclusive: false): one chat model
    # beside the autocomplete model, as before.
    "swap-group-not-exclusive": ("llama-swap", [("config/llama-swap.yaml", "groups:\n",
                                                 'groups:\n  chat:\n    exclusive: false\n    members: '
                                                 '["qwen2.5-coder:14b", "llama3.1:8b"]\n')], {}),
    # The coder's context doubled: 14.8 GiB fits the card alone (card-floor passes), not beside the autocomplete model.
    "swap-context-beside-persistent": ("llama-swap", [("config/llama-swap.yaml", "  ctx: 16384", "  ctx: 32768")],
                                       {"workstation:co-residence-fits": "co-residence-fits/over-card"}),
    # The autocomplete model no longer persistent and exclusive (llama-swap's defaults): loading a chat model unloads
    # it, so nothing shares the card.
    "swap-editor-exclusive": ("llama-swap", [("config/llama-swap.yaml", "    swap: false\n    exclusive: false\n"
                                              "    persistent: true\n", "")],
                              {"workstation:co-residence-fits": SKIPPED}),
    # fleet.toml says the autocomplete model never runs beside the coder: only the llama is co-resident with it.
    "swap-declared-exclusive": ("llama-swap", [("fleet.toml", 'llama_swap_model = "qwen2.5-coder:14b"\n',
                                                'llama_swap_model = "qwen2.5-coder:14b"\nexclusive_with = ["autocomplete"]\n'),
                                               ("config/llama-swap.yaml", "  ctx: 16384", "  ctx: 32768")], {}),
    # A hard-coded port with its proxy: the engine listens where llama-swap forwards; a wrong proxy is a finding.
    "swap-proxy-port": ("llama-swap", [("config/llama-swap.yaml", "        --ctx-size 4096",
                                        "        --ctx-size 4096 --port 9999"),
                                       ("config/llama-swap.yaml", "    checkEndpoint: /health",
                                        "    checkEndpoint: /health\n    proxy: http://127.0.0.1:9998")],
                        {"autocomplete:rendered-port-matches": "rendered-port-matches/differs"}),
    "swap-proxy-port-matching": ("llama-swap", [("config/llama-swap.yaml", "        --ctx-size 4096",
                                                 "        --ctx-size 4096 --port 9999"),
                                                ("config/llama-swap.yaml", "    checkEndpoint: /health",
                                                 "    checkEndpoint: /health\n    proxy: http://127.0.0.1:9999")], {}),
    # Router preset: the llama's context raised to 49152 (11.09 GiB, fits alone): the router keeps all three models
    # loaded (--models-max 4), and together they are over the 24 GiB card.
    "preset-context-all-loaded": ("router-preset", [("config/models.ini", "LLAMA_ARG_CTX_SIZE = 8192",
                                                     "LLAMA_ARG_CTX_SIZE = 49152")],
                                  {"studio:co-residence-fits": "co-residence-fits/over-card"}),
    # The same context with the router started as --models-max 2: any two of the three fit the card together.
    "preset-models-max-two": ("router-preset", [("config/models.ini", "LLAMA_ARG_CTX_SIZE = 8192",
                                                 "LLAMA_ARG_CTX_SIZE = 49152"),
                                                ("fleet.toml", 'preset_model = "llama-3.1-8b"\n',
                                                 'preset_model = "llama-3.1-8b"\nmodels_max = 2\n')], {}),
    # Kubernetes: the Service forwards to a port the engine does not listen on, or clients connect to another port.
    "kubernetes-service-misses-engine": ("kubernetes", [("deploy/vllm/deployment.yaml", "      targetPort: http",
                                                         "      targetPort: 8001")],
                                         {"qwen:rendered-port-matches": "rendered-port-matches/kubernetes-not-targeted"}),
    "kubernetes-service-port-differs": ("kubernetes", [("deploy/llama/statefulset.yaml", "    - port: 8080",
                                                        "    - port: 8081")],
                                        {"gemma:rendered-port-matches": "rendered-port-matches/kubernetes-port-differs"}),
    # The engine's port from the ConfigMap-fed $(PORT): moved, the Service's targetPort no longer reaches it.
    "kubernetes-env-port-moved": ("kubernetes", [("deploy/llama/statefulset.yaml", 'value: "8080"', 'value: "8090"')],
                                  {"gemma:rendered-port-matches": "rendered-port-matches/kubernetes-not-targeted",
                                   # the NodePort no longer reaches the engine's port: nothing outside reaches it
                                   "gemma:engine-auth": SKIPPED}),
    # The same Service targeting the container port by number: harmless.
    "kubernetes-target-by-number": ("kubernetes", [("deploy/vllm/deployment.yaml", "      targetPort: http",
                                                    "      targetPort: 8000")], {}),
    # No GPU asked of the device plugin, or more than the node has.
    "kubernetes-no-gpu": ("kubernetes", [("deploy/llama/statefulset.yaml", '              nvidia.com/gpu: "1"\n',
                                          "              memory: 16Gi\n")],
                          {"gemma:device-visibility": "device-visibility/kubernetes-no-gpu"}),
    "kubernetes-too-many-cards": ("kubernetes", [("deploy/llama/statefulset.yaml", 'nvidia.com/gpu: "1"',
                                                  'nvidia.com/gpu: "2"')],
                                  {"gemma:device-visibility": "device-visibility/kubernetes-too-many-cards"}),
    # An AMD card through its device plugin is granted the same way.
    "kubernetes-amd-gpu": ("kubernetes", [("deploy/llama/statefulset.yaml", 'nvidia.com/gpu: "1"', 'amd.com/gpu: "1"')],
                           {}),
    # Kubernetes volumes (container-paths): vLLM's model directory mounted at another path than the one it is given
    # is the image's own filesystem, where vllm/vllm-openai holds no model; mounted deeper, the same file.
    "k8s-model-not-mounted": ("kubernetes", [("deploy/vllm/deployment.yaml", "mountPath: /models\n",
                                              "mountPath: /mnt/models\n")],
                              {"qwen:container-paths": "container-paths/k8s-not-mounted"}),
    "k8s-model-mounted-deeper": ("kubernetes", [("deploy/vllm/deployment.yaml", "mountPath: /models\n",
                                                 "mountPath: /models/Qwen3-8B-FP8\n"),
                                                ("deploy/vllm/deployment.yaml", "path: /srv/models\n",
                                                 "path: /srv/models/Qwen3-8B-FP8\n")], {}),
    # The hostPath moved off the payload the host is declared to hold.
    "k8s-hostpath-undeclared": ("kubernetes", [("deploy/vllm/deployment.yaml", "path: /srv/models\n",
                                                "path: /data/models\n")],
                                {"qwen:container-paths": "container-paths/k8s-payload-undeclared"}),
    # A chat template from a hostPath of the deployed repository that the repository does not commit; the same
    # template from a host directory the payload declares passes.
    "k8s-template-not-committed": ("kubernetes", [
        ("fleet.toml", 'name = "rack"\n', 'name = "rack"\ndeploy_root = "/opt/rack"\n'),
        *_k8s_template_mount("/opt/rack/templates")],
        {"qwen:container-paths": "container-paths/k8s-missing-in-repo"}),
    "k8s-template-declared-payload": ("kubernetes", [
        ("fleet.toml", 'payload = ["/srv/models/Qwen3-8B-FP8"]',
         'payload = ["/srv/models/Qwen3-8B-FP8", "/srv/templates/qwen3.jinja"]'),
        *_k8s_template_mount("/srv/templates")], {}),
    # A chat template from a configMap volume: the ConfigMap the repository defines has no such key (the file is not
    # there), has it (passes), or is not in the repository at all (created by hand: not judged).
    "k8s-configmap-key-missing": ("kubernetes", [*K8S_TEMPLATE_CONFIG_MAP, *_k8s_template_mount(None)],
                                  {"qwen:container-paths": "container-paths/k8s-configmap-key-missing"}),
    "k8s-configmap-key-held": ("kubernetes", [*K8S_TEMPLATE_CONFIG_MAP, *_k8s_template_mount(None, "chat.jinja")], {}),
    "k8s-configmap-not-held": ("kubernetes", _k8s_template_mount(None), {"qwen:container-paths": NOT_JUDGED}),
    # kustomize's build output (rendered/gpu-node.yaml) is read as the cluster applies it: a patch that drops the GPU
    # limit leaves vLLM no card, and a misspelt flag in the args is one vLLM 0.13.0 (the overlay's image tag) refuses.
    "kustomize-no-gpu": ("kustomize", [("rendered/gpu-node.yaml", "            nvidia.com/gpu: 1\n",
                                        "            memory: 32Gi\n")],
                         {"mistral-vllm:device-visibility": "device-visibility/kubernetes-no-gpu"}),
    "kustomize-misspelt-flag": ("kustomize", [("rendered/gpu-node.yaml", "        - --gpu-memory-utilization\n",
                                               "        - --gpu-memory-utilisation\n")],
                                {"mistral-vllm:vllm-argv": "vllm-argv/unknown-flag"}),
    # The limit quoted, as kustomize prints a string patch value: the same one card.
    "kustomize-gpu-quoted": ("kustomize", [("rendered/gpu-node.yaml", "            nvidia.com/gpu: 1\n",
                                            '            nvidia.com/gpu: "1"\n')], {}),
    # container-user/no-device-group (issue 32): a non-root user given /dev/kfd and /dev/dri opens them only through
    # the group that owns them (root:render or root:video, 0660); without one ROCm sees no GPU. A GID is the host's,
    # judged only against the GIDs the host declares its device nodes belong to.
    "device-group-missing": ("compose-rocm", [("compose.yaml", "    group_add:\n      - video\n      - render\n",
                                               '    user: "1000"\n')],
                             {"chat:container-user": "container-user/no-device-group"}),
    "device-group-render": ("compose-rocm", [("compose.yaml", "    group_add:\n      - video\n      - render\n",
                                              '    user: "1000:1000"\n    group_add: [render]\n')],
                            {"chat:container-user": PASSED}),
    "device-group-gid-undeclared": ("compose-rocm", [("compose.yaml", "    group_add:\n      - video\n      - render\n",
                                                      '    user: "1000"\n    group_add: ["992"]\n')],
                                    {"chat:container-user": NOT_JUDGED}),
    "device-group-gid-declared": ("compose-rocm", [("compose.yaml", "    group_add:\n      - video\n      - render\n",
                                                    '    user: "1000"\n    group_add: ["992"]\n'),
                                                   ("fleet.toml", "ram_gib = 64\n", "ram_gib = 64\ndevice_gids = [44, 992]\n")],
                                  {"chat:container-user": PASSED}),
    "device-group-gid-not-the-hosts": ("compose-rocm", [("compose.yaml", "    group_add:\n      - video\n      - render\n",
                                                         '    user: "1000"\n    group_add: ["993"]\n'),
                                                        ("fleet.toml", "ram_gib = 64\n", "ram_gib = 64\ndevice_gids = [44, 992]\n")],
                                       {"chat:container-user": "container-user/no-device-group"}),
    "device-group-docker-run": ("docker-run", [("scripts/run-coder.sh", "  --gpus all \\\n",
                                                "  --device /dev/kfd --device /dev/dri -u 1000 \\\n")],
                                {"coder:container-user": "container-user/no-device-group"}),
    "device-group-docker-run-video": ("docker-run", [("scripts/run-coder.sh", "  --gpus all \\\n",
                                                      "  --device /dev/kfd --device /dev/dri -u 1000:1000 "
                                                      "--group-add video \\\n")],
                                      {"coder:container-user": PASSED}),
    # The helm-output pod's GIDs 44 and 110 judged against the MI100 node's declared device GIDs.
    "device-group-helm-declared": ("helm-output", [("fleet.toml", "ram_gib = 256\n",
                                                    "ram_gib = 256\ndevice_gids = [44, 110]\n")],
                                   {"chat-llama-server:container-user": PASSED}),
    "device-group-helm-other-gid": ("helm-output", [("fleet.toml", "ram_gib = 256\n",
                                                     "ram_gib = 256\ndevice_gids = [992]\n")],
                                    {"chat-llama-server:container-user": "container-user/no-device-group"}),
    # AMD's device plugin hands the pod /dev/kfd and a render node; supplementalGroups are GIDs only.
    "device-group-k8s-none": ("kubernetes", [("deploy/llama/statefulset.yaml", 'nvidia.com/gpu: "1"', 'amd.com/gpu: "1"'),
                                             ("deploy/llama/statefulset.yaml", "      nodeSelector:\n",
                                              "      securityContext:\n        runAsUser: 1000\n      nodeSelector:\n")],
                              {"gemma:container-user": "container-user/no-device-group"}),
    "device-group-k8s-gid": ("kubernetes", [("deploy/llama/statefulset.yaml", 'nvidia.com/gpu: "1"', 'amd.com/gpu: "1"'),
                                            ("deploy/llama/statefulset.yaml", "      nodeSelector:\n",
                                             "      securityContext:\n        runAsUser: 1000\n"
                                             "        supplementalGroups: [110]\n      nodeSelector:\n")],
                             {"gemma:container-user": NOT_JUDGED}),
    # The same pod on NVIDIA's plugin: its device nodes are the toolkit's to open, no group asked.
    "device-group-k8s-nvidia": ("kubernetes", [("deploy/llama/statefulset.yaml", "      nodeSelector:\n",
                                                "      securityContext:\n        runAsUser: 1000\n      nodeSelector:\n")],
                                {"gemma:container-user": PASSED}),
    # co-residence-fits/over-ram (issue 32): a router whose presets keep their weights on the host (ngl = 0 under [*])
    # books them in host RAM; the --models-max largest together must fit the host. At 22 GiB of RAM any two fit and
    # the three do not (the 14B's Q4_K_M file alone is 8.4 GiB, its 32768-token f16 KV 6 GiB, on the host).
    **{f"router-ram-models-max-{n}": ("compose-router", [
        ("llama/models.ini", "ngl = 999", "ngl = 0"), ("fleet.toml", "ram_gib = 64", "ram_gib = 22"),
        *[("fleet.toml", f'preset_model = "{m}"\nmodels_max = 2', f'preset_model = "{m}"\nmodels_max = {n}')
          for m in ("qwen2.5-coder-14b", "llama-3.1-8b", "qwen2.5-coder-1.5b")]],
        {"lab:co-residence-fits": outcome}) for n, outcome in ((2, PASSED), (3, "co-residence-fits/over-ram"))},
    # The same two on the card (ngl = 999): the host holds their token embeddings and logits only, and 22 GiB is enough.
    "router-ram-on-card": ("compose-router", [("fleet.toml", "ram_gib = 64", "ram_gib = 22")], {}),
    # vllm-start-headroom on Kubernetes (issue 32): a card the device plugin time-slices, or one a pod sees through
    # NVIDIA_VISIBLE_DEVICES=all, is shared; vLLM at 0.95 beside another vLLM on it refuses to start second. The
    # one card cannot hold 0.95 + 0.40 of itself either (co-residence-fits, which books vLLM's fractions).
    "k8s-share-time-sliced": ("kubernetes-sharing", [("deploy/vllm/chat.yaml", '"0.55"', '"0.95"')],
                              {"homelab:vllm-start-headroom": "vllm-start-headroom/fractions-over-card",
                               "homelab:co-residence-fits": "co-residence-fits/over-card"}),
    # No sharing config: each nvidia.com/gpu: 1 is a whole card of its own, never shared, and headroom passes; the
    # node's one card cannot go to both pods at once (the second stays Pending), which co-residence still says.
    "k8s-share-no-config": ("kubernetes-sharing", [("deploy/vllm/chat.yaml", '"0.55"', '"0.95"'),
                                                   ("deploy/gpu/time-slicing.yaml", "    sharing:\n      timeSlicing:\n"
                                                    "        resources:\n          - name: nvidia.com/gpu\n"
                                                    "            replicas: 4\n", "")],
                            {"homelab:vllm-start-headroom": PASSED,
                             "homelab:co-residence-fits": "co-residence-fits/over-card"}),
    # No sharing config, and the coder asks the device plugin for nothing but sets NVIDIA_VISIBLE_DEVICES=all: NVIDIA's
    # runtime shows it the node's card anyway.
    "k8s-share-visible-all": ("kubernetes-sharing", [
        ("deploy/vllm/chat.yaml", '"0.55"', '"0.95"'),
        ("deploy/gpu/time-slicing.yaml", "    sharing:\n      timeSlicing:\n        resources:\n"
         "          - name: nvidia.com/gpu\n            replicas: 4\n", ""),
        ("deploy/vllm/coder.yaml", "          resources:\n            limits:\n              nvidia.com/gpu: 1\n",
         "          env:\n            - name: NVIDIA_VISIBLE_DEVICES\n              value: all\n")],
        {"homelab:vllm-start-headroom": "vllm-start-headroom/fractions-over-card",
         "homelab:co-residence-fits": "co-residence-fits/over-card"}),
    # A renamed shared resource (rename: nvidia.com/gpu.shared) is what the pods ask for, and is the same card.
    "k8s-share-renamed": ("kubernetes-sharing", [
        ("deploy/vllm/chat.yaml", '"0.55"', '"0.95"'),
        ("deploy/gpu/time-slicing.yaml", "replicas: 4\n", "replicas: 4\n            rename: nvidia.com/gpu.shared\n"),
        ("deploy/vllm/chat.yaml", "nvidia.com/gpu: 1", "nvidia.com/gpu.shared: 1"),
        ("deploy/vllm/coder.yaml", "nvidia.com/gpu: 1", "nvidia.com/gpu.shared: 1")],
        {"homelab:vllm-start-headroom": "vllm-start-headroom/fractions-over-card",
         "homelab:co-residence-fits": "co-residence-fits/over-card"}),
    # MPS limits each replica's memory to its share, which is not modelled: not judged, in one line.
    "k8s-share-mps": ("kubernetes-sharing", [("deploy/vllm/chat.yaml", '"0.55"', '"0.95"'),
                                             ("deploy/gpu/time-slicing.yaml", "timeSlicing:", "mps:")],
                      {"homelab:vllm-start-headroom": NOT_JUDGED,
                       "homelab:co-residence-fits": "co-residence-fits/over-card"}),
    # A second node in the fleet: the coder's pod names no node, so which one it shares is the scheduler's.
    "k8s-share-unplaced": ("kubernetes-sharing", [
        ("deploy/vllm/chat.yaml", '"0.55"', '"0.95"'),
        ("fleet.toml", "[services.chat]", '[hosts.gpu-2]\nram_gib = 96\ndevices = [{ name = "CUDA0", vram_bytes = '
                                          '51527024640 }]\n\n[services.chat]')],
        {"homelab:vllm-start-headroom": NOT_JUDGED, "homelab:co-residence-fits": "co-residence-fits/over-card"}),
    # co-residence on a node of two cards with no sharing config (issue 32): the device plugin gives each pod's
    # nvidia.com/gpu: 1 a card of its own, so 0.95 and 0.40 are never summed on one card.
    "k8s-own-cards": ("kubernetes-sharing", [
        ("deploy/vllm/chat.yaml", '"0.55"', '"0.95"'),
        ("deploy/gpu/time-slicing.yaml", "    sharing:\n      timeSlicing:\n        resources:\n"
         "          - name: nvidia.com/gpu\n            replicas: 4\n", ""),
        ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 51527024640 }]',
         'devices = [{ name = "CUDA0", vram_bytes = 51527024640 }, { name = "CUDA1", vram_bytes = 51527024640 }]')],
        {"homelab:vllm-start-headroom": PASSED}),
    # One pod of the device plugin beside one that takes the node's cards through NVIDIA_VISIBLE_DEVICES=all: which
    # card the plugin gives is its own, so the sum on a card, and vLLM's headroom beside the other, are not judged,
    # naming what to pin.
    "k8s-own-card-beside-visible-all": ("kubernetes-sharing", [
        ("deploy/gpu/time-slicing.yaml", "    sharing:\n      timeSlicing:\n        resources:\n"
         "          - name: nvidia.com/gpu\n            replicas: 4\n", ""),
        ("deploy/vllm/coder.yaml", "          resources:\n            limits:\n              nvidia.com/gpu: 1\n",
         "          env:\n            - name: NVIDIA_VISIBLE_DEVICES\n              value: all\n"),
        ("fleet.toml", 'devices = [{ name = "CUDA0", vram_bytes = 51527024640 }]',
         'devices = [{ name = "CUDA0", vram_bytes = 51527024640 }, { name = "CUDA1", vram_bytes = 51527024640 }]')],
        {"homelab:co-residence-fits": NOT_JUDGED, "homelab:vllm-start-headroom": NOT_JUDGED}),
    # A ConfigMap the pod reads that the repository lacks, a Secret key that is not there: the kubelet never starts
    # the container, and the service's render says which line.
    "kubernetes-missing-configmap": ("kubernetes", [("deploy/vllm/deployment.yaml", "name: vllm-qwen-config",
                                                     "name: vllm-config")], _broken("kubernetes", "qwen")),
    "kubernetes-missing-secret-key": ("kubernetes", [("deploy/vllm/deployment.yaml", "key: token", "key: hf-token")],
                                      _broken("kubernetes", "qwen")),
    # A misspelt key in one model's section: llama-server refuses the whole file, so no model of it starts.
    "preset-unknown-key": ("router-preset", [("config/models.ini", "ctx-size        = 4096", "ctx-sise        = 4096")],
                           {**_broken("router-preset", "coder"), **_broken("router-preset", "llama"),
                            **_broken("router-preset", "autocomplete"), "studio:co-residence-fits": SKIPPED}),
    # A key under its short name, and a negative one: the same argv (-np 1 is --parallel 1, no-jinja = false is --jinja).
    "preset-key-spellings": ("router-preset", [("config/models.ini", "parallel = 1", "np       = 1"),
                                               ("config/models.ini", "flash-attn   = on\njinja        = true",
                                                "flash-attn   = on\nno-jinja     = false")], {}),
    # Plain start scripts: vLLM's OpenAI server module run by the virtualenv's python is vllm serve with the same flags.
    "scripts-vllm-module": ("start-scripts", [("start_vllm.sh", 'nohup "$VENV/bin/vllm" serve "$MODEL"',
                                               'nohup "$VENV/bin/python" -m vllm.entrypoints.openai.api_server '
                                               '--model "$MODEL"')], {}),
    # A log written beside the script (after `cd "$(dirname "$0")"`): the host lets it, the render's repository is
    # read-only, so the engine started after it is not seen: not judged, in one line, never a refusal.
    "scripts-log-in-repo": ("start-scripts", [("start_vllm.sh", '> "$LOG_DIR/vllm.log"', "> vllm.log")],
                            {**{f"qwen:{c}": SKIPPED for (s, c) in _start_scripts_table() if s == "qwen"},
                             "qwen:serve-script-renders": NOT_JUDGED,
                             # vLLM's argv is not rendered: its fraction beside the llama-server cannot be judged
                             "box:vllm-start-headroom": NOT_JUDGED}),
    # The script's port is not the one the README (fleet.toml) gives clients.
    "scripts-port-moved": ("start-scripts", [("start_llama.sh", "--port 8081", "--port 8082")],
                           {"gemma:rendered-port-matches": "rendered-port-matches/differs"}),
    # A stray value after a switch in a start script: llama-server refuses it.
    "scripts-stray-positional": ("start-scripts", [("start_llama.sh", "--jinja", "--jinja on")],
                                 {"gemma:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    # Ansible (fleetgate.sources.ansible): a role default that holds a switch's value where the switch was meant.
    "ansible-stray-positional": ("ansible", [("roles/llama_server/defaults/main.yml", "  - --jinja\n", "  - --jinja\n  - true\n")],
                                 {"chat:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    # The template's user variable emptied in the gpu group's vars: User= with no value, the engine runs as root.
    "ansible-group-var-wins": ("ansible", [("inventory/group_vars/gpu.yml", "llama_server_gpu_layers: 99",
                                            "llama_server_gpu_layers: 99\nllama_server_user: \"\"")],
                               {"chat:unit-user": "unit-user/missing"}),
    # The host's own host_vars (fleet.toml lists it after the gpu group's): root set there runs the engine as root;
    # an emptied user in the group's vars is overridden by the host's llama, as Ansible's precedence has it.
    "ansible-host-var-wins": ("ansible", [("inventory/host_vars/orin.yml", "llama_server_ctx_size: 12288",
                                           "llama_server_ctx_size: 12288\nllama_server_user: root")],
                              {"chat:unit-user": "unit-user/root"}),
    "ansible-host-var-over-group-var": ("ansible", [
        ("inventory/group_vars/gpu.yml", "llama_server_gpu_layers: 99", "llama_server_gpu_layers: 99\nllama_server_user: \"\""),
        ("inventory/host_vars/orin.yml", "llama_server_ctx_size: 12288",
         "llama_server_ctx_size: 12288\nllama_server_user: llama")], {}),
    # A fact only Ansible gathers: the unit is not rendered, and the service is not judged in one line.
    "ansible-fact": ("ansible", [("roles/llama_server/defaults/main.yml", "llama_server_host: 127.0.0.1",
                                  "llama_server_host: \"{{ ansible_default_ipv4.address }}\"")],
                     {**{f"chat:{c}": SKIPPED for (s, c) in _ansible_table() if s == "chat"},
                      "chat:serve-script-renders": NOT_JUDGED}),
    # A template Jinja2 cannot parse is refused by Ansible too: a broken file, one line.
    "ansible-broken-template": ("ansible", [("roles/llama_swap/templates/config.yaml.j2", "{% endfor %}", "")],
                                {**_broken("ansible", "coder"), **_broken("ansible", "small")}),
    # NixOS (fleetgate.sources.nix): a stray value in extraFlags reaches the generated ExecStart= as a positional.
    "nix-stray-positional": ("nixos", [("modules/llm.nix", '"--jinja"', '"--jinja" "true"')],
                             {"chat:engine-accepts-argv": "engine-accepts-argv/stray-positional"}),
    # A systemd.services entry with no User= (and no DynamicUser=) runs its engine as root.
    "nix-no-user": ("nixos", [("modules/coder.nix", '      User = "llm";\n      Group = "llm";\n', "")],
                    {"coder:unit-user": "unit-user/missing"}),
    # The module's own DynamicUser=true, switched off with lib.mkForce and no User= given: root again.
    "nix-dynamic-user-off": ("nixos", [("modules/llm.nix", "environment.CUDA_VISIBLE_DEVICES",
                                        "serviceConfig.DynamicUser = lib.mkForce false;\n  "
                                        "systemd.services.llama-cpp.environment.CUDA_VISIBLE_DEVICES")],
                             {"chat:unit-user": "unit-user/missing"}),
    # The same port spelt through a let binding and toString in the module's options: the same unit.
    "nix-let-port": ("nixos", [("modules/llm.nix", "  modelDir =", "  chatPort = 8012;\n  modelDir ="),
                               ("modules/llm.nix", "port = 8012;", "port = chatPort;")], {}),
    # A value only evaluation gives (an if, a function of another module's option): the unit is not read, and the
    # service is not judged in one line naming the option and the generated unit to give instead.
    "nix-not-evaluated": ("nixos", [("modules/llm.nix", "port = 8012;",
                                     "port = if config.networking.hostName == \"atlas\" then 8012 else 8080;")],
                          {**{f"chat:{c}": SKIPPED for (s, c) in _nixos_table() if s == "chat"},
                           "chat:serve-script-renders": NOT_JUDGED}),
    # A Quadlet's Exec= is copied after the image into the generated ExecStart=, which systemd expands (issue 32):
    # `-c  -ngl 999` (the value gone) hands -c the next flag, as through ExecStart= (exec-start-flag-as-value).
    "quadlet-exec-flag-as-value": ("quadlet", [("systemd/llama-chat.container", "--ctx-size ${CTX} --parallel 2 -ngl 999",
                                                "--parallel 2 -c  -ngl 999")],
                                   {"chat:engine-accepts-argv": "engine-accepts-argv/flag-as-value",
                                    "chat:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    # The value set in [Container] Environment= only: that is podman's --env, the container's, which systemd never
    # sees, so ${CTX} in Exec= is one empty word (public Quadlets do this).
    "quadlet-exec-container-variable": ("quadlet", [("systemd/llama-chat.container", "Environment=CTX=16384\n", ""),
                                                    ("systemd/llama-chat.container", "Environment=CUDA_VISIBLE_DEVICES=0\n",
                                                     "Environment=CUDA_VISIBLE_DEVICES=0 CTX=16384\n")],
                                        {"chat:engine-accepts-argv": "engine-accepts-argv/empty-value",
                                         "chat:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    # The same value unbraced, set in [Service]: one word, 16384, as systemd splits it.
    "quadlet-exec-unbraced": ("quadlet", [("systemd/llama-chat.container", "--ctx-size ${CTX}", "-c $CTX")], {}),
    # A shell's default in Exec=: systemd looks up a variable named `CTX:-16384` and passes nothing.
    "quadlet-exec-shell-default": ("quadlet", [("systemd/llama-chat.container", "--ctx-size ${CTX}",
                                                "--ctx-size ${CTX:-16384}")],
                                   {"chat:unit-exec-args": "unit-exec-args/shell-expansion",
                                    "chat:engine-accepts-argv": "engine-accepts-argv/empty-value",
                                    "chat:slots-divide-context": "slots-divide-context/no-ctx-size"}),
    # PublishPort= is what reaches the engine from the host: none, or another host port than fleet.toml's.
    "quadlet-not-published": ("quadlet", [("systemd/llama-chat.container", "PublishPort=127.0.0.1:8081:8080\n", "")],
                              {"chat:rendered-port-matches": "rendered-port-matches/quadlet-not-published"}),
    "quadlet-published-differs": ("quadlet", [("systemd/llama-chat.container", "PublishPort=127.0.0.1:8081:8080",
                                               "PublishPort=127.0.0.1:8082:8080")],
                                  {"chat:rendered-port-matches": "rendered-port-matches/quadlet-published-differs"}),
    "quadlet-published-tcp": ("quadlet", [("systemd/llama-chat.container", "PublishPort=127.0.0.1:8081:8080",
                                           "PublishPort=127.0.0.1:8081:8080/tcp")], {}),
    # Published on every address of the host to an engine that asks no key.
    "quadlet-published-everywhere": ("quadlet", [("systemd/llama-chat.container", "PublishPort=127.0.0.1:8081:8080",
                                                  "PublishPort=8081:8080")],
                                     {"chat:engine-auth": "engine-auth/no-key"}),
    # AddDevice= is the container's card grant (issue 32, through fleetgate.visibility, which the ledger reads too):
    # none at all, and the container sees no GPU.
    "quadlet-no-add-device": ("quadlet", [("systemd/llama-chat.container", "AddDevice=nvidia.com/gpu=all\n", "")],
                              {"chat:device-visibility": "device-visibility/container-no-gpu"}),
    # A CDI name by index: the container sees the host's CUDA1 alone, as its device 0 (CUDA_VISIBLE_DEVICES=0 keeps
    # it), which is the card qwen uses: vLLM's 0.90 beside llama-server needs llama-server's profile to be judged.
    "quadlet-add-device-one-card": ("quadlet", [("systemd/llama-chat.container", "AddDevice=nvidia.com/gpu=all",
                                                 "AddDevice=nvidia.com/gpu=1")],
                                    {"rig:vllm-start-headroom": NOT_JUDGED}),
    # The same grant through PodmanArgs= (copied onto the podman run line), and a device that is added only where the
    # host has it (a leading -): the same table.
    "quadlet-podman-args-gpus": ("quadlet", [("systemd/llama-chat.container", "AddDevice=nvidia.com/gpu=all",
                                              "PodmanArgs=--gpus=all")], {}),
    "quadlet-optional-device": ("quadlet", [("systemd/llama-chat.container", "AddDevice=nvidia.com/gpu=all",
                                             "AddDevice=-nvidia.com/gpu=all")], {}),
    # A CDI name fleetgate cannot map onto the declared cards (a UUID): not judged, naming what to declare.
    "quadlet-add-device-uuid": ("quadlet", [("systemd/llama-chat.container", "AddDevice=nvidia.com/gpu=all",
                                             "AddDevice=nvidia.com/gpu=GPU-8f6c2d4e-1a3b")],
                                {"chat:device-visibility": NOT_JUDGED, "rig:vllm-start-headroom": NOT_JUDGED}),
    # A rootful Quadlet (issue 32): installed under /etc/containers/systemd/, the system manager runs podman as root,
    # and the engine runs as its container's user: neither image sets a USER, so both run as the host's root.
    "quadlet-rootful": ("quadlet", [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"',
                                     'deploy_root = "/etc/containers"')],
                        {"chat:container-user": "container-user/image-root",
                         "qwen:container-user": "container-user/image-root"}),
    # A rootful Quadlet wanted by multi-user.target starts at boot with the system manager, as a system unit does.
    "quadlet-rootful-system-target": ("quadlet", [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"',
                                                   'deploy_root = "/etc/containers"'),
                                                  ("systemd/llama-chat.container", "WantedBy=default.target",
                                                   "WantedBy=multi-user.target")],
                                      {"chat:container-user": "container-user/image-root",
                                       "qwen:container-user": "container-user/image-root"}),
    # WantedBy=multi-user.target on a Quadlet installed in ~/.config/containers/systemd: that user's manager has no
    # multi-user.target, so the unit never starts at boot (the target does not make it rootful).
    "quadlet-rootless-system-target": ("quadlet", [("systemd/llama-chat.container", "WantedBy=default.target",
                                                    "WantedBy=multi-user.target")],
                                       {"chat:unit-install": "unit-install/wrong-target"}),
    # Rootful, with the container's user set: an unprivileged UID passes, UID 0 is root.
    "quadlet-rootful-user": ("quadlet", [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"',
                                          'deploy_root = "/etc/containers"'),
                                         ("systemd/llama-chat.container", "ContainerName=llama-chat\n",
                                          "ContainerName=llama-chat\nUser=1000\nGroup=1000\n")],
                             {"chat:container-user": PASSED, "qwen:container-user": "container-user/image-root"}),
    "quadlet-rootful-user-root": ("quadlet", [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"',
                                               'deploy_root = "/etc/containers"'),
                                              ("systemd/llama-chat.container", "ContainerName=llama-chat\n",
                                               "ContainerName=llama-chat\nUser=0\n")],
                                  {"chat:container-user": "container-user/root",
                                   "qwen:container-user": "container-user/image-root"}),
    # User= in [Service]: systemd runs podman as that user, rootless (podman's generator warns it is unsupported);
    # UserNS=auto maps the container's root to an unprivileged ID: neither is the host's root.
    "quadlet-rootful-service-user": ("quadlet", [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"',
                                                  'deploy_root = "/etc/containers"'),
                                                 ("systemd/llama-chat.container", "Restart=on-failure",
                                                  "Restart=on-failure\nUser=ai")],
                                     {"qwen:container-user": "container-user/image-root"}),
    "quadlet-rootful-userns": ("quadlet", [("fleet.toml", 'deploy_root = "/home/ai/.config/containers"',
                                            'deploy_root = "/etc/containers"'),
                                           ("systemd/llama-chat.container", "ContainerName=llama-chat\n",
                                            "ContainerName=llama-chat\nUserNS=auto\n")],
                                 {"qwen:container-user": "container-user/image-root"}),
    # AMD through a Quadlet (issue 32): llama.cpp's ROCm image given /dev/kfd and every render node (AddDevice=), and
    # narrowed to the host's first card by HIP_VISIBLE_DEVICES: a card grant, the same table as the CDI one.
    "quadlet-amd-devices": ("quadlet", QUADLET_AMD, {}),
    # One render node on a host of two cards: which card renderD128 is follows the host's DRM order, which fleet.toml
    # does not declare: not judged, naming /dev/dri and the variable to pin by (vllm-start-headroom asks the same).
    "quadlet-amd-one-render-node": ("quadlet", [*QUADLET_AMD, ("systemd/llama-chat.container", "AddDevice=/dev/dri\n",
                                                               "AddDevice=/dev/dri/renderD128\n")],
                                    {"chat:device-visibility": NOT_JUDGED, "rig:vllm-start-headroom": NOT_JUDGED}),
    # Rootful (deploy_root under /etc/containers) with User=1000 and no group: ROCm cannot open the nodes. In render
    # by GroupAdd=, it can. A GID other than video/render is judged against the host's declared device_gids: 1000
    # is not one of them, 110 is. (vLLM's image runs as root under rootful podman: image-root, as quadlet-rootful.)
    "quadlet-amd-rootful-no-group": ("quadlet", [*QUADLET_AMD, *_quadlet_rootful_user("User=1000\n")],
                                     {"chat:container-user": "container-user/no-device-group",
                                      "qwen:container-user": "container-user/image-root"}),
    "quadlet-amd-rootful-render": ("quadlet", [*QUADLET_AMD, *_quadlet_rootful_user("User=1000\nGroupAdd=render\n")],
                                   {"chat:container-user": PASSED, "qwen:container-user": "container-user/image-root"}),
    "quadlet-amd-rootful-gid-not-the-hosts": ("quadlet", [
        *QUADLET_AMD, *_quadlet_rootful_user("User=1000\nGroup=1000\n"),
        ("fleet.toml", "ram_gib = 64\n", "ram_gib = 64\ndevice_gids = [44, 110]\n")],
        {"chat:container-user": "container-user/no-device-group", "qwen:container-user": "container-user/image-root"}),
    "quadlet-amd-rootful-gid-the-hosts": ("quadlet", [
        *QUADLET_AMD, *_quadlet_rootful_user("User=1000\nGroup=1000\nGroupAdd=110\n"),
        ("fleet.toml", "ram_gib = 64\n", "ram_gib = 64\ndevice_gids = [44, 110]\n")],
        {"chat:container-user": PASSED, "qwen:container-user": "container-user/image-root"}),
    # The same GID with no device_gids declared: whose GID it is is the host's, not judged.
    "quadlet-amd-rootful-gid-undeclared": ("quadlet", [*QUADLET_AMD,
                                                       *_quadlet_rootful_user("User=1000\nGroup=1000\nGroupAdd=110\n")],
                                           {"chat:container-user": NOT_JUDGED,
                                            "qwen:container-user": "container-user/image-root"}),
    # Rootless, the same User=1000: the user's manager runs it, container-user skips (as on the clean fixture).
    "quadlet-amd-rootless-user": ("quadlet", [*QUADLET_AMD, ("systemd/llama-chat.container", "ContainerName=llama-chat\n",
                                                             "ContainerName=llama-chat\nUser=1000\n")], {}),
    # vllm serve's model as its positional argument: the same service.
    "quadlet-vllm-positional-model": ("quadlet", [("systemd/vllm-qwen.container", "Exec=--model /models/Qwen3-8B-FP8",
                                                   "Exec=/models/Qwen3-8B-FP8")], {}),
}


@pytest.mark.parametrize("case", sorted(MISSES))
def test_a_miss_is_its_own_code_and_a_harmless_variant_passes(case: str, pytester: pytest.Pytester,
                                                                tmp_path: Path) -> None:
    name, edits, changes = MISSES[case]
    outcomes, texts = run_seams(pytester, _copy(tmp_path, name, edits))
    expected = dict(CLEAN[name])
    expected.update({tuple(key.split(":", 1)): outcome for key, outcome in changes.items()})  # type: ignore[misc]
    expected = {key: outcome for key, outcome in expected.items() if outcome != ABSENT}
    assert outcomes == expected
    for text in texts.values():
        assert "Traceback" not in text
        for label in ("where:", "observed:", "expected:", "fix:"):
            assert f"  {label}" in text, text


# A house rule is off until the fleet opts in, then it judges the same files.
HOUSE_RULES: dict[str, tuple[list[Edit], dict[str, str]]] = {
    # Root is a universal finding, policy or not; a named user passes without one.
    "root-user": ([("systemd/llama-server.service", "Type=simple", "Type=simple\nUser=root")],
                  {"qwen:unit-user": "unit-user/root"}),
    "named-user": ([("systemd/llama-server.service", "Type=simple", "Type=simple\nUser=llama")],
                   {"qwen:unit-user": PASSED}),
    # A transient user is not root; only a fleet that asks for a named service user is told.
    "dynamic-user-off": ([("systemd/llama-server.service", "Type=simple", "Type=simple\nDynamicUser=yes")],
                         {"qwen:unit-user": PASSED}),
    "dynamic-user-on": ([("systemd/llama-server.service", "Type=simple", "Type=simple\nDynamicUser=yes"),
                         ("fleet.toml", 'deploy_root = "/opt/llama"', 'deploy_root = "/opt/llama"\npolicies = ["service-user"]')],
                        {"qwen:unit-user": "unit-user/not-named"}),
    # 10000 over 2 slots: llama.cpp pads each slot to 5120. A fleet that does not care is not told.
    "slot-padding-off": ([("config/llama-server.env", "CTX_SIZE=16384", "CTX_SIZE=10000")], {}),
    "slot-padding-on": ([("config/llama-server.env", "CTX_SIZE=16384", "CTX_SIZE=10000"),
                         ("fleet.toml", 'deploy_root = "/opt/llama"', 'deploy_root = "/opt/llama"\npolicies = ["slot-padding"]')],
                        {"qwen:slots-divide-context": "slots-divide-context/slot-padding"}),
    # Opted into, but with nothing declared: a skip naming what to declare, never a pass.
    "nothing-to-judge": ([("fleet.toml", 'deploy_root = "/opt/llama"',
                           'deploy_root = "/opt/llama"\npolicies = ["retired-names", "routing-proxy", "docs-index"]')],
                         {"fleet:retired-names": "-", "fleet:proxy-routing": "-", "fleet:proxy-capacity": "-",
                          "fleet:docs-index": "-", "fleet:docs-shapes": "-",
                          "l4-box:retired-names": SKIPPED, "l4-box:proxy-routing": SKIPPED,
                          "l4-box:proxy-capacity": SKIPPED, "l4-box:docs-index": SKIPPED,
                          # docs-shapes and runbook-settings are per service: no index to read shapes from, no
                          # runbook page with a deployed-configuration table
                          "fleet:runbook-settings": "-", "qwen:docs-shapes": SKIPPED, "qwen:runbook-settings": SKIPPED}),
}


@pytest.mark.parametrize("case", sorted(HOUSE_RULES))
def test_a_house_rule_judges_only_a_fleet_that_keeps_it(case: str, pytester: pytest.Pytester, tmp_path: Path) -> None:
    edits, changes = HOUSE_RULES[case]
    outcomes, texts = run_seams(pytester, _copy(tmp_path, "unit-script", edits))
    expected = dict(CLEAN["unit-script"])
    for key, outcome in changes.items():
        subject, _, check = key.partition(":")
        if outcome == "-":
            del expected[(subject, check)]  # the policy is on: no fleet-wide skip, its subjects instead
        else:
            expected[(subject, check)] = outcome
    assert outcomes == expected
    for text in texts.values():
        assert "dank" not in text, text


def test_a_user_unit_runs_as_its_managers_user(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # Under systemd/user/ the unit is a user manager's: %u is that user, and User= does not apply.
    fleet_toml = _copy(tmp_path, "unit-script", [("systemd/llama-server.service", "Type=simple", "Type=simple\nUser=%u"),
                                                  ("fleet.toml", 'unit = "systemd/llama-server.service"',
                                                   'unit = "systemd/user/llama-server.service"')])
    (fleet_toml.parent / "systemd" / "user").mkdir()
    (fleet_toml.parent / "systemd" / "llama-server.service").rename(fleet_toml.parent / "systemd" / "user" / "llama-server.service")
    outcomes, _ = run_seams(pytester, fleet_toml)
    assert outcomes == {**CLEAN["unit-script"], ("qwen", "unit-user"): SKIPPED}


def test_the_skips_of_a_policy_that_is_off_fold_into_one_line_per_policy(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(str(REPO / "seams"), f"--fleet={FLEETS / 'unit-script' / 'fleet.toml'}",
                                          "-p", "no:cacheprovider", "-rs", "--import-mode=importlib")
    lines = [line for line in result.outlines if line.startswith("SKIPPED") and "policy " in line and " is off" in line]
    counts = {line.split("policy ", 1)[1].split(" ", 1)[0]: int(line.split("[", 1)[1].split("]", 1)[0]) for line in lines}
    assert counts == {name: len(policy_checks(name)) for name in POLICIES if policy_checks(name)}
    assert len(lines) == len(counts), "one line per policy"
    assert all("fleet.toml:" in line for line in lines)


def test_the_schema_names_every_policy_and_every_policy_governs_a_check_or_a_code() -> None:
    schema = json.loads(resources.files("fleetgate").joinpath("schema/fleet.schema.json").read_text(encoding="utf-8"))
    assert schema["properties"]["fleet"]["properties"]["policies"]["items"]["enum"] == sorted(POLICIES)
    load_all()
    # the declarations name their policies (fleetgate.checks refuses a name POLICIES lacks); a policy no declaration
    # names would be a switch that turns nothing on
    for name in POLICIES:
        assert policy_checks(name) or policy_codes(name), name


def test_the_example_fleet_keeps_every_house_rule() -> None:
    from fleetgate.manifest import load_fleet

    fleet = load_fleet(REPO / "fixtures" / "fleet" / "fleet.toml")
    assert fleet.policies == frozenset(POLICIES)


def test_the_example_fleet_without_a_house_rule_no_longer_catches_its_incident(pytester: pytest.Pytester,
                                                                                  tmp_path: Path) -> None:
    # INC-30 (a blank KV_MEM) is the fleet's rule, not vLLM's: without the policy vLLM sizes the cache from the fill.
    fleet_toml = edited_fleet(tmp_path, [("dankserver/frank-archon/frank-archon.env", "KV_MEM=0", "KV_MEM="),
                                         ("fleet.toml", '"vllm-kv-cache-memory", ', "")])
    outcomes, _ = run_seams(pytester, fleet_toml)
    assert outcomes[("frank-archon", "vllm-memory-knobs")] == PASSED
    with_policy = edited_fleet(tmp_path / "on", [("dankserver/frank-archon/frank-archon.env", "KV_MEM=0", "KV_MEM=")])
    outcomes, _ = run_seams(pytester, with_policy)
    assert outcomes[("frank-archon", "vllm-memory-knobs")] == "vllm-memory-knobs/kv-memory-omitted"


def test_a_router_keeping_three_models_whose_three_exceed_the_card_fails_co_residence(pytester: pytest.Pytester,
                                                                                    tmp_path: Path) -> None:
    """compose-router with --models-max 3 (declared models_max = 3): the three presets at once are 14.83 + 7.09 +
    2.43 = 24.34 GiB on the 24 GiB card. Only co-residence changes."""
    target = tmp_path / "compose-router"
    shutil.copytree(FLEETS / "compose-router", target)
    fleet_toml = target / "fleet.toml"
    text = fleet_toml.read_text(encoding="utf-8")
    assert text.count("models_max = 2\n") == 3
    fleet_toml.write_text(text.replace("models_max = 2\n", "models_max = 3\n"), encoding="utf-8")
    outcomes, texts = run_seams(pytester, fleet_toml)
    assert outcomes == {**CLEAN["compose-router"], ("lab", "co-residence-fits"): "co-residence-fits/over-card"}
    assert "24.34 GiB of 24.00 GiB" in texts[("lab", "co-residence-fits")]


def test_an_unknown_vllm_flag_in_a_manifest_points_at_its_command_line(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """A flag vLLM does not know has no variable of its own to point at: the failure names where the argv is written
    (the manifest's args list), not the manifest alone, and says to fix it there."""
    name, edits, _ = MISSES["kustomize-misspelt-flag"]
    _, texts = run_seams(pytester, _copy(tmp_path, name, edits))
    text = texts[("mistral-vllm", "vllm-argv")]
    assert "  where:    rendered/gpu-node.yaml:38\n" in text, text  # the args: list, from its first item
    assert "or fix the value where it is set" in text, text
