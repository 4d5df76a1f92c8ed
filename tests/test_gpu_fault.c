/*
 * test_gpu_fault.c — the CUDA cache's all-or-nothing contracts and the behaviours it
 * shares with the CPU backend (ctest label "gpu"), on fresh random K/V.
 *
 *  - Fault injection (util.h): for append, truncate, remove, write and the decode step,
 *    on a fresh cache each time, the n-th allocation or CUDA runtime call fails, for
 *    every n the operation makes. After a failure the sequence's host state (length,
 *    block table, free pages) is unchanged and a decode step gives exactly the output of
 *    a cache the operation never touched; a failed write leaves each touched page either
 *    with its old summary (failure before the store) or without one (after it), and
 *    writing again gives the output of a successful write.
 *  - scale: NaN / negative / Inf is INVALID_ARG (step, attend, graph capture), as on the
 *    CPU; locks_attend with a page outside the sequence is INVALID_ARG, as on the CPU.
 *  - locks_cache_snapkv_observe / _keep on a CUDA cache: LOCKS_ERR_UNSUPPORTED.
 *  - A write with NaN, Inf or |x| > 65504 is refused (LOCKS_ERR_NONFINITE) with nothing
 *    stored: host state and the step's output bit for bit as before; +-65504 is stored.
 */
#include "test_util.h"

#include "cuda/locks_cuda.h"
#include "util.h"

enum { P = LOCKS_PAGE, H = 2, G = 4, HQ = H * G, D = 128, LEN = 100, NP = 32 };
/* the write under test: tokens [64, 100) get new keys (pages 4, 5 full, page 6 partial) */
enum { W0 = 64, WN = LEN - W0 };

static float *g_k, *g_v, *g_k2, *g_q; /* host data: [LEN + 64][H][D], new keys, query */
static float *d_q, *d_out, *d_k2, *d_v2; /* d_k2, d_v2: the write's tokens [W0, LEN) */

static void *dupload(const void *h, size_t bytes) {
    void *d = locks_cuda_malloc(bytes);
    SETUP(d);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}

static locks_status write_host(locks_cache *c, int32_t seq, int32_t pos, int32_t n, const float *k,
                               const float *v) {
    const size_t row = (size_t)H * D, bytes = sizeof(float) * (size_t)n * row;
    float *dk = locks_cuda_malloc(bytes), *dv = locks_cuda_malloc(bytes);
    SETUP(dk && dv);
    locks_status st = locks_cuda_memcpy_h2d(dk, k + (size_t)pos * row, bytes);
    if (st == LOCKS_OK) st = locks_cuda_memcpy_h2d(dv, v + (size_t)pos * row, bytes);
    SETUP(st == LOCKS_OK);
    st = locks_cache_write(c, seq, 0, pos, n, dk, dv);
    locks_cuda_free_ptr((void **)&dk);
    locks_cuda_free_ptr((void **)&dv);
    return st;
}

/* A fresh CUDA cache holding one sequence of LEN tokens (not under fault). */
static locks_cache *setup(int32_t *seq) {
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.n_layers = 1;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = NP;
    cp.max_seqs = 2;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    CHECK(st);
    CHECK(locks_cache_seq_add(c, seq));
    CHECK(locks_cache_append(c, *seq, LEN));
    CHECK(write_host(c, *seq, 0, LEN, g_k, g_v));
    return c;
}

static locks_step_params step_params(void) {
    locks_step_params p = locks_step_default_params();
    p.budget = 3 * P + LEN % P;
    return p;
}

static void step_out(locks_cache *c, int32_t seq, float *out) {
    locks_step_params p = step_params();
    CHECK(locks_decode_step(c, 0, &seq, 1, d_q, HQ, &p, d_out, NULL, NULL));
    CHECK(locks_cuda_memcpy_d2h(out, d_out, sizeof(float) * HQ * D));
}

typedef struct {
    int32_t len, n_pages, free_pages;
    int32_t table[NP];
} host_state;

