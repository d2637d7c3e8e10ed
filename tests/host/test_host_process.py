"""The process-level host checks on the real reference server, and each failing on a real process started
wrong: another argv, another environment, libraries loaded from the wrong depth, nothing running."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgate.reference import free_port, llama_bin_dir
from tests.host.conftest import Process, fleet_copy, run_host_gate, run_host_gate_plugin
from tests.secrets_used import fresh

UNIT_SKIP = "SKIPPED"
NO_UNIT = {"host-unit-state": UNIT_SKIP, "host-unit-drop-ins": UNIT_SKIP, "host-unit-limits": UNIT_SKIP,
           "host-boot-persistence": UNIT_SKIP, "host-payload": "PASS",
           # the reference declares no pin gate (tests/host/test_host_memory.py declares one)
           "host-memavailable": UNIT_SKIP,
           # the reference's host declares no cards (tests/host/test_host_vram.py holds cards to the ledger)
           "host-vram-vs-ledger": UNIT_SKIP}


def test_the_reference_passes_every_host_check_that_applies(
        pytester: pytest.Pytester, tmp_path: Path, port: int, reference_on: Callable[[Path], None]) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    reference_on(fleet_toml)
    gate = run_host_gate_plugin(pytester, fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS", "host-process-env": "PASS",
                               "host-exposure": "PASS", "host-runtime-libs": "PASS"}, gate.output
    for name in ("host-unit-state", "host-unit-drop-ins", "host-unit-limits", "host-boot-persistence"):
        assert "reference has no unit in fleet.toml" in gate.checks[name][1]
    gate.plugin_result.assert_outcomes(passed=5, skipped=6)


def test_another_argv_fails_the_argv_check(pytester: pytest.Pytester, tmp_path: Path, port: int,
                                           processes: Callable[..., Process]) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port)

    def other_context(argv: list[str]) -> list[str]:
        index = argv.index("--ctx-size")
        return [*argv[:index + 1], "2048", *argv[index + 2:]]

    processes(fleet_toml, edit=other_context)
    gate = run_host_gate_plugin(pytester, fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "host-process-argv/argv-differs",
                               "host-process-env": "PASS", "host-exposure": "PASS",
                               "host-runtime-libs": "PASS"}, gate.output
    gate.plugin_result.assert_outcomes(passed=4, failed=1, skipped=6)
    # The service's summary line counts the host checks too: its "failed" is the host check's failure.
    gate.plugin_result.stdout.fnmatch_lines(["*fleetgate: per service*", "reference: 4 passed, 1 failed, 6 skipped"])


def test_an_undeclared_visibility_variable_fails_the_env_check(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    processes(fleet_toml, env={"CUDA_VISIBLE_DEVICES": "1"})
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS",
                               "host-process-env": "host-process-env/undeclared-visibility",
                               "host-exposure": "PASS", "host-runtime-libs": "PASS"}, gate.output


def test_a_declared_visibility_variable_missing_fails_the_env_check(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """The process was started before the env file declared HIP_VISIBLE_DEVICES (a restart is due)."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    processes(fleet_toml)
    env = fleet_toml.parent / "scripts" / "reference.env"
    env.write_text(env.read_text(encoding="utf-8") + "HIP_VISIBLE_DEVICES=0\n", encoding="utf-8")
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS",
                               "host-process-env": "host-process-env/visibility-differs",
                               "host-exposure": "PASS", "host-runtime-libs": "PASS"}, gate.output


