"""A service as it really runs (``RenderedService``): fleet entry + rendered argv/env + the engine's typed config +
profiles; and one attempt to render it (``ServiceAttempt``), which holds the error when it did not render.

Seams and the contract read this; nothing here re-parses a file the renderer already read.
"""

from __future__ import annotations

import contextlib
import copyreg
import io
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from fleetgate.chat_template import ChatTemplate, find_template
from fleetgate.engines.argv import FlagUse
from fleetgate.engines.llama_builds import image_build
from fleetgate.engines.llamacpp import LlamaServerConfig, llama_table_build, parse_llama_server
from fleetgate.engines.vllm import VllmConfig, image_release, is_vllm_image, parse_vllm
from fleetgate.envfile import EnvEntry, parse_env_file
from fleetgate.errors import InputError
from fleetgate.failure import Deferred
from fleetgate.fleet import EngineBuild, Fleet, Host, Service
from fleetgate.models.profile import Profile, load_profile
from fleetgate.render.dispatch import RenderRequest, render, render_many
from fleetgate.render.inputs import unit_environment
from fleetgate.render.start import Compose, InlineScript, Kubernetes, QuadletExec, ServeScript
from fleetgate.render.types import Origin, Rendered, RenderRefused, map_to_repo
from fleetgate.sandbox import SandboxUnavailable, counting
from fleetgate.sources.docker_run import engine_of_image
from fleetgate.units import Unit

__all__ = [
    "Probe",
    "RenderedService",
    "Renderer",
    "ServiceAttempt",
    "attempt_of",
    "attempt_service",
    "attempt_services",
    "load_service",
    "run_attempt",
    "run_attempts",
    "share_attempts",
    "unshare_attempts",
]


