"""What keeps fleetgate fast on a large fleet: each service rendered once per run (shared with xdist
workers), renders side by side, fleet.toml's keys located from one index, where_flag deferred."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import fleetgate.render.rendered
from fleetgate.errors import InputError
from fleetgate.failure import Deferred, Failure
from fleetgate.manifest import load_fleet
from fleetgate.render.rendered import attempt_services, load_service, share_attempts, unshare_attempts

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleet"


def fleet_copy(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(FLEET, target)
    for relative, (old, new) in edits.items():
        path = target / relative
        text = path.read_text()
        assert old in text, (relative, old)
        path.write_text(text.replace(old, new, 1))
    return target / "fleet.toml"


def test_a_refused_render_survives_the_trip_to_a_worker(tmp_path: Path) -> None:
    # frank-zealot's script stops when its model file is missing: drop it from the declared payload.
    toml = fleet_copy(tmp_path, {"fleet.toml": (
        '    "/home/dank/models/Ternary-Bonsai-2-9B-GGUF/Ternary-Bonsai-2-9B-PQ2_0.gguf",\n', "")})
    attempts = attempt_services(load_fleet(toml))
    refused = attempts["frank-zealot"].refused
    assert refused is not None and attempts["frank-zealot"].config is None
    back = unshare_attempts(share_attempts(attempts))
    assert list(back) == list(attempts)
    again = back["frank-zealot"].refused
    assert again is not None
    assert (again.path, again.line, again.message, again.stderr, again.inputs) == (
        refused.path, refused.line, refused.message, refused.stderr, refused.inputs)
    medium = back["frank-medium"].config
    assert medium is not None and medium.rendered == attempts["frank-medium"].config.rendered  # type: ignore[union-attr]


def test_renders_side_by_side_keep_the_fleet_order_and_each_service_its_broken_file(tmp_path: Path) -> None:
    toml = fleet_copy(tmp_path, {
        "scripts/frank-zealot.env": ("PORT=7771", 'PORT="7771'),
        "scripts/frank-medium.env": ("CACHE_RAM=16384", 'CACHE_RAM="16384'),
    })
    fleet = load_fleet(toml)
    assert list(fleet.services)[:3] == ["frank-medium", "frank-archon", "frank-zealot"]
    attempts = attempt_services(fleet, jobs=4)
    assert list(attempts) == list(fleet.services)
    # frank-medium's env file is its unit's EnvironmentFile= (a broken file); frank-zealot's script sources its own,
    # and bash refuses the unclosed quote (a refused render).
    broken = {name: a.broken.path.name for name, a in attempts.items() if a.broken is not None}
    assert broken == {"frank-medium": "frank-medium.env"}
    assert [name for name, a in attempts.items() if a.refused is not None] == ["frank-zealot"]
    assert all(a.config is not None for name, a in attempts.items() if name not in ("frank-medium", "frank-zealot"))
    # A broken file travels to an xdist worker as the same one line.
    back = unshare_attempts(share_attempts(attempts))
    assert {n: str(a.broken) for n, a in back.items() if a.broken} == {n: str(a.broken) for n, a in attempts.items() if a.broken}
    assert list(attempt_services(load_fleet(FLEET / "fleet.toml"), jobs=4)) == list(load_fleet(FLEET / "fleet.toml").services)


def test_where_flag_renders_only_when_a_failure_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = load_fleet(FLEET / "fleet.toml")
    config = load_service(fleet, fleet.services["frank-medium"])
    assert config.llama is not None
    calls: list[object] = []
    real = fleetgate.render.rendered.render

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(kwargs.get("overrides"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fleetgate.render.rendered, "render", counting)
    where = config.where_flag(config.llama.use("ctx_size"))
    assert isinstance(where, Deferred) and calls == []
    failure = Failure(service="frank-medium", check="c", where=where, observed="o", expected="e", fix="f")
    assert failure.where.startswith(str(FLEET / "scripts" / "frank-medium.env"))
    assert len(calls) >= 1
    count = len(calls)
    assert str(where) == failure.where and len(calls) == count  # found once


COUNTER = '''
import json, os, fleetgate.render.rendered
_real = fleetgate.render.rendered.render
_real_many = fleetgate.render.rendered.render_many
def _own(fleet, service, overrides, args):
    # a service's own render; a check's probe (overrides, arguments, a bench, build or deploy script) is not one
    if not overrides and not args and service.name in fleet.services:
        path = os.path.join({out!r}, f"{{os.getpid()}}-{{os.environ.get('PYTEST_XDIST_WORKER', 'controller')}}")
        with open(path, "a") as f:
            f.write(service.name + "\\n")
def _counting(fleet, service, **kwargs):
    _own(fleet, service, kwargs.get("overrides"), kwargs.get("args"))
    return _real(fleet, service, **kwargs)
def _counting_many(fleet, requests):
    # the renderer makes the services' own renders ahead, side by side
    for request in requests:
        _own(fleet, request.service, request.overrides, request.args)
    return _real_many(fleet, requests)
fleetgate.render.rendered.render = _counting
fleetgate.render.rendered.render_many = _counting_many
'''


def test_xdist_workers_render_nothing_the_controller_rendered(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Under an outer xdist run the inner controller would inherit the outer worker's name.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    out = pytester.mkdir("renders")
    shutil.copytree(REPO / "seams", pytester.path / "seams", ignore=shutil.ignore_patterns("__pycache__"))
    conftest = pytester.path / "seams" / "conftest.py"
    conftest.write_text(conftest.read_text() + COUNTER.format(out=str(out)))
    fleet = load_fleet(FLEET / "fleet.toml")
    result = pytester.runpytest_subprocess("--import-mode=importlib", str(pytester.path / "seams"),
                                           f"--fleet={FLEET / 'fleet.toml'}", "-n", "2", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    renders = {path.name.split("-", 1)[1]: path.read_text().split() for path in out.iterdir()}
    assert set(renders) == {"controller"}, json.dumps(renders)
    assert sorted(renders["controller"]) == sorted(fleet.services)


def test_one_service_loads_alone_with_the_fleet_around_it(tmp_path: Path) -> None:
    whole = load_fleet(FLEET / "fleet.toml")
    one = load_fleet(FLEET / "fleet.toml", only="frank-zealot")
    assert list(one.services) == ["frank-zealot"]
    assert one.services["frank-zealot"] == whole.services["frank-zealot"]
    assert (one.hosts, one.timeouts, one.clients) == (whole.hosts, whole.timeouts, whole.clients)
    assert list(load_fleet(FLEET / "fleet.toml", only="frank-nope").services) == list(whole.services)
    # Another service's broken table does not stop an answer about this one; it stops the whole load.
    toml = fleet_copy(tmp_path, {"fleet.toml": ("port = 7773", 'port = "7773"')})
    assert list(load_fleet(toml, only="frank-zealot").services) == ["frank-zealot"]
    with pytest.raises(InputError, match=r"services\.frank-dragoon\.port: expected integer"):
        load_fleet(toml)


def test_render_scratch_files_stay_off_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgate import sandbox

    mounts = Path("/proc/mounts").read_text().split("\n")
    shm = [line.split() for line in mounts if len(line.split()) >= 4 and line.split()[1] == "/dev/shm"]
    expected = "/dev/shm" if shm and shm[0][2] == "tmpfs" and "noexec" not in shm[0][3].split(",") else None
    monkeypatch.delenv("TMPDIR", raising=False)
    sandbox.scratch_dir.cache_clear()
    try:
        assert sandbox.scratch_dir() == expected
        monkeypatch.setenv("TMPDIR", "/somewhere/else")
        sandbox.scratch_dir.cache_clear()
        assert sandbox.scratch_dir() is None  # an explicit TMPDIR wins
    finally:
        sandbox.scratch_dir.cache_clear()
