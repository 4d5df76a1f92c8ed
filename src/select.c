/*
 * select.c — forced pages + top-k by group mass within a token budget (locks.h).
 *
 * Top-k is a quickselect over 64-bit keys (mass bits in the high half, the complement
 * of the logical index in the low half), so keys are unique, larger mass wins and
 * ties go to the lower logical index; expected O(n), no full sort.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "plan.h"
#include "util.h"

enum { P = LOCKS_PAGE };

uint64_t locks_rank_key(float mass, int32_t j) {
    uint32_t b;
    memcpy(&b, &mass, 4);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u); /* order-preserving for all floats */
    return ((uint64_t)b << 32) | (uint32_t)~(uint32_t)j;
}

void locks_top_k(uint64_t *key, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        /* median of three as pivot */
        int32_t mid = lo + (hi - lo) / 2;
        uint64_t a = key[lo], b = key[mid], c = key[hi];
        uint64_t piv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        int32_t i = lo, j = hi;
        while (i <= j) { /* descending partition */
            while (key[i] > piv) i++;
            while (key[j] < piv) j--;
            if (i <= j) {
                uint64_t t = key[i];
                key[i] = key[j];
                key[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

int locks_step_dense(const locks_step_params *p, int32_t len) {
    return p->selector == LOCKS_SEL_FULL || (p->budget >= len && p->mass == 0.0f);
}

locks_status locks_select_check(const locks_seq *s, const locks_step_params *p) {
    if (p->n_sink < 0 || p->n_recent < 0)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "n_sink %d, n_recent %d (must be >= 0)", p->n_sink, p->n_recent);
    if (!(p->mass == 0.0f || (p->mass > 0.0f && p->mass < 1.0f)))
        return locks_fail(LOCKS_ERR_INVALID_ARG, "mass %g (0 for off, or 0 < mass < 1)", (double)p->mass);
    if (p->budget <= 0) return locks_fail(LOCKS_ERR_BUDGET, "budget %d (must be > 0)", p->budget);
    const locks_plan pl = locks_plan_make(s->len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    if (!pl.dense && pl.k < 0)
        return locks_fail(LOCKS_ERR_BUDGET, "budget %d is below the forced pages (%d sink, %d recent, partial) of %d tokens",
                          p->budget, p->n_sink, p->n_recent, s->len);
    return LOCKS_OK;
}

static int key_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

/* Mass target: of the k top candidates key[0..k) (any order), how many, taken largest
 * mass first, bring the covered mass (the forced full pages, flagged in flag[0..n_full),
 * plus the pages taken) to the target. Sorts key[0..k) descending. The sums are in
 * double so that a long tail of tiny masses still counts in order. */
static int32_t mass_prefix(const float *mass, float target, uint64_t *key, int32_t k,
                           const uint8_t *flag, int32_t n_full) {
    double covered = 0.0;
    for (int32_t j = 0; j < n_full; j++)
        if (flag[j]) covered += (double)mass[j];
    qsort(key, (size_t)k, sizeof *key, key_desc);
    int32_t taken = 0;
    while (taken < k && covered < (double)target) covered += (double)mass[~(uint32_t)key[taken++]];
    return taken;
}

/* Selection of one (sequence, KV head). key/flag: scratch of n_full entries. */
static void select_one(const locks_seq *s, const float *mass, const locks_step_params *p,
                       int32_t *pages, int32_t *n_out, uint64_t *key, uint8_t *flag) {
    const locks_plan pl = locks_plan_make(s->len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    const int32_t n_full = pl.n_full, n_cand = pl.n_cand;
    int32_t k = pl.k;
    int32_t n = 0;
    if (locks_step_dense(p, s->len)) {
        for (int32_t j = 0; j < s->n_pages; j++) pages[n++] = j;
        *n_out = n;
        return;
    }
    for (int32_t j = 0; j < n_full; j++) flag[j] = (uint8_t)(j < pl.sink || j >= pl.rs);
    for (int32_t j = pl.sink; j < pl.rs; j++) key[j - pl.sink] = locks_rank_key(mass[j], j);
    if (k > 0 && k < n_cand) locks_top_k(key, n_cand, k);
    if (p->mass > 0.0f && k > 0) k = mass_prefix(mass, p->mass, key, k, flag, n_full);
    for (int32_t i = 0; i < k; i++) flag[~(uint32_t)key[i]] = 1;
    for (int32_t j = 0; j < n_full; j++)
        if (flag[j]) pages[n++] = j;
    if (pl.part) pages[n++] = n_full;
    *n_out = n;
}

typedef struct {
    locks_seq_work *w;
    const locks_step_params *p;
    int32_t H, G, with_mass;
    uint8_t *scratch; /* per thread: max_full * 9 bytes */
    size_t per_thread;
} select_job;

static void select_task(void *arg, int32_t t, int32_t thread) {
    select_job *j = arg;
    locks_seq_work *w = &j->w[t / j->H];
    const int32_t h = t % j->H, n_full = w->s->len / P;
    uint8_t *base = j->scratch + (size_t)thread * j->per_thread;
    if (j->with_mass && !w->dense) locks_mass_one(w, h, j->G, j->p->selector);
    select_one(w->s, w->mass + (size_t)h * n_full, j->p, w->pages + (size_t)h * w->max_pages,
               &w->n_pages[h], (uint64_t *)(void *)base, base + (size_t)n_full * 8);
}

locks_status locks_select_run(locks_cache *c, locks_seq_work *w, int32_t n_seqs,
                              const locks_step_params *p, int32_t n_q_heads, int with_mass) {
    int32_t max_full = 1;
    for (int32_t s = 0; s < n_seqs; s++)
        if (w[s].s->len / P > max_full) max_full = w[s].s->len / P;
    size_t per = ((size_t)max_full * 9 + 63) & ~(size_t)63;
    uint8_t *scratch = locks_cache_scratch(c, 3, per * (size_t)locks_pool_threads(c->pool));
    if (!scratch) return LOCKS_ERR_OOM;
    select_job job = {w, p, c->hkv, n_q_heads / c->hkv, with_mass, scratch, per};
    locks_pool_run(c->pool, n_seqs * c->hkv, select_task, &job);
    return LOCKS_OK;
}

static locks_status select_pages(const locks_cache *c, int32_t seq_id, const float *mass,
                                 const locks_step_params *p, int32_t *pages, int32_t *n_pages, int32_t max_pages) {
    const locks_seq *s;
    locks_status st = locks_check_seq(c, seq_id, &s);
    if (st != LOCKS_OK) return st;
    if (!mass || !p || !pages || !n_pages) return locks_fail(LOCKS_ERR_INVALID_ARG, "NULL array or params");
    if (max_pages < s->n_pages)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "max_pages %d below the sequence's %d pages", max_pages, s->n_pages);
    st = locks_select_check(s, p);
    if (st != LOCKS_OK) return st;
    return c->be->select(c, seq_id, mass, p, pages, n_pages, max_pages);
}

/* The CPU backend's locks_select (backend_cpu.c), after select_pages's checks. */
locks_status locks_cpu_select(const locks_cache *c, int32_t seq_id, const float *mass, const locks_step_params *p,
                              int32_t *pages, int32_t *n_pages, int32_t max_pages) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    const int32_t n_full = s->len / P;
    uint8_t *scratch = locks_alloc((size_t)n_full + 1, 9);
    if (!scratch) return LOCKS_ERR_OOM;
    for (int32_t h = 0; h < c->hkv; h++)
        select_one(s, mass + (size_t)h * n_full, p, pages + (size_t)h * max_pages, &n_pages[h],
                   (uint64_t *)(void *)scratch, scratch + ((size_t)n_full + 1) * 8);
    locks_free(scratch);
    return LOCKS_OK;
}

locks_status locks_select(const locks_cache *c, int32_t seq_id, const float *mass,
                          const locks_step_params *p, int32_t *pages, int32_t *n_pages,
                          int32_t max_pages) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_select: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = select_pages(c, seq_id, mass, p, pages, n_pages, max_pages);
    return locks_cache_leave(c, st, "locks_select", mark);
}
