#!/usr/bin/env python3
"""logits_reference.py — an independent float64 forward pass of a GGUF llama, qwen2,
qwen3 or gemma3 model in numpy, for checking the engine's logits
(tests/data/smollm2_logits_ref.h, tests/data/gemma3_logits_ref.h).

It shares no code with the engine: the weights are dequantized by the PyPI `gguf`
package (`pip install gguf numpy`), and the maths is written from the models'
definitions: RMSNorm, RoPE on adjacent pairs (llama.cpp's GGUF convention for llama) or
on (x[i], x[i + d/2]) (NeoX: Qwen, Gemma), GQA softmax attention, SwiGLU, tied output
embeddings; Qwen2's Q/K/V biases; QK-norm (Qwen3, Gemma 3); Gemma 3's embeddings times
sqrt(dim), norms on each branch's output, GELU(tanh) gate, and local layers (all but
every 6th) that attend only the last sliding_window tokens with RoPE base 10000.
Everything in float64.

usage: scripts/logits_reference.py MODEL.gguf ID,ID,... [--header OUT.h] [--npy OUT.npy]
                                   [--compare OURS.f32]
Prints, for the last position, the top-k ids and logits; --header writes them as C.
--compare reads the engine's logits of every position (`locks run --eval-logits FILE`,
fp32 [T][vocab]) and prints max |diff|, relative L2 error and top-1 agreement.
"""
import argparse

