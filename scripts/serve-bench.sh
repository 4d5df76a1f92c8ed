#!/usr/bin/env bash
# serve-bench.sh — `locks serve` against llama.cpp's llama-server on the same GGUF, the
# same slots and threads, in one run: every target of issue 22's "Benchmark" section.
# Run it on a quiet machine; numbers from a shared one are not comparable.
#
#   scripts/serve-bench.sh [--llama-server PATH] [-np N] [-t THREADS] [-n TOKENS]
#                          [--lengths 4096,8192] [--gemma-len 16384] [--restore-len 8192]
#                          [--locks-args "--budget 1024"] [--parts decode,gemma,restore] [-o FILE]
#
# Parts (each server started fresh, then stopped; one JSON line per result):
#  1. SmolLM2, -np N streaming clients with different prompts of each --lengths size:
#     aggregate decode tok/s, time to first token p50/p99 ("first"), then the same
#     prompts again ("again": the second request on the same document; llama-server has
#     its prompt cache, ours the shared prefix pages / slot reuse).
#  2. Gemma 3, one client, a --gemma-len document asked twice: TTFT first vs again
#     (target: again <= 5% of first).
#  3. SmolLM2, --restore-len: save slot 0 and time restoring it (target: <= 1 s).
# --parts picks some of the three (default all: decode,gemma,restore).
# Ours runs with LOCKS (`--selector locks`, default budget) unless --locks-args says more.
#
# The header records the CPU, the commit, the 1-minute load before and after. It refuses
# to start above a 1-minute load of 1.2; SERVE_BENCH_MAX_LOAD overrides that (for testing
# the script only: the override is written into the output). Without --llama-server (or
# $LLAMA_SERVER) only `locks serve` runs. Output: stdout, and -o FILE if given.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/fetch-model.sh)
gemma=$(scripts/fetch-model.sh gemma3-270m)
np=4 threads=2 lengths=4096,8192 glen=16384 rlen=8192 ntok=64 llama=${LLAMA_SERVER:-} locks_args="" out=""
parts=decode,gemma,restore
while [ $# -gt 0 ]; do
    case $1 in
        -m) model=$2; shift 2 ;;
        --gemma) gemma=$2; shift 2 ;;
        -np) np=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        -n) ntok=$2; shift 2 ;;
        --lengths) lengths=$2; shift 2 ;;
        --gemma-len) glen=$2; shift 2 ;;
        --restore-len) rlen=$2; shift 2 ;;
        --llama-server) llama=$2; shift 2 ;;
        --locks-args) locks_args=$2; shift 2 ;;
        --parts) parts=$2; shift 2 ;;
        -o) out=$2; shift 2 ;;
        *) echo "serve-bench: unknown option $1" >&2; exit 2 ;;
    esac
done
for p in ${parts//,/ }; do
    case $p in decode | gemma | restore) ;; *) echo "serve-bench: unknown part '$p' (decode, gemma, restore)" >&2; exit 2 ;; esac
done
want() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }
[ -n "$out" ] && exec > >(tee "$out")
cli=${LOCKS_CLI:-build/locks}
max_load=${SERVE_BENCH_MAX_LOAD:-1.2}
load1() { cut -d' ' -f1 /proc/loadavg; }
load=$(load1)
if awk -v l="$load" -v m="$max_load" 'BEGIN { exit !(l > m) }'; then
    echo "serve-bench: 1-minute load $load is above $max_load: run it on a quiet machine" >&2
    exit 1
fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "{\"serve_bench\": \"start\", \"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)\", \"cpu\": \"$cpu\", \"nproc\": $(nproc), \"threads\": $threads, \"slots\": $np, \"parts\": \"$parts\", \"load_before\": $load, \"max_load\": $max_load$( [ -n "${SERVE_BENCH_MAX_LOAD:-}" ] && echo ", \"max_load_override\": \"SERVE_BENCH_MAX_LOAD=$SERVE_BENCH_MAX_LOAD (testing the script only: not a result)\"" ), \"llama_server\": \"${llama:-none}\"}"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_up() { # URL PID
    for _ in $(seq 1200); do
        curl -sf "$1/health" >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}
slots_dir=$(mktemp -d /tmp/serve-bench-slots.XXXXXX)
trap 'rm -rf "$slots_dir"' EXIT
# run_one LABEL MODEL_NAME BENCH_ARGS -- CMD...: starts CMD on a free port, runs
# serve_bench.py with BENCH_ARGS against it, stops it.
run_one() {
    local label=$1 name=$2 bargs=$3; shift 4
    local p; p=$(port)
    "$@" --port "$p" >/dev/null 2>"/tmp/serve-bench-$label.log" &
    local pid=$!
    if wait_up "http://127.0.0.1:$p" "$pid"; then
        # shellcheck disable=SC2086
        python3 scripts/serve_bench.py --url "http://127.0.0.1:$p" --label "$label" --model "$name" $bargs ||
            echo "{\"label\": \"$label\", \"error\": \"serve_bench.py failed (its message above)\"}"
    else
        echo "serve-bench: $label did not start (/tmp/serve-bench-$label.log)" >&2
    fi
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
# both MODEL CLIENTS LEN CTX_TOKENS EXTRA_BENCH_ARGS: ours, then llama-server
both() {
    local m=$1 clients=$2 len=$3 ctx=$4 extra=$5 name; name=$(basename "$1")
    local bargs="--clients $clients --prompt-tokens $len --max-tokens $ntok $extra"
    # shellcheck disable=SC2086
    run_one "locks-${name%%.*}-$len" "$name" "$bargs" -- "$cli" serve -m "$m" -np "$clients" -c "$ctx" -t "$threads" \
        --alias "$name" --slot-save-path "$slots_dir" $locks_args
    if [ -n "$llama" ]; then
        run_one "llama-server-${name%%.*}-$len" "$name" "$bargs" -- "$llama" -m "$m" -np "$clients" -c "$ctx" -t "$threads" \
            --host 127.0.0.1 --slot-save-path "$slots_dir/"
    fi
}
IFS=, read -ra lens <<< "$lengths"
if want decode; then
    for len in "${lens[@]}"; do # 1. decode and TTFT, 4 slots
        both "$model" "$np" "$len" $(( (len * 21 / 20 + ntok + 256) * np )) ""
    done
fi
want gemma && both "$gemma" 1 "$glen" $(( glen * 21 / 20 + ntok + 256 )) "" # 2. Gemma 3 asked twice
want restore && both "$model" 1 "$rlen" $(( rlen * 21 / 20 + ntok + 256 )) "--slot-restore bench-$rlen.slot" # 3. slot restore
echo "{\"serve_bench\": \"end\", \"date\": \"$(date -u +%FT%TZ)\", \"load_after\": $(load1)}"
