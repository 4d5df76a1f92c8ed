#!/usr/bin/env bash
# serve-bench.sh — `locks serve` against llama.cpp's llama-server on the same GGUF, the
# same slots and threads, in one run (issue 22's benchmark; run it on a quiet machine,
# numbers from a shared one are not comparable). For each prompt length: N concurrent
# streaming clients (scripts/serve_bench.py), aggregate decode tok/s, time to first token
# p50/p99, then the same prompts again (prefix reuse / prompt cache).
#
#   scripts/serve-bench.sh [-m GGUF] [-np N] [-t THREADS] [--lengths 4096,8192] [-n TOKENS]
#                          [--llama-server PATH] [--locks-args "--budget 1024"]
#
# Without --llama-server (or $LLAMA_SERVER) only `locks serve` runs. llama-server: build
# it from the same sdist as scripts/llamacpp-cpu.sh (-DLLAMA_BUILD_SERVER=ON, target
# llama-server). Output: one JSON line per (server, length, round).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/fetch-model.sh)
np=4 threads=2 lengths=4096,8192 ntok=64 llama=${LLAMA_SERVER:-} locks_args=""
while [ $# -gt 0 ]; do
    case $1 in
        -m) model=$2; shift 2 ;;
        -np) np=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        -n) ntok=$2; shift 2 ;;
        --lengths) lengths=$2; shift 2 ;;
        --llama-server) llama=$2; shift 2 ;;
        --locks-args) locks_args=$2; shift 2 ;;
        *) echo "serve-bench: unknown option $1" >&2; exit 2 ;;
    esac
done
cli=${LOCKS_CLI:-build/locks}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_up() { # URL PID
    for _ in $(seq 600); do
        curl -sf "$1/health" >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}
run_one() { # LABEL LEN CMD...
    local label=$1 len=$2; shift 2
    local p; p=$(port)
    "$@" --port "$p" >/dev/null 2>"/tmp/serve-bench-$label.log" &
    local pid=$!
    if wait_up "http://127.0.0.1:$p" "$pid"; then
        python3 scripts/serve_bench.py --url "http://127.0.0.1:$p" --clients "$np" --prompt-tokens "$len" \
            --max-tokens "$ntok" --label "$label" --model "$(basename "$model")"
    else
        echo "serve-bench: $label did not start (/tmp/serve-bench-$label.log)" >&2
    fi
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
IFS=, read -ra lens <<< "$lengths"
for len in "${lens[@]}"; do
    ctx=$(( (len + ntok + 256) * np ))
    # shellcheck disable=SC2086
    run_one locks "$len" "$cli" serve -m "$model" -np "$np" -c "$ctx" -t "$threads" --alias "$(basename "$model")" $locks_args
    if [ -n "$llama" ]; then
        run_one llama-server "$len" "$llama" -m "$model" -np "$np" -c "$ctx" -t "$threads" --host 127.0.0.1
    fi
done
