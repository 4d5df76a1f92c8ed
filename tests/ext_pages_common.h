/*
 * ext_pages_common.h — the caller-owned-pages check, shared by test_ext_pages.c (CPU)
 * and test_gpu_ext_pages.c (CUDA): an owned cache and a cache over the caller's pages
 * (HND or NHD, at other physical page numbers) hold the same values; every decode
 * step must select the same pages and give the same output, also while the sequence
 * grows token by token, and against float64 attention over the selected tokens.
 * Misuse (a page reported twice, out of range, listed twice, not reported, released)
 * gets a clear error and changes nothing.
 */
#ifndef EXT_PAGES_COMMON_H
#define EXT_PAGES_COMMON_H

#include "test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#ifdef LOCKS_HAVE_CUDA
#include "cache.h"
#include "cuda/locks_cuda.h"
#endif

enum { EP = LOCKS_PAGE };

typedef struct {
    int gpu;
    locks_dtype dtype;
    locks_kv_layout layout;
    int interleaved; /* K and V of a page side by side (FlashInfer's [page][2][...]): page_stride */
} ext_case;

/* Host array -> what the backend takes (a device copy on the GPU; freed by xfree). */
static void *xin(const ext_case *x, const void *host, size_t bytes) {
#ifdef LOCKS_HAVE_CUDA
    if (x->gpu) {
        void *d = locks_cuda_malloc(bytes);
        SETUP(d);
        CHECK(locks_cuda_memcpy_h2d(d, host, bytes));
        return d;
    }
#endif
    (void)x, (void)bytes;
    return (void *)host;
}
static void xfree(const ext_case *x, void *p) {
#ifdef LOCKS_HAVE_CUDA
    if (x->gpu) locks_cuda_free_ptr(&p);
#endif
    (void)x, (void)p;
}
static void xout(const ext_case *x, void *host, const void *p, size_t bytes) {
#ifdef LOCKS_HAVE_CUDA
    if (x->gpu) {
        CHECK(locks_cuda_memcpy_d2h(host, p, bytes));
        return;
    }
#endif
    (void)x;
    memcpy(host, p, bytes);
}

/* The owned cache's stored K/V block of (layer, physical page): [Hkv][16][d] bits. */
static void owned_page(const ext_case *x, locks_cache *c, int32_t layer, int32_t page, size_t blk, uint16_t *k,
                       uint16_t *v) {
#ifdef LOCKS_HAVE_CUDA
    if (x->gpu) {
        (void)blk;
        CHECK(locks_cuda_kv_page_get(c->cuda, layer, page, k, v));
        return;
    }
#endif
    (void)x;
    memcpy(k, locks_cache_k_page(c, layer, page), blk * sizeof(uint16_t));
    memcpy(v, locks_cache_v_page(c, layer, page), blk * sizeof(uint16_t));
}

static double bits_to_double(const ext_case *x, uint16_t b) {
    if (x->dtype == LOCKS_DTYPE_BF16) {
        uint32_t u = (uint32_t)b << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const uint32_t s = b >> 15, e = (b >> 10) & 31, m = b & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 1024), (int)e - 25);
    return s ? -v : v;
}

typedef struct {
    const ext_case *x;
    int32_t L, H, d, G, NP;
    locks_cache *own, *ext;
    int32_t own_seq, ext_seq;
    uint16_t **pool_k, **pool_v; /* caller's pages per layer, host copies */
    void **dev_k, **dev_v;       /* what the ext cache reads (== pool on the CPU) */
    int32_t *bt;                 /* caller's block table (physical pages, a permutation) */
    int32_t len;
    float *k_all, *v_all;        /* [L][max_len][H][d] the values written */
    int32_t max_len;
    size_t pstride; /* elements from page to page in the caller's pools */
} ext_fix;

/* (page, head, token) -> element offset in the caller's layout */
static size_t ext_off(const ext_fix *f, int32_t page, int32_t h, int32_t t) {
    const size_t H = (size_t)f->H, d = (size_t)f->d, base = (size_t)page * f->pstride;
    if (f->x->layout == LOCKS_LAYOUT_NHD) return base + ((size_t)t * H + (size_t)h) * d;
    return base + ((size_t)h * EP + (size_t)t) * d;
}

