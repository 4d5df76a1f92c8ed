/*
 * test_edge.c — edge cases and errors of the cache and the decode step:
 * context shorter than a page, exactly one page, a batch of sequences of different
 * lengths (each equal to its own single-sequence step), budget below the forced pages,
 * NaN/Inf in a query or a key (error, nothing written), pool exhausted (error, cache
 * unchanged and still usable), unknown sequence, CUDA backend not built here.
 */
#include "test_util.h"

#include "util.h"

enum { P = LOCKS_PAGE, H = 2, G = 2, HQ = 4, D = 64 };

static locks_cache *new_cache(int32_t n_pages, int32_t threads) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = n_pages;
    cp.max_seqs = 4;
    cp.n_threads = threads;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    return c;
}

static void fill_seq(locks_cache *c, int32_t seq, int32_t len) {
    size_t n = (size_t)len * H * D;
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    tu_fill_normal(k, n, 1.0);
    tu_fill_normal(v, n, 1.0);
    int32_t start = locks_cache_seq_len(c, seq);
    CHECK(locks_cache_append(c, seq, len));
    CHECK(locks_cache_write(c, seq, 0, start, len, k, v));
    free(k);
    free(v);
}

/* Decode step of one sequence vs the dense float64 reference over its selection. */
static void check_step(locks_cache *c, int32_t seq, const locks_step_params *p) {
    int32_t len = locks_cache_seq_len(c, seq), np;
    const int32_t *bt = locks_cache_block_table(c, seq, &np);
    float q[HQ * D], out[HQ * D];
    tu_fill_normal(q, HQ * D, 1.0);
    int32_t pages[H * 64], n_pages[H];
    locks_selection sel = {pages, n_pages, 64};
    CHECK(locks_decode_step(c, 0, &seq, 1, q, HQ, p, out, &sel, NULL));
    for (int32_t h = 0; h < H; h++) {
        int32_t tokens = 0;
        for (int32_t i = 0; i < n_pages[h]; i++) tokens += len - pages[h * 64 + i] * P < P ? len - pages[h * 64 + i] * P : P;
        test_cond(tokens <= p->budget || p->selector == LOCKS_SEL_FULL, "len %d head %d: %d tokens > budget %d", len,
                  h, tokens, p->budget);
        test_cond(n_pages[h] >= 1 && pages[h * 64 + n_pages[h] - 1] == np - 1, "len %d: last page not selected", len);
        for (int32_t g = 0; g < G; g++) {
            double qd[D], K[64 * P * D], V[64 * P * D], ref[D];
            for (int32_t x = 0; x < D; x++) qd[x] = (double)q[(h * G + g) * D + x];
            int32_t nt = 0;
            for (int32_t i = 0; i < n_pages[h]; i++) {
                int32_t lp = pages[h * 64 + i];
                const uint16_t *kp = locks_cache_k_page(c, 0, bt[lp]), *vp = locks_cache_v_page(c, 0, bt[lp]);
                for (int32_t t = 0; t < P && lp * P + t < len; t++, nt++)
                    for (int32_t x = 0; x < D; x++) {
                        K[nt * D + x] = (double)locks_f16_to_f32(kp[(h * P + t) * D + x]);
                        V[nt * D + x] = (double)locks_f16_to_f32(vp[(h * P + t) * D + x]);
                    }
            }
            tu_ref_attention(qd, K, V, nt, D, 1.0 / sqrt(D), ref);
            tu_close("step out", out + (h * G + g) * D, ref, D, 2e-5, 1e-4);
        }
    }
}

static void test_short(void) {
    locks_cache *c = new_cache(64, 2);
    int32_t s;
    CHECK(locks_cache_seq_add(c, &s));
    locks_step_params p = locks_step_default_params();
    p.budget = 64;
    fill_seq(c, s, tu_int(1, 15)); /* shorter than a page: only the partial page */
    check_step(c, s, &p);
    float mu[D], basis[8 * D], coef[P * 8];
    int32_t np;
    const int32_t *bt = locks_cache_block_table(c, s, &np);
    test_cond(locks_cache_summary_get(c, 0, 0, bt[0], mu, basis, coef) == LOCKS_ERR_INVALID_ARG,
              "partial page must have no summary");
    fill_seq(c, s, P - locks_cache_seq_len(c, s)); /* exactly one page */
    test_cond(locks_cache_seq_len(c, s) == P, "len 16");
    check_step(c, s, &p);
    CHECK(locks_cache_summary_get(c, 0, 1, bt[0], mu, basis, coef));
    p.budget = 8; /* below the forced page, but >= context? no: 8 < 16 */
    float q[HQ * D], out[HQ * D];
    tu_fill_normal(q, HQ * D, 1.0);
    test_cond(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out, NULL, NULL) == LOCKS_ERR_BUDGET, "budget < forced");
    p.budget = 0;
    test_cond(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out, NULL, NULL) == LOCKS_ERR_BUDGET, "budget 0");
    p.budget = 64;
    fill_seq(c, s, 100);
    p.budget = 40; /* forced = sink + recent + partial (4) = 36 */
    check_step(c, s, &p);
    p.budget = 35;
    test_cond(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out, NULL, NULL) == LOCKS_ERR_BUDGET, "budget 35 < 36");
    locks_cache_free(c);
}

