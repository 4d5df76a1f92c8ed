#!/usr/bin/env bash
# gemma3-speed.sh — issue 14: decode speed of Gemma 3 270M (Q4_K_M) at 16K and 32K on the
# CPU, full vs LOCKS (budget 2048) vs llama.cpp CPU, same GGUF, same thread count, in one
# run (one after the other; run it on a machine as quiet as you can get, the log records
# the load before and after each part).
#
#   scripts/gemma3-speed.sh              # both parts, then the side-by-side table
#   PARTS=llama scripts/gemma3-speed.sh  # or PARTS=ours; `table` only: PARTS=none
#
# Ours: `locks eval --fidelity` with one forward prefill to 32K (--window: no logits
# before each window), then at the 16 positions (every 2nd of the 32 before 16,384 and
# before 32,768) one decode step per configuration (full, locks@2048) at that position's
# context, configurations interleaved position by position; ms/step = mean wall time of
# one decode call (logits over the 262,144-token vocabulary included), CPU-ms = process
# CPU time of that call (both threads).
# llama.cpp: `llama-bench -p 0 -n 16 -d D` (D = 16,368 and 32,752: the 16 generated tokens
# sit at the positions just before 16K and 32K, as ours; the depth is prefilled once and
# restored for each of the 5 repetitions), tok/s of generating 16 tokens.
# Env: G, LLAMA_BIN, LOCKS, THREADS=2, NICE=0, DOC, OUT=eval/gemma3.
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-$HOME/.cache/locks/gemma-3-270m-q4_k_m.gguf}
LLAMA_BIN=${LLAMA_BIN:-/work/peer/build-cpu/bin}
LOCKS=${LOCKS:-build/locks}
THREADS=${THREADS:-2}
NICE=${NICE:-0}
DOC=${DOC:-$HOME/.cache/locks/haystack/prose.txt}
OUT=${OUT:-eval/gemma3}
PARTS=${PARTS:-llama,ours}
COMMIT=$(git rev-parse --short HEAD)
mkdir -p "$OUT"
stamp() { echo "$1 $(date -u +%FT%TZ) commit $COMMIT; $(uptime)" | tee -a "$OUT/speed.log"; }

case ",$PARTS," in *,llama,*)
    stamp "llama.cpp start"
    echo "+ llama-bench -m $G -t $THREADS -p 0 -n 16 -d 16368,32752 -r 5 -o json" | tee -a "$OUT/speed.log"
    nice -n "$NICE" "$LLAMA_BIN/llama-bench" -m "$G" -t "$THREADS" -p 0 -n 16 -d 16368,32752 -r 5 -o json \
        > "$OUT/speed_llama.json" 2>> "$OUT/speed.log"
    stamp "llama.cpp end"
    ;;
esac
case ",$PARTS," in *,ours,*)
    stamp "ours start"
    echo "+ locks eval --fidelity $DOC -m $G --selectors full,locks --budgets 2048 --max-tokens 32768" \
         "--window 32 --stride 2 --at 16384,32768 -t $THREADS" | tee -a "$OUT/speed.log"
    nice -n "$NICE" "$LOCKS" eval --fidelity "$DOC" -m "$G" --selectors full,locks --budgets 2048 \
        --max-tokens 32768 --window 32 --stride 2 --at 16384,32768 -t "$THREADS" \
        --csv "$OUT/speed_ours.csv" > /dev/null 2>> "$OUT/speed.log"
    stamp "ours end"
    ;;
esac
python3 - "$OUT/speed_ours.csv" "$OUT/speed_llama.json" <<'PY'
import csv, json, sys
ours = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["document"] != "all" and r["layer"] == "-1":
        ours[(int(r["length"]), r["selector"])] = (float(r["ms_per_step"]), float(r["cpu_ms_per_step"]))
lb = {}
for t in json.load(open(sys.argv[2])):
    if t["n_gen"] > 0:
        lb[t["n_depth"] + t["n_gen"]] = (t["avg_ts"], t["stddev_ts"], t.get("cpu_info", ""), t.get("build_commit", ""))
print("| context | llama.cpp CPU tok/s | ours full tok/s (CPU-ms/step) | ours LOCKS@2048 tok/s (CPU-ms/step) "
      "| LOCKS / full | LOCKS / llama.cpp | full / llama.cpp |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for L in sorted({k[0] for k in ours}):
    f, l = ours.get((L, "full")), ours.get((L, "locks"))
    p = lb.get(L)
    fr, lr = 1000.0 / f[0], 1000.0 / l[0]
    ps = "%.1f +- %.1f" % (p[0], p[1]) if p else "-"
    print("| %d | %s | %.1f (%.1f) | %.1f (%.1f) | %.2fx | %s | %s |" % (
        L, ps, fr, f[1], lr, l[1], lr / fr, "%.2fx" % (lr / p[0]) if p else "-", "%.2fx" % (fr / p[0]) if p else "-"))
if lb:
    any_p = next(iter(lb.values()))
    print("\nllama.cpp build %s; CPU %s" % (any_p[3], any_p[2]))
PY
