/*
 * test_cache.c — the paged cache's bookkeeping and its summaries:
 *  - block tables and the free list over add / append / remove / re-add, pages never
 *    shared by two live sequences, sequence slots exhausted;
 *  - every full page's stored summary equals a rebuild from its stored fp16 keys
 *    (fp32 mode: identical; quantized: identical after quantizing the rebuild), for
 *    several layers written independently, in token-by-token and batched writes;
 *  - rewriting a token of a full page rebuilds that page's summary;
 *  - the thread pool: every task runs exactly once, thread indices in range, repeated
 *    jobs of varying sizes.
 */
#include "test_util.h"

#include "cache.h"
#include "pool.h"
#include "summary.h"
#include "util.h"

enum { P = LOCKS_PAGE };

static void test_tables(void) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_kv_heads = 1;
    cp.head_dim = 64;
    cp.n_pages = 40;
    cp.max_seqs = 3;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    int32_t ids[3], extra;
    for (int32_t i = 0; i < 3; i++) CHECK(locks_cache_seq_add(c, &ids[i]));
    test_cond(locks_cache_seq_add(c, &extra) == LOCKS_ERR_INVALID_ARG, "4th sequence in 3 slots");
    for (int32_t round = 0; round < 200; round++) {
        int32_t i = tu_int(0, 2);
        if (tu_uniform() < 0.2) {
            CHECK(locks_cache_seq_remove(c, ids[i]));
            test_cond(locks_cache_seq_len(c, ids[i]) == -1, "removed sequence has no length");
            CHECK(locks_cache_seq_add(c, &ids[i]));
        } else {
            int32_t n = tu_int(0, 40), before = locks_cache_seq_len(c, ids[i]), free0 = locks_cache_free_pages(c);
            int32_t need = (before + n + P - 1) / P - (before + P - 1) / P;
            locks_status st = locks_cache_append(c, ids[i], n);
            if (need > free0) {
                test_cond(st == LOCKS_ERR_POOL_FULL && locks_cache_seq_len(c, ids[i]) == before &&
                              locks_cache_free_pages(c) == free0,
                          "append past the pool must fail and change nothing");
            } else {
                test_cond(st == LOCKS_OK && locks_cache_seq_len(c, ids[i]) == before + n &&
                              locks_cache_free_pages(c) == free0 - need,
                          "append %d: len %d free %d", n, locks_cache_seq_len(c, ids[i]), locks_cache_free_pages(c));
            }
        }
        /* every physical page is owned once: by a sequence or by the free list */
        int32_t owner[40], total = locks_cache_free_pages(c);
        for (int32_t pg = 0; pg < 40; pg++) owner[pg] = 0;
        for (int32_t s = 0; s < 3; s++) {
            int32_t np;
            const int32_t *bt = locks_cache_block_table(c, ids[s], &np);
            test_cond(bt != NULL && np == (locks_cache_seq_len(c, ids[s]) + P - 1) / P, "block table size");
            for (int32_t j = 0; bt && j < np; j++) owner[bt[j]]++;
            total += np;
        }
        int32_t dup = 0;
        for (int32_t pg = 0; pg < 40; pg++) dup += owner[pg] > 1;
        test_cond(dup == 0 && total == 40, "round %d: %d pages shared, %d accounted", round, dup, total);
    }
    test_cond(locks_cache_block_table(c, 99, NULL) == NULL, "unknown id has no table");
    test_cond(locks_cache_append(c, -1, 1) == LOCKS_ERR_NO_SEQ, "append to unknown id");
    locks_cache_free(c);
}

/* Stored summary of (layer, head, physical page) vs a rebuild from the stored keys. */
static void check_summary(const locks_cache *c, int32_t layer, int32_t h, int32_t page) {
    const locks_cache_params cp = locks_cache_get_params(c);
    const int32_t d = cp.head_dim, r = cp.rank;
    float k[P * 256], mu[256], basis[15 * 256], coef[P * 15];
    float mu2[256], basis2[15 * 256], coef2[P * 15];
    const uint16_t *kp = locks_cache_k_page(c, layer, page) + (size_t)h * P * d;
    for (int32_t i = 0; i < P * d; i++) k[i] = locks_f16_to_f32(kp[i]);
    CHECK(locks_summary_build_f32(d, r, k, mu, basis, coef));
    if (cp.summary_prec == LOCKS_SUMMARY_Q) {
        int8_t mq[256], cq[P * 15];
        uint8_t vq[15 * 128];
        uint16_t ms, vs[15], cs[15];
        locks_qsummary q = {mq, &ms, vq, vs, cq, cs};
        locks_summary_quantize(d, r, mu, basis, coef, q);
        locks_summary_dequantize(d, r, q, mu, basis, coef);
    }
    CHECK(locks_cache_summary_get(c, layer, h, page, mu2, basis2, coef2));
    int same = memcmp(mu, mu2, sizeof(float) * (size_t)d) == 0 &&
               memcmp(basis, basis2, sizeof(float) * (size_t)(r * d)) == 0 &&
               memcmp(coef, coef2, sizeof(float) * (size_t)(P * r)) == 0;
    test_cond(same, "layer %d head %d page %d: stored summary differs from a rebuild", layer, h, page);
}

