#!/usr/bin/env bash
# cpu-peer.sh — issue 20: ours beside llama.cpp on the CPU, the same GGUF files, the same
# threads, back to back, then one markdown table (ours / llama.cpp). A speed comparison
# means something only on a quiet machine: it refuses to start when the 1-minute load is
# above 1.2 (no helper, no build, no test may run meanwhile), and before each part waits
# for the load its own earlier parts left to fall back to 1.2 (settle).
#
#   scripts/cpu-peer.sh                         # every model, every part (~20 min quiet)
#   scripts/cpu-peer.sh smollm2 decode          # pick models and/or parts
#   scripts/cpu-peer.sh gemma3 prefill rss
# Models: smollm2 (SmolLM2-135M Q4_1), gemma3 (Gemma 3 270M Q4_K_M).
# Parts:
#   decode   tok/s at depth 0 (ours `locks run --selector full`, the mean of REPS runs;
#            llama-bench -p 0 -n NGEN -r REPS)
#            and at the long depths (SmolLM2 7.5K; Gemma 13.4K, 16K, 32K): ours from one
#            prefill per depth by `locks eval --fidelity --at depth` (full, LOCKS@256,
#            LOCKS@2048, decode calls interleaved position by position over the last 64
#            positions before the depth, every 2nd, logits included; wall and CPU ms per
#            step in the log), llama-bench -p 0 -n 16 -d depth-16
#   prefill  pp512 at depth 0 (ours: a 512-token prompt, `locks run -n 1`, the mean of REPS
#            runs after a warm-up run; llama-bench -p 512 -n 0 -r REPS) and a whole 16K
#            prompt: time to first token, peak RSS
#   spec     SmolLM2 at 6.5K: `locks run -n SPEC_N --speculate 4 --budget 256 --compare --pairs
#            SPEC_PAIRS` SPEC_REPS times (each pair dense and speculative side by side from
#            the run's one prefill; the median pair of all goes into the table) (exact output
#            at sparse speed) against our own dense decode; identical output?
#   rss      peak RSS (/usr/bin/time -v) of a decode at the longest depth: ours
#            `locks run --selector locks` (SmolLM2 budget 256, Gemma 2048) vs
#            llama-bench -p 0 -n 16 -d depth
# Env: THREADS=2, REPS=3 (llama-bench repetitions; ours at depth 0 and pp512, after a warm-up run),
#   SPEC_REPS=2, SPEC_PAIRS=5 (spec: runs, pairs a run), SPEC_N=128 (spec: tokens generated;
#   `locks run`'s default, as in issue 20's reference command; until 2026-12-03 the script
#   used 64, where fewer tokens a round are accepted on this prompt), NGEN=64 (tokens at depth 0),
#   SETTLE_MAX=120 (seconds a part waits at most for the load to fall to 1.2),
#   LOCKS=build/locks, LLAMA_BIN=/work/peer/build-cpu/bin (built by scripts/llamacpp-cpu.sh
#   when llama-bench is missing there), DOC=the prose haystack (scripts/fetch-haystack.sh),
#   OUT=bench/cpu-peer (log, raw outputs, table.md; not committed),
#   CPU_PEER_IGNORE_LOAD=1 measure even when the load is high (testing the script only;
#   written into the output and the table's heading), CPU_PEER_TINY=1 tiny depths and
#   prompts (testing the script only; the numbers mean nothing).
#   For tests/cpu_peer_heading.sh only: CPU_PEER_LOADAVG=FILE read instead of /proc/loadavg,
#   CPU_PEER_HEADING_ONLY=1 stop with status 0 right after the heading.
# Prompts are the prose haystack cut to the wanted number of tokens (counted with our
# tokenizer); llama.cpp gets the same counts as depths / prompt sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
REPS=${REPS:-3}
SPEC_REPS=${SPEC_REPS:-2}
SPEC_PAIRS=${SPEC_PAIRS:-5}
SPEC_N=${SPEC_N:-128}
NGEN=${NGEN:-64}
LOCKS=${LOCKS:-build/locks}
LLAMA_BIN=${LLAMA_BIN:-/work/peer/build-cpu/bin}
OUT=${OUT:-bench/cpu-peer}
TINY=${CPU_PEER_TINY:-0}
IGNORE_LOAD=${CPU_PEER_IGNORE_LOAD:-0}

