#!/usr/bin/env bash
# A reader's property tests for a wall-clock budget, not an example count: rounds of the fuzz profile (10 000
# examples per property), each with its own seed, until SECONDS have passed. Stops at the first round that fails,
# with its seed, so the failure can be run again (pytest ... --hypothesis-seed=SEED).
# Usage: bash tests/fuzz/soak.sh tests/fuzz/test_compose_reader.py 600 [PYTHON]
set -uo pipefail
module=$1
budget=$2
python=${3:-python3}
deadline=$((SECONDS + budget))
round=0
examples=0
while [ "$SECONDS" -lt "$deadline" ]; do
    round=$((round + 1))
    seed=$((1000 * round + RANDOM))
    if ! out=$("$python" -m pytest "$module" -q -p no:cacheprovider --hypothesis-profile=fuzz \
            --hypothesis-seed="$seed" --hypothesis-show-statistics 2>&1); then
        printf '%s\n' "$out" | tail -40
        echo "soak: $module failed in round $round (--hypothesis-seed=$seed)"
        exit 1
    fi
    passing=$(printf '%s\n' "$out" | grep -oE '[0-9]+ passing,' | awk '{s += $1} END {print s + 0}')
    examples=$((examples + passing))
done
echo "soak: $module: $round rounds, $examples passing examples, no failure in ${SECONDS}s"