static host_state state_of(const locks_cache *c, int32_t seq) {
    host_state s;
    memset(&s, 0, sizeof s);
    s.len = locks_cache_seq_len(c, seq);
    s.free_pages = locks_cache_free_pages(c);
    const int32_t *t = locks_cache_block_table(c, seq, &s.n_pages);
    if (t) memcpy(s.table, t, sizeof(int32_t) * (size_t)s.n_pages);
    return s;
}

enum { OP_APPEND, OP_TRUNCATE, OP_REMOVE, OP_WRITE, OP_STEP, N_OPS };
static const char *op_name[N_OPS] = {"append", "truncate", "remove", "write", "decode_step"};

static locks_status run_op(int op, locks_cache *c, int32_t seq) {
    switch (op) {
    case OP_APPEND: return locks_cache_append(c, seq, 40);
    case OP_TRUNCATE: return locks_cache_seq_truncate(c, seq, 50);
    case OP_REMOVE: return locks_cache_seq_remove(c, seq);
    case OP_WRITE: return locks_cache_write(c, seq, 0, W0, WN, d_k2, d_v2); /* uploaded before */
    default: {
        locks_step_params p = step_params();
        return locks_decode_step(c, 0, &seq, 1, d_q, HQ, &p, d_out, NULL, NULL);
    }
    }
}

static double nerr(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - (double)b[i];
        num += x * x;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}

static void test_faults(void) {
    float ref[HQ * D], after_write[HQ * D], got[HQ * D];
    int32_t seq;
    locks_cache *c0 = setup(&seq);
    step_out(c0, seq, ref);
    float mu0[3][D], b0[3][8 * D], cf0[3][P * 8]; /* summaries of pages 4, 5 before the write */
    const int32_t *t0 = locks_cache_block_table(c0, seq, NULL);
    for (int32_t j = 0; j < 2; j++) CHECK(locks_cache_summary_get(c0, 0, 1, t0[4 + j], mu0[j], b0[j], cf0[j]));
    CHECK(write_host(c0, seq, W0, WN, g_k2, g_v));
    step_out(c0, seq, after_write);
    test_cond(nerr(after_write, ref, HQ * D) > 1e-3, "the write changes the step (err %.3g)",
              nerr(after_write, ref, HQ * D));
    locks_cache_free(c0);

    for (int op = 0; op < N_OPS; op++) {
        /* how many fallible operations does op make on a fresh cache? */
        locks_cache *c = setup(&seq);
        locks_fault_arm(0);
        locks_status st = run_op(op, c, seq);
        const int64_t n_ops = locks_fault_count();
        locks_fault_disarm();
        CHECK(st);
        locks_cache_free(c);
        int64_t n_failed = 0;
        int ok_status = 1, ok_state = 1, ok_step = 1, ok_sum = 1;
        for (int64_t n = 1; n <= n_ops; n++) {
            c = setup(&seq);
            const host_state before = state_of(c, seq);
            locks_fault_arm(n);
            st = run_op(op, c, seq);
            locks_fault_disarm();
            if (st == LOCKS_OK) { /* an operation counted but not fallible in this order */
                locks_cache_free(c);
                continue;
            }
            n_failed++;
            ok_status &= st == LOCKS_ERR_BACKEND || st == LOCKS_ERR_OOM;
            const host_state now = state_of(c, seq);
            ok_state &= !memcmp(&before, &now, sizeof now);
            if (op == OP_WRITE) {
                /* each touched full page: its old summary, or none */
                const int32_t *t = locks_cache_block_table(c, seq, NULL);
                for (int32_t j = 0; j < 2; j++) {
                    float mu[D], b[8 * D], cf[P * 8];
                    locks_status s2 = locks_cache_summary_get(c, 0, 1, t[4 + j], mu, b, cf);
                    ok_sum &= s2 == LOCKS_ERR_INVALID_ARG ||
                              (s2 == LOCKS_OK && !memcmp(mu, mu0[j], sizeof mu) && !memcmp(b, b0[j], sizeof b) &&
                               !memcmp(cf, cf0[j], sizeof cf));
                }
                CHECK(write_host(c, seq, W0, WN, g_k2, g_v)); /* write again */
                step_out(c, seq, got);
                ok_step &= nerr(got, after_write, HQ * D) <= 1e-6;
            } else {
                step_out(c, seq, got);
                ok_step &= nerr(got, ref, HQ * D) <= 1e-6;
            }
            locks_cache_free(c);
        }
        printf("  %-12s %lld fallible operations, %lld failures injected\n", op_name[op], (long long)n_ops,
               (long long)n_failed);
        test_cond(n_failed >= 1, "%s: at least one injected failure (%lld operations)", op_name[op], (long long)n_ops);
        test_cond(ok_status, "%s: every injected failure reported as BACKEND or OOM", op_name[op]);
        test_cond(ok_state, "%s: host state (length, table, free pages) unchanged after a failure", op_name[op]);
        test_cond(ok_step, "%s: after a failure the step equals the untouched cache's", op_name[op]);
        if (op == OP_WRITE) test_cond(ok_sum, "write: a failed write leaves old summaries or none");
    }
}

