#!/usr/bin/env python3
"""Writes the GGUF reader's seed/regression corpus into tests/fuzz/corpus/ (small files,
no weights). The name says what the reader must do with each file:

  ok-*      opens; its tokenizer (if it has one) builds
  bad-*     gguf_open fails with LOCKS_ERR_FORMAT or LOCKS_ERR_UNSUPPORTED (and logs why)
  tokbad-*  opens, but locks_tokenizer_from_gguf fails with a clear error
  anything else (files the fuzzer found): any result, but no crash or bad read

The writer is our own (not the gguf package) so that it can lie on purpose.
Usage: python3 scripts/gen_gguf_corpus.py [OUT_DIR]
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32T, F16T, Q4_0, Q4_1, Q8_0, BF16 = 0, 1, 2, 3, 8, 30
BLOCK = {F32T: (1, 4), F16T: (1, 2), BF16: (1, 2), Q8_0: (32, 34), Q4_0: (32, 18), Q4_1: (32, 20)}
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, i) for i in items)
    return struct.pack(SCALAR[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + val(t, v)


def nbytes(ttype, ne):
    n = 1
    for d in ne:
        n *= d
    be, bb = BLOCK[ttype]
    return n // be * bb


def gguf(kvs, tensors, version=3, align=32, magic=b"GGUF", n_kv=None, n_tensors=None,
         offsets=None, pad_end=False, pad=True):
    """tensors: list of (name, ttype, ne); data are filled with a byte pattern."""
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    body = b"".join(kvs)
    infos, off, offs = b"", 0, []
    for i, (name, tt, ne) in enumerate(tensors):
        o = off if offsets is None else offsets[i]
        offs.append(off)
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", tt, o)
        size = nbytes(tt, ne) if tt in BLOCK else 64
        off += (size + align - 1) // align * align
    out = head + body + infos
    if not pad:  # the file ends right after the header: no padding to lean on
        return out
    out += b"\0" * ((-len(out)) % align)
    data = b""
    for (name, tt, ne), o in zip(tensors, offs):
        size = nbytes(tt, ne) if tt in BLOCK else 64
        data += b"\0" * (o - len(data)) + bytes((7 * k + 3) & 0xFF for k in range(size))
    if pad_end:
        data += b"\0" * ((-len(data)) % align)
    return out + data


TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "\u0120", "ab", "abc",
          "\u0120a", "1", "2", "!"]
TYPES = [3, 3, 3] + [1] * (len(TOKENS) - 3)
MERGES = ["a b", "ab c", "\u0120 a"]


def tokenizer_kvs(tokens=TOKENS, types=TYPES, merges=MERGES, pre="smollm", types_t=I32):
    return [kv("tokenizer.ggml.model", STR, "gpt2"),
            kv("tokenizer.ggml.pre", STR, pre),
            kv("tokenizer.ggml.tokens", ARR, (STR, tokens)),
            kv("tokenizer.ggml.token_type", ARR, (types_t, types)),
            kv("tokenizer.ggml.merges", ARR, (STR, merges)),
            kv("tokenizer.ggml.bos_token_id", U32, 1),
            kv("tokenizer.ggml.eos_token_id", U32, 2)]


def all_scalars():
    return [kv("general.architecture", STR, "llama"),
            kv("t.u8", U8, 200), kv("t.i8", I8, -5), kv("t.u16", U16, 60000), kv("t.i16", I16, -3),
            kv("t.u32", U32, 4000000000), kv("t.i32", I32, -7), kv("t.f32", F32, 1.5),
            kv("t.bool", BOOL, 1), kv("t.u64", U64, 2**63 + 5), kv("t.i64", I64, -(2**40)),
            kv("t.f64", F64, 2.25), kv("t.arr_u32", ARR, (U32, [1, 2, 3])),
            kv("t.arr_f32", ARR, (F32, [0.5, -1.0])),
            kv("t.arr_arr", ARR, (ARR, [(I16, [1, -1]), (STR, ["x", "yz"])])),
            kv("t.empty_arr", ARR, (U8, []))]


TENSORS = [("tok_embd.weight", F32T, [4, 2]), ("a.f16", F16T, [4]), ("a.bf16", BF16, [2, 2]),
           ("a.q8", Q8_0, [32]), ("a.q4_0", Q4_0, [32, 2]), ("a.q4_1", Q4_1, [64])]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus"
    os.makedirs(out, exist_ok=True)
    files = {}
    base = all_scalars() + tokenizer_kvs()
    full = gguf(base, TENSORS)
    files["ok-model.gguf"] = full
    files["ok-empty.gguf"] = gguf([], [])
    files["ok-v2.gguf"] = gguf(base[:3], TENSORS[:2], version=2)
    files["ok-align64.gguf"] = gguf([kv("general.alignment", U32, 64)] + base[:2], TENSORS, align=64)
    files["ok-tokenizer-only.gguf"] = gguf(tokenizer_kvs(), [])
    files["ok-types-u8.gguf"] = gguf(tokenizer_kvs(types_t=U8), [])

    # header
    files["bad-zero-bytes.gguf"] = b""
    files["bad-short.gguf"] = full[:10]
    files["bad-magic.gguf"] = gguf(base[:2], [], magic=b"GGUG")
    files["bad-version1.gguf"] = gguf(base[:2], [], version=1)
    files["bad-version4.gguf"] = gguf(base[:2], [], version=4)
    files["bad-nkv-huge.gguf"] = gguf(base[:2], [], n_kv=2**63)
    files["bad-nkv-one-more.gguf"] = gguf(base[:2], [], n_kv=3)
    files["bad-ntensors-huge.gguf"] = gguf(base[:2], TENSORS[:1], n_tensors=2**61)
    files["bad-ntensors-one-more.gguf"] = gguf(base[:2], TENSORS[:1], n_tensors=2)
    # metadata values
    files["bad-key-len-lie.gguf"] = gguf([struct.pack("<Q", 2**40) + b"general.x" + struct.pack("<I", U8) + b"\1"], [])
    files["bad-str-len-lie.gguf"] = gguf([s("k") + struct.pack("<IQ", STR, 1000) + b"short"], [])
    files["bad-str-len-max.gguf"] = gguf([s("k") + struct.pack("<IQ", STR, 2**64 - 1) + b"x"], [])
    files["bad-arr-count-huge.gguf"] = gguf([s("k") + struct.pack("<IIQ", ARR, U32, 2**62) + b"\0" * 16], [])
    files["bad-arr-str-count-lie.gguf"] = gguf([s("k") + struct.pack("<IIQ", ARR, STR, 5) + s("a") + s("b")], [], pad=False)
    files["bad-arr-str-len-lie.gguf"] = gguf([s("k") + struct.pack("<IIQ", ARR, STR, 2) + s("a") +
                                              struct.pack("<Q", 99) + b"b"], [])
    nest = (U8, [1])
    for _ in range(6):
        nest = (ARR, [nest])
    files["bad-arr-nested-deep.gguf"] = gguf([kv("k", ARR, nest)], [])
    files["bad-val-type.gguf"] = gguf([s("k") + struct.pack("<I", 13) + b"\0" * 8], [])
    files["bad-arr-elem-type.gguf"] = gguf([s("k") + struct.pack("<IIQ", ARR, 99, 1) + b"\0" * 8], [])
    files["bad-scalar-truncated.gguf"] = gguf([s("k") + struct.pack("<I", U64) + b"\1\2\3"], [], pad=False)
    # alignment
    files["bad-align-zero.gguf"] = gguf([kv("general.alignment", U32, 0)], [])
    files["bad-align-three.gguf"] = gguf([kv("general.alignment", U32, 3)], [])
    files["bad-align-huge.gguf"] = gguf([kv("general.alignment", U32, 2**31)], [])
    files["bad-align-string.gguf"] = gguf([kv("general.alignment", STR, "32")], [])
    # tensor infos
    def tinfo(name, dims, tt, off):
        return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", tt, off)

    def raw_tensors(infos, data_len=256):
        head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), 0) + b"".join(infos)
        head += b"\0" * ((-len(head)) % 32)
        return head + bytes(range(256))[:data_len] * 1

    files["bad-ndims-zero.gguf"] = raw_tensors([tinfo("t", [], F32T, 0)])
    files["bad-ndims-five.gguf"] = raw_tensors([s("t") + struct.pack("<I", 5) + struct.pack("<5Q", 1, 1, 1, 1, 1) + struct.pack("<IQ", F32T, 0)])
    files["bad-ne-zero.gguf"] = raw_tensors([tinfo("t", [4, 0], F32T, 0)])
    files["bad-ne-huge.gguf"] = raw_tensors([tinfo("t", [2**41], F32T, 0)])
    files["bad-ne-overflow.gguf"] = raw_tensors([tinfo("t", [2**40, 2**40, 2**40], F32T, 0)])
    files["bad-ne-negative.gguf"] = raw_tensors([tinfo("t", [2**64 - 4], F32T, 0)])
    files["bad-type-iq2xxs.gguf"] = raw_tensors([tinfo("t", [256], 16, 0)])
    files["bad-q4k-ne0-not-block.gguf"] = raw_tensors([tinfo("t", [128], 12, 0)])
    files["bad-type-huge.gguf"] = raw_tensors([tinfo("t", [4], 0xFFFFFFFF, 0)])
    files["bad-q8-ne0-not-block.gguf"] = raw_tensors([tinfo("t", [33], Q8_0, 0)])
    files["bad-offset-past-end.gguf"] = raw_tensors([tinfo("t", [4], F32T, 4096)])
    files["bad-offset-misaligned.gguf"] = raw_tensors([tinfo("t", [4], F32T, 4)])
    files["bad-offset-wrap.gguf"] = raw_tensors([tinfo("t", [4], F32T, 2**64 - 32)])
    files["bad-tensor-overruns.gguf"] = raw_tensors([tinfo("t", [128], F32T, 0)])
    files["bad-tensor-second-overruns.gguf"] = raw_tensors([tinfo("t", [4], F32T, 0), tinfo("u", [64], F32T, 224)])
    files["bad-tensor-name-len-lie.gguf"] = raw_tensors([struct.pack("<Q", 500) + b"t" + struct.pack("<IQIQ", 1, 4, F32T, 0)])
    files["bad-data-start-past-end.gguf"] = gguf([kv("general.alignment", U32, 1 << 20)], TENSORS[:1])[:2000]
    # truncations of a valid file: every cut must be refused
    for cut in [16, 23, 24, 40, 100, 300, 600, len(full) // 2, len(full) - 200, len(full) - 33, len(full) - 1]:
        files[f"bad-trunc-{cut:05d}.gguf"] = full[:cut]
    # valid GGUF, broken tokenizer
    files["tokbad-types-short.gguf"] = gguf(tokenizer_kvs(types=TYPES[:-1]), [])
    files["tokbad-type-range.gguf"] = gguf(tokenizer_kvs(types=TYPES[:-1] + [77]), [])
    files["tokbad-types-str.gguf"] = gguf(tokenizer_kvs()[:3] + [kv("tokenizer.ggml.token_type", ARR, (STR, ["1"] * len(TOKENS)))], [])
    files["tokbad-token-nul.gguf"] = gguf(tokenizer_kvs(tokens=TOKENS[:-1] + ["a\0b"]), [])
    files["tokbad-tokens-not-array.gguf"] = gguf([kv("tokenizer.ggml.model", STR, "gpt2"), kv("tokenizer.ggml.tokens", STR, "abc")], [])
    files["tokbad-tokens-empty.gguf"] = gguf([kv("tokenizer.ggml.model", STR, "gpt2"), kv("tokenizer.ggml.tokens", ARR, (STR, []))], [])
    files["tokbad-merges-u32.gguf"] = gguf(tokenizer_kvs()[:4] + [kv("tokenizer.ggml.merges", ARR, (U32, [1, 2]))], [])
    files["tokbad-model-llama.gguf"] = gguf([kv("tokenizer.ggml.model", STR, "llama")] + tokenizer_kvs()[1:], [])
    files["tokbad-pre-unknown.gguf"] = gguf(tokenizer_kvs(pre="no-such-pre"), [])

    for name, data in sorted(files.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(files)} files, {sum(map(len, files.values()))} bytes in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
