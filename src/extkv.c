/*
 * extkv.c — caller-owned KV pages (locks.h, "Caller-owned KV pages").
 *
 * A cache made by locks_cache_init_ext is an ordinary cache (sequence slots, summary
 * pools, selector metadata, on the CPU or the GPU) without K/V pages of its own:
 * c->ext (CPU) or the device cache (CUDA) points at the caller's page memory with the
 * strides of its layout, and every reader of a K/V block goes through those strides.
 * What always holds:
 *  - fill[l * n_pages + p] is 0xffff exactly when page p of layer l has been reported
 *    filled since it was last released, and then its summaries are those of the
 *    caller's current keys (the caller must not change a reported page's keys without
 *    releasing it);
 *  - a sequence's table and length are the caller's last seq_set_pages; the library
 *    never takes or frees a page of the caller's pool (there is no free list).
 * Every call checks all its input before it changes anything.
 */
#include <string.h>

#include "backend.h"
#include "cache.h"
#include "util.h"

enum { P = LOCKS_PAGE };

/* The strides of a layout, in elements. */
static void layout_strides(locks_kv_layout layout, size_t hkv, size_t d, size_t *page_ld, size_t *head_ld,
                           size_t *tok_ld) {
    *page_ld = hkv * P * d;
    if (layout == LOCKS_LAYOUT_NHD) {
        *head_ld = d;
        *tok_ld = hkv * d;
    } else {
        *head_ld = P * d;
        *tok_ld = d;
    }
}

locks_cache *locks_cache_init_ext(locks_cache_params params, const locks_ext_kv *kv, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_cache *c = NULL;
    locks_ext_pages *e = NULL;
    if (!kv || !kv->k_pages || !kv->v_pages || params.n_layers < 1 || params.n_kv_heads < 1 ||
        params.head_dim < 1 || (kv->layout != LOCKS_LAYOUT_HND && kv->layout != LOCKS_LAYOUT_NHD))
        goto fail;
    for (int32_t l = 0; l < params.n_layers; l++)
        if (!kv->k_pages[l] || !kv->v_pages[l]) goto fail;
    if (kv->dtype != LOCKS_DTYPE_F16 && kv->dtype != LOCKS_DTYPE_BF16) {
        st = kv->dtype == LOCKS_DTYPE_F32 ? LOCKS_ERR_UNSUPPORTED : LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    params.kv_dtype = kv->dtype;
    if (!locks_backend_choose(params.backend, &st)) goto fail;
    if (params.backend == LOCKS_BACKEND_CPU && kv->dtype == LOCKS_DTYPE_BF16) { /* CPU kernels read fp16 */
        st = LOCKS_ERR_UNSUPPORTED;
        goto fail;
    }
    /* the layout, for both backends (on CUDA the pointers are device memory, read there) */
    st = LOCKS_ERR_OOM;
    e = locks_alloc(1, sizeof *e);
    if (!e) goto fail;
    e->k = locks_alloc((size_t)params.n_layers, sizeof *e->k);
    e->v = locks_alloc((size_t)params.n_layers, sizeof *e->v);
    if (!e->k || !e->v) goto fail;
    e->layout = kv->layout;
    e->dtype = kv->dtype;
    for (int32_t l = 0; l < params.n_layers; l++) {
        e->k[l] = kv->k_pages[l];
        e->v[l] = kv->v_pages[l];
    }
    layout_strides(kv->layout, (size_t)params.n_kv_heads, (size_t)params.head_dim, &e->page_ld, &e->head_ld,
                   &e->tok_ld);
    if (kv->page_stride) {
        st = LOCKS_ERR_INVALID_ARG;
        if (kv->page_stride < e->page_ld || kv->page_stride % 8) goto fail; /* pages overlap / 16-byte rows */
        e->page_ld = kv->page_stride;
    }
    /* as locks_cache_init (backend.c), with the caller's pages in place of its own */
    c = locks_cache_make(&params, e, &st);
    e = NULL; /* the cache's, or freed */
    if (!c) goto fail;
    if (err) *err = LOCKS_OK;
    return c;
fail:
    locks_fail_call(st, "locks_cache_init_ext", mark);
    locks_ext_pages_free(e);
    if (err) *err = st;
    return NULL;
}

static int is_ext(const locks_cache *c) { return c->ext != NULL; }

static locks_status seq_set_pages(locks_cache *c, int32_t seq_id, const int32_t *block_table, int32_t n_pages,
                                  int32_t len) {
    if (!locks_cache_seq(c, seq_id)) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (!is_ext(c)) return locks_fail(LOCKS_ERR_UNSUPPORTED, "an owned cache (use append / truncate)");
    if (len < 0 || len > c->p.n_pages * P)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "len %d (must be 0..%d)", len, c->p.n_pages * P);
    if (n_pages != (len + P - 1) / P)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "n_pages %d for len %d (must be ceil(len / 16) = %d)", n_pages, len,
                          (len + P - 1) / P);
    if (n_pages > 0 && !block_table) return locks_fail(LOCKS_ERR_INVALID_ARG, "block_table is NULL");
    for (int32_t i = 0; i < n_pages; i++)
        if (block_table[i] < 0 || block_table[i] >= c->p.n_pages)
            return locks_fail(LOCKS_ERR_INVALID_ARG, "block_table[%d] = %d (the cache has pages 0..%d)", i,
                              block_table[i], c->p.n_pages - 1);
    locks_seq *s = &c->seqs[seq_id];
    /* the tokens the old and the new table share: the leading pages that stay where
     * they were, up to both lengths. State the selectors derived from tokens past that
     * (ShadowKV's fitted basis) belongs to another prompt: dropped, as on a truncate. */
    int32_t same = 0;
    while (same < s->n_pages && same < n_pages && s->table[same] == block_table[same]) same++;
    int32_t keep = same * P;
    if (keep > s->len) keep = s->len;
    if (keep > len) keep = len;
    if (c->be->seq_sync) { /* the backend first, from the new table; the old one back if that fails */
        int32_t *old = n_pages > 0 ? locks_alloc((size_t)n_pages, sizeof(int32_t)) : NULL;
        if (n_pages > 0 && !old) return LOCKS_ERR_OOM;
        if (n_pages > 0) memcpy(old, s->table, (size_t)n_pages * sizeof(int32_t));
        if (n_pages > 0) memcpy(s->table, block_table, (size_t)n_pages * sizeof(int32_t));
        locks_status st = c->be->seq_sync(c, seq_id, n_pages, len);
        if (st != LOCKS_OK && n_pages > 0) memcpy(s->table, old, (size_t)n_pages * sizeof(int32_t));
        locks_free(old);
        if (st != LOCKS_OK) return st;
    }
    if (keep < s->len) locks_cache_seq_hooks(c, seq_id, keep); /* the old table is still intact */
    if (n_pages > 0) memcpy(s->table, block_table, (size_t)n_pages * sizeof(int32_t));
    s->n_pages = n_pages;
    s->len = len;
    return LOCKS_OK;
}

