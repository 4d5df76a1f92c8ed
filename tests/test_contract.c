/*
 * test_contract.c — the API under misuse (issue 21): every refused call says why
 * (locks_last_error names the argument and its value) and leaves the cache as it was;
 * attending tokens never written is an error (append without write, layers written to
 * different lengths); values past the fp16 range are refused at the write like NaN; a
 * page freed by seq_remove has no summary; a caller-owned cache counts as free only
 * the pages no sequence holds and forgets ShadowKV's basis when a sequence is
 * re-pointed at other pages. Outputs are compared with a float64 reference on fresh
 * random data.
 */
#include "test_util.h"
#include "util.h"

enum { P = LOCKS_PAGE, D = 64 };

/* last error contains `want` (and names the call) */
static void expect_msg(locks_status st, locks_status want_st, const char *call, const char *want) {
    const char *m = locks_last_error();
    test_cond(st == want_st, "%s: got %s, want %s (%s)", call, locks_status_str(st), locks_status_str(want_st), m);
    test_cond(strstr(m, call) != NULL && strstr(m, want) != NULL, "%s: message \"%s\" lacks \"%s\"", call, m, want);
}

static locks_cache *cache(int32_t layers, int32_t hkv, int32_t n_pages, uint32_t selectors) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = layers;
    cp.n_kv_heads = hkv;
    cp.head_dim = D;
    cp.n_pages = n_pages;
    cp.max_seqs = 4;
    cp.selectors = selectors;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    return c;
}

/* Dense float64 attention of q [hq][D] over the first n stored tokens of (layer, seq), from
 * the fp16 values the cache holds (k/v [n][hkv][D] as written, rounded to fp16 here). */
static void reference(const float *k, const float *v, int32_t n, int32_t hkv, int32_t hq, const float *q,
                      double *out) {
    double *K = malloc(sizeof(double) * (size_t)n * D), *V = malloc(sizeof(double) * (size_t)n * D), qd[D];
    SETUP(K && V);
    const int32_t G = hq / hkv;
    for (int32_t h = 0; h < hq; h++) {
        for (int32_t t = 0; t < n; t++)
            for (int32_t x = 0; x < D; x++) {
                const size_t i = ((size_t)t * hkv + (size_t)(h / G)) * D + (size_t)x;
                K[(size_t)t * D + x] = (double)locks_f16_to_f32(locks_f32_to_f16(k[i]));
                V[(size_t)t * D + x] = (double)locks_f16_to_f32(locks_f32_to_f16(v[i]));
            }
        for (int32_t x = 0; x < D; x++) qd[x] = q[(size_t)h * D + x];
        tu_ref_attention(qd, K, V, n, D, 1.0 / sqrt((double)D), out + (size_t)h * D);
    }
    free(K);
    free(V);
}

