#!/usr/bin/env bash
# llamacpp-logits.sh — issue 14: our logits against llama.cpp CPU's on the same GGUF and
# the same token ids (top-1 agreement, max |dlogit|, KL), over the positions 512..1022
# of a real text (the prose haystack's first ~1,100 tokens, BOS first; the 512-token
# sliding window of Gemma 3's local layers is full from position 512 on).
#
#   scripts/llamacpp-logits.sh            # both sides, then the comparison
#
# llama.cpp: `llama-perplexity -c 1024 --chunks 1 --kl-divergence-base` keeps the
# log-probabilities of positions 512..1022 of its first 1024-token chunk (it needs a text
# of >= 2 x 1024 tokens: the first 12,000 bytes). Ours: `locks run -f --eval-logits`
# (every position through the decode path, selector full) on the first 4,800 bytes cut at
# a line end (~1,100 tokens); scripts/llamacpp_logits_compare.py checks that the first
# 1024 token ids are the same on both sides before comparing.
# Env: G (GGUF), LLAMA_BIN (llama.cpp's bin/, scripts/llamacpp-cpu.sh), LOCKS, THREADS=2,
# NICE=10, MODE=i8|f32 (our activations), DIR (scratch, ~1.2 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-$HOME/.cache/locks/gemma-3-270m-q4_k_m.gguf}
LLAMA_BIN=${LLAMA_BIN:-/work/peer/build-cpu/bin}
LOCKS=${LOCKS:-build/locks}
THREADS=${THREADS:-2}
NICE=${NICE:-10}
MODE=${MODE:-i8}
DOC=${DOC:-$HOME/.cache/locks/haystack/prose.txt}
DIR=${DIR:-/tmp/llamacpp-logits}
mkdir -p "$DIR"
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD) $(uname -m); $(nproc) cores; $(uptime)"
head -c 12000 "$DOC" > "$DIR/doc_llama.txt"
head -c 4800 "$DOC" | sed '$d' > "$DIR/doc_ours.txt"   # drop the cut last line

if [ ! -s "$DIR/base.kld" ]; then
    echo "+ llama-perplexity -m $G -f doc_llama.txt -c 1024 -b 1024 --chunks 1 -t $THREADS --kl-divergence-base base.kld"
    nice -n "$NICE" "$LLAMA_BIN/llama-perplexity" -m "$G" -f "$DIR/doc_llama.txt" -c 1024 -b 1024 --chunks 1 \
        -t "$THREADS" --kl-divergence-base "$DIR/base.kld" > "$DIR/llama.log" 2>&1 \
        || { tail -20 "$DIR/llama.log"; exit 1; }
    grep -E "system_info|perplexity:|Final|\[1\]" "$DIR/llama.log" | head -5
fi
flag=""
[ "$MODE" = f32 ] && flag="--f32-act"
echo "+ locks run -m $G -f doc_ours.txt -c 1200 -t $THREADS -v --selector full $flag --eval-logits ours_$MODE.f32"
nice -n "$NICE" "$LOCKS" run -m "$G" -f "$DIR/doc_ours.txt" -c 1200 -t "$THREADS" -v --selector full $flag \
    --eval-logits "$DIR/ours_$MODE.f32" 2> "$DIR/ours_$MODE.log" || { tail -20 "$DIR/ours_$MODE.log"; exit 1; }
python3 scripts/llamacpp_logits_compare.py "$DIR/base.kld" "$DIR/ours_$MODE.f32" "$DIR/ours_$MODE.log"
rm -f "$DIR/ours_$MODE.f32"
