"""Hostile input to the readers that run on the host, outside the sandbox: compose files, their ``.env``, llama-swap
configs, Kubernetes manifests, Quadlets whose ``Exec=`` is the engine's arguments, and init's discovery of them.

Each case runs ``fleetgate`` in a process of its own with a deadline, and the user sees exactly one line naming the
file and the line -- never a traceback, never a hang, never a file outside the repository read.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

DEADLINE_S = 15
"""Every case finishes well within this on a loaded two-core machine; a hang is what it catches."""

FLEET = """[fleet]
name = "t"

[hosts.h]
ram_gib = 8
devices = [{ name = "CPU", vram_bytes = 1 }]

[services.chat]
host = "h"
port = 8080
engine = "llama.cpp"
compose = "compose.yaml"

[services.swap]
host = "h"
port = 8080
engine = "llama.cpp"
llama_swap = "config.yaml"
llama_swap_model = "m"

[services.kube]
host = "h"
port = 8080
engine = "llama.cpp"
kubernetes = "k8s.yaml"
"""

SERVER = "services:\n  chat:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
SWAP = "models:\n  m:\n    cmd: llama-server --port ${PORT} -m /m.gguf\n"
POD = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n"
       "      image: ghcr.io/ggml-org/llama.cpp:server\n")
K8S_EXPECTED = "Kubernetes manifests (YAML documents with apiVersion:, kind:, metadata:)"
COMPOSE_EXPECTED = "a compose file (YAML: services: NAME: image: ...)"
SWAP_EXPECTED = "llama-swap's config.yaml"


def _levels(first: str, line: Callable[[int], str], count: int) -> str:
    return first + "".join(line(i) for i in range(1, count + 1))


TEN = ", ".join(["x"] * 10)
# Each level holds ten aliases of the one before: 11, 121, 1221, ... nodes. Counted as go-yaml decodes: the
# document, the root mapping, `a` and its 11 nodes, `b` and its sequence (16 written in place); b's ten aliases
# add 10 decoded + 110 aliased; c's key and sequence 2 more, then 10 x (1 + 121). Past 1000 decoded nodes the
# aliased share stays under 99% through line 3 (1320 of 1358); on line 4 the third *c makes it 4983 of 5026 (99.1%).
LAUGHS = ("a: &a [" + TEN + "]\n" + "".join(f"{n}: &{n} [" + ", ".join([f"*{p}"] * 10) + "]\n"
                                         for p, n in zip("abcdefgh", "bcdefghi", strict=True)))
# The same with ``<<`` merges (about 630 bytes): x0 has 21 nodes; each level is a mapping, its `<<` key, a
# sequence and ten aliases of the level before. After line 3: 2492 decoded, 2440 aliased (97.9%); line 4 adds 4
# in place, then each *x2 adds 1 + 2243: the second makes it 6926 of 6984 (99.2%).
MERGE_BOMB = _levels("x0: &x0 {" + ", ".join(f"a{i}: 1" for i in range(10)) + "}\n",
                     lambda i: f"x{i}: &x{i} {{<<: [" + ", ".join([f"*x{i - 1}"] * 10) + "]}\n", 9)
NESTED_DEFAULTS = "${A:-" * 200_000 + "x" + "}" * 200_000


def _shown(text: str) -> str:
    return f"{text[:200]!r}... ({len(text)} characters)"


@dataclass(frozen=True)
class Case:
    id: str
    files: dict[str, str]
    service: str
    says: str
    """The one line, after ``fleetgate: `` and the repository's path."""
    links: tuple[tuple[str, str], ...] = ()
    """(name in the repository, target outside it, relative to the outside directory)"""


