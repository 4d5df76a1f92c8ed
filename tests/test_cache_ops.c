/*
 * test_cache_ops.c — the cache's sequence operations and the step's contracts, on the
 * CPU backend (so the sanitizer run covers them), on fresh random data:
 *  - truncate (to page boundaries and inside a page): the cache then equals a fresh
 *    cache given only the kept tokens (stored K/V, summaries, free pages, decode step
 *    output and selection, exactly), also after a second sequence took the freed pages
 *    and after growing again;
 *  - ShadowKV's shared basis does not survive seq_remove (a reused slot) or a truncate
 *    below the fitted length: the masses equal a fresh cache's;
 *  - all-or-nothing under injected allocation failures (util.h's fault hook, every
 *    n-th allocation in turn): locks_cache_init fails cleanly; a failed
 *    locks_decode_step, locks_score or locks_attend leaves out, sel and mass untouched
 *    and the cache usable;
 *  - the thread pool: a job runs only on the threads it can use, every task once, also
 *    with two threads sharing one pool; a cache on a shared pool == one on its own;
 *  - the summary bytes the pool holds per page == the format's formula (802 at 128/8);
 *  - scale: 0 means 1/sqrt(d); negative, NaN or Inf is INVALID_ARG for every entry
 *    point that takes one; locks_attend with an out-of-range page is INVALID_ARG.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>

#include "pool.h"
#include "util.h"

enum { P = LOCKS_PAGE, H = 2, G = 3, HQ = H * G, D = 64, L = 2 };

static locks_cache *new_cache(int32_t n_pages, int32_t threads) {
    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* shadow reuse and faults in every selector's metadata */
    cp.n_layers = L;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = n_pages;
    cp.max_seqs = 3;
    cp.n_threads = threads;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    CHECK(st);
    return c;
}

/* Writes tokens [pos, pos + n) of k, v ([layer][token][H][D]) in every layer. */
static void write_tokens(locks_cache *c, int32_t seq, int32_t pos, int32_t n, const float *k, const float *v,
                         int32_t stride) {
    const size_t row = (size_t)H * D;
    for (int32_t l = 0; l < L; l++)
        CHECK(locks_cache_write(c, seq, l, pos, n, k + ((size_t)l * stride + pos) * row,
                                v + ((size_t)l * stride + pos) * row));
}

static int32_t new_seq(locks_cache *c, int32_t len, const float *k, const float *v, int32_t stride) {
    int32_t s;
    CHECK(locks_cache_seq_add(c, &s));
    CHECK(locks_cache_append(c, s, len));
    write_tokens(c, s, 0, len, k, v, stride);
    return s;
}

