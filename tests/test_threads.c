/*
 * test_threads.c — the thread contract (locks.h "Threads"): one cache used from several
 * threads at once. Each of T threads owns a sequence and loops append + write + decode
 * (and now and then removes and re-adds it, so the free list is shared traffic); R more
 * threads decode one shared, fixed sequence concurrently, and R_READ threads loop the
 * read-only calls (seq_len, block_table, free_pages) on it meanwhile. Every output is
 * compared with float64 dense attention over what that thread wrote; every read with
 * what the shared sequence holds. Short on purpose: `make test` also runs it under
 * ThreadSanitizer (build-tsan, make test-tsan), which reports any unserialised access.
 *
 * test_pool_handoff: a pool's caller reads what its workers wrote in the job's tasks,
 * through both ways locks_pool_run waits for them (pool.c): jobs that end while it
 * spins, and jobs whose worker sleeps in a task so that the caller sleeps on `done`.
 *
 * test_readers_share: the read-only calls share the cache's lock. While one thread holds
 * it shared (cache.h's locks_cache_lock_read, as a read-only call does), another thread's
 * seq_len / block_table / free_pages return, and an append waits until it is let go.
 */
#include "test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <pthread.h>

#include <time.h>

#include "cache.h"
#include "util.h"

enum { P = LOCKS_PAGE, D = 64, HKV = 2, HQ = 4, T_OWN = 3, T_SHARED = 3, R_READ = 2, ITERS = 24, SHARED_LEN = 72 };

static locks_cache *cache;
static int32_t shared_seq;
static int32_t shared_table[(SHARED_LEN + P - 1) / P];
static int writers_done; /* __atomic_*: the decoding threads have finished */
static float shared_k[SHARED_LEN * HKV * D], shared_v[SHARED_LEN * HKV * D];

typedef struct {
    uint64_t seed;
    int bad;      /* outputs off the reference */
    int failed;   /* calls that returned an error */
    double maxd;  /* largest difference seen */
} worker;

static double next_normal(uint64_t *s) { /* per-thread generator (test_util's is global) */
    double u, v;
    do {
        *s += 0x9e3779b97f4a7c15ull;
        uint64_t z = *s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
        *s += 0x9e3779b97f4a7c15ull;
        z = *s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        v = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    } while (u < 1e-300);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* float64 dense attention of q [HQ][D] over n tokens k/v [n][HKV][D] (fp16-rounded);
 * returns the largest difference from out */
static double ref_diff(const float *k, const float *v, int32_t n, const float *q, const float *out) {
    double *K = malloc(sizeof(double) * (size_t)n * D), *V = malloc(sizeof(double) * (size_t)n * D), qd[D], r[D];
    SETUP(K && V);
    double maxd = 0;
    for (int32_t h = 0; h < HQ; h++) {
        const int32_t kh = h / (HQ / HKV);
        for (int32_t t = 0; t < n; t++)
            for (int32_t x = 0; x < D; x++) {
                const size_t i = ((size_t)t * HKV + (size_t)kh) * D + (size_t)x;
                K[(size_t)t * D + x] = locks_f16_to_f32(locks_f32_to_f16(k[i]));
                V[(size_t)t * D + x] = locks_f16_to_f32(locks_f32_to_f16(v[i]));
            }
        for (int32_t x = 0; x < D; x++) qd[x] = q[h * D + x];
        tu_ref_attention(qd, K, V, n, D, 1.0 / sqrt((double)D), r);
        for (int32_t x = 0; x < D; x++) maxd = fmax(maxd, fabs(r[x] - (double)out[h * D + x]));
    }
    free(K);
    free(V);
    return maxd;
}

static void note(worker *w, locks_status st) {
    if (st != LOCKS_OK) w->failed++;
}

/* A sequence of its own: grow it by 1..9 tokens per iteration, write them, decode
 * (dense: budget covers it), compare; every 8th iteration start over. */
static void *own_loop(void *arg) {
    worker *w = arg;
    enum { MAXLEN = ITERS * 9 };
    float *k = malloc(sizeof(float) * MAXLEN * HKV * D), *v = malloc(sizeof(float) * MAXLEN * HKV * D);
    float q[HQ * D], out[HQ * D];
    SETUP(k && v);
    int32_t seq = -1, len = 0;
    locks_step_params sp = locks_step_default_params();
    sp.budget = MAXLEN + P;
    for (int it = 0; it < ITERS; it++) {
        if (it % 8 == 0) {
            if (seq >= 0) note(w, locks_cache_seq_remove(cache, seq));
            locks_status st = locks_cache_seq_add(cache, &seq);
            note(w, st);
            if (st != LOCKS_OK) break;
            len = 0;
        }
        const int32_t n = 1 + (int32_t)(w->seed % 9);
        for (size_t i = 0; i < (size_t)n * HKV * D; i++) {
            k[(size_t)len * HKV * D + i] = (float)next_normal(&w->seed);
            v[(size_t)len * HKV * D + i] = (float)next_normal(&w->seed);
        }
        for (int32_t i = 0; i < HQ * D; i++) q[i] = (float)(0.5 * next_normal(&w->seed));
        locks_status st = locks_cache_append(cache, seq, n);
        if (st == LOCKS_OK)
            st = locks_cache_write(cache, seq, 0, len, n, k + (size_t)len * HKV * D, v + (size_t)len * HKV * D);
        if (st == LOCKS_OK) len += n;
        if (st == LOCKS_OK) st = locks_decode_step(cache, 0, &seq, 1, q, HQ, &sp, out, NULL, NULL);
        note(w, st);
        if (st != LOCKS_OK) continue;
        if (locks_cache_seq_len(cache, seq) != len) w->bad++;
        const double d = ref_diff(k, v, len, q, out);
        w->maxd = fmax(w->maxd, d);
        if (!(d < 2e-3)) w->bad++;
    }
    free(k);
    free(v);
    return NULL;
}

/* The shared sequence: decode it with fresh queries (sparse, 3 of 5 pages) and
 * compare dense steps with float64. */
static void *shared_loop(void *arg) {
    worker *w = arg;
    float q[HQ * D], out[HQ * D];
    locks_step_params sp = locks_step_default_params();
    for (int it = 0; it < ITERS; it++) {
        for (int32_t i = 0; i < HQ * D; i++) q[i] = (float)(0.5 * next_normal(&w->seed));
        sp.budget = it % 2 ? SHARED_LEN : 3 * P; /* dense and sparse alternate */
        locks_status st = locks_decode_step(cache, 0, &shared_seq, 1, q, HQ, &sp, out, NULL, NULL);
        note(w, st);
        if (st != LOCKS_OK || !(it % 2)) continue;
        const double d = ref_diff(shared_k, shared_v, SHARED_LEN, q, out);
        w->maxd = fmax(w->maxd, d);
        if (!(d < 2e-3)) w->bad++;
    }
    return NULL;
}

/* The read-only calls, looped until the decoding threads finish: the shared sequence
 * never changes, so each read must give what it held at the start. */
static void *read_loop(void *arg) {
    worker *w = arg;
    const int32_t n_pages = locks_cache_get_params(cache).n_pages;
    int32_t rounds = 0;
    while (!__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE) || rounds < 16) {
        rounds++;
        if (locks_cache_seq_len(cache, shared_seq) != SHARED_LEN) w->bad++;
        int32_t n = 0;
        const int32_t *bt = locks_cache_block_table(cache, shared_seq, &n);
        if (!bt || n != (int32_t)(sizeof shared_table / sizeof shared_table[0]) ||
            memcmp(bt, shared_table, sizeof shared_table) != 0)
            w->bad++;
        const int32_t f = locks_cache_free_pages(cache);
        if (f < 0 || f > n_pages - n) w->bad++;
    }
    w->maxd = rounds;
    return NULL;
}

