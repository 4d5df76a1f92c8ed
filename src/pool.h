/*
 * pool.h — a small pthreads pool that runs "n tasks of one function" jobs.
 *
 * The pool has n_threads workers in total, the calling thread included (n_threads = 1
 * runs everything inline, no threads are created). locks_pool_run hands out task
 * indices 0..n_tasks-1 dynamically (an atomic counter) and returns when every task has
 * finished, so the caller may read results right after. A job wakes only the workers
 * it can use (min(n_tasks, n_threads) - 1). Each task also receives the index of the
 * thread running it (0 = caller, 1..n_threads-1 = workers), so callers can keep
 * per-thread scratch without locks. Jobs run one at a time: calls from several threads
 * are serialised, and a task must not call locks_pool_run on the same pool.
 * A pool is shared by reference (a context, its clones and their caches use one):
 * locks_pool_retain adds an owner, locks_pool_free drops one (the last stops the
 * threads). locks_pool_init / locks_pool_free are public (locks.h).
 */
#ifndef LOCKS_POOL_H
#define LOCKS_POOL_H

#include <stdint.h>

#include "locks.h"

typedef void (*locks_pool_fn)(void *arg, int32_t task, int32_t thread);

/* locks_pool_init, locks_pool_free: see locks.h. */
/* Adds an owner; returns p. */
locks_pool *locks_pool_retain(locks_pool *p);
int32_t locks_pool_threads(const locks_pool *p);
/* Runs fn(arg, t, thread) for t in [0, n_tasks); returns when all are done. */
void locks_pool_run(locks_pool *p, int32_t n_tasks, locks_pool_fn fn, void *arg);

#endif