/* 1 if seq sa of a and sf of f hold the same tokens, summaries and step results. */
static void check_same(locks_cache *a, int32_t sa, locks_cache *f, int32_t sf, const float *q, const char *what) {
    int32_t na, nf;
    const int32_t *ta = locks_cache_block_table(a, sa, &na), *tf = locks_cache_block_table(f, sf, &nf);
    const int32_t len = locks_cache_seq_len(a, sa);
    test_cond(len == locks_cache_seq_len(f, sf) && na == nf, "%s: length %d vs %d, pages %d vs %d", what, len,
              locks_cache_seq_len(f, sf), na, nf);
    if (len != locks_cache_seq_len(f, sf) || na != nf) return;
    int kv_same = 1, sum_same = 1, partial_ok = 1;
    for (int32_t l = 0; l < L; l++)
        for (int32_t j = 0; j < na; j++) {
            const uint16_t *ka = locks_cache_k_page(a, l, ta[j]), *kf = locks_cache_k_page(f, l, tf[j]);
            const uint16_t *va = locks_cache_v_page(a, l, ta[j]), *vf = locks_cache_v_page(f, l, tf[j]);
            const int32_t nt = len - j * P < P ? len - j * P : P;
            for (int32_t h = 0; h < H; h++)
                for (int32_t i = 0; i < nt * D; i++) {
                    size_t o = (size_t)h * P * D + (size_t)i;
                    kv_same &= ka[o] == kf[o] && va[o] == vf[o];
                }
            for (int32_t h = 0; h < H; h++) {
                float mu[2][D], b[2][8 * D], cf[2][P * 8];
                locks_status s1 = locks_cache_summary_get(a, l, h, ta[j], mu[0], b[0], cf[0]);
                locks_status s2 = locks_cache_summary_get(f, l, h, tf[j], mu[1], b[1], cf[1]);
                if (nt < P) {
                    partial_ok &= s1 == LOCKS_ERR_INVALID_ARG && s2 == LOCKS_ERR_INVALID_ARG;
                } else {
                    sum_same &= s1 == LOCKS_OK && s2 == LOCKS_OK && !memcmp(mu[0], mu[1], sizeof mu[0]) &&
                                !memcmp(b[0], b[1], sizeof b[0]) && !memcmp(cf[0], cf[1], sizeof cf[0]);
                }
            }
        }
    test_cond(kv_same, "%s: stored K/V == fresh cache", what);
    test_cond(sum_same, "%s: summaries of full pages == fresh cache", what);
    test_cond(partial_ok, "%s: the partial page has no summary", what);
    locks_step_params p = locks_step_default_params();
    p.budget = 3 * P + len % P; /* sink + recent + one ranked page */
    for (int32_t l = 0; l < L; l++) {
        float oa[HQ * D], of[HQ * D];
        int32_t pa[H * 32], pf[H * 32], npa[H], npf[H];
        locks_selection sa_ = {pa, npa, 32}, sf_ = {pf, npf, 32};
        CHECK(locks_decode_step(a, l, &sa, 1, q, HQ, &p, oa, &sa_, NULL));
        CHECK(locks_decode_step(f, l, &sf, 1, q, HQ, &p, of, &sf_, NULL));
        int same = !memcmp(oa, of, sizeof oa) && !memcmp(npa, npf, sizeof npa);
        for (int32_t h = 0; same && h < H; h++) same = !memcmp(pa + h * 32, pf + h * 32, sizeof(int32_t) * npa[h]);
        test_cond(same, "%s: layer %d step (output and selection) == fresh cache", what, l);
    }
}

static void test_truncate(void) {
    enum { LEN = 200, MAXT = 260 };
    const size_t row = (size_t)H * D;
    float *k = malloc(sizeof(float) * L * MAXT * row), *v = malloc(sizeof(float) * L * MAXT * row);
    float q[HQ * D];
    SETUP(k && v);
    const int32_t cuts[5] = {96, 100, 1, 16 * 12 + 7, 0};
    for (int32_t ci = 0; ci < 5; ci++) {
        const int32_t cut = cuts[ci];
        tu_fill_normal(k, (size_t)L * MAXT * row, 1.0);
        tu_fill_normal(v, (size_t)L * MAXT * row, 1.0);
        tu_fill_normal(q, HQ * D, 1.0);
        locks_cache *a = new_cache(40, 2), *f = new_cache(40, 2);
        int32_t sa = new_seq(a, LEN, k, v, MAXT);
        test_cond(locks_cache_seq_truncate(a, sa, LEN + 1) == LOCKS_ERR_INVALID_ARG, "truncate past the end");
        test_cond(locks_cache_seq_truncate(a, sa, -1) == LOCKS_ERR_INVALID_ARG, "truncate to -1");
        test_cond(locks_cache_seq_truncate(a, 2, 0) == LOCKS_ERR_NO_SEQ, "truncate an unused slot");
        CHECK(locks_cache_seq_truncate(a, sa, cut));
        char what[64];
        test_cond(locks_cache_free_pages(a) == 40 - (cut + P - 1) / P, "truncate to %d: %d free pages", cut,
                  locks_cache_free_pages(a));
        int32_t sf = new_seq(f, cut, k, v, MAXT);
        if (cut > 0) {
            snprintf(what, sizeof what, "truncate to %d", cut);
            check_same(a, sa, f, sf, q, what);
        }
        /* another sequence takes the freed pages and fills them with other keys */
        int32_t sb;
        CHECK(locks_cache_seq_add(a, &sb));
        CHECK(locks_cache_append(a, sb, 64));
        float *kb = malloc(sizeof(float) * L * 64 * row), *vb = malloc(sizeof(float) * L * 64 * row);
        SETUP(kb && vb);
        tu_fill_normal(kb, (size_t)L * 64 * row, 3.0);
        tu_fill_normal(vb, (size_t)L * 64 * row, 3.0);
        write_tokens(a, sb, 0, 64, kb, vb, 64);
        free(kb);
        free(vb);
        if (cut > 0) {
            snprintf(what, sizeof what, "truncate to %d, pages reused", cut);
            check_same(a, sa, f, sf, q, what);
        }
        /* grow both past the old partial page with new tokens */
        const int32_t grow = 41;
        tu_fill_normal(k, (size_t)L * MAXT * row, 1.0); /* the new tokens [cut, cut + grow) */
        CHECK(locks_cache_append(a, sa, grow));
        write_tokens(a, sa, cut, grow, k, v, MAXT);
        CHECK(locks_cache_append(f, sf, grow));
        write_tokens(f, sf, cut, grow, k, v, MAXT);
        /* f's first cut tokens are the old k: rewrite them in a too */
        write_tokens(a, sa, 0, cut, k, v, MAXT);
        write_tokens(f, sf, 0, cut, k, v, MAXT);
        snprintf(what, sizeof what, "truncate to %d, regrown", cut);
        check_same(a, sa, f, sf, q, what);
        locks_cache_free(a);
        locks_cache_free(f);
    }
    free(k);
    free(v);
}