static void test_batch(void) {
    locks_cache *c = new_cache(256, 2);
    int32_t ids[3], lens[3] = {tu_int(1, 15), tu_int(17, 200), tu_int(300, 900)};
    for (int32_t i = 0; i < 3; i++) {
        CHECK(locks_cache_seq_add(c, &ids[i]));
        fill_seq(c, ids[i], lens[i]);
    }
    float q[3 * HQ * D], out[3 * HQ * D], one[HQ * D];
    tu_fill_normal(q, 3 * HQ * D, 1.0);
    locks_step_params p = locks_step_default_params();
    p.budget = 128;
    int32_t pages[3 * H * 64], n_pages[3 * H];
    locks_selection sel = {pages, n_pages, 64};
    locks_step_stats st;
    CHECK(locks_decode_step(c, 0, ids, 3, q, HQ, &p, out, &sel, &st));
    uint64_t dense = 0;
    for (int32_t i = 0; i < 3; i++) {
        int32_t pg1[H * 64], np1[H];
        locks_selection s1 = {pg1, np1, 64};
        CHECK(locks_decode_step(c, 0, &ids[i], 1, q + i * HQ * D, HQ, &p, one, &s1, NULL));
        test_cond(memcmp(one, out + i * HQ * D, sizeof one) == 0, "batch seq %d (len %d) differs from its own step", i,
                  lens[i]);
        for (int32_t h = 0; h < H; h++) {
            test_cond(np1[h] == n_pages[i * H + h], "batch selection count");
            test_cond(memcmp(pg1 + h * 64, pages + (i * H + h) * 64, sizeof(int32_t) * (size_t)np1[h]) == 0,
                      "batch selection pages");
        }
        dense += 4ull * D * H * (uint64_t)lens[i];
        check_step(c, ids[i], &p);
    }
    test_cond(st.bytes_dense == dense, "bytes_dense");
    uint64_t scored_pages = 0; /* a sequence within its budget is attended densely, unscored */
    for (int32_t i = 0; i < 3; i++) scored_pages += lens[i] > p.budget ? (uint64_t)(lens[i] / P) : 0;
    test_cond(st.bytes_meta == (uint64_t)locks_cache_summary_bytes(c) * H * scored_pages, "bytes_meta %llu",
              (unsigned long long)st.bytes_meta);
    locks_cache_free(c);
}

