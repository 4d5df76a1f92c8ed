/*
 * pool.c — pthreads worker pool (see pool.h).
 *
 * Workers sleep on a condition variable until the generation counter moves, then pull
 * task indices from an atomic counter until it passes n_tasks, then report done. The
 * caller pulls tasks too and waits for the last worker. Nothing is allocated per job.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>

#include "util.h"

struct locks_pool {
    int32_t n_threads;
    int32_t n_started; /* workers actually created */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint_fast64_t gen; /* bumped once per job (under mu; read without it to spin) */
    int stop;      /* set by locks_pool_free */
    int32_t n_busy; /* workers that have not finished the current job */
    locks_pool_fn fn;
    void *arg;
    int32_t n_tasks;
    atomic_int next;
};

typedef struct {
    locks_pool *p;
    int32_t index;
} worker_arg;

static void pool_work(locks_pool *p, int32_t thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, thread);
    }
}

/* Phases of a step follow each other within microseconds: a worker that just finished
 * watches the generation counter for a short while before going to sleep, so the next
 * phase usually starts without a futex wake-up (which can take milliseconds on a
 * loaded machine). */
static void pool_spin(locks_pool *p, uint64_t seen) {
    const double until = locks_now_ms() + 0.1; /* 100 us */
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&p->gen, memory_order_relaxed) != seen) return;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        if (locks_now_ms() > until) return;
    }
}

static void *pool_main(void *vp) {
    worker_arg *w = vp;
    locks_pool *p = w->p;
    int32_t index = w->index;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (!p->stop && atomic_load_explicit(&p->gen, memory_order_relaxed) == seen) {
            pthread_mutex_unlock(&p->mu);
            pool_spin(p, seen);
            pthread_mutex_lock(&p->mu);
        }
        while (!p->stop && atomic_load_explicit(&p->gen, memory_order_relaxed) == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = atomic_load_explicit(&p->gen, memory_order_relaxed);
        pthread_mutex_unlock(&p->mu);
        pool_work(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->n_busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static worker_arg *pool_args(locks_pool *p) { return (worker_arg *)(p->threads + p->n_threads); }

locks_pool *locks_pool_init(int32_t n_threads) {
    if (n_threads < 1) return NULL;
    locks_pool *p = locks_alloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    /* thread handles followed by the worker arguments, one allocation */
    p->threads = locks_alloc((size_t)n_threads, sizeof(pthread_t) + sizeof(worker_arg) + 8);
    if (!p->threads) {
        locks_free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    worker_arg *args = pool_args(p);
    for (int32_t i = 1; i < n_threads; i++) {
        args[i].p = p;
        args[i].index = i;
        if (pthread_create(&p->threads[i], NULL, pool_main, &args[i]) != 0) {
            locks_pool_free(p);
            return NULL;
        }
        p->n_started = i;
    }
    return p;
}

void locks_pool_free(locks_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i <= p->n_started; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    locks_free(p->threads);
    locks_free(p);
}

int32_t locks_pool_threads(const locks_pool *p) { return p ? p->n_threads : 1; }

void locks_pool_run(locks_pool *p, int32_t n_tasks, locks_pool_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int32_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->n_busy = p->n_threads - 1;
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_relaxed);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pool_work(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->n_busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