static void test_messages(void) {
    locks_cache_params cp = locks_cache_default_params();
    locks_status st;
    struct {
        const char *field, *want;
        int32_t value;
    } bad[] = {{"n_threads", "n_threads 0", 0},   {"n_threads", "n_threads 1000", 1000}, {"head_dim", "head_dim 7", 7},
               {"head_dim", "head_dim 1024", 1024}, {"rank", "rank 0", 0},                {"rank", "rank 100", 100}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cp = locks_cache_default_params();
        cp.n_pages = 4;
        if (!strcmp(bad[i].field, "n_threads")) cp.n_threads = bad[i].value;
        if (!strcmp(bad[i].field, "head_dim")) cp.head_dim = bad[i].value;
        if (!strcmp(bad[i].field, "rank")) cp.rank = bad[i].value;
        locks_cache *c = locks_cache_init(cp, &st);
        test_cond(!c, "%s accepted", bad[i].want);
        expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_cache_init", bad[i].want);
    }

    locks_cache *c = cache(1, 2, 8, LOCKS_SEL_BIT(LOCKS_SEL_LOCKS));
    int32_t seq, seq2;
    CHECK(locks_cache_seq_add(c, &seq));
    float q[6 * D], out[6 * D];
    tu_fill_normal(q, 6 * D, 1.0);
    const float sentinel = 12345.f;
    for (int i = 0; i < 6 * D; i++) out[i] = sentinel;
    locks_step_params sp = locks_step_default_params();
    st = locks_decode_step(c, 0, &seq, 1, q, 2, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "is empty");
    float kv[2 * 2 * D];
    tu_fill_normal(kv, 2 * 2 * D, 1.0);
    CHECK(locks_cache_append(c, seq, 2));
    CHECK(locks_cache_write(c, seq, 0, 0, 2, kv, kv));
    st = locks_decode_step(c, 0, &seq, 1, q, 3, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "n_q_heads 3 is not a positive multiple of n_kv_heads 2");
    st = locks_decode_step(c, 1, &seq, 1, q, 2, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "layer 1");
    seq2 = 3;
    st = locks_decode_step(c, 0, &seq2, 1, q, 2, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_NO_SEQ, "locks_decode_step", "sequence 3");
    sp.budget = 0;
    st = locks_decode_step(c, 0, &seq, 1, q, 2, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_BUDGET, "locks_decode_step", "budget 0");
    sp = locks_step_default_params();
    sp.scale = -1.f;
    st = locks_decode_step(c, 0, &seq, 1, q, 2, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "scale -1");
    sp = locks_step_default_params();
    sp.selector = LOCKS_SEL_QUEST;
    st = locks_decode_step(c, 0, &seq, 1, q, 2, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_NO_META, "locks_decode_step", "quest");
    int ok = 1;
    for (int i = 0; i < 6 * D; i++) ok &= out[i] == sentinel;
    test_cond(ok, "a refused step wrote its output");
    st = locks_cache_append(c, seq, 1000);
    expect_msg(st, LOCKS_ERR_POOL_FULL, "locks_cache_append", "1000 more tokens");
    st = locks_cache_write(c, seq, 0, 1, 2, kv, kv);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_cache_write", "not reserved");
    /* a success in between (a caller's rollback) keeps the failure's reason; the next
     * failure has its own */
    CHECK(locks_cache_write(c, seq, 0, 0, 2, kv, kv));
    test_cond(strstr(locks_last_error(), "not reserved") != NULL, "reason lost after a success: \"%s\"",
              locks_last_error());
    st = locks_cache_seq_truncate(c, seq, 5);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_cache_seq_truncate", "len 5");
    locks_cache_free(c);
}

/* A cache of `layers` layers, hkv KV heads and 16 pages with one empty sequence, and
 * n tokens of random keys and values [n][hkv][D] to write into it; kv_free frees all. */
typedef struct {
    locks_cache *c;
    int32_t seq;
    float *k, *v;
} cache_kv;

static cache_kv with_kv(int32_t layers, int32_t hkv, int32_t n) {
    cache_kv x = {cache(layers, hkv, 16, LOCKS_SEL_BIT(LOCKS_SEL_LOCKS)), -1, NULL, NULL};
    CHECK(locks_cache_seq_add(x.c, &x.seq));
    const size_t len = (size_t)n * (size_t)hkv * D;
    x.k = malloc(sizeof(float) * len);
    x.v = malloc(sizeof(float) * len);
    SETUP(x.k && x.v);
    tu_fill_normal(x.k, len, 1.0);
    tu_fill_normal(x.v, len, 1.0);
    return x;
}

static void kv_free(cache_kv *x) {
    free(x->k);
    free(x->v);
    locks_cache_free(x->c);
}

/* A refused write (NaN, Inf, |x| > 65504) stores nothing: the next step gives what it
 * gave before, which is float64 dense attention over the tokens written so far. */
