/*
 * swa.h — the sliding-window layers' K/V (Gemma 3's local layers) and their exact
 * attention: the query of the token at position p attends keys p - window + 1 .. p
 * (those that exist), every one of them, whatever the context's selector. The selectors
 * run only in the global layers, whose K/V live in the LOCKS cache; a local layer needs
 * only its last `window` positions, so its K/V live in a ring of its own.
 *
 * Ring: cap slots of [Hkv][d] fp16 keys and values; position p sits in slot p % cap.
 * After positions 0 .. len - 1 were written, it holds positions max(0, len - cap) ..
 * len - 1. A write of n positions at pos followed by their attention needs positions
 * pos - window + 1 .. pos + n - 1 at once: cap >= window - 1 + n.
 */
#ifndef LOCKS_SWA_H
#define LOCKS_SWA_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

typedef struct {
    uint16_t *k, *v;    /* (cap, n_kv_heads, head_dim) fp16 */
    int32_t cap;        /* slots (positions) */
    int32_t n_kv_heads, head_dim;
} swa_ring;

/* Bytes of one ring's K and V together. */
size_t swa_ring_bytes(int32_t cap, int32_t n_kv_heads, int32_t head_dim);

/* Stores k, v [n][Hkv * d] fp32 of positions pos .. pos + n - 1 as fp16 (round to nearest
 * even, as the cache does). LOCKS_ERR_NONFINITE (ring unchanged) for a NaN or Inf,
 * LOCKS_ERR_INVALID_ARG for n > cap or pos < 0. */
locks_status swa_ring_write(swa_ring *r, int32_t pos, int32_t n, const float *k, const float *v);

/* out[t][Hq * d] for the n tokens at positions pos .. pos + n - 1, whose K/V (and those
 * of the window before them) are in the ring: cap >= window - 1 + n, or pos + n <= cap
 * (nothing overwritten yet); else LOCKS_ERR_INVALID_ARG. q[t][Hq * d] (after RoPE),
 * Hq = n_q_heads a multiple of Hkv (GQA groups of Hq / Hkv <= 64). A token's result does
 * not depend on n or on the tokens beside it (decoding one token gives, bit for bit, its
 * row of a batch). scratch: swa_scratch_floats(..., n_threads, n_max) floats, n_max >= n
 * and n_threads >= the pool's threads. Runs on the pool (NULL: inline). */
locks_status swa_attend(locks_pool *pool, const swa_ring *r, int32_t pos, int32_t n, const float *q,
                        int32_t n_q_heads, float scale, int32_t window, float *scratch, float *out);
size_t swa_scratch_floats(int32_t n_q_heads, int32_t n_kv_heads, int32_t head_dim, int32_t n_threads,
                          int32_t n_max);

#endif
