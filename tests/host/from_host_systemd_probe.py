"""Prove ``fleetgate init --from-host``'s systemd branch on a machine whose PID 1 is systemd (docs/init.md).

Run as root on such a machine from a checkout (no dependency beyond the standard library and fleetgate's own
modules): ``python3 tests/host/from_host_systemd_probe.py OUT``. It starts a runtime unit under /run/systemd/system
(an engine stand-in named llama-server, an env file with a token, a drop-in), reads the host the way
``--from-host local://`` does (fleetgate/init/from_host.py, through a plain local shell instead of testinfra), writes
the fleet repository to OUT, then stops and removes the unit. ``fleetgate init OUT`` then reads it elsewhere.
Exit 3 when PID 1 is not systemd.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = "fgprobe-chat.service"
RUN = Path("/run/systemd/system")
WORK = Path("/run/fgprobe")


class Result:
    def __init__(self, done: subprocess.CompletedProcess[str]) -> None:
        self.rc, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr


class File:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    @property
    def is_file(self) -> bool:
        return self.path.is_file()

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def content(self) -> bytes:
        return self.path.read_bytes()

    @property
    def content_string(self) -> str:
        return self.path.read_text()


class LocalShell:
    """What read_host asks of a testinfra Host: ``run`` and ``file``."""

    def run(self, command: str) -> Result:
        return Result(subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120))

    def file(self, path: str) -> File:
        return File(path)


def main() -> int:
    out = Path(sys.argv[1])
    if Path("/proc/1/comm").read_text().strip() != "systemd":
        print(f"PID 1 is {Path('/proc/1/comm').read_text().strip()}, not systemd")
        return 3
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("from_host", ROOT / "fleetgate" / "init" / "from_host.py")
    assert spec is not None and spec.loader is not None
    from_host = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(from_host)
    (WORK / "bin").mkdir(parents=True, exist_ok=True)
    engine = WORK / "bin" / "llama-server"
    engine.write_text("#!/bin/bash\nwhile :; do sleep 5; done\n")
    engine.chmod(0o755)
    (WORK / "env").mkdir(exist_ok=True)
    (WORK / "env" / "chat.env").write_text("PORT=8012\nMODEL=/srv/models/Qwen3-8B-Q4_K_M.gguf\nHF_TOKEN=hf_probe_5e0b1d2a\n")
    (RUN / f"{UNIT}.d").mkdir(parents=True, exist_ok=True)
    (RUN / UNIT).write_text(
        "[Unit]\nDescription=fleetgate --from-host probe\n\n[Service]\nEnvironmentFile=/run/fgprobe/env/chat.env\n"
        "ExecStart=/run/fgprobe/bin/llama-server --host 127.0.0.1 --port ${PORT} -m ${MODEL} --api-key sk-probe-7f3a9c\n"
        "DynamicUser=yes\n\n[Install]\nWantedBy=multi-user.target\n")
    (RUN / f"{UNIT}.d" / "override.conf").write_text("[Service]\nEnvironment=LLAMA_ARG_CTX_SIZE=8192\n")
    try:
        subprocess.run(["systemctl", "daemon-reload"], check=True)
        subprocess.run(["systemctl", "start", UNIT], check=True)
        time.sleep(2)
        print(subprocess.run(["systemctl", "cat", UNIT], capture_output=True, text=True).stdout)
        host = from_host.read_host("local://", LocalShell())
        print("notes:", host.notes, "deploy_root:", host.deploy_root)
        print("processes:", [(p.pid, p.unit, p.argv[:2]) for p in host.processes])
        from_host.write_fleet(host, "local://", out)
        for path in sorted(out.rglob("*")):
            if path.is_file():
                text = path.read_text()
                assert "sk-probe-7f3a9c" not in text and "hf_probe_5e0b1d2a" not in text, path
                print(f"== {path.relative_to(out)}\n{text}")
    finally:
        subprocess.run(["systemctl", "stop", UNIT])
        shutil.rmtree(RUN / f"{UNIT}.d", ignore_errors=True)
        (RUN / UNIT).unlink(missing_ok=True)
        subprocess.run(["systemctl", "daemon-reload"])
        shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