/* Copies logical page lp of the owned cache (every layer) into the caller's page bt[lp]. */
static void ext_copy_page(ext_fix *f, int32_t lp) {
    const size_t blk = (size_t)f->H * EP * (size_t)f->d;
    uint16_t *k = malloc(blk * 2), *v = malloc(blk * 2);
    SETUP(k && v);
    int32_t n;
    const int32_t *obt = locks_cache_block_table(f->own, f->own_seq, &n);
    for (int32_t l = 0; l < f->L; l++) {
        owned_page(f->x, f->own, l, obt[lp], blk, k, v);
        for (int32_t h = 0; h < f->H; h++)
            for (int32_t t = 0; t < EP; t++) {
                const size_t src = ((size_t)h * EP + (size_t)t) * (size_t)f->d, dst = ext_off(f, f->bt[lp], h, t);
                memcpy(f->pool_k[l] + dst, k + src, (size_t)f->d * 2);
                memcpy(f->pool_v[l] + dst, v + src, (size_t)f->d * 2);
            }
#ifdef LOCKS_HAVE_CUDA
        if (f->x->gpu) {
            const size_t pg = ext_off(f, f->bt[lp], 0, 0), bytes = blk * 2; /* the page's rows */
            CHECK(locks_cuda_memcpy_h2d((uint16_t *)f->dev_k[l] + pg, f->pool_k[l] + pg, bytes));
            CHECK(locks_cuda_memcpy_h2d((uint16_t *)f->dev_v[l] + pg, f->pool_v[l] + pg, bytes));
        }
#endif
    }
    free(k);
    free(v);
}

/* Appends n tokens of fresh random K/V to the owned cache and mirrors them. */
static void ext_grow(ext_fix *f, int32_t n) {
    const size_t row = (size_t)f->H * (size_t)f->d;
    CHECK(locks_cache_append(f->own, f->own_seq, n));
    for (int32_t l = 0; l < f->L; l++) {
        float *k = f->k_all + ((size_t)l * f->max_len + (size_t)f->len) * row;
        float *v = f->v_all + ((size_t)l * f->max_len + (size_t)f->len) * row;
        tu_fill_normal(k, (size_t)n * row, 1.0);
        tu_fill_normal(v, (size_t)n * row, 1.0);
        for (size_t i = 0; i < (size_t)n * row; i += row) k[i] += 4.0f; /* a shared mean, as real keys have */
        void *dk = xin(f->x, k, (size_t)n * row * 4), *dv = xin(f->x, v, (size_t)n * row * 4);
        CHECK(locks_cache_write(f->own, f->own_seq, l, f->len, n, dk, dv));
        xfree(f->x, dk);
        xfree(f->x, dv);
    }
    const int32_t first = f->len / EP;
    f->len += n;
    for (int32_t lp = first; lp < (f->len + EP - 1) / EP; lp++) ext_copy_page(f, lp);
    CHECK(locks_cache_seq_set_pages(f->ext, f->ext_seq, f->bt, (f->len + EP - 1) / EP, f->len));
    /* the pages that became full, reported per layer */
    for (int32_t l = 0; l < f->L; l++)
        for (int32_t lp = first; lp < f->len / EP; lp++) CHECK(locks_cache_pages_filled(f->ext, l, &f->bt[lp], 1));
}

/* One step on both caches: same selection, same output, and float64 attention over the
 * selected tokens. */
