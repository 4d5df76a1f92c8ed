/*
 * cache.h — the paged KV cache (internal view of locks_cache).
 *
 * One pool of n_pages physical pages shared by all layers and sequences; a free list
 * (a stack, initially 0, 1, 2, ... so a fresh sequence gets contiguous pages); one block
 * table per sequence. What always holds:
 *  - K/V of layer l, physical page p, KV head h live at k + ((l * n_pages + p) * Hkv + h)
 *    * P * d as fp16 (layout in locks.h).
 *  - fill[l * n_pages + p] is the bitmask of the page's slots written in layer l; it is
 *    reset when the page leaves the free list. A page is full when the mask is 0xffff;
 *    its summaries (and every selector's page metadata) are built by the write that
 *    fills it (and rebuilt by any later write into it).
 *  - Summaries of (layer, KV head) are page-major arrays indexed by physical page (see
 *    locks_cache_summaries); only the arrays of the cache's precision are allocated.
 *  - A sequence's pages are table[0 .. n_pages_seq) and its length len satisfies
 *    ceil(len / 16) == n_pages_seq.
 *  - One thread uses a cache at a time (the step scratch and the pool are per cache);
 *    the library parallelises inside each call.
 */
#ifndef LOCKS_CACHE_H
#define LOCKS_CACHE_H

#include <stdint.h>

#include "locks.h"
#include "pool.h"

typedef struct {
    int32_t active;
    int32_t len;     /* tokens reserved */
    int32_t n_pages; /* logical pages held */
    int32_t *table;  /* [n_pages of the pool]: logical -> physical */
} locks_seq;

/* Summary arrays of one (layer, KV head), indexed by physical page. */
typedef struct {
    float *mu;         /* F32: [n_pages][d] */
    float *basis;      /* F32: [n_pages][r][d] */
    float *coef;       /* F32: [n_pages][16][r] */
    int8_t *mu_q;      /* Q: [n_pages][d] */
    uint16_t *mu_s;    /* Q: [n_pages] */
    uint8_t *v_q;      /* Q: [n_pages][r][d/2] */
    uint16_t *v_s;     /* Q: [n_pages][r] */
    int8_t *c_q;       /* Q: [n_pages][16][r] */
    uint16_t *c_s;     /* Q: [n_pages][r] */
} locks_sum_arrays;

/* Growable scratch owned by the cache, reused across steps (a cache is used by one
 * thread at a time). */
typedef struct {
    void *p;
    size_t bytes;
} locks_scratch;

struct locks_cache {
    locks_cache_params p;
    int32_t d, hkv, r;
    size_t block;       /* P * d: elements of one (page, head) K block */
    uint16_t *k, *v;    /* [n_layers][n_pages][Hkv][P][d] fp16 */
    uint16_t *fill;     /* [n_layers][n_pages] written-slot masks */
    /* summaries: [n_layers][Hkv][n_pages][...] (see locks_sum_arrays) */
    float *s_mu, *s_basis, *s_coef;
    int8_t *s_mu_q, *s_c_q;
    uint16_t *s_mu_s, *s_v_s, *s_c_s;
    uint8_t *s_v_q;
    size_t sum_bytes;   /* bytes of the summary arrays above, as allocated */
    int32_t *free_list; /* stack of free physical pages */
    int32_t n_free;
    locks_seq *seqs;    /* [max_seqs] */
    locks_pool *pool;
    void *sel_meta[LOCKS_SEL_COUNT]; /* per-selector page metadata (selector.h) */
    locks_scratch scratch[4];        /* step scratch (step.c) */
    struct locks_cuda_cache *cuda;   /* CUDA backend state (backend_cuda.c); NULL on CPU */
};

/* The part of a cache every backend shares: checks the pool's shape and the rank
 * (LOCKS_ERR_INVALID_ARG), then allocates the cache with its parameters and sizes set,
 * the written-slot masks, the free list (all pages) and each sequence's block table.
 * The caller adds the backend's storage (the CPU's K/V, summaries and thread pool, or
 * the CUDA state) and frees with locks_cache_free. Returns NULL and sets *err on
 * failure; err must not be NULL. */
locks_cache *locks_cache_init_host(const locks_cache_params *params, locks_status *err);

locks_sum_arrays locks_cache_summaries(const locks_cache *c, int32_t layer, int32_t kv_head);
/* The fp16 K (or V) block of (layer, physical page, KV head): [P][d]. */
const uint16_t *locks_cache_kblock(const locks_cache *c, int32_t layer, int32_t page, int32_t h);
const uint16_t *locks_cache_vblock(const locks_cache *c, int32_t layer, int32_t page, int32_t h);
/* The sequence, or NULL if the id is unknown or removed. */
const locks_seq *locks_cache_seq(const locks_cache *c, int32_t seq_id);
/* Pointer to at least `bytes` bytes of scratch slot i (contents kept across growth
 * only up to the old size); NULL on allocation failure. */
void *locks_cache_scratch(locks_cache *c, int32_t i, size_t bytes);

#endif
