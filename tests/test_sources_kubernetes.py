"""A Kubernetes container read the way the kubelet starts it (fleetgate/sources/kubernetes.py), against the API
reference: command/args over the image's ENTRYPOINT/CMD, ``$(VAR)`` and ``$$``, env/envFrom from ConfigMaps and
Secrets (a Secret's value never kept), GPU limits of every vendor, volumes, Services' ports; charts and
kustomizations named with the command that renders them; and every bad input as one line naming the file, the line
and what was expected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.render.dispatch import render
from fleetgate.sources.compose import Grant
from fleetgate.sources.kubernetes import (
    MAX_VALUE_CHARS,
    ServicePort,
    VolumeMount,
    WorkloadEntry,
    expand,
    list_workloads,
    read_kubernetes,
    unrendered,
)
from fleetgate.sources.yaml_bounded import compose_yaml_documents

FLEET = """[fleet]
name = "f"

[hosts.h]
ram_gib = 32
devices = [{ name = "CUDA0", vram_bytes = 25769803776 }]

[services.s]
host = "h"
port = PORT
engine = "ENGINE"
kubernetes = "k8s/app.yaml"
"""

POD = """apiVersion: v1
kind: Pod
metadata:
  name: engine
  labels: {app: engine}
spec:
  containers:
    - name: main
