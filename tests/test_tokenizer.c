/*
 * test_tokenizer.c — the BPE tokenizer on tiny hand-built vocabularies (no model).
 *
 *  1. Merge order: the heap BPE against a naive reference (repeatedly merge the
 *     lowest-rank, leftmost pair) on random strings and a random merge table.
 *  2. Pre-tokenizer rules, seen through merges that would cross a piece boundary.
 *  3. Special tokens: longest match, parse_special off, USER_DEFINED always matched.
 *  4. Round trips of random byte strings (invalid UTF-8 included) and streaming decode.
 *  5. ChatML, buffer-size contracts and bad arguments.
 *  6. Every code point's class (letter/number/space/other) against Hugging Face
 *     tokenizers' regex (tests/data/hf_unicode_classes.h).
 * Random inputs are fresh each run (the seed is printed; LOCKS_TEST_SEED=n repeats it).
 */
#include "test_util.h"

#include "locks_model.h"
#include "model/unicode_tables.h"

#include "data/hf_unicode_classes.h"

static uint32_t rng_u32(void) { return (uint32_t)(tu_next() >> 32); }

static void print_ids(const char *what, const int32_t *ids, int32_t n) {
    fprintf(stderr, "  %s:", what);
    for (int32_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* ------------------------------------------------------------------------------ */
/* A vocabulary under construction                                                  */
/* ------------------------------------------------------------------------------ */

/* GPT-2's byte-to-unicode map, written independently of the library's: printable
 * Latin-1 bytes stand for themselves, the rest map to U+0100.. in byte order. */
static uint32_t byte_cp(int b) {
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) return (uint32_t)b;
    uint32_t k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) k++;
    return 256 + k;
}

