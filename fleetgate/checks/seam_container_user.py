"""An engine in a container does not run as root (issue 32): the container counterpart of ``unit-user``.

Who the engine runs as is what its start file says, else the image's ``USER``:

- compose ``user:``, ``docker run --user``/``-u``, Kubernetes ``securityContext.runAsUser`` (the container's over
  the pod's); ``root``, ``0`` or ``0:GROUP`` is root;
- nothing given: the image's ``USER``. llama.cpp's server images (.devops/*.Dockerfile, target ``server``) and vLLM's
  ``vllm/vllm-openai`` set none, so their engine runs as root (vLLM's own docs mount the model cache at
  ``/root/.cache/huggingface``). Another image's ``USER`` is not known offline: not judged, naming what to declare.
- Kubernetes ``runAsNonRoot: true`` with no ``runAsUser`` on an image that runs as root is refused by the kubelet
  ("container has runAsNonRoot and image will run as root"): the pod never starts.

A root Docker daemon maps the container's root to the host's; rootless podman maps it to the user who runs it, so a
``podman run`` from a user unit (or one with ``User=``), and a Quadlet (a rootless container unit here, as
``unit-user`` reads it), are not judged here. Security linters of images and manifests hold the same by default
(hadolint DL3002, kube-linter ``run-as-non-root``).

A non-root user given an AMD or Vulkan GPU as device nodes (``/dev/kfd``, ``/dev/dri``) must hold the group that owns
them: the container sees them with the host's owner and mode (``root:render`` or ``root:video``, 0660), so without
the group the ROCm runtime cannot open ``/dev/kfd`` ("Unable to open /dev/kfd read-write: Permission denied") and the
Vulkan loader lists no device; llama.cpp then runs on the CPU without a word. ROCm's container docs add ``video`` and,
on distributions whose udev rules give the nodes to ``render``, ``render`` (``--group-add``, compose ``group_add:``,
Kubernetes ``supplementalGroups``). A group name resolves in the image's /etc/group; a GID is the host's, and the
``render`` GID differs between distributions, so a GID is judged only against the host's declared ``device_gids``.
Root needs no group (it is ``root``/``image-root``'s finding).
"""

from __future__ import annotations

from fleetgate.checks import NotJudged, service_seam
from fleetgate.checks.seam_units import user_unit
from fleetgate.render.rendered import RenderedService
from fleetgate.render.start import Compose, Kubernetes, container_run, quadlet_of
from fleetgate.sources.docker_run import engine_of_image

__all__ = ["CONTAINER_USER"]

CONTAINER_USER = "container-user"


def _root(user: str) -> bool:
    name = user.strip().split(":", 1)[0]
    return name in ("root", "0")


def _rootless_podman(config: RenderedService) -> bool:
    run = container_run(config.rendered.start)
    if run is None or run.client != "podman":
        return False
    unit = config.rendered.unit
    if unit is None:
        return True  # a script run by hand: whoever runs it, not known to be root

    user = unit.last("Service", "User")
    return user_unit(unit) or (user is not None and user.value.strip() not in ("", "root", "0"))


_MAPPED = ("auto", "keep-id", "nomap")
"""``UserNS=`` modes that map the container's root to an unprivileged ID of the host (podman-run(1), ``--userns``)."""


def _not_a_container(config: RenderedService) -> str | None:
    start = config.rendered.start
    if quadlet_of(start) is not None:
        return _not_rootful(config)
    if not (isinstance(start, Compose | Kubernetes) and start.read is not None) and container_run(start) is None:
        return f"{config.name} does not run in a container (unit-user holds the user of a systemd unit)"
    if _rootless_podman(config):
        return (f"{config.name} runs rootless podman (a user unit, or one with User=): the container's root is that "
                "user, not the host's")
    return None


def _not_rootful(config: RenderedService) -> str | None:
    """Why a Quadlet's container root is not the host's: a user's manager runs it, systemd runs podman as a
    ``[Service]`` ``User=`` (rootless podman, which podman's generator warns it does not support), or ``UserNS=``
    maps it."""
    quadlet = quadlet_of(config.rendered.start)
    assert quadlet is not None
    if quadlet.rootful is None:
        return (f"{config.name} is a rootless Quadlet: the container's root is the user whose manager starts it "
                "(unit-user's reading; a Quadlet the system manager runs is one deploy_root installs under "
                "/etc/containers/systemd/, and its container's user is then judged)")
    unit = config.rendered.unit
    manager_user = unit.last("Service", "User") if unit is not None else None
    if manager_user is not None and manager_user.value.strip() not in ("", "root", "0"):
        return (f"{config.name}'s rootful Quadlet sets User={manager_user.value} in [Service] ({manager_user.where}): "
                "systemd runs podman as that user, rootless, so the container's root is that user, not the host's "
                "(podman's Quadlet generator warns that User= in [Service] is not supported)")
    if quadlet.userns is not None and quadlet.userns.value.strip().split(":", 1)[0] in _MAPPED:
        return (f"{config.name}'s Quadlet sets UserNS={quadlet.userns.value} ({quadlet.userns.where}): the "
                "container's root is an unprivileged ID of the host")
    return None