"""


def _fleet(tmp_path: Path, manifest: str, *, engine: str = "llama.cpp", port: int = 8080, extra: str = "",
           files: dict[str, str] | None = None) -> tuple[Path, str]:
    (tmp_path / "k8s").mkdir(exist_ok=True)
    (tmp_path / "k8s" / "app.yaml").write_text(manifest, encoding="utf-8")
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    toml = tmp_path / "fleet.toml"
    toml.write_text(FLEET.replace("PORT", str(port)).replace("ENGINE", engine) + extra, encoding="utf-8")
    return toml, str(tmp_path / "k8s" / "app.yaml")


def _container(body: str) -> str:
    return POD + "".join(f"      {line}\n" for line in body.splitlines())


def _read(tmp_path: Path, manifest: str, **kwargs: object):  # type: ignore[no-untyped-def]
    toml, _ = _fleet(tmp_path, manifest, **kwargs)  # type: ignore[arg-type]
    fleet = load_fleet(toml)
    return read_kubernetes(fleet, fleet.services["s"])


def _refused(tmp_path: Path, manifest: str, **kwargs: object) -> str:
    with pytest.raises(InputError) as caught:
        _read(tmp_path, manifest, **kwargs)
    message = str(caught.value)
    assert message.splitlines() == [message]
    return message


# ------------------------------------------------------------------------------------------------- argv semantics

@pytest.mark.parametrize(("body", "argv"), [
    # command replaces ENTRYPOINT, args its CMD
    ('image: ghcr.io/ggml-org/llama.cpp:server\ncommand: ["/opt/llama-server"]\nargs: ["-c", "4096"]',
     ("llama-server", "-c", "4096")),
    # args alone follow the image's ENTRYPOINT (llama.cpp's server images run /app/llama-server)
    ('image: ghcr.io/ggml-org/llama.cpp:server-cuda-b6300\nargs: ["--port", "8080"]', ("llama-server", "--port", "8080")),
    # a command alone drops the image's CMD
    ('image: some/image:1\ncommand: ["llama-server", "-m", "/m.gguf"]', ("llama-server", "-m", "/m.gguf")),
    # the image's entrypoint is the one compose and a Quadlet read (docker_run.image_process): a full image's
    # tools.sh starts llama-server when asked for --server
    ('image: ghcr.io/ggml-org/llama.cpp:full-cuda\nargs: ["--server", "--port", "8080"]',
     ("llama-server", "--port", "8080")),
])
def test_command_replaces_entrypoint_and_args_replace_cmd(tmp_path: Path, body: str, argv: tuple[str, ...]) -> None:
    assert _read(tmp_path, _container(body)).argv == argv


@pytest.mark.parametrize("body", [
    'image: vllm/vllm-openai:v0.13.0\nargs: ["--model", "/m", "--port", "8000"]',
    'image: vllm/vllm-openai:v0.13.0\ncommand: ["vllm", "serve"]\nargs: ["--model", "/m", "--port", "8000"]',
    'image: vllm/vllm-openai:v0.13.0\ncommand: ["python3", "-m", "vllm.entrypoints.openai.api_server"]\n'
    'args: ["--model", "/m", "--port", "8000"]',
    'image: vllm/vllm-openai:v0.13.0\ncommand: ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", '
    '"--port", "8000"]',
])
def test_vllm_is_read_as_vllm_serve_however_it_is_started(tmp_path: Path, body: str) -> None:
    assert _read(tmp_path, _container(body), engine="vllm").argv == ("vllm", "serve", "--model", "/m", "--port", "8000")


def test_a_full_image_not_asked_for_the_server_is_one_line(tmp_path: Path) -> None:
    message = _refused(tmp_path, _container('image: ghcr.io/ggml-org/llama.cpp:full\nargs: ["--run", "-m", "/m.gguf"]'))
    assert "app.yaml:" in message and "starts llama-server only when its first argument is --server" in message


def test_variable_references_expand_from_the_container_environment(tmp_path: Path) -> None:
    read = _read(tmp_path, _container(
        'image: ghcr.io/ggml-org/llama.cpp:server\n'
        'args: ["-m", "$(DIR)/m.gguf", "--alias", "a$$(DIR)", "--api-key-file", "$(UNDEFINED)", "-c", "$(CTX)"]\n'
        'env:\n  - {name: DIR, value: /models}\n  - {name: CTX, value: "$(BASE)0"}\n  - {name: BASE, value: "819"}'))
    # $(CTX) was expanded when it was defined, before BASE existed: it keeps $(BASE) as written.
    assert read.argv == ("llama-server", "-m", "/models/m.gguf", "--alias", "a$(DIR)", "--api-key-file",
                         "$(UNDEFINED)", "-c", "$(BASE)0")
    assert {k: o.value for k, o in read.env.items()} == {"LLAMA_ARG_HOST": "0.0.0.0", "DIR": "/models",
                                                         "CTX": "$(BASE)0", "BASE": "819"}


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)", "x"), ("$$(A)", "$(A)"), ("$$$(A)", "$x"), ("$(B)", "$(B)"), ("cost $5", "cost $5"), ("$(", "$("),
    ("$(A", "$(A"),
])
def test_expansion_is_the_kubelet_s(text: str, expected: str) -> None:
    assert expand(text, {"A": "x"}, Path("m.yaml"), 4, "args[0]") == expected


def test_a_huge_expansion_is_one_line(tmp_path: Path) -> None:
    manifest = _container('image: ghcr.io/ggml-org/llama.cpp:server\nenv:\n  - {name: A, value: "' + "x" * 4096 + '"}\n'
                          'args: ["' + "$(A)" * 64 + '"]')
    # argv[0] is the image's entrypoint; the 64 references of 4 KiB each are argv[1].
    assert _refused(tmp_path, manifest) == (
        f"{tmp_path}/k8s/app.yaml:8: Pod/engine container main argv[1]: {'$(A)' * 20!r}... (256 characters) expands "
        f"to more than {MAX_VALUE_CHARS} characters; expected a value Linux can pass to a process (128 KiB at most)")


# ------------------------------------------------------------------------------------------------------ environment

CONFIG = """apiVersion: v1
kind: ConfigMap
metadata: {name: llama-env}
data:
  LLAMA_ARG_CTX_SIZE: "8192"
  PORT: "8080"
---
apiVersion: v1
kind: Secret
metadata: {name: keys}
data:
  api: c2VjcmV0LWtleQ==
stringData:
  hf: hf_plain_token
