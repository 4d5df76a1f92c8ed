#!/usr/bin/env bash
# The Python package on the GPU machine: the caller-owned-pages and capturable-step GPU
# tests, the torch and transformers tests, and the transformers decode benchmark
# (bench/hf_decode.py, the full 32-layer Llama-3.1-8B config by default).
# Takes a CUDA build directory holding liblocks.so, test_gpu_ext_pages and test_gpu_plan
# (built here with -DLOCKS_CUDA=ON, or on the machine: cmake --build B --target
# locks_shared test_gpu_ext_pages test_gpu_plan). Logs go to $OUT (default /tmp/locks-out).
set -uo pipefail
B=${1:-build-cuda}
OUT=${OUT:-/tmp/locks-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export LOCKS_LIBRARY=$PWD/$B/liblocks.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 LOCKS_HF_DEVICES=cuda
rc=0
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/machine.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/machine.txt"
for t in test_gpu_plan test_gpu_ext_pages; do
  timeout 60 "$B/$t" > "$OUT/$t.log" 2>&1; r=$?
  echo "== $t exit $r: $(tail -1 "$OUT/$t.log")"
  [ $r = 0 ] || { rc=1; grep -m8 FAIL "$OUT/$t.log"; }
done
timeout 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_torch_cuda.py python/tests/test_hf.py 2>&1 \
  | tee "$OUT/pytest_gpu.log" | tail -15
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
timeout "${BENCH_TIMEOUT:-300}" python3 bench/hf_decode.py --layers "${LAYERS:-32}" --contexts "${CONTEXTS:-32768,131072}" \
  --budget 2048 --md "$OUT/hf_decode.md" 2>&1 | tee "$OUT/hf_decode.jsonl" || rc=1
exit $rc
