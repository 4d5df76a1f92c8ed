/*
 * cache.h — the paged KV cache (internal view of locks_cache).
 *
 * One pool of n_pages physical pages shared by all layers and sequences; a free list
 * (a stack, initially 0, 1, 2, ... so a fresh sequence gets contiguous pages); one block
 * table per sequence. What always holds:
 *  - K/V of layer l, physical page p, KV head h live at k + ((l * n_pages + p) * Hkv + h)
 *    * P * d as fp16 (layout in locks.h).
 *  - fill[l * n_pages + p] is the bitmask of the page's slots written in layer l; it is
 *    reset when the page goes back to the free list and when it leaves it. The CPU
 *    backend attends a token only if its slot is written in that layer
 *    (locks_cache_check_written), so appended but unwritten tokens, or layers written
 *    to different lengths, are an error and never read as zeros. A page is full when the mask is 0xffff;
 *    its summaries (and every selector's page metadata) are built by the write that
 *    fills it (and rebuilt by any later write into it); only locks_cache_write_f16 given
 *    summaries copies them instead, for the pages it covers whole (the metadata is
 *    still built from the keys).
 *  - Summaries of (layer, KV head) are page-major arrays indexed by physical page (see
 *    locks_cache_summaries); only the arrays of the cache's precision are allocated.
 *  - A sequence's pages are table[0 .. n_pages_seq) and its length len satisfies
 *    ceil(len / 16) == n_pages_seq.
 *  - ref[p] counts the block tables that hold physical page p (owned caches): 0 for a
 *    page on the free list, 1 for a page one sequence took by append, more for a page
 *    locks_cache_seq_share gave to other sequences too. Only pages full in every layer
 *    are shared, and a write into a page with ref > 1 is refused, so a shared page's
 *    K/V, summaries and selector metadata never change; a page goes back to the free
 *    list when its last holder drops it (remove, truncate), and a truncate whose new
 *    end falls inside a shared page first gives the sequence its own copy of it.
 *  - Every public call on a cache runs under the cache's lock (rw), taken at the
 *    public entry (locks_cache_enter / locks_cache_leave) and never inside the pool's
 *    tasks: calls that change the cache are serialised, so the step scratch, the block
 *    tables and the free list have one user at a time; the library parallelises
 *    inside each call. The calls that only read the tables (seq_len, block_table,
 *    free_pages) share it (locks_cache_lock_read) and run side by side. The holder of
 *    the exclusive lock may enter again, shared or exclusive (owner, depth); a shared
 *    holder must not ask for the exclusive lock. Only what never changes after init is
 *    read without it (params, page pointers, summary_bytes).
 *
 * Layering: this file is the core every other module stands on; it calls nothing
 * above it. The selectors' per-page metadata lives in blocks the cache holds for them
 * (locks_cache_meta_add: selector.c says how many bytes each needs and registers the
 * hooks a page fill or a freed sequence slot runs); the backend that owns a cache's
 * storage is picked in one place, backend.c, which points c->be at its table of
 * operations (backend.h); this file never branches on it (c->host_pages says only
 * whether the host holds the pages).
 */
#ifndef LOCKS_CACHE_H
#define LOCKS_CACHE_H

#include <pthread.h>
#include <stdint.h>

#include "locks.h"

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

/* Runs after the LOCKS summary of (layer, physical page, KV head) is built, with the
 * page's keys as stored (fp16 rounded, as fp32 [P][d]); calls for different pages or
 * heads run concurrently on the pool threads, so each writes only its own slot. */
typedef void (*locks_page_fill_hook)(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                     const float *k);
/* Runs when sequence seq_id shrinks to len tokens (locks_cache_seq_truncate) or is
 * removed (len = 0, before the slot can be reused), while its table is still intact:
 * per-sequence state derived from tokens past len is dropped. */
typedef void (*locks_seq_hook)(locks_cache *c, int32_t seq_id, int32_t len);

/* One block of selector metadata held by the cache (selector.h names the slots). */
typedef struct {
    void *p;      /* zero-filled, 64-byte aligned; NULL: this cache keeps none */
    size_t bytes;
    locks_page_fill_hook on_fill; /* may be NULL */
    locks_seq_hook on_truncate;   /* may be NULL */
} locks_meta_block;

#define LOCKS_META_SLOTS 4

/* The caller's K/V pages (locks_cache_init_ext, extkv.c); the cache then has no k, v of
 * its own. Block (layer l, page p, head h) starts at k[l] + p * page_ld + h * head_ld
 * and its 16 token rows are tok_ld elements apart (HND: Hkv*16*d, 16*d, d; NHD:
 * 16*Hkv*d, d, Hkv*d; page_ld may be larger: the caller's page stride). On CUDA the
 * pointers are device memory. */
typedef struct {
    locks_kv_layout layout;
    locks_dtype dtype;
    const uint16_t **k, **v; /* [n_layers] */
    size_t page_ld, head_ld, tok_ld;
} locks_ext_pages;