typedef struct {
    int (*call)(void); /* a call on the cache; returns when it returned */
    int done;          /* __atomic_*: the call returned */
} side_call;

static int call_seq_len(void) { return locks_cache_seq_len(cache, shared_seq) == SHARED_LEN; }
static int call_block_table(void) {
    int32_t n = 0;
    return locks_cache_block_table(cache, shared_seq, &n) != NULL && n == (SHARED_LEN + P - 1) / P;
}
static int call_free_pages(void) { return locks_cache_free_pages(cache) >= 0; }
static int call_append(void) {
    const int ok = locks_cache_append(cache, shared_seq, 1) == LOCKS_OK;
    return ok && locks_cache_seq_truncate(cache, shared_seq, SHARED_LEN) == LOCKS_OK;
}

static void *side_loop(void *arg) {
    side_call *s = arg;
    __atomic_store_n(&s->done, s->call() ? 1 : 2, __ATOMIC_RELEASE);
    return NULL;
}

/* Waits up to ms for s->done; returns it (0: still running). */
static int wait_done(side_call *s, int ms) {
    for (int i = 0; i < ms; i++) {
        int d = __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
        if (d) return d;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
}

typedef struct {
    int32_t *val; /* [n] written by the tasks, read by the caller */
    int slow;     /* the tasks of threads other than the caller sleep first */
} handoff_arg;

static void handoff_fn(void *arg, int32_t task, int32_t thread) {
    handoff_arg *a = arg;
    if (a->slow && thread != 0) {
        struct timespec ts = {0, 300000}; /* 300 us: past the caller's 50 us of watching */
        nanosleep(&ts, NULL);
    }
    a->val[task] = task * 7 + 1; /* plain stores: the pool's hand-off must order them */
}

static void test_pool_handoff(void) {
    locks_pool *p = locks_pool_init(2);
    SETUP(p);
    int32_t val[64];
    int bad = 0;
    for (int job = 0; job < 400; job++) {
        const int32_t n = 2 + job % 60;
        handoff_arg a = {val, job % 8 == 0};
        locks_pool_run(p, n, handoff_fn, &a);
        for (int32_t i = 0; i < n; i++) bad += val[i] != i * 7 + 1;
        for (int32_t i = 0; i < n; i++) val[i] = -1; /* the next job's tasks overwrite these */
    }
    test_cond(bad == 0, "pool hand-off: %d task results not seen by the caller", bad);
    locks_pool_free(p);
}

static void test_readers_share(void) {
    struct {
        const char *name;
        int (*call)(void);
    } reads[] = {{"seq_len", call_seq_len}, {"block_table", call_block_table}, {"free_pages", call_free_pages}};
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        side_call s = {reads[i].call, 0};
        pthread_t th;
        locks_cache_lock_read(cache); /* another reader is inside */
        SETUP(pthread_create(&th, NULL, side_loop, &s) == 0);
        const int d = wait_done(&s, 5000);
        locks_cache_unlock_read(cache);
        pthread_join(th, NULL);
        test_cond(d == 1, "%s beside a reader: %s", reads[i].name, d == 0 ? "waited for it (5 s)" : "wrong result");
    }
    side_call w = {call_append, 0};
    pthread_t th;
    locks_cache_lock_read(cache);
    SETUP(pthread_create(&th, NULL, side_loop, &w) == 0);
    const int early = wait_done(&w, 100);
    locks_cache_unlock_read(cache);
    const int late = wait_done(&w, 5000);
    pthread_join(th, NULL);
    test_cond(early == 0, "an append ran while a reader held the cache");
    test_cond(late == 1, "the append after the reader left: %s", late == 0 ? "still waiting" : "failed");
}

