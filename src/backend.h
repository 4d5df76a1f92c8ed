/*
 * backend.h — the operations whose work depends on where a cache's pages live, as one
 * table per backend (the way ggml-backend's struct ggml_backend_i keeps its core free of
 * device branches).
 *
 * locks_cache_init / locks_cache_init_ext (backend.c) point the cache at one table,
 * c->be, and that is the only place that chooses a backend. Every public call checks
 * the arguments both backends share and then calls through c->be; no file below the
 * table branches on the backend, and a backend never calls back up (docs/DESIGN.md 4.1,
 * scripts/check_floors.py). An operation a backend does not have is NULL (each says
 * what NULL means). The calls that run CPU kernels over host pages alone (prefill and
 * prefix attention, a context-parallel rank's step) ask c->host_pages, which the
 * backend's init sets, and answer LOCKS_ERR_UNSUPPORTED naming c->be->name otherwise.
 *
 * Arrays are the caller's, in the backend's memory: host memory for the CPU backend,
 * device memory for CUDA (locks.h says which calls take which).
 */
#ifndef LOCKS_BACKEND_H
#define LOCKS_BACKEND_H

#include "cache.h"

typedef struct locks_backend_i {
    const char *name; /* "CPU", "CUDA": for messages */

    /* ---- storage ---- */
    /* The backend's storage for a cache whose host part locks_cache_init_host made
     * (over the caller's pages when c->ext is set), and its selector metadata. */
    locks_status (*init)(locks_cache *c);
    /* Frees the backend's own state; the host part (cache.c) is freed after it. May be NULL. */
    void (*free)(locks_cache *c);
    /* Mirrors sequence seq_id's block table (its first n_pages entries) and length to the
     * backend before the host commits an append, truncate, remove or seq_set_pages, so a
     * failure leaves both sides as they were. NULL: the host's table is the backend's. */
    locks_status (*seq_sync)(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len);
    /* locks_cache_write after its checks: stores the tokens and builds the summaries of
     * the pages that are full after it, marking the written slots in c->fill. */
    locks_status (*write)(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n, const float *k,
                          const float *v);
    /* locks_cache_summary_get after its checks. */
    locks_status (*summary_get)(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page, float *mu,
                                float *basis, float *coef);
    /* locks_cache_pages_filled after its checks, in two parts: stage (may fail; the
     * pages' fill marks are not yet set) and commit (after they are set; cannot fail).
     * Either may be NULL. */
    locks_status (*pages_filled_stage)(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n);
    void (*pages_filled_commit)(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n);
    /* Binds the cache's work to a stream (CUDA); NULL: only a NULL stream is accepted. */
    locks_status (*set_stream)(locks_cache *c, void *stream);

    /* ---- the step, after the checks both backends share (step.c, score.c, select.c,
     * attend.c, attend_prefix.c) ---- */
    locks_status (*decode_step)(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                const float *q, int32_t n_q_heads, const locks_step_params *p, float *out,
                                locks_selection *sel, locks_step_stats *stats);
    locks_status (*score)(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                          const locks_step_params *p, float *mass);
    locks_status (*select)(const locks_cache *c, int32_t seq_id, const float *mass, const locks_step_params *p,
                           int32_t *pages, int32_t *n_pages, int32_t max_pages);
    /* A host copy of locks_attend's page lists (pages [Hkv][max_pages], then n_pages
     * [Hkv]) for the shared checks: the arrays themselves on the CPU, a copy in scratch
     * slot 1 on a device. */
    locks_status (*attend_lists)(locks_cache *c, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                                 const int32_t **host_pages, const int32_t **host_n_pages);
    locks_status (*attend)(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                           float scale, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                           float *out, float *lse);
} locks_backend_i;

extern const locks_backend_i locks_backend_cpu; /* backend_cpu.c */
#ifdef LOCKS_HAVE_CUDA
extern const locks_backend_i locks_backend_cuda; /* backend_cuda.c */
#endif

/* backend.c: the table of backend b (NULL with *st set for a value that is not a
 * locks_backend, or CUDA in a build without it): the one place that chooses. */
const locks_backend_i *locks_backend_choose(locks_backend b, locks_status *st);
/* backend.c: the constructors' shared tail: the host part (cache.c) over ext (the
 * caller's pages, or NULL; owned from here on, freed on failure), then the backend's
 * storage and selector metadata. NULL with *st set on failure. */
locks_cache *locks_cache_make(const locks_cache_params *params, locks_ext_pages *ext, locks_status *st);

#endif
