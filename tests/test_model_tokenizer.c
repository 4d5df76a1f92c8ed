/*
 * test_model_tokenizer.c — the tokenizer on SmolLM2-135M-Instruct's real vocabulary,
 * read through the GGUF reader (label "model": needs the fetched model).
 *
 *  - known ids: tests/data/smollm2_tokenizer_ref.h, produced by
 *    scripts/tokenizer_reference.py with Hugging Face `tokenizers` (unicode, CJK, emoji,
 *    digit runs, white space runs, tabs/newlines, contractions, special tokens, code);
 *  - decode(encode(x)) == x on those texts and on fresh random byte strings, whole and
 *    streamed token by token;
 *  - ChatML prompt -> ids, end-of-generation ids;
 *  - encode speed (printed).
 * The model: $LOCKS_MODEL, else the path scripts/fetch-model.sh prints (it fetches on
 * first use); a failed fetch fails the test.
 */
#include "test_util.h"
#include "test_model_util.h"

#include "locks_model.h"
#include "model/gguf.h"
#include "model/tokenizer_gguf.h"
#include "util.h"

#include "data/smollm2_tokenizer_ref.h"

static void print_ids(const char *what, const int32_t *ids, int32_t n) {
    fprintf(stderr, "  %s (%d):", what, n);
    for (int32_t i = 0; i < n && i < 32; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 32 ? " ...\n" : "\n");
}

/* decode(encode(s)) == s, whole and through the streaming API. */
static int round_trip(const locks_tokenizer *t, const char *s, size_t n, int32_t *ids, char *buf) {
    int32_t n_ids = -1;
    size_t n_out = 0, n_stream = 0;
    if (locks_tokenizer_encode(t, s, n, false, ids, (int32_t)n, &n_ids) != LOCKS_OK) return 0;
    if (locks_tokenizer_decode(t, ids, n_ids, true, buf, n + 1, &n_out) != LOCKS_OK) return 0;
    if (n_out != n || memcmp(buf, s, n) != 0) return 0;
    locks_detok_state ds = {{0}, 0};
    char piece[256];
    for (int32_t i = 0; i < n_ids; i++) {
        size_t w = 0;
        if (locks_tokenizer_decode_stream(t, &ds, ids[i], true, piece, sizeof piece, &w) != LOCKS_OK) return 0;
        if (n_stream + w > n || memcmp(buf + n_stream, piece, w) != 0) return 0;
        n_stream += w;
    }
    char tail[4];
    size_t nt = locks_detok_flush(&ds, tail);
    return n_stream + nt == n && memcmp(buf + n_stream, tail, nt) == 0;
}

