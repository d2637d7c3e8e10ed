"""``fleetgate init --from-host SPEC PATH`` (fleetgate/init/from_host.py): what a running host runs, written as a
fleet repository. Proven on this machine's /proc with a real llama-server (local://); the systemd branch (a unit
as ``systemctl cat`` prints it, its drop-in and env file) through a host that answers as systemd would, because
this machine's PID 1 is not systemd (docs/init.md says which backend was proven where)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from fleetgate.cli import main
from fleetgate.init.from_host import EngineProcess, _script, _split_cat, engine_process, read_host, write_fleet
from fleetgate.reference import MODEL_FILE, free_port, model_dir
from tests.engine import llama_server_binary
from tests.secrets_used import SECRETS

KEY = SECRETS["FROM_HOST_KEY"]
TOKEN = SECRETS["FROM_HOST_TOKEN"]


@pytest.mark.parametrize(("argv", "engine"), [
    (("/opt/llama.cpp/build/bin/llama-server", "-m", "/m.gguf"), "llama.cpp"),
    (("llama-server", "--models-preset", "/etc/models.ini"), "llama.cpp"),
    (("/venv/bin/python3", "/venv/bin/vllm", "serve", "Qwen/Qwen3-8B"), "vllm"),
    (("vllm", "serve", "m"), "vllm"),
    (("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"), "vllm"),
    (("vllm", "bench", "serve"), None),
    (("/usr/local/bin/llama-swap", "--config", "c.yaml"), None),
    (("bash", "-c", "llama-server -m x"), None),
])
def test_which_processes_are_engines(argv: tuple[str, ...], engine: str | None) -> None:
    assert engine_process(argv) == engine


def test_a_script_of_a_process_keeps_its_words_and_never_a_secret() -> None:
    process = EngineProcess(41, 1, "/srv/llm", ("/venv/bin/python3", "/venv/bin/vllm", "serve", "Qwen/Qwen3-8B",
                                                "--api-key", KEY, "--port", "8010"), "vllm",
                            {"CUDA_VISIBLE_DEVICES": "1", "HF_TOKEN": TOKEN})
    assert _script(process, "ssh://ops@gpu1") == (
        "#!/bin/bash\n# What process 41 on ssh://ops@gpu1 ran, read by fleetgate init --from-host from "
        "/proc/PID/cmdline, environ and cwd.\ncd /srv/llm\nexport CUDA_VISIBLE_DEVICES=1\nexport HF_TOKEN='***'\n"
        "exec /venv/bin/vllm serve Qwen/Qwen3-8B --api-key '***' --port 8010\n")


CAT = """# /etc/systemd/system/llama-chat.service
[Unit]
Description=llama.cpp chat

[Service]
EnvironmentFile=/etc/llama/chat.env
ExecStart=/opt/llama.cpp/build/bin/llama-server --host 127.0.0.1 --port ${PORT} -m ${MODEL} --api-key sk-unit-0a1b2c3d
User=llama

[Install]
WantedBy=multi-user.target

