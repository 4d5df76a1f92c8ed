/*
 * backend_cuda.h — entry points core's files call for a cache whose c->cuda is set
 * (LOCKS_BACKEND_CUDA; only in builds with LOCKS_HAVE_CUDA). See backend_cuda.c.
 * For this backend every array passed to locks_cache_write, locks_decode_step,
 * locks_score, locks_select and locks_attend is device memory (locks.h says so).
 */
#ifndef LOCKS_BACKEND_CUDA_H
#define LOCKS_BACKEND_CUDA_H

#include "cache.h"

/* locks_cache_init for LOCKS_BACKEND_CUDA: host bookkeeping + device pools. */
locks_cache *locks_cache_init_cuda(locks_cache_params params, locks_status *err);
/* Mirrors sequence seq_id's block table (its first n_pages entries) and a length of len
 * tokens to the device. The cache calls it before it commits an append, truncate or
 * remove on the host (n_pages = len = 0 for a removed sequence), so a failure leaves
 * both sides as they were. */
locks_status locks_cuda_backend_sync(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len);
/* locks_cache_write for the CUDA backend (arguments already validated). */
locks_status locks_cuda_backend_write(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                      const float *d_k, const float *d_v);

#endif
