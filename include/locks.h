/*
 * locks.h — LOCKS: page-local compact key summaries for sparse long-context decoding.
 * The one header users include; the API is kept by concern in the headers below, each
 * with its part of the contract (locks_core.h opens with the conventions, the cache
 * layout, the summary format and the step's definition):
 *
 *   locks_core.h    status and logging, enums, thread pool, page summaries, the paged
 *                   KV cache, the decode step and its pieces (score, select, attend)
 *   locks_pages.h   caller-owned KV pages (a cache over an engine's own K/V)
 *   locks_device.h  the CUDA backend: streams, step graphs, capturable step plans
 *   locks_cp.h      context parallelism (one sequence sharded across ranks)
 */
#ifndef LOCKS_H
#define LOCKS_H

#include "locks_core.h"
#include "locks_pages.h"
#include "locks_device.h"
#include "locks_cp.h"

#endif /* LOCKS_H */