static void test_write_refused(void) {
    const int32_t hkv = 2, hq = 4, n = 40;
    cache_kv x = with_kv(1, hkv, n);
    locks_cache *c = x.c;
    int32_t seq = x.seq;
    float *k = x.k, *v = x.v;
    const size_t row = (size_t)hkv * D;
    v[5] = 65504.f; /* the largest fp16 value is fine */
    CHECK(locks_cache_append(c, seq, n));
    CHECK(locks_cache_write(c, seq, 0, 0, n, k, v));
    float q[4 * D], out0[4 * D], out1[4 * D];
    double ref[4 * D];
    tu_fill_normal(q, (size_t)hq * D, 0.5);
    locks_step_params sp = locks_step_default_params();
    CHECK(locks_decode_step(c, 0, &seq, 1, q, hq, &sp, out0, NULL, NULL));
    reference(k, v, n, hkv, hq, q, ref);
    tu_close("dense before", out0, ref, (size_t)hq * D, 1e-3, 1e-3);
    const float bad[] = {NAN, INFINITY, 7e4f, -65520.f};
    for (int b = 0; b < 4; b++) {
        /* overwrite tokens 8..23 (fills page 1 again) with one bad value among them */
        float *kk = malloc(sizeof(float) * 16 * row), *vv = malloc(sizeof(float) * 16 * row);
        SETUP(kk && vv);
        tu_fill_normal(kk, 16 * row, 1.0);
        tu_fill_normal(vv, 16 * row, 1.0);
        (b % 2 ? kk : vv)[(size_t)tu_int(0, 16 * (int32_t)row - 1)] = bad[b];
        locks_status st = locks_cache_write(c, seq, 0, 8, 16, kk, vv);
        expect_msg(st, LOCKS_ERR_NONFINITE, "locks_cache_write", b >= 2 ? "fp16 range" : "not finite");
        test_cond(locks_cache_seq_len(c, seq) == n, "length changed to %d", locks_cache_seq_len(c, seq));
        CHECK(locks_decode_step(c, 0, &seq, 1, q, hq, &sp, out1, NULL, NULL));
        test_cond(!memcmp(out0, out1, sizeof out0), "a refused write (%g) changed the output", (double)bad[b]);
        free(kk);
        free(vv);
    }
    kv_free(&x);
}

/* Appended but unwritten tokens, and a layer written shorter than another, are refused
 * (step, score, attend, prefix attention); the written layer still matches float64. */
static void test_unwritten(void) {
    const int32_t hkv = 2, hq = 4, n = 100;
    cache_kv x = with_kv(2, hkv, n);
    locks_cache *c = x.c;
    int32_t seq = x.seq;
    const float *k = x.k, *v = x.v;
    const size_t row = (size_t)hkv * D;
    float q[4 * D], out[4 * D];
    double ref[4 * D];
    tu_fill_normal(q, (size_t)hq * D, 0.5);
    locks_step_params sp = locks_step_default_params();
    CHECK(locks_cache_append(c, seq, n));
    locks_status st = locks_decode_step(c, 0, &seq, 1, q, hq, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "token 0 is reserved but was never written");
    CHECK(locks_cache_write(c, seq, 0, 0, n, k, v));
    CHECK(locks_cache_write(c, seq, 1, 0, n / 2, k, v)); /* layer 1: only the first 50 */
    st = locks_decode_step(c, 1, &seq, 1, q, hq, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "layer 1: token 50");
    float mass[2 * 8];
    sp.selector = LOCKS_SEL_LOCKS;
    st = locks_score(c, 1, seq, q, hq, &sp, mass);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_score", "token 50");
    int32_t pages[2 * 7], np[2] = {7, 7};
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 7; i++) pages[h * 7 + i] = i;
    st = locks_attend(c, 1, seq, q, hq, 0.f, pages, np, 7, out, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_attend", "token 50");
    st = locks_attend_prefix(c, 1, seq, 60, q, hq, out);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_attend_prefix", "token 50");
    CHECK(locks_attend_prefix(c, 1, seq, 50, q, hq, out)); /* the written prefix is fine */
    reference(k, v, 50, hkv, hq, q, ref);
    tu_close("prefix 50 of layer 1", out, ref, (size_t)hq * D, 1e-3, 1e-3);
    CHECK(locks_decode_step(c, 0, &seq, 1, q, hq, &sp, out, NULL, NULL));
    reference(k, v, n, hkv, hq, q, ref);
    tu_close("layer 0, all written", out, ref, (size_t)hq * D, 1e-3, 1e-3);
    /* writing the rest of layer 1 makes it attendable */
    CHECK(locks_cache_write(c, seq, 1, n / 2, n - n / 2, k + (size_t)(n / 2) * row, v + (size_t)(n / 2) * row));
    CHECK(locks_decode_step(c, 1, &seq, 1, q, hq, &sp, out, NULL, NULL));
    tu_close("layer 1, all written", out, ref, (size_t)hq * D, 1e-3, 1e-3);
    /* a truncated and regrown sequence must be written again */
    CHECK(locks_cache_seq_truncate(c, seq, 40));
    CHECK(locks_cache_append(c, seq, 10));
    st = locks_decode_step(c, 0, &seq, 1, q, hq, &sp, out, NULL, NULL);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_decode_step", "token 40");
    kv_free(&x);
}