models="" parts=""
for a in "$@"; do
    case $a in
    smollm2 | gemma3) models="$models $a" ;;
    decode | prefill | spec | rss) parts="$parts $a" ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "cpu-peer: unknown model or part '$a' (models: smollm2 gemma3; parts: decode prefill spec rss)" >&2; exit 2 ;;
    esac
done
models=${models:-" smollm2 gemma3"}
parts=${parts:-" decode prefill spec rss"}

load1() { cut -d' ' -f1 "${CPU_PEER_LOADAVG:-/proc/loadavg}"; }
load=$(load1)
if awk -v l="$load" 'BEGIN { exit !(l > 1.2) }'; then
    if [ "$IGNORE_LOAD" = 1 ]; then
        echo "cpu-peer: 1-minute load $load > 1.2, measuring anyway (CPU_PEER_IGNORE_LOAD=1: not a comparison)" >&2
    else
        echo "cpu-peer: 1-minute load is $load (> 1.2): something else runs; not measuring" >&2
        echo "          (CPU_PEER_IGNORE_LOAD=1 overrides, for testing the script only)" >&2
        exit 2
    fi
fi

[ -x "$LOCKS" ] || { echo "cpu-peer: no $LOCKS (build it: cmake --build build)" >&2; exit 1; }
command -v /usr/bin/time > /dev/null || { echo "cpu-peer: needs GNU time (apt-get install time)" >&2; exit 1; }
if [ ! -x "$LLAMA_BIN/llama-bench" ]; then
    echo "cpu-peer: no $LLAMA_BIN/llama-bench: building it (scripts/llamacpp-cpu.sh)" >&2
    LLAMA_BUILD=$(dirname "$LLAMA_BIN") JOBS=${JOBS:-2} scripts/llamacpp-cpu.sh >&2
fi
LB=$LLAMA_BIN/llama-bench
DOC=${DOC:-$(scripts/fetch-haystack.sh)}

stamp_id=$(date -u +%Y%m%dT%H%M%SZ)
RUN=$OUT/$stamp_id
mkdir -p "$RUN"
LOG=$RUN/log
RES=$RUN/results.tsv # model, part, row, ours, llama, unit
: > "$RES"
log() { echo "$*" | tee -a "$LOG" >&2; }
stamp() { log "## $1 $(date -u +%FT%TZ); 1-minute load $(load1)"; }
# settle: before each part, wait (5 s at a time, up to SETTLE_MAX s, default 120) for the
# 1-minute load to fall to 1.2, the rule the run starts by: the load average trails by a
# minute, so the parts before leave ~2 behind them though nothing runs any more. Logged;
# a load still above 1.2 after the wait is logged too (something else may run). Skipped
# with CPU_PEER_IGNORE_LOAD=1 or CPU_PEER_TINY=1.
settle() {
    if [ "$IGNORE_LOAD" = 1 ] || [ "$TINY" = 1 ]; then return 0; fi
    local t=0 l0 l
    l0=$(load1)
    l=$l0
    while awk -v l="$l" 'BEGIN { exit !(l > 1.2) }' && [ "$t" -lt "${SETTLE_MAX:-120}" ]; do
        sleep 5
        t=$((t + 5))
        l=$(load1)
    done
    if [ "$t" -gt 0 ]; then log "  (waited $t s for the 1-minute load to settle: $l0 -> $l)"; fi
    if awk -v l="$l" 'BEGIN { exit !(l > 1.2) }'; then log "  (the load is still $l: something else may run)"; fi
    return 0
}
# run LABEL CMD...: the command (echoed into the log) with its stdout in $RUN/LABEL.out and
# its stderr in $RUN/LABEL.err (ours report speeds there, /usr/bin/time its RSS)
run() {
    local label=$1 rc=0
    shift
    log "+ $*"
    "$@" > "$RUN/$label.out" 2> "$RUN/$label.err" || rc=$?
    [ $rc = 0 ] || log "cpu-peer: '$label' exited with $rc; see $RUN/$label.err"
    return $rc
}
result() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$RES"; }
# ours_reps NAME PATTERN CMD...: CMD once unrecorded (NAME-warmup: as llama-bench's warm-up,
# the first run after a while pays for the page cache and cold caches), then REPS times
# (NAME-1 .. NAME-REPS); sets all (PATTERN, a sed -n script, on each recorded run's stderr)
# and mean (their mean: llama-bench's avg_ts over its -r REPS)
ours_reps() {
    local name=$1 pat=$2 r
    shift 2
    run "$name-warmup" "$@"
    all=""
    for r in $(seq 1 "$REPS"); do
        run "$name-$r" "$@"
        all="$all $(sed -n "$pat" "$RUN/$name-$r.err")"
    done
    mean=$(echo "$all" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; if (NF) printf "%.1f", s / NF }')
}

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include tools 2>/dev/null || echo "+dirty")
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512(f|bw|vl|dq)|avx512_(vnni|bf16)|avx_vnni|amx_(tile|int8|bf16))$' | tr '\n' ' ')
{
    echo "# cpu-peer $(date -u +%FT%TZ)"
    echo "commit $commit; host $(hostname); CPU $cpu ($(nproc) cores); flags: $flags"
    echo "threads $THREADS; llama-bench $LB; 1-minute load at start $load"
    cache=$(dirname "$LLAMA_BIN")/CMakeCache.txt
    if [ -f "$cache" ]; then
        echo "llama.cpp build: $(grep -E '^GGML_(NATIVE|AVX512|AVX512_VNNI|AMX_INT8):' "$cache" | tr '\n' ' ')"
    fi
    if [ "$IGNORE_LOAD" = 1 ]; then echo "LOAD CHECK SKIPPED (CPU_PEER_IGNORE_LOAD=1): these numbers are not a comparison"; fi
    if [ "$TINY" = 1 ]; then echo "TINY SETTINGS (CPU_PEER_TINY=1): script test, the numbers mean nothing"; fi
} | tee "$LOG" >&2
if [ "${CPU_PEER_HEADING_ONLY:-0}" = 1 ]; then exit 0; fi

