/*
 * backend_cuda.h — entry points backend.c calls for a cache whose c->cuda is set
 * (LOCKS_BACKEND_CUDA; only in builds with LOCKS_HAVE_CUDA). See backend_cuda.c.
 * For this backend every array passed to locks_cache_write, locks_decode_step,
 * locks_score, locks_select and locks_attend is device memory (locks.h says so).
 */
#ifndef LOCKS_BACKEND_CUDA_H
#define LOCKS_BACKEND_CUDA_H

#include "cache.h"

/* The device pools of a cache whose host part locks_cache_init_host made. */
locks_status locks_cache_init_cuda(locks_cache *c);
/* Frees the device state (c->cuda becomes NULL); the host part stays. */
void locks_cache_free_cuda(locks_cache *c);
/* locks_cache_summary_get for the CUDA backend (arguments already validated). */
locks_status locks_cuda_backend_summary_get(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page,
                                            float *mu, float *basis, float *coef);
/* Mirrors sequence seq_id's block table (its first n_pages entries) and a length of len
 * tokens to the device. backend.c calls it before the host commits an append, truncate
 * or remove (n_pages = len = 0 for a removed sequence), so a failure leaves both sides
 * as they were. */
locks_status locks_cuda_backend_sync(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len);
/* locks_cache_write for the CUDA backend (arguments already validated). */
locks_status locks_cuda_backend_write(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                      const float *d_k, const float *d_v);

#endif