"""


def test_env_from_config_maps_and_secrets_with_env_winning(tmp_path: Path) -> None:
    read = _read(tmp_path, _container(
        'image: ghcr.io/ggml-org/llama.cpp:server\n'
        'args: ["--port", "$(PORT)", "--api-key", "$(LLAMA_API_KEY)"]\n'
        'envFrom:\n  - configMapRef: {name: llama-env}\n  - secretRef: {name: keys}\n    prefix: K_\n'
        'env:\n  - {name: PORT, value: "9090"}\n'
        '  - name: LLAMA_API_KEY\n    valueFrom: {secretKeyRef: {name: keys, key: api}}\n'
        '  - name: CTX\n    valueFrom: {configMapKeyRef: {name: llama-env, key: LLAMA_ARG_CTX_SIZE}}'),
        files={"k8s/config.yaml": CONFIG})
    assert read.argv == ("llama-server", "--port", "9090", "--api-key", "***")
    assert {k: (o.value, o.via) for k, o in read.env.items()} == {
        "LLAMA_ARG_HOST": ("0.0.0.0", "image"),
        "LLAMA_ARG_CTX_SIZE": ("8192", "configMapRef"), "PORT": ("9090", "env"), "K_api": ("***", "secretRef"),
        "K_hf": ("***", "secretRef"), "LLAMA_API_KEY": ("***", "secretKeyRef"), "CTX": ("8192", "configMapKeyRef")}
    assert read.secret_names == frozenset({"K_api", "K_hf", "LLAMA_API_KEY"})
    assert read.env["CTX"].where == f"{tmp_path}/k8s/config.yaml:5"


def test_a_secret_value_never_reaches_the_render(tmp_path: Path) -> None:
    toml, _ = _fleet(tmp_path, _container(
        'image: ghcr.io/ggml-org/llama.cpp:server\nenv:\n'
        '  - name: HF_TOKEN\n    valueFrom: {secretKeyRef: {name: keys, key: hf}}'), files={"k8s/config.yaml": CONFIG})
    fleet = load_fleet(toml)
    rendered = render(fleet, fleet.services["s"])
    assert "hf_plain_token" not in repr(rendered)
    assert rendered.env["HF_TOKEN"] == "***"


def test_a_missing_config_map_is_one_line(tmp_path: Path) -> None:
    message = _refused(tmp_path, _container(
        'image: ghcr.io/ggml-org/llama.cpp:server\nenvFrom:\n  - configMapRef: {name: absent}'),
        files={"k8s/config.yaml": CONFIG})
    assert message == (f"{tmp_path}/k8s/app.yaml:11: Pod/engine container main.envFrom[0].configMapRef: ConfigMap "
                       "'absent', which no manifest of k8s defines (the kubelet holds the pod in "
                       "CreateContainerConfigError); expected one of: llama-env, or optional: true")


def test_an_optional_missing_config_map_is_nothing(tmp_path: Path) -> None:
    read = _read(tmp_path, _container('image: ghcr.io/ggml-org/llama.cpp:server\nenvFrom:\n'
                                      '  - configMapRef: {name: absent, optional: true}'))
    assert {k: o.value for k, o in read.env.items()} == {"LLAMA_ARG_HOST": "0.0.0.0"}


def test_a_missing_secret_key_is_one_line_that_names_no_value(tmp_path: Path) -> None:
    message = _refused(tmp_path, _container(
        'image: ghcr.io/ggml-org/llama.cpp:server\nenv:\n'
        '  - name: HF_TOKEN\n    valueFrom: {secretKeyRef: {name: keys, key: token}}'), files={"k8s/config.yaml": CONFIG})
    assert message == (f"{tmp_path}/k8s/app.yaml:12: Pod/engine container main.env HF_TOKEN.valueFrom.secretKeyRef: "
                       f"Secret keys ({tmp_path}/k8s/config.yaml:8) has no key 'token' (the kubelet holds the pod in "
                       "CreateContainerConfigError); expected one of: api, hf, or optional: true")


def test_a_secret_that_is_not_base64_is_one_line(tmp_path: Path) -> None:
    message = _refused(tmp_path, _container(
        'image: ghcr.io/ggml-org/llama.cpp:server\nenvFrom:\n  - secretRef: {name: bad}'),
        files={"k8s/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\ndata:\n  k: not*base64\n"})
    assert message == (f"{tmp_path}/k8s/secret.yaml:5: Secret/bad.data.k: not base64 of UTF-8 text; expected the "
                       "value base64-encoded (or written as stringData)")


# ------------------------------------------------------------------------------------------ GPUs, volumes, ports

@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"])
def test_gpu_limits_of_every_vendor_are_the_cards_the_container_gets(tmp_path: Path, resource: str) -> None:
    read = _read(tmp_path, _container(f'image: ghcr.io/ggml-org/llama.cpp:server\nresources:\n  limits:\n'
                                      f'    {resource}: 2\n    memory: 8Gi'))
    assert read.gpus == Grant((0, 1), f"resources.limits {resource}: 2 (the device plugin picks the cards)",
                              f"{tmp_path}/k8s/app.yaml:12")


def test_no_gpu_limit_and_a_zero_limit_grant_nothing(tmp_path: Path) -> None:
    assert _read(tmp_path, _container("image: ghcr.io/ggml-org/llama.cpp:server")).gpus is None
    assert _read(tmp_path, _container('image: ghcr.io/ggml-org/llama.cpp:server\nresources:\n  limits:\n'
                                      '    nvidia.com/gpu: "0"')).gpus is None


SLICING = """apiVersion: v1
kind: ConfigMap
metadata:
  name: plugin-config