def test_an_engine_variable_the_files_do_not_set_fails_the_env_check(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """Issue 34: a setting in the process environment only (llama-server reads LLAMA_ARG_N_PREDICT as --n-predict;
    vLLM's VLLM_CPU_KVCACHE_SPACE: tests/live/test_vllm_controls.py) -- every other check passes."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    processes(fleet_toml, env={"LLAMA_ARG_N_PREDICT": "4", "LLAMA_API_KEY_NOT_READ": "x"})
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS",
                               "host-process-env": "host-process-env/undeclared-engine-env",
                               "host-exposure": "PASS", "host-runtime-libs": "PASS"}, gate.output
    assert "observed: LLAMA_ARG_N_PREDICT=4\n" in gate.output, gate.output


def test_a_secret_in_the_engines_environment_is_never_printed_or_kept(
        pytester: pytest.Pytester, tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """Issue 34: a key the engine reads from its environment (llama-server's LLAMA_API_KEY for --api-key) and a token
    beside it, neither given to the gate nor named by the fleet's files: the env check names the variable, and no
    output, JUnit or report of the run holds either value."""
    key, token = fresh("sk-env-"), fresh("hf_env_")
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    processes(fleet_toml, env={"LLAMA_API_KEY": key, "HF_TOKEN": token})
    report = pytester.path / "report.json"
    gate = run_host_gate_plugin(pytester, fleet_toml, f"--junitxml={pytester.path / 'junit.xml'}",
                                "--fleetgate-report", str(report))
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS",
                               "host-process-env": "host-process-env/undeclared-engine-env",
                               "host-exposure": "PASS", "host-runtime-libs": "PASS"}, gate.output
    assert "LLAMA_API_KEY=***" in gate.output, gate.output
    kept = [path for path in pytester.path.rglob("*") if path.is_file()]
    assert report in kept and pytester.path / "junit.xml" in kept, kept
    for path in kept:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert key not in text and token not in text, path
    assert key not in gate.output and token not in gate.output


def test_a_secret_the_files_hold_a_placeholder_for_is_judged_by_its_presence_alone(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """The env file declares LLAMA_API_KEY with a placeholder (as a template, or init --from-host's ***, keeps it) and
    the engine runs with the real key: the check passes, showing no value; the file declaring it and the process
    lacking it still fails."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    env = fleet_toml.parent / "scripts" / "reference.env"
    env.write_text(env.read_text(encoding="utf-8") + "export LLAMA_API_KEY='***'\n", encoding="utf-8")
    key = fresh("sk-env-")
    running = processes(fleet_toml, env={"LLAMA_API_KEY": key})
    gate = run_host_gate(fleet_toml, only=["host-process-env"])
    assert gate.outcomes() == {"host-process-env": "PASS"}, gate.output
    assert "LLAMA_API_KEY" in gate.checks["host-process-env"][1] and key not in gate.output, gate.output
    running.stop()
    processes(fleet_toml)
    gate = run_host_gate(fleet_toml, only=["host-process-env"])
    assert gate.outcomes() == {"host-process-env": "host-process-env/engine-env-differs"}, gate.output
    assert "observed: no LLAMA_API_KEY in the process environment" in gate.output, gate.output


def test_an_engine_variable_the_files_declare_missing_fails_the_env_check(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """The env file exports an engine variable the running process lacks (started before it was declared)."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    processes(fleet_toml)
    env = fleet_toml.parent / "scripts" / "reference.env"
    env.write_text(env.read_text(encoding="utf-8") + "export LLAMA_ARG_THREADS_HTTP=2\n", encoding="utf-8")
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS",
                               "host-process-env": "host-process-env/engine-env-differs",
                               "host-exposure": "PASS", "host-runtime-libs": "PASS"}, gate.output
    assert "observed: no LLAMA_ARG_THREADS_HTTP in the process environment" in gate.output, gate.output


def test_libraries_loaded_off_the_runpath_fail_the_libs_check(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """The binary copied without its lib directory still runs (LD_LIBRARY_PATH finds the libraries
    elsewhere): the flattened-copy shape of INC-01, where the loader's fixed depth is broken."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    lonely = tmp_path / "flattened" / "llama-server"
    lonely.parent.mkdir()
    shutil.copy2(llama_bin_dir() / "llama-server", lonely)
    processes(fleet_toml, binary=lonely, env={"LD_LIBRARY_PATH": str(llama_bin_dir())})
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS", "host-process-env": "PASS",
                               "host-exposure": "PASS", "host-runtime-libs": "host-runtime-libs/not-at-depth"}, gate.output


def test_nothing_running_fails_every_process_check(tmp_path: Path, port: int,
                                                    engine: None) -> None:
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "host-process-argv/no-process",
                               "host-process-env": "host-process-env/no-process",
                               "host-exposure": "host-exposure/no-process",
                               "host-runtime-libs": "host-runtime-libs/no-process"}, gate.output


def test_the_payload_check_fails_on_each_wrong_declaration(
        tmp_path: Path, port: int, reference_on: Callable[[Path], None]) -> None:
    """The reference's real model file against a manifest that declares another sha256, another size, and a
    file the host does not have."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    reference_on(fleet_toml)
    manifest = fleet_toml.parent / "scripts" / "reference.payload"
    clean = manifest.read_text(encoding="utf-8")
    processes_pass = {"host-process-argv": "PASS", "host-process-env": "PASS", "host-exposure": "PASS",
                      "host-runtime-libs": "PASS"}
    cases = {
        "host-payload/sha256-differs": clean.replace("b179c9523d0e6a0f", "0000000000000000"),
        "host-payload/size-differs": clean.replace("98362432 ", "98362431 "),
        "host-payload/missing": clean + "4096 - /opt/fleetgate/models/not-fetched.gguf\n",
    }
    for code, text in cases.items():
        assert text != clean
        manifest.write_text(text, encoding="utf-8")
        gate = run_host_gate(fleet_toml)
        assert gate.outcomes() == {**NO_UNIT, **processes_pass, "host-payload": code}, gate.output


def test_a_bundled_rocblas_without_its_device_code_fails_the_libs_check(
        tmp_path: Path, port: int, engine: None) -> None:
    """INC-01's layout, built here: a binary whose RUNPATH is $ORIGIN/../lib and which loads a bundled
    librocblas from there, with no rocblas/library/TensileLibrary.dat beside it. The CPU reference has no
    rocBLAS, so the process is a small C program compiled for the test (it listens on the service's port);
    the check reads its real /proc/PID/maps and ELF header."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the stand-in for a ROCm build")
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "lib").mkdir()
    (build / "rocblas.c").write_text("int rocblas_create_handle(void) { return 0; }\n", encoding="utf-8")
    (build / "engine.c").write_text("""
#include <arpa/inet.h>
#include <stdlib.h>
#include <unistd.h>
int rocblas_create_handle(void);
int main(int argc, char **argv) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_port = htons(atoi(argv[1])); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1)) return 1;
    rocblas_create_handle();
    pause();
    return 0;
}
""", encoding="utf-8")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(build / "lib" / "librocblas.so.4"),
                    "-Wl,-soname,librocblas.so.4", str(build / "rocblas.c")], check=True)
    subprocess.run(["cc", "-o", str(build / "bin" / "llama-server"), str(build / "engine.c"),
                    str(build / "lib" / "librocblas.so.4"), "-Wl,-rpath,$ORIGIN/../lib"], check=True)
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    with subprocess.Popen([str(build / "bin" / "llama-server"), str(port)], stdin=subprocess.DEVNULL,
                          start_new_session=True) as process:
        try:
            deadline = time.monotonic() + 10
            while not _listening(port) and time.monotonic() < deadline:
                time.sleep(0.05)
            gate = run_host_gate(fleet_toml)
        finally:
            process.terminate()
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "host-process-argv/argv-differs",
                               "host-process-env": "PASS", "host-exposure": "PASS",
                               "host-runtime-libs": "host-runtime-libs/tensile-missing"}, gate.output


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _listen_anywhere(argv: list[str]) -> list[str]:
    index = argv.index("--host")
    return [*argv[:index + 1], "0.0.0.0", *argv[index + 2:]]


