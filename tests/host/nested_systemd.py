"""A real systemd (PID 1 of its own PID and mount namespaces) for the host checks' systemd tests.

It shares the machine's network and filesystems, so everything it could write is shadowed first: /run,
/tmp, /var/tmp, /var/log, /var/lib/systemd and /etc/systemd/system are fresh tmpfs mounts inside its
mount namespace, and the units that clean or populate shared state (systemd-tmpfiles-*, sysusers,
machine-id-commit, journal-flush) are masked. It starts only an empty target; the test's units declare
DefaultDependencies=no, so sysinit.target never runs. A fleet directory of the test is bind-mounted at
its own path, so units and the gate see the same files. Stopping it kills the namespace's PID 1, which
ends every process in it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NestedSystemd", "why_not"]

SYSTEMD = Path("/lib/systemd/systemd")
_MASKED = (
    "systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service", "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer", "systemd-sysusers.service", "systemd-machine-id-commit.service",
    "systemd-journal-flush.service", "systemd-update-utmp.service",
)
_BOOT = """#!/bin/bash
set -euo pipefail
# $1: the directories to keep, NUL-free and colon-separated; $2: the private directories (no o+x) among
# their ancestors, which get a traversable tmpfs so that the unit's user (nobody) reaches what is kept.
IFS=: read -r -a keeps <<< "$1"
IFS=: read -r -a opens <<< "${{2:-}}"
mount --make-rprivate /
mount -t tmpfs tmpfs /run
for i in "${{!keeps[@]}}"; do
    mkdir "/run/fleetgate-keep-$i"
    mount --bind "${{keeps[$i]}}" "/run/fleetgate-keep-$i"
done
for d in /tmp /var/tmp /var/log /var/lib/systemd /etc/systemd/system; do mount -t tmpfs tmpfs "$d"; done
# shallow first: a kept checkout, then a tmpfs over its private .tox, then the tox env inside it
while IFS= read -r entry; do
    path=${{entry#* }}
    case $entry in
        "open "*) mkdir -p "$path"; mount -t tmpfs -o mode=0755 tmpfs "$path" ;;
        keep*) i=${{entry%% *}}; i=${{i#keep}}; mkdir -p "$path"; mount --bind "/run/fleetgate-keep-$i" "$path" ;;
    esac
done < <({{
    for i in "${{!keeps[@]}}"; do printf '%s keep%s %s\n' "$(tr -cd / <<< "${{keeps[$i]}}" | wc -c)" "$i" "${{keeps[$i]}}"; done
    for o in "${{opens[@]}}"; do [ -n "$o" ] && printf '%s open %s\n' "$(tr -cd / <<< "$o" | wc -c)" "$o"; done
    }} | sort -n -s -k1,1 | cut -d' ' -f2-
)
mkdir -p /run/systemd/system
for unit in {masked}; do ln -s /dev/null "/run/systemd/system/$unit"; done
printf '[Unit]\\nDescription=fleetgate: nothing but what the test starts\\n' > /run/systemd/system/fleetgate-empty.target
export container=fleetgate
exec {systemd} --system --unit=fleetgate-empty.target --log-level=warning
"""


def why_not() -> str | None:
    """Why a nested systemd cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "a nested systemd needs root (mount and PID namespaces)"
    if not SYSTEMD.exists():
        return f"no systemd at {SYSTEMD} (apt-get install systemd)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"no {tool} (util-linux)"
    return None


@dataclass
class NestedSystemd:
    pid: int
    """systemd's PID as this machine sees it."""
    launcher: subprocess.Popen[bytes]

    @classmethod
    def start(cls, keep: Path, work: Path, timeout: float = 20.0) -> NestedSystemd:
        # The fleet, this checkout and the Python environment that holds the engine and the model: any may lie under
        # a directory the boot shadows with a tmpfs (a checkout or a tox env under /tmp).
        keeps = [str(keep), os.path.realpath(sys.prefix), str(Path(__file__).resolve().parents[2])]
        opens = sorted({str(a) for k in keeps for a in Path(k).parents if a != Path("/") and not os.stat(a).st_mode & 0o001
                        and any(Path(k2) in a.parents for k2 in keeps)})
        boot = work / "boot.sh"
        boot.write_text(_BOOT.format(masked=" ".join(_MASKED), systemd=SYSTEMD), encoding="utf-8")
        boot.chmod(0o755)
        with (work / "systemd.log").open("wb") as log:
            launcher = subprocess.Popen(
                ["unshare", "--fork", "--pid", "--mount", "--uts", "--ipc", "--mount-proc", str(boot), ":".join(keeps), ":".join(opens)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        pid = None
        while time.monotonic() < deadline and pid is None:
            if launcher.poll() is not None:
                raise RuntimeError(f"the nested systemd exited {launcher.returncode}: "
                                   f"{(work / 'systemd.log').read_text(errors='replace')[-600:]}")
            pid = _child_systemd(launcher.pid)
            time.sleep(0.1)
        if pid is None:
            launcher.kill()
            raise RuntimeError("the nested systemd did not start")
        nested = cls(pid, launcher)
        while time.monotonic() < deadline:
            state = nested.run("systemctl", "is-system-running").stdout.strip()
            if state in ("running", "degraded"):
                return nested
            time.sleep(0.2)
        nested.stop()
        raise RuntimeError(f"the nested systemd never came up (is-system-running: {state})")

    def run(self, *command: str, timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespaces (its systemctl talks to this systemd)."""
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "--", *command], capture_output=True,
                              text=True, timeout=timeout, check=check)

    def write(self, path: str, text: str) -> None:
        self.run("mkdir", "-p", str(Path(path).parent), check=True)
        subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "--", "tee", path], input=text, text=True,
                       capture_output=True, check=True, timeout=10)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        try:
            self.launcher.wait(10)
        except subprocess.TimeoutExpired:
            self.launcher.kill()
            self.launcher.wait(10)


def _child_systemd(launcher: int) -> int | None:
    """The systemd started under ``unshare`` (the launcher's child's child), found through /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if cmdline.startswith(str(SYSTEMD).encode()) and _descends(parent, launcher):
            return int(entry.name)
    return None


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(4):
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False