class Renderer:
    """One run's renderer: every render the run asks for (each service's own, and what a check probes: a service with
    variables overridden or unset, with positional arguments, or another script of the service's run the same way)
    made once and counted; what can be known ahead (the services' own renders, the probes checks declare) made side by
    side in sandbox sessions (``render_many``). A check never starts the sandbox itself: it asks its subject (``RenderedService.probe``),
    and the run that made the subject answers from here, so what the seams cost is seen in one place.

    Not carried to another process (an xdist worker gets a renderer of its own, empty): what it holds is this
    process's answers, and the counts are this process's. It keeps the last ``KEEP`` answers: a seams run asks no
    render twice today (``benchmarks/seam_runs.py``), and keeping every probe's trace grew a 200-service run by a
    third of its memory; an answer made ahead is kept until it is asked for once (docs/speed.md, "Sandbox
    sessions": the same growth, the price of making them together)."""

    KEEP = 64
    PLAN_ALL = 64

    def __init__(self, planner: Callable[[RenderedService, object], Sequence[Probe]] | None = None,
                 scope: Callable[[], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._made: OrderedDict[_Key, tuple[Fleet, Rendered | RenderRefused]] = OrderedDict()
        self._ahead: dict[_Key, tuple[Fleet, Rendered | Exception]] = {}
        self._planned: dict[tuple[object, int, str], threading.Event] = {}
        self._configs: list[RenderedService] = []
        self._plan_all: bool | None = None
        self.planner = planner
        """The probes the run's checks will ask of a service (``fleetgate.runner.planned_probes``): every service's made
        together, in sandbox sessions of several runs, when the first probe is asked for."""
        self.scope = scope
        """What a plan is made for (``fleetgate.runner.plan_scope``: the check running). The first probe plans every
        service's probes of every scope when they are at most ``PLAN_ALL`` runs (a small fleet: few sessions), else
        those of its scope alone, for the next services until about ``PLAN_ALL`` runs (a large one: that many answers
        wait to be asked at a time)."""
        self.renders = 0
        """Renders this renderer made (each one or more sandboxed runs, or none for a shape read as data)."""
        self.reused = 0
        """Asks answered with a render made before for another ask (a render made ahead for its ask is not one)."""
        self.runs = 0
        """Sandbox sessions its renders made (a render's retries and an env file read by bash included): a session
        holds one run, or several runs made side by side (``render_many``), each in namespaces of its own."""

    def __reduce__(self) -> tuple[type[Renderer], tuple[()]]:
        return (Renderer, ())

    def _tally(self) -> None:
        with self._lock:
            self.runs += 1

    def prefetch(self, fleet: Fleet, probes: Sequence[tuple[Service, Probe]]) -> None:
        """Render ``probes`` of ``fleet`` together (``render_many``: few sandbox sessions), to answer the asks that
        follow: each answer is kept until it is asked for once, then as any other."""
        wanted: dict[_Key, RenderRequest] = {}
        with self._lock:
            for service, probe in probes:
                key = _key(fleet, service, probe.overrides, probe.args)
                kept = self._made.get(key)
                if (kept is None or kept[0] is not fleet) and key not in self._ahead:
                    wanted[key] = RenderRequest(service, probe.overrides, probe.args)
        if not wanted:
            return
        with counting(self._tally):
            made = render_many(fleet, list(wanted.values()))
        with self._lock:
            for key, one in zip(wanted, made, strict=True):
                self.renders += 1
                self._ahead[key] = (fleet, one)

    def expect(self, configs: Sequence[RenderedService]) -> None:
        """Services whose checks will ask for probes: planned together with the first one asked (``_plan``)."""
        with self._lock:
            self._configs.extend(configs)

    def _plan(self, config: RenderedService, extra: Sequence[Probe] = ()) -> None:
        """The first probe in a scope (the running check): every probe the planner says will be asked of every service
        this renderer expects, made together in few sandbox sessions (with ``extra``, a probe of ``config`` asked now
        that no check could declare ahead: where a failing flag's value comes from)."""
        planner = self.planner
        if planner is None or getattr(_PLANNING, "active", False):
            return  # a planner that probes (through a check's requires=) asks as any check does
        scope = self.scope() if self.scope is not None else None
        with self._lock:
            planned = self._planned.get((None, *_mark(config))) or self._planned.get((scope, *_mark(config)))
            batch: list[RenderedService] = []
            if planned is None:
                planned = threading.Event()
                for one in [config, *self._configs]:
                    marks = [(None, *_mark(one)), (scope, *_mark(one))]
                    if one.fleet is config.fleet and not any(m in self._planned for m in marks):
                        self._planned[marks[1]] = planned
                        batch.append(one)
        if not batch:
            planned.wait()  # the probes another thread is making (payload-defaults asks side by side)
            return
        _PLANNING.active = True
        try:
            probes = self._planned_probes(planner, batch, None) if self._plan_all is not False else []
            if self._plan_all is not False and len(probes) <= self.PLAN_ALL:
                with self._lock:
                    for one in batch:
                        self._planned[(None, *_mark(one))] = planned
            else:
                self._plan_all = False  # asked once: the next scopes plan their own probes without counting all again
                probes = []
                for i, one in enumerate(batch):
                    if len(probes) >= self.PLAN_ALL:
                        # the services after these are planned when the first of them is asked: a plan holds about
                        # PLAN_ALL answers at a time (whole sessions), not a whole check's over a large fleet
                        with self._lock:
                            for rest in batch[i:]:
                                self._planned.pop((scope, *_mark(rest)), None)
                        break
                    probes += self._planned_probes(planner, [one], scope)
            probes += [(config.service, probe) for probe in extra]
            self.prefetch(config.fleet, probes)
        finally:
            _PLANNING.active = False
            planned.set()

    @staticmethod
    def _planned_probes(planner: Callable[[RenderedService, object], Sequence[Probe]], batch: Sequence[RenderedService],
                        scope: object) -> list[tuple[Service, Probe]]:
        probes: list[tuple[Service, Probe]] = []
        for one in batch:
            try:
                probes += [(probe.service or one.service, probe) for probe in planner(one, scope)]
            except Exception:  # a plan is only ahead of time: the checks ask for themselves all the same
                continue
        return probes

    def probe(self, fleet: Fleet, service: Service, overrides: Mapping[str, str | None] | None = None,
              args: tuple[str, ...] = ()) -> Rendered:
        """``service`` rendered with ``overrides`` (None unsets a variable) and ``args``; a refusal is raised again as
        the same ``RenderRefused`` each time it is asked for."""
        key = _key(fleet, service, overrides, args)
        with self._lock:
            kept = self._made.get(key)
            # the fleet itself, not only its id: an id is reused once its fleet is gone
            made = kept[1] if kept is not None and kept[0] is fleet else None
            if made is not None:
                self.reused += 1
                self._made.move_to_end(key)
            ahead = self._ahead.pop(key, None)
        if made is None and ahead is not None and ahead[0] is fleet:
            if not isinstance(ahead[1], (Rendered, RenderRefused)):
                raise ahead[1]  # what render() raised (a broken file, no sandbox): kept for no second ask, as before
            made = ahead[1]
            self._keep(key, fleet, made)
        if made is None:
            try:
                with counting(self._tally):
                    made = render(fleet, service, overrides=overrides, args=args)
            except RenderRefused as refused:
                made = refused
            with self._lock:
                self.renders += 1
            self._keep(key, fleet, made)
        if isinstance(made, RenderRefused):
            raise made
        return made

    def _keep(self, key: _Key, fleet: Fleet, made: Rendered | RenderRefused) -> None:
        with self._lock:
            self._made[key] = (fleet, made)
            while len(self._made) > self.KEEP:
                self._made.popitem(last=False)


_Key = tuple[int, str, tuple[tuple[str, str | None], ...], tuple[str, ...]]
_PLANNING = threading.local()


def _mark(config: RenderedService) -> tuple[int, str]:
    return (id(config.fleet), repr(config.service))


def _key(fleet: Fleet, service: Service, overrides: Mapping[str, str | None] | None, args: tuple[str, ...]) -> _Key:
    # A service is a frozen dataclass with dicts in it: its repr is its value.
    return (id(fleet), repr(service), tuple(sorted((overrides or {}).items())), tuple(args))


@dataclass(frozen=True)
class Probe:
    """A render a check asks of its subject (``RenderedService.probe``): ``overrides`` replace variables (None unsets
    one), ``args`` are the script's arguments, ``service`` another start of the service (a bench, build or deploy
    script run as the service's). What a check declares it will ask (``probes=`` on its declaration)."""

    overrides: Mapping[str, str | None] | None = None
    args: tuple[str, ...] = ()
    service: Service | None = None


@dataclass(frozen=True)
class RenderedService:
    fleet: Fleet
    service: Service
    rendered: Rendered
    llama: LlamaServerConfig | None
    vllm: VllmConfig | None
    profile: Profile | None
    draft_profile: Profile | None
    _where_cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    renderer: Renderer = field(default_factory=Renderer, compare=False, repr=False)
    """The run's renderer, which made this render and answers the checks' probes."""

    def probe(self, overrides: Mapping[str, str | None] | None = None, *, args: tuple[str, ...] = (),
              service: Service | None = None) -> Rendered:
        """This service rendered again as a check asks: ``overrides`` replaces variables (None unsets one), ``args``
        are the script's positional arguments, ``service`` another start of it (a bench harness, the build or
        deploy script run as this service's). Raises ``RenderRefused`` when the script refuses. Made by the run's
        renderer: asked twice, rendered once."""
        self.renderer._plan(self)
        return self.renderer.probe(self.fleet, service or self.service, overrides, args)

    def systemd_environment(self, unit: Unit) -> dict[str, Origin]:
        """The variables systemd itself expands in ``unit``'s lines (its ``[Service]`` Environment= and
        EnvironmentFile=), read as systemd reads them; ``InputError`` for an env file outside the repository."""
        return unit_environment(self.fleet, self.service, unit)

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def host(self) -> Host:
        return self.fleet.host_of(self.service)

    @cached_property
    def variables(self) -> Mapping[str, Origin]:
        """Every variable the script saw from a file: the unit's environment and the files it sourced."""
        found = dict(self.rendered.inputs)
        for sourced in self.rendered.sourced:
            if not sourced.inside_repo:
                continue
            local = map_to_repo(self.fleet, sourced.target)
            if local is None or not local.is_file():
                continue
            for name, entry in parse_env_file(local, "bash").items():
                found[name] = _origin(entry)
        return found

    @cached_property
    def chat_template(self) -> ChatTemplate | None:
        """The chat template its llama-server will use (``fleetgate.chat_template``), read once: the repository's
        template file or the model's GGUF header on this machine; None for another engine."""
        return find_template(self.llama, self.fleet, self.host_path)

    def host_path(self, path: str) -> str:
        """The host path the engine's ``path`` is: through the container's bind mounts where a ``docker run``, a
        compose service or a Quadlet's ``Exec=`` starts the engine (``-v /srv/models:/models``), else the path itself."""
        mapped: str | None = None
        match self.rendered.start:
            case ServeScript(container=run) | InlineScript(container=run) if run is not None:
                mapped = run.host_path(path)
            case Kubernetes(read=read) | Compose(read=read) | QuadletExec(read=read) if read is not None:
                mapped = read.host_path(path)
        return mapped if mapped is not None else path

    def where_variable(self, name: str) -> str:
        origin = self.variables.get(name)
        return origin.where if origin else self._start_where()

    def _start_where(self) -> str:
        """Where the argv is written: the serve script, a compose service's command: line, a Quadlet's Exec=."""
        match self.rendered.start:
            case Compose(read=read) | Kubernetes(read=read) if read is not None:
                return read.command_where
            case QuadletExec(read=read) if read is not None and read.exec_setting is not None:
                return read.exec_setting.where
        return str(self.rendered.script)

    def where_flag(self, use: FlagUse | None) -> Deferred:
        """file:line of the variable that produced a flag's value (found by re-rendering), else the script.

        Deferred: the re-renders run only when a failure (or a caller) formats the value, never for a
        check that passes.
        """
        if use is None:
            return Deferred(self._start_where)
        if use.index is None:
            flag = use.flag
            return Deferred(lambda: self.where_variable(flag))
        key = f"{use.dest}@{use.index}"

        def find() -> str:
            if key not in self._where_cache:
                self._where_cache[key] = self._find_flag_origin(use)
            return self._where_cache[key]

        return Deferred(find)

    def _find_flag_origin(self, use: FlagUse) -> str:
        assert use.index is not None
        value = use.value or ""
        candidates = [o for o in self.variables.values() if o.value and o.value in value]
        # The variable whose whole value is the flag's value is the likeliest; try it first.
        candidates.sort(key=lambda o: (o.value != value, -len(o.value)))
        # The likeliest one rides with the service's planned probes when none was asked for yet (one session).
        self.renderer._plan(self, [Probe({o.name: f"fleetgate-probe-{o.name.lower()}"}) for o in candidates[:1]])
        for origin in candidates:
            sentinel = f"fleetgate-probe-{origin.name.lower()}"
            try:
                probe = self.probe({origin.name: sentinel})
            except Exception:
                continue
            if _value_at(probe.argv, use.index, sentinel):
                return f"{origin.where} ({origin.name})"
        return self._start_where()


def _value_at(argv: tuple[str, ...], flag_index: int, sentinel: str) -> bool:
    """Whether the flag at ``flag_index`` carries ``sentinel`` (``--flag value`` or ``--flag=value``)."""
    if flag_index < len(argv) and "=" in argv[flag_index] and sentinel in argv[flag_index]:
        return True
    return flag_index + 1 < len(argv) and sentinel in argv[flag_index + 1]


def _origin(entry: EnvEntry) -> Origin:
    return Origin(entry.name, entry.value, entry.where, "sourced")


def _with_image_build(service: Service, rendered: Rendered) -> Service:
    """A service whose script runs an engine image (``docker run ghcr.io/ggml-org/llama.cpp:server-cuda-b6300``) runs
    the build that image pins, as fleet.toml's ``engine_build = { image = ... }`` would say it; a declared
    engine_build wins. A Kubernetes container runs its image's build as well (its entrypoint may be replaced by
    ``command:``), a Quadlet whose ``Exec=`` is an engine image's arguments that image's build, and a Quadlet that runs
    vLLM's own image the release its tag names."""
    if service.engine_build is not None:
        return service
    image: str | None = None
    match rendered.start:
        case ServeScript(container=run) | InlineScript(container=run) if run is not None:
            image = run.image if run.engine == service.engine else None
        case Kubernetes(read=read) | QuadletExec(read=read) if read is not None and read.image is not None:
            image = read.image if engine_of_image(read.image) == service.engine else None
    if image is None:
        unit = rendered.unit
        declared = unit.last("Container", "Image") if unit is not None and unit.kind == "quadlet" else None
        if service.engine == "vllm" and declared is not None and is_vllm_image(declared.value):
            # a Quadlet that runs vLLM's own image (its Exec= a serve script or the image's entrypoint)
            return replace(service, engine_build=EngineBuild(fork="mainline", number=None,
                                                             version=image_release(declared.value), image=declared.value))
        return service
    if service.engine == "llama.cpp":
        build = EngineBuild(fork="mainline", number=image_build(image), image=image)
    else:
        build = EngineBuild(fork="mainline", number=None, version=image_release(image), image=image)
    return replace(service, engine_build=build)


def load_service(fleet: Fleet, service: Service, renderer: Renderer | None = None) -> RenderedService:
    """``service`` rendered and read; ``renderer`` is the run's (a fresh one when the caller has no run)."""
    renderer = renderer if renderer is not None else Renderer()
    rendered = renderer.probe(fleet, service)
    service = _with_image_build(service, rendered)
    start = rendered.start
    if isinstance(start, Compose) and start.read is not None and start.read.engine_build is not None \
            and service.engine_build is None:
        service = replace(service, engine_build=start.read.engine_build)  # the image tag pins the build
    llama = (parse_llama_server(rendered.argv, rendered.env, build=llama_table_build(service))
             if service.engine == "llama.cpp" else None)
    vllm = parse_vllm(rendered.argv) if service.engine == "vllm" else None
    config = RenderedService(
        fleet=fleet,
        service=service,
        rendered=rendered,
        llama=llama,
        vllm=vllm,
        profile=load_profile(service.profile) if service.profile else None,
        draft_profile=load_profile(service.draft_profile) if service.draft_profile else None,
        renderer=renderer,
    )
    renderer.expect([config])
    return config


@dataclass(frozen=True)
class ServiceAttempt:
    """A service and what came of rendering it: its config, why the serve script refused, or which of its
    files could not be read the way its consumer reads it (one line)."""

    fleet: Fleet
    service: Service
    config: RenderedService | None
    refused: RenderRefused | None
    broken: InputError | None = None

    @property
    def name(self) -> str:
        return self.service.name


def attempt_service(fleet: Fleet, service: Service, renderer: Renderer | None = None) -> ServiceAttempt:
    """Render a service; a serve script that refuses is a finding, and so is a file of this service that cannot
    be read (a malformed unit, a drop-in that starts another script): one broken service never hides the others.

    What concerns every service is still raised: a sandbox this machine cannot build, an error in fleet.toml.
    """
    try:
        return ServiceAttempt(fleet, service, load_service(fleet, service, renderer), None)
    except RenderRefused as refused:
        return ServiceAttempt(fleet, service, None, refused)
    except SandboxUnavailable:
        raise
    except InputError as error:
        if error.path == fleet.path:
            raise
        return ServiceAttempt(fleet, service, None, None, error)


def attempt_services(fleet: Fleet, *, jobs: int | None = None, renderer: Renderer | None = None) -> dict[str, ServiceAttempt]:
    """Every service of the fleet rendered, several at a time (a render mostly waits for its bash).

    The result is in the fleet's order; each service keeps its own broken file (``ServiceAttempt.broken``),
    and an error that concerns every service raises that of the first service (in that order) that met it,
    as rendering one after the other would. ``renderer`` is the run's (a fresh one when the caller has no run).
    """
    renderer = renderer if renderer is not None else Renderer()
    services = list(fleet.services.values())
    # Every service's render made side by side in few sandbox sessions; each attempt below reads its own.
    renderer.prefetch(fleet, [(service, Probe()) for service in services])
    workers = max(1, min(jobs or os.cpu_count() or 1, 8, len(services)))
    if workers == 1:
        return {service.name: attempt_service(fleet, service, renderer) for service in services}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleetgate-render") as pool:
        futures = [pool.submit(attempt_service, fleet, service, renderer) for service in services]
        try:
            return {service.name: future.result() for service, future in zip(services, futures, strict=True)}
        except BaseException:
            for future in futures:
                future.cancel()
            raise


_RUN_ATTEMPTS: ContextVar[Callable[[], Mapping[str, ServiceAttempt] | None] | None] = ContextVar(
    "fleetgate_run_attempts", default=None)


@contextlib.contextmanager
def run_attempts(made: Callable[[], Mapping[str, ServiceAttempt] | None] | None) -> Iterator[None]:
    """While a check runs: the renders its run has made (``made()``: None while it has made none), so that a fleet
    seam that needs a service's render reads the one every other seam judged instead of rendering it again."""
    token = _RUN_ATTEMPTS.set(made)
    try:
        yield
    finally:
        _RUN_ATTEMPTS.reset(token)


def run_attempt(fleet: Fleet, service: Service) -> ServiceAttempt | None:
    """The attempt of ``service`` that the running check's run made, when it made one of this fleet; else None."""
    made = _RUN_ATTEMPTS.get()
    attempts = made() if made is not None else None
    attempt = attempts.get(service.name) if attempts is not None else None
    if attempt is None or attempt.fleet is not fleet or attempt.service is not service:
        return None
    return attempt


def attempt_of(fleet: Fleet, service: Service) -> ServiceAttempt:
    """The running check's run's attempt of ``service`` (``run_attempt``); rendered now when the run has made none."""
    return run_attempt(fleet, service) or attempt_service(fleet, service)


def _reduce_refused(refused: RenderRefused) -> tuple[Callable[..., RenderRefused], tuple[Any, ...]]:
    return (_rebuild_refused, (refused.path, refused.line, refused.message, refused.stderr, refused.inputs,
                               refused.sourced))


def _rebuild_refused(*args: Any) -> RenderRefused:
    return RenderRefused(*args)


def _reduce_input_error(error: InputError) -> tuple[Callable[..., InputError], tuple[Any, ...]]:
    return (InputError, (error.path, error.line, error.message))


def share_attempts(attempts: Mapping[str, ServiceAttempt]) -> bytes:
    """The rendered fleet as bytes, for another process of the same run (an xdist worker)."""
    pickler_table = copyreg.dispatch_table.copy()
    pickler_table[RenderRefused] = _reduce_refused
    pickler_table[InputError] = _reduce_input_error
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = pickler_table
    pickler.dump(dict(attempts))
    return buffer.getvalue()


def unshare_attempts(data: bytes) -> dict[str, ServiceAttempt]:
    attempts: dict[str, ServiceAttempt] = pickle.loads(data)
    return attempts
