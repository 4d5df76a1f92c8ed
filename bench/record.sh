#!/usr/bin/env bash
# bench/record.sh — run `locks bench` several times and print a Markdown section for
# bench/RESULTS.md: date, commit, machine, load, the exact command, every run's table,
# and which run is the median one (by the LOCKS row's speedup over dense).
#
#   bench/record.sh [RUNS] -- [locks bench options]
#   bench/record.sh 3 -- --shape llama3-8b --context 131072 --budget 2048
#
# Uses build/locks (run `make` first). Prints to stdout; nothing is written.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
bin=build/locks
[ -x "$bin" ] || { echo "record.sh: $bin not built (run make)" >&2; exit 1; }

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
echo "### $(date -u '+%Y-%m-%d %H:%M UTC') — commit ${commit}${dirty}"
echo
echo '```'
echo "\$ uname -a"; uname -a
echo "\$ lscpu | head -20"; lscpu | head -20
echo "\$ nproc; free -g | head -2"; nproc; free -g | head -2
echo '```'
echo
echo "Command (run $runs times): \`$bin bench $*\`"
echo
speedups=()
for i in $(seq 1 "$runs"); do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    out=$("$bin" bench "$@" 2>&1)
    s=$(printf '%s\n' "$out" | awk '$1 == "locks" && $6 ~ /^[0-9.]+x$/ { sub("x", "", $6); print $6; exit }')
    speedups+=("${s:-nan}")
    echo "Run $i (load average before: $load; LOCKS speedup ${s:-?}x):"
    echo
    echo '```'
    printf '%s\n' "$out"
    echo '```'
    echo
done
median=$(printf '%s\n' "${speedups[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
for i in "${!speedups[@]}"; do
    if [ "${speedups[$i]}" = "$median" ]; then echo "Median run: run $((i + 1)) (LOCKS speedup ${median}x)."; break; fi
done
