#!/usr/bin/env bash
# fuzz-gguf.sh — build the libFuzzer harness tests/fuzz/fuzz_gguf.c (GGUF reader +
# tokenizer-from-GGUF) with ASan+UBSan and run it for SECONDS (default 60).
#
#   scripts/fuzz-gguf.sh [SECONDS] [gguf|tokenizer|model]
#
# "tokenizer" runs tests/fuzz/fuzz_tokenizer.c instead: encode/decode round trips on the
# real SmolLM2 vocabulary ($LOCKS_MODEL or the fetch-model.sh cache; no corpus kept).
# "model" runs tests/fuzz/fuzz_model.c: the model loader over the tiny models of
# tests/fuzz/corpus-model/ (scripts/gen_model_corpus.py; new inputs in $out/corpus-model,
# crashes $out/model-*). FUZZ_RUNS=N stops after N executions instead of SECONDS.
#
# Outside the CMake build on purpose (clang only). Installs clang and its runtime with
# apt-get if clang cannot link a fuzzer. Seeds: tests/fuzz/corpus/ (read-only here);
# new inputs go to build-fuzz/corpus/, crashes to build-fuzz/crash-* (exit status 1).
# Keep a crasher as a regression: fix the reader, then copy the file into
# tests/fuzz/corpus/ (test_gguf_corpus replays every file there under ASan).
# Environment: FUZZ_OUT (default build-fuzz), CC (default clang).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
target=${2:-gguf}
out=${FUZZ_OUT:-build-fuzz}
cc=${CC:-clang}
mkdir -p "$out/corpus"

probe() {
    echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
        > "$out/probe.c"
    "$cc" -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" >/dev/null 2>&1
}
if ! command -v "$cc" >/dev/null 2>&1 || ! probe; then
    echo "fuzz-gguf: installing clang + libFuzzer runtime (apt-get)" >&2
    apt-get install -y clang >&2 || { apt-get update >&2 && apt-get install -y clang >&2; }
    if ! probe; then
        ver=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
        apt-get install -y "libclang-rt-${ver}-dev" >&2
    fi
    probe || { echo "fuzz-gguf: clang cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi

build() { # build NAME: tests/fuzz/NAME.c -> $out/NAME
    "$cc" -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
        -fno-omit-frame-pointer -Wall -Wextra \
        -Iinclude -Isrc -Itests -Itests/fuzz \
        "tests/fuzz/$1.c" src/model/gguf.c src/model/tokenizer.c src/model/tokenizer_gguf.c \
        src/model/unicode_tables.c src/model/unicode_class.c src/util.c src/status.c -lm -o "$out/$1"
}

build_model() { # the loader needs the engine and the library under it; vmath.c's CPU
    # feature probe ("avxvnni") is gcc's, so it is compiled by gcc, uninstrumented (the
    # loader does not reach it)
    gcc -std=c11 -O2 -Iinclude -Isrc -c src/vmath.c -o "$out/vmath.o" || return 1
    "$cc" -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
        -fno-omit-frame-pointer -Wall -Wextra \
        -Iinclude -Isrc -Itests -Itests/fuzz \
        tests/fuzz/fuzz_model.c $(ls src/*.c | grep -v '^src/vmath.c$') src/selectors/*.c src/model/*.c \
        "$out/vmath.o" -lm -lpthread -o "$out/fuzz_model"
}

set +e
if [ "$target" = model ]; then
    [ -x "$out/fuzz_model" ] && [ -z "${FUZZ_REBUILD:-}" ] || build_model || exit 1
    mkdir -p "$out/corpus-model"
    runs=${FUZZ_RUNS:+-runs=$FUZZ_RUNS}
    echo "fuzz-gguf: running $out/fuzz_model for ${secs}s ${runs}" >&2
    "$out/fuzz_model" -max_total_time="$secs" $runs -max_len=262144 -timeout=10 -rss_limit_mb=2048 \
        -dict=tests/fuzz/gguf.dict -artifact_prefix="$out/model-" -print_final_stats=1 \
        "$out/corpus-model" tests/fuzz/corpus-model
    rc=$?
elif [ "$target" = tokenizer ]; then
    build fuzz_tokenizer || exit 1
    mkdir -p "$out/corpus-tok"
    echo "fuzz-gguf: running $out/fuzz_tokenizer for ${secs}s" >&2
    "$out/fuzz_tokenizer" -max_total_time="$secs" -max_len=512 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$out/tok-" -print_final_stats=1 "$out/corpus-tok"
    rc=$?
else
    build fuzz_gguf || exit 1
    echo "fuzz-gguf: running $out/fuzz_gguf for ${secs}s" >&2
    "$out/fuzz_gguf" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -dict=tests/fuzz/gguf.dict -artifact_prefix="$out/" -print_final_stats=1 \
        "$out/corpus" tests/fuzz/corpus
    rc=$?
fi
set -e
crashes=$(find "$out" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' -o -name 'tok-*' -o -name 'model-*' \) | wc -l)
echo "fuzz-gguf: $target: exit $rc, $crashes artifact(s) in $out" >&2
[ "$rc" -eq 0 ] && [ "$crashes" -eq 0 ]
