/*
 * plan.h — the plan of one (sequence, KV head) decode step: which pages are forced
 * and how many of the others the token budget leaves room for (locks.h, "Decode
 * step"). The CPU step (select.c), the context-parallel step (cp.c) and the CUDA
 * host code and kernels (src/cuda/) all take it from locks_plan_make, so the rule
 * exists once.
 *
 * For a sequence of len tokens: n_full = len / 16 full pages and a partial page of
 * part = len % 16 tokens (attended whenever part > 0). Forced full pages: the leading
 * [0, sink), sink = min(n_sink, n_full), and the trailing [rs, n_full),
 * rs = max(n_full - n_recent, sink) (a page that is both counts once). The candidates
 * [sink, rs) are ranked by group mass; k of them fit the budget:
 *   k = min((budget - forced) / 16, n_cand), forced = 16 (sink + n_full - rs) + part,
 * or -1 when the forced tokens alone exceed the budget (LOCKS_ERR_BUDGET). dense: the
 * full selector, or a budget that holds the whole sequence: every page is attended
 * and nothing is scored. every: the step attends every page (dense, or k == n_cand).
 *
 * Defined here, not in a .c file, so that one definition is compiled both as a host
 * function and (under nvcc) as a device function: a twin in CUDA would be a copy.
 */
#ifndef LOCKS_PLAN_H
#define LOCKS_PLAN_H

#include <stdint.h>

#ifdef __CUDACC__
#define LOCKS_PLAN_FN static __host__ __device__ __forceinline__
#else
#define LOCKS_PLAN_FN static inline
#endif

typedef struct {
    int32_t n_full, part, n_tot; /* full pages, tokens of the partial page, pages */
    int32_t sink, rs;            /* forced full pages: [0, sink) and [rs, n_full) */
    int32_t n_cand;              /* rs - sink candidates, ranked by mass */
    int32_t forced;              /* forced tokens (the partial page included) */
    int32_t k;                   /* candidates taken, 0..n_cand; -1: forced > budget */
    int32_t dense;               /* every page, nothing scored */
    int32_t every;               /* every page is attended (dense or k == n_cand) */
} locks_plan;

/* The plan of a sequence of len >= 0 tokens under (budget, n_sink >= 0, n_recent >= 0);
 * full: the step's selector is LOCKS_SEL_FULL. */
LOCKS_PLAN_FN locks_plan locks_plan_make(int32_t len, int32_t budget, int32_t n_sink, int32_t n_recent,
                                         int full) {
    locks_plan p;
    p.n_full = len / 16;
    p.part = len % 16;
    p.n_tot = p.n_full + (p.part > 0);
    p.sink = n_sink < p.n_full ? n_sink : p.n_full;
    p.rs = p.n_full - n_recent > p.sink ? p.n_full - n_recent : p.sink;
    p.n_cand = p.rs - p.sink;
    p.forced = 16 * (p.sink + p.n_full - p.rs) + p.part;
    p.k = budget >= p.forced ? (budget - p.forced) / 16 : -1;
    if (p.k > p.n_cand) p.k = p.n_cand;
    p.dense = full || budget >= len;
    p.every = p.dense || p.k == p.n_cand;
    return p;
}

#endif
