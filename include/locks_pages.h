/*
 * locks_pages.h — caller-owned KV pages: a cache over an engine's own paged K/V
 * (part of the public API; locks.h includes it).
 */
#ifndef LOCKS_PAGES_H
#define LOCKS_PAGES_H

#include "locks_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Caller-owned KV pages (src/extkv.c)                                              */
/* ------------------------------------------------------------------------------ */
/* For an engine that keeps its own paged K/V (vLLM, FlashInfer, SGLang): the cache is
 * created over the caller's page memory and holds only what LOCKS adds beside it, the
 * page summaries and selector metadata (plus, per sequence, a copy of the caller's
 * block table). Page size 16 tokens; per layer l, k_pages[l] / v_pages[l] point at
 *
 *     LOCKS_LAYOUT_HND:  [n_pages][Hkv][16][d]   (this library's own layout)
 *     LOCKS_LAYOUT_NHD:  [n_pages][16][Hkv][d]   (vLLM's and FlashInfer's default)
 *
 * in fp16 (CPU and CUDA) or bf16 (CUDA), host memory for the CPU backend and device
 * memory for the CUDA backend (each layer its own allocation or slices of one; the
 * library reads them, never writes). The caller
 *  1. writes K/V into its pages itself (keys after RoPE),
 *  2. tells the library each sequence's block table and length (seq_set_pages),
 *  3. reports pages as filled (pages_filled, per layer) once all 16 slots of the page
 *     are written: the library builds their summaries then. A partial last page is
 *     attended without one, as for an owned cache,
 *  4. decodes with locks_decode_step (the library's sparse attention over the caller's
 *     pages) or gets the selection only with locks_score + locks_select (logical pages
 *     per (sequence, KV head); block_table[logical] is the physical page for the
 *     caller's own attention kernel); a step or score on a sequence with a full page
 *     not reported in that layer fails with LOCKS_ERR_INVALID_ARG,
 *  5. releases pages it frees or reuses (pages_release) before reporting them again.
 * The same values give the same summaries, selections and outputs as an owned cache.
 * Not available on such a cache: locks_cache_append / write / seq_truncate and
 * locks_prefill_attend (LOCKS_ERR_UNSUPPORTED: the caller owns its pages and its
 * prefill), locks_cache_k_page / v_page (NULL). The oracle, shadow, shadow-lm and
 * rocket selectors read keys as contiguous 16 x d blocks: HND only (NHD:
 * LOCKS_ERR_UNSUPPORTED). */

typedef enum {
    LOCKS_LAYOUT_HND = 0, /* [page][kv_head][16][d] */
    LOCKS_LAYOUT_NHD,     /* [page][16][kv_head][d] */
} locks_kv_layout;

typedef struct {
    locks_kv_layout layout;
    locks_dtype dtype;          /* LOCKS_DTYPE_F16, or LOCKS_DTYPE_BF16 (CUDA only) */
    const void *const *k_pages; /* [n_layers]: layer l's K pages, as the layout says */
    const void *const *v_pages; /* [n_layers]: its V pages */
    size_t page_stride;         /* elements from one page to the next; 0: Hkv * 16 * d
                                   (2 * Hkv * 16 * d for FlashInfer's [page][2][16][Hkv][d]) */
} locks_ext_kv;

/* A cache over the caller's pages: params as for locks_cache_init (n_pages is the
 * caller's page count, kv_dtype is ignored: kv->dtype is used). Returns NULL and sets
 * *err: LOCKS_ERR_INVALID_ARG (bad params, NULL kv or page pointer),
 * LOCKS_ERR_UNSUPPORTED (bf16 on the CPU backend, a build without CUDA, ...),
 * LOCKS_ERR_OOM. */
locks_cache *locks_cache_init_ext(locks_cache_params params, const locks_ext_kv *kv, locks_status *err);

/* Sets the sequence's block table (copied: n_pages physical pages for logical pages
 * 0 .. n_pages - 1) and its length in tokens; n_pages must be ceil(len / 16) and every
 * entry in [0, n_pages of the cache), else LOCKS_ERR_INVALID_ARG and nothing changes.
 * Call it whenever the caller's table or length changes (every decode step adds a
 * token). LOCKS_ERR_UNSUPPORTED on an owned cache. */
locks_status locks_cache_seq_set_pages(locks_cache *c, int32_t seq_id, const int32_t *block_table,
                                       int32_t n_pages, int32_t len);

/* The caller has written all 16 slots of these physical pages of one layer: builds
 * their summaries (every KV head) and selector metadata from the caller's memory.
 * LOCKS_ERR_INVALID_ARG, with nothing built, if a page is out of range, listed twice,
 * or already reported since its last release ("reported twice"); CPU backend:
 * LOCKS_ERR_NONFINITE if a page holds NaN/Inf in K or V (nothing built). */
locks_status locks_cache_pages_filled(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n);

/* The caller frees or reuses these physical pages: their summaries are dropped in
 * every layer (they must be reported filled again before a step scores them).
 * LOCKS_ERR_INVALID_ARG for a page out of range (nothing dropped). A sequence whose
 * table holds a released full page cannot be decoded until it is reported again. */
locks_status locks_cache_pages_release(locks_cache *c, const int32_t *pages, int32_t n);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_PAGES_H */
