#!/usr/bin/env bash
# gemma3-long.sh — issue 14's long-context runs with Gemma 3 270M (32K context) on the CPU:
# teacher-forced fidelity (top-1 agreement / KL vs dense, decode ms per step) in windows
# ending at 8K, 16K and 32K tokens of one document, from ONE forward prefill
# (`locks eval --fidelity --window --at`), and the niah_single needle task as a base-model
# completion (--no-chat: RULER's base template, instruction + context + question + answer
# prefix), every selector x budget. Results go to eval/gemma3/ (CSV, JSON, JSONL, logs).
#
#   scripts/gemma3-long.sh run-fidelity      # long: one prefill to the largest AT length
#   scripts/gemma3-long.sh run-needle        # one prefill per (context, sample); appends
#   scripts/gemma3-long.sh report            # markdown tables + eval/gemma3/fidelity.png
#
# Sizes (env): AT=8192,16384,32768 WINDOW=32 STRIDE=2 BUDGETS=128,512,2048
# SELECTORS=full,oracle,locks,quest,shadow,rocket THREADS=2 CONTEXTS=8K SAMPLES=1
# NICE=5 DOC=~/.cache/locks/haystack/prose.txt (scripts/fetch-haystack.sh) LOCKS=build/locks
set -euo pipefail
cd "$(dirname "$0")/.."
G=${GEMMA3:-$(scripts/fetch-model.sh gemma3-270m)}
LOCKS=${LOCKS:-build/locks}
OUT=${OUT:-eval/gemma3}
AT=${AT:-8192,16384,32768}
WINDOW=${WINDOW:-32}
STRIDE=${STRIDE:-2}
BUDGETS=${BUDGETS:-128,512,2048}
SELECTORS=${SELECTORS:-full,oracle,locks,quest,shadow,rocket}
THREADS=${THREADS:-2}
CONTEXTS=${CONTEXTS:-8K}
SAMPLES=${SAMPLES:-1}
NICE=${NICE:-5}
DOC=${DOC:-$HOME/.cache/locks/haystack/prose.txt}
COMMIT=$(git rev-parse --short HEAD)
mkdir -p "$OUT"
max_at=${AT##*,}
stamp() { echo "$1 $(date -u +%FT%TZ) commit $COMMIT; $(uptime)"; }

case "${1:-}" in
run-fidelity)
    stamp start > "$OUT/fidelity.log"
    echo "$LOCKS eval --fidelity $DOC -m $G --selectors $SELECTORS --budgets $BUDGETS --max-tokens $max_at" \
         "--window $WINDOW --stride $STRIDE --at $AT -t $THREADS" >> "$OUT/fidelity.log"
    nice -n "$NICE" "$LOCKS" eval --fidelity "$DOC" -m "$G" --selectors "$SELECTORS" --budgets "$BUDGETS" \
        --max-tokens "$max_at" --window "$WINDOW" --stride "$STRIDE" --at "$AT" -t "$THREADS" \
        --csv "$OUT/fidelity.csv" --json "$OUT/fidelity.json" > "$OUT/fidelity.txt" 2>> "$OUT/fidelity.log"
    stamp end >> "$OUT/fidelity.log"
    ;;
run-needle)  # appends to needle.jsonl / needle.log; a rerun skips what the file holds
    stamp "start contexts $CONTEXTS samples $SAMPLES" >> "$OUT/needle.log"
    LOCKS_EVAL_COMMIT=$COMMIT nice -n "$NICE" "$LOCKS" eval --tasks niah_single --contexts "$CONTEXTS" \
        --samples "$SAMPLES" -m "$G" --no-chat --selectors "$SELECTORS" --budgets "$BUDGETS" -t "$THREADS" \
        --max-gen 12 -o "$OUT/needle.jsonl" >> "$OUT/needle.log" 2>&1
    stamp end >> "$OUT/needle.log"
    ;;