int main(void) {
    uint64_t seed = tu_seed("test_model_tokenizer");
    char path[4096];
    if (!tu_find_model(path, sizeof path)) {
        fprintf(stderr, "test_model_tokenizer: no model (set LOCKS_MODEL or fix scripts/fetch-model.sh)\n");
        return 1;
    }
    locks_status st;
    gguf *g = gguf_open(path, &st);
    if (!g) {
        fprintf(stderr, "gguf_open(%s): %s\n", path, locks_status_str(st));
        return 1;
    }
    double t0 = locks_now_ms();
    locks_tokenizer *t = locks_tokenizer_from_gguf(g, &st);
    double init_ms = locks_now_ms() - t0;
    gguf_close(g);
    if (!t) {
        fprintf(stderr, "locks_tokenizer_from_gguf: %s\n", locks_status_str(st));
        return 1;
    }
    printf("tokenizer from %s in %.1f ms\n", path, init_ms);

    /* The vocabulary's own facts (SmolLM2: 49152 tokens, ids 0..16 CONTROL). */
    locks_token_ids sp = locks_tokenizer_special(t);
    test_cond(locks_tokenizer_n_vocab(t) == 49152, "n_vocab %d", locks_tokenizer_n_vocab(t));
    test_cond(sp.bos == 1 && sp.eos == 2 && sp.unk == 0 && sp.pad == 2, "special ids %d %d %d %d", sp.bos,
              sp.eos, sp.unk, sp.pad);
    test_cond(locks_tokenizer_find(t, "<|im_start|>", 12) == 1, "<|im_start|> is 1");
    int missing = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        missing += locks_tokenizer_find(t, &c, 1) < 0;
    }
    test_cond(missing == 21, "%d bytes have no token (21 expected)", missing);
    test_cond(locks_tokenizer_type(t, 1) == LOCKS_TOKEN_CONTROL, "<|im_start|> is CONTROL");
    test_cond(locks_tokenizer_is_eog(t, 2) && locks_tokenizer_is_eog(t, 0) && !locks_tokenizer_is_eog(t, 1),
              "eog: <|im_end|> and <|endoftext|>, not <|im_start|>");

    /* Known ids and round trips on the reference texts. */
    int32_t *ids = malloc(sizeof(int32_t) * (1 << 20));
    char *buf = malloc((1 << 20) + 1);
    int bad_ids = 0, bad_rt = 0;
    for (int k = 0; k < N_REF_CASES; k++) {
        const ref_case *r = &ref_cases[k];
        int32_t n = -1;
        st = locks_tokenizer_encode(t, r->text, r->len, r->parse_special != 0, ids, 4096, &n);
        int ok = st == LOCKS_OK && n == r->n_ids && memcmp(ids, r->ids, sizeof(int32_t) * (size_t)n) == 0;
        if (!ok && bad_ids++ < 5) {
            fprintf(stderr, "FAIL ids of case %d \"%s\" (%s)\n", k, r->text, locks_status_str(st));
            print_ids("got", ids, n);
            print_ids("reference", r->ids, r->n_ids);
        }
        size_t n_out = 0;
        if (!r->lossless) continue; /* holds a byte with no token: checked by its ids only */
        ok = st == LOCKS_OK && locks_tokenizer_decode(t, ids, n, true, buf, 8192, &n_out) == LOCKS_OK &&
             n_out == r->len && memcmp(buf, r->text, n_out) == 0;
        ok = ok && round_trip(t, r->text, r->len, ids, buf);
        if (!ok && bad_rt++ < 5) fprintf(stderr, "FAIL round trip of case %d \"%s\"\n", k, r->text);
    }
    test_cond(bad_ids == 0, "%d of %d reference texts give other ids", bad_ids, N_REF_CASES);
    test_cond(bad_rt == 0, "%d of %d reference texts do not round-trip", bad_rt, N_REF_CASES);
    printf("reference texts: %d, id mismatches %d, round-trip failures %d\n", N_REF_CASES, bad_ids, bad_rt);

    /* Fresh random strings: fragments of the reference texts, random bytes (often
     * invalid UTF-8) and random code points, glued together. Only bytes that have a
     * token: SmolLM2 lacks 21 (0x04 ... 0xFF), which encode drops, as HF does. */
    int bad_rand = 0;
    for (int it = 0; it < 500; it++) {
        char s[1024];
        size_t n = 0;
        int32_t parts = tu_int(0, 24);
        for (int32_t j = 0; j < parts; j++) {
            int32_t kind = tu_int(0, 2);
            if (kind == 0) {
                const ref_case *r = &ref_cases[tu_int(0, N_REF_CASES - 1)];
                if (!r->lossless) continue;
                size_t a = r->len ? (size_t)tu_int(0, (int32_t)r->len - 1) : 0;
                size_t l = r->len ? (size_t)tu_int(0, (int32_t)(r->len - a)) : 0;
                if (l > 32) l = 32;
                memcpy(s + n, r->text + a, l);
                n += l;
            } else if (kind == 1) { /* a byte the vocabulary has (invalid UTF-8 is fine) */
                char b = (char)tu_int(0, 255);
                if (locks_tokenizer_find(t, &b, 1) >= 0) s[n++] = b;
            } else {
                uint32_t cp = (uint32_t)tu_int(0x80, 0x2FFFF);
                if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
                if (cp < 0x800) {
                    s[n++] = (char)(0xC0 | (cp >> 6));
                } else if (cp < 0x10000) {
                    s[n++] = (char)(0xE0 | (cp >> 12));
                    s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                } else {
                    s[n++] = (char)(0xF0 | (cp >> 18));
                    s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                    s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                }
                s[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        if (!round_trip(t, s, n, ids, buf) && bad_rand++ == 0) {
            fprintf(stderr, "FAIL round trip of a random %zu-byte string:", n);
            for (size_t i = 0; i < n && i < 64; i++) fprintf(stderr, " %02x", (uint8_t)s[i]);
            fprintf(stderr, "\n");
        }
    }
    test_cond(bad_rand == 0, "%d of 500 random strings do not round-trip (seed %llu)", bad_rand,
              (unsigned long long)seed);

    /* ChatML: the template text and its ids (reference case 22 is the same prompt). */
    locks_chat_msg msgs[1] = {{"user", "Hello"}};
    size_t n_chat = 0;
    CHECK(locks_chatml_format(msgs, 1, true, buf, 4096, &n_chat));
    test_cond(n_chat == ref_cases[22].len && memcmp(buf, ref_cases[22].text, n_chat) == 0, "chatml text '%s'", buf);
    int32_t n_ids = -1;
    CHECK(locks_tokenizer_encode(t, buf, n_chat, true, ids, 4096, &n_ids));
    test_cond(n_ids == ref_cases[22].n_ids && memcmp(ids, ref_cases[22].ids, sizeof(int32_t) * (size_t)n_ids) == 0,
              "chatml ids");

    /* Speed: ~1 MB of the reference texts, repeated. */
    size_t n_big = 0;
    for (int k = 0; n_big + 512 < (1 << 20); k = (k + 1) % N_REF_CASES) {
        memcpy(buf + n_big, ref_cases[k].text, ref_cases[k].len);
        n_big += ref_cases[k].len;
        buf[n_big++] = ' ';
    }
    t0 = locks_now_ms();
    st = locks_tokenizer_encode(t, buf, n_big, true, ids, 1 << 20, &n_ids);
    double ms = locks_now_ms() - t0;
    test_cond(st == LOCKS_OK, "encode of %zu bytes: %s", n_big, locks_status_str(st));
    printf("encode: %zu bytes -> %d tokens in %.1f ms (%.1f MB/s, %.0f ktok/s)\n", n_big, n_ids, ms,
           (double)n_big / ms / 1e3, n_ids / ms);

    free(ids);
    free(buf);
    locks_tokenizer_free(t);
    return test_report("test_model_tokenizer");
}
