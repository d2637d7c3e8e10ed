"""Harmless variants pass: spellings the engine and the file's reader treat alike give the clean fleet's verdicts.

Each variant is an edit to a copy of the example fleet that changes nothing the engine or the unit sees
(quoting, comments, flag order, long and short spellings, ``--flag=value`` where the engine reads it:
vLLM's argparse does, llama-server 11434 does not); every seam must keep its
clean outcome (tests/test_mutations.py's CLEAN). ``[[ -f ]]`` file tests and an engine exec'd by absolute
path belong to the render's sandbox (branch sandbox). The last cases are misattributions fixed here:
they must fail, or skip, on the right check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.runner import run_seams
from tests.fleet_edits import Edit, edited_fleet
from tests.test_mutations import CLEAN

ME, ZE, MS = "scripts/frank-medium.env", "scripts/frank-zealot.env", "scripts/serve-frank-medium.sh"
ZS, AS = "scripts/serve-frank-zealot.sh", "dankserver/frank-archon/serve-frank-archon.sh"
DS = "scripts/deploy.sh"


VARIANTS: dict[str, list[Edit]] = {
    # systemd's EnvironmentFile strips one level of double or single quotes.
    "systemd-env-double-quotes": [(ME, "CTX_SIZE=393216", 'CTX_SIZE="393216"')],
    "systemd-env-single-quotes": [(ME, "PARALLEL=2", "PARALLEL='2'")],
    # bash sources zealot's env file: quotes and trailing comments are bash's.
    "bash-env-quotes": [(ZE, "PARALLEL=3", 'PARALLEL="3"')],
    "bash-env-trailing-comment": [(ZE, "CTX_SIZE=786432", "CTX_SIZE=786432  # 3 x 262144")],
    "env-full-line-comments": [(ME, "CACHE_RAM=16384", "# the cap: one slot's state, rounded up\n\n   # indented\nCACHE_RAM=16384")],
    "flag-order": [(MS, '    --ctx-size "$CTX_SIZE"\n    --parallel "${PARALLEL:-2}"\n',
                    '    --parallel "${PARALLEL:-2}"\n    --metrics\n    --ctx-size "$CTX_SIZE"\n')],
    "short-spellings": [(MS, '--ctx-size "$CTX_SIZE"', '-c "$CTX_SIZE"'),
                        (MS, '--parallel "${PARALLEL:-2}"', '-np "${PARALLEL:-2}"'),
                        (MS, '--ubatch-size "$UBATCH_SIZE"', '-ub "$UBATCH_SIZE"'),
                        (MS, '--tensor-split "$TENSOR_SPLIT"', '-ts "$TENSOR_SPLIT"'),
                        (MS, '--cache-type-k "$CACHE_TYPE_K"', '-ctk "$CACHE_TYPE_K"'),
                        (MS, '--gpu-layers "$GPU_LAYERS"', '-ngl "$GPU_LAYERS"')],
    # llama-server turns '_' into '-' in a long flag's name (common/arg.cpp, common_params_parse_ex).
    "underscore-spellings": [(MS, '--ctx-size "$CTX_SIZE"', '--ctx_size "$CTX_SIZE"'),
                             (MS, '--cache-ram "$CACHE_RAM"', '--cache_ram "$CACHE_RAM"')],
    "vllm-short-and-equals": [(AS, '--tensor-parallel-size "$TP"', '-tp "$TP"'),
                              (AS, '--max-num-seqs "$MAXSEQS"', '--max-num-seqs="$MAXSEQS"')],
    # The docs' shapes (B-DOC-4): the multiplication sign or 'x', with or without thousands separators; a line that names two
    # services (history, a comparison) is about neither.
    "docs-shape-spellings": [("docs/index.md", "frank-zealot serves 3 x 262,144", "frank-zealot serves 3\u00d7262144"),
                             ("docs/index.md", "llama.cpp, 2 x 196,608", "llama.cpp, 2 \u00d7 196608")],
    "docs-line-naming-two-services": [("docs/index.md", "## Topology", "frank-zealot took the compaction hub over from "
                                       "frank-medium's 1 x 262,144 llama.cpp era.\n\n## Topology")],
    # A deploy probe by name or by the host's own address reaches an engine that binds every interface.
    "deploy-probe-spellings": [("scripts/deploy.probes", "frank-zealot http://127.0.0.1:7771/health", "frank-zealot http://localhost:7771/health"),
                               ("scripts/deploy.probes", "frank-archon http://127.0.0.1:7770/health", "frank-archon http://192.168.0.235:7770/health")],
    # The deploy script's payload defaults as bash evaluates them: quoting, ${VAR-x} and ${VAR:=x} for ${VAR:-x},
    # a gate quoted with printf %q after an ssh option, [ ] for test.
    "deploy-default-spellings": [
        (DS, "LLM_ZEALOT_MODEL_FILE=${LLM_ZEALOT_MODEL_FILE:-/home/dank/models/Ternary-Bonsai-2-9B-GGUF/Ternary-Bonsai-2-9B-PQ2_0.gguf}",
         'LLM_ZEALOT_MODEL_FILE="${LLM_ZEALOT_MODEL_FILE-"/home/dank/models/Ternary-Bonsai-2-9B-GGUF/Ternary-Bonsai-2-9B-PQ2_0.gguf"}"'),
        (DS, "LLM_ZEALOT_MMPROJ=${LLM_ZEALOT_MMPROJ:-/home/dank/models/Ternary-Bonsai-2-9B-GGUF/mmproj-Q8_0.gguf}",
         ': "${LLM_ZEALOT_MMPROJ:=/home/dank/models/Ternary-Bonsai-2-9B-GGUF/mmproj-Q8_0.gguf}"  # the 9B cutover'),
        (DS, '    ssh "$target" "test -e ${file@Q}" ||', '    ssh -o BatchMode=yes "$target" "[ -f $(printf %q "$file") ]" ||'),
    ],
    # halogen's shape is read through fleet.toml's shape_flags wherever the flags stand.
    "dragoon-flag-order": [("scripts/serve-frank-dragoon.sh", '    --kv-positions "$KV_POSITIONS" \\\n    --slots "$SLOTS"',
                            '    --slots "$SLOTS" \\\n    --kv-positions "$KV_POSITIONS"')],
    "zealot-flag-order": [(ZS, '    --ctx-size "$CTX_SIZE"\n    --parallel "$PARALLEL"\n',
                           '    --parallel "$PARALLEL"\n    --ctx-size "$CTX_SIZE"\n')],
}


def _table(fleet_toml: Path) -> dict[tuple[str, str], str]:
    return {(o.subject, o.check): o.code if o.outcome == "failed" and o.code else o.outcome for o in run_seams(fleet_toml)}


@pytest.mark.parametrize("name", VARIANTS)
def test_harmless_variant_gives_the_clean_verdicts(name: str, tmp_path: Path) -> None:
    assert _table(edited_fleet(tmp_path, VARIANTS[name])) == CLEAN


# Misattributions the catalogue fixed: the right check and code, nothing else.
CAUSES: dict[str, tuple[list[Edit], dict[tuple[str, str], str]]] = {
    # A misspelt shape flag is named as such, not reported as 'no measured boot' on the CHUNK line.
    "vllm-misspelt-flag-is-not-a-shape": (
        [(AS, '--max-num-seqs "$MAXSEQS"', '--max-num-seqz "$MAXSEQS"')],
        {("frank-archon", "vllm-memory-knobs"): "vllm-memory-knobs/misspelt-shape-flag",
         ("frank-archon", "vllm-argv"): "vllm-argv/unknown-flag",
         # vLLM is left at its default sequence count: no shape for the docs to be held to.
         ("frank-archon", "docs-shapes"): "skipped"},
    ),
    # llama-server reads no '--flag=value' (common/arg.cpp looks the whole token up): refused, as the engine does.
    "llama-flag-equals-value-is-refused": (
        [(ZS, "    --host 0.0.0.0\n", "    --host=0.0.0.0\n")],
        # llama-server reads no --host from it (and refuses to start): engine-auth sees its default, 127.0.0.1
        {("frank-zealot", "engine-accepts-argv"): "engine-accepts-argv/rejected-flag",
         ("frank-zealot", "engine-auth"): "skipped"},
    ),
    # A split change that starves the drafter's card is the split's doing: card-floor names the nearest
    # step that clears every floor; the drafter check (advice about the drafter's window) stays quiet.
    "split-change-is-not-the-drafter": (
        [(ME, "TENSOR_SPLIT=35,30", "TENSOR_SPLIT=33,32")],
        {("frank-medium", "card-floor"): "card-floor/below-floor", ("frank-medium", "card-balance"): "card-balance/gap-over-slack"},
    ),
    # The serve script that drops --kv-cache-memory with KV_MEM=0 set is at fault, not the env file.
    "kv-memory-dropped-by-the-script": (
        [(AS, 'if [ -n "$KV_MEM" ]; then', 'if [ "$KV_MEM" != 0 ]; then')],
        {("frank-archon", "vllm-memory-knobs"): "vllm-memory-knobs/kv-memory-omitted"},
    ),
}


@pytest.mark.parametrize("name", CAUSES)
def test_cause_named_right(name: str, tmp_path: Path) -> None:
    edits, changes = CAUSES[name]
    assert _table(edited_fleet(tmp_path, edits)) == {**CLEAN, **changes}
