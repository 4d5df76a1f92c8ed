/*
 * score.c — the score phase of a step: every selector's per-head page scores over
 * the full pages (parallel over sequences, KV heads and page ranges), then the group
 * masses m_j = mean_h exp(s_hj - Z_h) (or max, per the selector's group rule) with
 * Z_h the log-sum-exp over the full pages only (locks.h).
 */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "selector.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE, SCORE_CHUNK = 256 /* pages per scoring task */ };

typedef struct {
    locks_cache *c;
    int32_t layer, hq, G;
    locks_selector sel;
    float scale;
    locks_seq_work *w;
    int32_t n_seqs;
    int32_t *task_start; /* [n_seqs + 1]: first task of each sequence */
} score_job;

static int32_t n_chunks(int32_t n_full) { return (n_full + SCORE_CHUNK - 1) / SCORE_CHUNK; }

/* Task t -> (sequence, KV head, chunk). */
static void score_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    score_job *j = arg;
    int32_t si = 0;
    while (j->task_start[si + 1] <= t) si++;
    locks_seq_work *w = &j->w[si];
    const int32_t n_full = w->s->len / P, nc = n_chunks(n_full);
    int32_t local = t - j->task_start[si], h = local / nc, ch = local % nc;
    int32_t j0 = ch * SCORE_CHUNK, j1 = j0 + SCORE_CHUNK < n_full ? j0 + SCORE_CHUNK : n_full;
    locks_sel_ctx x = {j->c,   j->layer,     w->seq_id, h, j->G, w->s->table, n_full,
                       w->q + (size_t)h * j->G * j->c->d, j->scale};
    locks_selector_score(j->sel, &x, j0, j1, w->scores + (size_t)h * j->G * n_full, n_full);
}

/* Scores -> group masses of one (sequence, KV head). The scores are scratch, so each
 * head's row is turned into exp(s - max) in place (one vector exp pass) and the masses
 * follow as e_j / sum_j e_j. */
void locks_mass_one(locks_seq_work *w, int32_t h, int32_t G, locks_selector sel) {
    const int32_t n_full = w->s->len / P;
    float *m = w->mass + (size_t)h * n_full;
    const locks_group_rule rule = locks_selector_group_rule(sel);
    if (rule == LOCKS_GROUP_NONE) {
        for (int32_t i = 0; i < n_full; i++) m[i] = 1.0f;
        return;
    }
    const int use_max = rule == LOCKS_GROUP_MAX;
    for (int32_t i = 0; i < n_full; i++) m[i] = 0.0f;
    for (int32_t g = 0; g < G; g++) {
        float *s = w->scores + ((size_t)h * G + g) * n_full;
        if (n_full == 0) break;
        const float mx = locks_max_n(s, (size_t)n_full);
        const double z = locks_exp_sum_n(s, (size_t)n_full, mx);
        const float inv = (float)(1.0 / z) / (use_max ? 1.0f : (float)G);
        if (use_max) {
            for (int32_t i = 0; i < n_full; i++) m[i] = s[i] * inv > m[i] ? s[i] * inv : m[i];
        } else {
            for (int32_t i = 0; i < n_full; i++) m[i] += s[i] * inv;
        }
    }
}

static void mass_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    score_job *j = arg;
    locks_mass_one(&j->w[t / j->c->hkv], t % j->c->hkv, j->G, j->sel);
}

locks_status locks_score_run(locks_cache *c, int32_t layer, locks_seq_work *w, int32_t n_seqs,
                             int32_t n_q_heads, locks_selector sel, float scale, int with_mass) {
    const int32_t H = c->hkv;
    if (locks_selector_group_rule(sel) == LOCKS_GROUP_NONE) {
        if (with_mass)
            for (int32_t s = 0; s < n_seqs; s++)
                for (int32_t h = 0; h < H; h++) locks_mass_one(&w[s], h, n_q_heads / H, sel);
        return LOCKS_OK;
    }
    for (int32_t s = 0; s < n_seqs; s++) {
        if (w[s].dense) continue;
        locks_status st = locks_selector_prepare(sel, c, layer, w[s].seq_id);
        if (st != LOCKS_OK) return st;
    }
    int32_t stack_start[17];
    int32_t *start = n_seqs < 16 ? stack_start : locks_alloc((size_t)n_seqs + 1, sizeof(int32_t));
    if (!start) return LOCKS_ERR_OOM;
    start[0] = 0;
    for (int32_t s = 0; s < n_seqs; s++) start[s + 1] = start[s] + (w[s].dense ? 0 : H * n_chunks(w[s].s->len / P));
    score_job job = {c, layer, n_q_heads, n_q_heads / H, sel, scale, w, n_seqs, start};
    locks_pool_run(c->pool, start[n_seqs], score_task, &job);
    if (with_mass) locks_pool_run(c->pool, n_seqs * H, mass_task, &job);
    if (start != stack_start) locks_free(start);
    return LOCKS_OK;
}

static locks_status score(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                          const locks_step_params *p, float *mass) {
    const locks_seq *s;
    locks_status st = locks_check_seq(c, seq_id, &s);
    if (st != LOCKS_OK) return st;
    if (!q || !p || !mass) return locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !q ? "q" : !p ? "p" : "mass");
    st = locks_check_layer(c, layer);
    if (st == LOCKS_OK) st = locks_check_heads(c, n_q_heads, 64); /* GQA groups of up to 64 heads */
    if (st == LOCKS_OK && !locks_selector_available(p->selector))
        st = locks_fail(LOCKS_ERR_INVALID_ARG, "selector %d is not a locks_selector", (int)p->selector);
    if (st == LOCKS_OK) st = locks_check_scale(p->scale);
    if (st == LOCKS_OK) st = locks_cache_check_written(c, seq_id, layer, s->len);
    if (st == LOCKS_OK && c->ext) st = locks_ext_step_check(c, layer, &seq_id, 1, p->selector);
    if (st != LOCKS_OK) return st;
    return c->be->score(c, layer, seq_id, q, n_q_heads, p, mass);
}

/* The CPU backend's locks_score (backend_cpu.c), after score's checks. */
locks_status locks_cpu_score(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                             const locks_step_params *p, float *mass) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (!locks_selector_served(c, p->selector))
        return locks_fail(LOCKS_ERR_NO_META, "selector %s: the cache keeps no metadata for it (params.selectors)",
                          locks_selector_name(p->selector));
    if (!locks_all_finite(q, (size_t)n_q_heads * c->d)) return locks_fail(LOCKS_ERR_NONFINITE, "the query holds NaN or Inf");
    const int32_t n_full = s->len / P;
    float *scores = locks_cache_scratch(c, 0, (size_t)n_q_heads * (size_t)(n_full + 1) * sizeof(float));
    if (!scores) return LOCKS_ERR_OOM;
    locks_seq_work w;
    memset(&w, 0, sizeof w);
    w.seq_id = seq_id;
    w.s = s;
    w.q = q;
    w.scores = scores;
    w.mass = mass;
    return locks_score_run(c, layer, &w, 1, n_q_heads, p->selector, locks_step_scale(c, p->scale), 1);
}

locks_status locks_score(locks_cache *c, int32_t layer, int32_t seq_id, const float *q,
                         int32_t n_q_heads, const locks_step_params *p, float *mass) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_score: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = score(c, layer, seq_id, q, n_q_heads, p, mass);
    return locks_cache_leave(c, st, "locks_score", mark);
}