data:
  a100: |-
    version: v1
    sharing:
      TIMESLICING:
        renameByDefault: true
        resources:
          - name: nvidia.com/gpu
            replicas: 3
"""


@pytest.mark.parametrize(("mode", "by_default", "asked", "mps"), [
    ("timeSlicing", "false", "nvidia.com/gpu", False),
    ("timeSlicing", "true", "nvidia.com/gpu.shared", False),  # renameByDefault: NAME.shared
    ("mps", "false", "nvidia.com/gpu", True),
])
def test_a_device_plugin_sharing_config_anywhere_in_the_repository_shares_the_resource_pods_ask_for(
        tmp_path: Path, mode: str, by_default: str, asked: str, mps: bool) -> None:
    config = SLICING.replace("TIMESLICING", mode).replace("renameByDefault: true", f"renameByDefault: {by_default}")
    read = _read(tmp_path, _container(f"image: ghcr.io/ggml-org/llama.cpp:server\nresources:\n  limits:\n"
                                      f"    {asked}: 1"), files={"cluster/gpu-operator/plugin.yaml": config})
    assert read.gpus is not None and read.gpus.indices == (0,)
    assert read.shared is not None and read.shared.mps is mps
    assert read.shared.where == f"{tmp_path}/cluster/gpu-operator/plugin.yaml:6"
    assert read.placed is False


def test_no_sharing_config_and_one_replica_share_nothing(tmp_path: Path) -> None:
    body = "image: ghcr.io/ggml-org/llama.cpp:server\nresources:\n  limits:\n    nvidia.com/gpu: 1"
    for name in ("none", "one"):
        (tmp_path / name).mkdir()
    assert _read(tmp_path / "none", _container(body)).shared is None
    one = SLICING.replace("TIMESLICING", "timeSlicing").replace("replicas: 3", "replicas: 1")
    assert _read(tmp_path / "one", _container(body), files={"plugin.yaml": one}).shared is None


@pytest.mark.parametrize(("value", "indices"), [("all", None), ("0,1", (0, 1))])
def test_nvidia_visible_devices_is_the_grant_over_the_device_plugin(tmp_path: Path, value: str,
                                                                    indices: tuple[int, ...] | None) -> None:
    read = _read(tmp_path, _container(f"image: ghcr.io/ggml-org/llama.cpp:server\nenv:\n"
                                      f"  - {{name: NVIDIA_VISIBLE_DEVICES, value: \"{value}\"}}"))
    assert read.gpus is not None and read.gpus.indices == indices
    assert read.shared is not None and not read.shared.mps


def test_a_node_selector_or_affinity_places_the_pod(tmp_path: Path) -> None:
    placed = POD.replace("spec:\n", "spec:\n  nodeSelector: {kubernetes.io/hostname: gpu-a}\n")
    assert _read(tmp_path, placed + "      image: ghcr.io/ggml-org/llama.cpp:server\n").placed is True


def test_groups_and_device_nodes_a_non_root_pod_holds(tmp_path: Path) -> None:
    pod = POD.replace("spec:\n", "spec:\n  securityContext: {runAsUser: 1000, runAsGroup: 1000, "
                                   "supplementalGroups: [44, 110], fsGroup: 2000}\n")
    read = _read(tmp_path, pod + "      image: ghcr.io/ggml-org/llama.cpp:server-rocm\n"
                                 "      securityContext: {runAsGroup: 3000}\n"
                                 "      resources: {limits: {amd.com/gpu: 1}}\n")
    assert read.run_as is not None
    # the container's runAsGroup over the pod's, then the pod's supplementalGroups and fsGroup
    assert read.run_as.groups == (3000, 44, 110, 2000)
    assert read.device_nodes == ("/dev/kfd", "/dev/dri")


def test_a_group_that_is_no_gid_is_one_line(tmp_path: Path) -> None:
    pod = POD.replace("spec:\n", "spec:\n  securityContext: {supplementalGroups: [render]}\n")
    message = _refused(tmp_path, pod + "      image: ghcr.io/ggml-org/llama.cpp:server\n")
    assert message == (f"{tmp_path}/k8s/app.yaml:7: Pod/engine container main securityContext.supplementalGroups = "
                       "'render'; expected a GID (an integer)")


def test_volumes_give_the_host_path_of_a_host_path_mount_only(tmp_path: Path) -> None:
    manifest = _container('image: ghcr.io/ggml-org/llama.cpp:server\nvolumeMounts:\n'
                          '  - {name: models, mountPath: /models}\n  - {name: cache, mountPath: /cache}\n'
                          '  - {name: tpl, mountPath: /templates}') + (
        "  volumes:\n    - name: models\n      hostPath: {path: /srv/models}\n"
        "    - name: cache\n      persistentVolumeClaim: {claimName: hf-cache}\n"
        "    - name: tpl\n      configMap: {name: templates}\n")
    read = _read(tmp_path, manifest)
    where = f"{tmp_path}/k8s/app.yaml"
    assert read.mounts == (VolumeMount("/models", "hostPath", "/srv/models", f"{where}:11"),
                           VolumeMount("/cache", "persistentVolumeClaim", "hf-cache", f"{where}:12"),
                           VolumeMount("/templates", "configMap", "templates", f"{where}:13"))
    assert read.host_path("/models/a/m.gguf") == "/srv/models/a/m.gguf"
    assert read.host_path("/cache/m.gguf") is None
    assert read.host_path("/elsewhere") is None


def test_a_config_map_volume_holds_its_keys_or_its_items_where_the_repository_defines_it(tmp_path: Path) -> None:
    # core/v1 ConfigMapVolumeSource: without items every key (data and binaryData) is a file; items project only
    # the keys they list, each at its path; a subPath mounts one entry. A ConfigMap no manifest defines: None.
    manifest = _container('image: ghcr.io/ggml-org/llama.cpp:server\nvolumeMounts:\n'
                          '  - {name: all, mountPath: /all}\n  - {name: some, mountPath: /some}\n'
                          '  - {name: all, mountPath: /one.jinja, subPath: a.jinja}\n'
                          '  - {name: elsewhere, mountPath: /elsewhere}') + (
        "  volumes:\n    - name: all\n      configMap: {name: templates}\n"
        "    - name: some\n      configMap:\n        name: templates\n        items:\n"
        "          - {key: a.jinja, path: chat/a.jinja}\n"
        "    - name: elsewhere\n      configMap: {name: made-by-hand}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: templates}\n"
        "data: {a.jinja: x, b.jinja: y}\nbinaryData: {c.bin: AAAA}\n")
    read = _read(tmp_path, manifest)
    assert [(m.target, m.sub, m.keys) for m in read.mounts] == [
        ("/all", None, ("a.jinja", "b.jinja", "c.bin")), ("/some", None, ("chat/a.jinja",)),
        ("/one.jinja", "a.jinja", ("a.jinja", "b.jinja", "c.bin")), ("/elsewhere", None, None)]
    mount, rest = read.mount_of("/some/chat/a.jinja")
    assert (mount.target, str(rest)) == ("/some", "chat/a.jinja")
    assert read.mount_of("/app/model.gguf") is None


def test_a_mount_of_no_volume_is_one_line(tmp_path: Path) -> None:
    message = _refused(tmp_path, _container('image: ghcr.io/ggml-org/llama.cpp:server\nvolumeMounts:\n'
                                            '  - {name: models, mountPath: /models}'))
    assert message == (f"{tmp_path}/k8s/app.yaml:11: Pod/engine container main.volumeMounts[0]: volume 'models' is "
                       "not among the pod's volumes; expected one of: no volume (the API server refuses the pod)")


SERVICE = """---
apiVersion: v1
kind: Service
metadata: {name: front}
spec:
  selector: {app: engine}
  ports:
    - {name: web, port: 80, targetPort: http}
    - {port: 9000}
