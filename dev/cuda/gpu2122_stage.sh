#!/usr/bin/env bash
# gpu2122_stage.sh BUILD_DIR [MAIN] — stages a CUDA build (sm_90) for dev/cuda/gpu2122_run.sh in
# MAIN/.gpu-stage/{a,b} (MAIN: the checkout the device tool sends, default /work/main; add
# /.gpu-stage/ to its .git/info/exclude). a: the binaries (locks, liblocks.so, test_gpu_*),
# the shared libraries `locks` links that are not glibc's or CUDA's (libmicrohttpd, cJSON and
# what they pull in: the device image need not have them), this script's run and serve
# scripts and the GGUF's first part; b: the scripts and the second part. The parts are cut
# so that each call carries < 64 MiB with the tree. Also this branch's python/locks (a/python).
# NO_MODEL=1: a alone, without the GGUF.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
MAIN=${2:-/work/main}
SD=$(cd "$(dirname "$0")" && pwd)
GGUF=${GGUF:-$HOME/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf}
S=$MAIN/.gpu-stage
rm -rf "$S/a" "$S/b" && mkdir -p "$S/a" "$S/b"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
(cd "$BUILD" && cp locks liblocks.so test_gpu_* "$T/")
git -C "$SD" rev-parse HEAD > "$T/COMMIT"
mkdir "$T/syslib"
ldd "$BUILD/locks" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
  libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*|libcublas*|libcudart*|libnccl*) ;;
  liblocks*) ;;
  *) cp -L "$lib" "$T/syslib/" ;;
  esac
done
# one xz stream with a dictionary above the tar's size: every binary carries liblocks, stored once
(cd "$T" && tar cf - . | xz --lzma2=preset=1,dict=320MiB -T1 > "$S/a/locks-bin.tar.xz")
for d in a b; do cp "$SD/gpu2122_run.sh" "$SD"/gpu2122_*.py "$S/$d/"; sha256sum "$GGUF" | cut -d' ' -f1 > "$S/$d/smollm2.sha256"; done
mkdir -p "$S/a/python" && cp -r "$SD/../../python/locks" "$S/a/python/" && rm -rf "$S/a/python/locks/__pycache__"
[ "${NO_MODEL:-0}" = 1 ] && { du -sh "$S/a"; exit 0; }  # a call without SmolLM2
tree=$(git -C "$MAIN" ls-files -z | du -c --files0-from=- -b | tail -1 | cut -f1)
room=$(( 64 * 1048576 - tree - 1048576 ))
first=$(( room - $(du -cb "$S/a" | tail -1 | cut -f1) ))
total=$(stat -c %s "$GGUF")
[ $(( total - first )) -lt $(( room - 65536 )) ] || { echo "binaries too large: the second part does not fit"; exit 1; }
head -c "$first" "$GGUF" > "$S/a/smollm2.part00"
tail -c +$(( first + 1 )) "$GGUF" > "$S/b/smollm2.part01"
du -sh "$S/a" "$S/b"
ls -la "$S/a" "$S/b"
