/*
 * test_threads.c — the thread contract (locks.h "Threads"): one cache used from several
 * threads at once. Each of T threads owns a sequence and loops append + write + decode
 * (and now and then removes and re-adds it, so the free list is shared traffic); R more
 * threads decode one shared, fixed sequence concurrently. Every output is compared with
 * float64 dense attention over what that thread wrote. Short on purpose: `make test`
 * also runs it under ThreadSanitizer (build-tsan, make test-tsan), which reports any
 * unserialised access.
 */
#include "test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <pthread.h>

#include "util.h"

enum { P = LOCKS_PAGE, D = 64, HKV = 2, HQ = 4, T_OWN = 3, T_SHARED = 3, ITERS = 24, SHARED_LEN = 72 };

static locks_cache *cache;
static int32_t shared_seq;
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

    pthread_t th[T_OWN + T_SHARED];
    worker w[T_OWN + T_SHARED];
    memset(w, 0, sizeof w);
    for (int i = 0; i < T_OWN + T_SHARED; i++) {
        w[i].seed = seed * 31u + (uint64_t)i * 0x1234567u + 1u;
        SETUP(pthread_create(&th[i], NULL, i < T_OWN ? own_loop : shared_loop, &w[i]) == 0);
    }
    for (int i = 0; i < T_OWN + T_SHARED; i++) pthread_join(th[i], NULL);
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
