"""``fleetgate init --from-host local://`` on the systemd reference: the reference served by a unit (and a drop-in)
of a real, nested systemd (tests/host/nested_systemd.py), read from inside its namespaces as a host is read. The
written fleet's seams have no failure, and its live gate, run there too, is green."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from fleetgate.reference import free_port, model_dir
from tests.host.conftest import UNIT, healthy, unit_fleet_copy
from tests.host.nested_systemd import NestedSystemd, why_not
from tests.secrets_used import SECRETS

pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")

TOKEN = SECRETS["UNIT_TOKEN"]
SUMMARY = re.compile(r"^(?P<name>[\w-]+): (?P<passed>\d+) passed, (?P<failed>\d+) failed", re.M)


def _serve_reference(systemd: NestedSystemd, unit_text: str, port: int) -> None:
    systemd.write(f"/etc/systemd/system/{UNIT}", unit_text)
    systemd.write(f"/etc/systemd/system/{UNIT}.d/token.conf", f"[Service]\nEnvironment=HF_TOKEN={TOKEN}\n")
    for command in (("daemon-reload",), ("enable", UNIT), ("start", UNIT)):
        assert systemd.run("systemctl", *command).returncode == 0
    deadline = time.monotonic() + 60
    while not healthy(port):
        assert time.monotonic() < deadline, systemd.run("systemctl", "status", "--no-pager", UNIT).stdout
        time.sleep(0.2)


def _written_as_systemd_has_it(out: Path, fleet_dir: Path, port: int) -> None:
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written == {"fleet.toml", "systemd/reference.service", "systemd/reference.service.d/token.conf",
                       "serve-reference.sh", "reference.env", "reference-chat.jinja"}
    for path in out.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(encoding="utf-8"), path
    fleet = tomllib.loads((out / "fleet.toml").read_text(encoding="utf-8"))
    assert fleet["fleet"]["deploy_root"] == str(fleet_dir / "scripts")
    assert fleet["services"] == {"reference": {
        "host": "localhost", "port": port, "engine": "llama.cpp", "unit": "systemd/reference.service",
        "serve_script": "serve-reference.sh", "env_file": "reference.env",
        "payload": [str(model_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf")]}}


def _declare_host_and_run_seams(out: Path) -> str:
    """The one hand edit (the host's RAM and cards: a CPU host, and where the gate reaches it), then the seams: no
    failure anywhere."""
    text = (out / "fleet.toml").read_text(encoding="utf-8")
    text = text.replace('ram_gib = "TODO"', 'ram_gib = 8\naddress = "127.0.0.1"')
    text = re.sub(r"devices = \[\{ name = \"TODO\", vram_bytes = \"TODO\" \}\]", "devices = []", text)
    (out / "fleet.toml").write_text(text, encoding="utf-8")
    seams = subprocess.run([sys.executable, "-m", "pytest", "--fleet", "fleet.toml", "-p", "no:cacheprovider", "-q"],
                           cwd=out, capture_output=True, text=True, timeout=600)
    assert {m["name"]: int(m["failed"]) for m in SUMMARY.finditer(seams.stdout)} == {
        "fleet": 0, "reference": 0, "reference-host": 0}, seams.stdout[-3000:]
    return seams.stdout


def test_from_host_on_the_systemd_reference(tmp_path: Path) -> None:
    work = tmp_path / "systemd"
    work.mkdir()
    port = free_port()
    fleet_dir = work / "fleet"
    _, unit_text = unit_fleet_copy(fleet_dir, port)
    fleet_dir.chmod(0o755)
    systemd = NestedSystemd.start(work, work)
    try:
        _serve_reference(systemd, unit_text, port)
        out = work / "host"
        done = systemd.run(sys.executable, "-m", "fleetgate.cli", "init", "--from-host", "local://", str(out),
                           "--name", "reference-host", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        _written_as_systemd_has_it(out, fleet_dir, port)
        seams = _declare_host_and_run_seams(out)
        gate = systemd.run("sh", "-c", f"cd {out} && {sys.executable} -m pytest live/ --fleet fleet.toml --endpoint "
                           "reference -p no:cacheprovider -q", timeout=300)
        summary = {m["name"]: (int(m["passed"]), int(m["failed"])) for m in SUMMARY.finditer(gate.stdout)}
        assert summary["reference"][1] == 0 and summary["reference"][0] > 0, gate.stdout[-3000:]
        print(seams[-400:], gate.stdout[-2500:], sep="\n")  # the figures docs/init.md quotes (-s shows them)
    finally:
        systemd.stop()


SSHD = Path("/usr/sbin/sshd")


def test_from_host_over_ssh_on_the_systemd_reference(tmp_path: Path) -> None:
    """The same host read from outside its namespaces through a real sshd that its own systemd runs (127.0.0.1 at a
    free port, key authentication with keys of a temporary directory): every read is one ssh command, landing in
    the host's PID and mount namespaces, where PID 1 is systemd. The written fleet is local://'s, and its seams have
    no failure."""
    if not SSHD.exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server and openssh-client are not installed (apt-get install openssh-server "
                    "openssh-client; .ci/run installs them)")
    work = tmp_path / "systemd"
    work.mkdir()
    port = free_port()
    fleet_dir = work / "fleet"
    _, unit_text = unit_fleet_copy(fleet_dir, port)
    fleet_dir.chmod(0o755)
    keys = work / "ssh"
    keys.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True, timeout=30)
    shutil.copy(keys / "client.pub", keys / "authorized_keys")
    ssh_port = free_port()
    (keys / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {ssh_port}\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n", encoding="utf-8")
    (keys / "config").write_text(
        f"Host 127.0.0.1\n  Port {ssh_port}\n  IdentityFile {keys / 'client'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {keys / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n",
        encoding="utf-8")
    systemd = NestedSystemd.start(work, work)
    try:
        _serve_reference(systemd, unit_text, port)
        # sshd as the host's own unit: the nested systemd owns it and stops it with everything else.
        systemd.write("/etc/systemd/system/fleetgate-sshd.service",
                      f"[Service]\nRuntimeDirectory=sshd\nExecStart={SSHD} -D -e -f {keys / 'sshd_config'}\n")
        assert systemd.run("systemctl", "start", "fleetgate-sshd.service").returncode == 0
        deadline = time.monotonic() + 30
        while True:
            probe = subprocess.run(["ssh", "-F", str(keys / "config"), "root@127.0.0.1", "cat", "/proc/1/comm"],
                                   capture_output=True, text=True, timeout=30, check=False)
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline, probe.stderr + systemd.run(
                "systemctl", "status", "--no-pager", "fleetgate-sshd.service").stdout
            time.sleep(0.3)
        assert probe.stdout == "systemd\n"  # the session is the nested host's, not this machine's
        out = work / "host"
        spec = f"ssh://root@127.0.0.1?ssh_config={keys / 'config'}"
        done = subprocess.run([sys.executable, "-m", "fleetgate.cli", "init", "--from-host", spec, str(out),
                               "--name", "reference-host"], capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        _written_as_systemd_has_it(out, fleet_dir, port)
        print(_declare_host_and_run_seams(out)[-400:])
    finally:
        systemd.stop()
