"""``docker run`` / ``podman run`` lines of a serve script, read the way the container client reads them.

The render never runs a container client: ``docker`` and ``podman`` are stubs in the sandbox that record their argv
and environment, like the engine's stub. A recorded ``run`` (``docker run``, ``docker container run``, ``podman run``)
whose image is an engine image is the engine's start: its argv is the image's entrypoint followed by the arguments
after the image, its environment the image's own, then ``--env-file`` files, then ``-e``/``--env`` (later wins, as the
client merges them). ``-p``/``--publish``, ``-v``/``--volume`` (and ``--mount type=bind``), ``--gpus``, ``--device``
and ``--network`` are kept for the seams: a host port maps to the container port the engine binds, a host path to
the path the engine opens.

Options are read as the client's flag parser (spf13/pflag) reads them: ``--flag=value`` and ``--flag value``, short
flags clustered (``-it``, ``-dp 8080:8080``, ``-eNAME=1``), ``--`` ends the options, and the first word that is not an
option or an option's value is the image. The options that take a value are those of ``docker container run --help``
(Docker 26) and ``podman run --help`` (podman 5); a boolean may be written ``--rm=true``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetgate.engines.vllm import is_vllm_image

__all__ = ["ENGINE_IMAGES", "ContainerRun", "NotServing", "Published", "engine_of_image", "image_process", "parse_client",
           "split_image"]

# Options of `docker container run` (Docker 26) and `podman run` (podman 5) that take a value.
_VALUED_LONG = frozenset((
    "add-host", "annotation", "attach", "blkio-weight", "blkio-weight-device", "cap-add", "cap-drop",
    "cgroup-parent", "cgroupns", "cidfile", "cpu-count", "cpu-percent", "cpu-period", "cpu-quota",
    "cpu-rt-period", "cpu-rt-runtime", "cpu-shares", "cpus", "cpuset-cpus", "cpuset-mems", "detach-keys",
    "device", "device-cgroup-rule", "device-read-bps", "device-read-iops", "device-write-bps",
    "device-write-iops", "dns", "dns-option", "dns-search", "domainname", "entrypoint", "env", "env-file",
    "expose", "gpus", "group-add", "health-cmd", "health-interval", "health-retries", "health-start-interval",
    "health-start-period", "health-timeout", "hostname", "io-maxbandwidth", "io-maxiops", "ip", "ip6", "ipc",
    "isolation", "kernel-memory", "label", "label-file", "link", "link-local-ip", "log-driver", "log-opt",
    "mac-address", "memory", "memory-reservation", "memory-swap", "memory-swappiness", "mount", "name",
    "network", "net", "network-alias", "net-alias", "oom-score-adj", "pid", "pids-limit", "platform", "publish",
    "pull", "restart", "runtime", "security-opt", "shm-size", "stop-signal", "stop-timeout", "storage-opt",
    "sysctl", "tmpfs", "ulimit", "user", "userns", "uts", "volume", "volume-driver", "volumes-from", "workdir",
    "arch", "authfile", "cgroup-conf", "cgroups", "chrootdirs", "conmon-pidfile", "decryption-key", "env-merge",
    "gidmap", "group-entry", "health-on-failure", "health-startup-cmd", "health-startup-interval",
    "health-startup-retries", "health-startup-success", "health-startup-timeout", "hooks-dir", "hostuser",
    "init-path", "os", "passwd-entry", "personality", "pidfile", "pod", "pod-id-file", "preserve-fd",
    "preserve-fds", "rdt-class", "requires", "retry", "retry-delay", "sdnotify", "seccomp-policy", "secret",
    "shm-size-systemd", "subgidname", "subuidname", "systemd", "timeout", "uidmap", "umask", "unsetenv",
    "variant",
))
# Short options that take a value: -a -c -e -h -l -m -p -u -v -w (docker), the same in podman.
_VALUED_SHORT = frozenset("acehlmpuvw")
_SHORT_LONG = {"a": "attach", "c": "cpu-shares", "e": "env", "h": "hostname", "l": "label", "m": "memory",
               "p": "publish", "u": "user", "v": "volume", "w": "workdir", "d": "detach", "i": "interactive",
               "t": "tty", "P": "publish-all", "q": "quiet"}
# Global options of the clients, before the subcommand, that take a value.
_GLOBAL_VALUED = frozenset({"-H", "--host", "-c", "--context", "--config", "-l", "--log-level", "--tlscacert",
                            "--tlscert", "--tlskey", "--connection", "--url", "--identity", "--root", "--runroot",
                            "--cgroup-manager", "--events-backend", "--storage-driver", "--storage-opt", "--module",
                            "--network-cmd-path", "--tmpdir", "--runtime", "--conmon", "--imagestore"})

ENGINE_IMAGES: Mapping[str, tuple[tuple[str, ...], Mapping[str, str]]] = {
    # The image's ENTRYPOINT and ENV, from the projects' Dockerfiles (llama.cpp .devops/*.Dockerfile, target
    # `server`: ENTRYPOINT ["/app/llama-server"], ENV LLAMA_ARG_HOST=0.0.0.0; vLLM docker/Dockerfile, target
    # vllm-openai: ENTRYPOINT ["vllm", "serve"]).
    "llama.cpp": (("/app/llama-server",), {"LLAMA_ARG_HOST": "0.0.0.0"}),
    "vllm": (("vllm", "serve"), {}),
}
_LLAMA_REPOS = ("ghcr.io/ggml-org/llama.cpp", "ghcr.io/ggerganov/llama.cpp")


def split_image(image: str | None) -> tuple[str, str]:
    """``REPO[:TAG][@DIGEST]`` -> (repo, tag): a digest is dropped, the tag is ``latest`` when none is written (and
    ("", "") for no image). Compose, docker run and Kubernetes name images alike."""
    if image is None:
        return "", ""
    ref = image.split("@", 1)[0]
    repo, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        return ref, "latest"
    return repo, tag


def engine_of_image(image: str) -> str | None:
    """The engine an image runs as its entrypoint: ``llama.cpp`` for llama.cpp's ``server*`` tags, ``vllm`` for
    vLLM's own images (``vllm/vllm-openai``, ``vllm/vllm-cpu``...); None for any other image (its entrypoint is not known offline)."""
    repo, tag = split_image(image)
    if repo in _LLAMA_REPOS and tag.startswith("server"):
        return "llama.cpp"
    if is_vllm_image(repo):
        return "vllm"
    return None


