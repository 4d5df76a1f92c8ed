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
    test_ext();
    return test_report("test_contract");
}