---
apiVersion: v1
kind: Service
metadata: {name: other}
spec:
  selector: {app: another}
  ports: [{port: 81, targetPort: 8080}]
"""


def test_services_that_select_the_pod_give_the_ports_clients_use(tmp_path: Path) -> None:
    read = _read(tmp_path, _container('image: ghcr.io/ggml-org/llama.cpp:server\nports:\n'
                                      '  - {name: http, containerPort: 8080}') + SERVICE)
    where = f"{tmp_path}/k8s/app.yaml"
    assert read.ports == (("http", 8080, f"{where}:11"),)
    assert read.selected == ("front",)
    assert read.service_ports == (ServicePort("front", 80, 8080, None, f"{where}:19"),
                                  ServicePort("front", 9000, 9000, None, f"{where}:20"))
    assert read.targeting(8080) == (ServicePort("front", 80, 8080, None, f"{where}:19"),)


# ------------------------------------------------------------------------------------------- documents and choice

DEPLOYMENTS = """apiVersion: v1
kind: List
items:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: a}
    spec:
      template:
        spec:
          containers: [{name: x, image: "ghcr.io/ggml-org/llama.cpp:server", args: ["-c", "1"]}]
  - apiVersion: batch/v1
    kind: CronJob
    metadata: {name: b}
    spec:
      jobTemplate:
        spec:
          template:
            spec:
              containers:
                - {name: side, image: "busybox:1", command: ["sleep", "1"]}
                - {name: engine, image: "python:3.12", command: ["python3", "-m", "llama_cpp.server"]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: c}