class NotServing(ValueError):
    """An engine image whose entrypoint starts the engine only when the first argument asks for it, and it does not."""


def image_process(repo: str, tag: str, command: Sequence[str]) -> list[str] | None:
    """The process an image starts when the words after it are ``command`` (compose's ``command:``, a Quadlet's
    ``Exec=``): llama.cpp's ``server*`` images run ``/app/llama-server`` with them, ``full*`` run ``/app/tools.sh``,
    which starts llama-server with the rest when the first is ``--server`` (or ``-s``), vLLM's images run
    ``vllm serve`` (llama.cpp .devops/*.Dockerfile, vLLM docker/Dockerfile). None when the image's entrypoint is not
    known offline; ``NotServing`` for a ``full*`` image not asked for the server."""
    if repo in _LLAMA_REPOS and tag.startswith("server"):
        return ["/app/llama-server", *command]
    if repo in _LLAMA_REPOS and tag.startswith("full"):
        if not command or command[0] not in ("--server", "-s"):
            raise NotServing(f"the {repo}:{tag} image runs /app/tools.sh, which starts llama-server only when its "
                             "first argument is --server (or -s)")
        return ["/app/llama-server", *command[1:]]
    if is_vllm_image(repo):
        return ["vllm", "serve", *command]
    return None


@dataclass(frozen=True)
class Published:
    host_ip: str
    host_port: int | None
    """None: a random host port (``-p 8080``)."""
    container_port: int
    protocol: str = "tcp"


@dataclass(frozen=True)
class ContainerRun:
    client: str
    """``docker`` or ``podman``, as the script named it."""
    image: str
    command: tuple[str, ...]
    """The words after the image (the image's CMD replaced)."""
    entrypoint: str | None
    env: tuple[str, ...]
    """``-e``/``--env`` values in order (``NAME=VALUE``, or ``NAME``: the value from the client's environment)."""
    env_files: tuple[str, ...]
    published: tuple[Published, ...]
    volumes: tuple[tuple[str, str], ...]
    """(host path or volume name, container path), from ``-v`` and ``--mount type=bind|volume``."""
    gpus: tuple[str, ...]
    devices: tuple[str, ...]
    network: str | None
    name: str | None
    problems: tuple[str, ...] = field(default=())
    """What the line holds that the client would refuse (an option without its value, no image)."""
    user: str | None = None
    """``--user``/``-u`` (``NAME|UID[:GROUP|GID]``): None where the line gives none, and the image's USER applies."""
    groups: tuple[str, ...] = ()
    """``--group-add`` values in order (names resolved in the image's /etc/group, GIDs, podman's ``keep-groups``)."""

    @property
    def engine(self) -> str | None:
        return engine_of_image(self.image)

    def engine_argv(self) -> tuple[str, ...]:
        """The process the container starts: the entrypoint (``--entrypoint`` or the image's) and the command."""
        if self.entrypoint is not None:
            return (self.entrypoint, *self.command) if self.entrypoint else self.command
        engine = self.engine
        entry = ENGINE_IMAGES[engine][0] if engine else ()
        return (*entry, *self.command)

    def host_port(self, container_port: int) -> int | None:
        """The host port that reaches ``container_port``; the port itself with ``--network host``."""
        if self.network == "host":
            return container_port
        for item in self.published:
            if item.container_port == container_port and item.protocol == "tcp" and item.host_port is not None:
                return item.host_port
        return None

    def host_path(self, container_path: str) -> str | None:
        """The host path bind-mounted at ``container_path`` (the longest volume that holds it), else None."""
        best: tuple[int, str] | None = None
        for host, inside in self.volumes:
            if not host.startswith("/"):
                continue
            inside = inside.rstrip("/") or "/"
            if container_path == inside or container_path.startswith(inside.rstrip("/") + "/"):
                mapped = host.rstrip("/") + container_path[len(inside.rstrip("/")):]
                if best is None or len(inside) > best[0]:
                    best = (len(inside), mapped or "/")
        return best[1] if best else None


