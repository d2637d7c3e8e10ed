"""The renderer runs serve scripts as bash does, answers host questions from the fleet, and writes nothing."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from fleetgate.errors import InputError
from fleetgate.manifest import load_fleet
from fleetgate.render.dispatch import render
from fleetgate.render.start import container_run
from fleetgate.render.types import RenderRefused

FLEET_TOML = """
[fleet]
name = "t"
deploy_root = "/srv/repo"

[hosts.h]
ram_gib = 8
devices = [{ name = "CPU", vram_bytes = 1 }]

[services.s]
host = "h"
port = 8080
engine = "llama.cpp"
unit = "s.service"
serve_script = "serve.sh"
payload = ["/models/m.gguf"]
"""

UNIT = """
[Service]
Environment="GREETING=two words" PATH=/opt/llama/bin:/usr/bin
EnvironmentFile=/srv/repo/s.env
ExecStart=/srv/repo/serve.sh
"""


def make_fleet(tmp_path: Path, script: str, env: str = "CTX=4096\n", unit: str = UNIT) -> Path:
    (tmp_path / "fleet.toml").write_text(FLEET_TOML, encoding="utf-8")
    (tmp_path / "s.service").write_text(unit, encoding="utf-8")
    (tmp_path / "s.env").write_text(env, encoding="utf-8")
    serve = tmp_path / "serve.sh"
    serve.write_text("#!/bin/bash\n" + textwrap.dedent(script), encoding="utf-8")
    return tmp_path / "fleet.toml"


def rendered(fleet_toml: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    fleet = load_fleet(fleet_toml)
    return render(fleet, fleet.services["s"], **kwargs)  # type: ignore[arg-type]


def test_the_engine_gets_the_units_environment_and_the_scripts_argv(tmp_path: Path) -> None:
    result = rendered(make_fleet(tmp_path, 'exec llama-server -c "$CTX" --alias "$GREETING"\n'))
    assert result.argv == ("llama-server", "-c", "4096", "--alias", "two words")
    assert result.env["CTX"] == "4096"
    assert result.inputs["CTX"].where == f"{tmp_path / 's.env'}:1"
    assert result.inputs["GREETING"].via == "Environment="


def test_empty_versus_unset_is_seen_the_way_bash_sees_it(tmp_path: Path) -> None:
    script = ': "${A=dflt}"; : "${B:=dflt}"\nexec llama-server "[$A]" "[$B]"\n'
    fleet = make_fleet(tmp_path, script)
    assert rendered(fleet, overrides={"A": "", "B": ""}).args == ("[]", "[dflt]")
    assert rendered(fleet, overrides={"A": None, "B": None}).args == ("[dflt]", "[dflt]")


def test_file_tests_are_answered_from_the_fleet_not_this_machine(tmp_path: Path) -> None:
    script = """
    [ -f /models/m.gguf ] && echo payload-present >&2
    [ -d /models ] && echo payload-dir-present >&2
    if [ -e /etc/passwd ]; then exec llama-server host-file-seen; fi
    test -f /srv/repo/s.env && exec llama-server repo-file-seen
    """
    result = rendered(make_fleet(tmp_path, script))
    assert result.args == ("repo-file-seen",)
    answers = {(t.op, t.path): t.answer for t in result.tests}
    assert answers == {("-f", "/models/m.gguf"): True, ("-d", "/models"): True, ("-e", "/etc/passwd"): False,
                       ("-f", "/srv/repo/s.env"): True}


def test_an_undeclared_payload_makes_the_script_refuse_and_names_the_line(tmp_path: Path) -> None:
    script = '[ -f /models/m.gguf ] || { echo "model missing" >&2; exit 1; }\nexec llama-server\n'
    with pytest.raises(RenderRefused) as refused:
        rendered(make_fleet(tmp_path, script), payload=())
    assert refused.value.line == 2
    assert "exited 1 without starting llama-server: model missing" in str(refused.value)


def test_nothing_the_script_runs_writes(tmp_path: Path) -> None:
    target = tmp_path / "must-not-exist"
    script = f"""
    mkdir -p {target}/sub
    touch {target}/file
    echo x | tee {target}/teed >/dev/null
    rm -rf {tmp_path}/fleet.toml
    exec llama-server
    """
    result = rendered(make_fleet(tmp_path, script))
    assert not target.exists()
    assert (tmp_path / "fleet.toml").exists()
    assert [w[0] for w in result.writes] == ["mkdir", "touch", "tee", "rm"]


def test_sourcing_a_file_outside_the_repository_is_recorded(tmp_path: Path) -> None:
    script = 'source "${ALT_ENV:-/srv/repo/s.env}"\nexec llama-server -c "$CTX"\n'
    fleet = make_fleet(tmp_path, script)
    assert rendered(fleet).sourced[0].inside_repo
    # Without `set -e` the script goes on with what it had: the render succeeds and records the read.
    tolerated = rendered(fleet, overrides={"ALT_ENV": "/tmp/bench-arm.env"})
    assert [(s.target, s.inside_repo) for s in tolerated.sourced] == [("/tmp/bench-arm.env", False)]
    with pytest.raises(RenderRefused) as refused:
        rendered(make_fleet(tmp_path, "set -e\n" + script), overrides={"ALT_ENV": "/tmp/bench-arm.env"})
    assert [(s.target, s.inside_repo) for s in refused.value.sourced] == [("/tmp/bench-arm.env", False)]


def test_overrides_hold_after_the_script_sources_its_env_file(tmp_path: Path) -> None:
    script = "source /srv/repo/s.env\nexec llama-server -c \"$CTX\"\n"
    assert rendered(make_fleet(tmp_path, script), overrides={"CTX": "8192"}).args == ("-c", "8192")


def test_drop_ins_apply_after_the_unit_in_name_order(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path, 'exec llama-server "$GREETING"\n')
    drop_ins = tmp_path / "s.service.d"
    drop_ins.mkdir()
    (drop_ins / "20-late.conf").write_text("[Service]\nEnvironment=GREETING=late\n", encoding="utf-8")
    (drop_ins / "10-early.conf").write_text("[Service]\nEnvironment=GREETING=early\n", encoding="utf-8")
    result = rendered(fleet)
    assert result.args == ("late",)
    assert result.inputs["GREETING"].where == f"{drop_ins / '20-late.conf'}:2"


def test_a_script_that_never_execs_the_engine_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(RenderRefused, match="did not exec llama-server within 1 s"):
        rendered(make_fleet(tmp_path, "while true; do sleep 0.1; done\n"), timeout=1.0)


@pytest.mark.parametrize(
    ("script", "unit", "fragment"),
    [
        ("exec llama-server (\n", UNIT, "serve.sh:2: bash: syntax error"),
        ("exec llama-server\n", UNIT.replace("ExecStart=/srv/repo/serve.sh", "ExecStart=/elsewhere/serve.sh"),
         "s.service:5: ExecStart=/elsewhere/serve.sh names no file under the fleet's deploy_root /srv/repo"),
        ("exec llama-server\n", UNIT.replace("EnvironmentFile=/srv/repo/s.env", "EnvironmentFile=/srv/repo/absent.env"),
         "s.service:4: EnvironmentFile=/srv/repo/absent.env is not a file of this fleet repository"),
        ("exec llama-server\n", UNIT + "NoEqualsSign\n", "s.service:6: expected Key=Value, got 'NoEqualsSign'"),
        ("exec llama-server\n", "Environment=A=1\n" + UNIT, "s.service:1: assignment outside any section"),
    ],
)
def test_malformed_scripts_and_units_are_one_line_errors(tmp_path: Path, script: str, unit: str, fragment: str) -> None:
    with pytest.raises(InputError) as raised:
        rendered(make_fleet(tmp_path, script, unit=unit))
    message = str(raised.value)
    assert fragment in message
    assert "\n" not in message


def test_double_bracket_tests_see_the_sandbox_the_fleet_declares(tmp_path: Path) -> None:
    script = """
    [[ -f /models/m.gguf ]] || exit 3
    [[ -d /models ]] || exit 4
    [[ -f /srv/repo/s.env && -r /srv/repo/s.env ]] || exit 5
    [[ -e /etc/passwd || -e /etc/hostname || -e /home || -n $(ls -A "$HOME") ]] && exit 6
    exec llama-server ok
    """
    assert rendered(make_fleet(tmp_path, script)).args == ("ok",)


def test_the_engine_is_stubbed_in_every_directory_of_the_units_path(tmp_path: Path) -> None:
    script = 'for d in /opt/llama/bin /usr/bin /usr/local/bin; do [[ -x $d/llama-server ]] || exit 9; done\n' \
             'exec /opt/llama/bin/llama-server from-the-unit-path\n'
    assert rendered(make_fleet(tmp_path, script)).args == ("from-the-unit-path",)


def test_the_engines_path_is_the_units_not_the_renders(tmp_path: Path) -> None:
    assert rendered(make_fleet(tmp_path, "exec llama-server\n")).env["PATH"] == "/opt/llama/bin:/usr/bin"


# An engine by any absolute path, and a directory the repository does not hold (an untracked build tree): made
# inside the sandbox (a stub, an empty directory), and the render says so in its notes.
@pytest.mark.parametrize(("script", "notes"), [
    # Outside deploy_root: /opt/llama.cpp is this host's build tree.
    ("cd /opt/llama.cpp/build/bin && exec ./llama-server -m /models/m.gguf\n",
     ["/opt/llama.cpp/build/bin: the repository does not hold this directory",
      "/opt/llama.cpp/build/bin/llama-server: the engine is started by this path"]),
    # Inside deploy_root (the repository is read-only there): a build tree next to the checkout, by path or by cd.
    ("exec /srv/repo/build/bin/llama-server -m /models/m.gguf\n",
     ["/srv/repo/build/bin/llama-server: the engine is started by this path, which the repository does not hold"]),
    ("set -e\ncd /srv/repo/llama.cpp/build/bin\n./llama-server -m /models/m.gguf\n",
     ["/srv/repo/llama.cpp/build/bin: the repository does not hold this directory",
      "/srv/repo/llama.cpp/build/bin/llama-server: the engine is started by this path"]),
])
def test_an_engine_in_a_tree_the_repository_does_not_hold_renders_and_is_noted(tmp_path: Path, script: str,
                                                                               notes: list[str]) -> None:
    result = rendered(make_fleet(tmp_path, script))
    assert result.args == ("-m", "/models/m.gguf")
    assert len(result.notes) == len(notes)
    for note, fragment in zip(result.notes, notes, strict=True):
        assert note.startswith(fragment), result.notes
    assert not (tmp_path / "build").exists() and not (tmp_path / "llama.cpp").exists()


def test_the_repository_stays_read_only_beside_a_placeholder_inside_it(tmp_path: Path) -> None:
    script = ('cd /srv/repo/build/bin\n'
              'a=$( { echo x > /srv/repo/build/new; } 2>&1 ); b=$( { echo x > /srv/repo/serve.sh; } 2>&1 )\n'
              'exec ./llama-server "${a##*: }" "${b##*: }" "$(head -1 /srv/repo/s.env)"\n')
    assert rendered(make_fleet(tmp_path, script)).args == ("Read-only file system", "Read-only file system", "CTX=4096")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml", "s.env", "s.service", "serve.sh"]


# docker and podman are stubs in the sandbox: a container client is never run, by any name or path.
def test_no_container_client_runs_in_the_render(tmp_path: Path) -> None:
    script = ('out=$(docker info 2>&1; /usr/bin/docker ps -a 2>&1; podman images 2>&1; command -v docker)\n'
              'exec llama-server "$out"\n')
    result = rendered(make_fleet(tmp_path, script))
    assert result.args == ("/run/fleetgate/bin/docker",)


def test_a_docker_run_of_the_engine_image_is_the_engines_argv(tmp_path: Path) -> None:
    (tmp_path / "c.env").write_text("LLAMA_ARG_CTX_SIZE=8192\nQUOTED=\"kept\"\n", encoding="utf-8")
    script = ('docker pull ghcr.io/ggml-org/llama.cpp:server-cuda\n'
              'exec /usr/bin/docker container run -d --rm -it --name=llama --gpus "device=0" --device /dev/dri '
              '-p 127.0.0.1:8080:8080 -v /models:/m:ro --mount type=bind,source=/data,target=/d '
              '--env-file /srv/repo/c.env -e LLAMA_ARG_CTX_SIZE=4096 -eGREETING -e UNSET_ONE --health-cmd "curl -f x" '
              'ghcr.io/ggml-org/llama.cpp:server-cuda -m /m/m.gguf -c "$CTX"\n')
    result = rendered(make_fleet(tmp_path, script))
    assert result.argv == ("llama-server", "-m", "/m/m.gguf", "-c", "4096")
    # The image's own ENV, then the env file (literal, quotes kept), then -e (a bare name: the script's value).
    assert dict(result.env) == {"LLAMA_ARG_HOST": "0.0.0.0", "LLAMA_ARG_CTX_SIZE": "4096", "QUOTED": '"kept"',
                                "GREETING": "two words"}
    run = container_run(result.start)
    assert run is not None and run.client == "docker" and run.name == "llama"
    assert (run.gpus, run.devices, run.host_port(8080), run.host_path("/m/m.gguf"), run.host_path("/d/x")) == (
        ("device=0",), ("/dev/dri",), 8080, "/models/m.gguf", "/data/x")
    assert result.extra_invocations == ()


def test_a_run_of_an_image_that_is_not_the_engine_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RenderRefused) as refused:
        rendered(make_fleet(tmp_path, "exec docker run --rm localhost/my-llama:latest -m /models/m.gguf\n"))
    message = str(refused.value)
    assert message.splitlines() == [message]
    assert "docker run --rm ... runs no image fleetgate knows as llama-server's" in message


@pytest.mark.parametrize(("user", "value", "noted"), [
    ("", "uid=0", False), ("User=root\n", "uid=0", False), ("User=1001\n", "uid=1001", False),
    ("User=llama\n", "uid=%U", True),  # the host's user database holds llama's uid
])
def test_the_uid_specifier_resolves_where_it_can_and_is_named_where_not(tmp_path: Path, user: str, value: str,
                                                                        noted: bool) -> None:
    unit = UNIT.replace("[Service]\n", f"[Service]\n{user}Environment=WHO=uid=%U\n")
    result = rendered(make_fleet(tmp_path, 'exec llama-server "$WHO"\n', unit=unit))
    assert result.args == (value,)
    assert [("%U" in note and "s.service:" in note) for note in result.notes] == ([True] if noted else [])


def test_host_specifiers_are_kept_and_named_never_a_refusal(tmp_path: Path) -> None:
    unit = UNIT.replace("[Service]\n", "[Service]\nEnvironment=ALIAS=%H-chat BOOT=%b\n")
    result = rendered(make_fleet(tmp_path, 'exec llama-server --alias "$ALIAS" "$BOOT"\n', unit=unit))
    assert result.args == ("--alias", "%H-chat", "%b")
    assert [note.split(" holds ")[1].split(",")[0] for note in result.notes] == ["%H (the host name)", "%b (the boot ID)"]


# --- The render cache (FLEETGATE_RENDER_CACHE: the suite's, off by default) -----------------------------------------

def _counting_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sandboxed runs that really ran (not answered from the cache), counted."""
    from fleetgate import sandbox

    assert sandbox.sandbox_problem() is None  # its probe run is made once, before counting
    ran: list[int] = []
    exchange = sandbox._exchange

    def counted(request, wait):  # type: ignore[no-untyped-def]
        ran.append(1)
        return exchange(request, wait)

    monkeypatch.setattr(sandbox, "_exchange", counted)
    return ran


