"""A Kubernetes workload's container read the way the kubelet starts it: the engine's argv and environment.

Nothing runs: no cluster is asked, the manifests are data, read with PyYAML's node API (fleetgate's bounded loader)
so that every value keeps its line. The manifest a fleet service names (``kubernetes = "FILE"``) is a stream of
documents (``---``; ``kind: List`` and ``kind: *List`` give their ``items``); the ConfigMaps, Secrets and Services it
refers to are read from it and from the other YAML files of its directory, as ``kubectl apply -f DIR`` applies them
together. What is read, as the Kubernetes API reference says (core/v1 ``Container``, ``EnvVar``, ``EnvFromSource``,
``Volume``, ``ServicePort``; "Define a Command and Arguments for a Container"):

- workloads: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job (``spec.template``), CronJob
  (``spec.jobTemplate.spec.template``) and Pod (``spec``); the container is named by fleet.toml's
  ``kubernetes_container`` where the pod has several;
- ``command`` replaces the image's ENTRYPOINT, ``args`` its CMD (a ``command`` without ``args`` drops the CMD); the
  entrypoints of llama.cpp's ``server*`` images (``/app/llama-server``) and ``vllm/vllm-openai`` (``vllm serve``)
  are known, and ``python3 -m vllm.entrypoints.openai.api_server`` takes ``vllm serve``'s options;
- ``$(VAR)`` in ``command``, ``args`` and ``env`` values expands from the container's environment (variables defined
  before it, for ``env``), ``$$`` is a literal ``$``, and a reference to nothing stays as written;
- ``envFrom`` (``configMapRef``/``secretRef``, with ``prefix`` and ``optional``), then ``env`` (``value``,
  ``valueFrom.configMapKeyRef``/``secretKeyRef``), ``env`` winning; a Secret's value is never kept: the render
  holds ``***`` (fleetgate.secrets.MASK) in its place;
- ``resources.limits`` GPUs of every vendor's device plugin (``nvidia.com/gpu``, ``amd.com/gpu``,
  ``gpu.intel.com/i915``, ``gpu.intel.com/xe``): the container gets that many cards, which the device plugin picks;
- card sharing: ``NVIDIA_VISIBLE_DEVICES=all`` (or a list of indices) in the container's environment, which NVIDIA's
  container runtime honours over what the device plugin allots (the plugin's default ``envvar`` device list
  strategy), and a time-slicing or MPS config of NVIDIA's device plugin kept in a ConfigMap of the repository
  (``sharing: timeSlicing|mps: resources: [{name: nvidia.com/gpu, replicas: N, rename}]``): either hands one card to
  several containers; ``nodeSelector``, ``nodeName`` or a node affinity say the pod is placed on a known node;
- ``volumeMounts`` through ``volumes`` (``hostPath``, ``configMap``, ``persistentVolumeClaim``, ...): a path the
  engine is given lies on the host where a ``hostPath`` volume holds it;
- ``ports`` (``containerPort``, named) and the Services whose selector matches the pod's labels: a Service port
  whose ``targetPort`` (a number or a port's name) is the engine's port is where clients reach it.

A Helm chart, a Flux HelmRelease or a kustomization is not rendered here (its templates need helm or kustomize and
often a chart fetched from the network): ``unrendered`` names the command that renders it, and the rendered file is
what fleet.toml names.
"""

from __future__ import annotations

import base64
import binascii
import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fleetgate.errors import InputError, read_text
from fleetgate.render.origins import Origin
from fleetgate.secrets import MASK
from fleetgate.sources.compose import Grant, deepest_mount
from fleetgate.sources.docker_run import ENGINE_IMAGES, NotServing, engine_of_image, image_process, split_image
from fleetgate.sources.yaml_bounded import compose_yaml_documents, merged_keys

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet, Service

__all__ = ["GPU_RESOURCES", "KUSTOMIZATIONS", "MAX_MANIFEST_FILES", "MAX_VALUE_CHARS", "WORKLOAD_KINDS",
           "KubernetesContainer", "RunAs", "ServicePort", "Sharing", "VolumeMount", "WorkloadEntry",
           "device_plugin_sharing", "list_workloads", "read_kubernetes", "unrendered"]

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod")
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe")
"""The extended resources the vendors' device plugins advertise, one card each."""
MAX_MANIFEST_FILES = 256
"""The most YAML files of a manifest's directory read for its ConfigMaps, Secrets and Services."""
MAX_VALUE_CHARS = 32 * 4096
"""No expanded value is longer: Linux refuses an argument or environment string over 128 KiB (MAX_ARG_STRLEN)."""
MAX_CARDS = 1024
MAX_WALKED = 20000
"""The most directory entries looked at for a device plugin config: a fleet repository has a few hundred."""
_EXPECTED = "Kubernetes manifests (YAML documents with apiVersion:, kind:, metadata:)"
_VLLM_MODULE = "vllm.entrypoints.openai.api_server"
_FOREIGN_MODULES = {"llama_cpp.server": "llama-cpp-python's server (python -m llama_cpp.server)"}
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_DIGITS = re.compile(r"[0-9]{1,6}")
_INDICES = re.compile(r"[0-9]{1,4}(,[0-9]{1,4})*")


# ------------------------------------------------------------------------------------------------------------ types

@dataclass(frozen=True)
class ServicePort:
    """A port of a Service that selects the pod: clients reach ``port`` (on the Service's address), the pod gets
    the connection on ``target``."""

    service: str
    port: int
    target: int | None
    """The container port the Service forwards to; None: a named ``targetPort`` no container port of the pod has."""
    node_port: int | None
    where: str


@dataclass(frozen=True)
class VolumeMount:
    target: str
    """The path in the container."""
    kind: str
    """The volume's source: ``hostPath``, ``configMap``, ``persistentVolumeClaim``, ``emptyDir``, ..."""
    source: str | None
    """The host path (hostPath), the ConfigMap's or the claim's name; None where the source has no name."""
    where: str
    sub: str | None = None
    """``subPath`` of a volume other than hostPath (a hostPath's is joined to ``source``): the one entry mounted."""
    keys: tuple[str, ...] | None = None
    """A configMap volume's file names (its ``items`` paths, else the ConfigMap's keys) where a manifest of the
    repository defines the ConfigMap; None for any other volume, or a ConfigMap the repository does not hold."""