CASES = [
    # YAML: an alias inside its own anchor's value, a merge of itself.
    Case("compose-merge-self", {"compose.yaml": "x-base: &a\n  image: ghcr.io/ggml-org/llama.cpp:server\n  <<: *a\n"
                                                "services:\n  chat: *a\n"}, "chat",
         f"compose.yaml:3: the alias *a lies inside the value of its own anchor &a (line 1), which would never end; "
         f"expected {COMPOSE_EXPECTED} (go-yaml refuses: anchor 'a' value contains itself)"),
    Case("compose-sequence-self", {"compose.yaml": SERVER + "    command: &c [-m, *c]\n"}, "chat",
         f"compose.yaml:4: the alias *c lies inside the value of its own anchor &c (line 4), which would never end; "
         f"expected {COMPOSE_EXPECTED} (go-yaml refuses: anchor 'c' value contains itself)"),
    Case("swap-merge-self", {"config.yaml": SWAP + "    env: &e\n      <<: *e\n"}, "swap",
         f"config.yaml:5: the alias *e lies inside the value of its own anchor &e (line 4), which would never end; "
         f"expected {SWAP_EXPECTED} (go-yaml refuses: anchor 'e' value contains itself)"),
    # YAML: expansion past go-yaml's aliasing rule.
    # Kubernetes: a $(A) expansion past Linux's argument limit, a ConfigMap or a Secret key the repository lacks, an
    # alias bomb in the second document.
    Case("k8s-expansion", {"k8s.yaml": POD + "      env: [{name: A, value: '" + "x" * 4096 + "'}]\n"
                                       "      args: ['" + "$(A)" * 64 + "']\n"}, "kube",
         f"k8s.yaml:6: Pod/p container c argv[1]: {'$(A)' * 20!r}... (256 characters) expands to more than 131072 "
         "characters; expected a value Linux can pass to a process (128 KiB at most)"),
    Case("k8s-missing-configmap", {"k8s.yaml": POD + "      envFrom: [{configMapRef: {name: cm}}]\n"}, "kube",
         "k8s.yaml:8: Pod/p container c.envFrom[0].configMapRef: ConfigMap 'cm', which no manifest of . defines (the "
         "kubelet holds the pod in CreateContainerConfigError); expected one of: no ConfigMap there, or optional: true"),
    Case("k8s-missing-secret-key", {"k8s.yaml": POD + "      env:\n        - name: HF_TOKEN\n          valueFrom: "
                                                "{secretKeyRef: {name: s, key: token}}\n---\napiVersion: v1\nkind: "
                                                "Secret\nmetadata: {name: s}\nstringData: {other: SECRET-KEY-1}\n"},
         "kube", "k8s.yaml:10: Pod/p container c.env HF_TOKEN.valueFrom.secretKeyRef: Secret s ({repo}/k8s.yaml:12) "
                 "has no key 'token' (the kubelet holds the pod in CreateContainerConfigError); expected one of: other, "
                 "or optional: true"),
    Case("k8s-laughs", {"k8s.yaml": POD + "---\n" + LAUGHS}, "kube",
         f"k8s.yaml:12: excessive aliasing: with the alias *c the document is mostly copies of anchored values; "
         f"expected {K8S_EXPECTED} whose aliases repeat less (go-yaml, which docker compose and llama-swap use, "
         "refuses it)"),
    Case("compose-laughs", {"compose.yaml": LAUGHS + SERVER},
         "chat", f"compose.yaml:4: excessive aliasing: with the alias *c the document is mostly copies of anchored "
                 f"values; expected {COMPOSE_EXPECTED} whose aliases repeat less (go-yaml, which docker compose and "
                 "llama-swap use, refuses it)"),
    Case("compose-merge-bomb", {"compose.yaml": MERGE_BOMB + SERVER}, "chat",
         f"compose.yaml:4: excessive aliasing: with the alias *x2 the document is mostly copies of anchored values; "
         f"expected {COMPOSE_EXPECTED} whose aliases repeat less (go-yaml, which docker compose and llama-swap use, "
         "refuses it)"),
    Case("swap-merge-bomb", {"config.yaml": MERGE_BOMB + SWAP}, "swap",
         f"config.yaml:4: excessive aliasing: with the alias *x2 the document is mostly copies of anchored values; "
         f"expected {SWAP_EXPECTED} whose aliases repeat less (go-yaml, which docker compose and llama-swap use, "
         "refuses it)"),
    # YAML: nesting, written and through aliases. The root mapping is the first of the 200 levels.
    Case("compose-deep-brackets", {"compose.yaml": "services: " + "[" * 100_000 + "\n"}, "chat",
         f"compose.yaml:1: YAML nested deeper than 200 levels; expected {COMPOSE_EXPECTED}"),
    Case("swap-deep-brackets", {"config.yaml": "models: " + "{a: " * 100_000 + "\n"}, "swap",
         f"config.yaml:1: YAML nested deeper than 200 levels; expected {SWAP_EXPECTED}"),
    # Level i is [*level i-1]: 2 + i levels where it is used (the root mapping, its sequence, i below).
    Case("compose-deep-aliases", {"compose.yaml": _levels("x0: &x0 [1]\n", lambda i: f"x{i}: &x{i} [*x{i - 1}]\n", 300)
                                  + SERVER}, "chat",
         f"compose.yaml:200: the alias *x198 nests the YAML deeper than 200 levels; expected {COMPOSE_EXPECTED}"),
    # Interpolation: nesting and size.
    Case("compose-nested-defaults", {"compose.yaml": SERVER + f"    command: ['{NESTED_DEFAULTS}']\n"}, "chat",
         f"compose.yaml:4: {_shown(NESTED_DEFAULTS)}: substitutions nested more than 32 deep; expected "
         "${NAME:-default} nested a few levels at most (compose interpolation)"),
    Case("compose-interpolation-size", {"compose.yaml": SERVER + "    command: [-m, $A$A]\n", ".env": "A=" + "x" * 70_000},
         "chat", "compose.yaml:4: '$A$A': interpolates to more than 131072 characters; expected a value Linux can pass "
                 "to a process (128 KiB at most)"),
    Case("dotenv-doubling", {"compose.yaml": SERVER, ".env": "A=xxxxxxxxxxxxxxxx\n" + "".join(
        f"{n}=${p}${p}\n" for p, n in zip("ABCDEFGHIJKLMNOPQRSTU", "BCDEFGHIJKLMNOPQRSTUV", strict=True))}, "chat",
         ".env:15: '$N$N': interpolates to more than 131072 characters; expected a value Linux can pass to a process "
         "(128 KiB at most)"),
    # Ports and cards that are not numbers compose takes.
    Case("compose-empty-port", {"compose.yaml": SERVER + "    ports: ['']\n"}, "chat",
         "compose.yaml:4: services.chat.ports[0]: ''; expected a port number 1-65535"),
    Case("compose-empty-target", {"compose.yaml": SERVER + "    ports:\n      - target: ''\n"}, "chat",
         "compose.yaml:5: services.chat.ports[0].target: ''; expected a port number 1-65535"),
    Case("compose-superscript-port", {"compose.yaml": SERVER + "    ports: ['8²:80']\n"}, "chat",
         "compose.yaml:4: services.chat.ports[0]: '8²'; expected a port number 1-65535"),
    Case("compose-unclosed-ipv6", {"compose.yaml": SERVER + "    ports: ['[::1:8080:80']\n"}, "chat",
         "compose.yaml:4: services.chat.ports[0]: '[::1:8080:80': the host address's '[' is never closed by ']:'; "
         "expected [IPV6]:HOST_PORT:CONTAINER_PORT"),
    Case("compose-huge-count", {"compose.yaml": SERVER + "    gpus:\n      - count: 9999\n"}, "chat",
         "compose.yaml:5: services.chat.gpus[0].count: 9999; expected the number of cards the container gets (at most "
         "1024), or all"),
    Case("compose-superscript-count", {"compose.yaml": SERVER + "    gpus:\n      - count: '²'\n"}, "chat",
         "compose.yaml:5: services.chat.gpus[0].count: '²'; expected a number or all"),
    # Includes that name each file twice, seven deep, would read 255 files; a chain of 41 extends.
    Case("compose-include-doubling", {"compose.yaml": "include: [d1.yaml, d1.yaml]\n", **{
        f"d{i}.yaml": f"include:\n  - d{i + 1}.yaml\n  - d{i + 1}.yaml\nservices: {{}}\n" for i in range(1, 7)},
        "d7.yaml": "services: {}\n"}, "chat",
         "d6.yaml:3: include[1]: the compose project would read more than 64 files; expected includes and extends that "
         "name each file a few times at most"),
    Case("compose-extends-chain", {"compose.yaml": "services:\n  chat:\n    extends: s0\n" + "".join(
        f"  s{i}:\n    extends: s{i + 1}\n" for i in range(40)) + "  s40:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"},
         "chat", "compose.yaml:67: services.s31.extends: a chain of more than 32 services; expected extends a few "
         "services deep"),
    # The project's .env is confined like env_file: a symlink out of the repository is never opened.
    Case("dotenv-symlink-out", {"compose.yaml": SERVER + "    command: [-m, '${KEY}']\n"}, "chat",
         ".env: the compose project's .env resolves outside the fleet repository ({outside}/id_ed25519); expected a "
         "file of the repository beside the compose file, or none", links=((".env", "id_ed25519"),)),
]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from fleetgate.cli import main; sys.exit(main(sys.argv[1:]))",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=DEADLINE_S, check=False,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_file_is_one_line_in_bounded_time(tmp_path: Path, case: Case) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    (outside / "id_ed25519").write_text("KEY=SECRET-KEY-MATERIAL\n", encoding="utf-8")
    (repo / "fleet.toml").write_text(FLEET, encoding="utf-8")
    (repo / "compose.yaml").write_text(SERVER, encoding="utf-8")
    (repo / "config.yaml").write_text(SWAP, encoding="utf-8")
    (repo / "k8s.yaml").write_text(POD, encoding="utf-8")
    for name, text in case.files.items():
        (repo / name).write_text(text, encoding="utf-8")
    for name, target in case.links:
        (repo / name).symlink_to(outside / target)
    done = _run(["render", case.service, "--fleet", str(repo / "fleet.toml")], tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    says = case.says.replace("{outside}", str(outside.resolve())).replace("{repo}", str(repo))
    assert done.stderr == f"fleetgate: {repo}/{says}\n"
    assert "SECRET-KEY" not in done.stderr


QUADLET_FLEET = """[fleet]
name = "t"

[hosts.h]
ram_gib = 8
devices = [{ name = "CPU", vram_bytes = 1 }]

[services.quad]
host = "h"
port = 8080
engine = "llama.cpp"
unit = "quad.container"
"""
QUADLET_CASES = {
    # podman's --entrypoint takes a JSON array or one command: a broken array is neither.
    "entrypoint-json": ('[Container]\nImage=localhost/llama:1\nEntrypoint=["/app/llama-server"\nExec=-m /m.gguf\n',
                        'quad.container:3: Entrypoint=["/app/llama-server": not a JSON array of strings; expected a '
                        'command, or a JSON array such as ["/app/llama-server"]'),
    "exec-unbalanced": ('[Container]\nImage=ghcr.io/ggml-org/llama.cpp:server\nExec=-m "/m.gguf\n',
                        "quad.container:3: Exec=: No closing quotation (unbalanced quotes); expected a command line "
                        "with every quote closed"),
    "no-image": ("[Container]\nExec=-m /m.gguf\n",
                 "quad.container: no Image= in [Container]: Quadlet's generator refuses the file; expected Image= "
                 "naming the engine's image"),
    "full-image-no-server": ("[Container]\nImage=ghcr.io/ggml-org/llama.cpp:full\nExec=-m /m.gguf\n",
                             "quad.container:3: Exec=: the ghcr.io/ggml-org/llama.cpp:full image runs /app/tools.sh, "
                             "which starts llama-server only when its first argument is --server (or -s); expected "
                             "Exec=--server ..., got ['-m']"),
    # ${A} twice from [Service] Environment=: one word past Linux's argument limit.
    "exec-expansion-size": ("[Container]\nImage=ghcr.io/ggml-org/llama.cpp:server\nExec=-m ${A}${A}\n\n[Service]\n"
                            "Environment=A=" + "x" * 70_000 + "\n",
                            f"quad.container:3: Exec=: argv[2] ({'x' * 40!r}...) is more than 131072 bytes once systemd "
                            "has expanded it; expected a value Linux can pass to a process (128 KiB at most)"),
}


@pytest.mark.parametrize("case", sorted(QUADLET_CASES))
def test_a_hostile_quadlet_is_one_line_in_bounded_time(tmp_path: Path, case: str) -> None:
    text, says = QUADLET_CASES[case]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "fleet.toml").write_text(QUADLET_FLEET, encoding="utf-8")
    (repo / "quad.container").write_text(text, encoding="utf-8")
    done = _run(["render", "quad", "--fleet", str(repo / "fleet.toml")], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"fleetgate: {repo}/{says}\n")


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("compose-merge-self", "compose-merge-bomb",
                                                                 "compose-deep-brackets")], ids=lambda c: c.id)
def test_init_skips_a_hostile_compose_file_in_one_line(tmp_path: Path, case: Case) -> None:
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "fleets"
    repo = tmp_path / "unit-exec"
    shutil.copytree(fixtures / "unit-exec", repo, symlinks=True)
    (repo / "fleet.toml").unlink()
    (repo / "docker-compose.yml").write_text(case.files["compose.yaml"], encoding="utf-8")
    done = _run(["init", str(repo)], tmp_path)
    message = case.says.split(": ", 1)[1].replace(COMPOSE_EXPECTED, "a compose file or a llama-swap config")
    line = case.says.split(":", 2)[1]
    assert (done.returncode, done.stderr) == (
        3, f"fleetgate init: skipped {repo.resolve()}/docker-compose.yml:{line}: {message}: skipped\n")
    assert "[services.llama-chat]" in (repo / "fleet.toml").read_text(encoding="utf-8")
