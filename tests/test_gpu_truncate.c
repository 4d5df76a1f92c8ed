/*
 * test_gpu_truncate.c — locks_cache_seq_truncate on a CUDA cache (ctest label "gpu").
 *
 * The device keeps its own copy of each sequence's length and block table; a truncate
 * that changed only the host copy left the device attending the dropped tokens,
 * including pages already given back to the pool. Checked here, on fresh random K/V:
 *   1. truncate, then a decode step == the same step on a fresh CUDA cache that holds
 *      only the truncated sequence (output and selection), and != the step before the
 *      truncate (so the check can fail);
 *   2. a graph captured before the truncate, replayed after it == the fresh step;
 *   3. a second sequence that takes the freed pages and fills them with keys aligned
 *      with the query and huge values is never read by the first: step and replay
 *      still equal the fresh cache's;
 *   4. appending and writing after the truncate (refilling the partial page) == the
 *      fresh cache given the same tokens.
 */
#include "test_util.h"

#include "cuda/locks_cuda.h"

enum { P = LOCKS_PAGE, H = 2, G = 4, HQ = H * G, D = 128, LEN0 = 200, LEN1 = 100, GROW = 30 };

static void *dupload(const void *h, size_t bytes) {
    void *d = locks_cuda_malloc(bytes);
    SETUP(d);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}

static locks_cache *gpu_cache(void) {
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.n_layers = 1;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = 32;
    cp.max_seqs = 3;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    CHECK(st);
    return c;
}

/* Writes tokens [pos, pos + n) of k, v ([tokens][H][D], host) into the sequence. */
static void write_tokens(locks_cache *c, int32_t seq, int32_t pos, int32_t n, const float *k, const float *v) {
    const size_t row = (size_t)H * D;
    float *dk = dupload(k + (size_t)pos * row, sizeof(float) * (size_t)n * row);
    float *dv = dupload(v + (size_t)pos * row, sizeof(float) * (size_t)n * row);
    CHECK(locks_cache_write(c, seq, 0, pos, n, dk, dv));
    locks_cuda_free_ptr((void **)&dk);
    locks_cuda_free_ptr((void **)&dv);
}