def _is_run(words: Sequence[str]) -> int | None:
    """Index of the first option of the ``run`` subcommand in a client's argv, or None for any other subcommand."""
    i = 1
    while i < len(words):
        word = words[i]
        if word in _GLOBAL_VALUED:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        break
    if i < len(words) and words[i] == "run":
        return i + 1
    if i + 1 < len(words) and words[i] == "container" and words[i + 1] == "run":
        return i + 2
    return None


def _publish(value: str) -> Published | None:
    """``[IP:][HOST_PORT:]CONTAINER_PORT[/PROTO]``; a range is read by its first port."""
    spec, _, proto = value.partition("/")
    parts = spec.rsplit(":", 2) if not spec.startswith("[") else [spec]
    try:
        if len(parts) == 1:
            return Published("", None, int(parts[0].split("-")[0]), proto or "tcp")
        if len(parts) == 2:
            host = parts[0]
            return Published("", int(host.split("-")[0]) if host else None, int(parts[1].split("-")[0]), proto or "tcp")
        host = parts[1]
        return Published(parts[0], int(host.split("-")[0]) if host else None, int(parts[2].split("-")[0]), proto or "tcp")
    except ValueError:
        return None


def _mount(value: str) -> tuple[str, str] | None:
    fields = dict(item.partition("=")[::2] for item in value.split(","))
    source = fields.get("source") or fields.get("src")
    target = fields.get("target") or fields.get("destination") or fields.get("dst")
    if fields.get("type", "volume") in ("bind", "volume") and source and target:
        return source, target
    return None


def parse_client(argv: Sequence[str]) -> ContainerRun | None:
    """A recorded client argv (``argv[0]`` the client's name) as a ``run`` line, or None for any other subcommand."""
    start = _is_run(argv)
    if start is None:
        return None
    values: dict[str, list[str]] = {}
    problems: list[str] = []
    i = start
    image: str | None = None
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            if i < len(argv):
                image = argv[i]
                i += 1
            break
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if name in _VALUED_LONG:
                if not eq:
                    if i + 1 >= len(argv):
                        problems.append(f"--{name} without its value")
                        break
                    value = argv[i + 1]
                    i += 1
                values.setdefault(name, []).append(value)
            i += 1
            continue
        if word.startswith("-") and len(word) > 1:
            letters = word[1:]
            for k, letter in enumerate(letters):
                if letter in _VALUED_SHORT:
                    rest = letters[k + 1:]
                    if rest:
                        value = rest
                    elif i + 1 < len(argv):
                        value = argv[i + 1]
                        i += 1
                    else:
                        problems.append(f"-{letter} without its value")
                        value = ""
                    values.setdefault(_SHORT_LONG[letter], []).append(value)
                    break
            i += 1
            continue
        image = word
        i += 1
        break
    if image is None:
        problems.append("no image")
    command = tuple(argv[i:]) if image is not None else ()
    published = [p for p in (_publish(v) for v in values.get("publish", [])) if p is not None]
    volumes: list[tuple[str, str]] = []
    for value in values.get("volume", []):
        parts = value.split(":")
        if len(parts) >= 2:
            volumes.append((parts[0], parts[1]))
    for value in values.get("mount", []):
        found = _mount(value)
        if found is not None:
            volumes.append(found)
    networks = values.get("network", []) + values.get("net", [])
    entrypoints = values.get("entrypoint", [])
    return ContainerRun(
        client=posixpath.basename(argv[0]), image=image or "", command=command,
        entrypoint=entrypoints[-1] if entrypoints else None, env=tuple(values.get("env", [])),
        env_files=tuple(values.get("env-file", [])), published=tuple(published), volumes=tuple(volumes),
        gpus=tuple(values.get("gpus", [])), devices=tuple(values.get("device", [])),
        network=networks[-1] if networks else None, name=values["name"][-1] if values.get("name") else None, problems=tuple(problems),
        user=values["user"][-1] if values.get("user") else None,
        groups=tuple(values.get("group-add", [])),
    )