@dataclass(frozen=True)
class RunAs:
    """Who a pod's container runs as: ``runAsUser`` and ``runAsNonRoot`` of its ``securityContext``, each the
    container's where it sets one, else the pod's (None: neither sets it, and the image's USER applies)."""

    user: int | None
    user_where: str
    non_root: bool | None
    non_root_where: str
    groups: tuple[int, ...] = ()
    """The GIDs the process holds besides its user's: ``runAsGroup``, the pod's ``supplementalGroups`` and
    ``fsGroup`` (core/v1 PodSecurityContext: "added to the first process run in each container")."""
    groups_where: str = ""


@dataclass(frozen=True)
class Sharing:
    """How one card can reach several containers: what says so, where, and whether the plugin's MPS partitions its
    memory (each replica limited to its share) rather than time-slicing it (no memory isolation)."""

    how: str
    where: str
    mps: bool = False


@dataclass(frozen=True)
class KubernetesContainer:
    path: Path
    """The manifest file that defines the workload."""
    workload: str
    """``Kind/name``."""
    container: str
    line: int
    image: str | None
    argv: tuple[str, ...]
    env: Mapping[str, Origin]
    """The container's environment, with where each was set; a Secret's value is ``***``."""
    secret_names: frozenset[str]
    """The variables whose value comes from a Secret (masked in ``env``)."""
    ports: tuple[tuple[str | None, int, str], ...]
    """(name, containerPort, where) of the container's ``ports``."""
    service_ports: tuple[ServicePort, ...]
    selected: tuple[str, ...]
    """The Services (of the manifest's directory) whose selector matches the pod's labels."""
    mounts: tuple[VolumeMount, ...]
    gpus: Grant | None
    """None: no GPU resource in ``resources.limits``."""
    command_where: str
    notes: tuple[str, ...] = field(default=())
    run_as: RunAs | None = None
    """``securityContext`` ``runAsUser``/``runAsNonRoot``, the container's over the pod's."""
    shared: Sharing | None = None
    """None: the cards the device plugin allots are this container's alone."""
    placed: bool = False
    """The pod says which node it runs on (``nodeSelector``, ``nodeName``, ``affinity.nodeAffinity``)."""
    device_nodes: tuple[str, ...] = ()
    """The GPU device nodes the container is given: ``/dev/kfd`` and a render node from ``amd.com/gpu`` (AMD's device
    plugin), a render node from ``gpu.intel.com/*``, or ``hostPath`` volumes of ``/dev/kfd`` and ``/dev/dri``."""

    @property
    def name(self) -> str:
        return f"{self.workload} container {self.container}"

    def mount_of(self, container_path: str) -> tuple[VolumeMount, PurePosixPath] | None:
        """The volumeMount the container sees ``container_path`` through (the deepest), and the path below its
        mountPath; None when no volumeMount holds it (the image's own filesystem)."""
        return deepest_mount(self.mounts, container_path)

    def host_path(self, container_path: str) -> str | None:
        """The host path behind a container path, through the hostPath volumes (the deepest mount first); None when
        no hostPath mount holds it."""
        found = deepest_mount(self.mounts, container_path)
        if found is None or found[0].kind != "hostPath" or found[0].source is None:
            return None
        return str(PurePosixPath(found[0].source) / found[1]) if str(found[1]) != "." else found[0].source

    def targeting(self, port: int) -> tuple[ServicePort, ...]:
        """The ports of the Services selecting the pod that forward to container port ``port``."""
        return tuple(p for p in self.service_ports if p.target == port)


@dataclass(frozen=True)
class WorkloadEntry:
    """One container of a workload, as ``list_workloads`` finds it (before a fleet names it)."""

    workload: str
    container: str
    path: Path
    line: int
    program: str | None
    """The file name of the program it starts (``llama-server``, ``vllm``), ``vllm`` for the OpenAI api_server
    module; None when the image's entrypoint is not known offline and the manifest names none."""
    foreign: str | None = None
    """A server fleetgate knows it does not read (llama-cpp-python's)."""


# ------------------------------------------------------------------------------------------------------- documents

@dataclass(frozen=True)
class _Object:
    kind: str
    name: str
    node: MappingNode
    path: Path


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _where(path: Path, node: Node) -> str:
    return f"{path}:{_line(node)}"


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"the {node.tag.rsplit(':', 1)[-1]} {node.value!r}"


def _scalar(path: Path, node: Node, what: str) -> str:
    if not isinstance(node, ScalarNode):
        raise InputError(path, _line(node), f"{what}: expected a string, got {_kind(node)}")
    return str(node.value)


