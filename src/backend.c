/*
 * backend.c — the public cache calls whose work depends on the backend, and the one
 * place that chooses a cache's backend.
 *
 * locks_cache_init (and locks_cache_init_ext, extkv.c, through locks_cache_make) points
 * the new cache at its backend's table of operations (backend.h: backend_cpu.c or
 * backend_cuda.c). Each call here checks its arguments, does the host part (cache.c:
 * free list, block tables, written-slot masks) and calls through c->be for the rest.
 * The layers point one way: this file calls down into cache.c and the backends' tables;
 * none of them calls back up (scripts/check_floors.py).
 */
#include <string.h>

#include "backend.h"
#include "cache.h"
#include "selector.h"
#include "util.h"

/* Sequence changes are all-or-nothing: a backend with its own copy of the block tables
 * (CUDA) takes the new table (its first n_pages entries) and length first, and the host
 * commits (free list, table, length, fill masks) only once that succeeded. */
static locks_status sync_seq(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len) {
    return c->be->seq_sync ? c->be->seq_sync(c, seq_id, n_pages, len) : LOCKS_OK;
}

const locks_backend_i *locks_backend_choose(locks_backend b, locks_status *st) {
    switch (b) {
    case LOCKS_BACKEND_CPU: return &locks_backend_cpu;
    case LOCKS_BACKEND_CUDA:
#ifdef LOCKS_HAVE_CUDA
        return &locks_backend_cuda;
#else
        *st = locks_fail(LOCKS_ERR_UNSUPPORTED, "backend CUDA: this build has no CUDA backend");
        return NULL;
#endif
    }
    *st = locks_fail(LOCKS_ERR_INVALID_ARG, "backend %d is not a locks_backend", (int)b);
    return NULL;
}

locks_cache *locks_cache_make(const locks_cache_params *params, locks_ext_pages *ext, locks_status *st) {
    const locks_backend_i *be = locks_backend_choose(params->backend, st);
    locks_cache *c = be ? locks_cache_init_host(params, st) : NULL;
    if (!c) {
        locks_ext_pages_free(ext);
        return NULL;
    }
    c->ext = ext; /* freed with the cache from here on */
    c->be = be;
    *st = be->init(c);
    if (*st == LOCKS_OK) return c;
    locks_cache_free(c);
    return NULL;
}

locks_cache *locks_cache_init(locks_cache_params params, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st = LOCKS_OK;
    locks_cache *c = locks_cache_make(&params, NULL, &st);
    if (err) *err = c ? LOCKS_OK : st;
    if (c) return c;
    locks_fail_call(st, "locks_cache_init", mark);
    if (st != LOCKS_ERR_OOM && params.backend == LOCKS_BACKEND_CPU)
        locks_log(LOCKS_LOG_ERROR, "%s", locks_last_error());
    return NULL;
}

void locks_cache_free(locks_cache *c) {
    if (!c) return;
    if (c->be && c->be->free) c->be->free(c);
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

/* The checks both writes share, on tokens [pos, pos + n) of sequence s in layer `layer`:
 * the layer, the range reserved, k and v given when n > 0. */
static locks_status write_check(const locks_cache *c, const locks_seq *s, int32_t seq_id, int32_t layer, int32_t pos,
                                int32_t n, const void *k, const void *v) {
    const locks_status st = locks_check_layer(c, layer);
    if (st != LOCKS_OK) return st;
    if (pos < 0 || n < 0 || pos > s->len - n)
        return locks_fail(LOCKS_ERR_INVALID_ARG,
                          "tokens [%d, %d + %d) are not reserved (sequence %d holds %d: append first)", pos, pos, n,
                          seq_id, s->len);
    if (n > 0 && (!k || !v)) return locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !k ? "k" : "v");
    return LOCKS_OK;
}

static locks_status write_kv(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n, const float *k,
                             const float *v) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!s) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (c->ext) return locks_fail(LOCKS_ERR_UNSUPPORTED, "a cache over the caller's pages (the caller writes them)");
    locks_status st = write_check(c, s, seq_id, layer, pos, n, k, v);
    if (st != LOCKS_OK || n == 0) return st;
    st = locks_cache_check_unshared(c, seq_id, pos, n); /* shared pages never change */
    if (st != LOCKS_OK) return st;
    return c->be->write(c, seq_id, layer, pos, n, k, v);
}