static void test_shared_behaviour(void) {
    int32_t seq;
    locks_cache *c = setup(&seq);
    locks_step_params p = step_params();
    const float bad[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        p.scale = bad[i];
        test_cond(locks_decode_step(c, 0, &seq, 1, d_q, HQ, &p, d_out, NULL, NULL) == LOCKS_ERR_INVALID_ARG,
                  "CUDA decode_step scale %g -> INVALID_ARG", (double)bad[i]);
        locks_status st = LOCKS_OK;
        locks_step_graph *g = locks_step_graph_capture(c, 0, &seq, 1, d_q, HQ, &p, 256, d_out, &st);
        test_cond(g == NULL && st == LOCKS_ERR_INVALID_ARG, "CUDA graph capture scale %g -> INVALID_ARG",
                  (double)bad[i]);
        locks_step_graph_free(g);
    }
    const int32_t n_pages = (LEN + P - 1) / P;
    int32_t pages[H * 8] = {0, 2}, np[H] = {2, 2};
    pages[8] = 1;
    pages[9] = n_pages - 1;
    int32_t *d_pages = dupload(pages, sizeof pages), *d_np = dupload(np, sizeof np);
    for (int i = 0; i < 3; i++) {
        test_cond(locks_attend(c, 0, seq, d_q, HQ, bad[i], d_pages, d_np, 8, d_out, NULL) == LOCKS_ERR_INVALID_ARG,
                  "CUDA attend scale %g -> INVALID_ARG", (double)bad[i]);
    }
    CHECK(locks_attend(c, 0, seq, d_q, HQ, 0.0f, d_pages, d_np, 8, d_out, NULL));
    const int32_t bad_pages[2] = {n_pages, -1};
    for (int i = 0; i < 2; i++) {
        pages[9] = bad_pages[i];
        CHECK(locks_cuda_memcpy_h2d(d_pages, pages, sizeof pages));
        test_cond(locks_attend(c, 0, seq, d_q, HQ, 0.0f, d_pages, d_np, 8, d_out, NULL) == LOCKS_ERR_INVALID_ARG,
                  "CUDA attend with page %d of %d -> INVALID_ARG", bad_pages[i], n_pages);
    }
    locks_cuda_free_ptr((void **)&d_pages);
    locks_cuda_free_ptr((void **)&d_np);
    test_cond(locks_cache_snapkv_keep(c, seq, 0, 64) == LOCKS_ERR_UNSUPPORTED, "CUDA snapkv_keep -> UNSUPPORTED");
    test_cond(locks_cache_snapkv_observe(c, seq, 0, g_q, 1, HQ, 0.0f) == LOCKS_ERR_UNSUPPORTED,
              "CUDA snapkv_observe -> UNSUPPORTED");
    locks_cache_free(c);
}

/* A write holding NaN, Inf or |x| > 65504 (fp16 would store Inf) is refused with
 * LOCKS_ERR_NONFINITE and stores nothing, as on the CPU (test_contract): the host state and
 * the step's output stay bit for bit; 65504 itself is stored. */