/* The GGUF text of the byte string s[0, n). */
static char *encode_bytes(const char *s, size_t n) {
    char *out = malloc(2 * n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = byte_cp((uint8_t)s[i]);
        if (c < 0x80) {
            *o++ = (char)c;
        } else {
            *o++ = (char)(0xC0 | (c >> 6));
            *o++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *o = '\0';
    return out;
}

typedef struct {
    char *tok[1024];
    int32_t type[1024];
    int32_t n_tok;
    char *merge[1024];
    int32_t n_merge;
} vocab;

static int32_t vocab_add(vocab *v, const char *raw, size_t n, int32_t type) {
    v->tok[v->n_tok] = type == LOCKS_TOKEN_NORMAL ? encode_bytes(raw, n) : strdup(raw);
    v->type[v->n_tok] = type;
    return v->n_tok++;
}

static void vocab_all_bytes(vocab *v) {
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        vocab_add(v, &c, 1, LOCKS_TOKEN_NORMAL);
    }
}

/* Adds the merge of raw strings a + b (both already tokens) and the merged token. */
static int32_t vocab_merge(vocab *v, const char *a, const char *b) {
    char *ea = encode_bytes(a, strlen(a)), *eb = encode_bytes(b, strlen(b));
    char *m = malloc(strlen(ea) + strlen(eb) + 2);
    sprintf(m, "%s %s", ea, eb);
    v->merge[v->n_merge++] = m;
    char raw[256];
    snprintf(raw, sizeof raw, "%s%s", a, b);
    free(ea);
    free(eb);
    return vocab_add(v, raw, strlen(raw), LOCKS_TOKEN_NORMAL);
}

static void vocab_free(vocab *v) {
    for (int32_t i = 0; i < v->n_tok; i++) free(v->tok[i]);
    for (int32_t i = 0; i < v->n_merge; i++) free(v->merge[i]);
    memset(v, 0, sizeof *v);
}

static locks_tokenizer *vocab_build(const vocab *v, const char *pre) {
    locks_status st;
    locks_tokenizer *t = locks_tokenizer_init((const char *const *)v->tok, v->type, v->n_tok,
                                              (const char *const *)v->merge, v->n_merge, pre, &st);
    test_cond(t && st == LOCKS_OK, "init: %s", locks_status_str(st));
    return t;
}

static int32_t encode(const locks_tokenizer *t, const char *s, bool special, int32_t *ids) {
    int32_t n = -1;
    locks_status st = locks_tokenizer_encode(t, s, strlen(s), special, ids, 256, &n);
    test_cond(st == LOCKS_OK, "encode '%s': %s", s, locks_status_str(st));
    return n;
}

static void expect_ids(const locks_tokenizer *t, const char *s, bool special, const int32_t *want,
                       int32_t n_want) {
    int32_t ids[256];
    int32_t n = encode(t, s, special, ids);
    int ok = n == n_want && memcmp(ids, want, sizeof(int32_t) * (size_t)n) == 0;
    test_cond(ok, "ids of '%s' (special %d)", s, special);
    if (!ok) {
        print_ids("got", ids, n);
        print_ids("want", want, n_want);
    }
}

/* ------------------------------------------------------------------------------ */
/* 1. Merge order against a naive BPE                                               */
/* ------------------------------------------------------------------------------ */

/* Merges of token ids (left, right) -> id at rank r = index, by linear search. */
typedef struct {
    int32_t left, right, id;
} naive_merge;

static int32_t naive_bpe(const naive_merge *m, int32_t n_m, int32_t *sym, int32_t n) {
    for (;;) {
        int32_t best_rank = n_m, best_pos = -1;
        for (int32_t i = 0; i + 1 < n; i++)
            for (int32_t r = 0; r < best_rank; r++)
                if (m[r].left == sym[i] && m[r].right == sym[i + 1]) {
                    best_rank = r;
                    best_pos = i;
                    break;
                }
        if (best_pos < 0) return n;
        sym[best_pos] = m[best_rank].id;
        memmove(sym + best_pos + 1, sym + best_pos + 2, sizeof(int32_t) * (size_t)(n - best_pos - 2));
        n--;
    }
}

static void test_merge_order(void) {
    vocab v = {0};
    vocab_all_bytes(&v);
    naive_merge m[300];
    char *raw[1024] = {0};
    for (int b = 0; b < 256; b++) {
        raw[b] = malloc(2);
        raw[b][0] = (char)b;
        raw[b][1] = '\0';
    }
    /* Random merges over the alphabet {a, b, c}: pick two existing tokens made of these
     * letters and join them, unless the result exists or is too long. */
    int32_t pool[400] = {'a', 'b', 'c'}, n_pool = 3, n_m = 0;
    for (int tries = 0; tries < 5000 && n_m < 200; tries++) {
        int32_t a = pool[rng_u32() % (uint32_t)n_pool], b = pool[rng_u32() % (uint32_t)n_pool];
        size_t la = strlen(raw[a]), lb = strlen(raw[b]);
        if (la + lb > 12) continue;
        char cat[32];
        snprintf(cat, sizeof cat, "%s%s", raw[a], raw[b]);
        int exists = 0;
        for (int32_t k = 256; k < v.n_tok; k++) exists |= strcmp(raw[k], cat) == 0;
        if (exists) continue;
        int32_t id = vocab_merge(&v, raw[a], raw[b]);
        raw[id] = strdup(cat);
        m[n_m++] = (naive_merge){a, b, id};
        pool[n_pool++] = id;
    }
    locks_tokenizer *t = vocab_build(&v, "gpt2");
    int bad = 0;
    for (int it = 0; it < 400 && t; it++) {
        char s[80];
        int32_t n = 1 + (int32_t)(rng_u32() % 70);
        for (int32_t i = 0; i < n; i++) s[i] = (char)('a' + rng_u32() % 3);
        s[n] = '\0';
        int32_t ref[80], ids[256];
        for (int32_t i = 0; i < n; i++) ref[i] = (uint8_t)s[i];
        int32_t n_ref = naive_bpe(m, n_m, ref, n);
        int32_t got = encode(t, s, true, ids);
        if (got != n_ref || memcmp(ids, ref, sizeof(int32_t) * (size_t)got) != 0) {
            if (bad++ == 0) {
                fprintf(stderr, "FAIL merge order on '%s'\n", s);
                print_ids("got", ids, got);
                print_ids("naive", ref, n_ref);
            }
        }
    }
    test_cond(bad == 0, "%d of 400 random strings differ from the naive BPE (%d merges)", bad, n_m);
    printf("merge order: 400 random strings, %d merges, %d mismatches\n", n_m, bad);
    locks_tokenizer_free(t);
    for (int i = 0; i < 1024; i++) free(raw[i]);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------------ */
/* 2. Pre-tokenizer rules                                                           */
/* ------------------------------------------------------------------------------ */

static void test_pretokenizer(void) {
    vocab v = {0};
    vocab_all_bytes(&v);
    /* Merges that would join across a piece boundary if the splits were wrong. */
    int32_t sp2 = vocab_merge(&v, " ", " ");   /* "  " */
    int32_t sp_a = vocab_merge(&v, " ", "a");  /* " a" */
    int32_t a_sp = vocab_merge(&v, "a", " ");  /* "a " (never allowed: a letter run stops) */
    int32_t d12 = vocab_merge(&v, "1", "2");   /* "12" */
    int32_t sp1 = vocab_merge(&v, " ", "1");   /* " 1" */
    int32_t n_q = vocab_merge(&v, "n", "'");   /* "n'" (contraction splits before ') */
    int32_t q_t = vocab_merge(&v, "'", "t");   /* "'t" */
    int32_t nl2 = vocab_merge(&v, "\n", "\n"); /* "\n\n" */
    int32_t sp_x = vocab_merge(&v, " ", "!");  /* " !" */
    int32_t x2 = vocab_merge(&v, "!", "!");    /* "!!" */
    (void)a_sp;
    (void)sp1;

    locks_tokenizer *g = vocab_build(&v, "gpt2");
    locks_tokenizer *d = vocab_build(&v, "smollm");
    if (g && d) {
        /* "a  a": "a", " " (all but the last space), " a" */
        expect_ids(g, "a  a", true, (int32_t[]){'a', ' ', sp_a}, 3);
        /* "a   a": the run keeps two spaces */
        expect_ids(g, "a   a", true, (int32_t[]){'a', sp2, sp_a}, 3);
        /* trailing white space stays one piece */
        expect_ids(g, "a   ", true, (int32_t[]){'a', sp2, ' '}, 3);
        /* digits: joined under gpt2 ("12" outranks " 1"), one per piece under smollm, where
         * " 1" cannot form either */
        expect_ids(g, "12 12", true, (int32_t[]){d12, ' ', d12}, 3);
        expect_ids(d, "12 12", true, (int32_t[]){'1', '2', ' ', '1', '2'}, 5);
        /* contractions */
        expect_ids(g, "don't", true, (int32_t[]){'d', 'o', 'n', q_t}, 4);
        expect_ids(g, "n'x", true, (int32_t[]){'n', '\'', 'x'}, 3);
        (void)n_q;
        /* "\n\na": "\n" then "\n" (a single space before a non-space), then "a" */
        expect_ids(g, "\n\na", true, (int32_t[]){'\n', '\n', 'a'}, 3);
        expect_ids(g, "\n\n", true, (int32_t[]){nl2}, 1);
        /* punctuation runs take one leading space */
        expect_ids(g, "a !!", true, (int32_t[]){'a', sp_x, '!'}, 3);
        expect_ids(g, "!!!!", true, (int32_t[]){x2, x2}, 2);
        /* a tab is white space but not the optional ' ' */
        expect_ids(g, "\ta", true, (int32_t[]){'\t', 'a'}, 2);
        /* U+00A0 is white space: "a\u00a0 a" -> "a", "\u00a0", " a" */
        expect_ids(g, "a\xc2\xa0 a", true, (int32_t[]){'a', 0xC2, 0xA0, sp_a}, 4);
        /* a letter outside ASCII ends the number run but joins a letter run */
        expect_ids(g, "1\xc3\xa9", true, (int32_t[]){'1', 0xC3, 0xA9}, 3);
    }
    locks_tokenizer_free(g);
    locks_tokenizer_free(d);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------------ */
/* 3. Special tokens                                                                */
/* ------------------------------------------------------------------------------ */

static void test_special(void) {
    vocab v = {0};
    int32_t start = vocab_add(&v, "<|im_start|>", 12, LOCKS_TOKEN_CONTROL);
    int32_t end = vocab_add(&v, "<|im_end|>", 10, LOCKS_TOKEN_CONTROL);
    int32_t lt = vocab_add(&v, "<|", 2, LOCKS_TOKEN_CONTROL); /* a prefix of both */
    int32_t user = vocab_add(&v, "<tool>", 6, LOCKS_TOKEN_USER_DEFINED);
    int32_t base = v.n_tok;
    vocab_all_bytes(&v);
    locks_tokenizer *t = vocab_build(&v, "smollm");
    if (t) {
        int32_t B = base;
        expect_ids(t, "<|im_start|>a<|im_end|>", true, (int32_t[]){start, B + 'a', end}, 3);
        expect_ids(t, "<|<|im_end|>", true, (int32_t[]){lt, end}, 2);
        /* parse_special off: CONTROL texts are plain text, USER_DEFINED still match */
        expect_ids(t, "<|x<tool>", false,
                   (int32_t[]){B + '<', B + '|', B + 'x', user}, 4);
        expect_ids(t, "<tool><tool>", true, (int32_t[]){user, user}, 2);
        test_cond(locks_tokenizer_find(t, "<|im_end|>", 10) == end, "find <|im_end|>");
        test_cond(locks_tokenizer_find(t, "zz", 2) == -1, "find of a missing text");
        test_cond(locks_tokenizer_is_eog(t, end), "<|im_end|> ends generation");
        test_cond(!locks_tokenizer_is_eog(t, start), "<|im_start|> does not end generation");
        /* decode hides CONTROL tokens unless asked */
        int32_t ids[3] = {start, B + 'a', end};
        char out[64];
        size_t n = 0;
        test_cond(locks_tokenizer_decode(t, ids, 3, false, out, sizeof out, &n) == LOCKS_OK &&
                  strcmp(out, "a") == 0,
              "decode without specials: '%s'", out);
        test_cond(locks_tokenizer_decode(t, ids, 3, true, out, sizeof out, &n) == LOCKS_OK &&
                  strcmp(out, "<|im_start|>a<|im_end|>") == 0,
              "decode with specials: '%s'", out);
        test_cond(locks_tokenizer_set_special(t, (locks_token_ids){-1, end, -1, -1}) == LOCKS_OK, "set");
        test_cond(locks_tokenizer_special(t).eos == end, "eos");
        test_cond(locks_tokenizer_set_special(t, (locks_token_ids){v.n_tok, -1, -1, -1}) ==
                  LOCKS_ERR_INVALID_ARG, "bos out of range");
        test_cond(locks_tokenizer_special(t).eos == end, "failed set changes nothing");
    }
    locks_tokenizer_free(t);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------------ */
/* 4. Round trips and streaming decode                                              */
/* ------------------------------------------------------------------------------ */

static void test_round_trip(void) {
    vocab v = {0};
    vocab_all_bytes(&v);
    vocab_merge(&v, " ", "t");
    vocab_merge(&v, " t", "h");
    vocab_merge(&v, "\xc3", "\xa9");         /* é */
    vocab_merge(&v, "\xe6\x97", "\xa5");     /* lower rank, but needs the next merge first */
    vocab_merge(&v, "\xe6", "\x97");
    vocab_merge(&v, "\xf0\x9f", "\x98\x80"); /* parts not in the vocabulary: skipped */
    vocab_add(&v, "<|im_end|>", 10, LOCKS_TOKEN_CONTROL);
    locks_tokenizer *t = vocab_build(&v, "smollm");
    static const char *pieces[] = {" th", "e", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", " ",
                                   "\n", "12", "'s", "\xff", "\xc3", "\x80", "\xed\xa0\x80", "A"};
    int bad = 0;
    for (int it = 0; it < 300 && t; it++) {
        char s[512];
        size_t n = 0;
        int32_t k = (int32_t)(rng_u32() % 40);
        for (int32_t j = 0; j < k; j++) {
            if (rng_u32() % 4 == 0) { /* a random byte, often invalid UTF-8 */
                s[n++] = (char)(rng_u32() & 0xFF);
            } else {
                const char *p = pieces[rng_u32() % (sizeof pieces / sizeof pieces[0])];
                memcpy(s + n, p, strlen(p));
                n += strlen(p);
            }
        }
        int32_t ids[512], n_ids = -1;
        locks_status st = locks_tokenizer_encode(t, s, n, false, ids, 512, &n_ids);
        char out[600];
        size_t n_out = 0;
        if (st == LOCKS_OK) st = locks_tokenizer_decode(t, ids, n_ids, true, out, sizeof out, &n_out);
        /* streaming: the chunks plus the flushed tail equal the whole */
        char stream[600];
        size_t n_stream = 0;
        locks_detok_state ds = {{0}, 0};
        for (int32_t i = 0; st == LOCKS_OK && i < n_ids; i++) {
            size_t w = 0;
            st = locks_tokenizer_decode_stream(t, &ds, ids[i], true, stream + n_stream,
                                               sizeof stream - n_stream, &w);
            n_stream += w;
        }
        n_stream += locks_detok_flush(&ds, stream + n_stream);
        int ok = st == LOCKS_OK && n_ids <= (int32_t)n && n_out == n && memcmp(out, s, n) == 0 &&
                 n_stream == n && memcmp(stream, s, n) == 0;
        if (!ok && bad++ == 0) {
            fprintf(stderr, "FAIL round trip of a %zu-byte string (%s):", n, locks_status_str(st));
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", (uint8_t)s[i]);
            fprintf(stderr, "\n");
        }
    }
    test_cond(bad == 0, "%d of 300 random byte strings do not round-trip", bad);

    /* Streaming on a UTF-8 character split over tokens: é = C3 A9, 😀 = F0 9F 98 80. */
    if (t) {
        int32_t ids[8] = {0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, 'x', 0xC3};
        static const size_t want_n[8] = {0, 2, 0, 0, 0, 4, 1, 0};
        locks_detok_state ds = {{0}, 0};
        char out[16], all[32];
        size_t n_all = 0;
        for (int i = 0; i < 8; i++) {
            size_t w = 99;
            locks_status st = locks_tokenizer_decode_stream(t, &ds, ids[i], false, out, sizeof out, &w);
            test_cond(st == LOCKS_OK && w == want_n[i], "stream step %d wrote %zu, want %zu", i, w, want_n[i]);
            memcpy(all + n_all, out, w);
            n_all += w;
        }
        char tail[4];
        size_t nt = locks_detok_flush(&ds, tail);
        test_cond(nt == 1 && (uint8_t)tail[0] == 0xC3, "flush gives the unfinished lead byte");
        test_cond(n_all == 7 && memcmp(all, "\xc3\xa9\xf0\x9f\x98\x80x", 7) == 0, "stream bytes");
        /* bytes that can never be UTF-8 are not held back */
        size_t w = 99;
        locks_tokenizer_decode_stream(t, &ds, 0xFF, false, out, sizeof out, &w);
        test_cond(w == 1, "0xFF passes through (wrote %zu)", w);
        locks_tokenizer_decode_stream(t, &ds, 0xE0, false, out, sizeof out, &w);
        test_cond(w == 0, "E0 is held");
        locks_tokenizer_decode_stream(t, &ds, 0x80, false, out, sizeof out, &w);
        test_cond(w == 2, "E0 80 can never be valid: both pass through (wrote %zu)", w);
        test_cond(locks_tokenizer_decode_stream(t, &ds, 0xC3, false, out, 0, &w) == LOCKS_ERR_INVALID_ARG,
              "cap too small");
    }
    locks_tokenizer_free(t);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------------ */
/* 5. ChatML, sizes, bad arguments                                                  */
/* ------------------------------------------------------------------------------ */

static void test_chatml_and_args(void) {
    locks_chat_msg msgs[2] = {{"system", "Be brief."}, {"user", "Hi"}};
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n";
    char out[256];
    size_t n = 0;
    test_cond(locks_chatml_format(msgs, 2, true, out, sizeof out, &n) == LOCKS_OK && strcmp(out, want) == 0 &&
              n == strlen(want),
          "chatml: '%s'", out);
    test_cond(locks_chatml_format(msgs, 2, true, out, 10, &n) == LOCKS_ERR_INVALID_ARG && n == strlen(want),
          "chatml small buffer reports the size (%zu)", n);
    test_cond(locks_chatml_format(msgs, 1, false, out, sizeof out, &n) == LOCKS_OK &&
              strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n") == 0,
          "chatml without generation prompt");

    vocab v = {0};
    vocab_all_bytes(&v);
    locks_status st = LOCKS_OK;
    test_cond(!locks_tokenizer_init((const char *const *)v.tok, v.type, v.n_tok, NULL, 0, "nonesuch", &st) &&
              st == LOCKS_ERR_UNSUPPORTED,
          "unknown pre-tokenizer: %s", locks_status_str(st));
    v.type[5] = 9;
    test_cond(!locks_tokenizer_init((const char *const *)v.tok, v.type, v.n_tok, NULL, 0, "gpt2", &st) &&
              st == LOCKS_ERR_INVALID_ARG,
          "bad token type: %s", locks_status_str(st));
    v.type[5] = LOCKS_TOKEN_NORMAL;
    test_cond(!locks_tokenizer_init(NULL, NULL, 3, NULL, 0, "gpt2", &st) && st == LOCKS_ERR_INVALID_ARG,
          "NULL tokens");
    locks_tokenizer *t = vocab_build(&v, NULL);
    if (t) {
        int32_t ids[4], got = -1;
        test_cond(locks_tokenizer_encode(t, "hello", 5, true, ids, 4, &got) == LOCKS_ERR_INVALID_ARG && got == 5,
              "encode with a small buffer reports the count (%d)", got);
        test_cond(locks_tokenizer_encode(t, "", 0, true, ids, 0, &got) == LOCKS_OK && got == 0, "empty text");
        const char *p;
        size_t l;
        test_cond(locks_tokenizer_piece(t, 256, false, &p, &l) == LOCKS_ERR_INVALID_ARG, "piece out of range");
        test_cond(locks_tokenizer_piece(t, 'A', false, &p, &l) == LOCKS_OK && l == 1 && p[0] == 'A', "piece");
        int32_t bad_id = -3;
        test_cond(locks_tokenizer_decode(t, &bad_id, 1, true, out, sizeof out, &n) == LOCKS_ERR_INVALID_ARG,
              "decode of a bad id");
    }
    locks_tokenizer_free(t);

    /* A vocabulary missing bytes: they are dropped (HF and llama.cpp do the same), and
     * the bytes around one inside a piece still merge: "!#!" -> "!!". */
    vocab w = {0};
    vocab_add(&w, "a", 1, LOCKS_TOKEN_NORMAL);
    vocab_add(&w, "<unk>", 5, LOCKS_TOKEN_UNKNOWN);
    vocab_add(&w, "!", 1, LOCKS_TOKEN_NORMAL);
    vocab_merge(&w, "!", "!");
    locks_tokenizer *u = vocab_build(&w, "gpt2");
    if (u) {
        locks_tokenizer_set_special(u, (locks_token_ids){-1, -1, 1, -1});
        int32_t ids[8], got = -1;
        test_cond(locks_tokenizer_encode(u, "ab", 2, true, ids, 8, &got) == LOCKS_OK && got == 1 && ids[0] == 0,
              "missing byte is dropped (got %d ids)", got);
        test_cond(locks_tokenizer_encode(u, "!#!", 3, true, ids, 8, &got) == LOCKS_OK && got == 1 && ids[0] == 3,
              "neighbours of a dropped byte in one piece merge (got %d ids)", got);
    }
    locks_tokenizer_free(u);
    vocab_free(&w);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------------ */
/* 6. Unicode classes                                                               */
/* ------------------------------------------------------------------------------ */

static void test_unicode_classes(void) {
    int32_t bad = 0;
    for (int r = 0; r < N_HF_CLASS_RUNS; r++) {
        uint32_t end = r + 1 < N_HF_CLASS_RUNS ? hf_class_runs[r + 1].start : 0x110000;
        for (uint32_t cp = hf_class_runs[r].start; cp < end; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue; /* not encodable in UTF-8 */
            int got = (int)locks_unicode_class(cp);
            if (got != hf_class_runs[r].cls && bad++ < 5)
                fprintf(stderr, "  U+%04X: class %d, tokenizers says %d\n", cp, got, hf_class_runs[r].cls);
        }
    }
    test_cond(bad == 0, "%d code points classified unlike Hugging Face tokenizers", bad);
    test_cond(hf_class_runs[0].start == 0 && N_HF_CLASS_RUNS > 100, "reference data looks wrong");
}

int main(void) {
    tu_seed("test_tokenizer");
    test_merge_order();
    test_pretokenizer();
    test_special();
    test_round_trip();
    test_chatml_and_args();
    test_unicode_classes();
    return test_report("test_tokenizer");
}