static void test_summaries(locks_summary_prec prec) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 3;
    cp.n_kv_heads = 2;
    cp.head_dim = 64;
    cp.n_pages = 24;
    cp.summary_prec = prec;
    cp.rank = tu_int(1, 15);
    cp.n_threads = 2;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    int32_t s;
    CHECK(locks_cache_seq_add(c, &s));
    const int32_t len = tu_int(100, 300), row = 2 * 64;
    float *k = malloc(sizeof(float) * (size_t)len * row), *v = malloc(sizeof(float) * (size_t)len * row);
    CHECK(locks_cache_append(c, s, len));
    for (int32_t l = 0; l < 3; l++) {
        tu_fill_normal(k, (size_t)len * row, 1.0);
        tu_fill_normal(v, (size_t)len * row, 1.0);
        if (l == 1) { /* token by token */
            for (int32_t t = 0; t < len; t++) CHECK(locks_cache_write(c, s, l, t, 1, k + (size_t)t * row, v + (size_t)t * row));
        } else { /* one batch (layer 0) or random chunks (layer 2) */
            int32_t pos = 0;
            while (pos < len) {
                int32_t n = l == 0 ? len : tu_int(1, 50);
                if (n > len - pos) n = len - pos;
                CHECK(locks_cache_write(c, s, l, pos, n, k + (size_t)pos * row, v + (size_t)pos * row));
                pos += n;
            }
        }
    }
    int32_t np;
    const int32_t *bt = locks_cache_block_table(c, s, &np);
    float mu[64], basis[15 * 64], coef[P * 15];
    for (int32_t l = 0; l < 3; l++)
        for (int32_t j = 0; j < np; j++)
            for (int32_t h = 0; h < 2; h++) {
                if ((j + 1) * P <= len) check_summary(c, l, h, bt[j]);
                else test_cond(locks_cache_summary_get(c, l, h, bt[j], mu, basis, coef) == LOCKS_ERR_INVALID_ARG, "partial page summary");
            }
    /* rewrite one token of a full page of layer 2: its summary follows */
    int32_t t = tu_int(0, (len / P) * P - 1);
    float mu_before[64];
    CHECK(locks_cache_summary_get(c, 2, 1, bt[t / P], mu_before, basis, coef));
    tu_fill_normal(k, (size_t)row, 3.0);
    CHECK(locks_cache_write(c, s, 2, t, 1, k, v));
    check_summary(c, 2, 1, bt[t / P]);
    CHECK(locks_cache_summary_get(c, 2, 1, bt[t / P], mu, basis, coef));
    test_cond(memcmp(mu, mu_before, sizeof mu) != 0, "rewrite did not change the summary");
    free(k);
    free(v);
    locks_cache_free(c);
}

typedef struct {
    int32_t *count;
    int32_t n_threads;
    int32_t bad_thread;
} pool_arg;

static void pool_fn(void *arg, int32_t task, int32_t thread) {
    pool_arg *a = arg;
    a->count[task]++;
    if (thread < 0 || thread >= a->n_threads) a->bad_thread = 1;
}

static void test_pool(void) {
    for (int32_t nt = 1; nt <= 4; nt++) {
        locks_pool *p = locks_pool_init(nt);
        test_cond(p != NULL && locks_pool_threads(p) == nt, "pool of %d", nt);
        int32_t *count = calloc(5000, sizeof(int32_t));
        for (int32_t job = 0; job < 200; job++) {
            int32_t n = tu_int(0, job % 10 == 0 ? 5000 : 20);
            for (int32_t i = 0; i < n; i++) count[i] = 0;
            pool_arg a = {count, nt, 0};
            locks_pool_run(p, n, pool_fn, &a);
            int32_t wrong = 0;
            for (int32_t i = 0; i < n; i++) wrong += count[i] != 1;
            test_cond(wrong == 0 && !a.bad_thread, "pool %d job %d: %d tasks not run exactly once", nt, job, wrong);
        }
        free(count);
        locks_pool_free(p);
    }
}

int main(void) {
    tu_seed("test_cache");
    test_tables();
    test_summaries(LOCKS_SUMMARY_F32);
    test_summaries(LOCKS_SUMMARY_Q);
    test_pool();
    return test_report("test_cache");
}