report)
    if [ -s "$OUT/fidelity.csv" ]; then
        echo "| length | selector | budget | positions | top-1 agreement | mean KL (nats) | mean tokens | ms/step | CPU-ms/step |"
        echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            $c["document"] != "all" && $c["layer"] == -1 {
                printf "| %s | %s | %s | %s | %.1f%% | %.4f | %.1f | %.1f | %.1f |\n", $c["length"], $c["selector"],
                    $c["budget"], $c["positions"], 100 * $c["top1_agree"], $c["mean_kl"], $c["mean_tokens"],
                    $c["ms_per_step"], $c["cpu_ms_per_step"] }' "$OUT/fidelity.csv"
        echo
        # the plot without the full row (one point at the whole context)
        awk -F, 'NR == 1 || $3 != "full"' "$OUT/fidelity.csv" > "$OUT/.fid_plot.csv"
        scripts/plot-fidelity.sh "$OUT/.fid_plot.csv" "$OUT/fidelity.png" \
            "Gemma 3 270M: top-1 agreement with dense, window of $WINDOW positions before each length" >&2
        rm -f "$OUT/.fid_plot.csv"
        # mean KL vs tokens, log-log, one line per (length, selector)
        tmp=$(mktemp -d)
        awk -F, -v dir="$tmp" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            $c["document"] != "all" && $c["layer"] == -1 && $c["selector"] != "full" {
                name = $c["length"] "_" $c["selector"]; f = dir "/" name ".dat"
                if (!(f in seen)) { seen[f] = 1; order[++n] = name }
                print $c["mean_tokens"], ($c["mean_kl"] > 1e-6 ? $c["mean_kl"] : 1e-6) >> f }
            END { for (i = 1; i <= n; i++) print order[i] > (dir "/order") }' "$OUT/fidelity.csv"
        plots=""
        # colour = selector, dash and point = length
        lengths=$(cut -d_ -f1 "$tmp/order" | sort -un | tr '\n' ' ')
        while read -r name; do
            [ -n "$plots" ] && plots="$plots, "
            case ${name#*_} in oracle) lc=1 ;; locks) lc=2 ;; quest) lc=3 ;; shadow) lc=4 ;; rocket) lc=7 ;; *) lc=8 ;; esac
            li=1; for l in $lengths; do [ "$l" = "${name%%_*}" ] && break; li=$((li + 1)); done
            plots="$plots'$tmp/$name.dat' using 1:2 with linespoints lw 2 lc $lc dt $li pt $((li + 4)) title '${name/_/ tokens, }'"
        done < "$tmp/order"
        gnuplot <<GP
set terminal pngcairo size 1000,560 enhanced font 'sans,11' noenhanced
set output '$OUT/fidelity_kl.png'
set title "Gemma 3 270M: mean KL(dense || sparse) of the next-token distribution, window of $WINDOW positions"
set xlabel 'mean tokens attended per (step, global layer, KV head)'
set ylabel 'mean KL (nats)'
set logscale xy
set grid
set key outside right top
plot $plots
GP
        rm -rf "$tmp"
        echo "wrote $OUT/fidelity_kl.png" >&2
    fi
    if [ -s "$OUT/needle.jsonl" ]; then
        echo "| context | sample | selector | budget | score | output | mass cov. | oracle mass cov. | carrier recall |"
        echo "|---:|---:|---|---:|---:|---|---:|---:|---:|"
        python3 - "$OUT/needle.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    f = lambda x: "-" if x is None else "%.3f" % x
    cr = "-" if not r.get("carrier_events") else "%d/%d" % (r["carrier_hits"], r["carrier_events"])
    out = r["output"].replace("|", "\\|").replace("\n", " ")[:40]
    print("| %d | %d | %s | %d | %.2f | `%s` | %s | %s | %s |" % (r["n_tokens"], r["sample"], r["selector"], r["budget"],
          r["score"], out, f(r.get("mass_cov")), f(r.get("mass_cov_oracle")), cr))
PY
    fi
    ;;
*)
    sed -n 2,16p "$0"
    exit 2
    ;;
esac