struct locks_cache {
    void *rw;                /* the cache's lock, a pthread_rwlock_t of cache.c's (see the top of this file) */
    uintptr_t owner;         /* the exclusive holder's thread token, 0 if none (__atomic_* only) */
    int32_t depth;           /* the exclusive holder's nesting, read and written by it alone */
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
    int32_t *ref;       /* [n_pages] block tables holding each page (0: free; > 1: shared
                         * by locks_cache_seq_share, full in every layer, never written) */
    locks_seq *seqs;    /* [max_seqs] */
    locks_pool *pool;
    locks_meta_block meta[LOCKS_META_SLOTS]; /* selector metadata (selector.h) */
    locks_scratch scratch[4];        /* step scratch (step.c) */
    const struct locks_backend_i *be; /* the backend's operations (backend.h), chosen at init */
    int32_t host_pages;              /* 1: K/V, summaries and metadata are host memory the CPU
                                        code reads (set by the CPU backend's init) */
    struct locks_cuda_cache *cuda;   /* CUDA backend state (backend_cuda.c); NULL on CPU */
    locks_ext_pages *ext;            /* caller-owned pages (extkv.c); NULL: k, v above */
};

/* ---- the cache's lock ---- */

/* Takes the cache's lock and returns this thread's error mark (locks_error_mark): the
 * start of every public call on a cache that returns a status. */
uint32_t locks_cache_enter(const locks_cache *c);
/* Drops the lock and returns st, naming `call` in the last-error message if st is an
 * error (locks_fail_call with the mark enter gave). */
locks_status locks_cache_leave(const locks_cache *c, locks_status st, const char *call, uint32_t mark);
/* The lock alone (calls that return no status, and the context-parallel step's local
 * phases). */
void locks_cache_lock(const locks_cache *c);
void locks_cache_unlock(const locks_cache *c);
/* The lock shared, for calls that only read the tables (inside the exclusive holder's own
 * call it nests like locks_cache_lock). */
void locks_cache_lock_read(const locks_cache *c);
void locks_cache_unlock_read(const locks_cache *c);

/* ---- construction (called by backend.c) ---- */

/* The part of a cache every backend shares: checks the pool's shape and the rank
 * (LOCKS_ERR_INVALID_ARG), then allocates the cache with its parameters and sizes set,
 * the written-slot masks, the free list (all pages) and each sequence's block table.
 * The caller adds the backend's storage (the CPU's K/V, summaries and thread pool, or
 * the CUDA state) and frees with locks_cache_free. Returns NULL and sets *err on
 * failure; err must not be NULL. */
locks_cache *locks_cache_init_host(const locks_cache_params *params, locks_status *err);
/* The CPU backend's storage: parameter checks, fp16 K/V pages (none when c->ext is
 * set: the caller's), the summaries of the cache's precision and the thread pool
 * (p.pool, or one of n_threads). */
locks_status locks_cache_init_cpu(locks_cache *c);
/* Frees everything this file allocated (the backend's own state is freed first by
 * locks_cache_free in backend.c). */
void locks_cache_release(locks_cache *c);
/* Allocates metadata slot `slot` (bytes, zero-filled) and registers its hooks:
 * LOCKS_ERR_OOM, or LOCKS_ERR_INVALID_ARG for a slot out of range or already taken. */
locks_status locks_cache_meta_add(locks_cache *c, int32_t slot, size_t bytes,
                                  locks_page_fill_hook on_fill, locks_seq_hook on_truncate);
/* Slot's block, NULL if this cache keeps none. */
void *locks_cache_meta(const locks_cache *c, int32_t slot);
/* Byte offset, in a metadata block being laid out, of an array of n elements of sz
 * bytes (64-byte aligned); advances *end past it (SIZE_MAX once a size overflows). */
size_t locks_meta_take(size_t *end, size_t n, size_t sz);

/* ---- host bookkeeping (backend.c syncs the device between stage and commit) ---- */

/* locks_cache_append / seq_remove / seq_truncate on the host's free list, block table
 * and written-slot masks; seq_id must be a live sequence (checked by the caller).
 * Changes are all-or-nothing: the caller mirrors the new table and length to the device
 * first and commits on the host only once that succeeded.
 * append_stage: checks the request (LOCKS_ERR_INVALID_ARG, LOCKS_ERR_POOL_FULL) and
 * writes the pages it would take into the table past the sequence's pages (slots no one
 * reads), giving the new page count and length; append_commit takes them. */
locks_status locks_cache_host_append_stage(locks_cache *c, int32_t seq_id, int32_t n_tokens,
                                           int32_t *n_pages, int32_t *len);
void locks_cache_host_append_commit(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len);
void locks_cache_host_remove(locks_cache *c, int32_t seq_id);
/* Runs the metadata blocks' truncate hooks (len = 0: the sequence is being removed),
 * while the sequence's table still holds its old pages. */
void locks_cache_seq_hooks(locks_cache *c, int32_t seq_id, int32_t len);
/* len must be within 0 .. the sequence's length (checked by the caller), and
 * locks_cache_host_truncate_check must have passed. */
