#!/usr/bin/env python3
"""Compare this engine's logits with llama.cpp's on the same GGUF and the same token ids.

llama.cpp side: the file `llama-perplexity --kl-divergence-base FILE` writes (its
tools/perplexity/perplexity.cpp): "_logits_", int32 n_ctx, int32 n_vocab, int32 n_chunk,
int32 tokens[n_chunk * n_ctx] (the tokenized text, BOS first), then per chunk, for the
positions n_ctx/2 .. n_ctx-2 of the chunk, one record of nv = 2*((n_vocab+1)/2)+4 uint16:
two floats (scale, min_log_prob) then n_vocab values v, the log-probability being
min_log_prob + scale * v. Only the top 16 nats are kept (min_logit = max_logit - 16;
v = 0 means "at or below the floor"), quantized to 16/65535 = 2.4e-4 nats.

Our side: `locks run --eval-logits FILE` (fp32 logits [n_prompt][n_vocab], every prompt
position through the decode path) and the prompt ids its `-v` log prints.

Compared, per position of chunk 0 that llama.cpp kept: top-1 agreement; |dlogp|, the
difference of the log-probabilities (= of the logits after removing each side's constant
shift, the only logit freedom a distribution has) over the tokens llama.cpp kept above
its floor (max and mean); and KL(llama.cpp || ours) over the kept tokens plus one bucket
for the floored rest (llama.cpp's tail mass = 1 - the kept tokens' probabilities, which
are normalized over the whole vocabulary; ours = our probabilities of those tokens): the
KL of that coarsened distribution, a lower bound of the full KL that misses only how the
tail's own mass is spread.

Usage: llamacpp_logits_compare.py BASE.kld OURS.f32 OURS_LOG
"""
import re
import sys

import numpy as np


def read_kld(path):
    with open(path, "rb") as f:
        if f.read(8) != b"_logits_":
            sys.exit(f"{path}: not a llama-perplexity --kl-divergence-base file")
        n_ctx, n_vocab, n_chunk = np.frombuffer(f.read(12), dtype=np.int32)
        tokens = np.frombuffer(f.read(4 * int(n_chunk) * int(n_ctx)), dtype=np.int32)
        first = int(n_ctx) // 2
        n_rec = int(n_ctx) - 1 - first
        nv = 2 * ((int(n_vocab) + 1) // 2) + 4
        raw = np.frombuffer(f.read(2 * n_rec * nv), dtype=np.uint16)
        if raw.size != n_rec * nv:
            sys.exit(f"{path}: truncated (chunk 0 has {raw.size} of {n_rec * nv} values)")
    raw = raw.reshape(n_rec, nv)
    head = raw[:, :4].copy().view(np.float32)  # (scale, min_log_prob) per record
    return int(n_ctx), int(n_vocab), tokens, first, head, raw[:, 4:4 + int(n_vocab)]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    n_ctx, n_vocab, ltok, first, head, vals = read_kld(sys.argv[1])
    m = re.search(r"prompt ids:([ 0-9]+)", open(sys.argv[3]).read())
    if not m:
        sys.exit(f"{sys.argv[3]}: no 'prompt ids:' line (run locks with -v)")
    otok = np.array(m.group(1).split(), dtype=np.int64)
    ours = np.memmap(sys.argv[2], dtype=np.float32, mode="r")
    if ours.size % n_vocab or ours.size // n_vocab != otok.size:
        sys.exit(f"{sys.argv[2]}: {ours.size} floats, expected {otok.size} x {n_vocab}")
    ours = ours.reshape(otok.size, n_vocab)
    last = first + vals.shape[0]  # positions first .. last-1 compared
    if otok.size < last:
        sys.exit(f"our prompt has {otok.size} tokens, need {last}")
    same = np.array_equal(otok[:n_ctx], ltok[:n_ctx])
    print(f"token ids: ours {otok.size}, llama.cpp chunk 0 {n_ctx}; first {n_ctx} "
          f"{'identical' if same else 'DIFFER'}")
    if not same:
        bad = int(np.nonzero(otok[:n_ctx] != ltok[:n_ctx])[0][0])
        sys.exit(f"first difference at {bad}: ours {otok[bad]} llama.cpp {ltok[bad]}")

    top1, margins = 0, []
    nll_l, nll_o = 0.0, 0.0
    dmax, dsum, dcount, kls, where = 0.0, 0.0, 0, [], -1
    for r in range(vals.shape[0]):
        scale, floor = float(head[r, 0]), float(head[r, 1])
        v = vals[r].astype(np.float64)
        lp_l = floor + scale * v  # llama.cpp log-probabilities (floored)
        kept = v > 0
        x = ours[first + r].astype(np.float64)
        lp_o = x - x.max() - np.log(np.exp(x - x.max()).sum())
        tl, to = int(np.argmax(v)), int(np.argmax(x))
        top1 += int(tl == to)
        if tl != to:  # how close the call was: each side's margin between the two tokens
            margins.append((lp_l[tl] - lp_l[to], lp_o[to] - lp_o[tl]))
        nxt = int(ltok[first + r + 1])  # the text's next token (floored on llama.cpp's side)
        nll_l -= lp_l[nxt]
        nll_o -= lp_o[nxt]
        d = np.abs(lp_o[kept] - lp_l[kept])
        if d.size and d.max() > dmax:
            dmax, where = float(d.max()), first + r
        dsum += float(d.sum())
        dcount += int(d.size)
        p = np.exp(lp_l[kept])
        tail_l = max(1.0 - float(p.sum()), 0.0)
        tail_o = float(np.exp(lp_o[~kept]).sum())
        kl = float((p * (lp_l[kept] - lp_o[kept])).sum())
        if tail_l > 0:
            kl += tail_l * np.log(tail_l / max(tail_o, 1e-300))
        kls.append(kl)
    n = vals.shape[0]
    kls = np.array(kls)
    print(f"positions {first}..{last - 1} ({n}), vocabulary {n_vocab}")
    print(f"top-1 agreement: {top1}/{n} ({100.0 * top1 / n:.1f}%)")
    if margins:
        ml = np.array(margins)
        print(f"where top-1 differs, llama.cpp's margin of its top-1 over ours: max {ml[:, 0].max():.3f}, "
              f"median {np.median(ml[:, 0]):.3f}; our margin of ours over its: max {ml[:, 1].max():.3f}, "
              f"median {np.median(ml[:, 1]):.3f} (nats)")
    print(f"|dlogp| over llama.cpp's kept tokens (top 16 nats, {dcount / n:.0f} per position): "
          f"max {dmax:.4f} (position {where}), mean {dsum / max(dcount, 1):.4f}")
    print(f"perplexity of the text's next tokens: llama.cpp {np.exp(nll_l / n):.4f}, ours {np.exp(nll_o / n):.4f}")
    print(f"KL(llama.cpp || ours) per position: median {np.median(kls):.2e}, mean {kls.mean():.2e}, "
          f"max {kls.max():.2e}")


if __name__ == "__main__":
    main()