int main(void) {
    uint64_t seed = tu_seed("test_threads");
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 1;
    cp.n_kv_heads = HKV;
    cp.head_dim = D;
    cp.n_pages = 128;
    cp.max_seqs = T_OWN + 1;
    cp.n_threads = 2; /* the cache's own pool: work inside each call is parallel too */
    locks_status st;
    cache = locks_cache_init(cp, &st);
    SETUP(cache);
    CHECK(locks_cache_seq_add(cache, &shared_seq));
    tu_fill_normal(shared_k, sizeof shared_k / sizeof shared_k[0], 1.0);
    tu_fill_normal(shared_v, sizeof shared_v / sizeof shared_v[0], 1.0);
    CHECK(locks_cache_append(cache, shared_seq, SHARED_LEN));
    CHECK(locks_cache_write(cache, shared_seq, 0, 0, SHARED_LEN, shared_k, shared_v));
    int32_t n_shared = 0;
    const int32_t *bt = locks_cache_block_table(cache, shared_seq, &n_shared);
    SETUP(bt && n_shared == (int32_t)(sizeof shared_table / sizeof shared_table[0]));
    memcpy(shared_table, bt, sizeof shared_table);
    test_readers_share();
    test_pool_handoff();

    pthread_t th[T_OWN + T_SHARED], rt[R_READ];
    worker w[T_OWN + T_SHARED], r[R_READ];
    memset(w, 0, sizeof w);
    memset(r, 0, sizeof r);
    for (int i = 0; i < R_READ; i++) SETUP(pthread_create(&rt[i], NULL, read_loop, &r[i]) == 0);
    for (int i = 0; i < T_OWN + T_SHARED; i++) {
        w[i].seed = seed * 31u + (uint64_t)i * 0x1234567u + 1u;
        SETUP(pthread_create(&th[i], NULL, i < T_OWN ? own_loop : shared_loop, &w[i]) == 0);
    }
    for (int i = 0; i < T_OWN + T_SHARED; i++) pthread_join(th[i], NULL);
    __atomic_store_n(&writers_done, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < R_READ; i++) {
        pthread_join(rt[i], NULL);
        test_cond(r[i].bad == 0, "reader %d: %d of %.0f rounds read something the shared sequence does not hold", i,
                  r[i].bad, r[i].maxd);
    }
    for (int i = 0; i < T_OWN + T_SHARED; i++) {
        test_cond(w[i].failed == 0, "thread %d (%s): %d calls failed", i, i < T_OWN ? "own sequence" : "shared",
                  w[i].failed);
        test_cond(w[i].bad == 0, "thread %d (%s): %d outputs off the float64 reference (max diff %.3g)", i,
                  i < T_OWN ? "own sequence" : "shared", w[i].bad, w[i].maxd);
    }
    /* every page is back or held: the free list survived the traffic */
    int32_t held = 0;
    for (int32_t s = 0; s < cp.max_seqs; s++) {
        int32_t n = 0;
        if (locks_cache_block_table(cache, s, &n)) held += n;
    }
    test_cond(locks_cache_free_pages(cache) + held == cp.n_pages, "pages: %d free + %d held != %d",
              locks_cache_free_pages(cache), held, cp.n_pages);
    locks_cache_free(cache);
    return test_report("test_threads");
}
