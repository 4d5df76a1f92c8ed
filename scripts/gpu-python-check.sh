#!/usr/bin/env bash
# The Python package on the GPU machine: the caller-owned-pages GPU test, the torch and
# transformers tests, and the transformers decode benchmark (bench/hf_decode.py).
# Takes a CUDA build directory holding liblocks.so and test_gpu_ext_pages (built here
# with -DLOCKS_CUDA=ON, or on the machine: cmake --build B --target locks_shared
# test_gpu_ext_pages). Logs go to $OUT (default /tmp/locks-out).
set -uo pipefail
B=${1:-build-cuda}
OUT=${OUT:-/tmp/locks-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export LOCKS_LIBRARY=$PWD/$B/liblocks.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 LOCKS_HF_DEVICES=cuda
rc=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/machine.txt"
"$B/test_gpu_ext_pages" > "$OUT/gpu_ext_pages.log" 2>&1 || rc=1
tail -3 "$OUT/gpu_ext_pages.log"
python3 -m pytest -q -p no:cacheprovider python/tests/test_torch_cuda.py python/tests/test_hf.py 2>&1 | tee "$OUT/pytest_gpu.log" || rc=1
python3 bench/hf_decode.py --layers "${LAYERS:-4}" --contexts "${CONTEXTS:-32768,131072}" --budget 2048 \
    --md "$OUT/hf_decode.md" 2>&1 | tee "$OUT/hf_decode.jsonl" || rc=1
exit $rc
