/*
 * backend_cuda.c — the public API's CUDA backend glue (a cache created with
 * LOCKS_BACKEND_CUDA). The host keeps the sequence bookkeeping exactly as the CPU
 * backend does (free list, block tables, written-slot masks); the pages, summaries
 * and every step's work live on the device (src/cuda/). The table at the end of the
 * CUDA part (locks_backend_cuda, backend.h) is how the public calls reach it; backend.c
 * points a cache at it when the cache is made. This file calls down into cache.c and
 * src/cuda/ only. It also holds the public face of the step graphs and of the
 * capturable step plans; in a build without CUDA, their UNSUPPORTED answers.
 */
#include <string.h>

#include "cache.h"
#include "decode.h"
#include "util.h"

#ifdef LOCKS_HAVE_CUDA
#include "backend.h"
#include "cuda/locks_cuda.h"

enum { P = LOCKS_PAGE };

/* The device pools (over the caller's device pages when c->ext is set); no selector
 * metadata on the device (locks.h). */
static locks_status cuda_init(locks_cache *c) {
    locks_status st;
    if (c->ext) /* the caller's device pages (extkv.c): read by the kernels, never here */
        c->cuda = locks_cuda_cache_init_ext(&c->p, (const void *const *)c->ext->k, (const void *const *)c->ext->v,
                                            c->ext->layout, c->ext->page_ld, &st);
    else
        c->cuda = locks_cuda_cache_init(&c->p, &st);
    return c->cuda ? LOCKS_OK : st;
}

static void cuda_free(locks_cache *c) { locks_cuda_cache_free(&c->cuda); }

static locks_status cuda_summary_get(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page, float *mu,
                                     float *basis, float *coef) {
    return locks_cuda_summary_get(c->cuda, layer, kv_head, page, mu, basis, coef);
}

static locks_status cuda_seq_sync(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len) {
    return locks_cuda_seq_sync(c->cuda, seq_id, c->seqs[seq_id].table, n_pages, len);
}

static locks_status cuda_write(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n, const float *d_k,
                               const float *d_v) {
    const locks_seq *s = &c->seqs[seq_id];
    /* the pages that are full after this write get (re)built summaries, as on the CPU */
    const int32_t first = pos / P, last = (pos + n - 1) / P;
    uint16_t *fill = c->fill + (size_t)layer * c->p.n_pages;
    int32_t stack_pages[64];
    int32_t *pages = stack_pages;
    if (last - first + 1 > 64) {
        pages = locks_alloc((size_t)(last - first + 1), sizeof(int32_t));
        if (!pages) return LOCKS_ERR_OOM;
    }
    uint16_t masks[64];
    int32_t n_build = 0;
    for (int32_t lp = first; lp <= last; lp++) {
        const int32_t page = s->table[lp];
        const int32_t a = lp == first ? pos % P : 0, b = lp == last ? (pos + n - 1) % P : P - 1;
        uint16_t m = (uint16_t)(((1u << (b + 1)) - 1u) & ~((1u << a) - 1u));
        if (lp - first < 64) masks[lp - first] = m;
        if ((fill[page] | m) == 0xffffu) pages[n_build++] = page;
    }
    int stored = 0;
    locks_status st = locks_cuda_cache_write(c->cuda, seq_id, layer, pos, n, d_k, d_v, pages, n_build, &stored);
    /* the slots count as written only once the write and its summary builds succeeded;
     * a device failure after the store began leaves them half-written, so they (and the
     * pages holding them) are marked unwritten: no selector reads a summary built from
     * other keys, and the caller writes them again */
    if (st == LOCKS_OK || stored)
        for (int32_t lp = first; lp <= last; lp++) {
            const int32_t a = lp == first ? pos % P : 0, b = lp == last ? (pos + n - 1) % P : P - 1;
            uint16_t m = lp - first < 64 ? masks[lp - first]
                                         : (uint16_t)(((1u << (b + 1)) - 1u) & ~((1u << a) - 1u));
            if (st == LOCKS_OK) fill[s->table[lp]] |= m;
            else fill[s->table[lp]] &= (uint16_t)~m;
        }
    if (pages != stack_pages) locks_free(pages);
    return st;
}

/* The caller's device pages reported filled: the device builds their summaries. */
static locks_status cuda_pages_filled_stage(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n) {
    return locks_cuda_ext_build(c->cuda, layer, pages, n);
}

static locks_status cuda_set_stream(locks_cache *c, void *stream) { return locks_cuda_set_stream(c->cuda, stream); }