/* seq_remove gives the pages back: their summaries are gone. */
static void test_freed_summary(void) {
    locks_cache *c = cache(1, 1, 8, LOCKS_SEL_BIT(LOCKS_SEL_LOCKS));
    int32_t seq, n_pages;
    CHECK(locks_cache_seq_add(c, &seq));
    float kv[48 * D];
    tu_fill_normal(kv, 48 * D, 1.0);
    CHECK(locks_cache_append(c, seq, 40));
    CHECK(locks_cache_write(c, seq, 0, 0, 40, kv, kv));
    const int32_t page = locks_cache_block_table(c, seq, &n_pages)[1];
    float mu[D], basis[8 * D], coef[16 * 8];
    CHECK(locks_cache_summary_get(c, 0, 0, page, mu, basis, coef));
    CHECK(locks_cache_seq_remove(c, seq));
    locks_status st = locks_cache_summary_get(c, 0, 0, page, mu, basis, coef);
    expect_msg(st, LOCKS_ERR_INVALID_ARG, "locks_cache_summary_get", "no summary");
    CHECK(locks_cache_seq_add(c, &seq)); /* a truncate frees pages too */
    CHECK(locks_cache_append(c, seq, 40));
    CHECK(locks_cache_write(c, seq, 0, 0, 40, kv, kv));
    const int32_t p1 = locks_cache_block_table(c, seq, &n_pages)[1];
    CHECK(locks_cache_seq_truncate(c, seq, 10));
    st = locks_cache_summary_get(c, 0, 0, p1, mu, basis, coef);
    test_cond(st == LOCKS_ERR_INVALID_ARG, "summary of a page freed by truncate: %s", locks_status_str(st));
    locks_cache_free(c);
}

/* locks_cache_write_f16 / locks_cache_read_summaries. fp16 rows stored as given equal
 * locks_cache_write's of the same values (pages and summaries, bit for bit, in pieces
 * that split pages); summaries given to the write are stored as given (read back equal)
 * and the selectors' page hooks run (quest and locks steps equal the source's); a page
 * the write fills but does not cover whole gets a built summary; misuse is refused with
 * nothing stored. */
