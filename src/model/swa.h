/*
 * swa.h — exact sliding-window attention over the cache's pages (Gemma 3's local
 * layers): the query of the token at position p attends keys p - window + 1 .. p (those
 * that exist), every one of them, whatever the context's selector. The selectors run
 * only in the global layers.
 */
#ifndef LOCKS_SWA_H
#define LOCKS_SWA_H

#include <stdint.h>

#include "locks.h"

/* out[t][Hq * d] for the n tokens at positions pos .. pos + n - 1 of sequence seq, whose
 * K/V (and all earlier ones in the window) are already in the cache's layer. q[t][Hq * d]
 * (after RoPE), Hq = n_q_heads a multiple of the cache's Hkv (GQA groups of Hq / Hkv).
 * scratch: n_threads * swa_scratch_floats(...) floats (one slice per pool thread).
 * Runs on the pool (NULL: inline). Returns LOCKS_ERR_INVALID_ARG for a bad sequence or
 * positions outside it, LOCKS_ERR_UNSUPPORTED if the pages are not in host memory. */
locks_status swa_attend(locks_pool *pool, const locks_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                        const float *q, int32_t n_q_heads, float scale, int32_t window, float *scratch, float *out);
size_t swa_scratch_floats(int32_t n_q_heads, int32_t n_kv_heads, int32_t head_dim, int32_t window);

#endif