/* Keys near a random rank-2 subspace of R^D. */
static void subspace_keys(float *k, int32_t n) {
    float u[2][D];
    tu_fill_normal(&u[0][0], 2 * D, 1.0);
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < H; h++) {
            double a = 2.0 * tu_normal(), b = 2.0 * tu_normal();
            for (int32_t i = 0; i < D; i++)
                k[((size_t)t * H + h) * D + i] = (float)(a * (double)u[0][i] + b * (double)u[1][i] + 0.05 * tu_normal());
        }
}

static void test_shadow_reuse(void) {
    enum { LEN = 96 };
    const size_t row = (size_t)H * D;
    float *k = malloc(sizeof(float) * L * LEN * row), *v = malloc(sizeof(float) * L * LEN * row);
    float q[HQ * D];
    SETUP(k && v);
    tu_fill_normal(v, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(q, HQ * D, 1.0);
    locks_step_params p = locks_step_default_params();
    p.selector = LOCKS_SEL_SHADOW;
    for (int32_t how = 0; how < 2; how++) { /* 0: remove + re-add, 1: truncate + regrow */
        locks_cache *a = new_cache(20, 1), *f = new_cache(20, 1);
        for (int32_t l = 0; l < L; l++) subspace_keys(k + (size_t)l * LEN * row, LEN);
        int32_t sa = new_seq(a, LEN, k, v, LEN);
        CHECK(locks_cache_shadow_fit(a, sa));
        /* the next prompt lives in other subspaces */
        for (int32_t l = 0; l < L; l++) subspace_keys(k + (size_t)l * LEN * row, LEN);
        if (how == 0) {
            CHECK(locks_cache_seq_remove(a, sa));
            int32_t again;
            CHECK(locks_cache_seq_add(a, &again));
            test_cond(again == sa, "the slot is reused");
            CHECK(locks_cache_append(a, sa, LEN));
            write_tokens(a, sa, 0, LEN, k, v, LEN);
        } else {
            CHECK(locks_cache_seq_truncate(a, sa, LEN / 2));
            CHECK(locks_cache_append(a, sa, LEN / 2));
            write_tokens(a, sa, 0, LEN, k, v, LEN);
        }
        int32_t sf = new_seq(f, LEN, k, v, LEN);
        for (int32_t l = 0; l < L; l++) {
            float ma[H * (LEN / P)], mf[H * (LEN / P)];
            CHECK(locks_score(a, l, sa, q, HQ, &p, ma));
            CHECK(locks_score(f, l, sf, q, HQ, &p, mf));
            test_cond(!memcmp(ma, mf, sizeof ma), "shadow masses after %s == fresh cache (layer %d)",
                      how == 0 ? "remove + re-add" : "truncate + regrow", l);
        }
        locks_cache_free(a);
        locks_cache_free(f);
    }
    free(k);
    free(v);
}

static int untouched(const void *buf, size_t bytes) {
    const uint8_t *b = buf;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != 0xa5) return 0;
    return 1;
}

