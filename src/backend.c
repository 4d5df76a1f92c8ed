/*
 * backend.c — the public cache calls whose work depends on the backend, in one place.
 *
 * Each checks its arguments, does the host part (cache.c: free list, block tables,
 * written-slot masks, the CPU's pages and summaries) and, for a CUDA cache, the device
 * part (backend_cuda.c). The layers point one way: this file calls down into cache.c,
 * selector.c (which metadata a new cache keeps) and backend_cuda.c; none of them calls
 * back up. The step's own phases (step.c, score.c, select.c, attend.c) pick the device
 * path at their entry point, after the checks both backends share.
 */
#include <string.h>

#include "cache.h"
#include "selector.h"
#include "util.h"
#ifdef LOCKS_HAVE_CUDA
#include "backend_cuda.h"
#endif

/* Sequence changes are all-or-nothing: a CUDA cache mirrors the new block table (its
 * first n_pages entries) and length to the device first, and the host commits (free
 * list, table, length, fill masks) only once that succeeded. Nothing on the CPU. */
static locks_status sync_seq(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len) {
#ifdef LOCKS_HAVE_CUDA
    if (c->cuda) return locks_cuda_backend_sync(c, seq_id, n_pages, len);
#endif
    (void)c, (void)seq_id, (void)n_pages, (void)len;
    return LOCKS_OK;
}

locks_cache *locks_cache_init(locks_cache_params params, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_cache *c = NULL;
    if (params.backend != LOCKS_BACKEND_CPU && params.backend != LOCKS_BACKEND_CUDA) {
        locks_fail(st, "backend %d is not a locks_backend", (int)params.backend);
        goto fail;
    }
#ifndef LOCKS_HAVE_CUDA
    st = LOCKS_ERR_UNSUPPORTED;
    if (params.backend == LOCKS_BACKEND_CUDA) {
        locks_fail(st, "backend CUDA: this build has no CUDA backend");
        goto fail;
    }
#endif
    c = locks_cache_init_host(&params, &st);
    if (!c) goto fail;
#ifdef LOCKS_HAVE_CUDA
    if (params.backend == LOCKS_BACKEND_CUDA) {
        st = locks_cache_init_cuda(c);
        if (st != LOCKS_OK) goto fail;
        if (err) *err = LOCKS_OK;
        return c; /* no selector metadata on the device (locks.h) */
    }
#endif
    st = locks_cache_init_cpu(c);
    if (st == LOCKS_OK) st = locks_selector_cache_attach(c, params.selectors);
    if (st != LOCKS_OK) goto fail;
    if (err) *err = LOCKS_OK;
    return c;
fail:
    locks_fail_call(st, "locks_cache_init", mark);
    if (st != LOCKS_ERR_OOM && st != LOCKS_OK && params.backend == LOCKS_BACKEND_CPU)
        locks_log(LOCKS_LOG_ERROR, "%s", locks_last_error());
    locks_cache_free(c);
    if (err) *err = st;
    return NULL;
}

void locks_cache_free(locks_cache *c) {
    if (!c) return;
#ifdef LOCKS_HAVE_CUDA
    locks_cache_free_cuda(c);
#endif
    locks_cache_release(c);
}

int locks_cache_serves(const locks_cache *c, locks_selector s) {
    return c && (int)s >= 0 && s < LOCKS_SEL_COUNT && locks_selector_served(c, s);
}

static locks_status seq_remove(locks_cache *c, int32_t seq_id) {
    if (!locks_cache_seq(c, seq_id)) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    locks_status st = sync_seq(c, seq_id, 0, 0);
    if (st != LOCKS_OK) return st;
    locks_cache_host_remove(c, seq_id);
    return LOCKS_OK;
}

static locks_status seq_truncate(locks_cache *c, int32_t seq_id, int32_t len) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!s) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (c->ext) /* the caller's block table: seq_set_pages */
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "a cache over the caller's pages (use seq_set_pages)");
    if (len < 0 || len > s->len)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "len %d (sequence %d holds %d tokens)", len, seq_id, s->len);
    /* a new end inside a shared page needs a free page for this sequence's copy */
    locks_status st = locks_cache_host_truncate_check(c, seq_id, len);
    if (st != LOCKS_OK) return st;
    /* the device must stop reading the dropped tokens (and the pages given back, which
     * another sequence may take) before the host forgets them */
    st = sync_seq(c, seq_id, (len + LOCKS_PAGE - 1) / LOCKS_PAGE, len);
    if (st != LOCKS_OK) return st;
    locks_cache_host_truncate(c, seq_id, len);
    return LOCKS_OK;
}