CACHED_SCRIPT = 'source /srv/repo/extra.env\nexec llama-server -c "$CTX" --alias "$(cat /srv/repo/alias.txt)" "$0"\n'


def _cache_fleet(root: Path) -> Path:
    root.mkdir()
    toml = make_fleet(root, CACHED_SCRIPT)
    (root / "extra.env").write_text("CTX=8192\n", encoding="utf-8")
    (root / "alias.txt").write_text("one\n", encoding="utf-8")
    (root / "unread.txt").write_text("x\n", encoding="utf-8")
    return toml


def test_the_render_cache_reruns_only_what_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("FLEETGATE_RENDER_CACHE", str(cache))
    ran = _counting_runs(monkeypatch)
    toml = _cache_fleet(tmp_path / "a")
    first = rendered(toml)
    assert first.argv == ("llama-server", "-c", "8192", "--alias", "one", "/srv/repo/serve.sh")
    assert len(ran) == 1
    assert rendered(toml) == first and len(ran) == 1  # the same inputs: answered from the cache
    # A file the script read (cat), changed to the same size: run again, and the new content shows.
    (tmp_path / "a" / "alias.txt").write_text("two\n", encoding="utf-8")
    assert rendered(toml).args[3] == "two" and len(ran) == 2
    # A file the script sourced: run again.
    (tmp_path / "a" / "extra.env").write_text("CTX=4096\n", encoding="utf-8")
    assert rendered(toml).args[1] == "4096" and len(ran) == 3
    # A file nobody reads, same size: the cache answers.
    (tmp_path / "a" / "unread.txt").write_text("y\n", encoding="utf-8")
    assert rendered(toml).args[1] == "4096" and len(ran) == 3
    # A new file (what a stat or a glob could see): run again.
    (tmp_path / "a" / "new.txt").write_text("", encoding="utf-8")
    assert rendered(toml).args[1] == "4096" and len(ran) == 4
    # The same fleet copied elsewhere (another pytester directory): the cache answers, for that copy.
    copy = tmp_path / "b"
    shutil.copytree(tmp_path / "a", copy)
    again = rendered(copy / "fleet.toml")
    assert again.argv == ("llama-server", "-c", "4096", "--alias", "two", "/srv/repo/serve.sh") and len(ran) == 4
    assert again.script == copy.resolve() / "serve.sh"