static double nerr(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - (double)b[i];
        num += x * x;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

typedef struct {
    float out[HQ * D];
    int32_t pages[H * 32], n_pages[H];
} step_result;

static void step(locks_cache *c, int32_t seq, const float *d_q, float *d_out, const locks_step_params *p,
                 step_result *r) {
    locks_selection sel = {r->pages, r->n_pages, 32};
    CHECK(locks_decode_step(c, 0, &seq, 1, d_q, HQ, p, d_out, &sel, NULL));
    CHECK(locks_cuda_memcpy_d2h(r->out, d_out, sizeof r->out));
}

static int same_selection(const step_result *a, const step_result *b) {
    for (int32_t h = 0; h < H; h++) {
        if (a->n_pages[h] != b->n_pages[h]) return 0;
        for (int32_t i = 0; i < a->n_pages[h]; i++)
            if (a->pages[h * 32 + i] != b->pages[h * 32 + i]) return 0;
    }
    return 1;
}

int main(void) {
    tu_seed("test_gpu_truncate");
    const size_t row = (size_t)H * D;
    const int32_t total = LEN0 + GROW;
    float *k = malloc(sizeof(float) * total * row), *v = malloc(sizeof(float) * total * row);
    float q[HQ * D];
    SETUP(k && v);
    tu_fill_normal(k, (size_t)total * row, 1.0);
    tu_fill_normal(v, (size_t)total * row, 1.0);
    tu_fill_normal(q, HQ * D, 1.0);
    /* tokens past the truncation point get keys along the query, so an output that
     * still reads them is far from the fresh one */
    for (int32_t t = LEN1; t < LEN0; t++)
        for (int32_t h = 0; h < H; h++)
            for (int32_t i = 0; i < D; i++) k[(size_t)t * row + h * D + i] = 0.5f * q[h * G * D + i];
    float *d_q = dupload(q, sizeof q), *d_out = locks_cuda_malloc(sizeof(float) * HQ * D);
    SETUP(d_out);
    locks_step_params p = locks_step_default_params();
    p.budget = 64; /* 4 of the 7 pages after the truncate: a sparse step */

    locks_cache *a = gpu_cache(), *f = gpu_cache();
    int32_t sa, sf, sb;
    CHECK(locks_cache_seq_add(a, &sa));
    CHECK(locks_cache_append(a, sa, LEN0));
    write_tokens(a, sa, 0, LEN0, k, v);
    int32_t n_old = 0;
    int32_t old_table[32] = {0};
    memcpy(old_table, locks_cache_block_table(a, sa, &n_old), sizeof(int32_t) * (size_t)((LEN0 + P - 1) / P));
    step_result before, got, ref;
    step(a, sa, d_q, d_out, &p, &before);
    locks_status st;
    locks_step_graph *g = locks_step_graph_capture(a, 0, &sa, 1, d_q, HQ, &p, 256, d_out, &st);
    CHECK(st);

    CHECK(locks_cache_seq_add(f, &sf));
    CHECK(locks_cache_append(f, sf, LEN1));
    write_tokens(f, sf, 0, LEN1, k, v);
    step(f, sf, d_q, d_out, &p, &ref);
    test_cond(nerr(before.out, ref.out, HQ * D) > 1e-2, "the dropped tokens matter (err %.3g)",
              nerr(before.out, ref.out, HQ * D));

    /* 1. truncate, then step */
    CHECK(locks_cache_seq_truncate(a, sa, LEN1));
    step(a, sa, d_q, d_out, &p, &got);
    double e = nerr(got.out, ref.out, HQ * D);
    test_cond(e <= 1e-6, "step after truncate == fresh cache (err %.3g)", e);
    test_cond(same_selection(&got, &ref), "selection after truncate == fresh cache");
    /* 2. graph captured before, replayed after */
    CHECK(locks_step_graph_replay(g));
    CHECK(locks_cuda_memcpy_d2h(got.out, d_out, sizeof got.out));
    e = nerr(got.out, ref.out, HQ * D);
    test_cond(e <= 1e-6, "graph replay after truncate == fresh cache (err %.3g)", e);

    /* 3. a second sequence takes the freed pages and fills them with loud keys */
    CHECK(locks_cache_seq_add(a, &sb));
    CHECK(locks_cache_append(a, sb, 6 * P));
    int32_t nb;
    const int32_t *tb = locks_cache_block_table(a, sb, &nb);
    int reused = 0;
    for (int32_t i = 0; i < nb; i++)
        for (int32_t j = (LEN1 + P - 1) / P; j < n_old; j++) reused += tb[i] == old_table[j];
    test_cond(reused == nb, "the second sequence took %d of its %d pages from the freed ones", reused, nb);
    {
        float *kb = malloc(sizeof(float) * 6 * P * row), *vb = malloc(sizeof(float) * 6 * P * row);
        SETUP(kb && vb);
        for (int32_t t = 0; t < 6 * P; t++)
            for (int32_t h = 0; h < H; h++)
                for (int32_t i = 0; i < D; i++) {
                    kb[(size_t)t * row + h * D + i] = q[h * G * D + i];
                    vb[(size_t)t * row + h * D + i] = 100.f;
                }
        write_tokens(a, sb, 0, 6 * P, kb, vb);
        free(kb);
        free(vb);
    }
    step(a, sa, d_q, d_out, &p, &got);
    e = nerr(got.out, ref.out, HQ * D);
    test_cond(e <= 1e-6, "step after another sequence reused the pages == fresh cache (err %.3g)", e);
    CHECK(locks_step_graph_replay(g));
    CHECK(locks_cuda_memcpy_d2h(got.out, d_out, sizeof got.out));
    e = nerr(got.out, ref.out, HQ * D);
    test_cond(e <= 1e-6, "replay after another sequence reused the pages == fresh cache (err %.3g)", e);

    /* 4. grow again past the old partial page: both caches get tokens [LEN1, LEN1+GROW)
     * (new random ones: the old tail is gone) */
    tu_fill_normal(k + (size_t)LEN1 * row, (size_t)GROW * row, 1.0);
    CHECK(locks_cache_append(a, sa, GROW));
    write_tokens(a, sa, LEN1, GROW, k, v);
    CHECK(locks_cache_append(f, sf, GROW));
    write_tokens(f, sf, LEN1, GROW, k, v);
    step(f, sf, d_q, d_out, &p, &ref);
    step(a, sa, d_q, d_out, &p, &got);
    e = nerr(got.out, ref.out, HQ * D);
    test_cond(e <= 1e-6, "step after truncate + regrow == fresh cache (err %.3g)", e);
    test_cond(same_selection(&got, &ref), "selection after truncate + regrow == fresh cache");
    CHECK(locks_step_graph_replay(g));
    CHECK(locks_cuda_memcpy_d2h(got.out, d_out, sizeof got.out));
    e = nerr(got.out, ref.out, HQ * D);
    test_cond(e <= 1e-6, "replay after truncate + regrow == fresh cache (err %.3g)", e);

    locks_step_graph_free(g);
    locks_cache_free(a);
    locks_cache_free(f);
    locks_cuda_free_ptr((void **)&d_q);
    locks_cuda_free_ptr((void **)&d_out);
    free(k);
    free(v);
    return test_report("test_gpu_truncate");
}
