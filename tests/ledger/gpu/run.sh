#!/bin/bash
# On the GPU machine: build llama-server 11434 for CUDA once (kept between calls on a warm machine),
# rebuild the models from their headers, run tests/ledger/gpu/boots.py, pack the logs under $OUT.
# Usage (from the repository root, through the device tool): bash tests/ledger/gpu/run.sh [ID ...]
set -u
START=$(date +%s)
BUNDLE=${BUNDLE:-build/gpu}
HERE=$(dirname "$0")
LLB=$PWD/build/llb-cuda
echo "repo $(pwd) branch $(git rev-parse --abbrev-ref HEAD 2>/dev/null) cores $(nproc)"
[ -f $BUNDLE/llama.tar.gz ] || { echo "no bundle at $BUNDLE"; ls; exit 3; }
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv | tee $OUT/gpu.txt
grep -m1 '^flags' /proc/cpuinfo >> $OUT/gpu.txt; grep -m1 'model name' /proc/cpuinfo >> $OUT/gpu.txt
mkdir -p $PWD/build/gpu-models
BUNDLE=$BUNDLE python3 - <<'PY'
import json, shutil, os
b = os.environ["BUNDLE"]
m = json.load(open(f"{b}/models/manifest.json"))
for name, e in m.items():
    dst = f"build/gpu-models/{name}.gguf"
    if "size" in e:
        shutil.copy(f"{b}/models/{name}.hdr", dst)
        os.truncate(dst, e["size"])
    else:
        shutil.copy(f"{b}/models/{e['file']}", dst)
PY
if [ ! -x $LLB/build/bin/llama-server ] || [ ! -x $LLB/build/bin/llama-fit-params ]; then
  if [ ! -f $LLB/building ]; then
    mkdir -p $LLB && tar xzf $BUNDLE/llama.tar.gz -C $LLB --strip-components=1 && touch $LLB/building
    setsid bash -c "cd $LLB && cmake -S llama.cpp -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DGGML_RPC=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 && cmake --build build -j$(nproc) --target llama-server \
      ggml-rpc-server llama-fit-params >> build.log 2>&1; echo \$? > build.rc" < /dev/null > /dev/null 2>&1 &
  fi
  while [ ! -f $LLB/build.rc ] && [ $(( $(date +%s) - START )) -lt 540 ]; do sleep 5; done
  tail -c 3000 $LLB/build.log > $OUT/build.log
  [ -f $LLB/build.rc ] || { echo "build still running after $(( $(date +%s) - START )) s"; tail -3 $LLB/build.log; exit 4; }
  echo "build rc $(cat $LLB/build.rc) at $(( $(date +%s) - START )) s"
fi
ls $LLB/build/bin
gcc -shared -fPIC -O2 -o $PWD/build/cudalog.so $HERE/cudalog.c -ldl -lpthread || exit 5
mkdir -p $PWD/build/gpu-boots
BOOTS_DEADLINE=$(( START + ${BUDGET_S:-570} )) PYTHONUNBUFFERED=1 python3 $HERE/boots.py \
  $LLB/build/bin $PWD/build/gpu-models $PWD/build/cudalog.so $PWD/build/gpu-boots "$@"
cp $PWD/build/gpu-boots/boots.json $OUT/ 2>/dev/null
tar czf $OUT/logs.tar.gz -C $PWD/build gpu-boots
ls -la $OUT
