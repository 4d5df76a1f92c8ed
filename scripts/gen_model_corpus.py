#!/usr/bin/env python3
"""Writes the model loader's fuzz seeds into tests/fuzz/corpus-model/: tiny complete GGUF
models (a 13-token BPE vocabulary, 1-2 layers, head_dim 64) of every architecture the
engine loads (llama, qwen2, qwen3, gemma3), each with its weights in one of the tensor
types the engine reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; the K-quants Q4_K,
Q5_K, Q6_K on ffn_down, whose rows are 256 wide, the rest Q8_0 as in a Q4_K_M file).
Block scales are finite fp16, the rest random, so every seed loads; tests/fuzz/fuzz_model.c
mutates them. Deterministic (seeded).  Usage: python3 scripts/gen_model_corpus.py [OUT_DIR]
"""
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
import gen_gguf_corpus  # noqa: E402
from gen_gguf_corpus import F32, STR, U32, gguf, kv, tokenizer_kvs  # noqa: E402

T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_Q4_K, T_Q5_K, T_Q6_K, T_BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
# type: (elements per block, bytes per block, offsets of fp16 scales in a block)
BLOCKS = {T_F32: (1, 4, ()), T_F16: (1, 2, ()), T_BF16: (1, 2, ()), T_Q4_0: (32, 18, (0,)),
          T_Q4_1: (32, 20, (0, 2)), T_Q5_0: (32, 22, (0,)), T_Q5_1: (32, 24, (0, 2)), T_Q8_0: (32, 34, (0,)),
          T_Q4_K: (256, 144, (0, 2)), T_Q5_K: (256, 176, (0, 2)), T_Q6_K: (256, 210, (208,))}
NAMES = {T_F32: "f32", T_F16: "f16", T_BF16: "bf16", T_Q4_0: "q4_0", T_Q4_1: "q4_1", T_Q5_0: "q5_0",
         T_Q5_1: "q5_1", T_Q8_0: "q8_0", T_Q4_K: "q4_k", T_Q5_K: "q5_k", T_Q6_K: "q6_k"}
ARCHS = {  # bias, qk_norm, post_norms, swa
    "llama": (0, 0, 0, 0), "qwen2": (1, 0, 0, 0), "qwen3": (0, 1, 0, 0), "gemma3": (0, 1, 1, 1)}
HD, HQ, HKV, VOCAB = 64, 2, 1, 13
gen_gguf_corpus.BLOCK.update({k: v[:2] for k, v in BLOCKS.items()})  # its writer lays out the offsets


def tensor_bytes(rng, ttype, n):
    """n elements of ttype: finite values / finite block scales."""
    if ttype == T_F32:
        return b"".join(struct.pack("<f", rng.gauss(0, 0.1)) for _ in range(n))
    if ttype == T_F16:
        return b"".join(struct.pack("<e", rng.gauss(0, 0.1)) for _ in range(n))
    if ttype == T_BF16:
        return b"".join(struct.pack("<f", rng.gauss(0, 0.1))[2:] for _ in range(n))
    be, bb, scales = BLOCKS[ttype]
    out = bytearray(rng.getrandbits(8) for _ in range(n // be * bb))
    for b in range(n // be):
        for o in scales:
            out[b * bb + o:b * bb + o + 2] = struct.pack("<e", rng.uniform(0.001, 0.02))
    return bytes(out)


def model(rng, arch, wtype, n_layers=1):
    bias, qkn, post, swa = ARCHS[arch]
    kquant = BLOCKS[wtype][0] == 256
    dim, ffn = 64, 256 if kquant else 64
    q_dim, kv_dim = HQ * HD, HKV * HD
    tensors, datas = [], []

    def t(name, ttype, ne):
        n = 1
        for d in ne:
            n *= d
        tensors.append((name, ttype, ne))
        datas.append(tensor_bytes(rng, ttype, n))

    mat = T_Q8_0 if kquant else wtype
    t("token_embd.weight", mat if mat != T_BF16 else T_F16, [dim, VOCAB])
    t("output_norm.weight", T_F32, [dim])
    for l in range(n_layers):
        p = f"blk.{l}."
        t(p + "attn_norm.weight", T_F32, [dim])
        t(p + "ffn_norm.weight", T_F32, [dim])
        t(p + "attn_q.weight", mat, [dim, q_dim])
        t(p + "attn_k.weight", mat, [dim, kv_dim])
        t(p + "attn_v.weight", mat, [dim, kv_dim])
        t(p + "attn_output.weight", mat, [q_dim, dim])
        t(p + "ffn_gate.weight", mat, [dim, ffn])
        t(p + "ffn_up.weight", mat, [dim, ffn])
        t(p + "ffn_down.weight", wtype, [ffn, dim])
        if bias:
            t(p + "attn_q.bias", T_F32, [q_dim])
            t(p + "attn_k.bias", T_F32, [kv_dim])
            t(p + "attn_v.bias", T_F32, [kv_dim])
        if qkn:
            t(p + "attn_q_norm.weight", T_F16, [HD])
            t(p + "attn_k_norm.weight", T_F16, [HD])
        if post:
            t(p + "post_attention_norm.weight", T_F32, [dim])
            t(p + "post_ffw_norm.weight", T_F32, [dim])
    kvs = [kv("general.architecture", STR, arch), kv("general.name", STR, f"fuzz-{arch}-{NAMES[wtype]}")]
    for key, v in [("embedding_length", dim), ("block_count", n_layers), ("attention.head_count", HQ),
                   ("attention.head_count_kv", HKV), ("attention.key_length", HD),
                   ("attention.value_length", HD), ("feed_forward_length", ffn), ("context_length", 256)]:
        kvs.append(kv(f"{arch}.{key}", U32, v))
    if swa:
        kvs.append(kv(f"{arch}.attention.sliding_window", U32, 32))
    kvs.append(kv(f"{arch}.rope.freq_base", F32, 10000.0))
    kvs.append(kv(f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6))
    kvs += tokenizer_kvs()
    out = gguf(kvs, tensors)
    # gguf() fills tensor data with a byte pattern: put the real data in its place
    head = len(out) - sum((len(d) + 31) // 32 * 32 for d in datas[:-1]) - len(datas[-1])
    body, off = bytearray(out[:head]), 0
    for d in datas:
        body += b"\0" * (off - (len(body) - head)) + d
        off += (len(d) + 31) // 32 * 32
    return bytes(body)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fuzz",
                                                             "corpus-model")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(21)
    for arch in ARCHS:
        for wtype in BLOCKS:
            if arch != "llama" and wtype not in (T_F16, T_Q8_0, T_Q4_K, T_Q6_K):
                continue  # every type once on llama; the other layer variants on the common ones
            name = f"ok-{arch}-{NAMES[wtype]}.gguf"
            with open(os.path.join(out, name), "wb") as f:
                f.write(model(rng, arch, wtype, n_layers=2 if arch == "gemma3" else 1))
    print(f"wrote {len(os.listdir(out))} files to {out}")


if __name__ == "__main__":
    main()
