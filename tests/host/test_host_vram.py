"""``host-vram-vs-ledger``: each card's used VRAM against the ledger and the host's floor (C-H-3, C-H-5, INC-10).

The parsers are proven on real tool output: ``nvidia-smi`` recorded on an NVIDIA H200 (driver 580.159.04) by
the ledger's GPU boots (``tests/ledger/data/gpu-h200*.json``, query ``index,memory.used,memory.total``) and by
this check's own query (``tests/host/recorded/nvidia-smi-h200-*.txt``: idle, and with a process holding a
30,720 MiB ``cuMemAlloc``). No rocm-smi output was ever recorded verbatim (the seeds quote only GiB figures);
its JSON shape is rocm-smi's documented ``--showmeminfo vram --json`` object, and the branches run on the seeds'
own figures, labelled below, printed by a stand-in ``rocm-smi``/``nvidia-smi`` put first on PATH inside the
test's temp dir. This machine has neither tool, so the skip branch is the real host.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetgate.host import parse_nvidia_smi, parse_rocm_smi
from tests.host.conftest import fleet_copy, run_host_gate

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).parent / "recorded"
GIB = 1 << 30
MIB = 1 << 20
R9700 = 34208743424  # hosts.dankserver.devices: 31.86 GiB, as rocm-smi and the seeds give it


def _rocm(*used_gib: float, igpu: bool = True) -> str:
    """rocm-smi's JSON for dankserver's cards at the seeds' used-GiB figures (plus the hidden iGPU, 512 MiB,
    whose use the seeds never give: 0.1 GiB assumed)."""
    cards = {f"card{i}": {"VRAM Total Memory (B)": str(R9700), "VRAM Total Used Memory (B)": str(round(g * GIB))}
             for i, g in enumerate(used_gib)}
    if igpu:
        cards[f"card{len(used_gib)}"] = {"VRAM Total Memory (B)": str(512 * MIB), "VRAM Total Used Memory (B)": str(100 * MIB)}
    return json.dumps(cards)


# C-H-3 / E.29: the latest frank-medium boot, rocm-smi ROCm0 30.84 GiB used (headroom 1.02), ROCm1 28.86 (3.00).
C_H_3 = _rocm(30.84, 28.86)
# INC-10: ROCm1 loaded 2.46 GiB hotter than the fit (28.32 predicted, 30.78 measured) -- here 2.46 GiB over
# today's ledger of the same card.
INC_10 = _rocm(30.84, 28.86 + 2.46)
# C-H-5: frank-zealot settled at 17,922 MiB used / 6,203 free (13:19 restart); 24,576 MiB is a 3090's total.
C_H_5 = "0, 17922, 24576, 6203\n"


def _tool(directory: Path, name: str, output: str, rc: int = 0) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.out").write_text(output, encoding="utf-8")
    script = directory / name
    script.write_text(f"#!/bin/sh\ncat '{directory / (name + '.out')}'\nexit {rc}\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Put a stand-in SMI tool first on PATH for the gate's subprocess (inside this test's temp dir only)."""
    tools = tmp_path / "smi"

    def put(name: str, output: str, rc: int = 0) -> None:
        _tool(tools, name, output, rc)
        monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")

    return put


def _gate(fleet_toml: Path, service: str) -> str:
    # The 3090's host has no address in fleet.toml: the live gate wants a URL, which no host check requests.
    url = "http://127.0.0.1:7771" if service == "frank-zealot" else None
    gate = run_host_gate(fleet_toml, host_url="local://", only=("host-vram-vs-ledger",), base_url=url, endpoint=service)
    outcomes = gate.outcomes()
    assert list(outcomes) == ["host-vram-vs-ledger"], gate.output
    return outcomes["host-vram-vs-ledger"]


# --- the parsers on real output -------------------------------------------------------------------------------

def test_nvidia_smi_recorded_by_the_ledger_boots_on_an_h200() -> None:
    one = json.loads((REPO / "tests/ledger/data/gpu-h200.json").read_text())["boots"][0]
    text = one["nvidia_smi"]["smi_healthy"]["gpus"]
    assert text == "0, 795, 143771"  # the recording itself, as the boot stored it
    (card,) = parse_nvidia_smi(text)
    assert (card.index, card.used, card.total, card.free) == (0, 795 * MIB, 143771 * MIB, (143771 - 795) * MIB)
    two = json.loads((REPO / "tests/ledger/data/gpu-h200-x2.json").read_text())["boots"][0]
    text = two["nvidia_smi"]["smi_healthy"]["gpus"]
    assert text == "0, 713, 143771\n1, 723, 143771"
    assert [(c.index, c.used) for c in parse_nvidia_smi(text)] == [(0, 713 * MIB), (1, 723 * MIB)]


def test_nvidia_smi_of_this_checks_query_on_an_h200() -> None:
    idle = parse_nvidia_smi((RECORDED / "nvidia-smi-h200-idle.txt").read_text())
    assert [(c.used, c.total, c.free) for c in idle] == [(0, 143771 * MIB, 143156 * MIB)]  # 615 MiB reserved
    held = parse_nvidia_smi((RECORDED / "nvidia-smi-h200-30gib.txt").read_text())
    assert [(c.used, c.free) for c in held] == [(31247 * MIB, 111910 * MIB)]  # 30,720 MiB + the CUDA context