import numpy as np
import gguf
from gguf.quants import dequantize


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("ids")
    ap.add_argument("--header")
    ap.add_argument("--npy", help="all positions' logits (T, vocab), float32")
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--compare", help="engine logits, fp32 [T][vocab] (locks run --eval-logits)")
    a = ap.parse_args()
    toks = [int(x) for x in a.ids.split(",")]

    r = gguf.GGUFReader(a.model)
    W = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float64)
        W[t.name] = w.reshape([int(x) for x in reversed(t.shape)])  # (rows, cols)

    def f(k):
        return r.fields[k].contents()

    arch = f("general.architecture")
    assert arch in ("llama", "qwen2", "qwen3", "gemma3"), arch

    def hp(k, dflt=None):
        key = f"{arch}.{k}"
        return f(key) if key in r.fields else dflt

    dim = hp("embedding_length")
    n_layers = hp("block_count")
    H = hp("attention.head_count")
    Hk = hp("attention.head_count_kv", H)
    theta = hp("rope.freq_base", 10000.0)
    eps = hp("attention.layer_norm_rms_epsilon", 1e-5)
    hd = hp("attention.key_length", dim // H)
    n_rot = hp("rope.dimension_count", hd)
    neox = arch != "llama"
    gemma = arch == "gemma3"
    window = hp("attention.sliding_window") if gemma else None
    theta_local = hp("rope.freq_base_swa", 10000.0)
    T = len(toks)

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w

    def rope_tables(base):
        inv = base ** (-np.arange(0, n_rot, 2) / n_rot)
        ang = np.arange(T)[:, None] * inv[None, :]
        return np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    tables = {theta: rope_tables(theta), theta_local: rope_tables(theta_local)}

    def rope(x, base):  # (T, heads, hd)
        cos, sin = tables[base]
        out = x.copy()
        if neox:  # rotate (x[i], x[i + n_rot/2])
            x0, x1 = x[..., : n_rot // 2], x[..., n_rot // 2 : n_rot]
            out[..., : n_rot // 2] = x0 * cos - x1 * sin
            out[..., n_rot // 2 : n_rot] = x0 * sin + x1 * cos
        else:  # rotate (x[2i], x[2i+1])
            x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
            out[..., 0:n_rot:2] = x0 * cos - x1 * sin
            out[..., 1:n_rot:2] = x0 * sin + x1 * cos
        return out

    def lin(h, name):
        y = h @ W[name + ".weight"].T
        return y + W[name + ".bias"] if name + ".bias" in W else y

    emb = W["token_embd.weight"]  # (vocab, dim)
    x = emb[toks] * (np.sqrt(dim) if gemma else 1.0)
    i_, j_ = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = np.where(j_ > i_, -np.inf, 0.0)
    mask_local = np.where((j_ > i_) | (i_ - j_ >= (window or T + 1)), -np.inf, 0.0)
    for l in range(n_layers):
        p = f"blk.{l}."
        local = gemma and (l + 1) % 6 != 0
        base = theta_local if local else theta
        h = rms(x, W[p + "attn_norm.weight"])
        q = lin(h, p + "attn_q").reshape(T, H, hd)
        k = lin(h, p + "attn_k").reshape(T, Hk, hd)
        v = lin(h, p + "attn_v").reshape(T, Hk, hd)
        if p + "attn_q_norm.weight" in W:
            q = rms(q, W[p + "attn_q_norm.weight"])
            k = rms(k, W[p + "attn_k_norm.weight"])
        q, k = rope(q, base), rope(k, base)
        k = np.repeat(k, H // Hk, axis=1)  # query head h uses KV head h // G
        v = np.repeat(v, H // Hk, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + (mask_local if local else mask)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, H * hd) @ W[p + "attn_output.weight"].T
        if gemma:
            o = rms(o, W[p + "post_attention_norm.weight"])
        x = x + o
        h = rms(x, W[p + "ffn_norm.weight"])
        g = h @ W[p + "ffn_gate.weight"].T
        u = h @ W[p + "ffn_up.weight"].T
        if gemma:
            act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
        else:
            act = g / (1 + np.exp(-g))
        o = (act * u) @ W[p + "ffn_down.weight"].T
        if gemma:
            o = rms(o, W[p + "post_ffw_norm.weight"])
        x = x + o
    out = W.get("output.weight", emb)
    logits = rms(x, W["output_norm.weight"]) @ out.T  # (T, vocab)

    last = logits[-1]
    top = np.argsort(-last)[: a.topk]
    print("top ids   ", top.tolist())
    print("top logits", [round(float(last[i]), 6) for i in top])
    if a.compare:
        ours = np.fromfile(a.compare, dtype=np.float32).reshape(logits.shape).astype(np.float64)
        d = np.abs(ours - logits)
        rel = np.linalg.norm(ours - logits, axis=1) / np.linalg.norm(logits, axis=1)
        top1 = (ours.argmax(1) == logits.argmax(1))
        print("positions %d, vocab %d" % logits.shape)
        print("max |logit diff| %.4g, mean %.4g (logits span %.1f .. %.1f)" % (d.max(), d.mean(), logits.min(), logits.max()))
        print("relative L2 error per position: median %.3g, max %.3g" % (np.median(rel), rel.max()))
        print("top-1 agreement %d / %d" % (top1.sum(), len(top1)))

        def log_softmax(z):
            z = z - z.max(1, keepdims=True)
            return z - np.log(np.exp(z).sum(1, keepdims=True))

        lr, lo = log_softmax(logits), log_softmax(ours)
        kl = (np.exp(lr) * (lr - lo)).sum(1)
        print("KL(reference || engine) per position: median %.3g, max %.3g" % (np.median(kl), kl.max()))
    if a.npy:
        np.save(a.npy, logits.astype(np.float32))
    if a.header:
        with open(a.header, "w") as fh:
            fh.write("/* Generated by scripts/logits_reference.py (float64 numpy forward pass over the\n"
                     " * dequantized GGUF weights, PyPI gguf package). Do not edit. */\n")
            fh.write("static const int32_t ref_prompt[] = {%s};\n" % ", ".join(map(str, toks)))
            fh.write("#define REF_TOPK %d\n" % a.topk)
            fh.write("static const int32_t ref_top_ids[REF_TOPK] = {%s};\n" % ", ".join(str(int(i)) for i in top))
            fh.write("static const double ref_top_logits[REF_TOPK] = {%s};\n"
                     % ", ".join("%.6f" % float(last[i]) for i in top))


if __name__ == "__main__":
    main()
