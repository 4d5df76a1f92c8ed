#!/usr/bin/env python3
"""Reference token ids for tests/test_model_gemma3.c (the SentencePiece tokenizer).

Builds a `sentencepiece` BPE model (ModelProto) from the vocabulary stored in the Gemma 3
GGUF — tokenizer.ggml.tokens / scores / token_type, read with the `gguf` package — with
byte fallback, no dummy prefix, no whitespace collapsing and an identity normalizer
(the file says add_space_prefix = false), and encodes a list of tricky strings plus
random ones (fixed seed) with it. sentencepiece never matches CONTROL tokens in text, so
the C test compares with parse_special = false.

USER_DEFINED tokens: Gemma's include runs of plain spaces ("  ", id 138) and newlines.
llama.cpp and Hugging Face (added tokens, normalized = false) match them in the raw text
before anything else, longest first; sentencepiece matches user-defined pieces only after
turning spaces into U+2581, so it would never use the space runs. The reference cuts the
text at user-defined tokens first (longest match, leftmost), as llama.cpp does, and lets
sentencepiece encode the spans between them. Writes a C header.

Usage: pip install gguf sentencepiece protobuf
       python3 scripts/tokenizer_reference_spm.py MODEL.gguf > tests/data/gemma3_tokenizer_ref.h
"""
import random
import sys

import sentencepiece as spm
from gguf import GGUFReader
from sentencepiece import sentencepiece_model_pb2 as pb

CASES = [
    "", "Hello world", " Hello world", "Hello  world", "   leading and trailing   ",
    "The quick brown fox jumps over the lazy dog.",
    "12345678 and 3.14159, 2.71828; 1e-9", "Don't you're we'll they've I'm",
    "naïve café résumé — “quotes” ‘single’ …", "Привет, мир! Как дела?",
    "日本語のテキストと中文文本混合。", "한국어 문장입니다.", "مرحبا بالعالم", "שלום עולם",
    "emoji 😀🎉👍🏽 and 🧑‍🚀 zwj", "tabs\tand\nnewlines\n\nand\r\nCRLF", "\n\n\n\n\n",
    "def f(x):\n    return x ** 2  # square\n", "<html><body><div class=\"a\">x</div></body></html>",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><pad>",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE", "a" * 50, " " * 20 + "x",
    "\u2581 literal lower one eighth block \u2581\u2581", "mixed\u00a0nbsp\u2009thin\u3000ideographic",
    "control \x01\x02\x7f bytes", "ǅ ǈ ǋ titlecase ＡＢＣ fullwidth", "https://example.com/path?q=1&r=2#frag",
    "The needle is 7481923. Remember it. What is the needle? The needle is",
]


def main():
    r = GGUFReader(sys.argv[1])
    if len(sys.argv) > 3 and sys.argv[2] == "--encode":  # ids of one text, comma-separated
        sp, encode, toks = build(r)
        print(",".join(map(str, encode(sys.argv[3]))))
        return
    sp, encode, toks = build(r)
    emit(encode, toks)


def build(r):
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    scores = r.fields["tokenizer.ggml.scores"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    unk = r.fields["tokenizer.ggml.unknown_token_id"].contents()
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id = unk
    m.trainer_spec.bos_id = r.fields["tokenizer.ggml.bos_token_id"].contents()
    m.trainer_spec.eos_id = r.fields["tokenizer.ggml.eos_token_id"].contents()
    m.trainer_spec.pad_id = r.fields["tokenizer.ggml.padding_token_id"].contents()
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    kinds = {1: pb.ModelProto.SentencePiece.NORMAL, 2: pb.ModelProto.SentencePiece.UNKNOWN,
             3: pb.ModelProto.SentencePiece.CONTROL, 4: pb.ModelProto.SentencePiece.USER_DEFINED,
             5: pb.ModelProto.SentencePiece.UNUSED, 6: pb.ModelProto.SentencePiece.BYTE}
    for i, (t, s, ty) in enumerate(zip(toks, scores, types)):
        p = m.pieces.add()
        p.piece = t
        p.score = float(s)
        p.type = pb.ModelProto.SentencePiece.UNKNOWN if i == unk else kinds[int(ty)]
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    user = sorted({t for t, ty in zip(toks, types) if int(ty) == 4 and t}, key=len, reverse=True)
    user_id = {}
    for i, (t, ty) in enumerate(zip(toks, types)):
        if int(ty) == 4 and t not in user_id:
            user_id[t] = i

    def encode(text):
        ids, span, i = [], 0, 0
        while i < len(text):
            hit = next((u for u in user if text.startswith(u, i)), None)
            if hit is None:
                i += 1
                continue
            ids += sp.encode(text[span:i])
            ids.append(user_id[hit])
            i += len(hit)
            span = i
        return ids + sp.encode(text[span:])

    return sp, encode, toks


def emit(encode, toks):

    rng = random.Random(14)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
                + list(" " * 12) + list("\n\t.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`") + list("éüßñçøåæœ")
                + list("日本語中文한국어") + ["😀", "🎉", "\u2581", "\u00a0"])
    words = [w for w in toks[1000:40000:97] if "<" not in w]
    cases = list(CASES)
    for _ in range(120):
        cases.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))))
    for _ in range(80):
        cases.append("".join(rng.choice(words).replace("\u2581", " ") for _ in range(rng.randint(1, 25))))

    out = sys.stdout
    out.write("/* Generated by scripts/tokenizer_reference_spm.py from the Gemma 3 270M GGUF's vocabulary\n"
              " * with the sentencepiece package; do not edit. */\n")
    out.write("typedef struct {\n    const char *text;\n    int32_t n;\n    const int32_t *ids;\n} gemma3_tok_case;\n\n")
    for k, text in enumerate(cases):
        ids = encode(text)
        out.write("static const int32_t gemma3_tok_ids_%d[] = {%s};\n" % (k, ", ".join(map(str, ids)) if ids else "-1"))
    out.write("\nstatic const gemma3_tok_case gemma3_tok_cases[] = {\n")
    for k, text in enumerate(cases):
        b = text.encode("utf-8")
        n = len(encode(text))
        out.write("    {\"%s\", %d, gemma3_tok_ids_%d},\n" % (esc(b), n, k))
    out.write("};\n#define GEMMA3_TOK_N_CASES %d\n" % len(cases))


def esc(b):
    s = []
    for c in b:
        if c < 32 or c >= 127 or c in (34, 92, 63):
            s.append("\\%03o" % c)  # octal: at most 3 digits, never swallows what follows
        else:
            s.append(chr(c))
    return "".join(s)


if __name__ == "__main__":
    main()
