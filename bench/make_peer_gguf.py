#!/usr/bin/env python3
"""make_peer_gguf.py -- a Llama-architecture GGUF with random F16 weights, for llama.cpp's
llama-bench (bench/llamacpp-peer.sh). numpy and the standard library only (the device has
no `gguf` package).

  python3 bench/make_peer_gguf.py --shape llama3-8b --out /root/keep/peer.gguf
  python3 bench/make_peer_gguf.py --shape glm4-9b   --out /root/keep/peer.gguf
  python3 bench/make_peer_gguf.py --shape tiny      --out /tmp/tiny.gguf   (a test shape)
  python3 bench/make_peer_gguf.py --shape llama3-8b --vocab --out F16.gguf  (with a vocabulary)

The file: GGUF v3, general.architecture "llama", general.file_type 1 (mostly F16),
tokenizer.ggml.model "none" with llama.vocab_size (llama.cpp then loads it without a
vocabulary), every llama.* hyper-parameter llama.cpp reads (context_length,
embedding_length, block_count, feed_forward_length, attention.head_count(_kv),
attention.key_length / value_length, rope.dimension_count, rope.freq_base,
attention.layer_norm_rms_epsilon). With --vocab the file holds a vocabulary instead, so that
this project's loader (which needs a tokenizer) reads it too: tokenizer.ggml.model "gpt2",
pre "default", n_vocab tokens (the 256 byte tokens of GPT-2's alphabet, <|endoftext|> as bos
and eos, then fillers "<tN>"), every type normal but <|endoftext|>'s (control), an empty
merges array; llama.cpp loads it as a byte-level BPE vocabulary (this is the flow where
llama-quantize turns the file into Q4_K_M and both engines read that one file). Tensors as llama.cpp's converter names them:
token_embd, output, output_norm, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
ffn_norm, ffn_gate, ffn_up, ffn_down}; the matrices F16, the norms F32 (ones).

The weights are random but NOT independent: one block of BLOCK_MB of normal(0, 0.02) F16
values (seeded) is drawn once and tiled through every matrix, so 16 GB are written at disk
speed instead of drawing 8G random numbers. Decode time does not depend on the values (the
same bytes are read either way); the outputs are meaningless.

The GLM-4-9B shape is run as a llama-architecture model (GLM's own architecture differs in
details that do not change the bytes a decode token reads: fused QKV with biases, partial
RoPE); it is the shape (40 layers, dim 4096, FFN 13696, 32 / 2 heads of 128, vocab 151552)
that matters for the comparison with `locks bench --backend cuda --model glm4-9b`.
"""
import argparse
import os
import struct
import sys
import time

import numpy as np

SHAPES = {
    # name: layers, dim, ffn, heads, kv_heads, head_dim, vocab, rope_base, n_ctx_train
    "llama3-8b": (32, 4096, 14336, 32, 8, 128, 128256, 500000.0, 131072),
    "glm4-9b": (40, 4096, 13696, 32, 2, 128, 151552, 10000.0, 131072),
    "tiny": (2, 256, 512, 4, 2, 64, 1024, 10000.0, 4096),
}

GGUF_I32, GGUF_U32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_U64 = 5, 4, 6, 7, 8, 9, 10
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == GGUF_U32:
        return out + struct.pack("<I", value)
    if vtype == GGUF_U64:
        return out + struct.pack("<Q", value)
    if vtype == GGUF_F32:
        return out + struct.pack("<f", value)
    if vtype == GGUF_BOOL:
        return out + struct.pack("<B", 1 if value else 0)
    if vtype == GGUF_STRING:
        return out + gguf_str(value)
    if vtype == GGUF_ARRAY:  # value: (element type, list)
        et, items = value
        out += struct.pack("<IQ", et, len(items))
        if et == GGUF_STRING:
            return out + b"".join(gguf_str(x) for x in items)
        if et == GGUF_I32:
            return out + struct.pack("<%di" % len(items), *items)
        raise ValueError(et)
    raise ValueError(vtype)


