/*
 * test_cache_meta.c — a cache keeps only the metadata of the selectors it serves
 * (locks_cache_params.selectors), and runs on a caller's thread pool if given one:
 *  - heap bytes measured around locks_cache_init (glibc's mallinfo2, or the
 *    sanitizer's allocator under ASan): a LOCKS-only cache holds its K/V pages, its
 *    summaries and bookkeeping, nothing more; a cache for every selector holds exactly
 *    the Quest/RocketKV min/max, SnapKV and ShadowKV blocks more; Quest alone holds
 *    the min/max block and no SnapKV or ShadowKV bytes;
 *  - asking a LOCKS-only cache for quest / rocket / shadow / shadow-lm (decode step,
 *    score, shadow fit, SnapKV observe/keep, the context-parallel step) gives
 *    LOCKS_ERR_NO_META and leaves the output untouched, while the same calls succeed
 *    on a cache made for all of them and give the same outputs as a cache made for
 *    that selector alone;
 *  - a shared pool: a cache on a caller's pool reports it, gives the same step
 *    outputs as one on its own pool, and leaves the pool alive when freed.
 */
#include "test_util.h"

#include "cache.h"
#include "selector.h"

#if defined(__SANITIZE_ADDRESS__)
/* the sanitizer runtime's allocator statistics (its header does not ship everywhere) */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t heap_bytes(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
#include <malloc.h>
static size_t heap_bytes(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
#endif

enum { P = LOCKS_PAGE, L = 2, H = 2, D = 64, NP = 64, S = 2, R = 8 };

static locks_cache_params params(uint32_t selectors) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = L;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = NP;
    cp.max_seqs = S;
    cp.rank = R;
    cp.selectors = selectors;
    return cp;
}

/* Heap bytes one cache of this selector set holds, measured around its init. */
static size_t measured(uint32_t selectors, locks_cache **keep) {
    size_t before = heap_bytes();
    locks_status st;
    locks_cache *c = locks_cache_init(params(selectors), &st);
    CHECK(st);
    size_t after = heap_bytes();
    *keep = c;
    return after - before;
}

static void test_bytes(void) {
    locks_cache *lk, *all, *quest;
    const size_t b_locks = measured(LOCKS_SEL_BIT(LOCKS_SEL_LOCKS), &lk);
    const size_t b_all = measured(LOCKS_SEL_ALL, &all);
    const size_t b_quest = measured(LOCKS_SEL_BIT(LOCKS_SEL_QUEST), &quest);
    const size_t kv = 2u * L * NP * H * P * D * sizeof(uint16_t);
    const size_t sum = (size_t)L * H * NP * locks_cache_summary_bytes(lk);
    const size_t minmax = locks_sel_minmax_bytes(all), snap = locks_sel_rocket_bytes(all);
    const size_t shadow = locks_sel_shadow_bytes(all);
    /* bookkeeping: masks, free list, tables, the sequence slots, the cache itself, the
     * allocator's headers and 64-byte rounding; far below one metadata block */
    const size_t slack = 32768;
    printf("heap per cache: locks %zu B (K/V %zu + summaries %zu), all %zu B (+ min/max %zu, "
           "SnapKV %zu, ShadowKV %zu), quest %zu B\n",
           b_locks, kv, sum, b_all, minmax, snap, shadow, b_quest);
    test_cond(b_locks >= kv + sum && b_locks <= kv + sum + slack,
              "a LOCKS-only cache holds K/V + summaries + bookkeeping: %zu vs %zu", b_locks, kv + sum);
    test_cond(minmax > 0 && snap > 0 && shadow > 0 && slack < snap + minmax && slack < shadow,
              "the metadata blocks are larger than the slack");
    const size_t extra = b_all - b_locks;
    test_cond(extra + slack >= minmax + snap + shadow && extra <= minmax + snap + shadow + slack,
              "all selectors add their metadata: %zu vs %zu", extra, minmax + snap + shadow);
    test_cond(b_quest - b_locks + slack >= minmax && b_quest - b_locks <= minmax + slack,
              "quest adds its min/max only: %zu vs %zu", b_quest - b_locks, minmax);
    for (int32_t i = 0; i < LOCKS_META_SLOTS; i++)
        test_cond(lk->meta[i].p == NULL && lk->meta[i].bytes == 0, "LOCKS-only: slot %d empty", i);
    test_cond(quest->meta[LOCKS_META_MINMAX].bytes == minmax && !quest->meta[LOCKS_META_SNAPKV].p &&
                  !quest->meta[LOCKS_META_SHADOW].p,
              "quest: min/max only");
    for (int s = 0; s < LOCKS_SEL_COUNT; s++) {
        const int base = s == LOCKS_SEL_FULL || s == LOCKS_SEL_ORACLE || s == LOCKS_SEL_LOCKS;
        test_cond(locks_cache_serves(lk, (locks_selector)s) == base, "LOCKS-only serves %s: %d",
                  locks_selector_name((locks_selector)s), base);
        test_cond(locks_cache_serves(all, (locks_selector)s), "all serves %s", locks_selector_name((locks_selector)s));
        test_cond(locks_cache_serves(quest, (locks_selector)s) == (base || s == LOCKS_SEL_QUEST),
                  "quest cache serves %s", locks_selector_name((locks_selector)s));
    }
    test_cond(!locks_cache_serves(all, LOCKS_SEL_COUNT) && !locks_cache_serves(NULL, LOCKS_SEL_LOCKS),
              "serves: out of range");
    locks_status st;
    locks_cache_params bad = params(LOCKS_SEL_ALL + 1u);
    test_cond(locks_cache_init(bad, &st) == NULL && st == LOCKS_ERR_INVALID_ARG, "unknown selector bits");
    locks_cache_free(lk);
    locks_cache_free(all);
    locks_cache_free(quest);
}

/* Fills sequence seq of c with the given K/V (n tokens, every layer). */
static void fill(locks_cache *c, int32_t *seq, int32_t n, const float *k, const float *v) {
    CHECK(locks_cache_seq_add(c, seq));
    CHECK(locks_cache_append(c, *seq, n));
    for (int32_t l = 0; l < L; l++)
        CHECK(locks_cache_write(c, *seq, l, 0, n, k + (size_t)l * n * H * D, v + (size_t)l * n * H * D));
}

static void test_no_meta(void) {
    const int32_t n = 16 * 20 + 5, G = 2, hq = H * G;
    const size_t kvn = (size_t)L * n * H * D;
    float *k = malloc(kvn * sizeof(float)), *v = malloc(kvn * sizeof(float));
    float *q = malloc((size_t)hq * D * sizeof(float)), *q_obs = malloc((size_t)4 * hq * D * sizeof(float));
    float *out = malloc((size_t)hq * D * sizeof(float)), *ref = malloc((size_t)hq * D * sizeof(float));
    float *mass = malloc((size_t)H * (n / P) * sizeof(float));
    SETUP(k && v && q && q_obs && out && ref && mass);
    tu_fill_normal(k, kvn, 1.0);
    tu_fill_normal(v, kvn, 1.0);
    tu_fill_normal(q, (size_t)hq * D, 1.0);
    tu_fill_normal(q_obs, (size_t)4 * hq * D, 1.0);
    locks_status st;
    locks_cache *lk = locks_cache_init(params(LOCKS_SEL_BIT(LOCKS_SEL_LOCKS)), &st);
    CHECK(st);
    locks_cache *all = locks_cache_init(params(LOCKS_SEL_ALL), &st);
    CHECK(st);
    int32_t s_lk, s_all;
    fill(lk, &s_lk, n, k, v);
    fill(all, &s_all, n, k, v);
    locks_step_params p = locks_step_default_params();
    p.budget = 64;
    const locks_selector asked[] = {LOCKS_SEL_QUEST, LOCKS_SEL_ROCKET, LOCKS_SEL_SHADOW, LOCKS_SEL_SHADOW_LM};
    for (int i = 0; i < 4; i++) {
        p.selector = asked[i];
        const char *name = locks_selector_name(asked[i]);
        for (size_t e = 0; e < (size_t)hq * D; e++) out[e] = 7.0f;
        st = locks_decode_step(lk, 1, &s_lk, 1, q, hq, &p, out, NULL, NULL);
        test_cond(st == LOCKS_ERR_NO_META, "%s on a LOCKS-only cache: %s", name, locks_status_str(st));
        int untouched = 1;
        for (size_t e = 0; e < (size_t)hq * D; e++) untouched &= out[e] == 7.0f;
        test_cond(untouched, "%s: the refused step wrote nothing", name);
        st = locks_score(lk, 1, s_lk, q, hq, &p, mass);
        test_cond(st == LOCKS_ERR_NO_META, "%s score on a LOCKS-only cache: %s", name, locks_status_str(st));
        /* the context-parallel step (one local rank) serves quest of the four */
        locks_cp_group *grp = locks_cp_group_init(1, &st);
        CHECK(st);
        locks_cp_comm_params cpp = {LOCKS_CP_LOCAL, 1, 0, grp, NULL, 0};
        locks_cp_comm *comm = locks_cp_comm_init(cpp, &st);
        CHECK(st);
        locks_cp_shard sh = {lk, s_lk, 0, n};
        st = locks_cp_decode_step(comm, &sh, 1, q, hq, &p, out, NULL, NULL);
        locks_cp_comm_free(comm);
        locks_cp_group_free(grp);
        const locks_status want = asked[i] == LOCKS_SEL_QUEST ? LOCKS_ERR_NO_META : LOCKS_ERR_UNSUPPORTED;
        test_cond(st == want, "%s cp step on a LOCKS-only cache: %s", name, locks_status_str(st));
        /* the cache made for every selector runs it, as one made for it alone does */
        locks_cache *one = locks_cache_init(params(LOCKS_SEL_BIT(asked[i])), &st);
        CHECK(st);
        int32_t s_one;
        fill(one, &s_one, n, k, v);
        CHECK(locks_decode_step(all, 1, &s_all, 1, q, hq, &p, out, NULL, NULL));
        CHECK(locks_decode_step(one, 1, &s_one, 1, q, hq, &p, ref, NULL, NULL));
        test_cond(memcmp(out, ref, (size_t)hq * D * sizeof(float)) == 0, "%s: same output on both caches", name);
        locks_cache_free(one);
    }
    st = locks_cache_shadow_fit(lk, s_lk);
    test_cond(st == LOCKS_ERR_NO_META, "shadow fit on a LOCKS-only cache: %s", locks_status_str(st));
    st = locks_cache_snapkv_observe(lk, s_lk, 0, q_obs, 4, hq, 0.0f);
    test_cond(st == LOCKS_ERR_NO_META, "snapkv observe on a LOCKS-only cache: %s", locks_status_str(st));
    st = locks_cache_snapkv_keep(lk, s_lk, 0, 64);
    test_cond(st == LOCKS_ERR_NO_META, "snapkv keep on a LOCKS-only cache: %s", locks_status_str(st));
    CHECK(locks_cache_shadow_fit(all, s_all));
    CHECK(locks_cache_snapkv_observe(all, s_all, 0, q_obs, 4, hq, 0.0f));
    CHECK(locks_cache_snapkv_keep(all, s_all, 0, 64));
    test_cond(strstr(locks_status_str(LOCKS_ERR_NO_META), "selectors") != NULL, "NO_META names the parameter");
    locks_cache_free(lk);
    locks_cache_free(all);
    free(k), free(v), free(q), free(q_obs), free(out), free(ref), free(mass);
}

static void test_shared_pool(void) {
    const int32_t n = 16 * 12 + 3, hq = H * 4;
    const size_t kvn = (size_t)L * n * H * D;
    float *k = malloc(kvn * sizeof(float)), *v = malloc(kvn * sizeof(float));
    float *q = malloc((size_t)hq * D * sizeof(float));
    float *o1 = malloc((size_t)hq * D * sizeof(float)), *o2 = malloc((size_t)hq * D * sizeof(float));
    SETUP(k && v && q && o1 && o2);
    tu_fill_normal(k, kvn, 1.0);
    tu_fill_normal(v, kvn, 1.0);
    tu_fill_normal(q, (size_t)hq * D, 1.0);
    locks_pool *pool = locks_pool_init(3);
    SETUP(pool);
    locks_cache_params cp = params(0);
    cp.n_threads = 3;
    locks_status st;
    locks_cache *own = locks_cache_init(cp, &st);
    CHECK(st);
    cp.pool = pool;
    cp.n_threads = 0; /* ignored with a pool */
    locks_cache *shared = locks_cache_init(cp, &st);
    CHECK(st);
    test_cond(locks_cache_pool(shared) == pool && locks_cache_pool(own) != pool &&
                  locks_pool_threads(locks_cache_pool(own)) == 3,
              "each cache reports the pool it runs on");
    int32_t s1, s2;
    fill(own, &s1, n, k, v);
    fill(shared, &s2, n, k, v);
    locks_step_params p = locks_step_default_params();
    p.budget = 48;
    CHECK(locks_decode_step(own, 0, &s1, 1, q, hq, &p, o1, NULL, NULL));
    CHECK(locks_decode_step(shared, 0, &s2, 1, q, hq, &p, o2, NULL, NULL));
    test_cond(memcmp(o1, o2, (size_t)hq * D * sizeof(float)) == 0, "same step on a shared pool");
    locks_cache_free(shared);
    test_cond(locks_pool_threads(pool) == 3, "the shared pool outlives the cache");
    locks_cache_free(own);
    locks_pool_free(pool);
    free(k), free(v), free(q), free(o1), free(o2);
}

int main(void) {
    tu_seed("test_cache_meta");
    test_bytes();
    test_no_meta();
    test_shared_pool();
    return test_report("test_cache_meta");
}
