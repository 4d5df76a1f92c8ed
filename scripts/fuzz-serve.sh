#!/usr/bin/env bash
# fuzz-serve.sh — build the libFuzzer harness tests/fuzz/fuzz_serve_request.c (`locks
# serve`'s JSON request parser, tools/serve/request.c, with the system cJSON) under
# ASan+UBSan and run it for SECONDS (default 60), or for RUNS executions when RUNS is
# set (e.g. RUNS=10000000).
#
#   scripts/fuzz-serve.sh [SECONDS]
#
# clang only, outside the CMake build (as scripts/fuzz-gguf.sh). Seeds:
# tests/fuzz/corpus-serve/ (read-only here); new inputs go to $FUZZ_OUT/corpus-serve/,
# findings to $FUZZ_OUT/serve-* (exit status 1). Needs libcjson-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
out=${FUZZ_OUT:-build-fuzz}
cc=${CC:-clang}
mkdir -p "$out/corpus-serve"
command -v "$cc" >/dev/null || { echo "fuzz-serve: no $cc (apt-get install clang)" >&2; exit 1; }
"$cc" -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
    -Wall -Wextra -Iinclude -Isrc -Itools/serve \
    tests/fuzz/fuzz_serve_request.c tools/serve/request.c src/status.c -lcjson -lm -o "$out/fuzz_serve_request"
limit=(-max_total_time="$secs")
[ -n "${RUNS:-}" ] && limit=(-runs="$RUNS")
set +e
"$out/fuzz_serve_request" "${limit[@]}" -max_len=2048 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/serve-" -print_final_stats=1 "$out/corpus-serve" tests/fuzz/corpus-serve
rc=$?
set -e
found=$(find "$out" -maxdepth 1 -type f -name 'serve-*' | wc -l)
echo "fuzz-serve: exit $rc, $found finding(s) in $out" >&2
[ "$rc" -eq 0 ] && [ "$found" -eq 0 ]