locks_status locks_cache_seq_set_pages(locks_cache *c, int32_t seq_id, const int32_t *block_table,
                                       int32_t n_pages, int32_t len) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_seq_set_pages: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = seq_set_pages(c, seq_id, block_table, n_pages, len);
    return locks_cache_leave(c, st, "locks_cache_seq_set_pages", mark);
}

static locks_status pages_filled(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n) {
    if (!is_ext(c)) return locks_fail(LOCKS_ERR_UNSUPPORTED, "an owned cache (its writes build the summaries)");
    if (locks_check_layer(c, layer) != LOCKS_OK) return LOCKS_ERR_INVALID_ARG;
    if (n < 0 || (n > 0 && !pages)) return locks_fail(LOCKS_ERR_INVALID_ARG, "n %d pages at %p", n, (const void *)pages);
    if (n == 0) return LOCKS_OK;
    uint16_t *fill = c->fill + (size_t)layer * c->p.n_pages;
    /* range, "reported twice" (before, or twice in this list): a mark per page, undone below */
    locks_status st = LOCKS_OK;
    int32_t i = 0;
    for (; i < n; i++) {
        const int32_t p = pages[i];
        if (p < 0 || p >= c->p.n_pages || fill[p] != 0) {
            st = p < 0 || p >= c->p.n_pages
                     ? locks_fail(LOCKS_ERR_INVALID_ARG, "pages[%d] = %d is outside 0..%d", i, p, c->p.n_pages - 1)
                     : locks_fail(LOCKS_ERR_INVALID_ARG, "page %d reported twice (listed twice, or not released)", p);
            break;
        }
        fill[p] = 1; /* seen in this list */
    }
    /* the backend's checks and work that can fail (CPU: finite keys; CUDA: the device
     * build), before any mark is committed */
    if (st == LOCKS_OK && c->be->pages_filled_stage) st = c->be->pages_filled_stage(c, layer, pages, n);
    for (int32_t j = 0; j < i; j++) fill[pages[j]] = st == LOCKS_OK ? 0xffffu : 0;
    if (st != LOCKS_OK) return st;
    if (c->be->pages_filled_commit) c->be->pages_filled_commit(c, layer, pages, n);
    return LOCKS_OK;
}

locks_status locks_cache_pages_filled(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_pages_filled: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = pages_filled(c, layer, pages, n);
    return locks_cache_leave(c, st, "locks_cache_pages_filled", mark);
}

static locks_status pages_release(locks_cache *c, const int32_t *pages, int32_t n) {
    if (!is_ext(c)) return locks_fail(LOCKS_ERR_UNSUPPORTED, "an owned cache (its pages go back on seq_remove)");
    if (n < 0 || (n > 0 && !pages)) return locks_fail(LOCKS_ERR_INVALID_ARG, "n %d pages at %p", n, (const void *)pages);
    for (int32_t i = 0; i < n; i++)
        if (pages[i] < 0 || pages[i] >= c->p.n_pages)
            return locks_fail(LOCKS_ERR_INVALID_ARG, "pages[%d] = %d is outside 0..%d", i, pages[i], c->p.n_pages - 1);
    for (int32_t i = 0; i < n; i++)
        for (int32_t l = 0; l < c->p.n_layers; l++) c->fill[(size_t)l * c->p.n_pages + pages[i]] = 0;
    return LOCKS_OK;
}

locks_status locks_cache_pages_release(locks_cache *c, const int32_t *pages, int32_t n) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_pages_release: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = pages_release(c, pages, n);
    return locks_cache_leave(c, st, "locks_cache_pages_release", mark);
}