static void test_faults(void) {
    enum { LEN = 300 };
    const size_t row = (size_t)H * D;
    float *k = malloc(sizeof(float) * L * LEN * row), *v = malloc(sizeof(float) * L * LEN * row);
    float q[HQ * D];
    SETUP(k && v);
    tu_fill_normal(k, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(v, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(q, HQ * D, 1.0);
    /* init: every allocation in turn fails -> NULL and OOM, nothing leaked (ASan) */
    for (int32_t threads = 1; threads <= 2; threads++) {
        locks_fault_arm(0);
        locks_cache *c = new_cache(24, threads);
        const int64_t n_alloc = locks_fault_count();
        locks_fault_disarm();
        locks_cache_free(c);
        int all = n_alloc >= 5;
        for (int64_t n = 1; n <= n_alloc; n++) {
            locks_cache_params pp = locks_cache_default_params();
            pp.n_layers = L, pp.n_kv_heads = H, pp.head_dim = D, pp.n_pages = 24, pp.max_seqs = 3;
            pp.selectors = LOCKS_SEL_ALL;
            pp.n_threads = threads;
            locks_status st = LOCKS_OK;
            locks_fault_arm(n);
            locks_cache *x = locks_cache_init(pp, &st);
            locks_fault_disarm();
            all &= x == NULL && st == LOCKS_ERR_OOM;
            locks_cache_free(x);
        }
        test_cond(all, "cache init with each of its %lld allocations failing: NULL and OOM (threads %d)",
                  (long long)n_alloc, threads);
    }
    /* the step's pieces on a fresh cache (their scratch is allocated on first use) */
    locks_step_params p = locks_step_default_params();
    p.budget = 5 * P;
    float ref_out[HQ * D];
    int32_t ref_pages[H * 32], ref_n[H];
    {
        locks_cache *c = new_cache(24, 2);
        int32_t s = new_seq(c, LEN, k, v, LEN);
        locks_selection sel = {ref_pages, ref_n, 32};
        CHECK(locks_decode_step(c, 1, &s, 1, q, HQ, &p, ref_out, &sel, NULL));
        locks_cache_free(c);
    }
    for (int32_t op = 0; op < 3; op++) {
        const char *name = op == 0 ? "locks_decode_step" : op == 1 ? "locks_score" : "locks_attend";
        int64_t n_calls = -1, failed = 0;
        int ok = 1;
        for (int64_t n = 1; n_calls < 0 || n <= n_calls; n++) {
            locks_cache *c = new_cache(24, 2);
            int32_t s = new_seq(c, LEN, k, v, LEN);
            float out[HQ * D], mass[H * (LEN / P)];
            int32_t pages[H * 32], np[H];
            memset(out, 0xa5, sizeof out);
            memset(mass, 0xa5, sizeof mass);
            memset(pages, 0xa5, sizeof pages);
            memset(np, 0xa5, sizeof np);
            locks_selection sel = {pages, np, 32};
            locks_fault_arm(n);
            locks_status st;
            if (op == 0) st = locks_decode_step(c, 1, &s, 1, q, HQ, &p, out, &sel, NULL);
            else if (op == 1) st = locks_score(c, 1, s, q, HQ, &p, mass);
            else st = locks_attend(c, 1, s, q, HQ, 0.0f, ref_pages, ref_n, 32, out, NULL);
            locks_fault_disarm();
            if (st == LOCKS_OK) {
                n_calls = n - 1; /* the n-th allocation did not happen: done */
                if (op != 1) ok &= !memcmp(out, ref_out, sizeof out);
            } else {
                failed++;
                ok &= st == LOCKS_ERR_OOM && untouched(out, sizeof out) && untouched(mass, sizeof mass) &&
                      untouched(pages, sizeof pages) && untouched(np, sizeof np);
                /* and the cache still works */
                float again[HQ * D];
                locks_selection sel2 = {pages, np, 32};
                ok &= locks_decode_step(c, 1, &s, 1, q, HQ, &p, again, &sel2, NULL) == LOCKS_OK &&
                      !memcmp(again, ref_out, sizeof again);
            }
            locks_cache_free(c);
            if (n > 64) break; /* guard */
        }
        test_cond(failed >= 1 && ok, "%s with each of its %lld allocations failing: OOM, outputs untouched, cache usable",
                  name, (long long)failed);
    }
    free(k);
    free(v);
}

static void test_scale_and_pages(void) {
    enum { LEN = 90 };
    const size_t row = (size_t)H * D;
    float *k = malloc(sizeof(float) * L * LEN * row), *v = malloc(sizeof(float) * L * LEN * row);
    float q[HQ * D], out0[HQ * D], out1[HQ * D], mass[H * (LEN / P)], q2[2 * HQ * D], o2[2 * HQ * D];
    SETUP(k && v);
    tu_fill_normal(q2, 2 * HQ * D, 1.0);
    tu_fill_normal(k, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(v, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(q, HQ * D, 1.0);
    locks_cache *c = new_cache(24, 1);
    int32_t s = new_seq(c, LEN, k, v, LEN);
    locks_step_params p = locks_step_default_params();
    p.budget = 4 * P;
    CHECK(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out0, NULL, NULL));
    p.scale = 1.0f / sqrtf((float)D);
    CHECK(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out1, NULL, NULL));
    test_cond(!memcmp(out0, out1, sizeof out0), "scale 0 == 1/sqrt(d)");
    const float bad[4] = {-1.0f, NAN, INFINITY, -INFINITY};
    int32_t pages[H * 8] = {0, 5}, np[H] = {2, 2};
    pages[8] = 1, pages[9] = 3;
    for (int32_t i = 0; i < 4; i++) {
        p.scale = bad[i];
        test_cond(locks_decode_step(c, 0, &s, 1, q, HQ, &p, out1, NULL, NULL) == LOCKS_ERR_INVALID_ARG,
                  "decode_step scale %g -> INVALID_ARG", (double)bad[i]);
        test_cond(locks_score(c, 0, s, q, HQ, &p, mass) == LOCKS_ERR_INVALID_ARG, "score scale %g -> INVALID_ARG",
                  (double)bad[i]);
        test_cond(locks_attend(c, 0, s, q, HQ, bad[i], pages, np, 8, out1, NULL) == LOCKS_ERR_INVALID_ARG,
                  "attend scale %g -> INVALID_ARG", (double)bad[i]);
        test_cond(locks_prefill_attend(c, 0, s, 0, 2, q2, HQ, bad[i], o2) == LOCKS_ERR_INVALID_ARG,
                  "prefill_attend scale %g -> INVALID_ARG", (double)bad[i]);
    }
    /* pages out of range: INVALID_ARG, out untouched */
    CHECK(locks_attend(c, 0, s, q, HQ, 0.0f, pages, np, 8, out1, NULL));
    const int32_t n_pages = (LEN + P - 1) / P;
    const int32_t bad_pages[3] = {n_pages, -1, 1000};
    for (int32_t i = 0; i < 3; i++) {
        int32_t pg[H * 8];
        memcpy(pg, pages, sizeof pg);
        pg[8 + 1] = bad_pages[i];
        memset(out1, 0xa5, sizeof out1);
        test_cond(locks_attend(c, 0, s, q, HQ, 0.0f, pg, np, 8, out1, NULL) == LOCKS_ERR_INVALID_ARG &&
                      untouched(out1, sizeof out1),
                  "attend with page %d of %d -> INVALID_ARG, out untouched", bad_pages[i], n_pages);
    }
    int32_t np_bad[H] = {2, 9};
    test_cond(locks_attend(c, 0, s, q, HQ, 0.0f, pages, np_bad, 8, out1, NULL) == LOCKS_ERR_INVALID_ARG,
              "attend with n_pages > max_pages -> INVALID_ARG");
    locks_cache_free(c);
    free(k);
    free(v);
}

/* The summary bytes the pool holds per (page, KV head), against the format's formula
 * (summary.h) and the 802 B the README quotes. */
static void test_summary_bytes(void) {
    const int32_t dims[3] = {64, 128, 256}, ranks[3] = {1, 8, 15};
    for (int32_t i = 0; i < 3; i++)
        for (int32_t j = 0; j < 3; j++)
            for (int32_t q = 0; q < 2; q++) {
                locks_cache_params cp = locks_cache_default_params();
                cp.n_layers = 2, cp.n_kv_heads = 3, cp.head_dim = dims[i], cp.n_pages = 5, cp.rank = ranks[j];
                cp.summary_prec = q ? LOCKS_SUMMARY_Q : LOCKS_SUMMARY_F32;
                locks_status st;
                locks_cache *c = locks_cache_init(cp, &st);
                CHECK(st);
                const size_t got = locks_cache_summary_bytes(c), want = locks_summary_bytes(dims[i], ranks[j], cp.summary_prec);
                test_cond(got == want && want > 0, "d %d r %d %s: the pool holds %zu B per page, the format says %zu",
                          dims[i], ranks[j], q ? "Q" : "F32", got, want);
                if (q && dims[i] == 128 && ranks[j] == 8) test_cond(got == 802, "802 B per page at d 128, r 8: %zu", got);
                locks_cache_free(c);
            }
}

/* ---- the thread pool ---- */

typedef struct {
    atomic_int *count;  /* [n_tasks] */
    atomic_int max_thread;
} pool_job;

static void count_task(void *arg, int32_t t, int32_t thread) {
    pool_job *j = arg;
    atomic_fetch_add(&j->count[t], 1);
    int m = atomic_load(&j->max_thread);
    while (thread > m && !atomic_compare_exchange_weak(&j->max_thread, &m, thread)) {
    }
    for (volatile int spin = 0; spin < 2000; spin = spin + 1) { /* long enough for others to join */
    }
}

typedef struct {
    locks_pool *pool;
    int ok;
} pool_user;

static void *pool_user_main(void *arg) {
    pool_user *u = arg;
    u->ok = 1;
    atomic_int count[37];
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 37; i++) atomic_init(&count[i], 0);
        pool_job j = {count, 0};
        locks_pool_run(u->pool, 37, count_task, &j);
        for (int i = 0; i < 37; i++) u->ok &= atomic_load(&count[i]) == 1;
    }
    return NULL;
}

