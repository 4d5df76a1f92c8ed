/*
 * pool.h — the thread pool (src/pool.c). Its API is public (locks.h, "Thread pool"):
 * this header only names it for the library's own files.
 */
#ifndef LOCKS_POOL_H
#define LOCKS_POOL_H

#include "locks.h"

#endif
