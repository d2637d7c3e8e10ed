"""An Ansible role's template rendered as the template module renders it (fleetgate/sources/ansible.py): the variable
layers, values that are templates, Ansible's own filters that are given, and what needs Ansible itself (a fact, a
vault value, another filter) as one not-judged line; a template Jinja2 refuses, or one that would not end, is one
line too."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from fleetgate.errors import InputError, NotRead
from fleetgate.sources.ansible import ansible_vars_files, render_template

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "fixtures" / "fleets" / "ansible"
UNIT = Path("roles/llama_server/templates/llama-server.service.j2")
SWAP = Path("roles/llama_swap/templates/config.yaml.j2")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    target = tmp_path / "ansible"
    shutil.copytree(FLEET, target)
    return target


def test_the_layers_lowest_first_and_the_unit_they_render(repo: Path) -> None:
    gpu = repo / "inventory" / "group_vars" / "gpu.yml"
    assert ansible_vars_files(repo, repo / UNIT, [gpu]) == [repo / "roles/llama_server/defaults/main.yml",
                                                           repo / "inventory/group_vars/all.yml", gpu]
    assert render_template(repo / UNIT, repo, [gpu]) == (
        "# Ansible managed\n[Unit]\nDescription=llama.cpp server (Qwen3-8B-Q4_K_M.gguf)\nAfter=network-online.target\n"
        "Wants=network-online.target\n\n[Service]\nType=simple\nUser=llama\n"
        "ExecStart=/opt/llama.cpp/build/bin/llama-server \\\n    --host 127.0.0.1 \\\n    --port 8080 \\\n"
        "    --model /srv/models/Qwen3-8B-Q4_K_M.gguf \\\n    --ctx-size 16384 \\\n    --n-gpu-layers 99 \\\n"
        "    --parallel 2 --jinja --flash-attn on\nRestart=on-failure\nRestartSec=5\n\n[Install]\n"
        "WantedBy=multi-user.target\n")


def test_role_vars_win_over_the_inventory(repo: Path) -> None:
    (repo / "roles/llama_server/vars").mkdir()
    (repo / "roles/llama_server/vars/main.yml").write_text("llama_server_port: 8099\n", encoding="utf-8")
    (repo / "inventory/group_vars/gpu.yml").write_text("llama_server_gpu_layers: 20\nllama_server_port: 8088\n",
                                                         encoding="utf-8")
    text = render_template(repo / UNIT, repo, [repo / "inventory/group_vars/gpu.yml"])
    assert "--port 8099 " in text and "--n-gpu-layers 20 " in text


@pytest.mark.parametrize("host_first", [False, True], ids=["group-then-host", "host-then-group"])
def test_a_host_variable_wins_over_its_groups_whatever_order_fleet_toml_lists_them(repo: Path, host_first: bool) -> None:
    # Ansible's "Variable precedence": inventory group_vars/all < group_vars/* < host_vars < role vars. The gpu
    # group asks 8192; orin's host_vars (the fixture's) 12288, which wins however ansible_vars orders the two.
    gpu, orin = repo / "inventory/group_vars/gpu.yml", repo / "inventory/host_vars/orin.yml"
    gpu.write_text("llama_server_gpu_layers: 99\nllama_server_ctx_size: 8192\n", encoding="utf-8")
    declared = [orin, gpu] if host_first else [gpu, orin]
    assert ansible_vars_files(repo, repo / UNIT, declared) == [repo / "roles/llama_server/defaults/main.yml",
                                                              repo / "inventory/group_vars/all.yml", gpu, orin]
    assert "    --ctx-size 12288 \\\n" in render_template(repo / UNIT, repo, declared)
    # without the host's file, the group's value; under role vars, the role's
    assert "    --ctx-size 8192 \\\n" in render_template(repo / UNIT, repo, [gpu])
    (repo / "roles/llama_server/vars").mkdir()
    (repo / "roles/llama_server/vars/main.yml").write_text("llama_server_ctx_size: 4096\n", encoding="utf-8")
    assert "    --ctx-size 4096 \\\n" in render_template(repo / UNIT, repo, declared)


def test_the_llama_swap_template_loops_over_the_roles_models(repo: Path) -> None:
    text = render_template(repo / SWAP, repo)
    assert text == (
        "# Ansible managed\nhealthCheckTimeout: 120\n\nmodels:\n"
        '  "coder":\n    cmd: >\n      /opt/llama.cpp/build/bin/llama-server\n      --port ${PORT}\n'
        "      --model /srv/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf\n      --ctx-size 8192\n"
        "      --n-gpu-layers 99\n    ttl: 300\n"
        '  "small":\n    cmd: >\n      /opt/llama.cpp/build/bin/llama-server\n      --port ${PORT}\n'
        "      --model /srv/models/gemma-3-4b-it-Q4_K_M.gguf\n      --ctx-size 8192\n"
        "      --n-gpu-layers 99\n    ttl: 300\n")


NEXT = "give the rendered file instead (`ansible-playbook PLAYBOOK --check --diff` shows it, or copy it from the host) and declare it"


def test_a_group_variable_not_declared_is_not_judged(repo: Path) -> None:
    with pytest.raises(NotRead) as caught:
        render_template(repo / UNIT, repo)
    assert str(caught.value) == (
        f"{repo / UNIT}:15: not judged: 'llama_server_gpu_layers' is undefined here: a fact, a registered result, "
        "hostvars or a variable of a group this host is in (declare that group's file in ansible_vars) only Ansible "
        f"gives; {NEXT}")


def test_a_jinja2_imported_again_still_refuses_an_undefined_variable(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytester's inline runs drop what they imported from ``sys.modules``; a template compiled afterwards imports a new
    ``jinja2.runtime``. An environment kept from the Jinja2 before rendered the new one's sentinel as the text
    ``missing`` (``--n-gpu-layers missing``) instead of refusing the undefined variable."""
    with pytest.raises(NotRead):
        render_template(repo / UNIT, repo)
    for name in [name for name in sys.modules if name.startswith(("jinja2", "markupsafe", "fleetgate.sources.jinja"))]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(NotRead) as caught:
        render_template(repo / UNIT, repo)
    assert "'llama_server_gpu_layers' is undefined here" in str(caught.value)