def _null(node: Node | None) -> bool:
    return node is None or (isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null")


def _get(node: Node | None, key: str) -> Node | None:
    value = _keys(node).get(key)
    return None if _null(value) else value


def _keys(node: Node | None) -> dict[str, Node]:
    return merged_keys(node) if node is not None else {}


def _mapping(path: Path, node: Node | None, what: str) -> MappingNode | None:
    if node is None:
        return None
    if not isinstance(node, MappingNode):
        raise InputError(path, _line(node), f"{what}: expected a mapping, got {_kind(node)}")
    return node


def _sequence(path: Path, node: Node | None, what: str) -> list[Node]:
    if node is None:
        return []
    if not isinstance(node, SequenceNode):
        raise InputError(path, _line(node), f"{what}: expected a list, got {_kind(node)}")
    return list(node.value)


def _objects(path: Path) -> list[_Object]:
    """The objects of a manifest file: its documents, a ``kind: List``'s items in their place; a document with no
    ``kind`` (a values file, a kustomization's patch) is no object."""
    found: list[_Object] = []
    pending = list(compose_yaml_documents(path, read_text(path, "the Kubernetes manifest"), _EXPECTED))
    pending.reverse()
    while pending:
        node = pending.pop()
        if not isinstance(node, MappingNode):
            continue
        kind_node = _get(node, "kind")
        if kind_node is None or not isinstance(kind_node, ScalarNode):
            continue
        kind = str(kind_node.value)
        if kind == "List" or kind.endswith("List"):
            items = _sequence(path, _get(node, "items"), f"{kind}.items")
            pending += list(reversed(items))
            continue
        metadata = _get(node, "metadata")
        name_node = _get(metadata, "name")
        name = _scalar(path, name_node, f"{kind}.metadata.name") if name_node is not None else ""
        found.append(_Object(kind, name, node, path))
    return found


def _is_yaml(path: Path) -> bool:
    return path.suffix in (".yaml", ".yml") and path.is_file()


def _neighbours(path: Path, repository: Path) -> list[_Object]:
    """The objects of the other YAML files of the manifest's directory; one that is not a manifest (a chart's
    values, a template) is left out, as it holds no ConfigMap, Secret or Service ``kubectl apply`` would create."""
    found: list[_Object] = []
    siblings = sorted(p for p in path.parent.iterdir() if p != path and _is_yaml(p))[:MAX_MANIFEST_FILES]
    for sibling in siblings:
        real = Path(posixpath.normpath(sibling.resolve()))
        if repository.resolve() not in real.parents:
            continue
        try:
            found += [o for o in _objects(sibling) if o.kind in ("ConfigMap", "Secret", "Service")]
        except InputError:
            continue  # a template or a values file of a chart beside the manifest: not applied with it
    return found


# ------------------------------------------------------------------------------------------------ not renderable

KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")
"""The names kustomize reads a directory's kustomization from (api/konfig: RecognizedKustomizationFileNames)."""


def unrendered(path: Path, repository: Path) -> str | None:
    """The one-line next step for a file that is a Helm chart, a Flux HelmRelease or a kustomization: the command
    that renders it offline into manifests fleetgate reads; None for any other file."""
    rel = _rel(path, repository)
    directory = _rel(path.parent, repository)
    name = path.name
    if name in KUSTOMIZATIONS:
        return (f"{rel} is a kustomization, which fleetgate does not build: run `kustomize build {directory} > "
                f"rendered.yaml` (or `kubectl kustomize {directory}`) and declare kubernetes = \"rendered.yaml\"")
    beside = next((path.parent / k for k in KUSTOMIZATIONS if (path.parent / k).is_file()), None)
    if beside is not None:
        # A base's resource or an overlay's patch is an input of the build, never applied alone: a patch is a
        # fragment, and a base's workload runs only as the overlays change it.
        return (f"{rel} is part of the kustomization {_rel(beside, repository)}, which fleetgate does not build: run "
                f"`kustomize build {directory} > rendered.yaml` (or `kubectl kustomize {directory}`) on the overlay "
                "that is deployed and declare kubernetes = \"rendered.yaml\"")
    if name in ("Chart.yaml", "values.yaml") or (path.parent / "Chart.yaml").is_file() or (
            path.parent.name == "templates" and (path.parent.parent / "Chart.yaml").is_file()):
        chart = path.parent if (path.parent / "Chart.yaml").is_file() else path.parent.parent
        chart_rel = _rel(chart, repository)
        return (f"{rel} belongs to the Helm chart {chart_rel}, which fleetgate does not render: run `helm template "
                f"RELEASE {chart_rel} -f {chart_rel}/values.yaml > rendered.yaml` and declare kubernetes = "
                "\"rendered.yaml\"")
    try:
        objects = _objects(path)
    except InputError:
        return None
    for obj in objects:
        if obj.kind == "HelmRelease":
            return f"{rel}:{_line(obj.node)}: {_helm_release(obj, objects, repository)}"
        if obj.kind == "Kustomization":
            return (f"{rel}:{_line(obj.node)}: Kustomization {obj.name} is built by Flux, which fleetgate does not "
                    f"do: run `kustomize build DIR > rendered.yaml` on the directory its spec.path names and declare "
                    "kubernetes = \"rendered.yaml\"")
    return None


def _text(node: Node | None) -> str | None:
    return str(node.value) if isinstance(node, ScalarNode) and not _null(node) and str(node.value) else None


def _helm_release(obj: _Object, objects: Sequence[_Object], repository: Path) -> str:
    """The ``helm template`` line that renders what Flux's helm-controller installs for a HelmRelease
    (helm.toolkit.fluxcd.io/v2): the chart from its source, the release name and namespace Flux gives it."""
    spec = _get(obj.node, "spec")
    chart_spec = _get(_get(spec, "chart"), "spec")
    chart = _text(_get(chart_spec, "chart")) or "CHART"
    version = _text(_get(chart_spec, "version"))
    ref = _get(chart_spec, "sourceRef") or _get(spec, "chartRef")
    source_kind, source_name = _text(_get(ref, "kind")) or "HelmRepository", _text(_get(ref, "name")) or "SOURCE"
    # Flux names the release [targetNamespace-]name unless releaseName says otherwise, and installs it into
    # targetNamespace, else the HelmRelease's own namespace.
    target = _text(_get(spec, "targetNamespace"))
    namespace = target or _text(_get(_get(obj.node, "metadata"), "namespace"))
    release = _text(_get(spec, "releaseName")) or (f"{target}-{obj.name}" if target else obj.name) or "RELEASE"
    source = next((o for o in [*objects, *_sources_beside(obj.path, repository)]
                   if o.kind == source_kind and o.name == source_name), None)
    url = _text(_get(_get(source.node, "spec"), "url")) if source is not None else None
    where = f"{source_kind} {source_name}"
    if _get(spec, "chartRef") is not None:
        # chartRef names an OCIRepository (or a HelmChart) whose URL and tag are the chart, with no chart name of its own
        command = f"helm template {release} {url or 'oci://URL'}"
        told = f"the chart {where} fetches" + ("" if url else f" (URL: {where}'s spec.url)")
    elif source_kind in ("GitRepository", "Bucket"):
        command = f"helm template {release} {chart}"
        told = f"the chart at {chart} in {where}"
    elif url is not None and url.startswith("oci://"):
        command = f"helm template {release} {url.rstrip('/')}/{chart}"
        told = f"chart {chart} of {where}"
    else:
        command = f"helm template {release} {chart} --repo {url or 'URL'}"
        told = f"chart {chart} of {where}" + ("" if url else f" (URL: {where}'s spec.url)")
    if _get(spec, "chartRef") is not None and source is not None:
        version = _text(_get(_get(_get(source.node, "spec"), "ref"), "tag"))
    if version is not None:
        command += f" --version '{version}'"
    if namespace is not None:
        command += f" --namespace {namespace}"
    values = "the release's spec.values as values.yaml"
    if _get(spec, "valuesFrom") is not None:
        values += ", under the ConfigMap and Secret values its spec.valuesFrom names, as Flux merges them"
    return (f"HelmRelease {obj.name} is rendered by Flux from {told}, which fleetgate does not fetch or render: run "
            f"`{command} -f values.yaml > rendered.yaml` ({values}) and declare kubernetes = \"rendered.yaml\"")


def _sources_beside(path: Path, repository: Path) -> list[_Object]:
    """Flux's chart sources (HelmRepository, OCIRepository, GitRepository) in the other YAML files of a HelmRelease's
    directory, where a repository that keeps them together keeps them."""
    found: list[_Object] = []
    for sibling in sorted(p for p in path.parent.iterdir() if p != path and _is_yaml(p))[:MAX_MANIFEST_FILES]:
        if repository.resolve() not in Path(posixpath.normpath(sibling.resolve())).parents:
            continue
        try:
            found += [o for o in _objects(sibling) if o.kind in ("HelmRepository", "OCIRepository", "GitRepository")]
        except InputError:
            continue
    return found


def _rel(path: Path, repository: Path) -> str:
    try:
        return path.relative_to(repository).as_posix() or "."
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------------------------------- workloads

# Where each workload kind keeps its pod's containers (the API reference's PodSpec under each kind's spec).
_CONTAINERS_AT = {"Pod": "spec.containers", "CronJob": "spec.jobTemplate.spec.template.spec.containers"}


def _pod_template(obj: _Object) -> tuple[MappingNode | None, MappingNode | None]:
    """(pod spec, pod labels) of a workload."""
    path = obj.path
    spec = _mapping(path, _get(obj.node, "spec"), f"{obj.kind}/{obj.name}.spec")
    if obj.kind == "Pod":
        return spec, _mapping(path, _get(_get(obj.node, "metadata"), "labels"), f"Pod/{obj.name}.metadata.labels")
    if obj.kind == "CronJob":
        spec = _mapping(path, _get(_get(spec, "jobTemplate"), "spec"), f"CronJob/{obj.name}.spec.jobTemplate.spec")
    template = _mapping(path, _get(spec, "template"), f"{obj.kind}/{obj.name}.spec.template")
    labels = _mapping(path, _get(_get(template, "metadata"), "labels"), f"{obj.kind}/{obj.name}.spec.template.metadata.labels")
    return _mapping(path, _get(template, "spec"), f"{obj.kind}/{obj.name}.spec.template.spec"), labels


def _containers(obj: _Object) -> list[tuple[str, MappingNode]]:
    spec, _ = _pod_template(obj)
    found: list[tuple[str, MappingNode]] = []
    for i, item in enumerate(_sequence(obj.path, _get(spec, "containers"), f"{obj.kind}/{obj.name} containers")):
        node = _mapping(obj.path, item, f"{obj.kind}/{obj.name} containers[{i}]")
        assert node is not None
        name_node = _get(node, "name")
        name = _scalar(obj.path, name_node, f"{obj.kind}/{obj.name} containers[{i}].name") if name_node else str(i)
        found.append((name, node))
    return found


def _words(path: Path, node: Node | None, what: str) -> list[str] | None:
    if node is None:
        return None
    return [_scalar(path, item, f"{what}[{i}]") for i, item in enumerate(_sequence(path, node, what))]


def _process(path: Path, container: MappingNode, what: str) -> tuple[list[str] | None, str | None]:
    """The words the container runs before ``$(VAR)`` expansion (``command`` replacing the image's ENTRYPOINT,
    ``args`` its CMD), and the image; None when the image's entrypoint is not known offline and no command is
    written. The image's entrypoint is the one compose and a Quadlet read (``docker_run.image_process``)."""
    image_node = _get(container, "image")
    image = _scalar(path, image_node, f"{what}.image") if image_node is not None else None
    command = _words(path, _get(container, "command"), f"{what}.command")
    args = _words(path, _get(container, "args"), f"{what}.args") or []
    if command is not None:
        return [*command, *args], image
    repo, tag = split_image(image)
    try:
        return image_process(repo, tag, args), image
    except NotServing as exc:
        node = _get(container, "args") or container
        raise InputError(path, _line(node), f"{what}.args: {exc}; expected args starting with --server") from None


def _engine_words(words: list[str]) -> tuple[list[str], str | None]:
    """The words with vLLM's OpenAI api_server module read as ``vllm serve`` (it takes the same options), and the
    name of a server fleetgate knows it does not read."""
    if len(words) >= 3 and posixpath.basename(words[0]).startswith("python") and words[1] == "-m":
        if words[2] == _VLLM_MODULE:
            return ["vllm", "serve", *words[3:]], None
        if words[2] in _FOREIGN_MODULES:
            return words, _FOREIGN_MODULES[words[2]]
    return words, None


def list_workloads(path: Path, repository: Path) -> tuple[WorkloadEntry, ...]:
    """Every container of every workload of a manifest file, and the program it starts."""
    found: list[WorkloadEntry] = []
    for obj in _objects(path):
        if obj.kind not in WORKLOAD_KINDS:
            continue
        for name, node in _containers(obj):
            words, _ = _process(path, node, f"{obj.kind}/{obj.name} container {name}")
            foreign = None
            if words is not None:
                words, foreign = _engine_words(words)
            found.append(WorkloadEntry(f"{obj.kind}/{obj.name}", name, path, _line(node),
                                       posixpath.basename(words[0]) if words else None, foreign))
    return tuple(found)


# --------------------------------------------------------------------------------------------------------- expand

def expand(text: str, env: Mapping[str, str], path: Path, line: int, what: str) -> str:
    """``$(VAR)`` expanded as the kubelet expands it (k8s.io/kubernetes third_party/forked/golang/expansion): a
    defined variable is replaced, ``$$`` is one ``$``, any other ``$`` and a reference to nothing stay as written."""
    out: list[str] = []
    size = 0
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            piece, i = "$", i + 2
        elif text.startswith("$(", i):
            match = _REFERENCE.match(text, i)
            if match is None:
                piece, i = "$", i + 1
            else:
                name = match.group(1)
                piece = env[name] if name in env else match.group(0)
                i = match.end()
        else:
            piece, i = text[i], i + 1
        size += len(piece)
        if size > MAX_VALUE_CHARS:
            shown = repr(text) if len(text) <= 80 else f"{text[:80]!r}... ({len(text)} characters)"
            raise InputError(path, line, f"{what}: {shown} expands to more than {MAX_VALUE_CHARS} characters; expected "
                             "a value Linux can pass to a process (128 KiB at most)")
        out.append(piece)
    return "".join(out)


# -------------------------------------------------------------------------------------------------- environment

class _Sources:
    """The ConfigMaps and Secrets of the manifest and its directory, read on demand."""

    def __init__(self, objects: Sequence[_Object], directory: str) -> None:
        self.objects = objects
        self.directory = directory

    def find(self, kind: str, name: str) -> _Object | None:
        return next((o for o in self.objects if o.kind == kind and o.name == name), None)

    def data(self, obj: _Object) -> dict[str, tuple[str, str]]:
        """key -> (value, where); a Secret's ``data`` decoded from base64, its ``stringData`` winning."""
        found: dict[str, tuple[str, str]] = {}
        data = _mapping(obj.path, _get(obj.node, "data"), f"{obj.kind}/{obj.name}.data")
        for key, value in _keys(data).items():
            text = "" if _null(value) else _scalar(obj.path, value, f"{obj.kind}/{obj.name}.data.{key}")
            if obj.kind == "Secret":
                try:
                    text = base64.b64decode("".join(text.split()), validate=True).decode("utf-8")
                except (binascii.Error, UnicodeDecodeError):
                    raise InputError(obj.path, _line(value), f"Secret/{obj.name}.data.{key}: not base64 of UTF-8 "
                                     "text; expected the value base64-encoded (or written as stringData)") from None
            found[key] = (text, _where(obj.path, value))
        if obj.kind == "Secret":
            string_data = _mapping(obj.path, _get(obj.node, "stringData"), f"Secret/{obj.name}.stringData")
            for key, value in _keys(string_data).items():
                text = "" if _null(value) else _scalar(obj.path, value, f"Secret/{obj.name}.stringData.{key}")
                found[key] = (text, _where(obj.path, value))
        return found

    def missing(self, kind: str, name: str) -> str:
        known = sorted(o.name for o in self.objects if o.kind == kind)
        return (f"{kind} {name!r}, which no manifest of {self.directory} defines (the kubelet holds the pod in "
                f"CreateContainerConfigError); expected one of: {', '.join(known) or f'no {kind} there'}, or "
                "optional: true")


def _optional(path: Path, ref: Node, what: str) -> bool:
    node = _get(ref, "optional")
    if node is None:
        return False
    text = _scalar(path, node, f"{what}.optional").lower()
    if text not in ("true", "false"):
        raise InputError(path, _line(node), f"{what}.optional: {text!r}; expected true or false")
    return text == "true"


def _environment(path: Path, container: MappingNode, what: str,
                 sources: _Sources) -> tuple[dict[str, Origin], set[str], list[str]]:
    """The container's environment (``envFrom`` in order, then ``env``, which wins), the variables a Secret gives,
    and notes on what is known only in the cluster."""
    env: dict[str, Origin] = {}
    secret: set[str] = set()
    notes: list[str] = []
    for i, item in enumerate(_sequence(path, _get(container, "envFrom"), f"{what}.envFrom")):
        label = f"{what}.envFrom[{i}]"
        prefix_node = _get(item, "prefix")
        prefix = _scalar(path, prefix_node, f"{label}.prefix") if prefix_node is not None else ""
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = _get(item, key)
            if ref is None:
                continue
            name = _scalar(path, _get(ref, "name") or ref, f"{label}.{key}.name")
            obj = sources.find(kind, name)
            if obj is None:
                if _optional(path, ref, f"{label}.{key}"):
                    continue
                raise InputError(path, _line(ref), f"{label}.{key}: {sources.missing(kind, name)}")
            for var, (value, where) in sources.data(obj).items():
                name_var = prefix + var
                env[name_var] = Origin(name_var, MASK if kind == "Secret" and value else value, where, key)
                if kind == "Secret":
                    secret.add(name_var)
                else:
                    secret.discard(name_var)
    for i, item in enumerate(_sequence(path, _get(container, "env"), f"{what}.env")):
        label = f"{what}.env[{i}]"
        name_node = _get(item, "name")
        if name_node is None:
            raise InputError(path, _line(item), f"{label}: no name; expected name: VAR and value: or valueFrom:")
        name = _scalar(path, name_node, f"{label}.name")
        label = f"{what}.env {name}"
        value_node, source = _get(item, "value"), _get(item, "valueFrom")
        if source is None:
            raw = _scalar(path, value_node, label) if value_node is not None else ""
            values = {k: o.value for k, o in env.items()}
            env[name] = Origin(name, expand(raw, values, path, _line(item), label), _where(path, item), "env")
            secret.discard(name)
            continue
        for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
            ref = _get(source, key)
            if ref is None:
                continue
            ref_name = _scalar(path, _get(ref, "name") or ref, f"{label}.valueFrom.{key}.name")
            ref_key_node = _get(ref, "key")
            if ref_key_node is None:
                raise InputError(path, _line(ref), f"{label}.valueFrom.{key}: no key; expected key: KEY of {kind} "
                                 f"{ref_name}")
            ref_key = _scalar(path, ref_key_node, f"{label}.valueFrom.{key}.key")
            obj = sources.find(kind, ref_name)
            optional = _optional(path, ref, f"{label}.valueFrom.{key}")
            if obj is None:
                if optional:
                    break
                raise InputError(path, _line(ref), f"{label}.valueFrom.{key}: {sources.missing(kind, ref_name)}")
            data = sources.data(obj)
            if ref_key not in data:
                if optional:
                    break
                raise InputError(path, _line(ref_key_node), f"{label}.valueFrom.{key}: {kind} {ref_name} "
                                 f"({_where(obj.path, obj.node)}) has no key {ref_key!r} (the kubelet holds the pod in "
                                 f"CreateContainerConfigError); expected one of: {', '.join(sorted(data)) or 'no key'}, "
                                 "or optional: true")
            value, where = data[ref_key]
            env[name] = Origin(name, MASK if kind == "Secret" and value else value, where, key)
            if kind == "Secret":
                secret.add(name)
            else:
                secret.discard(name)
            break
        else:
            env.pop(name, None)
            notes.append(f"{_where(path, item)}: {name} comes from the cluster (fieldRef/resourceFieldRef), which is "
                         "not known offline: left out")
    return env, secret, notes


# ----------------------------------------------------------------------------------------------- ports, mounts, GPUs

def _port_number(path: Path, node: Node, what: str) -> int:
    text = _scalar(path, node, what)
    if not _DIGITS.fullmatch(text) or not 0 < int(text) < 65536:
        raise InputError(path, _line(node), f"{what}: {text!r}; expected a port number 1-65535")
    return int(text)


def _container_ports(path: Path, container: MappingNode, what: str) -> tuple[tuple[str | None, int, str], ...]:
    found: list[tuple[str | None, int, str]] = []
    for i, item in enumerate(_sequence(path, _get(container, "ports"), f"{what}.ports")):
        number = _get(item, "containerPort")
        if number is None:
            raise InputError(path, _line(item), f"{what}.ports[{i}]: no containerPort; expected containerPort: PORT")
        name_node = _get(item, "name")
        found.append((_scalar(path, name_node, f"{what}.ports[{i}].name") if name_node is not None else None,
                      _port_number(path, number, f"{what}.ports[{i}].containerPort"), _where(path, item)))
    return tuple(found)


def _services(objects: Sequence[_Object], labels: Mapping[str, str],
              ports: Sequence[tuple[str | None, int, str]]) -> tuple[list[str], list[ServicePort]]:
    """The Services whose selector matches the pod's labels, and their ports with each ``targetPort`` resolved."""
    names: list[str] = []
    found: list[ServicePort] = []
    by_name = {name: number for name, number, _ in ports if name is not None}
    for obj in objects:
        if obj.kind != "Service":
            continue
        spec = _get(obj.node, "spec")
        selector = {k: _scalar(obj.path, v, f"Service/{obj.name}.spec.selector.{k}")
                    for k, v in _keys(_get(spec, "selector")).items()}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            continue
        names.append(obj.name)
        for i, item in enumerate(_sequence(obj.path, _get(spec, "ports"), f"Service/{obj.name}.spec.ports")):
            label = f"Service/{obj.name}.spec.ports[{i}]"
            port_node = _get(item, "port")
            if port_node is None:
                raise InputError(obj.path, _line(item), f"{label}: no port; expected port: PORT")
            port = _port_number(obj.path, port_node, f"{label}.port")
            target_node = _get(item, "targetPort")
            target: int | None = port
            if target_node is not None:
                text = _scalar(obj.path, target_node, f"{label}.targetPort")
                target = _port_number(obj.path, target_node, f"{label}.targetPort") if text.isdigit() else by_name.get(text)
            node_port = _get(item, "nodePort")
            found.append(ServicePort(obj.name, port, target,
                                     _port_number(obj.path, node_port, f"{label}.nodePort") if node_port else None,
                                     _where(obj.path, item)))
    return names, found


def _config_map_files(path: Path, item: Node, source: str | None, sources: _Sources | None,
                      label: str) -> tuple[str, ...] | None:
    """The files a configMap volume holds (core/v1 ConfigMapVolumeSource: ``items`` projects only the keys it lists,
    each at its ``path``; without it every key is a file of its name); None where no manifest read defines it."""
    if sources is None or source is None or (config := sources.find("ConfigMap", source)) is None:
        return None
    # binaryData's keys are files of the volume too (their bytes decoded by the kubelet, never by this reader).
    binary = _mapping(config.path, _get(config.node, "binaryData"), f"ConfigMap/{config.name}.binaryData")
    keys = (*sources.data(config), *_keys(binary))
    items = _sequence(path, _get(_get(item, "configMap"), "items"), f"{label}.configMap.items")
    if not items:
        return keys
    return tuple(_scalar(path, n, f"{label}.configMap.items[{i}].path") for i, it in enumerate(items)
                 if (n := _get(it, "path")) is not None)


def _mounts(path: Path, spec: MappingNode | None, container: MappingNode, what: str,
            claims: Sequence[str], sources: _Sources | None = None) -> tuple[VolumeMount, ...]:
    # A StatefulSet's volumeClaimTemplates are volumes of its pods too, each a claim of the template's name.
    volumes: dict[str, tuple[str, str | None]] = {claim: ("persistentVolumeClaim", claim) for claim in claims}
    files: dict[str, tuple[str, ...] | None] = {}
    for i, item in enumerate(_sequence(path, _get(spec, "volumes"), "spec.volumes")):
        name_node = _get(item, "name")
        if name_node is None:
            raise InputError(path, _line(item), f"spec.volumes[{i}]: no name; expected name: VOLUME")
        kinds = [k for k in merged_keys(item) if k != "name"]
        kind = kinds[0] if kinds else "emptyDir"
        source_key = {"hostPath": "path", "configMap": "name", "persistentVolumeClaim": "claimName",
                      "secret": "secretName"}.get(kind)
        source_node = _get(_get(item, kind), source_key) if source_key else None
        volume = _scalar(path, name_node, f"spec.volumes[{i}].name")
        volumes[volume] = (
            kind, _scalar(path, source_node, f"spec.volumes[{i}].{kind}.{source_key}") if source_node else None)
        if kind == "configMap":
            files[volume] = _config_map_files(path, item, volumes[volume][1], sources, f"spec.volumes[{i}]")
    found: list[VolumeMount] = []
    for i, item in enumerate(_sequence(path, _get(container, "volumeMounts"), f"{what}.volumeMounts")):
        label = f"{what}.volumeMounts[{i}]"
        name_node, target_node = _get(item, "name"), _get(item, "mountPath")
        if name_node is None or target_node is None:
            raise InputError(path, _line(item), f"{label}: expected name: VOLUME and mountPath: PATH")
        name = _scalar(path, name_node, f"{label}.name")
        if name not in volumes:
            raise InputError(path, _line(name_node), f"{label}: volume {name!r} is not among the pod's volumes; "
                             f"expected one of: {', '.join(volumes) or 'no volume'} (the API server refuses the pod)")
        kind, source = volumes[name]
        sub_node = _get(item, "subPath")
        sub = _scalar(path, sub_node, f"{label}.subPath") if sub_node is not None else None
        if sub is not None and kind == "hostPath" and source is not None:
            source, sub = posixpath.join(source, sub), None
        found.append(VolumeMount(_scalar(path, target_node, f"{label}.mountPath"), kind, source, _where(path, item),
                                 sub=sub, keys=files.get(name)))
    return tuple(found)


def _claim_templates(obj: _Object) -> list[str]:
    if obj.kind != "StatefulSet":
        return []
    templates = _sequence(obj.path, _get(_get(obj.node, "spec"), "volumeClaimTemplates"),
                          f"StatefulSet/{obj.name}.spec.volumeClaimTemplates")
    names = [_get(_get(t, "metadata"), "name") for t in templates]
    return [_scalar(obj.path, n, "volumeClaimTemplates metadata.name") for n in names if n is not None]


def _gpus(path: Path, container: MappingNode, what: str, shared: tuple[str, ...] = ()) -> Grant | None:
    limits = _get(_get(container, "resources"), "limits")
    for resource in dict.fromkeys((*GPU_RESOURCES, *shared)):
        node = _get(limits, resource)
        if node is None:
            continue
        text = _scalar(path, node, f"{what}.resources.limits.{resource}")
        if not text.isdigit() or int(text) > MAX_CARDS:
            raise InputError(path, _line(node), f"{what}.resources.limits.{resource}: {text!r}; expected a whole "
                             f"number of cards (at most {MAX_CARDS})")
        if int(text) == 0:
            return None
        # The device plugin picks which cards; like compose's count: N, the first N of the host's.
        return Grant(tuple(range(int(text))), f"resources.limits {resource}: {text} (the device plugin picks the "
                     "cards)", _where(path, node))
    return None


def device_plugin_sharing(repository: Path) -> dict[str, Sharing]:
    """The GPU resources NVIDIA's device plugin shares, by the name pods ask for, from the plugin configs kept in
    ConfigMaps of the repository (a ``data`` value holding ``version: v1`` ... ``sharing:``, as the plugin's and the
    GPU Operator's docs lay it out). A renamed resource (``rename``, or ``renameByDefault``: NAME.shared) is the name
    pods then ask for. The repository's YAML files are read in path order, at most ``MAX_MANIFEST_FILES``; one that
    is no manifest is skipped."""
    found: dict[str, Sharing] = {}
    root = repository.resolve()
    files: list[Path] = []
    seen = 0
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        seen += len(dirs) + len(names)
        files += [Path(directory) / n for n in sorted(names) if not n.startswith(".")
                  and _is_yaml(Path(directory) / n) and root in (Path(directory) / n).resolve().parents]
        if len(files) >= MAX_MANIFEST_FILES or seen > MAX_WALKED:
            break
    for file in files[:MAX_MANIFEST_FILES]:
        try:
            objects = [o for o in _objects(file) if o.kind == "ConfigMap"]
        except InputError:
            continue
        for obj in objects:
            for key, value in _keys(_get(obj.node, "data")).items():
                if isinstance(value, ScalarNode) and "sharing" in str(value.value):
                    found.update(_sharing(file, key, value))
    return found


def _sharing(path: Path, key: str, value: ScalarNode) -> dict[str, Sharing]:
    try:
        documents = compose_yaml_documents(path, str(value.value), "a device plugin config (version: v1, sharing:)")
    except InputError:
        return {}
    found: dict[str, Sharing] = {}
    where = _where(path, value)
    for document in documents:
        sharing = _get(document, "sharing") if isinstance(document, MappingNode) else None
        for mode in ("timeSlicing", "mps"):
            block = _get(sharing, mode) if isinstance(sharing, MappingNode) else None
            if not isinstance(block, MappingNode):
                continue
            by_default = str(getattr(_get(block, "renameByDefault"), "value", "")).lower() == "true"
            resources = _get(block, "resources")
            for item in resources.value if isinstance(resources, SequenceNode) else []:
                name, replicas, rename = (getattr(_get(item, k), "value", None) for k in ("name", "replicas", "rename"))
                if not isinstance(name, str) or not str(replicas or "").isdigit() or int(str(replicas)) < 2:
                    continue
                asked = str(rename) if rename else f"{name}.shared" if by_default else name
                isolation = ", with no memory isolation" if mode == "timeSlicing" else ", each limited to its share of memory"
                found[asked] = Sharing(f"NVIDIA's device plugin {'MPS' if mode == 'mps' else 'time-slicing'} config "
                                       f"(ConfigMap key {key}) hands each card of {name} to {replicas} containers"
                                       f"{isolation}", where, mps=mode == "mps")
    return found


# ---------------------------------------------------------------------------------------------------------- reading

def _workload(fleet: Fleet, service: Service) -> tuple[_Object, list[_Object]]:
    assert service.kubernetes is not None
    path = service.kubernetes
    next_step = unrendered(path, fleet.root)
    if next_step is not None:
        raise InputError(path, None, next_step)
    objects = _objects(path)
    workloads = [o for o in objects if o.kind in WORKLOAD_KINDS]
    named = service.kubernetes_workload
    if named is None:
        if len(workloads) != 1:
            raise InputError(path, None, f"{len(workloads)} workloads ({', '.join(f'{o.kind}/{o.name}' for o in workloads) or 'none'}); "
                             "expected kubernetes_workload = \"KIND/NAME\" in fleet.toml naming one")
        return workloads[0], objects
    for obj in workloads:
        if f"{obj.kind}/{obj.name}" == named or (("/" not in named) and obj.name == named):
            return obj, objects
    raise InputError(path, None, f"no workload {named!r}; expected one of: "
                     f"{', '.join(f'{o.kind}/{o.name}' for o in workloads) or 'none'} (set kubernetes_workload in "
                     "fleet.toml)")


def read_kubernetes(fleet: Fleet, service: Service, *,
                    overrides: Mapping[str, str | None] | None = None) -> KubernetesContainer:
    """The container of the workload a fleet service names, read as the kubelet would start it; ``overrides``
    replaces variables of the container's environment (None drops one) before ``$(VAR)`` is expanded."""
    obj, objects = _workload(fleet, service)
    path = obj.path
    containers = _containers(obj)
    if not containers:
        # Said where the kind keeps its pod's containers: a CronJob written in a Job's shape (or the reverse) has
        # none where its kind keeps them, and asking for kubernetes_container would send the user the wrong way.
        raise InputError(path, _line(obj.node), f"{obj.kind}/{obj.name}: no containers; expected them at "
                         f"{_CONTAINERS_AT.get(obj.kind, 'spec.template.spec.containers')}")
    wanted = service.kubernetes_container
    if wanted is None and len(containers) == 1:
        name, node = containers[0]
    else:
        hit = [(n, c) for n, c in containers if n == wanted]
        if not hit:
            raise InputError(path, _line(obj.node), f"{obj.kind}/{obj.name}: "
                             + (f"no container {wanted!r}" if wanted else f"{len(containers)} containers")
                             + f"; expected kubernetes_container = one of: {', '.join(n for n, _ in containers) or 'none'}")
        name, node = hit[0]
    what = f"{obj.kind}/{obj.name} container {name}"
    spec, labels_node = _pod_template(obj)
    labels = {k: _scalar(path, v, f"{what} label {k}") for k, v in _keys(labels_node).items()}
    sources = _Sources([*objects, *_neighbours(path, fleet.root)], _rel(path.parent, fleet.root))
    env, secret, notes = _environment(path, node, what, sources)
    words, image = _process(path, node, what)
    engine = engine_of_image(image) if image is not None else None
    if engine is not None:
        # The engine image's own ENV (llama.cpp .devops/*.Dockerfile), under every variable the pod sets.
        where = _where(path, _get(node, "image") or node)
        env = {**{k: Origin(k, v, where, "image") for k, v in ENGINE_IMAGES[engine][1].items()}, **env}
    for key, value in (overrides or {}).items():
        if key in env:
            if value is None:
                env.pop(key)
            else:
                env[key] = Origin(key, value, env[key].where, env[key].via)
    if words is None:
        raise InputError(path, _line(node), f"{what}: fleetgate does not know the entrypoint of image {image}; "
                         f"expected command: naming {service.binary}, or a llama.cpp server image or vllm/vllm-openai")
    values = {k: o.value for k, o in env.items()}
    words = [expand(w, values, path, _line(node), f"{what} argv[{i}]") for i, w in enumerate(words)]
    words, foreign = _engine_words(words)
    if foreign is not None:
        raise InputError(path, _line(node), f"{what}: runs {foreign}, which is not an engine fleetgate knows; "
                         "expected llama-server, vllm serve or python -m vllm.entrypoints.openai.api_server (declare "
                         "engine = \"openai\" with a serve script for another OpenAI-compatible server)")
    if not words or posixpath.basename(words[0]) != service.binary:
        shown = " ".join(words[:3]) or "nothing"
        raise InputError(path, _line(node), f"{what}: the container runs {shown}; expected {service.binary} itself "
                         "(a shell or a wrapper script in the image is not read)")
    command_node = _get(node, "args") or _get(node, "command") or node
    ports = _container_ports(path, node, what)
    mounts = _mounts(path, spec, node, what, _claim_templates(obj), sources)
    sharing = device_plugin_sharing(fleet.root)
    gpus, shared = _gpus(path, node, what, tuple(sharing)), None
    if gpus is not None:
        shared = next((sharing[r] for r in sharing if gpus.how.startswith(f"resources.limits {r}:")), None)
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    if visible is not None and (visible.value.strip() == "all" or _INDICES.fullmatch(visible.value.strip())):
        # NVIDIA's runtime gives the container what the variable names, whatever the device plugin allotted
        text = visible.value.strip()
        gpus = Grant(None if text == "all" else tuple(dict.fromkeys(int(i) for i in text.split(","))),
                     f"NVIDIA_VISIBLE_DEVICES={text} (NVIDIA's container runtime, over the device plugin)",
                     visible.where)
        shared = Sharing(f"NVIDIA_VISIBLE_DEVICES={text}: the container sees those cards of the node whatever other "
                         "containers are given", visible.where)
    selected, service_ports = _services(sources.objects, labels, ports)
    return KubernetesContainer(
        path=path, workload=f"{obj.kind}/{obj.name}", container=name, line=_line(node), image=image,
        argv=(service.binary, *words[1:]), env=env, secret_names=frozenset(secret), ports=ports,
        service_ports=tuple(service_ports), selected=tuple(selected), mounts=mounts,
        gpus=gpus, command_where=_where(path, command_node), notes=tuple(notes), shared=shared,
        placed=any(_get(spec, key) is not None for key in ("nodeSelector", "nodeName"))
        or _get(_get(spec, "affinity"), "nodeAffinity") is not None,
        run_as=_run_as(path, spec, node, what), device_nodes=_device_nodes(path, node, what, mounts),
    )


def _device_nodes(path: Path, container: MappingNode, what: str, mounts: tuple[VolumeMount, ...]) -> tuple[str, ...]:
    nodes: list[str] = []
    limits = _get(_get(container, "resources"), "limits")
    for resource, given in (("amd.com/gpu", ("/dev/kfd", "/dev/dri")), ("gpu.intel.com/i915", ("/dev/dri",)),
                            ("gpu.intel.com/xe", ("/dev/dri",))):
        node = _get(limits, resource)
        if node is not None and _scalar(path, node, f"{what}.resources.limits.{resource}").strip() not in ("", "0"):
            nodes += given
    for mount in mounts:
        source = mount.source or ""
        if mount.kind == "hostPath" and (source == "/dev/kfd" or source.rstrip("/") in ("/dev/dri", "/dev")
                                         or source.startswith("/dev/dri/")):
            nodes.append(source)
    return tuple(dict.fromkeys(nodes))


def _run_as(path: Path, spec: MappingNode | None, container: MappingNode, what: str) -> RunAs:
    """``runAsUser`` and ``runAsNonRoot``: the container's securityContext over the pod's (core/v1)."""
    found: dict[str, Node] = {}
    for owner in (spec, container):
        context = _mapping(path, _get(owner, "securityContext"), f"{what} securityContext")
        for key in ("runAsUser", "runAsNonRoot"):
            node = _get(context, key)
            if node is not None:
                found[key] = node
    user_node, flag_node = found.get("runAsUser"), found.get("runAsNonRoot")
    user = _scalar(path, user_node, f"{what} securityContext.runAsUser").strip() if user_node is not None else None
    flag = _scalar(path, flag_node, f"{what} securityContext.runAsNonRoot").strip().lower() if flag_node else None
    if user_node is not None and user is not None and not user.isdigit():
        raise InputError(path, _line(user_node), f"{what} securityContext.runAsUser = {user!r}; expected a UID (an "
                         "integer)")
    if flag_node is not None and flag is not None and flag not in ("true", "false"):
        raise InputError(path, _line(flag_node), f"{what} securityContext.runAsNonRoot = {flag!r}; expected true or "
                         "false")
    groups: list[int] = []
    groups_node: Node | None = None
    for owner, keys in ((container, ("runAsGroup",)), (spec, ("runAsGroup", "supplementalGroups", "fsGroup"))):
        security = _get(owner, "securityContext")
        for key in keys:
            node = _get(security, key)
            if node is None or (key == "runAsGroup" and owner is spec and _get(_get(container, "securityContext"),
                                                                             "runAsGroup") is not None):
                continue
            groups_node = groups_node or node
            items = node.value if isinstance(node, SequenceNode) else [node]
            for item in items:
                text = _scalar(path, item, f"{what} securityContext.{key}").strip()
                if not _DIGITS.fullmatch(text):
                    raise InputError(path, _line(item), f"{what} securityContext.{key} = {text!r}; expected a GID (an "
                                     "integer)")
                groups.append(int(text))
    return RunAs(user=int(user) if user is not None else None,
                 user_where=_where(path, user_node if user_node is not None else container),
                 non_root=(flag == "true") if flag is not None else None,
                 non_root_where=_where(path, flag_node if flag_node is not None else container),
                 groups=tuple(dict.fromkeys(groups)),
                 groups_where=_where(path, groups_node if groups_node is not None else container))
