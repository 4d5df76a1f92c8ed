/*
 * backend_cuda.c — the public API's CUDA backend glue (a cache created with
 * LOCKS_BACKEND_CUDA). The host keeps the sequence bookkeeping exactly as the CPU
 * backend does (free list, block tables, written-slot masks); the pages, summaries
 * and every step's work live on the device (src/cuda/). backend.c calls in here only
 * when c->cuda is set; this file calls down into cache.c and src/cuda/ only. In a
 * build without CUDA it holds the graph API's UNSUPPORTED answers.
 */
#include "cache.h"
#include "decode.h"
#include "util.h"

#ifdef LOCKS_HAVE_CUDA
#include "backend_cuda.h"
#include "cuda/locks_cuda.h"

enum { P = LOCKS_PAGE };

locks_status locks_cache_init_cuda(locks_cache *c) {
    locks_status st;
    c->cuda = locks_cuda_cache_init(&c->p, &st);
    return c->cuda ? LOCKS_OK : st;
}

void locks_cache_free_cuda(locks_cache *c) { locks_cuda_cache_free(&c->cuda); }

locks_status locks_cuda_backend_summary_get(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page,
                                            float *mu, float *basis, float *coef) {
    return locks_cuda_summary_get(c->cuda, layer, kv_head, page, mu, basis, coef);
}

locks_status locks_cuda_backend_sync(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len) {
    return locks_cuda_seq_sync(c->cuda, seq_id, c->seqs[seq_id].table, n_pages, len);
}

locks_status locks_cuda_backend_write(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                      const float *d_k, const float *d_v) {
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

#endif

/* ---- public CUDA graph API (locks.h) ---------------------------------------------- */

#ifdef LOCKS_HAVE_CUDA
struct locks_step_graph {
    locks_cuda_graph *g;
};

locks_step_graph *locks_step_graph_capture(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                           const float *q, int32_t n_q_heads, const locks_step_params *p,
                                           int32_t max_ctx, float *out, locks_status *err) {
    locks_status st = LOCKS_ERR_UNSUPPORTED;
    locks_step_graph *sg = NULL;
    if (!c || !c->cuda) goto fail;
    st = LOCKS_ERR_INVALID_ARG;
    if (!p || !locks_scale_ok(p->scale)) goto fail;
    st = LOCKS_ERR_NO_SEQ;
    for (int32_t i = 0; seq_ids && i < n_seqs; i++)
        if (!locks_cache_seq(c, seq_ids[i])) goto fail;
    st = LOCKS_ERR_OOM;
    sg = locks_alloc(1, sizeof *sg);
    if (!sg) goto fail;
    sg->g = locks_cuda_graph_capture(c->cuda, layer, seq_ids, n_seqs, q, n_q_heads, p, max_ctx, out, &st);
    if (!sg->g) goto fail;
    if (err) *err = LOCKS_OK;
    return sg;
fail:
    locks_free(sg);
    if (err) *err = st;
    return NULL;
}

locks_status locks_step_graph_replay(locks_step_graph *g) {
    return g ? locks_cuda_graph_replay(g->g, 1) : LOCKS_ERR_INVALID_ARG;
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