@service_seam(
    cites=(),
    summary="an engine in a container (compose, docker run, Kubernetes) runs as an unprivileged user, and a pod that "
            "asks for non-root can start",
    requires=_not_a_container,
    codes={
        "root": "the start file runs the container as root (`user: root`/`0`, `--user 0`, `runAsUser: 0`)",
        "image-root": ("no user given, and the image runs as root (llama.cpp's server images and `vllm/vllm-openai` "
                       "set no `USER`)"),
        "no-device-group": ("a non-root container user given `/dev/kfd` or `/dev/dri` is in neither `video` nor "
                            "`render` (nor a GID the host's device nodes belong to): the ROCm runtime and the Vulkan "
                            "loader cannot open them, and the engine runs on the CPU"),
        "non-root-refused": ("Kubernetes `runAsNonRoot: true` without `runAsUser` on an image that runs as root: the "
                             "kubelet refuses to start the container"),
    },
)
def container_user(config: RenderedService) -> None:
    rendered = config.rendered
    start = rendered.start
    compose = start.read if isinstance(start, Compose) else None
    pod = start.read if isinstance(start, Kubernetes) else None
    run, quadlet = container_run(start), quadlet_of(start)
    image = (compose.image if compose is not None else pod.image if pod is not None
             else run.image if run is not None else quadlet.image if quadlet is not None else None) or ""
    image_where = (compose.image_where if compose is not None else f"{pod.path}:{pod.line}" if pod is not None
                   else quadlet.image_where if quadlet is not None and run is None else str(rendered.script))
    how = ("compose user:" if compose is not None else "securityContext.runAsUser" if pod is not None
           else f"{run.client} run --user" if run is not None else "User= in [Container]")
    given: tuple[str, str] | None = None
    if compose is not None and compose.user is not None:
        given = compose.user
    elif pod is not None and pod.run_as is not None and pod.run_as.user is not None:
        given = (str(pod.run_as.user), pod.run_as.user_where)
    elif run is not None and run.user is not None:
        given = (run.user, str(rendered.script))
    elif run is None and quadlet is not None and quadlet.user is not None:
        group = f":{quadlet.group.value.strip()}" if quadlet.group is not None else ""
        given = (quadlet.user.value.strip() + group, quadlet.user.where)
    if given is not None:
        if _root(given[0]):
            raise container_user.fail(
                config, "root",
                where=given[1],
                observed=f"{how} {given[0]}: the engine runs as root in the container"
                         + ("" if pod is not None else _HOST_ROOT[run is None and quadlet is not None]),
                expected="an unprivileged UID (a user the image has, or any UID the model files are readable by)",
                fix=f"set {how} to an unprivileged {'UID' if pod is not None else 'UID:GID'} that can read the model "
                    "files",
            )
        _device_groups(config, given[0])
        return
    image_root = engine_of_image(image) in ("llama.cpp", "vllm")
    if pod is not None and pod.run_as is not None and pod.run_as.non_root:
        if image_root:
            raise container_user.fail(
                config, "non-root-refused",
                where=pod.run_as.non_root_where,
                observed=(f"runAsNonRoot: true, no runAsUser, and {image} runs as root (its Dockerfile sets no USER): "
                          "the kubelet refuses the container ('container has runAsNonRoot and image will run as root')"),
                expected="runAsUser: an unprivileged UID beside runAsNonRoot: true",
                fix="add securityContext.runAsUser (and runAsGroup, fsGroup for the model volume) with an unprivileged UID",
            )
        return  # the kubelet starts it only as non-root
    if not image_root:
        raise NotJudged(f"{config.name}'s image {image or '(none)'} sets a USER fleetgate cannot read offline, and "
                        f"nothing sets the user: declare it ({how} UID:GID)")
    raise container_user.fail(
        config, "image-root",
        where=image_where,
        observed=(f"nothing sets the user, and {image} runs as root (its Dockerfile sets no USER): the engine runs as "
                  "root" + ("" if pod is not None else _HOST_ROOT[run is None and quadlet is not None])),
        expected=f"the engine run as an unprivileged user ({how} {'UID' if pod is not None else 'UID:GID'})",
        fix=(f"set {how} to an unprivileged {'UID (runAsGroup: GID)' if pod is not None else 'UID:GID'} that can read "
             "the model files"
             + (" (and runAsNonRoot: true)" if pod is not None else "")),
    )