# ntok FILE MODEL: tokens of FILE's text with our tokenizer (BOS included if the model wants
# one; at least 16); `locks run -c 16` stops right after tokenizing a longer prompt.
ntok() { { "$LOCKS" run -m "$2" -f "$1" -c 16 -n 1 2>&1 || true; } | sed -n 's/.*the prompt has \([0-9]*\) tokens.*/\1/p'; }
# doc N MODEL FILE: the haystack's first bytes, cut to about N tokens (at most N).
doc() {
    local n=$1 m=$2 f=$3 bytes=$(($1 * 4)) t
    for _ in 1 2 3 4; do
        head -c "$bytes" "$DOC" > "$f"
        t=$(ntok "$f" "$m")
        [ -n "$t" ] || { log "cpu-peer: cannot count the tokens of $f"; return 1; }
        [ "$t" -le "$n" ] && [ "$t" -ge $((n - n / 200 - 1)) ] && break
        bytes=$((bytes * n / t - (t > n ? 8 : 0)))
    done
    while [ "$t" -gt "$n" ]; do bytes=$((bytes - 16)); head -c "$bytes" "$DOC" > "$f"; t=$(ntok "$f" "$m"); done
    echo "$t"
}
# lb_ts FILE: "n_prompt n_gen n_depth avg_ts stddev_ts" per llama-bench JSON test
lb_ts() { python3 -c 'import json,sys
for t in json.load(open(sys.argv[1])): print(t["n_prompt"], t["n_gen"], t["n_depth"], t["avg_ts"], t["stddev_ts"])' "$1"; }
# waited_by WALL CPU WALL_UNIT CPU_UNIT: " (threads waited: ...)" when the CPU time is under
# 0.65 x THREADS x wall: the threads did not all run (the host took a vCPU), so the row is
# not a quiet measurement; nothing otherwise. The one rule for prefill and decode rows.
waited_by() {
    awk -v w="$1" -v c="$2" -v uw="$3" -v uc="$4" -v t="$THREADS" 'BEGIN { if (w > 0 && t > 1 && c < 0.65 * t * w)
        printf " (threads waited: %.1f %s in %.2f %s wall with %d threads)", c, uc, w, uw, t }'
}
# waited FILE: waited_by on our prefill's "prefill: N tokens in W s (...; C CPU-s)" line
waited() {
    local wc
    wc=$(sed -n 's/^prefill: [0-9]* tokens in \([0-9.]*\) s (.*; \([0-9.]*\) CPU-s).*/\1 \2/p' "$1")
    [ -z "$wc" ] || waited_by ${wc% *} ${wc#* } s CPU-s
}
# decode_rows CSV L LTS MODEL: the decode rows at depth L of `locks eval --fidelity --csv`
# (the log line of each, the result row with waited_by's flag: a 2026-12-03 run's Gemma 3
# rows at 13,400 ran 30 ms wall on 37 CPU-ms a step and went in unflagged before)
decode_rows() {
    local name ms cpu pos tps w
    while IFS=$'\t' read -r name ms cpu pos tps; do
        w=$(waited_by "$ms" "$cpu" ms "CPU-ms a step")
        awk -v L="$2" -v n="$name" -v ms="$ms" -v c="$cpu" -v p="$pos" -v w="$w" \
            'BEGIN { printf "  ours at %d, %s: %.2f ms/step wall, %.2f CPU-ms/step (%s positions)%s\n", L, n, ms, c, p, w }' >> "$LOG"
        result "$4" decode "decode at $2, $name$w" "$tps" "$3" tok/s
    done < <(python3 - "$1" "$2" << 'PY'
import csv, sys
path, L = sys.argv[1], int(sys.argv[2])
for r in csv.DictReader(open(path)):
    if r["document"] == "all" or r["layer"] != "-1" or int(r["length"]) != L:
        continue
    name = "dense" if r["selector"] == "full" else "%s@%s" % ("LOCKS" if r["selector"] == "locks" else r["selector"], r["budget"])
    ms, cpu = float(r["ms_per_step"]), float(r["cpu_ms_per_step"])
    print("%s\t%r\t%r\t%s\t%.2f" % (name, ms, cpu, r["positions"], 1000.0 / ms))
PY
    )
}
maxrss_mb() { sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' "$1" | awk '{ printf "%.0f", $1 / 1024 }'; }

for model in $models; do
    case $model in
    smollm2)
        M=$HOME/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf DEPTHS=7500 RSS_BUDGET=256 ;;
    gemma3)
        M=$HOME/.cache/locks/gemma-3-270m-q4_k_m.gguf DEPTHS=13400,16384,32768 RSS_BUDGET=2048 ;;
    esac
    PP=512 LONG=16384 SPEC=6479
    if [ "$TINY" = 1 ]; then
        DEPTHS=$([ "$model" = gemma3 ] && echo 300,600 || echo 400) PP=64 LONG=400 SPEC=400 NGEN=8 SPEC_N=8 REPS=1
    fi
    [ -f "$M" ] || { log "cpu-peer: no $M (scripts/fetch-model.sh)"; exit 1; }
    MAXD=${DEPTHS##*,}
    for part in $parts; do
        settle
        stamp "$model $part start"
        case $part in
        decode)
            ours_reps "$model-d0-ours" 's/^decode: .*(\([0-9.]*\) tok\/s.*/\1/p' \
                "$LOCKS" run -m "$M" -p "The history of the" -n "$NGEN" --temp 0 -t "$THREADS" --selector full
            log "  ours at depth 0, tok/s of each run:$all"
            ts=$mean
            run "$model-d0-llama" "$LB" -m "$M" -t "$THREADS" -p 0 -n "$NGEN" -r "$REPS" -o json
            lts=$(lb_ts "$RUN/$model-d0-llama.out" | awk '$2 > 0 { print $4 }')
            result "$model" decode "decode at depth 0, dense" "$ts" "$lts" tok/s
            doc $((MAXD + 64)) "$M" "$RUN/$model-doc-decode.txt" > /dev/null # --max-tokens cuts it exactly
            ld=$(echo "$DEPTHS" | tr ',' '\n' | awk '{ printf "%s%d", (NR > 1 ? "," : ""), $1 - 16 }')
            run "$model-long-llama" "$LB" -m "$M" -t "$THREADS" -p 0 -n 16 -d "$ld" -r "$REPS" -o json
            for L in ${DEPTHS//,/ }; do
                # one process (one prefill) per depth: a row does not inherit the state of a
                # previous depth's decode calls (the 16K rows of one shared process came out
                # below the 32K ones); 32 positions per configuration (2 apart), interleaved
                run "$model-long-ours-$L" "$LOCKS" eval --fidelity "$RUN/$model-doc-decode.txt" -m "$M" \
                    --selectors full,locks --budgets 256,2048 --max-tokens "$L" --window 64 --stride 2 --at "$L" \
                    -t "$THREADS" --csv "$RUN/$model-long-ours-$L.csv"
                lts=$(lb_ts "$RUN/$model-long-llama.out" | awk -v d=$((L - 16)) '$2 > 0 && $3 == d { print $4 }')
                decode_rows "$RUN/$model-long-ours-$L.csv" "$L" "$lts" "$model"
            done
            ;;
        prefill)
            n=$(doc "$PP" "$M" "$RUN/$model-doc-pp.txt")
            # ours as the depth-0 decode (ours_reps; until 2026-12-03 one cold run, which paid
            # for the page cache alone); the row flagged if any recorded run's threads waited
            ours_reps "$model-pp-ours" 's/^prefill: .*(\([0-9.]*\) tok\/s.*/\1/p' \
                "$LOCKS" run -m "$M" -f "$RUN/$model-doc-pp.txt" -n 1 --temp 0 -t "$THREADS" --selector full
            w=""
            for r in $(seq 1 "$REPS"); do [ -n "$w" ] || w=$(waited "$RUN/$model-pp-ours-$r.err"); done
            log "  ours pp$n, tok/s of each run:$all"
            ts=$mean
            run "$model-pp-llama" "$LB" -m "$M" -t "$THREADS" -p "$n" -n 0 -r "$REPS" -o json
            lts=$(lb_ts "$RUN/$model-pp-llama.out" | awk '$1 > 0 { print $4 }')
            [ -z "$w" ] || log "  ours pp$n:$w"
            result "$model" prefill "prefill pp$n at depth 0$w" "$ts" "$lts" tok/s
            n=$(doc "$LONG" "$M" "$RUN/$model-doc-long.txt")
            run "$model-ttft-ours" /usr/bin/time -v "$LOCKS" run -m "$M" -f "$RUN/$model-doc-long.txt" -n 1 --temp 0 \
                -t "$THREADS" --selector full
            s=$(sed -n 's/^prefill: [0-9]* tokens in \([0-9.]*\) s.*/\1/p' "$RUN/$model-ttft-ours.err")
            rss=$(maxrss_mb "$RUN/$model-ttft-ours.err")
            run "$model-ttft-llama" /usr/bin/time -v "$LB" -m "$M" -t "$THREADS" -p "$n" -n 0 -r 1 -o json
            lts=$(lb_ts "$RUN/$model-ttft-llama.out" | awk '$1 > 0 { print $4 }')
            lrss=$(maxrss_mb "$RUN/$model-ttft-llama.err")
            w=$(waited "$RUN/$model-ttft-ours.err")
            [ -z "$w" ] || log "  ours, a $n-token prompt:$w"
            result "$model" prefill "prefill of a $n-token prompt: tok/s$w" "$(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.1f", n / s }')" "$lts" tok/s
            result "$model" prefill "  time to first token" "$s" "$(awk -v n="$n" -v t="$lts" 'BEGIN { printf "%.2f", n / t }')" s
            result "$model" prefill "  peak RSS" "$rss" "$lrss" MB
            ;;
        spec)
            [ "$model" = smollm2 ] || { log "(spec: SmolLM2 only)"; continue; }
            n=$(doc "$SPEC" "$M" "$RUN/$model-doc-spec.txt")
            # SPEC_REPS runs of SPEC_PAIRS pairs, each dense then speculative side by side
            # from the run's one prefill; the pair with the median ratio goes into the
            # table, every pair into the log
            runs=""
            for r in $(seq 1 "$SPEC_REPS"); do
                run "$model-spec-ours-$r" "$LOCKS" run -m "$M" -f "$RUN/$model-doc-spec.txt" -c $((n + SPEC_N + 64)) \
                    -n "$SPEC_N" --temp 0 -t "$THREADS" --selector locks --budget 256 --speculate 4 --compare --pairs "$SPEC_PAIRS" || true
                pr=0
                while IFS= read -r line; do
                    pr=$((pr + 1))
                    dense=$(echo "$line" | sed -n 's/.*dense [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
                    spec=$(echo "$line" | sed -n 's/.*speculate K .* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
                    same=$(echo "$line" | sed -n 's/.*output \([A-Za-z]*\).*/\1/p')
                    [ -n "$dense" ] && [ -n "$spec" ] || continue
                    ratio=$(awk -v a="$spec" -v b="$dense" 'BEGIN { printf "%.3f", a / b }')
                    log "  spec run $r pair $pr: dense $dense tok/s, speculate $spec tok/s: ${ratio}x, output $same"
                    runs="$runs$ratio $spec $dense $same"$'\n'
                done < <(grep '^compare:' "$RUN/$model-spec-ours-$r.out" || true)
            done
            nr=$(printf '%s' "$runs" | grep -c . || true)
            mid=""
            [ "$nr" -gt 0 ] && mid=$(printf '%s' "$runs" | sort -n | sed -n "$(((nr + 1) / 2))p")
            all=$(printf '%s' "$runs" | awk '{ printf "%s%sx", (NR > 1 ? ", " : ""), $1 }')
            nsame=$(printf '%s' "$runs" | awk '$4 == "identical"' | wc -l)
            read -r _ m_spec m_dense _ <<< "$mid" || true
            result "$model" spec "speculate 4 @256 at $n, $SPEC_N tokens, vs our dense (median of $nr pairs: $all; output identical in $nsame of $nr)" "${m_spec:-}" "" tok/s
            result "$model" spec "  our dense decode at $n, $SPEC_N tokens (the median pair)" "${m_dense:-}" "" tok/s
            ;;
        rss)
            n=$(doc "$MAXD" "$M" "$RUN/$model-doc-rss.txt")
            run "$model-rss-ours" /usr/bin/time -v "$LOCKS" run -m "$M" -f "$RUN/$model-doc-rss.txt" -c $((n + 32)) -n 16 \
                --temp 0 -t "$THREADS" --selector locks --budget "$RSS_BUDGET"
            run "$model-rss-llama" /usr/bin/time -v "$LB" -m "$M" -t "$THREADS" -p 0 -n 16 -d "$n" -r 1 -o json
            result "$model" rss "peak RSS, decode at $n (ours LOCKS@$RSS_BUDGET)" "$(maxrss_mb "$RUN/$model-rss-ours.err")" \
                "$(maxrss_mb "$RUN/$model-rss-llama.err")" MB
            ;;
        esac
        stamp "$model $part end"
    done
done

# The table: one row per measurement; ours / llama.cpp (for RSS and seconds lower is better).
python3 - "$RES" "$LOG" > "$RUN/table.md" << 'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
head = []  # the log's heading: its lines before the first part starts
for l in open(sys.argv[2]):
    if l.startswith("## "):
        break
    head.append(l.rstrip("\n"))
print("\n".join(head))
print()
print("| model | measurement | ours | llama.cpp | ours / llama.cpp |")
print("|---|---|---:|---:|---:|")
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
for model, part, row, ours, llama, unit in rows:
    o, l = num(ours), num(llama)
    ratio = "%.2fx" % (o / l) if o is not None and l else "-"
    if part == "spec" and row.startswith("speculate"):
        dense = next((num(r[3]) for r in rows if r[0] == model and r[1] == "spec" and r[2].startswith("  our dense")), None)
        ratio = "%.2fx our dense" % (o / dense) if o is not None and dense else "-"
    fmt = lambda v, s: ("%s %s" % (s, unit)) if v is not None else "-"
    print("| %s | %s | %s | %s | %s |" % (model, row, fmt(o, ours), fmt(l, llama), ratio))
PY
{
    echo
    echo "## end $(date -u +%FT%TZ); 1-minute load $(load1)"
} >> "$LOG"
cp "$RUN/table.md" "$OUT/table.md"
cat "$RUN/table.md"
echo "(log, raw outputs: $RUN)" >&2