def test_the_render_cache_is_off_unless_the_suite_sets_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETGATE_RENDER_CACHE", raising=False)
    ran = _counting_runs(monkeypatch)
    toml = _cache_fleet(tmp_path / "a")
    rendered(toml)
    rendered(toml)
    assert len(ran) == 2
    # A directory others may write is no cache either (its entries could be forged).
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("FLEETGATE_RENDER_CACHE", str(shared))
    rendered(toml)
    rendered(toml)
    assert len(ran) == 4 and list(shared.iterdir()) == []


def _unit_in_a_folder(tmp_path: Path) -> Path:
    """The example's fleet with its unit in systemd/ (the drop-ins' folder beside it), as most repositories keep it."""
    fleet_toml = make_fleet(tmp_path, 'exec llama-server "$GREETING"\n')
    (tmp_path / "systemd").mkdir()
    (tmp_path / "s.service").rename(tmp_path / "systemd" / "s.service")
    fleet_toml.write_text(FLEET_TOML.replace('unit = "s.service"', 'unit = "systemd/s.service"'), encoding="utf-8")
    (tmp_path / "systemd" / "s.service.d").mkdir()
    return fleet_toml


def test_a_drop_in_symlinked_to_another_folder_of_the_repository_applies(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    fleet_toml = _unit_in_a_folder(repo)
    (repo / "shared").mkdir()
    (repo / "shared" / "greeting.conf").write_text("[Service]\nEnvironment=GREETING=shared\n", encoding="utf-8")
    (repo / "systemd" / "s.service.d" / "10-greeting.conf").symlink_to("../../shared/greeting.conf")
    result = rendered(fleet_toml)
    assert result.args == ("shared",)
    assert result.inputs["GREETING"].where == f"{repo / 'systemd' / 's.service.d' / '10-greeting.conf'}:2"


def test_a_drop_in_symlinked_out_of_the_repository_is_refused_in_one_line(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    fleet_toml = _unit_in_a_folder(repo)
    (tmp_path / "greeting.conf").write_text("[Service]\nEnvironment=GREETING=outside\n", encoding="utf-8")
    link = repo / "systemd" / "s.service.d" / "10-greeting.conf"
    link.symlink_to(tmp_path / "greeting.conf")
    with pytest.raises(InputError) as refused:
        rendered(fleet_toml)
    assert str(refused.value) == (f"{link}: the drop-in's real path is outside the fleet repository (a symlink out of "
                                  "it); expected a file of the repository, as systemd would be given it on the host")


VLLM_FLEET = FLEET_TOML.replace('engine = "llama.cpp"', 'engine = "vllm"')


def _vllm_fleet(tmp_path: Path, script: str) -> Path:
    fleet_toml = make_fleet(tmp_path, script)
    fleet_toml.write_text(VLLM_FLEET, encoding="utf-8")
    return fleet_toml


# Plain start scripts: the engine in the background with its stderr in a log, by a venv's path, or as vLLM's server
# module run by a Python (on PATH or a venv's), which is `vllm serve` with its --model as the model tag.
@pytest.mark.parametrize(("script", "argv", "notes"), [
    ('VENV=/opt/vllm/.venv\nnohup "$VENV/bin/vllm" serve Qwen/Qwen3-8B --port 8000 > /var/log/vllm.log 2>&1 &\n',
     ("vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000"),
     ("/opt/vllm/.venv/bin/vllm: the engine is started by this path, which the repository does not hold; stubbed there",)),
    ('VENV=/opt/venv\nexec "$VENV/vllm" serve Qwen/Qwen3-8B --port 8001\n',
     ("vllm", "serve", "Qwen/Qwen3-8B", "--port", "8001"),
     ("/opt/venv/vllm: the engine is started by this path, which the repository does not hold; stubbed there",)),
    ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B --port 8002 --model=Qwen/Qwen3-4B\n",
     ("vllm", "serve", "Qwen/Qwen3-4B", "--port", "8002"),
     ("python -m vllm.entrypoints.openai.api_server is vLLM's OpenAI server: read as `vllm serve` (its --model as "
      "the model tag)",)),
    ("exec /opt/venv/bin/python3 -u -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B\n",
     ("vllm", "serve", "Qwen/Qwen3-8B"),
     ("/opt/venv/bin/python3: the engine is started by this path, which the repository does not hold; stubbed there",
      "python3 -m vllm.entrypoints.openai.api_server is vLLM's OpenAI server: read as `vllm serve` (its --model as "
      "the model tag)")),
])
def test_a_plain_start_script_of_vllm_renders(tmp_path: Path, script: str, argv: tuple[str, ...],
                                              notes: tuple[str, ...]) -> None:
    result = rendered(_vllm_fleet(tmp_path, script))
    assert (result.argv, result.notes) == (argv, notes)


def test_python_for_anything_but_the_server_is_not_the_engine(tmp_path: Path) -> None:
    script = "python3 -m vllm.entrypoints.cli.main --version\nexec vllm serve Qwen/Qwen3-8B\n"
    result = rendered(_vllm_fleet(tmp_path, script))
    assert (result.argv, result.extra_invocations) == (("vllm", "serve", "Qwen/Qwen3-8B"), ())


# llama-server from a build tree beside the script, started in the background and waited for; or left running when
# the script ends (the sandbox gives the script's jobs a bounded while to record what they started).
@pytest.mark.parametrize(("script", "notes"), [
    ('cd "$(dirname "$0")"\n./llama.cpp/build/bin/llama-server -m /models/m.gguf --port 8080 &\nwait\n',
     ("/srv/repo/llama.cpp/build/bin/llama-server: the engine is started by this path, which the repository does not "
      "hold; stubbed there",)),
    ("nohup llama-server -m /models/m.gguf --port 8080 >/dev/null 2>&1 &\necho started\n", ()),
    ('llama-server -m /models/m.gguf --port 8080 & PID=$!\ntrap "kill $PID" EXIT\nwait "$PID"\n', ()),
])
def test_an_engine_started_in_the_background_renders(tmp_path: Path, script: str, notes: tuple[str, ...]) -> None:
    result = rendered(make_fleet(tmp_path, script))
    assert (result.argv, result.notes) == (("llama-server", "-m", "/models/m.gguf", "--port", "8080"), notes)


_CHECKS_HOST = "it asks the host (its cards, its network), which the render does not have; stubbed to succeed with no output"
_PREPARES_HOST = "it prepares the host (downloads, installs); stubbed to succeed, what it fetches taken as present"


# A start script's pre-flight never runs in the render and never stops it, even under `set -e`: each command is
# stubbed to succeed and said once in the notes.
@pytest.mark.parametrize(("command", "note"), [
    ("nvidia-smi -L", f"pre-flight `nvidia-smi` not run: {_CHECKS_HOST}"),
    ("rocm-smi --showmeminfo vram", f"pre-flight `rocm-smi` not run: {_CHECKS_HOST}"),
    ("until curl -sf http://127.0.0.1:9000/health; do :; done", f"pre-flight `curl` not run: {_CHECKS_HOST}"),
    ("sleep 600", "pre-flight `sleep` not run: the render does not wait; stubbed to return at once"),
    ("huggingface-cli download Qwen/Qwen3-8B --local-dir /models", f"pre-flight `huggingface-cli` not run: {_PREPARES_HOST}"),
    ("pip install -r requirements.txt", f"pre-flight `pip` not run: {_PREPARES_HOST}"),
])
def test_a_pre_flight_command_is_stubbed_and_noted(tmp_path: Path, command: str, note: str) -> None:
    script = f"set -euo pipefail\n{command}\n{command}\nexec llama-server -m /models/m.gguf\n"
    result = rendered(make_fleet(tmp_path, script))
    assert (result.argv, result.notes) == (("llama-server", "-m", "/models/m.gguf"), (note,))


def test_pip_through_python_is_a_pre_flight_of_a_vllm_script(tmp_path: Path) -> None:
    script = "set -e\npython3 -m pip install 'vllm==0.11.0'\nexec vllm serve Qwen/Qwen3-8B\n"
    result = rendered(_vllm_fleet(tmp_path, script))
    assert (result.argv, result.notes) == (("vllm", "serve", "Qwen/Qwen3-8B"),
                                           (f"pre-flight `python3 -m pip` not run: {_PREPARES_HOST}",))


# An env file the unit names but the repository keeps off version control: the template it ships is read in its
# place (so a stray positional in it is seen), and the render says so; with two candidates, none is guessed.
@pytest.mark.parametrize(("shipped", "read", "notes"), [
    ({"deploy/chat.env.example": "CTX=8192\nEXTRA=true\n"}, ("8192", "true"),
     ("{unit}:4: EnvironmentFile=/etc/llm/chat.env is not in the repository; read from deploy/chat.env.example, the "
      "template the repository ships for it",)),
    ({".env.example": "CTX=2048\n"}, ("2048", ""),
     ("{unit}:4: EnvironmentFile=/etc/llm/chat.env is not in the repository; read from .env.example, the template "
      "the repository ships for it",)),
    # the shape: the repository ships only .env.template (no .env.example beside it), stray `true` and all
    ({".env.template": "CTX=4096\nEXTRA=true\n"}, ("4096", "true"),
     ("{unit}:4: EnvironmentFile=/etc/llm/chat.env is not in the repository; read from .env.template, the template "
      "the repository ships for it",)),
    ({"chat.env.template": "CTX=1\n", "chat.env.example": "CTX=2\n"}, ("", ""), ()),
])
def test_a_template_shipped_for_an_absent_env_file_is_read_and_noted(tmp_path: Path, shipped: dict[str, str],
                                                                      read: tuple[str, str], notes: tuple[str, ...]) -> None:
    unit = UNIT.replace("EnvironmentFile=/srv/repo/s.env", "EnvironmentFile=-/etc/llm/chat.env")
    fleet_toml = make_fleet(tmp_path, 'exec llama-server -c "${CTX-}" ${EXTRA-}\n', unit=unit)
    for name, text in shipped.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    result = rendered(fleet_toml)
    assert (result.argv[2], result.argv[3] if len(result.argv) > 3 else "") == read
    assert result.notes == tuple(n.format(unit=tmp_path / "s.service") for n in notes)


# --- Sessions: several runs in one request to the sandbox (sandbox.run_many) -------------------------------------------

def _session_spec(script: str, timeout: float = 5.0) -> object:
    from fleetgate.sandbox import SandboxSpec

    return SandboxSpec(command=["/bin/bash", "-c", script], env={"PATH": "/usr/bin:/bin"}, timeout=timeout)


def test_runs_of_one_session_see_nothing_of_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgate import sandbox

    ran = _counting_runs(monkeypatch)
    first = "echo kept > /tmp/left; sleep 30 & echo $! > /run/fleetgate/out/pid; echo $$"
    # the next run lists what it can see: the file the first wrote, any process besides its own shell and init
    second = ("ls -A /tmp; for f in /proc/[0-9]*/comm; do read -r c < \"$f\"; echo \"$c\"; done; echo $$; "
              "[[ -e /run/fleetgate/out/pid ]] && echo pid")
    answers = sandbox.run_many([(_session_spec(first), "first"), (_session_spec(second), "second")])
    assert len(ran) == 1  # one request: the session
    one, two = answers
    assert isinstance(one, sandbox.SandboxResult) and isinstance(two, sandbox.SandboxResult)
    assert one.returncode == 0 and one.files["stdout"] == b"2\n" and one.files["pid"].strip().isdigit()
    # nothing in /tmp, no process but the init (the interpreter) and the shell: the first run's sleep is gone; the
    # shell PID 2 of a PID namespace of its own again, and no output file of the first run
    init, shell, pid = two.files["stdout"].decode().splitlines()
    assert two.returncode == 1 and init.startswith("python") and (shell, pid) == ("bash", "2")


def test_a_run_of_a_session_that_times_out_ends_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgate import sandbox

    ran = _counting_runs(monkeypatch)
    answers = sandbox.run_many([(_session_spec("sleep 30", timeout=1.0), "slow"), (_session_spec("echo after"), "next")])
    assert len(ran) == 1
    slow, after = answers
    assert isinstance(slow, sandbox.SandboxResult) and isinstance(after, sandbox.SandboxResult)
    assert slow.timed_out and not after.timed_out
    assert after.returncode == 0 and after.files["stdout"] == b"after\n"


def test_renders_made_side_by_side_are_the_renders_made_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgate.render.dispatch import RenderRequest, render_many

    fleet = load_fleet(make_fleet(tmp_path, 'exec llama-server -c "${CTX:-4096}" --alias "$GREETING" "$@"\n'))
    service = fleet.services["s"]
    asks = [RenderRequest(service), RenderRequest(service, {"CTX": "8192"}), RenderRequest(service, {"GREETING": None}),
            RenderRequest(service, args=("--one", "two"))]
    alone = [render(fleet, a.service, overrides=a.overrides, args=a.args) for a in asks]
    ran = _counting_runs(monkeypatch)
    together = render_many(fleet, asks)
    assert len(ran) == 1
    assert [(r.argv, r.env, r.trace, r.tests, r.sourced) for r in together if not isinstance(r, Exception)] == [
        (r.argv, r.env, r.trace, r.tests, r.sourced) for r in alone]
