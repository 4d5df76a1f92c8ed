#!/usr/bin/env bash
# gpu2122_run.sh — the device calls of issues 21 and 22's GPU side (branch gpu2122), from
# binaries built on the CPU machine for sm_90 (-DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90
# -DLOCKS_WERROR=ON), carried with the GGUF's first part; the second part goes in the next
# call on the still-warm machine. Each call sends /work/main's checkout, so everything comes
# from .gpu-stage/ (in /work/main/.git/info/exclude, named in the call's carry):
#   here:   dev/cuda/gpu2122_stage.sh BUILD_DIR    (binaries, the libraries `locks` needs that
#           the device image may lack, this script, the GGUF in two parts -> /work/main/.gpu-stage)
#   call 1: carry [".gpu-stage/a"]: bash .gpu-stage/a/gpu2122_run.sh tests
#           every GPU test that needs no model (test_gpu_cp with 1 rank: NCCL's dlopen)
#   call 2: carry [".gpu-stage/b"]: bash .gpu-stage/b/gpu2122_run.sh model serve py
#           model: SmolLM2 (part 2 + the part kept by call 1): test_gpu_model, test_gpu_verify,
#                  test_gpu_verify_exact, test_gpu_serve_seqs, demo, run (graph == kernel by kernel)
#           serve: `locks serve --backend cuda` answers greedy completions equal to
#                  `locks run --backend cuda --temp 0` (dev/cuda/gpu2122_serve.py, urllib)
#           py:    scripts/gpu-python-check.sh (torch, transformers), a short decode bench
#           quick: the GPU tests the last changes reach; pytest: torch/hf tests with the staged python/
#           probe: which call breaks test_hf.py's LocksStaticCache graph capture
#                  (dev/cuda/gpu2122_capture_probe.py)
# Run from the repository root. Logs under $OUT (the device tool's folder) as one tarball;
# the output itself is the summary.
set -uo pipefail
SD=$(cd "$(dirname "$0")" && pwd)
export KEEP=${KEEP:-/root/keep}
FOUT=${OUT:-/tmp/locks-gpu2122}
B=$KEEP/bin
W=$KEEP/logs
mkdir -p "$B" "$W" "$FOUT"
T0=$(date +%s)
rc=0
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
run_test() { # name timeout [env...]
  local t=$1 lim=$2; shift 2
  [ -x "$B/$t" ] || { say "$t: not in this build"; return; }
  env "$@" timeout "$lim" "$B/$t" > "$W/$t.log" 2>&1; local r=$?
  say "$t exit $r: $(tail -1 "$W/$t.log")"
  [ $r = 0 ] || { rc=1; grep -m8 FAIL "$W/$t.log"; }
}
if [ -f "$SD/locks-bin.tar.xz" ]; then
  rm -rf "${B:?}"/* && tar xJf "$SD/locks-bin.tar.xz" -C "$B" || { echo "cannot unpack the binaries"; exit 1; }
fi
for p in "$SD"/smollm2.part*; do [ -f "$p" ] && cp "$p" "$KEEP/"; done
[ -x "$B/locks" ] || { echo "no binaries in $B (cold machine?)"; exit 1; }
# the carried libraries (libmicrohttpd, cJSON and their closure) after the image's own CUDA ones
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B:$B/syslib:${LD_LIBRARY_PATH:-}
{ date -u; cat "$B/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$W/env.log"
MODEL=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
while [ $# -gt 0 ]; do
  stage=$1; shift
  case $stage in
  tests)
    for t in test_gpu_ops test_gpu_truncate test_gpu_fault test_gpu_ext_pages test_gpu_plan test_gpu_batch \
             test_gpu_model_ops test_gpu_serve_seqs; do
      run_test $t 150
    done
    run_test test_gpu_cp 60 LOCKS_CP_RANKS=1
    run_test test_gpu_verify 120
    run_test test_gpu_verify_exact 150
    ;;
  model)
    if [ ! -f "$MODEL" ]; then
      cat "$KEEP"/smollm2.part00 "$KEEP"/smollm2.part01 > "$MODEL" || { echo "parts missing (cold machine?)"; exit 1; }
    fi
    echo "$(cat "$SD/smollm2.sha256")  $MODEL" | sha256sum -c - || { rm -f "$MODEL"; exit 1; }
    export LOCKS_MODEL=$MODEL
    run_test test_gpu_model 240
    run_test test_gpu_serve_seqs 150
    run_test test_gpu_verify 180
    grep -E "^(verify vs|greedy, all|sampled)" "$W/test_gpu_verify.log"
    run_test test_gpu_verify_exact 150
    say "locks demo --backend cuda"
    timeout 60 "$B/locks" demo --backend cuda -m "$MODEL" > "$W/demo.log" 2>&1
    n=$(grep -c "found the needle" "$W/demo.log"); say "needle found in $n of 2 answers"
    [ "$n" -eq 2 ] || { rc=1; tail -5 "$W/demo.log"; }
    P="The three most important rules for writing reliable C code are"
    timeout 30 "$B/locks" run --backend cuda -m "$MODEL" -p "$P" -n 48 --temp 0 > "$W/run_graph.txt" 2> "$W/run_graph.err"
    timeout 30 "$B/locks" run --backend cuda --no-graph -m "$MODEL" -p "$P" -n 48 --temp 0 > "$W/run_eager.txt" 2> "$W/run_eager.err"
    head -c 300 "$W/run_graph.txt"; echo
    cmp -s "$W/run_graph.txt" "$W/run_eager.txt" && say "run: graph and kernel-by-kernel texts identical" ||
      { rc=1; say "run: texts DIFFER"; tail -3 "$W/run_graph.err" "$W/run_eager.err"; }
    ;;
  serve)
    [ -f "$MODEL" ] || { echo "no model (run the model stage first)"; exit 1; }
    say "locks serve --backend cuda vs locks run --backend cuda --temp 0"
    timeout 240 python3 "$SD/gpu2122_serve.py" "$B/locks" "$MODEL" > "$W/serve.log" 2>&1; r=$?
    tail -25 "$W/serve.log"
    [ $r = 0 ] || rc=1
    ;;
  quick) # the tests the last changes reach
    for t in test_gpu_serve_seqs test_gpu_batch test_gpu_fault test_gpu_plan test_gpu_model_ops test_gpu_verify_exact; do
      run_test $t 150
    done
    ;;
  pytest) # the torch and transformers tests with this branch's python/locks (staged beside this script)
    ln -sfn "$B" build-verify
    LOCKS_LIBRARY=$PWD/build-verify/liblocks.so PYTHONPATH=$SD/python PYTHONUNBUFFERED=1 LOCKS_HF_DEVICES=cuda \
      timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests/test_torch_cuda.py python/tests/test_hf.py \
      > "$W/pytest.log" 2>&1; r=$?
    say "pytest test_torch_cuda.py test_hf.py exit $r"; tail -4 "$W/pytest.log"; [ $r = 0 ] || rc=1
    rm -f build-verify
    ;;
  probe)
    ln -sfn "$B" build-verify
    LOCKS_LIBRARY=$PWD/build-verify/liblocks.so PYTHONPATH=$PWD/python:$PWD/python/tests PYTHONUNBUFFERED=1 \
      timeout 120 python3 "$SD/gpu2122_capture_probe.py" > "$W/probe.log" 2>&1
    say "hf capture probe exit $?"; grep -v "^  " "$W/probe.log" | tail -12
    rm -f build-verify
    ;;
  py)
    ln -sfn "$B" build-verify
    OUT=$W/py LAYERS=${LAYERS:-4} CONTEXTS=${CONTEXTS:-8192} BENCH_TIMEOUT=${BENCH_TIMEOUT:-90} \
      scripts/gpu-python-check.sh build-verify || rc=1
    rm -f build-verify
    ;;
  *) echo "unknown stage $stage"; rc=1 ;;
  esac
done
tar czf "$FOUT/gpu2122-logs.tar.gz" -C "$KEEP" logs 2>/dev/null
say "done, rc $rc"
exit $rc