static locks_status append_tokens(locks_cache *c, int32_t seq_id, int32_t n_tokens) {
    if (!locks_cache_seq(c, seq_id)) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (c->ext) /* the caller's block table: seq_set_pages */
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "a cache over the caller's pages (use seq_set_pages)");
    int32_t n_pages, len;
    locks_status st = locks_cache_host_append_stage(c, seq_id, n_tokens, &n_pages, &len);
    if (st == LOCKS_OK) st = sync_seq(c, seq_id, n_pages, len);
    if (st != LOCKS_OK) return st;
    locks_cache_host_append_commit(c, seq_id, n_pages, len);
    return LOCKS_OK;
}

static locks_status write_kv(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n, const float *k,
                             const float *v) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!s) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (c->ext) return locks_fail(LOCKS_ERR_UNSUPPORTED, "a cache over the caller's pages (the caller writes them)");
    if (layer < 0 || layer >= c->p.n_layers)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d (the cache has 0..%d)", layer, c->p.n_layers - 1);
    if (pos < 0 || n < 0 || pos > s->len - n)
        return locks_fail(LOCKS_ERR_INVALID_ARG,
                          "tokens [%d, %d + %d) are not reserved (sequence %d holds %d: append first)", pos, pos, n,
                          seq_id, s->len);
    if (n == 0) return LOCKS_OK;
    if (!k || !v) return locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !k ? "k" : "v");
    locks_status st = locks_cache_check_unshared(c, seq_id, pos, n); /* shared pages never change */
    if (st != LOCKS_OK) return st;
#ifdef LOCKS_HAVE_CUDA
    if (c->cuda) return locks_cuda_backend_write(c, seq_id, layer, pos, n, k, v);
#endif
    return locks_cache_write_cpu(c, seq_id, layer, pos, n, k, v);
}

static locks_status summary_get(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page, float *mu,
                                float *basis, float *coef) {
    if (!mu || !basis || !coef) return locks_fail(LOCKS_ERR_INVALID_ARG, "NULL output array");
    if (layer < 0 || layer >= c->p.n_layers)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d (the cache has 0..%d)", layer, c->p.n_layers - 1);
    if (kv_head < 0 || kv_head >= c->hkv)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "kv_head %d (the cache has 0..%d)", kv_head, c->hkv - 1);
    if (page < 0 || page >= c->p.n_pages)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "page %d (the pool has 0..%d)", page, c->p.n_pages - 1);
    /* fill is cleared when a page goes back to the pool (cache.h): a freed page has none */
    if (c->fill[(size_t)layer * c->p.n_pages + page] != 0xffffu)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "page %d of layer %d has no summary (not full, or free)", page,
                          layer);
#ifdef LOCKS_HAVE_CUDA
    if (c->cuda) return locks_cuda_backend_summary_get(c, layer, kv_head, page, mu, basis, coef);
#endif
    return locks_cache_summary_get_cpu(c, layer, kv_head, page, mu, basis, coef);
}

/* The public entries: the cache's lock around each (cache.h). */

locks_status locks_cache_seq_remove(locks_cache *c, int32_t seq_id) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_seq_remove: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, seq_remove(c, seq_id), "locks_cache_seq_remove", mark);
}

locks_status locks_cache_seq_truncate(locks_cache *c, int32_t seq_id, int32_t len) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_seq_truncate: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, seq_truncate(c, seq_id, len), "locks_cache_seq_truncate", mark);
}

locks_status locks_cache_append(locks_cache *c, int32_t seq_id, int32_t n_tokens) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_append: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, append_tokens(c, seq_id, n_tokens), "locks_cache_append", mark);
}

locks_status locks_cache_write(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos,
                               int32_t n, const float *k, const float *v) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_write: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, write_kv(c, seq_id, layer, pos, n, k, v), "locks_cache_write", mark);
}

locks_status locks_cache_summary_get(const locks_cache *c, int32_t layer, int32_t kv_head,
                                     int32_t page, float *mu, float *basis, float *coef) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_summary_get: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, summary_get(c, layer, kv_head, page, mu, basis, coef), "locks_cache_summary_get", mark);
}