@pytest.mark.parametrize("key", [False, True], ids=["no-key", "api-key"])
def test_an_engine_listening_beyond_loopback_without_a_key_is_a_finding(
        tmp_path: Path, port: int, processes: Callable[..., Process], key: bool) -> None:
    """``--host 0.0.0.0`` with no API key: the host's listening sockets show the engine reachable from anywhere.
    With a key the exposure is guarded (the argv still differs from the files). The test binds 0.0.0.0 on its
    own free port and connects only to 127.0.0.1."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    processes(fleet_toml, edit=lambda a: [*_listen_anywhere(a), *(["--api-key", "k-test-7d41c9"] if key else [])])
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "host-process-argv/argv-differs",
                               "host-process-env": "PASS",
                               "host-exposure": "PASS" if key else "host-exposure/open-without-key",
                               "host-runtime-libs": "PASS"}, gate.output
    if key:
        assert gate.checks["host-exposure"][1].endswith(f"listens on 0.0.0.0:{port} with an API key"), gate.checks
        # the gate was given no key: the engine's own is scrubbed from the argv it shows, even as the one word
        # that differs from the files
        assert "k-test-7d41c9" not in gate.output
        assert "not rendered: 0.0.0.0 --api-key '***'" in gate.output, gate.output


def test_the_engine_is_found_at_its_declared_port_behind_a_proxy(
        tmp_path: Path, port: int, reference_on: Callable[[Path], None]) -> None:
    """--base-url through a proxy on another port: the host checks judge the engine on the declared port, and
    say once what holds the --base-url port (here this test's own process: a forwarding proxy)."""
    from tests.live.faults import FaultProxy

    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    reference_on(fleet_toml)
    with FaultProxy(f"http://127.0.0.1:{port}", "buffer") as proxy:
        gate = run_host_gate(fleet_toml, base_url=proxy.url, only=("host-process-argv", "host-process-env", "host-exposure",
                                                                      "host-runtime-libs"))
    assert gate.outcomes() == {"host-process-argv": "PASS", "host-process-env": "PASS", "host-exposure": "PASS",
                               "host-runtime-libs": "PASS"}, gate.output
    proxy_port = proxy.url.rsplit(":", 1)[1]
    notes = " ".join(note for _, note in gate.checks.values())
    assert notes.count(f"--base-url reaches port {proxy_port}, held by PID") == 1, gate.checks
    assert "a proxy or tunnel in front of the engine, not judged as it" in gate.checks["host-process-argv"][1]


def test_nothing_on_the_declared_port_behind_a_proxy_is_no_process(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """The engine runs on a port the files do not declare and is reached through a proxy: the proxy is not taken
    for the engine; the argv check names both ports."""
    from tests.live.faults import FaultProxy

    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    other = free_port()
    server = processes(fleet_toml, edit=lambda a: [*a[:a.index("--port") + 1], str(other), *a[a.index("--port") + 2:]])
    assert server.port == other
    with FaultProxy(f"http://127.0.0.1:{other}", "buffer") as proxy:
        gate = run_host_gate(fleet_toml, base_url=proxy.url, only=("host-process-argv",))
    assert gate.outcomes() == {"host-process-argv": "host-process-argv/no-process"}, gate.output


def test_an_engine_moved_to_the_base_url_port_is_judged_with_that_port(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """Nothing listens on the declared port; the rendered binary listens where --base-url points, on this host
    (the engine started on a test port): that is the engine, and the port is the one difference allowed. Any
    other difference still fails."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)

    def moved(to: int, *extra: str) -> Callable[[list[str]], list[str]]:
        def edit(argv: list[str]) -> list[str]:
            index = argv.index("--port")
            return [*argv[:index + 1], str(to), *argv[index + 2:], *extra]
        return edit

    first, second = free_port(), free_port()
    processes(fleet_toml, edit=moved(first))
    gate = run_host_gate(fleet_toml, base_url=f"http://127.0.0.1:{first}", only=("host-process-argv",))
    assert gate.outcomes() == {"host-process-argv": "PASS"}, gate.output
    assert f"listens on port {first}, not the declared {port} (--base-url)" in gate.checks["host-process-argv"][1]
    processes(fleet_toml, edit=moved(second, "--n-predict", "4"))
    gate = run_host_gate(fleet_toml, base_url=f"http://127.0.0.1:{second}", only=("host-process-argv",))
    assert gate.outcomes() == {"host-process-argv": "host-process-argv/argv-differs"}, gate.output


def _listening_on(to: int, *extra: str) -> Callable[[list[str]], list[str]]:
    def edit(argv: list[str]) -> list[str]:
        index = argv.index("--port")
        return [*argv[:index + 1], str(to), *argv[index + 2:], *extra]
    return edit


PROCESS_CHECKS = ("host-process-argv", "host-process-env", "host-exposure", "host-runtime-libs")


def test_the_engine_behind_the_base_url_is_judged_not_the_one_on_the_declared_port(
        tmp_path: Path, port: int, processes: Callable[..., Process]) -> None:
    """Issue 34: --base-url at one llama-server while another holds the declared port. The live checks talked to
    the first, so the host checks judge it (its port the one difference allowed) and name the other, not judged;
    neither is called a proxy or tunnel. Then the other way round: the server the live checks reach runs another argv
    while the declared port's one is right, and the argv check fails on the one reached."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    other = free_port()
    squatter = processes(fleet_toml, edit=lambda a: [*a, "--n-predict", "4"])
    tested = processes(fleet_toml, edit=_listening_on(other))
    gate = run_host_gate(fleet_toml, base_url=f"http://127.0.0.1:{other}", only=PROCESS_CHECKS)
    assert gate.outcomes() == dict.fromkeys(PROCESS_CHECKS, "PASS"), gate.output
    note = gate.checks["host-process-argv"][1]
    assert note.startswith(f"PID {tested.process.pid} runs the rendered argv; it listens on port {other}, not the "
                           f"declared {port} (--base-url): the port is the one difference allowed; the declared port "
                           f"{port} is held by PID {squatter.process.pid} "), note
    assert note.endswith("which the live checks did not reach: not judged"), note
    assert gate.checks["host-exposure"][1] == f"PID {tested.process.pid} listens on 127.0.0.1:{other} (loopback only)"
    assert "proxy or tunnel" not in gate.output
    squatter.stop()
    tested.stop()

    right = processes(fleet_toml)
    wrong = processes(fleet_toml, edit=_listening_on(other, "--n-predict", "4"))
    gate = run_host_gate(fleet_toml, base_url=f"http://127.0.0.1:{other}", only=PROCESS_CHECKS)
    assert gate.outcomes() == {**dict.fromkeys(PROCESS_CHECKS, "PASS"),
                               "host-process-argv": "host-process-argv/argv-differs"}, gate.output
    assert f"PID {wrong.process.pid} (the process listening on port {other}, where --base-url reaches the service)" \
        in gate.output, gate.output
    assert f"the declared port {port} is held by PID {right.process.pid}" in gate.output, gate.output
    assert "not rendered: --n-predict\n" in gate.output, gate.output  # 4 is a word of the rendered argv too


def test_a_base_url_on_another_machine_leaves_the_process_checks_not_judged(tmp_path: Path, port: int) -> None:
    """The live checks reached a host the host checks cannot read (a --base-url on another machine than the
    service's host): the process checks say so, rather than judging whatever runs on the declared host."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    gate = run_host_gate(fleet_toml, base_url="http://192.0.2.7:8080", only=PROCESS_CHECKS)
    assert gate.outcomes() == dict.fromkeys(PROCESS_CHECKS, "NOT-JUDGED"), gate.output
    assert gate.checks["host-process-argv"][1] == (
        "not judged: reference's engine process: the live checks reached http://192.0.2.7:8080 (--base-url), and "
        "192.0.2.7 is not the host local:// reads (fleet.toml address 127.0.0.1): the process they tested cannot be "
        "read there; pass --host-url reference=ssh://192.0.2.7 to read it"), gate.checks


def test_sockets_the_host_cannot_list_fail_the_exposure_check(
        tmp_path: Path, port: int, reference_on: Callable[[Path], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose ss cannot read the listening sockets (no iproute2, a restricted shell): host-exposure cannot
    see its subject, so it fails naming what it ran, never passes."""
    fleet_toml = fleet_copy(tmp_path / "fleet", port)
    reference_on(fleet_toml)
    tools = tmp_path / "tools"
    tools.mkdir()
    # Only the exposure check's listing fails; the process lookup (its own ss call) still finds the engine.
    real = shutil.which("ss")
    assert real is not None, "iproute2's ss is needed to find the engine by its port"
    (tools / "ss").write_text(f'#!/bin/sh\n[ "$*" = "-ltnpH" ] || exec {real} "$@"\n'
                              "echo 'Cannot open netlink socket: Permission denied' >&2\nexit 1\n", encoding="utf-8")
    (tools / "ss").chmod(0o755)
    import os

    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    gate = run_host_gate(fleet_toml)
    assert gate.outcomes() == {**NO_UNIT, "host-process-argv": "PASS", "host-process-env": "PASS",
                               "host-exposure": "host-exposure/sockets-unreadable",
                               "host-runtime-libs": "PASS"}, gate.output
