/*
 * pool.h — the thread pool (src/pool.c). Its API is public (locks.h, "Thread pool"):
 * this header only names it for the library's own files.
 *
 * A pool has n_threads workers in total, the calling thread included; locks_pool_run
 * hands out task indices dynamically (an atomic counter) and wakes only the workers a
 * job can use (min(n_tasks, n_threads) - 1). A pool is shared by reference (a context,
 * its clones and their caches use one): locks_pool_retain adds an owner,
 * locks_pool_free drops one and the last stops the threads.
 */
#ifndef LOCKS_POOL_H
#define LOCKS_POOL_H

#include "locks.h"

#endif