@pytest.mark.parametrize("text", ["0, 795", "0, 795 MiB, 143771", "index, memory.used [MiB], memory.total [MiB]", ""])
def test_nvidia_smi_that_is_not_the_query_is_one_line(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_nvidia_smi(text)
    assert "\n" not in str(info.value) and "expected" in str(info.value)


def test_rocm_smi_json() -> None:
    cards = parse_rocm_smi(C_H_3)
    assert [(c.index, round(c.used / GIB, 2), round(c.free / GIB, 2)) for c in cards][:2] == [(0, 30.84, 1.02), (1, 28.86, 3.0)]
    with pytest.raises(ValueError, match="expected 'VRAM Total Memory"):
        parse_rocm_smi('{"card0": {"GPU use (%)": "0"}}')


# --- the branches -----------------------------------------------------------------------------------------------

def test_frank_medium_at_c_h_3_passes(tmp_path: Path, smi: Callable[..., None]) -> None:
    smi("rocm-smi", C_H_3)
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-medium") == "PASS"


def test_frank_zealot_at_c_h_5_passes(tmp_path: Path, smi: Callable[..., None]) -> None:
    smi("nvidia-smi", C_H_5)
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-zealot") == "PASS"


def test_inc_10_hotter_than_the_ledger(tmp_path: Path, smi: Callable[..., None]) -> None:
    smi("rocm-smi", INC_10)
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-medium") == "host-vram-vs-ledger/hotter"


def test_an_idle_card_is_colder_than_the_ledger(tmp_path: Path, smi: Callable[..., None]) -> None:
    """The H200's real idle output (nothing loaded) for frank-zealot, whose ledger places 17.46 GiB on CUDA0: the
    engine is not on the card. The card count matches (one), the floor holds: only colder can say it."""
    smi("nvidia-smi", (RECORDED / "nvidia-smi-h200-idle.txt").read_text())
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-zealot") == "host-vram-vs-ledger/colder"


def test_the_floor_before_inc_10s_fix_is_broken(tmp_path: Path,
                                                smi: Callable[..., None]) -> None:
    """C-H-3's boot against the 1.5 GiB floor INC-10's fix lowered to 1.0: ROCm0 keeps 1.02 GiB."""
    smi("rocm-smi", C_H_3)
    old_floor: Callable[[str], str] = lambda t: t.replace("card_floor_gib = 1.0\n", "card_floor_gib = 1.5\n")  # noqa: E731
    fleet_toml = fleet_copy(tmp_path / "fleet", 8178, {"fleet.toml": old_floor})
    assert _gate(fleet_toml, "frank-medium") == "host-vram-vs-ledger/below-floor"


def test_a_card_missing_from_the_driver(tmp_path: Path, smi: Callable[..., None]) -> None:
    smi("rocm-smi", _rocm(30.84))
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-medium") == "host-vram-vs-ledger/card-count"


def test_output_that_is_not_the_json_asked_for(tmp_path: Path, smi: Callable[..., None]) -> None:
    """rocm-smi's plain table (what an old rocm-smi prints when --json is not honoured)."""
    smi("rocm-smi", "GPU[0]          : VRAM Total Memory (B): 34208743424\nGPU[0]          : VRAM Total Used Memory (B): 33114"
                    "\n")
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-medium") == "host-vram-vs-ledger/unparseable"


def test_a_tool_that_cannot_reach_the_driver(tmp_path: Path, smi: Callable[..., None]) -> None:
    smi("nvidia-smi", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                      "latest NVIDIA driver is installed and running.\n", rc=9)
    assert _gate(fleet_copy(tmp_path / "fleet", 8178), "frank-zealot") == "host-vram-vs-ledger/smi-failed"


def test_no_smi_tool_on_this_host_skips(tmp_path: Path) -> None:
    if any((Path(d) / t).exists() for d in os.environ["PATH"].split(os.pathsep) for t in ("nvidia-smi", "rocm-smi")):
        pytest.skip("this machine has an SMI tool: the no-tool branch needs a host without one")
    gate = run_host_gate(fleet_copy(tmp_path / "fleet", 8178), host_url="local://", only=("host-vram-vs-ledger",),
                         endpoint="frank-medium")
    assert gate.outcomes() == {"host-vram-vs-ledger": "SKIPPED"}, gate.output
    assert "neither nvidia-smi nor rocm-smi" in gate.checks["host-vram-vs-ledger"][1]


def test_the_reference_has_no_cards_to_hold(tmp_path: Path) -> None:
    gate = run_host_gate(fleet_copy(tmp_path / "fleet", 8178), only=("host-vram-vs-ledger",))
    assert gate.outcomes() == {"host-vram-vs-ledger": "SKIPPED"}, gate.output
    assert "declares no serving device" in gate.checks["host-vram-vs-ledger"][1]