static void test_errors(void) {
    locks_cache *c = new_cache(10, 1);
    int32_t s, s2;
    CHECK(locks_cache_seq_add(c, &s));
    fill_seq(c, s, 40);
    float q[HQ * D], out[HQ * D], sentinel[HQ * D];
    tu_fill_normal(q, HQ * D, 1.0);
    for (int32_t i = 0; i < HQ * D; i++) out[i] = sentinel[i] = 12345.0f;
    locks_step_params p = locks_step_default_params();
    q[tu_int(0, HQ * D - 1)] = tu_uniform() < 0.5 ? NAN : INFINITY;
    test_cond(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out, NULL, NULL) == LOCKS_ERR_NONFINITE, "NaN query");
    test_cond(memcmp(out, sentinel, sizeof out) == 0, "NaN query: out written");
    tu_fill_normal(q, HQ * D, 1.0);
    int32_t bad = 777;
    test_cond(locks_decode_step(c, 0, &bad, 1, q, HQ, &p, out, NULL, NULL) == LOCKS_ERR_NO_SEQ, "unknown seq");
    /* NaN key: nothing written */
    uint16_t before[H * P * D];
    int32_t np;
    const int32_t *bt = locks_cache_block_table(c, s, &np);
    memcpy(before, locks_cache_k_page(c, 0, bt[2]), sizeof before);
    float k[3 * H * D], v[3 * H * D];
    tu_fill_normal(k, 3 * H * D, 1.0);
    tu_fill_normal(v, 3 * H * D, 1.0);
    k[tu_int(0, 3 * H * D - 1)] = -INFINITY;
    test_cond(locks_cache_write(c, s, 0, 36, 3, k, v) == LOCKS_ERR_NONFINITE, "Inf key");
    test_cond(memcmp(before, locks_cache_k_page(c, 0, bt[2]), sizeof before) == 0, "Inf key: cache changed");
    /* pool exhausted: 10 pages, 3 used */
    int32_t free0 = locks_cache_free_pages(c);
    CHECK(locks_cache_seq_add(c, &s2));
    test_cond(locks_cache_append(c, s2, free0 * P + 1) == LOCKS_ERR_POOL_FULL, "pool full");
    test_cond(locks_cache_seq_len(c, s2) == 0 && locks_cache_free_pages(c) == free0, "pool full changed the cache");
    test_cond(locks_cache_append(c, s, free0 * P + 9) == LOCKS_ERR_POOL_FULL, "pool full (existing seq)");
    test_cond(locks_cache_seq_len(c, s) == 40, "pool full changed the length");
    fill_seq(c, s2, 5 * P); /* still usable */
    p.budget = 48;
    check_step(c, s, &p);
    check_step(c, s2, &p);
    CHECK(locks_cache_seq_remove(c, s2));
    test_cond(locks_cache_free_pages(c) == free0, "remove returns pages");
    test_cond(locks_cache_seq_remove(c, s2) == LOCKS_ERR_NO_SEQ, "double remove");
    test_cond(locks_cache_write(c, s, 0, 38, 5, k, v) == LOCKS_ERR_INVALID_ARG, "write past reserved");
    locks_cache_free(c);

    locks_cache_params cp = locks_cache_default_params();
    locks_status err;
    cp.backend = LOCKS_BACKEND_CUDA;
#ifdef LOCKS_HAVE_CUDA /* built with CUDA: works on a GPU, LOCKS_ERR_BACKEND without one */
    locks_cache *cc = locks_cache_init(cp, &err);
    test_cond(cc ? err == LOCKS_OK : err == LOCKS_ERR_BACKEND, "CUDA backend: %s", locks_status_str(err));
    locks_cache_free(cc);
#else
    test_cond(locks_cache_init(cp, &err) == NULL && err == LOCKS_ERR_UNSUPPORTED, "CUDA backend");
#endif
    /* the one place that chooses a backend (backend.c): a value that is no locks_backend
     * is refused by both constructors; a CPU cache takes no stream */
    cp = locks_cache_default_params();
    cp.backend = (locks_backend)7;
    test_cond(locks_cache_init(cp, &err) == NULL && err == LOCKS_ERR_INVALID_ARG, "backend 7");
    const uint16_t page16[LOCKS_PAGE * 64] = {0};
    const void *kp[1] = {page16}, *vp[1] = {page16};
    locks_ext_kv ekv = {LOCKS_LAYOUT_HND, LOCKS_DTYPE_F16, kp, vp, 0};
    cp.n_layers = 1, cp.n_kv_heads = 1, cp.head_dim = 64, cp.n_pages = 1;
    test_cond(locks_cache_init_ext(cp, &ekv, &err) == NULL && err == LOCKS_ERR_INVALID_ARG, "ext backend 7");
#ifndef LOCKS_HAVE_CUDA
    cp.backend = LOCKS_BACKEND_CUDA;
    test_cond(locks_cache_init_ext(cp, &ekv, &err) == NULL && err == LOCKS_ERR_UNSUPPORTED, "ext CUDA backend");
#endif
    cp.backend = LOCKS_BACKEND_CPU;
    locks_cache *ec = locks_cache_init_ext(cp, &ekv, &err);
    test_cond(ec && err == LOCKS_OK, "ext CPU cache: %s", locks_status_str(err));
    test_cond(locks_cache_set_stream(ec, NULL) == LOCKS_OK, "CPU cache, NULL stream");
    test_cond(locks_cache_set_stream(ec, (void *)0x1) == LOCKS_ERR_UNSUPPORTED, "CPU cache, a stream");
    locks_cache_free(ec);
    cp = locks_cache_default_params();
    cp.rank = 16;
    test_cond(locks_cache_init(cp, &err) == NULL && err == LOCKS_ERR_INVALID_ARG, "rank 16");
}

int main(void) {
    tu_seed("test_edge");
    test_short();
    test_batch();
    test_errors();
    return test_report("test_edge");
}
