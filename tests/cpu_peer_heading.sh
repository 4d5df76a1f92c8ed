#!/usr/bin/env bash
# cpu_peer_heading.sh — scripts/cpu-peer.sh up to its heading, with the 1-minute load read
# from a stub (CPU_PEER_LOADAVG) and stubs for llama-bench, our CLI and the haystack:
#   quiet (0.05)                 -> status 0, the heading in the log, no SKIPPED/TINY line
#   loaded (3.50)                -> status 2, "not measuring", no heading
#   loaded, CPU_PEER_IGNORE_LOAD -> status 0, the heading says LOAD CHECK SKIPPED
#   quiet, CPU_PEER_TINY         -> status 0, the heading says TINY SETTINGS
# and its waited() on four prefill lines and the decode rows' check on three (below).
# The quiet case is the one 027fd32 fixed: a false `[ ] && echo` ended the heading's tee'd
# group with status 1, and set -e + pipefail stopped the script after its heading.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/llama-bench"
chmod +x "$tmp/bin/llama-bench"
echo "some prose" > "$tmp/doc.txt"
fails=0

# case NAME LOAD WANT_RC WANT_TEXT UNWANTED_TEXT [ENV=VALUE...]
case_() {
    local name=$1 load=$2 want_rc=$3 want=$4 unwanted=$5
    shift 5
    echo "$load 0.50 0.40 1/100 12345" > "$tmp/loadavg"
    local out=$tmp/out-$name
    rm -rf "$out"
    env CPU_PEER_LOADAVG="$tmp/loadavg" CPU_PEER_HEADING_ONLY=1 LLAMA_BIN="$tmp/bin" LOCKS=/bin/true \
        DOC="$tmp/doc.txt" OUT="$out" "$@" scripts/cpu-peer.sh smollm2 decode > "$tmp/stdout" 2> "$tmp/stderr"
    local rc=$?
    local text
    text=$(cat "$tmp/stderr" "$out"/*/log 2> /dev/null)
    if [ "$rc" != "$want_rc" ]; then
        echo "FAIL $name: status $rc, want $want_rc; stderr:"; sed 's/^/    /' "$tmp/stderr"; fails=$((fails + 1))
    elif ! grep -qF -- "$want" <<< "$text"; then
        echo "FAIL $name: output lacks '$want':"; sed 's/^/    /' <<< "$text"; fails=$((fails + 1))
    elif [ -n "$unwanted" ] && grep -qF -- "$unwanted" <<< "$text"; then
        echo "FAIL $name: output has '$unwanted':"; sed 's/^/    /' <<< "$text"; fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}

case_ quiet 0.05 0 "1-minute load at start 0.05" "SKIPPED"
case_ quiet-log 0.05 0 "# cpu-peer " "TINY SETTINGS"
case_ loaded 3.50 2 "1-minute load is 3.50 (> 1.2): something else runs; not measuring" "# cpu-peer "
case_ loaded-ignored 3.50 0 "LOAD CHECK SKIPPED (CPU_PEER_IGNORE_LOAD=1)" "" CPU_PEER_IGNORE_LOAD=1
case_ quiet-tiny 0.05 0 "TINY SETTINGS (CPU_PEER_TINY=1)" "SKIPPED" CPU_PEER_TINY=1
# cpu-peer.sh's waited(), taken from the script: a prefill whose CPU time is under 0.65 x
# threads x wall is flagged (a 2026-12-03 pp510 row, 1.5 CPU-s in 1.50 s on 2 threads,
# went into a table as 0.68x llama.cpp with nothing saying so), a normal one is not
# waited_case NAME THREADS LINE WANT (WANT "": no flag)
waited_case() {
    local got
    printf 'prompt: 510 tokens\n%s\n' "$3" > "$tmp/pp.err"
    got=$(THREADS=$2; eval "$(sed -n '/^waited_by() {/,/^}/p; /^waited() {/,/^}/p' scripts/cpu-peer.sh)"; waited "$tmp/pp.err")
    if [ "$got" = "$4" ]; then echo "ok   $1"; else echo "FAIL $1: '$got', want '$4'"; fails=$((fails + 1)); fi
}
waited_case waited-one-cpu 2 "prefill: 510 tokens in 1.50 s (339.8 tok/s; 1.5 CPU-s)" \
    " (threads waited: 1.5 CPU-s in 1.50 s wall with 2 threads)"
waited_case waited-two-cpus 2 "prefill: 510 tokens in 0.74 s (687.3 tok/s; 1.4 CPU-s)" ""
waited_case waited-one-thread 1 "prefill: 510 tokens in 1.50 s (339.8 tok/s; 1.5 CPU-s)" ""
waited_case waited-no-line 2 "no prefill here" ""
# the decode rows (decode_rows, taken from the script, with result() printing the row): the
# same rule on the ms and CPU-ms a step that `locks eval --fidelity --csv` writes
# step_case NAME THREADS MS CPU_MS WANT_FLAG (WANT "": no flag)
step_case() {
    printf 'document,layer,length,selector,budget,ms_per_step,cpu_ms_per_step,positions\n' > "$tmp/s.csv"
    printf 'doc,-1,13400,full,0,%s,%s,32\n' "$3" "$4" >> "$tmp/s.csv"
    : > "$tmp/rows.log"
    local row
    row=$(THREADS=$2 LOG=$tmp/rows.log
          result() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@"; }
          eval "$(sed -n '/^waited_by() {/,/^}/p; /^decode_rows() {/,/^}/p' scripts/cpu-peer.sh)"
          decode_rows "$tmp/s.csv" 13400 40.3 gemma3 | cut -f3)
    local want_log="  ours at 13400, dense: $3 ms/step wall, $4 CPU-ms/step (32 positions)$5"
    if [ "$row" = "decode at 13400, dense$5" ] && [ "$(cat "$tmp/rows.log")" = "$want_log" ]; then
        echo "ok   $1"
    else
        echo "FAIL $1: row '$row', want 'decode at 13400, dense$5'; log:"; sed 's/^/    /' "$tmp/rows.log"; fails=$((fails + 1))
    fi
}
step_case step-waited 2 30.04 36.97 " (threads waited: 37.0 CPU-ms a step in 30.04 ms wall with 2 threads)"
step_case step-two-cpus 2 18.36 31.74 ""
step_case step-one-thread 1 30.04 29.00 ""
[ "$fails" = 0 ] || { echo "cpu_peer_heading: $fails case(s) FAILED"; exit 1; }
echo "cpu_peer_heading: all 12 cases passed"