spec:
  template:
    spec:
      containers: [{name: v, image: "vllm/vllm-openai:v0.13.0"}]
"""


def test_list_workloads_finds_every_container_and_its_program(tmp_path: Path) -> None:
    _, manifest = _fleet(tmp_path, DEPLOYMENTS)
    path = Path(manifest)
    assert list_workloads(path, tmp_path) == (
        WorkloadEntry("Deployment/a", "x", path, 10, "llama-server"),
        WorkloadEntry("CronJob/b", "side", path, 20, "sleep"),
        WorkloadEntry("CronJob/b", "engine", path, 21, "python3", "llama-cpp-python's server (python -m llama_cpp.server)"),
        WorkloadEntry("DaemonSet/c", "v", path, 29, "vllm"),
    )


# A Job's pod template is spec.template, as a Deployment's; a CronJob's is one level down, in the Job it stamps out
# (batch/v1 JobSpec and CronJobSpec, API reference). The same template in either place must read the same container.
POD_TEMPLATE = """template:
  metadata:
    labels: {app: bench}
  spec:
    restartPolicy: Never
    containers:
      - name: engine
        image: ghcr.io/ggml-org/llama.cpp:server-cuda-b6300
        args: ["-m", "/models/m.gguf", "--port", "8080"]
        resources:
          limits: {nvidia.com/gpu: 1}
        volumeMounts: [{name: models, mountPath: /models}]
    volumes:
      - {name: models, hostPath: {path: /srv/models}}
"""
BENCH_SERVICE = """---
apiVersion: v1
kind: Service
metadata: {name: bench}
spec:
  selector: {app: bench}
  ports: [{port: 80, targetPort: 8080}]