/* q, out, mass, pages: device memory (locks.h). */
static locks_status cuda_decode_step(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                     const float *q, int32_t n_q_heads, const locks_step_params *p, float *out,
                                     locks_selection *sel, locks_step_stats *stats) {
    return locks_cuda_decode_step(c->cuda, layer, seq_ids, n_seqs, q, n_q_heads, p, out, sel, stats);
}

static locks_status cuda_score(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                               const locks_step_params *p, float *mass) {
    return locks_cuda_score(c->cuda, layer, seq_id, q, n_q_heads, p, mass);
}

static locks_status cuda_select(const locks_cache *c, int32_t seq_id, const float *mass, const locks_step_params *p,
                                int32_t *pages, int32_t *n_pages, int32_t max_pages) {
    return locks_cuda_select(c->cuda, seq_id, mass, p, pages, n_pages, max_pages);
}

/* Device page lists: checked on a host copy in scratch slot 1. */
static locks_status cuda_attend_lists(locks_cache *c, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                                      const int32_t **host_pages, const int32_t **host_n_pages) {
    const int32_t H = c->hkv;
    const size_t n_tab = (size_t)H * max_pages;
    int32_t *host = locks_cache_scratch(c, 1, (n_tab + (size_t)H) * sizeof(int32_t));
    if (!host) return LOCKS_ERR_OOM;
    locks_status st = locks_cuda_memcpy_d2h(host + n_tab, n_pages, (size_t)H * sizeof(int32_t));
    if (st == LOCKS_OK) st = locks_cuda_memcpy_d2h(host, pages, n_tab * sizeof(int32_t));
    if (st != LOCKS_OK) return st;
    *host_pages = host;
    *host_n_pages = host + n_tab;
    return LOCKS_OK;
}

static locks_status cuda_attend(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                                float scale, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                                float *out, float *lse) {
    return locks_cuda_attend(c->cuda, layer, seq_id, q, n_q_heads, scale, pages, n_pages, max_pages, out, lse);
}

const locks_backend_i locks_backend_cuda = {
    .name = "CUDA",
    .init = cuda_init,
    .free = cuda_free,
    .seq_sync = cuda_seq_sync,
    .write = cuda_write,
    .summary_get = cuda_summary_get,
    .pages_filled_stage = cuda_pages_filled_stage,
    .pages_filled_commit = NULL, /* the stage built them */
    .set_stream = cuda_set_stream,
    .decode_step = cuda_decode_step,
    .score = cuda_score,
    .select = cuda_select,
    .attend_lists = cuda_attend_lists,
    .attend = cuda_attend,
};

#endif

/* ---- public stream and CUDA graph API (locks.h) ------------------------------------- */

#ifdef LOCKS_HAVE_CUDA
struct locks_step_graph {
    locks_cache *c;
    locks_cuda_graph *g;
};

locks_step_graph *locks_step_graph_capture(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                           const float *q, int32_t n_q_heads, const locks_step_params *p,
                                           int32_t max_ctx, float *out, locks_status *err) {
    locks_status st = LOCKS_ERR_UNSUPPORTED;
    locks_step_graph *sg = NULL;
    if (!c) {
        if (err) *err = locks_fail(LOCKS_ERR_INVALID_ARG, "locks_step_graph_capture: cache is NULL");
        return NULL;
    }
    const uint32_t mark = locks_cache_enter(c);
    if (!c->cuda) goto fail;
    st = LOCKS_ERR_INVALID_ARG;
    if (!p || !locks_scale_ok(p->scale)) goto fail;
    st = LOCKS_ERR_NO_SEQ;
    for (int32_t i = 0; seq_ids && i < n_seqs; i++)
        if (!locks_cache_seq(c, seq_ids[i])) goto fail;
    st = LOCKS_ERR_OOM;
    sg = locks_alloc(1, sizeof *sg);
    if (!sg) goto fail;
    sg->c = c;
    sg->g = locks_cuda_graph_capture(c->cuda, layer, seq_ids, n_seqs, q, n_q_heads, p, max_ctx, out, &st);
    if (!sg->g) goto fail;
    if (err) *err = LOCKS_OK;
    locks_cache_unlock(c);
    return sg;
fail:
    locks_free(sg);
    if (err) *err = st;
    locks_cache_leave(c, st, "locks_step_graph_capture", mark);
    return NULL;
}

locks_status locks_step_graph_replay(locks_step_graph *g) {
    if (!g) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_step_graph_replay: graph is NULL");
    const uint32_t mark = locks_cache_enter(g->c);
    return locks_cache_leave(g->c, locks_cuda_graph_replay(g->g, 1), "locks_step_graph_replay", mark);
}