static void test_write_refused(void) {
    int32_t seq;
    locks_cache *c = setup(&seq);
    const host_state s0 = state_of(c, seq);
    float before[HQ * D], after[HQ * D];
    step_out(c, seq, before);
    const size_t row = (size_t)H * D, n = (size_t)(LEN + 64) * row;
    float *k = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    SETUP(k && v);
    const float bad[] = {NAN, INFINITY, 7e4f, -65520.f, 65504.5f};
    int refused = 1;
    for (int b = 0; b < 5; b++) {
        memcpy(k, g_k2, sizeof(float) * n);
        memcpy(v, g_v, sizeof(float) * n);
        (b % 2 ? k : v)[(size_t)W0 * row + (size_t)tu_int(0, WN * (int32_t)row - 1)] = bad[b];
        const locks_status st = write_host(c, seq, W0, WN, k, v);
        step_out(c, seq, after);
        const host_state s1 = state_of(c, seq);
        const int ok = st == LOCKS_ERR_NONFINITE && !memcmp(&s0, &s1, sizeof s0) && !memcmp(before, after, sizeof before);
        if (!ok) printf("  write with %g: %s, state %s, step %s\n", (double)bad[b], locks_status_str(st),
                        memcmp(&s0, &s1, sizeof s0) ? "CHANGED" : "same", memcmp(before, after, sizeof before) ? "CHANGED" : "same");
        refused &= ok;
    }
    test_cond(refused, "a write with NaN / Inf / |x| > 65504 changed the cache or was accepted");
    memcpy(k, g_k2, sizeof(float) * n);
    memcpy(v, g_v, sizeof(float) * n);
    v[(size_t)W0 * row + 3] = 65504.f, k[(size_t)W0 * row + 5] = -65504.f;
    test_cond(write_host(c, seq, W0, WN, k, v) == LOCKS_OK, "a write with +-65504 (the largest fp16) refused");
    step_out(c, seq, after);
    test_cond(memcmp(before, after, sizeof before) != 0, "the accepted write did not change the step's output");
    printf("  write refused for NaN, Inf, 7e4, -65520, 65504.5 with nothing changed; +-65504 stored\n");
    free(k);
    free(v);
    locks_cache_free(c);
}

int main(void) {
    tu_seed("test_gpu_fault");
    const size_t row = (size_t)H * D, n = (size_t)(LEN + 64) * row;
    g_k = malloc(sizeof(float) * n);
    g_v = malloc(sizeof(float) * n);
    g_k2 = malloc(sizeof(float) * n);
    g_q = malloc(sizeof(float) * HQ * D);
    SETUP(g_k && g_v && g_k2 && g_q);
    tu_fill_normal(g_k, n, 1.0);
    tu_fill_normal(g_v, n, 1.0);
    tu_fill_normal(g_k2, n, 1.0);
    tu_fill_normal(g_q, HQ * D, 1.0);
    /* the new keys of the write point along the query: the write matters to the step */
    for (int32_t t = W0; t < LEN; t++)
        for (int32_t h = 0; h < H; h++)
            for (int32_t i = 0; i < D; i++) g_k2[(size_t)t * row + h * D + i] += 0.3f * g_q[h * G * D + i];
    d_q = dupload(g_q, sizeof(float) * HQ * D);
    d_k2 = dupload(g_k2 + (size_t)W0 * row, sizeof(float) * WN * row);
    d_v2 = dupload(g_v + (size_t)W0 * row, sizeof(float) * WN * row);
    d_out = locks_cuda_malloc(sizeof(float) * HQ * D);
    SETUP(d_out);
    test_faults();
    test_shared_behaviour();
    test_write_refused();
    locks_cuda_free_ptr((void **)&d_q);
    locks_cuda_free_ptr((void **)&d_out);
    locks_cuda_free_ptr((void **)&d_k2);
    locks_cuda_free_ptr((void **)&d_v2);
    free(g_k);
    free(g_v);
    free(g_k2);
    free(g_q);
    return test_report("test_gpu_fault");
}