"""


def _indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


@pytest.mark.parametrize(("kind", "manifest", "first_line"), [
    ("Job", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bench}\nspec:\n  backoffLimit: 0\n"
     + _indented(POD_TEMPLATE, 2), 12),
    ("CronJob", "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: bench}\nspec:\n  schedule: \"0 3 * * *\"\n"
     "  jobTemplate:\n    spec:\n" + _indented(POD_TEMPLATE, 6), 14),
])
def test_a_job_and_a_cron_job_are_read_from_their_pod_templates(tmp_path: Path, kind: str, manifest: str,
                                                                first_line: int) -> None:
    read = _read(tmp_path, manifest + BENCH_SERVICE)
    where = f"{tmp_path}/k8s/app.yaml"
    assert (read.workload, read.container, read.line) == (f"{kind}/bench", "engine", first_line)
    assert read.argv == ("llama-server", "-m", "/models/m.gguf", "--port", "8080")
    assert read.gpus == Grant((0,), "resources.limits nvidia.com/gpu: 1 (the device plugin picks the cards)",
                              f"{where}:{first_line + 4}")
    assert read.mounts == (VolumeMount("/models", "hostPath", "/srv/models", f"{where}:{first_line + 5}"),)
    # the template's labels, not the Job's own metadata, are what a Service selects
    assert read.selected == ("bench",)
    assert list_workloads(Path(where), tmp_path) == (WorkloadEntry(f"{kind}/bench", "engine", Path(where), first_line,
                                                                   "llama-server"),)


@pytest.mark.parametrize(("kind", "at"), [("CronJob", "spec.jobTemplate.spec.template.spec.containers"),
                                          ("Deployment", "spec.template.spec.containers")])
def test_a_workload_with_no_containers_where_its_kind_keeps_them_is_one_line(tmp_path: Path, kind: str, at: str) -> None:
    # A CronJob written in a Job's shape: its pod template is not where the CronJob keeps it.
    manifest = {"CronJob": f"apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: bench}}\nspec:\n"
                           f"  schedule: \"0 3 * * *\"\n{_indented(POD_TEMPLATE, 2)}",
                "Deployment": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bench}\nspec:\n  replicas: 1\n"}[kind]
    assert _refused(tmp_path, manifest) == (f"{tmp_path}/k8s/app.yaml:1: {kind}/bench: no containers; expected them "
                                            f"at {at}")


def test_several_workloads_need_one_named(tmp_path: Path) -> None:
    assert _refused(tmp_path, DEPLOYMENTS) == (
        f"{tmp_path}/k8s/app.yaml: 3 workloads (Deployment/a, CronJob/b, DaemonSet/c); expected kubernetes_workload = "
        "\"KIND/NAME\" in fleet.toml naming one")
    read = _read(tmp_path, DEPLOYMENTS, extra='kubernetes_workload = "Deployment/a"\n')
    assert read.argv == ("llama-server", "-c", "1")


def test_a_pod_of_several_containers_needs_one_named(tmp_path: Path) -> None:
    extra = 'kubernetes_workload = "CronJob/b"\n'
    assert _refused(tmp_path, DEPLOYMENTS, extra=extra) == (
        f"{tmp_path}/k8s/app.yaml:11: CronJob/b: 2 containers; expected kubernetes_container = one of: side, engine")


def test_llama_cpp_python_is_named_as_no_engine_fleetgate_knows(tmp_path: Path) -> None:
    extra = 'kubernetes_workload = "CronJob/b"\nkubernetes_container = "engine"\n'
    assert _refused(tmp_path, DEPLOYMENTS, extra=extra) == (
        f"{tmp_path}/k8s/app.yaml:21: CronJob/b container engine: runs llama-cpp-python's server (python -m "
        "llama_cpp.server), which is not an engine fleetgate knows; expected llama-server, vllm serve or python -m "
        "vllm.entrypoints.openai.api_server (declare engine = \"openai\" with a serve script for another "
        "OpenAI-compatible server)")


def test_documents_are_each_bounded_and_a_single_document_reader_still_refuses_two(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    documents = compose_yaml_documents(path, "a: 1\n---\n---\nb: 2\n", "x")
    # The empty document between is a null scalar, which no reader takes for an object.
    assert [n.tag for n in documents] == ["tag:yaml.org,2002:map", "tag:yaml.org,2002:null", "tag:yaml.org,2002:map"]
    with pytest.raises(InputError) as caught:
        compose_yaml_documents(path, "a: &x [1]\n---\nb: *x\n", "manifests")
    assert str(caught.value) == (f"{path}:3: not YAML (the alias *x names no anchor before it); expected manifests "
                                 "with &x defined before *x")


# ------------------------------------------------------------------------------------ charts and kustomizations

def test_a_chart_a_helm_release_and_a_kustomization_name_the_command_that_renders_them(tmp_path: Path) -> None:
    (tmp_path / "charts" / "chat" / "templates").mkdir(parents=True)
    for name in ("Chart.yaml", "values.yaml", "templates/deployment.yaml"):
        (tmp_path / "charts" / "chat" / name).write_text("name: chat\n", encoding="utf-8")
    expected_chart = ("belongs to the Helm chart charts/chat, which fleetgate does not render: run `helm template "
                      "RELEASE charts/chat -f charts/chat/values.yaml > rendered.yaml` and declare kubernetes = "
                      "\"rendered.yaml\"")
    for name in ("Chart.yaml", "values.yaml", "templates/deployment.yaml"):
        assert unrendered(tmp_path / "charts" / "chat" / name, tmp_path) == f"charts/chat/{name} {expected_chart}"
    (tmp_path / "flux").mkdir()
    (tmp_path / "flux" / "release.yaml").write_text(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: vllm}\nspec:\n  chart:\n"
        "    spec: {chart: vllm-stack, sourceRef: {kind: HelmRepository, name: vllm}}\n", encoding="utf-8")
    assert unrendered(tmp_path / "flux" / "release.yaml", tmp_path) == (
        "flux/release.yaml:1: HelmRelease vllm is rendered by Flux from chart vllm-stack of HelmRepository vllm (URL: "
        "HelmRepository vllm's spec.url), which fleetgate does not fetch or render: run `helm template vllm "
        "vllm-stack --repo URL -f values.yaml > rendered.yaml` (the release's spec.values as values.yaml) and "
        "declare kubernetes = \"rendered.yaml\"")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text("resources: [../base]\n", encoding="utf-8")
    assert unrendered(tmp_path / "overlay" / "kustomization.yaml", tmp_path) == (
        "overlay/kustomization.yaml is a kustomization, which fleetgate does not build: run `kustomize build overlay "
        "> rendered.yaml` (or `kubectl kustomize overlay`) and declare kubernetes = \"rendered.yaml\"")
    assert unrendered(tmp_path / "charts" / "chat" / "templates" / "deployment.yaml", tmp_path) is not None
    (tmp_path / "plain.yaml").write_text(POD, encoding="utf-8")
    assert unrendered(tmp_path / "plain.yaml", tmp_path) is None


HELM_RELEASE = ("apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: chat, namespace: llm}\n"
                "spec:\n")


@pytest.mark.parametrize(("spec", "source", "command"), [
    # an OCI HelmRepository: the chart is a reference under its URL
    ("  chart:\n    spec: {chart: llama-cpp, version: 1.2.0, sourceRef: {kind: HelmRepository, name: oci}}\n",
     "kind: HelmRepository\nmetadata: {name: oci}\nspec: {type: oci, url: 'oci://ghcr.io/example/charts'}\n",
     "from chart llama-cpp of HelmRepository oci, which fleetgate does not fetch or render: run `helm template chat "
     "oci://ghcr.io/example/charts/llama-cpp --version '1.2.0' --namespace llm"),
    # a chart kept in a Git repository: its path there
    ("  chart:\n    spec: {chart: ./charts/llama, sourceRef: {kind: GitRepository, name: flux-system}}\n", None,
     "from the chart at ./charts/llama in GitRepository flux-system, which fleetgate does not fetch or render: run "
     "`helm template chat ./charts/llama --namespace llm"),
    # chartRef to an OCIRepository; releaseName and targetNamespace as Flux uses them
    ("  releaseName: qwen\n  targetNamespace: models\n  chartRef: {kind: OCIRepository, name: llama}\n",
     "kind: OCIRepository\nmetadata: {name: llama}\nspec: {url: 'oci://ghcr.io/example/llama', ref: {tag: 1.0.0}}\n",
     "from the chart OCIRepository llama fetches, which fleetgate does not fetch or render: run `helm template qwen "
     "oci://ghcr.io/example/llama --version '1.0.0' --namespace models"),
    # no releaseName: Flux names the release targetNamespace-name; values from a ConfigMap as well
    ("  targetNamespace: models\n  chart:\n    spec: {chart: llama-cpp, sourceRef: {kind: HelmRepository, name: x}}\n"
     "  valuesFrom: [{kind: ConfigMap, name: chat-values}]\n", None,
     "from chart llama-cpp of HelmRepository x (URL: HelmRepository x's spec.url), which fleetgate does not fetch or "
     "render: run `helm template models-chat llama-cpp --repo URL --namespace models"),
], ids=["oci-repository", "git-repository", "chart-ref", "target-namespace-values-from"])
def test_a_helm_release_names_the_helm_template_line_of_its_source(tmp_path: Path, spec: str, source: str | None,
                                                                     command: str) -> None:
    (tmp_path / "flux").mkdir()
    (tmp_path / "flux" / "release.yaml").write_text(HELM_RELEASE + spec, encoding="utf-8")
    if source is not None:
        (tmp_path / "flux" / "source.yaml").write_text("apiVersion: source.toolkit.fluxcd.io/v1\n" + source,
                                                       encoding="utf-8")
    values = "the release's spec.values as values.yaml"
    if "valuesFrom" in spec:
        values += ", under the ConfigMap and Secret values its spec.valuesFrom names, as Flux merges them"
    assert unrendered(tmp_path / "flux" / "release.yaml", tmp_path) == (
        f"flux/release.yaml:1: HelmRelease chat is rendered by Flux {command} -f values.yaml > rendered.yaml` "
        f"({values}) and declare kubernetes = \"rendered.yaml\"")


def test_a_fleet_service_naming_a_chart_is_told_how_to_render_it(tmp_path: Path) -> None:
    toml, _ = _fleet(tmp_path, POD, files={"k8s/Chart.yaml": "apiVersion: v2\nname: app\n"})
    fleet = load_fleet(toml)
    with pytest.raises(InputError) as caught:
        render(fleet, fleet.services["s"])
    assert str(caught.value) == (
        f"{tmp_path}/k8s/app.yaml: k8s/app.yaml belongs to the Helm chart k8s, which fleetgate does not render: run "
        "`helm template RELEASE k8s -f k8s/values.yaml > rendered.yaml` and declare kubernetes = \"rendered.yaml\"")