void locks_step_graph_free(locks_step_graph *g) {
    if (!g) return;
    locks_cuda_graph_free(&g->g);
    locks_free(g);
}
#else
locks_step_graph *locks_step_graph_capture(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                           const float *q, int32_t n_q_heads, const locks_step_params *p,
                                           int32_t max_ctx, float *out, locks_status *err) {
    (void)c, (void)layer, (void)seq_ids, (void)n_seqs, (void)q, (void)n_q_heads, (void)p, (void)max_ctx, (void)out;
    if (err) *err = LOCKS_ERR_UNSUPPORTED;
    return NULL;
}
locks_status locks_step_graph_replay(locks_step_graph *g) {
    (void)g;
    return LOCKS_ERR_UNSUPPORTED;
}
void locks_step_graph_free(locks_step_graph *g) { (void)g; }
#endif

/* ---- capturable step plans (locks.h "Capturable decode step"; the device side is in
 * src/cuda/stream.cu). The host part keeps the batch and, per layer, whether a device
 * pages_filled was enqueued, so locks_step_plan_status can bring the host's lengths,
 * tables and filled marks up to the device's. */

#ifdef LOCKS_HAVE_CUDA
struct locks_step_plan {
    locks_cache *c;
    locks_cuda_plan *g;
    int32_t n_seqs;
    int32_t *seq_ids;      /* [n_seqs] */
    uint8_t *layer_filled; /* [n_layers]: a device pages_filled was enqueued for the layer */
    int32_t *lens;         /* [n_seqs] scratch for status */
    int32_t *tables;       /* [n_seqs][n_pages] scratch for status */
};

locks_step_plan *locks_step_plan_init(locks_cache *c, const int32_t *seq_ids, int32_t n_seqs, int32_t n_q_heads,
                                      const locks_step_params *p, int32_t max_ctx, locks_status *err) {
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_step_plan *pl = NULL;
    if (!c) {
        if (err) *err = locks_fail(st, "locks_step_plan_init: cache is NULL");
        return NULL;
    }
    const uint32_t mark = locks_cache_enter(c);
    if (!seq_ids || n_seqs < 1) goto fail;
    st = LOCKS_ERR_UNSUPPORTED;
    if (!c->cuda) goto fail;
    st = LOCKS_ERR_NO_SEQ;
    for (int32_t i = 0; i < n_seqs; i++)
        if (!locks_cache_seq(c, seq_ids[i])) goto fail;
    st = LOCKS_ERR_OOM;
    pl = locks_alloc(1, sizeof *pl);
    if (!pl) goto fail;
    pl->c = c;
    pl->n_seqs = n_seqs;
    pl->seq_ids = locks_alloc((size_t)n_seqs, sizeof(int32_t));
    pl->layer_filled = locks_alloc((size_t)c->p.n_layers, 1);
    pl->lens = locks_alloc((size_t)n_seqs, sizeof(int32_t));
    pl->tables = locks_alloc((size_t)n_seqs * (size_t)c->p.n_pages, sizeof(int32_t));
    if (!pl->seq_ids || !pl->layer_filled || !pl->lens || !pl->tables) goto fail;
    memcpy(pl->seq_ids, seq_ids, (size_t)n_seqs * sizeof(int32_t));
    pl->g = locks_cuda_plan_init(c->cuda, seq_ids, n_seqs, n_q_heads, p, max_ctx, &st);
    if (!pl->g) goto fail;
    if (err) *err = LOCKS_OK;
    locks_cache_unlock(c);
    return pl;
fail:
    locks_step_plan_free(pl);
    if (err) *err = st;
    locks_cache_leave(c, st, "locks_step_plan_init", mark);
    return NULL;
}

void locks_step_plan_free(locks_step_plan *pl) {
    if (!pl) return;
    locks_cuda_plan_free(&pl->g);
    locks_free(pl->seq_ids);
    locks_free(pl->layer_filled);
    locks_free(pl->lens);
    locks_free(pl->tables);
    locks_free(pl);
}

locks_status locks_step_plan_set_lens(locks_step_plan *pl, const int32_t *d_lens, const int32_t *d_tables,
                                      int32_t table_stride, void *stream) {
    if (!pl) return LOCKS_ERR_INVALID_ARG;
    if (!pl->c->ext) return LOCKS_ERR_UNSUPPORTED; /* an owned cache's pages come from its free list */
    const uint32_t mark = locks_cache_enter(pl->c);
    locks_status st = locks_cuda_plan_set_lens(pl->g, d_lens, d_tables, table_stride, stream);
    return locks_cache_leave(pl->c, st, "locks_step_plan_set_lens", mark);
}