static void test_pool(void) {
    /* a job wakes only the workers it can use: thread indices < min(n_tasks, n_threads) */
    locks_pool *pool = locks_pool_init(4);
    SETUP(pool);
    atomic_int count[8];
    int idx_ok = 1, once = 1;
    for (int rep = 0; rep < 300; rep++)
        for (int32_t n = 1; n <= 6; n++) {
            for (int i = 0; i < 8; i++) atomic_init(&count[i], 0);
            pool_job j = {count, 0};
            locks_pool_run(pool, n, count_task, &j);
            idx_ok &= atomic_load(&j.max_thread) < (n < 4 ? n : 4);
            for (int i = 0; i < n; i++) once &= atomic_load(&count[i]) == 1;
        }
    test_cond(idx_ok, "a job of n tasks runs on threads < min(n, 4) only");
    test_cond(once, "every task runs exactly once");
    /* two threads sharing the pool: their jobs take turns, nothing lost or doubled */
    pthread_t th[2];
    pool_user u[2] = {{pool, 0}, {pool, 0}};
    for (int i = 0; i < 2; i++) SETUP(pthread_create(&th[i], NULL, pool_user_main, &u[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    test_cond(u[0].ok && u[1].ok, "two threads sharing a pool: every task once");
    /* a cache on a shared pool (the caller's reference dropped at once) == its own pool */
    enum { LEN = 120 };
    const size_t row = (size_t)H * D;
    float *k = malloc(sizeof(float) * L * LEN * row), *v = malloc(sizeof(float) * L * LEN * row);
    float q[HQ * D], o1[HQ * D], o2[HQ * D];
    SETUP(k && v);
    tu_fill_normal(k, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(v, (size_t)L * LEN * row, 1.0);
    tu_fill_normal(q, HQ * D, 1.0);
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = L, cp.n_kv_heads = H, cp.head_dim = D, cp.n_pages = 16, cp.pool = pool;
    locks_status st;
    locks_cache *a = locks_cache_init(cp, &st), *b = new_cache(16, 4);
    CHECK(st);
    locks_pool_free(pool); /* a holds its own reference */
    int32_t sa = new_seq(a, LEN, k, v, LEN), sb = new_seq(b, LEN, k, v, LEN);
    locks_step_params p = locks_step_default_params();
    p.budget = 3 * P + LEN % P;
    CHECK(locks_decode_step(a, 1, &sa, 1, q, HQ, &p, o1, NULL, NULL));
    CHECK(locks_decode_step(b, 1, &sb, 1, q, HQ, &p, o2, NULL, NULL));
    test_cond(!memcmp(o1, o2, sizeof o1), "a cache on a shared pool == one with its own pool");
    locks_cache_free(a);
    locks_cache_free(b);
    free(k);
    free(v);
}

int main(void) {
    tu_seed("test_cache_ops");
    test_pool();
    test_summary_bytes();
    test_truncate();
    test_shadow_reuse();
    test_faults();
    test_scale_and_pages();
    return test_report("test_cache_ops");
}
