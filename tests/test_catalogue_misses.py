"""The catalogue's misses, by class (issue 16, item 8): edits of the example fleet that passed every seam.

Each class has a seam (or a new branch of one) with its own failure codes; fixtures/branches holds one
mutation per code (tests/test_mutations.py runs them through the plugin against the clean table). Here each
seam is held to other members of its class -- the variants tried -- and to harmless neighbours that must
pass, each as the exact outcome of that seam on every subject it concerns (in-process, as
tests/test_catalogue.py runs the incidents):

- drafter-placement (B-FIT-13): the draft device moved under draft-mtp (ignored by the engine) or under a
  separate drafter, the --device order reversed (the MTP head follows the last layers), the drafter's layers or
  every KV cache kept on the host;
- vllm-mm-limits (B-MM-6): --limit-mm-per-prompt dropped, cut, zeroed (as a count or an options object), the
  encoder's profiling skipped;
- prompt-cache-holds-slot/checkpoints-over-cap (B-PC-5): --ctx-checkpoints raised, or the flag dropped (the
  build default 32);
- runbook-settings (B-UN-12): halogen's HALOGEN_CACHE_INPLACE off or unset, the runbook's pool not the rendered
  one, an unreadable row;
- vllm-speculative-depth (B-SP-11, B-SP-1): a depth past DFlash2's block, between the measured arms, another
  drafter, the MTP method at an unmeasured depth;
- the documented MTP arm of frank-zealot (B-SP-9) is judged at its own rung (calibration.arms), while the same
  rung without the arm (INC-74) and the arm's speculative type at the declined rung (INC-58) still fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.runner import run_seams
from tests.fleet_edits import Edit, edited_fleet
from tests.test_mutations import CLEAN

ME, MS = "scripts/frank-medium.env", "scripts/serve-frank-medium.sh"
AE, AS = "dankserver/frank-archon/frank-archon.env", "dankserver/frank-archon/serve-frank-archon.sh"
DE, DP = "scripts/frank-dragoon.env", "docs/frank-dragoon.md"
ZE = "scripts/frank-zealot.env"
DFLASH: Edit = (ME, "SPEC_TYPE=draft-mtp", "SPEC_TYPE=draft-dflash")
NGL0: Edit = (MS, 'args+=(--spec-draft-device "$SPEC_DRAFT_DEVICE")',
              'args+=(--spec-draft-device "$SPEC_DRAFT_DEVICE" --spec-draft-ngl 0)')
LIMIT = "'{\"image\": 8}'"

# (id, edits, check, subject, outcome): the outcome the check must give that subject; every other subject of
# the check keeps its clean outcome.
CASES: list[tuple[str, list[Edit], str, str, str]] = [
    # (a) where the draft context is placed, against the card its calibration was measured on
    ("draft-device-rocm0-under-mtp", [(ME, "SPEC_DRAFT_DEVICE=ROCm1", "SPEC_DRAFT_DEVICE=ROCm0")],
     "drafter-placement", "frank-medium", "drafter-placement/ignored-under-mtp"),
    ("draft-ngl-0-under-mtp", [NGL0], "drafter-placement", "frank-medium", "drafter-placement/ignored-under-mtp"),
    ("device-order-reversed", [(ME, "DEVICE=ROCm0,ROCm1", "DEVICE=ROCm1,ROCm0")],
     "drafter-placement", "frank-medium", "drafter-placement/ignored-under-mtp"),
    ("device-order-reversed-draft-device-follows", [(ME, "DEVICE=ROCm0,ROCm1", "DEVICE=ROCm1,ROCm0"),
                                                    (ME, "SPEC_DRAFT_DEVICE=ROCm1", "SPEC_DRAFT_DEVICE=ROCm0")],
     "drafter-placement", "frank-medium", "drafter-placement/off-sized-card"),
    ("dflash-on-rocm0", [DFLASH, (ME, "SPEC_DRAFT_DEVICE=ROCm1", "SPEC_DRAFT_DEVICE=ROCm0")],
     "drafter-placement", "frank-medium", "drafter-placement/off-sized-card"),
    ("dflash-device-none", [DFLASH, (ME, "SPEC_DRAFT_DEVICE=ROCm1", "SPEC_DRAFT_DEVICE=none")],
     "drafter-placement", "frank-medium", "drafter-placement/on-host"),
    ("dflash-ngl-0", [DFLASH, NGL0], "drafter-placement", "frank-medium", "drafter-placement/on-host"),
    ("no-kv-offload", [(MS, "    --metrics\n", "    --metrics\n    --no-kv-offload\n")],
     "drafter-placement", "frank-medium", "drafter-placement/on-host"),
    ("control-dflash-on-rocm1", [DFLASH], "drafter-placement", "frank-medium", "passed"),
    ("control-no-draft-device-under-mtp", [(MS, '    args+=(--spec-draft-device "$SPEC_DRAFT_DEVICE")\n', "")],
     "drafter-placement", "frank-medium", "passed"),
    # (b) vLLM's multimodal limits on a vision service
    ("mm-limit-dropped", [(AS, f"    --limit-mm-per-prompt {LIMIT}\n", "")],
     "vllm-mm-limits", "frank-archon", "vllm-mm-limits/limits-dropped"),
    ("mm-limit-cut", [(AS, LIMIT, "'{\"image\": 4}'")], "vllm-mm-limits", "frank-archon", "vllm-mm-limits/limit-differs"),
    ("mm-limit-raised", [(AS, LIMIT, "'{\"image\": 16}'")],
     "vllm-mm-limits", "frank-archon", "vllm-mm-limits/limit-differs"),
    ("mm-images-zero", [(AS, LIMIT, "'{\"image\": 0}'")], "vllm-mm-limits", "frank-archon", "vllm-mm-limits/images-off"),
    ("mm-images-zero-options", [(AS, LIMIT, "'{\"image\": {\"count\": 0}}'")],
     "vllm-mm-limits", "frank-archon", "vllm-mm-limits/images-off"),
    ("mm-video-only", [(AS, LIMIT, "'{\"video\": 1}'")], "vllm-mm-limits", "frank-archon", "vllm-mm-limits/limit-differs"),
    ("mm-profiling-skipped", [(AS, f"    --limit-mm-per-prompt {LIMIT}\n",
                               f"    --limit-mm-per-prompt {LIMIT}\n    --skip-mm-profiling\n")],
     "vllm-mm-limits", "frank-archon", "vllm-mm-limits/profiling-skipped"),
    ("control-mm-video-off-beside", [(AS, LIMIT, "'{\"image\": 8, \"video\": 0}'")],
     "vllm-mm-limits", "frank-archon", "passed"),
    ("control-mm-profiling-kept", [(AS, f"    --limit-mm-per-prompt {LIMIT}\n",
                                    f"    --limit-mm-per-prompt {LIMIT}\n    --no-skip-mm-profiling\n")],
     "vllm-mm-limits", "frank-archon", "passed"),
    # (c) context checkpoints beside the slot's state in the host prompt cache
    ("ckpt-4", [(ME, "CTX_CHECKPOINTS=0", "CTX_CHECKPOINTS=4")],
     "prompt-cache-holds-slot", "frank-medium", "prompt-cache-holds-slot/checkpoints-over-cap"),
    ("ckpt-flag-dropped", [(MS, '    --ctx-checkpoints "$CTX_CHECKPOINTS"\n', "")],
     "prompt-cache-holds-slot", "frank-medium", "prompt-cache-holds-slot/checkpoints-over-cap"),
    ("control-ckpt-3", [(ME, "CTX_CHECKPOINTS=0", "CTX_CHECKPOINTS=3")],
     "prompt-cache-holds-slot", "frank-medium", "passed"),
    ("control-ckpt-4-with-room", [(ME, "CTX_CHECKPOINTS=0", "CTX_CHECKPOINTS=4"),
                                  (ME, "CACHE_RAM=16384", "CACHE_RAM=17408")],
     "prompt-cache-holds-slot", "frank-medium", "passed"),
    # (d) halogen's cache knob against its runbook
    ("halogen-inplace-off", [(DE, "HALOGEN_CACHE_INPLACE=1", "HALOGEN_CACHE_INPLACE=0")],
     "runbook-settings", "frank-dragoon", "runbook-settings/env-differs"),
    ("halogen-inplace-unset", [(DE, "HALOGEN_CACHE_INPLACE=1\n", "")],
     "runbook-settings", "frank-dragoon", "runbook-settings/env-differs"),
    ("runbook-pool-stale", [(DP, "`401408` / `2`", "`262144` / `2`")],
     "runbook-settings", "frank-dragoon", "runbook-settings/flag-differs"),
    ("runbook-flag-dropped", [("scripts/serve-frank-dragoon.sh", ' \\\n    --slots "$SLOTS"', "")],
     "runbook-settings", "frank-dragoon", "runbook-settings/flag-differs"),
    ("runbook-row-unreadable", [(DP, "`401408` / `2`", "`401408`")],
     "runbook-settings", "frank-dragoon", "runbook-settings/bad-row"),
    ("control-reserve-knob", [(DE, "HALOGEN_HOST_RESERVE_GIB=20", "HALOGEN_HOST_RESERVE_GIB=24")],
     "runbook-settings", "frank-dragoon", "passed"),
    # (e) vLLM's speculative depth against the drafter's measured arms
    ("spec-8-past-block", [(AE, "SPEC=7", "SPEC=8")],
     "vllm-speculative-depth", "frank-archon", "vllm-speculative-depth/past-block"),
    ("spec-6-unmeasured", [(AE, "SPEC=7", "SPEC=6")],
     "vllm-speculative-depth", "frank-archon", "vllm-speculative-depth/unmeasured-depth"),
    ("spec-other-drafter", [(AE, "SPEC_MODEL=/models/Qwen3.8-27B-DFlash2-FP8", "SPEC_MODEL=/models/Qwen3.8-27B-DFlash3-FP8")],
     "vllm-speculative-depth", "frank-archon", "vllm-speculative-depth/unmeasured-depth"),
    ("spec-mtp-depth-3", [(AE, "SPEC_METHOD=dflash", "SPEC_METHOD=mtp"), (AE, "SPEC=7", "SPEC=3")],
     "vllm-speculative-depth", "frank-archon", "vllm-speculative-depth/unmeasured-depth"),
    ("control-spec-5", [(AE, "SPEC=7", "SPEC=5")], "vllm-speculative-depth", "frank-archon", "passed"),
    ("control-spec-mtp-8", [(AE, "SPEC_METHOD=dflash", "SPEC_METHOD=mtp"), (AE, "SPEC=7", "SPEC=8")],
     "vllm-speculative-depth", "frank-archon", "passed"),
]


def _table(fleet_toml: Path, checks: list[str] | None = None) -> dict[tuple[str, str], str]:
    return {(o.subject, o.check): o.code if o.outcome == "failed" and o.code else o.outcome
            for o in run_seams(fleet_toml, checks)}


@pytest.mark.parametrize(("edits", "check", "subject", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_seam_of_the_class_sees_the_variant(edits: list[Edit], check: str, subject: str, outcome: str,
                                                 tmp_path: Path) -> None:
    table = _table(edited_fleet(tmp_path, edits), [check])
    expected = {k: v for k, v in CLEAN.items() if k[1] == check}
    expected[(subject, check)] = outcome
    assert table == expected


ARM: list[Edit] = [(ZE, "\nSPEC_TYPE=\n", "\nSPEC_TYPE=draft-mtp\n"), (ZE, "UBATCH_SIZE=2048", "UBATCH_SIZE=1024"),
                   (ZE, "SPEC_DRAFT_N_MAX=2", "SPEC_DRAFT_N_MAX=2\nSPEC_PRESENCE_PENALTY=")]


def test_the_documented_mtp_arm_is_judged_at_its_own_rung(tmp_path: Path) -> None:
    """frank-zealot's env header documents its MTP arm (draft-mtp at ubatch 1024, 213.5 t/s, B-SP-9). Before
    calibration.arms, card-floor failed it as an unmeasured rung (its compute calibration is at 2048) and
    drafter-kv-fits judged it at 2048, where MTP was declined (INC-58). Now both pass: its compute is the
    ledger's never-under estimate at 1024, and its drafter is judged at 1024.

    The arm still fails one seam, for another reason that is real: every one of the build default's 32
    context checkpoints saves the MTP head's whole f16 KV of the slot (a plain KV cache ignores the partial
    flag), so a full 262,144-token slot with its checkpoints is about 39 GiB against the default 8 GiB
    --cache-ram. Shown here, not hidden: the arm is harmless to the rung logic, not to the prompt cache.
    """
    table = _table(edited_fleet(tmp_path, ARM))
    expected = dict(CLEAN)
    expected.update({("frank-zealot", c): "passed"
                     for c in ("drafter-kv-fits", "speculative-wiring", "rules-drafter-alert")})
    # drafter-placement stays a skip: no boot measured the MTP head's compute, so no card is the one it was sized for.
    expected[("frank-zealot", "prompt-cache-holds-slot")] = "prompt-cache-holds-slot/checkpoints-over-cap"
    assert table == expected


@pytest.mark.parametrize(("edits", "outcomes"), [
    # INC-74: the same rung with speculation off is no arm: still an unmeasured rung.
    ([(ZE, "UBATCH_SIZE=2048", "UBATCH_SIZE=1024")],
     {"card-floor": "card-floor/unmeasured-compute", "drafter-kv-fits": "skipped"}),
    # The arm's type at a rung no arm was measured at: judged at the calibrated 2048, as before.
    ([ARM[0], (ZE, "UBATCH_SIZE=2048", "UBATCH_SIZE=512")],
     {"card-floor": "card-floor/unmeasured-compute", "drafter-kv-fits": "drafter-kv-fits/below-floor"}),
    # INC-58: MTP at the calibrated 2048, where it was declined.
    ([ARM[0]], {"card-floor": "card-floor/below-floor", "drafter-kv-fits": "drafter-kv-fits/below-floor"}),
], ids=["inc-74-rung-without-the-arm", "arm-type-at-another-rung", "inc-58-mtp-at-2048"])
def test_rungs_that_are_no_documented_arm_still_fail(edits: list[Edit], outcomes: dict[str, str], tmp_path: Path) -> None:
    table = _table(edited_fleet(tmp_path, edits), ["card-floor", "drafter-kv-fits"])
    assert {k[1]: v for k, v in table.items() if k[0] == "frank-zealot"} == outcomes