def test_a_vault_value_is_never_read_and_never_shown(repo: Path) -> None:
    (repo / "inventory/group_vars/all.yml").write_text(
        "llama_cpp_home: /opt/llama.cpp\nmodels_dir: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465666768\n",
        encoding="utf-8")
    with pytest.raises(NotRead) as caught:
        render_template(repo / UNIT, repo, [repo / "inventory/group_vars/gpu.yml"])
    text = str(caught.value)
    assert "6162636465666768" not in text
    assert text == (f"{repo / UNIT}:3: not judged: llama_server_model (roles/llama_server/defaults/main.yml) needs "
                    "models_dir, which is vault-encrypted (line 2), which only Ansible with the vault password reads; "
                    f"{NEXT}")


@pytest.mark.parametrize(("template", "expected"), [
    ("{% for x in y %}\n", "{path}:1: Unexpected end of template. Jinja was looking for the following tags: 'endfor' or "
     "'else'. The innermost block that needs to be closed is 'for'.; expected a Jinja2 template Ansible can render"),
    ("{{ 'a' * 100000000 }}", "{path}:1: the template is refused: a repetition over 1048576 items"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "{path}:1: the template is refused: loops over more than 100000 items in all"),
    ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{path}: the template recurses without end (a macro calling "
     "itself); expected one that renders"),
    ("{{ ''.__class__.__mro__ }}", "{path}:1: the template is refused: access to attribute '__class__' of 'str' object "
     "is unsafe."),
])
def test_a_template_that_would_not_render_or_not_end_is_one_line(repo: Path, template: str, expected: str) -> None:
    path = repo / "roles/llama_server/templates/bad.service.j2"
    path.write_text(template, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        render_template(path, repo)
    assert not isinstance(caught.value, NotRead)
    assert str(caught.value) == expected.format(path=path)


def test_a_filter_only_ansible_has_is_not_judged(repo: Path) -> None:
    path = repo / "roles/llama_server/templates/x.service.j2"
    path.write_text("[Service]\nExecStart=/usr/bin/llama-server --host {{ models_dir | ipaddr }}\n", encoding="utf-8")
    with pytest.raises(NotRead) as caught:
        render_template(path, repo)
    assert str(caught.value) == f"{path}:2: not judged: No filter named 'ipaddr'.; {NEXT}"