_HOST_ROOT = {False: ", which a root Docker daemon makes the host's root", True: ", which rootful podman makes the host's root"}

DEVICE_GROUPS = ("video", "render")
"""The groups ROCm's install and container docs put a GPU user in: ``video`` owns the nodes on older distributions,
``render`` on those whose udev rules give it /dev/kfd and the render nodes (Ubuntu 20.04 on)."""


def _device_groups(config: RenderedService, user: str) -> None:
    """A non-root user given GPU device nodes holds a group that may open them."""
    __tracebackhide__ = True
    rendered = config.rendered
    start = rendered.start
    compose = start.read if isinstance(start, Compose) else None
    pod = start.read if isinstance(start, Kubernetes) else None
    run, quadlet = container_run(start), quadlet_of(start)
    _, _, primary = user.partition(":")
    if compose is not None:
        nodes, groups, how = compose.device_nodes, [*compose.groups], "group_add:"
        where = compose.groups_where or (compose.user[1] if compose.user else f"{compose.path}:{compose.line}")
    elif pod is not None:
        assert pod.run_as is not None
        nodes, groups, how = pod.device_nodes, [str(g) for g in pod.run_as.groups], "securityContext.supplementalGroups"
        where = pod.run_as.groups_where
    elif run is not None:
        nodes = tuple(d.split(":", 1)[0] for d in run.devices
                      if d.split(":", 1)[0] == "/dev/kfd" or d.split(":", 1)[0].startswith("/dev/dri"))
        groups, how, where = [*run.groups], f"{run.client} run --group-add", str(rendered.script)
    elif quadlet is not None:
        nodes = tuple(d.split(":", 1)[0] for d in quadlet.devices
                      if d.split(":", 1)[0] == "/dev/kfd" or d.split(":", 1)[0].startswith("/dev/dri"))
        # the User= line that makes the engine non-root (a rootful Quadlet reaches here only through it)
        groups, how = [*quadlet.groups], "GroupAdd= in [Container]"
        where = quadlet.user.where if quadlet.user is not None else str(quadlet.path)
    else:
        return
    if not nodes:
        return
    if primary.strip():
        groups.append(primary.strip())
    names = {g for g in groups if not g.isdigit()}
    if names & {*DEVICE_GROUPS, "keep-groups"}:
        return  # podman's keep-groups hands the container the caller's own groups
    gids = sorted({int(g) for g in groups if g.isdigit()})
    declared = config.host.device_gids
    if gids and declared is None:
        raise NotJudged(f"{config.name} runs as {user} with {', '.join(nodes)} and GID {', '.join(map(str, gids))}: "
                        f"whether that GID owns the device nodes is the host's (render's GID differs between "
                        f"distributions): declare hosts.{config.host.name}.device_gids (`stat -c %g /dev/kfd "
                        "/dev/dri/renderD128` on the host)")
    if declared is not None and set(gids) & declared:
        return
    raise container_user.fail(
        config, "no-device-group",
        where=where,
        observed=(f"the engine runs as {user} and is given {', '.join(nodes)}, in "
                  + (f"group(s) {', '.join(groups)}" if groups else "no group that owns them")
                  + ": the ROCm runtime / Vulkan loader cannot open the nodes and the engine runs on the CPU"),
        details=[f"host {config.host.name}'s device nodes belong to GID(s) "
                 f"{', '.join(map(str, sorted(declared)))} (device_gids)"] if declared is not None else [],
        expected=("the user in the group that owns /dev/kfd and /dev/dri: " +
                  (f"one of GID {', '.join(map(str, sorted(declared)))}" if declared is not None
                   else "video or render (ROCm's docs)")),
        fix=(f"add the group: {how} " + ("[GID of render on the node]" if pod is not None else "[video, render]")
             + (f" (on {config.host.name}: {', '.join(map(str, sorted(declared)))})" if declared is not None else "")),
    )