static void ext_compare_step(ext_fix *f, int32_t layer, locks_selector selector, int32_t budget) {
    const int32_t hq = f->H * f->G, d = f->d, maxp = (f->len + EP - 1) / EP;
    const size_t nq = (size_t)hq * d;
    float *q = malloc(nq * 4), *o1 = malloc(nq * 4), *o2 = malloc(nq * 4);
    int32_t *p1 = calloc((size_t)f->H * maxp, 4), *p2 = calloc((size_t)f->H * maxp, 4);
    int32_t *n1 = calloc((size_t)f->H, 4), *n2 = calloc((size_t)f->H, 4);
    SETUP(q && o1 && o2 && p1 && p2 && n1 && n2);
    tu_fill_normal(q, nq, 1.0);
    locks_step_params sp = locks_step_default_params();
    sp.selector = selector;
    sp.budget = budget;
    locks_selection s1 = {p1, n1, maxp}, s2 = {p2, n2, maxp};
    void *dq = xin(f->x, q, nq * 4);
    float *do1 = xin(f->x, o1, nq * 4), *do2 = f->x->gpu ? xin(f->x, o2, nq * 4) : o2;
    CHECK(locks_decode_step(f->own, layer, &f->own_seq, 1, dq, hq, &sp, do1, &s1, NULL));
    CHECK(locks_decode_step(f->ext, layer, &f->ext_seq, 1, dq, hq, &sp, do2, &s2, NULL));
    xout(f->x, o1, do1, nq * 4);
    xout(f->x, o2, do2, nq * 4);
    int same = 1;
    for (int32_t h = 0; h < f->H; h++) {
        same &= n1[h] == n2[h];
        for (int32_t i = 0; same && i < n1[h]; i++) same &= p1[h * maxp + i] == p2[h * maxp + i];
    }
    test_cond(same, "layout %d dtype %d sel %d len %d layer %d budget %d: selections differ", (int)f->x->layout,
              (int)f->x->dtype, (int)selector, f->len, layer, budget);
    double maxd = 0;
    for (size_t i = 0; i < nq; i++) maxd = fmax(maxd, fabs((double)o1[i] - (double)o2[i]));
    test_cond(maxd <= 1e-6, "layout %d dtype %d sel %d len %d: outputs differ by %.3g", (int)f->x->layout,
              (int)f->x->dtype, (int)selector, f->len, maxd);
    /* float64 attention over the selected tokens of the caller's pages */
    double *K = malloc(sizeof(double) * (size_t)maxp * EP * d), *V = malloc(sizeof(double) * (size_t)maxp * EP * d);
    double *qd = malloc(sizeof(double) * d), *ref = malloc(sizeof(double) * nq);
    SETUP(K && V && qd && ref);
    for (int32_t hh = 0; hh < hq; hh++) {
        const int32_t h = hh / f->G;
        int32_t n = 0;
        for (int32_t i = 0; i < n2[h]; i++) {
            const int32_t lp = p2[h * maxp + i], nt = f->len - lp * EP < EP ? f->len - lp * EP : EP;
            for (int32_t t = 0; t < nt; t++, n++)
                for (int32_t j = 0; j < d; j++) {
                    const size_t o = ext_off(f, f->bt[lp], h, t) + (size_t)j;
                    K[(size_t)n * d + j] = bits_to_double(f->x, f->pool_k[layer][o]);
                    V[(size_t)n * d + j] = bits_to_double(f->x, f->pool_v[layer][o]);
                }
        }
        for (int32_t j = 0; j < d; j++) qd[j] = q[(size_t)hh * d + j];
        tu_ref_attention(qd, K, V, n, d, 1.0 / sqrt((double)d), ref + (size_t)hh * d);
    }
    if (f->x->gpu) {
        /* the CUDA kernel attends with the queries (and the softmax weights) rounded to the
         * KV dtype, so elementwise bounds do not fit; the normalised error bound is
         * test_gpu_ops's for the same kernel: 1.5e-2 bf16, 4e-3 fp16 */
        double num = 0, den = 0;
        for (size_t i = 0; i < nq; i++) {
            num += ((double)o2[i] - ref[i]) * ((double)o2[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        const double e = sqrt(num / (den + 1e-300)), tol = f->x->dtype == LOCKS_DTYPE_BF16 ? 1.5e-2 : 4e-3;
        test_cond(e <= tol, "ext step vs float64 (dtype %d layout %d): normalised error %.3g > %.3g",
                  (int)f->x->dtype, (int)f->x->layout, e, tol);
    } else {
        tu_close("ext step vs float64", o2, ref, nq, 2e-5, 1e-4);
    }
    xfree(f->x, dq);
    xfree(f->x, do1);
    if (f->x->gpu) xfree(f->x, do2);
    free(q), free(o1), free(o2), free(p1), free(p2), free(n1), free(n2);
    free(K), free(V), free(qd), free(ref);
}

static locks_status ext_try_step(ext_fix *f, int32_t layer) {
    const int32_t hq = f->H * f->G;
    const size_t nq = (size_t)hq * f->d;
    float *q = malloc(nq * 4), *o = malloc(nq * 4);
    SETUP(q && o);
    tu_fill_normal(q, nq, 1.0);
    void *dq = xin(f->x, q, nq * 4), *dout = f->x->gpu ? xin(f->x, o, nq * 4) : o;
    locks_step_params sp = locks_step_default_params();
    sp.budget = 4 * EP;
    locks_status st = locks_decode_step(f->ext, layer, &f->ext_seq, 1, dq, hq, &sp, dout, NULL, NULL);
    xfree(f->x, dq);
    if (f->x->gpu) xfree(f->x, dout);
    free(q), free(o);
    return st;
}

static void run_ext_case(const ext_case *x) {
    ext_fix F = {0}, *f = &F;
    f->x = x;
    f->L = 2;
    f->H = tu_int(1, 3);
    f->d = x->gpu ? 128 : (tu_int(0, 1) ? 64 : 128);
    f->G = x->gpu ? 4 : tu_int(1, 4);
    const int32_t n0 = tu_int(150, 600), grow = 40;
    f->max_len = n0 + grow;
    f->NP = (f->max_len + EP - 1) / EP + tu_int(3, 9);
    const size_t pool_elems = (size_t)f->NP * f->H * EP * f->d, row = (size_t)f->H * f->d;

    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = f->L;
    cp.n_kv_heads = f->H;
    cp.head_dim = f->d;
    cp.n_pages = f->NP;
    cp.max_seqs = 2;
    cp.n_threads = 2;
    cp.kv_dtype = x->dtype;
    cp.backend = x->gpu ? LOCKS_BACKEND_CUDA : LOCKS_BACKEND_CPU;
    if (!x->gpu) cp.selectors = LOCKS_SEL_BIT(LOCKS_SEL_LOCKS) | LOCKS_SEL_BIT(LOCKS_SEL_QUEST);
    locks_status st;
    f->own = locks_cache_init(cp, &st);
    SETUP(f->own);
    CHECK(locks_cache_seq_add(f->own, &f->own_seq));

    f->pool_k = calloc((size_t)f->L, sizeof *f->pool_k);
    f->pool_v = calloc((size_t)f->L, sizeof *f->pool_v);
    f->dev_k = calloc((size_t)f->L, sizeof *f->dev_k);
    f->dev_v = calloc((size_t)f->L, sizeof *f->dev_v);
    f->k_all = malloc(sizeof(float) * (size_t)f->L * f->max_len * row);
    f->v_all = malloc(sizeof(float) * (size_t)f->L * f->max_len * row);
    f->bt = malloc(sizeof(int32_t) * (size_t)f->NP);
    SETUP(f->pool_k && f->pool_v && f->dev_k && f->dev_v && f->k_all && f->v_all && f->bt);
    /* per layer one allocation: K pages then V pages, or (interleaved) K and V of each page
     * side by side */
    const size_t blk = (size_t)f->H * EP * f->d, v_off = x->interleaved ? blk : pool_elems;
    f->pstride = x->interleaved ? 2 * blk : blk;
    for (int32_t l = 0; l < f->L; l++) {
        uint16_t *buf = malloc(2 * pool_elems * 2);
        SETUP(buf);
        /* unused pages hold finite garbage the library must not read */
        for (size_t i = 0; i < 2 * pool_elems; i++) buf[i] = (uint16_t)(0x3c00 | (tu_next() & 0x83ff));
        f->pool_k[l] = buf;
        f->pool_v[l] = buf + v_off;
        f->dev_k[l] = xin(x, buf, 2 * pool_elems * 2);
        f->dev_v[l] = (uint16_t *)f->dev_k[l] + v_off;
    }
    /* the caller's physical pages: a random permutation of its pool */
    for (int32_t i = 0; i < f->NP; i++) f->bt[i] = i;
    for (int32_t i = f->NP - 1; i > 0; i--) {
        int32_t j = tu_int(0, i), t = f->bt[i];
        f->bt[i] = f->bt[j];
        f->bt[j] = t;
    }
    locks_ext_kv kv = {x->layout, x->dtype, (const void *const *)f->dev_k, (const void *const *)f->dev_v,
                       x->interleaved ? f->pstride : 0};
    f->ext = locks_cache_init_ext(cp, &kv, &st);
    test_cond(f->ext != NULL, "init_ext: %s", locks_status_str(st));
    if (!f->ext) return;
    CHECK(locks_cache_seq_add(f->ext, &f->ext_seq));

    /* misuse before anything is reported */
    const int32_t bad_lo = -1, bad_hi = f->NP;
    test_cond(locks_cache_pages_filled(f->ext, 0, &bad_lo, 1) == LOCKS_ERR_INVALID_ARG, "page -1 accepted");
    test_cond(locks_cache_pages_filled(f->ext, 0, &bad_hi, 1) == LOCKS_ERR_INVALID_ARG, "page n_pages accepted");
    test_cond(locks_cache_pages_filled(f->ext, f->L, &f->bt[0], 1) == LOCKS_ERR_INVALID_ARG, "layer L accepted");
    test_cond(locks_cache_append(f->ext, f->ext_seq, 16) == LOCKS_ERR_UNSUPPORTED, "append on an ext cache");
    test_cond(locks_cache_seq_truncate(f->ext, f->ext_seq, 0) == LOCKS_ERR_UNSUPPORTED, "truncate on ext");
    int32_t bad_bt[2] = {0, f->NP};
    test_cond(locks_cache_seq_set_pages(f->ext, f->ext_seq, bad_bt, 2, 20) == LOCKS_ERR_INVALID_ARG,
              "block table entry out of range accepted");
    test_cond(locks_cache_seq_set_pages(f->ext, f->ext_seq, f->bt, 2, 40) == LOCKS_ERR_INVALID_ARG,
              "2 pages for 40 tokens accepted");
    test_cond(locks_cache_seq_set_pages(f->own, f->own_seq, f->bt, 1, 1) == LOCKS_ERR_UNSUPPORTED,
              "set_pages on an owned cache");

    /* the prefill: the owned cache is written, the caller's pages get the same values;
     * report all but one full page of layer 1 to check the step refuses */
    CHECK(locks_cache_append(f->own, f->own_seq, n0));
    for (int32_t l = 0; l < f->L; l++) {
        float *k = f->k_all + (size_t)l * f->max_len * row, *v = f->v_all + (size_t)l * f->max_len * row;
        tu_fill_normal(k, (size_t)n0 * row, 1.0);
        tu_fill_normal(v, (size_t)n0 * row, 1.0);
        for (size_t i = 0; i < (size_t)n0 * row; i += 7) k[i] += 3.0f;
        void *dk = xin(x, k, (size_t)n0 * row * 4), *dv = xin(x, v, (size_t)n0 * row * 4);
        CHECK(locks_cache_write(f->own, f->own_seq, l, 0, n0, dk, dv));
        xfree(x, dk);
        xfree(x, dv);
    }
    f->len = n0;
    for (int32_t lp = 0; lp < (n0 + EP - 1) / EP; lp++) ext_copy_page(f, lp);
    CHECK(locks_cache_seq_set_pages(f->ext, f->ext_seq, f->bt, (n0 + EP - 1) / EP, n0));
    const int32_t n_full = n0 / EP;
    CHECK(locks_cache_pages_filled(f->ext, 0, f->bt, n_full)); /* layer 0: all at once */
    /* layer 1 in random batches, one page left out */
    const int32_t skip = tu_int(0, n_full - 1);
    for (int32_t lp = 0; lp < n_full;) {
        int32_t m = tu_int(1, 5);
        if (lp + m > n_full) m = n_full - lp;
        for (int32_t i = lp; i < lp + m; i++)
            if (i != skip) CHECK(locks_cache_pages_filled(f->ext, 1, &f->bt[i], 1));
        lp += m;
    }
    test_cond(ext_try_step(f, 1) == LOCKS_ERR_INVALID_ARG, "step with an unreported full page");
    test_cond(ext_try_step(f, 0) == LOCKS_OK, "layer 0 fully reported but its step failed");
    /* a list of the missing page and a page reported before: refused, nothing built */
    int32_t pair[2] = {f->bt[skip], f->bt[(skip + 1) % n_full]};
    test_cond(locks_cache_pages_filled(f->ext, 1, pair, 2) == LOCKS_ERR_INVALID_ARG, "page reported twice accepted");
    int32_t dup[2] = {f->bt[skip], f->bt[skip]};
    test_cond(locks_cache_pages_filled(f->ext, 1, dup, 2) == LOCKS_ERR_INVALID_ARG, "page listed twice accepted");
    test_cond(ext_try_step(f, 1) == LOCKS_ERR_INVALID_ARG, "a refused report built a page");
    if (!x->gpu) { /* the CPU checks the caller's values */
        const size_t o = ext_off(f, f->bt[skip], 0, 3) + 1;
        const uint16_t keep = f->pool_k[1][o];
        f->pool_k[1][o] = 0x7e00; /* NaN */
        test_cond(locks_cache_pages_filled(f->ext, 1, &f->bt[skip], 1) == LOCKS_ERR_NONFINITE, "NaN page accepted");
        f->pool_k[1][o] = keep;
    }
    CHECK(locks_cache_pages_filled(f->ext, 1, &f->bt[skip], 1));

    /* the same selections and outputs, several budgets and selectors */
    const locks_selector sels[] = {LOCKS_SEL_LOCKS, LOCKS_SEL_FULL, LOCKS_SEL_QUEST, LOCKS_SEL_ORACLE};
    const int n_sels = x->gpu ? 2 : (x->layout == LOCKS_LAYOUT_HND ? 4 : 3);
    for (int si = 0; si < n_sels; si++)
        for (int32_t l = 0; l < f->L; l++) ext_compare_step(f, l, sels[si], tu_int(4, 12) * EP);
    if (!x->gpu && x->layout == LOCKS_LAYOUT_NHD && f->H > 1) { /* (one KV head: NHD is HND) */
        float *q = calloc((size_t)f->H * f->G * f->d, 4), *o = calloc((size_t)f->H * f->G * f->d, 4);
        SETUP(q && o);
        q[0] = 1.0f;
        locks_step_params sp = locks_step_default_params();
        sp.selector = LOCKS_SEL_ORACLE;
        st = locks_decode_step(f->ext, 0, &f->ext_seq, 1, q, f->H * f->G, &sp, o, NULL, NULL);
        test_cond(st == LOCKS_ERR_UNSUPPORTED, "oracle on NHD pages: %s", locks_status_str(st));
        free(q), free(o);
    }
    /* the summaries match page for page */
    if (!x->gpu) {
        const int32_t r = cp.rank, d = f->d;
        float *m1 = malloc(4 * (size_t)d), *b1 = malloc(4 * (size_t)r * d), *c1 = malloc(4 * (size_t)EP * r);
        float *m2 = malloc(4 * (size_t)d), *b2 = malloc(4 * (size_t)r * d), *c2 = malloc(4 * (size_t)EP * r);
        SETUP(m1 && b1 && c1 && m2 && b2 && c2);
        int32_t n;
        const int32_t *obt = locks_cache_block_table(f->own, f->own_seq, &n);
        const int32_t lp = tu_int(0, n_full - 1), h = tu_int(0, f->H - 1);
        CHECK(locks_cache_summary_get(f->own, 1, h, obt[lp], m1, b1, c1));
        CHECK(locks_cache_summary_get(f->ext, 1, h, f->bt[lp], m2, b2, c2));
        test_cond(!memcmp(m1, m2, 4 * (size_t)d) && !memcmp(b1, b2, 4 * (size_t)r * d) &&
                      !memcmp(c1, c2, 4 * (size_t)EP * r), "summary of logical page %d differs", lp);
        free(m1), free(b1), free(c1), free(m2), free(b2), free(c2);
    }
    /* release: the step refuses until the page is reported again */
    CHECK(locks_cache_pages_release(f->ext, &f->bt[0], 1));
    test_cond(ext_try_step(f, 0) == LOCKS_ERR_INVALID_ARG, "step over a released page");
    test_cond(locks_cache_pages_release(f->ext, &bad_hi, 1) == LOCKS_ERR_INVALID_ARG, "release out of range");
    for (int32_t l = 0; l < f->L; l++) CHECK(locks_cache_pages_filled(f->ext, l, &f->bt[0], 1));
    /* decode-time growth, token by token: partial pages, pages filling */
    for (int32_t t = 0; t < grow; t += 8) {
        ext_grow(f, tu_int(1, 8));
        ext_compare_step(f, tu_int(0, f->L - 1), LOCKS_SEL_LOCKS, tu_int(3, 10) * EP);
    }

    locks_cache_free(f->ext);
    locks_cache_free(f->own);
    for (int32_t l = 0; l < f->L; l++) {
        if (x->gpu) xfree(x, f->dev_k[l]);
        free(f->pool_k[l]);
    }
    free(f->pool_k), free(f->pool_v), free(f->dev_k), free(f->dev_v), free(f->k_all), free(f->v_all), free(f->bt);
}

#endif