static void test_write_f16(locks_summary_prec prec) {
    enum { N = 75, HKV = 2, HQ = 4, L = 2 };
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = L;
    cp.n_kv_heads = HKV;
    cp.head_dim = D;
    cp.n_pages = 32;
    cp.max_seqs = 5;
    cp.summary_prec = prec;
    cp.selectors = LOCKS_SEL_BIT(LOCKS_SEL_LOCKS) | LOCKS_SEL_BIT(LOCKS_SEL_QUEST);
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    const size_t row = (size_t)HKV * D, rec = locks_summary_bytes(D, cp.rank, prec), per = (size_t)(N / P) * HKV * rec;
    float *k = malloc(sizeof(float) * N * row * L), *v = malloc(sizeof(float) * N * row * L);
    uint16_t *kh = malloc(sizeof(uint16_t) * N * row * L), *vh = malloc(sizeof(uint16_t) * N * row * L);
    unsigned char *sa = malloc(per * L), *sb = malloc(per * L);
    SETUP(k && v && kh && vh && sa && sb);
    tu_fill_normal(k, N * row * L, 1.0);
    tu_fill_normal(v, N * row * L, 1.0);
    for (size_t i = 0; i < N * row * L; i++) kh[i] = locks_f32_to_f16(k[i]), vh[i] = locks_f32_to_f16(v[i]);
    int32_t a, b, s2, s3;
    CHECK(locks_cache_seq_add(c, &a));
    CHECK(locks_cache_seq_add(c, &b));
    CHECK(locks_cache_seq_add(c, &s2));
    CHECK(locks_cache_seq_add(c, &s3));
    CHECK(locks_cache_append(c, a, N));
    CHECK(locks_cache_append(c, b, N));
    CHECK(locks_cache_append(c, s2, N));
    for (int32_t l = 0; l < L; l++) {
        const size_t o = (size_t)l * N * row;
        CHECK(locks_cache_write(c, a, l, 0, N, k + o, v + o));
        CHECK(locks_cache_read_summaries(c, a, l, sa + (size_t)l * per));
        /* b: fp16, no summaries, in pieces that split pages: built, as a's */
        CHECK(locks_cache_write_f16(c, b, l, 0, 21, kh + o, vh + o, NULL));
        CHECK(locks_cache_write_f16(c, b, l, 21, N - 21, kh + o + 21 * row, vh + o + 21 * row, NULL));
        /* s2: page 0 as fp16 alone, the rest with a's summaries of pages 1.. */
        CHECK(locks_cache_write_f16(c, s2, l, 0, P, kh + o, vh + o, NULL));
        CHECK(locks_cache_write_f16(c, s2, l, P, N - P, kh + o + P * row, vh + o + P * row,
                                    sa + (size_t)l * per + HKV * rec));
    }
    int32_t np_a = 0, np_b = 0;
    const int32_t *ta = locks_cache_block_table(c, a, &np_a), *tb = locks_cache_block_table(c, b, &np_b);
    int same_kv = np_a == np_b;
    for (int32_t l = 0; l < L && same_kv; l++)
        for (int32_t i = 0; i < np_a; i++) {
            const int32_t n_tok = i == np_a - 1 ? N % P : P; /* the partial page's slots past N are not written */
            for (int32_t h = 0; h < HKV; h++)
                same_kv &= !memcmp(locks_cache_k_page(c, l, ta[i]) + (size_t)h * P * D,
                                   locks_cache_k_page(c, l, tb[i]) + (size_t)h * P * D, sizeof(uint16_t) * n_tok * D) &&
                           !memcmp(locks_cache_v_page(c, l, ta[i]) + (size_t)h * P * D,
                                   locks_cache_v_page(c, l, tb[i]) + (size_t)h * P * D, sizeof(uint16_t) * n_tok * D);
        }
    test_cond(same_kv, "write_f16's pages differ from locks_cache_write's of the same values");
    for (int32_t l = 0; l < L; l++) {
        CHECK(locks_cache_read_summaries(c, b, l, sb + (size_t)l * per));
        test_cond(!memcmp(sa + (size_t)l * per, sb + (size_t)l * per, per), "layer %d: write_f16 built other summaries", l);
        CHECK(locks_cache_read_summaries(c, s2, l, sb + (size_t)l * per));
        test_cond(!memcmp(sa + (size_t)l * per, sb + (size_t)l * per, per), "layer %d: given summaries not stored", l);
    }
    /* the steps over a and s2 (quest: the min/max built by the hooks; locks: the copied
     * summaries) give the same outputs, bit for bit */
    float q[HQ * D], oa[HQ * D], ob[HQ * D];
    tu_fill_normal(q, HQ * D, 1.0);
    locks_step_params sp = locks_step_default_params();
    sp.budget = 3 * P;
    const locks_selector sels[2] = {LOCKS_SEL_QUEST, LOCKS_SEL_LOCKS};
    for (int i = 0; i < 2; i++)
        for (int32_t l = 0; l < L; l++) {
            sp.selector = sels[i];
            CHECK(locks_decode_step(c, l, &a, 1, q, HQ, &sp, oa, NULL, NULL));
            CHECK(locks_decode_step(c, l, &s2, 1, q, HQ, &sp, ob, NULL, NULL));
            test_cond(!memcmp(oa, ob, sizeof oa), "%s step, layer %d: given summaries differ from built ones",
                      locks_selector_name(sels[i]), l);
        }
    /* a page the write fills but does not cover whole: built, whatever sums says */
    CHECK(locks_cache_append(c, s3, N));
    for (int32_t l = 0; l < L; l++) {
        const size_t o = (size_t)l * N * row;
        memset(sb, 0, per); /* all-zero records: valid, and wrong */
        CHECK(locks_cache_write_f16(c, s3, l, 0, 8, kh + o, vh + o, NULL));
        CHECK(locks_cache_write_f16(c, s3, l, 16, N - 16, kh + o + 16 * row, vh + o + 16 * row, sa + (size_t)l * per + HKV * rec));
        CHECK(locks_cache_write_f16(c, s3, l, 8, 8, kh + o + 8 * row, vh + o + 8 * row, NULL));
        CHECK(locks_cache_read_summaries(c, s3, l, sb));
        test_cond(!memcmp(sa + (size_t)l * per, sb, per), "layer %d: a page filled by a later write has no built summary", l);
    }
    /* misuse: nothing stored (s3's layer 0 rewritten with bad input keeps its summaries) */
    expect_msg(locks_cache_write_f16(c, s3, 0, 8, 16, kh, vh, sa), LOCKS_ERR_INVALID_ARG, "locks_cache_write_f16",
               "pos 8 with summaries");
    expect_msg(locks_cache_write_f16(c, s3, L, 0, 16, kh, vh, NULL), LOCKS_ERR_INVALID_ARG, "locks_cache_write_f16",
               "layer 2");
    expect_msg(locks_cache_write_f16(c, s3, 0, 70, 16, kh, vh, NULL), LOCKS_ERR_INVALID_ARG, "locks_cache_write_f16",
               "not reserved");
    expect_msg(locks_cache_write_f16(c, 4, 0, 0, 16, kh, vh, NULL), LOCKS_ERR_NO_SEQ, "locks_cache_write_f16",
               "no sequence 4");
    expect_msg(locks_cache_write_f16(c, s3, 0, 0, 16, NULL, vh, NULL), LOCKS_ERR_INVALID_ARG, "locks_cache_write_f16",
               "k is NULL");
    uint16_t *kbad = malloc(sizeof(uint16_t) * N * row);
    unsigned char *sbad = malloc(per);
    SETUP(kbad && sbad);
    tu_fill_normal(k, N * row, 3.0); /* other keys: a store would change the pages */
    for (size_t i = 0; i < N * row; i++) kbad[i] = locks_f32_to_f16(k[i]);
    kbad[(size_t)tu_int(0, (int32_t)(N * row) - 1)] = tu_int(0, 1) ? 0x7c00 : 0xfc01;
    expect_msg(locks_cache_write_f16(c, s3, 0, 0, N, kbad, vh, NULL), LOCKS_ERR_NONFINITE, "locks_cache_write_f16",
               "not finite");
    for (size_t i = 0; i < N * row; i++) kbad[i] = locks_f32_to_f16(k[i]);
    memcpy(sbad, sa, per);
    const size_t r0 = (size_t)tu_int(0, N / P * HKV - 1) * rec;
    if (prec == LOCKS_SUMMARY_Q) {
        const uint16_t inf = 0x7c00; /* C's last scale */
        memcpy(sbad + r0 + rec - 2, &inf, 2);
    } else {
        const float nan = NAN;
        memcpy(sbad + r0 + 4 * (size_t)tu_int(0, (int32_t)(rec / 4) - 1), &nan, 4);
    }
    expect_msg(locks_cache_write_f16(c, s3, 0, 0, N, kbad, vh, sbad), LOCKS_ERR_NONFINITE, "locks_cache_write_f16",
               "non-finite");
    CHECK(locks_cache_read_summaries(c, s3, 0, sb));
    test_cond(!memcmp(sa, sb, per), "a refused write_f16 changed the summaries");
    const int32_t *t3 = locks_cache_block_table(c, s3, &np_b);
    int kept = 1; /* head 0's block [P][D] of page 0 against rows [t][HKV][D] */
    for (int32_t t = 0; t < P; t++)
        kept &= !memcmp(locks_cache_k_page(c, 0, t3[0]) + (size_t)t * D, kh + (size_t)t * row, sizeof(uint16_t) * D);
    test_cond(kept, "a refused write_f16 changed the keys");
    /* reading: a sequence whose pages are not all written, bad arguments */
    int32_t e;
    CHECK(locks_cache_seq_add(c, &e));
    CHECK(locks_cache_append(c, e, 2 * P));
    CHECK(locks_cache_write_f16(c, e, 0, 0, 2 * P, kh, vh, NULL));
    expect_msg(locks_cache_read_summaries(c, e, 1, sb), LOCKS_ERR_INVALID_ARG, "locks_cache_read_summaries",
               "not written in full in layer 1");
    expect_msg(locks_cache_read_summaries(c, e, 0, NULL), LOCKS_ERR_INVALID_ARG, "locks_cache_read_summaries",
               "dst is NULL");
    expect_msg(locks_cache_read_summaries(c, 7, 0, sb), LOCKS_ERR_NO_SEQ, "locks_cache_read_summaries", "no sequence 7");
    test_cond(locks_cache_read_summaries(NULL, 0, 0, sb) == LOCKS_ERR_INVALID_ARG &&
                  locks_cache_write_f16(NULL, 0, 0, 0, 1, kh, vh, NULL) == LOCKS_ERR_INVALID_ARG,
              "NULL cache");
    free(kbad);
    free(sbad);
    free(k);
    free(v);
    free(kh);
    free(vh);
    free(sa);
    free(sb);
    locks_cache_free(c);
}