def byte_tokens():
    """GPT-2's byte-level alphabet: the 256 one-character tokens, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def vocab_meta(vocab):
    """The --vocab keys: a byte-level BPE vocabulary of `vocab` tokens, no merges."""
    eot = 256
    toks = byte_tokens() + ["<|endoftext|>"] + ["<t%d>" % i for i in range(vocab - 257)]
    types = [1] * vocab
    types[eot] = 3
    return [
        ("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
        ("tokenizer.ggml.pre", GGUF_STRING, "default"),  # llama.cpp and this project both know it
        ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, toks)),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types)),
        ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, [])),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, eot),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, eot),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, False),
    ]


def tensors_of(layers, dim, ffn, heads, kv_heads, head_dim, vocab):
    """(name, ne [fastest first], ggml type) in file order."""
    q, kvd = heads * head_dim, kv_heads * head_dim
    t = [("token_embd.weight", (dim, vocab), GGML_F16)]
    for l in range(layers):
        p = "blk.%d." % l
        t += [
            (p + "attn_norm.weight", (dim,), GGML_F32),
            (p + "attn_q.weight", (dim, q), GGML_F16),
            (p + "attn_k.weight", (dim, kvd), GGML_F16),
            (p + "attn_v.weight", (dim, kvd), GGML_F16),
            (p + "attn_output.weight", (q, dim), GGML_F16),
            (p + "ffn_norm.weight", (dim,), GGML_F32),
            (p + "ffn_gate.weight", (dim, ffn), GGML_F16),
            (p + "ffn_up.weight", (dim, ffn), GGML_F16),
            (p + "ffn_down.weight", (ffn, dim), GGML_F16),
        ]
    t += [("output_norm.weight", (dim,), GGML_F32), ("output.weight", (dim, vocab), GGML_F16)]
    return t


def nbytes(ne, typ):
    n = 1
    for d in ne:
        n *= d
    return n * (4 if typ == GGML_F32 else 2)


def write(path, shape, seed=1234, block_mb=64, vocab_keys=False):
    layers, dim, ffn, heads, kv_heads, head_dim, vocab, rope_base, n_ctx = SHAPES[shape]
    meta = [
        ("general.architecture", GGUF_STRING, "llama"),
        ("general.name", GGUF_STRING, "random-%s-f16 (locks bench/make_peer_gguf.py, seed %d)" % (shape, seed)),
        ("general.file_type", GGUF_U32, 1),
        ("general.alignment", GGUF_U32, ALIGN),
        ("llama.context_length", GGUF_U32, n_ctx),
        ("llama.embedding_length", GGUF_U32, dim),
        ("llama.block_count", GGUF_U32, layers),
        ("llama.feed_forward_length", GGUF_U32, ffn),
        ("llama.attention.head_count", GGUF_U32, heads),
        ("llama.attention.head_count_kv", GGUF_U32, kv_heads),
        ("llama.attention.key_length", GGUF_U32, head_dim),
        ("llama.attention.value_length", GGUF_U32, head_dim),
        ("llama.rope.dimension_count", GGUF_U32, head_dim),
        ("llama.rope.freq_base", GGUF_F32, rope_base),
        ("llama.attention.layer_norm_rms_epsilon", GGUF_F32, 1e-5),
        ("llama.vocab_size", GGUF_U32, vocab),
    ]
    meta += vocab_meta(vocab) if vocab_keys else [("tokenizer.ggml.model", GGUF_STRING, "none")]
    tens = tensors_of(layers, dim, ffn, heads, kv_heads, head_dim, vocab)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tens), len(meta))
    head += b"".join(kv(k, t, v) for k, t, v in meta)
    off = 0
    infos = []
    for name, ne, typ in tens:
        infos.append(gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne) +
                     struct.pack("<IQ", typ, off))
        off += nbytes(ne, typ)
        off += (-off) % ALIGN
    head += b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)

    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(block_mb * (1 << 20) // 2, dtype=np.float32) * 0.02).astype("<f2").tobytes()
    ones = np.ones(max(dim, ffn), dtype="<f4").tobytes()
    t0 = time.time()
    total = len(head)
    with open(path, "wb") as f:
        f.write(head)
        pos = 0  # where in the random block the next matrix starts (the tiling moves on)
        for name, ne, typ in tens:
            n = nbytes(ne, typ)
            if typ == GGML_F32:
                f.write(ones[:n])
            else:
                left = n
                while left:
                    k = min(left, len(block) - pos)
                    f.write(memoryview(block)[pos:pos + k])
                    pos = (pos + k) % len(block)
                    left -= k
            pad = (-n) % ALIGN
            f.write(b"\0" * pad)
            total += n + pad
    dt = time.time() - t0
    return total, dt, len(tens)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--block-mb", type=int, default=64, help="size of the random block tiled through the matrices")
    ap.add_argument("--vocab", action="store_true", help="a byte-level BPE vocabulary instead of tokenizer 'none'")
    a = ap.parse_args()
    total, dt, nt = write(a.out, a.shape, a.seed, a.block_mb, a.vocab)
    size = os.path.getsize(a.out)
    if size != total:
        sys.exit("make_peer_gguf: wrote %d bytes, expected %d" % (size, total))
    print("make_peer_gguf: %s: %s, %d tensors, %.2f GiB in %.1f s (%.2f GB/s), random F16 (a %d MiB block tiled)%s" %
          (a.out, a.shape, nt, size / 2**30, dt, size / 1e9 / max(dt, 1e-9), a.block_mb,
           ", byte-level BPE vocabulary" if a.vocab else ""))


if __name__ == "__main__":
    main()
