/*
 * pool.c — pthreads worker pool (see pool.h).
 *
 * A job of n_tasks wants w = min(n_tasks, n_threads) - 1 workers besides the caller;
 * only workers 1..w are woken (each sleeps on its own condition variable), the others
 * sleep through the job. A woken worker pulls task indices from an atomic counter until
 * it passes n_tasks, then reports done; the caller pulls tasks too and waits for the
 * workers it woke: it watches the count of busy workers for a short while (the phases
 * of a step are microseconds long and the workers usually finish within that), and only
 * then sleeps on `done`, saying so in `sleeping`; a worker that ends the job takes the
 * mutex to signal only when the caller sleeps (or is about to: the count and the flag
 * are sequentially consistent, so one of the two sees the other's store). Nothing is
 * allocated per job. Jobs from several threads (caches or contexts sharing the pool)
 * are serialised by run_mu.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "util.h"

typedef struct {
    struct locks_pool *p;
    int32_t index;
    pthread_cond_t wake; /* signalled when a job wants this worker (or at stop) */
} worker;

struct locks_pool {
    int32_t n_threads;
    int32_t n_started; /* workers actually created */
    atomic_int refs;   /* owners: locks_pool_free drops one */
    pthread_t *threads;
    worker *workers; /* [n_threads], 0 unused (the caller) */
    pthread_mutex_t run_mu; /* one job at a time */
    pthread_mutex_t mu;
    pthread_cond_t done;
    atomic_uint_fast64_t gen; /* bumped once per job (under mu; read without it to spin) */
    int stop;       /* set by locks_pool_free */
    int32_t n_want; /* workers 1..n_want take part in the current job */
    atomic_int n_busy;   /* of those, the ones that have not finished it */
    atomic_int sleeping; /* the caller waits on `done` (set and cleared under mu) */
    locks_pool_fn fn;
    void *arg;
    int32_t n_tasks;
    atomic_int next;
};

static void pool_work(locks_pool *p, int32_t thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, thread);
    }
}

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Phases of a step follow each other within microseconds: a worker that just finished
 * a job watches the generation counter for a short while before it sleeps, so the next
 * phase usually starts without a futex wake-up (which can take milliseconds on a loaded
 * machine). It yields the core between looks, so a loaded machine loses little to it. */
static void pool_spin(locks_pool *p, uint64_t seen) {
    const double until = locks_now_ms() + 0.1; /* 100 us */
    for (;;) {
        for (int i = 0; i < 16; i++) {
            if (atomic_load_explicit(&p->gen, memory_order_relaxed) != seen) return;
            cpu_pause();
        }
        if (locks_now_ms() > until) return;
        sched_yield();
    }
}

/* The caller's wait for the workers of its job: the busy count watched for up to 50 us
 * (no yield: the workers are running and about to finish), then a sleep on `done`. */
static void pool_wait(locks_pool *p) {
    const double until = locks_now_ms() + 0.05;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load(&p->n_busy) == 0) return;
            cpu_pause();
        }
        if (locks_now_ms() > until) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->sleeping, 1);
    while (atomic_load(&p->n_busy) > 0) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->sleeping, 0);
    pthread_mutex_unlock(&p->mu);
}

static void *pool_main(void *vp) {
    worker *w = vp;
    locks_pool *p = w->p;
    const int32_t index = w->index;
    uint64_t seen = 0;
    int worked = 0; /* the last job was ours: spin before sleeping */
    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* a job is ours if it is new and wants us; new jobs that do not are skipped */
        while (!p->stop) {
            const uint64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed);
            if (g != seen && index <= p->n_want) break;
            seen = g;
            if (worked) {
                worked = 0;
                pthread_mutex_unlock(&p->mu);
                pool_spin(p, seen);
                pthread_mutex_lock(&p->mu);
                continue;
            }
            pthread_cond_wait(&w->wake, &p->mu);
        }
        if (p->stop) break;
        seen = atomic_load_explicit(&p->gen, memory_order_relaxed);
        pthread_mutex_unlock(&p->mu);
        pool_work(p, index);
        worked = 1;
        /* the last one out wakes the caller if it sleeps (or is about to: see pool_wait) */
        if (atomic_fetch_sub(&p->n_busy, 1) == 1 && atomic_load(&p->sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

locks_pool *locks_pool_init(int32_t n_threads) {
    if (n_threads < 1 || n_threads > 1024) return NULL;
    locks_pool *p = locks_alloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->refs, 1);
    p->threads = locks_alloc((size_t)n_threads, sizeof(pthread_t));
    p->workers = locks_alloc((size_t)n_threads, sizeof(worker));
    if (!p->threads || !p->workers) {
        locks_free(p->threads);
        locks_free(p->workers);
        locks_free(p);
        return NULL;
    }
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->n_busy, 0);
    atomic_init(&p->sleeping, 0);
    for (int32_t i = 1; i < n_threads; i++) {
        p->workers[i].p = p;
        p->workers[i].index = i;
        pthread_cond_init(&p->workers[i].wake, NULL);
        if (pthread_create(&p->threads[i], NULL, pool_main, &p->workers[i]) != 0) {
            pthread_cond_destroy(&p->workers[i].wake);
            locks_pool_free(p);
            return NULL;
        }
        p->n_started = i;
    }
    return p;
}

locks_pool *locks_pool_retain(locks_pool *p) {
    if (p) atomic_fetch_add(&p->refs, 1);
    return p;
}

void locks_pool_free(locks_pool *p) {
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    for (int32_t i = 1; i <= p->n_started; i++) pthread_cond_signal(&p->workers[i].wake);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i <= p->n_started; i++) {
        pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->workers[i].wake);
    }
    pthread_mutex_destroy(&p->run_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->done);
    locks_free(p->threads);
    locks_free(p->workers);
    locks_free(p);
}

int32_t locks_pool_threads(const locks_pool *p) { return p ? p->n_threads : 1; }

void locks_pool_run(locks_pool *p, int32_t n_tasks, locks_pool_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int32_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    const int32_t n_want = (n_tasks < p->n_threads ? n_tasks : p->n_threads) - 1;
    pthread_mutex_lock(&p->run_mu);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->n_want = n_want;
    atomic_store(&p->n_busy, n_want);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_relaxed);
    for (int32_t i = 1; i <= n_want; i++) pthread_cond_signal(&p->workers[i].wake);
    pthread_mutex_unlock(&p->mu);
    pool_work(p, 0);
    pool_wait(p);
    pthread_mutex_unlock(&p->run_mu);
}