/* Caller-owned pages: free_pages counts the pages no sequence holds; re-pointing a
 * sequence at another prompt's pages gives the ShadowKV masses a fresh cache gives. */
static void test_ext(void) {
    enum { NP = 32, HKV = 1, HQ = 2, N = 8 * P };
    uint16_t *kp = malloc(sizeof(uint16_t) * NP * HKV * P * D), *vp = malloc(sizeof(uint16_t) * NP * HKV * P * D);
    SETUP(kp && vp);
    for (size_t i = 0; i < (size_t)NP * HKV * P * D; i++) {
        kp[i] = locks_f32_to_f16((float)tu_normal());
        vp[i] = locks_f32_to_f16((float)tu_normal());
    }
    /* prompt B's keys: one dominant direction, so its basis differs from prompt A's */
    for (int32_t p = 16; p < 24; p++)
        for (int32_t t = 0; t < P; t++)
            for (int32_t x = 0; x < D; x++) {
                float a = (float)tu_normal();
                kp[((size_t)p * P + t) * D + x] = locks_f32_to_f16(x < 4 ? 6.f * a : 0.3f * a);
            }
    const void *kptr[1] = {kp}, *vptr[1] = {vp};
    locks_ext_kv kv = {LOCKS_LAYOUT_HND, LOCKS_DTYPE_F16, kptr, vptr, 0};
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 1;
    cp.n_kv_heads = HKV;
    cp.head_dim = D;
    cp.n_pages = NP;
    cp.max_seqs = 2;
    cp.selectors = LOCKS_SEL_BIT(LOCKS_SEL_SHADOW) | LOCKS_SEL_BIT(LOCKS_SEL_LOCKS);
    locks_status st;
    locks_cache *c = locks_cache_init_ext(cp, &kv, &st), *fresh = locks_cache_init_ext(cp, &kv, &st);
    SETUP(c && fresh);
    int32_t seq, fseq, ta[8], tb[8];
    for (int i = 0; i < 8; i++) ta[i] = i, tb[i] = 16 + i;
    CHECK(locks_cache_seq_add(c, &seq));
    test_cond(locks_cache_free_pages(c) == NP, "empty: %d free", locks_cache_free_pages(c));
    CHECK(locks_cache_seq_set_pages(c, seq, ta, 8, N));
    test_cond(locks_cache_free_pages(c) == NP - 8, "8 pages held: %d free (want %d)", locks_cache_free_pages(c),
              NP - 8);
    CHECK(locks_cache_pages_filled(c, 0, ta, 8));
    float q[HQ * D], m0[HKV * 8], m1[HKV * 8];
    tu_fill_normal(q, HQ * D, 1.0);
    locks_step_params sp = locks_step_default_params();
    sp.selector = LOCKS_SEL_SHADOW;
    CHECK(locks_cache_shadow_fit(c, seq));
    CHECK(locks_score(c, 0, seq, q, HQ, &sp, m0)); /* basis fitted on prompt A */
    CHECK(locks_cache_seq_set_pages(c, seq, tb, 8, N)); /* the sequence now holds prompt B */
    CHECK(locks_cache_pages_filled(c, 0, tb, 8));
    CHECK(locks_score(c, 0, seq, q, HQ, &sp, m1));
    CHECK(locks_cache_seq_add(fresh, &fseq));
    CHECK(locks_cache_seq_set_pages(fresh, fseq, tb, 8, N));
    CHECK(locks_cache_pages_filled(fresh, 0, tb, 8));
    float mf[HKV * 8];
    CHECK(locks_score(fresh, 0, fseq, q, HQ, &sp, mf));
    double maxd = 0;
    for (int i = 0; i < HKV * 8; i++) maxd = fmax(maxd, fabs((double)m1[i] - (double)mf[i]));
    test_cond(maxd < 1e-6, "re-pointed sequence: shadow masses differ from a fresh cache's by %.3g (%g vs %g)", maxd,
              (double)m1[0], (double)mf[0]);
    locks_cache_free(c);
    locks_cache_free(fresh);
    free(kp);
    free(vp);
}

int main(void) {
    tu_seed("test_contract");
    test_messages();
    test_write_refused();
    test_unwritten();
    test_freed_summary();
    test_write_f16(LOCKS_SUMMARY_Q);
    test_write_f16(LOCKS_SUMMARY_F32);
    test_ext();
    return test_report("test_contract");
}