# /etc/systemd/system/llama-chat.service.d/override.conf
[Service]
Environment=LLAMA_ARG_CTX_SIZE=8192
"""


def test_systemctl_cat_splits_into_the_unit_and_its_drop_ins() -> None:
    files = _split_cat(CAT)
    assert [path for path, _ in files] == ["/etc/systemd/system/llama-chat.service",
                                          "/etc/systemd/system/llama-chat.service.d/override.conf"]
    assert files[1][1] == "[Service]\nEnvironment=LLAMA_ARG_CTX_SIZE=8192\n"


@dataclass
class _Result:
    rc: int
    stdout: str
    stderr: str = ""


class _File:
    def __init__(self, content: bytes | None) -> None:
        self._content = content

    @property
    def is_file(self) -> bool:
        return self._content is not None

    @property
    def size(self) -> int:
        return len(self._content or b"")

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise FileNotFoundError("no such file")
        return self._content

    @property
    def content_string(self) -> str:
        return self.content.decode()


class _SystemdHost:
    """A host whose engine runs as a system unit, answering the reads as a systemd host does (the listing of
    /proc, /proc/1/comm, the engine's cgroup and environment, ``systemctl cat``, the env file)."""

    files: ClassVar[dict[str, bytes]] = {
        "/proc/1/comm": b"systemd\n",
        "/proc/700/cgroup": b"0::/system.slice/llama-chat.service\n",
        "/proc/700/environ": b"PORT=8012\0MODEL=/srv/models/Qwen3-8B-Q4_K_M.gguf\0LLAMA_ARG_CTX_SIZE=8192\0INVOCATION_ID=x\0",
        "/etc/llama/chat.env": f"PORT=8012\nMODEL=/srv/models/Qwen3-8B-Q4_K_M.gguf\nHF_TOKEN={TOKEN}\n".encode(),
    }

    def run(self, command: str) -> _Result:
        if command.startswith("sh -c "):
            argv = "\x01".join(["/opt/llama.cpp/build/bin/llama-server", "--host", "127.0.0.1", "--port", "8012", "-m",
                                "/srv/models/Qwen3-8B-Q4_K_M.gguf", "--api-key", "sk-unit-0a1b2c3d"])
            return _Result(0, f"1\t0\t/\t/sbin/init\n700\t1\t/\t{argv}\n")
        if command == "systemctl cat llama-chat.service":
            return _Result(0, CAT)
        return _Result(1, "", "unknown")

    def file(self, path: str) -> _File:
        return _File(self.files.get(path))


def test_a_system_unit_is_written_as_systemd_has_it_with_its_env_file(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    host = read_host("ssh://ops@gpu1", _SystemdHost())
    assert host.deploy_root == "/etc/llama"
    out = tmp_path / "gpu1"
    assert write_fleet(host, "ssh://ops@gpu1", out) == []
    written = {str(p.relative_to(out)): p.read_text(encoding="utf-8") for p in sorted(out.rglob("*")) if p.is_file()}
    assert written == {
        "chat.env": "PORT=8012\nMODEL=/srv/models/Qwen3-8B-Q4_K_M.gguf\nHF_TOKEN=***\n",
        "systemd/llama-chat.service": CAT.split("\n# /etc")[0].split("\n", 1)[1].replace("sk-unit-0a1b2c3d", "***")
        .rstrip("\n") + "\n",
        "systemd/llama-chat.service.d/override.conf": "[Service]\nEnvironment=LLAMA_ARG_CTX_SIZE=8192\n",
    }
    # init reads the written repository like any other: the env file under deploy_root gives the port and model.
    assert main(["init", str(out), "--name", "gpu1"]) == 0
    service = tomllib.loads((out / "fleet.toml").read_text(encoding="utf-8"))["services"]["llama-chat"]
    assert service == {"host": "localhost", "port": 8012, "engine": "llama.cpp", "unit": "systemd/llama-chat.service",
                       "payload": ["/srv/models/Qwen3-8B-Q4_K_M.gguf"]}
    assert KEY not in (out / "fleet.toml").read_text(encoding="utf-8")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real llama-server started the way a person starts one by hand: from a working directory, a token in its
    environment, a key on its command line."""
    binary = llama_server_binary()
    port = free_port()
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {"PATH": os.environ["PATH"], "HF_TOKEN": TOKEN, "LLAMA_ARG_THREADS": "1"}
    process = subprocess.Popen([str(binary), "-m", str(model_dir() / MODEL_FILE), "--host", "127.0.0.1", "--port",
                                str(port), "-c", "1024", "--parallel", "1", "--api-key", KEY], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, "llama-server exited"
            time.sleep(0.3)
        yield port, cwd
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def test_local_host_running_a_real_llama_server(engine: tuple[int, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    port, cwd = engine
    out = tmp_path / "host"
    # The machine runs other engines too (other test runs): every one is written; this one is held here.
    assert main(["init", "--from-host", "local://", str(out), "--name", "here"]) in (0, 3)
    fleet = tomllib.loads((out / "fleet.toml").read_text(encoding="utf-8"))
    ours = {name: s for name, s in fleet["services"].items() if s["port"] == port}
    assert ours == {f"llama-{port}": {"host": "localhost", "port": port, "engine": "llama.cpp",
                                      "serve_script": f"scripts/llama-{port}.sh",
                                      "payload": [str(model_dir() / MODEL_FILE)]}}
    script = (out / f"scripts/llama-{port}.sh").read_text(encoding="utf-8")
    assert f"cd {cwd}\n" in script and "export HF_TOKEN='***'\n" in script and "--api-key '***'" in script
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert KEY not in text and TOKEN not in text, path
    assert KEY not in capsys.readouterr().out


CONTAINER_ID = "4f1c2b3a" * 8
# The fields of `docker inspect` that say how the container was started (a llama.cpp server image on one NVIDIA card).
INSPECT = ('[{"Id": "' + CONTAINER_ID + '", "Name": "/llama-chat", '
           '"Config": {"Image": "ghcr.io/ggml-org/llama.cpp:server-cuda-b10500", "Entrypoint": ["/app/llama-server"], '
           '"Cmd": ["-m", "/models/Qwen3-8B-Q4_K_M.gguf", "--port", "8080", "-ngl", "99", "--api-key", "' + KEY + '"], '
           '"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LLAMA_ARG_HOST=0.0.0.0", '
           '"HF_TOKEN=' + TOKEN + '"]}, '
           '"HostConfig": {"NetworkMode": "bridge", "PortBindings": {"8080/tcp": [{"HostIp": "127.0.0.1", '
           '"HostPort": "8091"}]}, "DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": null, '
           '"Capabilities": [["gpu"]]}]}, '
           '"Mounts": [{"Type": "bind", "Source": "/srv/models", "Destination": "/models", "RW": false}]}]')


class _DockerHost(_SystemdHost):
    """The same host with the engine in a docker container, which the host's docker client inspects."""

    files: ClassVar[dict[str, bytes]] = {
        "/proc/1/comm": b"systemd\n",
        "/proc/700/cgroup": f"0::/system.slice/docker-{CONTAINER_ID}.scope\n".encode(),
        "/proc/700/environ": b"LLAMA_ARG_HOST=0.0.0.0\0",
    }

    def run(self, command: str) -> _Result:
        if command == f"docker inspect {CONTAINER_ID}":
            return _Result(0, INSPECT)
        if command.startswith("sh -c "):
            argv = "\x01".join(["/app/llama-server", "-m", "/models/Qwen3-8B-Q4_K_M.gguf", "--port", "8080"])
            return _Result(0, f"1\t0\t/\t/sbin/init\n700\t650\t/app\t{argv}\n")
        return _Result(1, "", "unknown")


def test_a_container_is_written_as_the_run_line_its_runtime_inspects(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    host = read_host("ssh://ops@gpu1", _DockerHost())
    out = tmp_path / "gpu1"
    assert write_fleet(host, "ssh://ops@gpu1", out) == []
    assert (out / "scripts" / "llama-8080.sh").read_text(encoding="utf-8") == (
        "#!/bin/bash\n# The container of process 700 on ssh://ops@gpu1, as its runtime's inspect gives it.\n"
        "exec docker run -d --name llama-chat -p 127.0.0.1:8091:8080 -v /srv/models:/models:ro --gpus all "
        "-e 'HF_TOKEN=***' -e LLAMA_ARG_HOST=0.0.0.0 --entrypoint /app/llama-server "
        "ghcr.io/ggml-org/llama.cpp:server-cuda-b10500 -m /models/Qwen3-8B-Q4_K_M.gguf --port 8080 -ngl 99 "
        "--api-key '***'\n")
    # init reads the run line as docker would start it: the published port, the bind mount's host path.
    assert main(["init", str(out), "--name", "gpu1"]) == 0
    service = tomllib.loads((out / "fleet.toml").read_text(encoding="utf-8"))["services"]["llama-8080"]
    assert service == {"host": "localhost", "port": 8091, "engine": "llama.cpp", "serve_script": "scripts/llama-8080.sh",
                       "payload": ["/srv/models/Qwen3-8B-Q4_K_M.gguf"]}


SSHD = Path("/usr/sbin/sshd")


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[str]:
    """A real OpenSSH server on 127.0.0.1 at a free port, key authentication only, with its host key, the client's
    key and both configs in a temporary directory; stopped by its PID. The testinfra spec that reaches it."""
    if not SSHD.exists() or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("openssh-server and openssh-client are not installed (apt-get install openssh-server "
                    "openssh-client; .ci/run installs them)")
    if os.geteuid() != 0:
        pytest.skip("sshd needs root to serve a login (CI runs as root)")
    keys = tmp_path / "ssh"
    keys.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True, timeout=30)
    shutil.copy(keys / "client.pub", keys / "authorized_keys")
    port = free_port()
    (keys / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {keys / 'host'}\nAuthorizedKeysFile {keys / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        f"StrictModes no\nPidFile {keys / 'sshd.pid'}\nUsePAM no\n", encoding="utf-8")
    (keys / "config").write_text(
        f"Host 127.0.0.1\n  Port {port}\n  IdentityFile {keys / 'client'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {keys / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n",
        encoding="utf-8")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(keys / "sshd_config")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            probe = subprocess.run(["ssh", "-F", str(keys / "config"), "root@127.0.0.1", "true"],
                                   capture_output=True, timeout=30, check=False)
            if probe.returncode == 0:
                break
            assert process.poll() is None, "sshd exited"
            time.sleep(0.3)
        else:
            pytest.fail(f"sshd on 127.0.0.1:{port} took no login in 30 s: {probe.stderr.decode(errors='replace')}")
        yield f"ssh://root@127.0.0.1?ssh_config={keys / 'config'}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_ssh_host_running_a_real_llama_server(engine: tuple[int, Path], sshd: str, tmp_path: Path) -> None:
    """The same engine read through a real sshd (testinfra's ssh backend: each read one ssh command) gives the same
    service as local:// does."""
    port, cwd = engine
    out = tmp_path / "over-ssh"
    assert main(["init", "--from-host", sshd, str(out), "--name", "there"]) in (0, 3)
    fleet = tomllib.loads((out / "fleet.toml").read_text(encoding="utf-8"))
    ours = {name: s for name, s in fleet["services"].items() if s["port"] == port}
    assert ours == {f"llama-{port}": {"host": "localhost", "port": port, "engine": "llama.cpp",
                                      "serve_script": f"scripts/llama-{port}.sh",
                                      "payload": [str(model_dir() / MODEL_FILE)]}}
    script = (out / f"scripts/llama-{port}.sh").read_text(encoding="utf-8")
    assert f"cd {cwd}\n" in script and "export HF_TOKEN='***'\n" in script and "--api-key '***'" in script
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert KEY not in text and TOKEN not in text, path