locks_status locks_step_plan_pages_filled(locks_step_plan *pl, int32_t layer, int32_t n_new, void *stream) {
    if (!pl) return LOCKS_ERR_INVALID_ARG;
    if (!pl->c->ext) return LOCKS_ERR_UNSUPPORTED;
    const uint32_t mark = locks_cache_enter(pl->c);
    locks_status st = locks_cuda_plan_pages_filled(pl->g, layer, n_new, stream);
    if (st == LOCKS_OK) pl->layer_filled[layer] = 1;
    return locks_cache_leave(pl->c, st, "locks_step_plan_pages_filled", mark);
}

locks_status locks_step_plan_decode(locks_step_plan *pl, int32_t layer, const float *q, float *out, void *stream) {
    if (!pl) return LOCKS_ERR_INVALID_ARG;
    const uint32_t mark = locks_cache_enter(pl->c);
    return locks_cache_leave(pl->c, locks_cuda_plan_decode(pl->g, layer, q, out, stream), "locks_step_plan_decode", mark);
}

locks_status locks_step_plan_selection(const locks_step_plan *pl, const int32_t **pages, const int32_t **n_pages,
                                       int32_t *stride) {
    return pl ? locks_cuda_plan_selection(pl->g, pages, n_pages, stride) : LOCKS_ERR_INVALID_ARG;
}

locks_status locks_step_plan_status(locks_step_plan *pl, uint32_t *bits) {
    if (!pl || !bits) return LOCKS_ERR_INVALID_ARG;
    locks_cache *c = pl->c;
    const int32_t np_pool = c->p.n_pages;
    const uint32_t mark = locks_cache_enter(c);
    const locks_status st = locks_cuda_plan_status(pl->g, bits, pl->lens, pl->tables, np_pool);
    if (st != LOCKS_OK) return locks_cache_leave(c, st, "locks_step_plan_status", mark);
    for (int32_t i = 0; i < pl->n_seqs && c->ext; i++) { /* the device's state, now the host's too */
        locks_seq *s = &c->seqs[pl->seq_ids[i]];
        const int32_t *t = pl->tables + (size_t)i * np_pool;
        s->len = pl->lens[i];
        s->n_pages = (s->len + P - 1) / P;
        memcpy(s->table, t, (size_t)s->n_pages * sizeof(int32_t));
        for (int32_t l = 0; l < c->p.n_layers; l++)
            if (pl->layer_filled[l])
                for (int32_t j = 0; j < s->len / P; j++) c->fill[(size_t)l * np_pool + t[j]] = 0xffffu;
    }
    return locks_cache_leave(c, LOCKS_OK, "locks_step_plan_status", mark);
}
#else
locks_step_plan *locks_step_plan_init(locks_cache *c, const int32_t *seq_ids, int32_t n_seqs, int32_t n_q_heads,
                                      const locks_step_params *p, int32_t max_ctx, locks_status *err) {
    (void)c, (void)seq_ids, (void)n_seqs, (void)n_q_heads, (void)p, (void)max_ctx;
    if (err) *err = LOCKS_ERR_UNSUPPORTED;
    return NULL;
}
void locks_step_plan_free(locks_step_plan *pl) { (void)pl; }
locks_status locks_step_plan_set_lens(locks_step_plan *pl, const int32_t *d_lens, const int32_t *d_tables,
                                      int32_t table_stride, void *stream) {
    (void)pl, (void)d_lens, (void)d_tables, (void)table_stride, (void)stream;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status locks_step_plan_pages_filled(locks_step_plan *pl, int32_t layer, int32_t n_new, void *stream) {
    (void)pl, (void)layer, (void)n_new, (void)stream;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status locks_step_plan_decode(locks_step_plan *pl, int32_t layer, const float *q, float *out, void *stream) {
    (void)pl, (void)layer, (void)q, (void)out, (void)stream;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status locks_step_plan_selection(const locks_step_plan *pl, const int32_t **pages, const int32_t **n_pages,
                                       int32_t *stride) {
    (void)pl, (void)pages, (void)n_pages, (void)stride;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status locks_step_plan_status(locks_step_plan *pl, uint32_t *bits) {
    (void)pl, (void)bits;
    return LOCKS_ERR_UNSUPPORTED;
}
#endif