static locks_status write_f16(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                              const uint16_t *k, const uint16_t *v, const void *sums) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!s) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (!c->host_pages || c->ext) /* host_pages: 0 on the CUDA backend */
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "fp16 writes on a %s (the CPU backend's own pages only)",
                          c->ext ? "cache over the caller's pages" : "CUDA cache");
    locks_status st = write_check(c, s, seq_id, layer, pos, n, k, v);
    if (st != LOCKS_OK || n == 0) return st;
    if (sums && pos % LOCKS_PAGE != 0)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "pos %d with summaries (must be a multiple of %d)", pos, LOCKS_PAGE);
    st = locks_cache_check_unshared(c, seq_id, pos, n); /* shared pages never change */
    if (st != LOCKS_OK) return st;
    return locks_cache_write_f16_cpu(c, seq_id, layer, pos, n, k, v, sums);
}

static locks_status read_summaries(const locks_cache *c, int32_t seq_id, int32_t layer, void *dst) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!s) return locks_fail(LOCKS_ERR_NO_SEQ, "no sequence %d", seq_id);
    if (!c->host_pages || c->ext)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "reading summaries of a %s (the CPU backend's own pages only)",
                          c->ext ? "cache over the caller's pages" : "CUDA cache");
    if (locks_check_layer(c, layer) != LOCKS_OK) return LOCKS_ERR_INVALID_ARG;
    const int32_t n_full = s->len / LOCKS_PAGE;
    if (n_full > 0 && !dst) return locks_fail(LOCKS_ERR_INVALID_ARG, "dst is NULL");
    for (int32_t i = 0; i < n_full; i++)
        if (c->fill[(size_t)layer * c->p.n_pages + s->table[i]] != 0xffffu)
            return locks_fail(LOCKS_ERR_INVALID_ARG,
                              "page %d of sequence %d is not written in full in layer %d: it has no summary", i,
                              seq_id, layer);
    const size_t rec = locks_summary_bytes(c->d, c->r, c->p.summary_prec);
    for (int32_t i = 0; i < n_full; i++)
        for (int32_t h = 0; h < c->hkv; h++)
            locks_cache_summary_pack(c, layer, s->table[i], h, (char *)dst + ((size_t)i * (size_t)c->hkv + (size_t)h) * rec);
    return LOCKS_OK;
}

static locks_status summary_get(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page, float *mu,
                                float *basis, float *coef) {
    if (!mu || !basis || !coef) return locks_fail(LOCKS_ERR_INVALID_ARG, "NULL output array");
    if (locks_check_layer(c, layer) != LOCKS_OK) return LOCKS_ERR_INVALID_ARG;
    if (kv_head < 0 || kv_head >= c->hkv)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "kv_head %d (the cache has 0..%d)", kv_head, c->hkv - 1);
    if (page < 0 || page >= c->p.n_pages)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "page %d (the pool has 0..%d)", page, c->p.n_pages - 1);
    /* fill is cleared when a page goes back to the pool (cache.h): a freed page has none */
    if (c->fill[(size_t)layer * c->p.n_pages + page] != 0xffffu)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "page %d of layer %d has no summary (not full, or free)", page,
                          layer);
    return c->be->summary_get(c, layer, kv_head, page, mu, basis, coef);
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

locks_status locks_cache_write_f16(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                   const uint16_t *k, const uint16_t *v, const void *sums) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_write_f16: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, write_f16(c, seq_id, layer, pos, n, k, v, sums), "locks_cache_write_f16", mark);
}

locks_status locks_cache_read_summaries(const locks_cache *c, int32_t seq_id, int32_t layer, void *dst) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_read_summaries: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, read_summaries(c, seq_id, layer, dst), "locks_cache_read_summaries", mark);
}

locks_status locks_cache_summary_get(const locks_cache *c, int32_t layer, int32_t kv_head,
                                     int32_t page, float *mu, float *basis, float *coef) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_summary_get: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, summary_get(c, layer, kv_head, page, mu, basis, coef), "locks_cache_summary_get", mark);
}

locks_status locks_cache_set_stream(locks_cache *c, void *stream) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_set_stream: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = c->be->set_stream ? c->be->set_stream(c, stream)
                      : stream ? locks_fail(LOCKS_ERR_UNSUPPORTED, "a stream for a %s cache", c->be->name)
                               : LOCKS_OK;
    return locks_cache_leave(c, st, "locks_cache_set_stream", mark);
}
