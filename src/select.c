/*
 * select.c — forced pages + top-k by group mass within a token budget (locks.h).
 *
 * Top-k is a quickselect over 64-bit keys (mass bits in the high half, the complement
 * of the logical index in the low half), so keys are unique, larger mass wins and
 * ties go to the lower logical index; expected O(n), no full sort.
 */
#include <string.h>

#include "decode.h"
#include "plan.h"
#include "util.h"
#ifdef LOCKS_HAVE_CUDA
#include "cuda/locks_cuda.h"
#endif

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

locks_status locks_select_check(const locks_seq *s, const locks_step_params *p) {
    if (p->n_sink < 0 || p->n_recent < 0) return LOCKS_ERR_INVALID_ARG;
    if (p->budget <= 0) return LOCKS_ERR_BUDGET;
    const locks_plan pl = locks_plan_make(s->len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    return !pl.dense && pl.k < 0 ? LOCKS_ERR_BUDGET : LOCKS_OK;
}

/* Selection of one (sequence, KV head). key/flag: scratch of n_full entries. */
static void select_one(const locks_seq *s, const float *mass, const locks_step_params *p,
                       int32_t *pages, int32_t *n_out, uint64_t *key, uint8_t *flag) {
    const locks_plan pl = locks_plan_make(s->len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    const int32_t n_full = pl.n_full, k = pl.k, n_cand = pl.n_cand;
    int32_t n = 0;
    if (pl.dense) {
        for (int32_t j = 0; j < s->n_pages; j++) pages[n++] = j;
        *n_out = n;
        return;
    }
    for (int32_t j = 0; j < n_full; j++) flag[j] = (uint8_t)(j < pl.sink || j >= pl.rs);
    for (int32_t j = pl.sink; j < pl.rs; j++) key[j - pl.sink] = locks_rank_key(mass[j], j);
    if (k > 0 && k < n_cand) locks_top_k(key, n_cand, k);
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

locks_status locks_select(const locks_cache *c, int32_t seq_id, const float *mass,
                          const locks_step_params *p, int32_t *pages, int32_t *n_pages,
                          int32_t max_pages) {
    if (!c) return LOCKS_ERR_INVALID_ARG;
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!s) return LOCKS_ERR_NO_SEQ;
    if (!mass || !p || !pages || !n_pages || max_pages < s->n_pages) return LOCKS_ERR_INVALID_ARG;
    locks_status st = locks_select_check(s, p);
    if (st != LOCKS_OK) return st;
#ifdef LOCKS_HAVE_CUDA
    if (c->cuda) return locks_cuda_select(c->cuda, seq_id, mass, p, pages, n_pages, max_pages); /* device arrays */
#endif
    const int32_t n_full = s->len / P;
    uint8_t *scratch = locks_alloc((size_t)n_full + 1, 9);
    if (!scratch) return LOCKS_ERR_OOM;
    for (int32_t h = 0; h < c->hkv; h++)
        select_one(s, mass + (size_t)h * n_full, p, pages + (size_t)h * max_pages, &n_pages[h],
                   (uint64_t *)(void *)scratch, scratch + ((size_t)n_full + 1) * 8);
    locks_free(scratch);
    return LOCKS_OK;
}