void locks_cache_host_truncate(locks_cache *c, int32_t seq_id, int32_t len);
/* LOCKS_ERR_POOL_FULL (nothing changed) if truncating to len ends inside a shared page
 * and no page is left for the sequence's own copy of it. */
locks_status locks_cache_host_truncate_check(const locks_cache *c, int32_t seq_id, int32_t len);
/* LOCKS_ERR_INVALID_ARG if tokens [pos, pos + n) of the sequence touch a shared page. */
locks_status locks_cache_check_unshared(const locks_cache *c, int32_t seq_id, int32_t pos, int32_t n);
/* locks_cache_write and locks_cache_summary_get of the CPU backend (arguments checked
 * by backend.c). */
locks_status locks_cache_write_cpu(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos,
                                   int32_t n, const float *k, const float *v);
locks_status locks_cache_summary_get_cpu(const locks_cache *c, int32_t layer, int32_t kv_head,
                                         int32_t page, float *mu, float *basis, float *coef);

/* locks_cache_write_f16 of the CPU backend's own pages (arguments but the K/V values and
 * the summaries checked by backend.c; sums only with pos % 16 == 0). Checks every value
 * first: non-finite fp16 K/V or a bad summary record give LOCKS_ERR_NONFINITE with
 * nothing stored. Then stores the rows and, for each page it leaves full, copies the
 * page's records from sums when the write covers the page whole (else builds them),
 * and runs the selectors' page hooks; one pool task per page. */
locks_status locks_cache_write_f16_cpu(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                       const uint16_t *k, const uint16_t *v, const void *sums);
/* Copies the stored summary of (layer, physical page, KV head) to dst as one record of
 * locks_summary_bytes (layout: locks_cache_read_summaries in locks_core.h). */
void locks_cache_summary_pack(const locks_cache *c, int32_t layer, int32_t page, int32_t h, void *dst);
locks_sum_arrays locks_cache_summaries(const locks_cache *c, int32_t layer, int32_t kv_head);
/* The fp16 K (or V) block of (layer, physical page, KV head): [P][d]. */
const uint16_t *locks_cache_kblock(const locks_cache *c, int32_t layer, int32_t page, int32_t h);
const uint16_t *locks_cache_vblock(const locks_cache *c, int32_t layer, int32_t page, int32_t h);
/* Elements between the token rows of a K/V block: d, or the caller's stride (NHD). */
size_t locks_cache_kv_ld(const locks_cache *c);
/* The K and V blocks of (layer, page, head) as contiguous [P][d]: the stored blocks,
 * or (rows tok_ld apart) copies in tmp_k / tmp_v ([P * d] each). */
void locks_cache_kv_rows(const locks_cache *c, int32_t layer, int32_t page, int32_t h, uint16_t *tmp_k,
                         uint16_t *tmp_v, const uint16_t **kb, const uint16_t **vb);
/* Builds the summaries and selector metadata of n physical pages of one layer (all
 * KV heads) from the stored keys, on the pool (CPU backend). */
void locks_cache_build_pages(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n);
void locks_ext_pages_free(locks_ext_pages *e);
/* Caller-owned caches (extkv.c) at a step: LOCKS_ERR_INVALID_ARG unless every full page of each
 * sequence has been reported filled in this layer; LOCKS_ERR_UNSUPPORTED for a
 * selector that reads contiguous key blocks on an NHD cache. */
locks_status locks_ext_step_check(const locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                  locks_selector sel);

/* LOCKS_ERR_INVALID_ARG (with the first such token in the message) unless every token
 * of [0, len) of the sequence has been written in this layer; owned CPU caches only
 * (LOCKS_OK on the others). */
locks_status locks_cache_check_written(const locks_cache *c, int32_t seq_id, int32_t layer, int32_t len);

/* Argument checks shared by the step calls, each setting the last-error message:
 * layer in range; n_q_heads a positive multiple of n_kv_heads with a group of at most
 * max_group (LOCKS_ERR_UNSUPPORTED past it); a live sequence (LOCKS_ERR_NO_SEQ); a
 * softmax scale that is 0 or positive and finite. */
locks_status locks_check_layer(const locks_cache *c, int32_t layer);
locks_status locks_check_heads(const locks_cache *c, int32_t n_q_heads, int32_t max_group);
locks_status locks_check_seq(const locks_cache *c, int32_t seq_id, const locks_seq **s);
locks_status locks_check_scale(float scale);
/* Effective softmax scale of the params (0 -> 1/sqrt(d)). */
float locks_step_scale(const locks_cache *c, float scale);
/* 1 if scale is a valid softmax scale argument: 0 (the default) or finite and > 0.
 * Every entry point that takes a scale checks it before dispatching to a backend. */
int locks_scale_ok(float scale);

/* The sequence, or NULL if the id is unknown or removed. */
const locks_seq *locks_cache_seq(const locks_cache *c, int32_t seq_id);
/* Pointer to at least `bytes` bytes of scratch slot i (contents kept across growth
 * only up to the old size); NULL on allocation failure. */
void *locks_cache_scratch(locks_cache *c, int32_t i, size_t bytes);

#endif
