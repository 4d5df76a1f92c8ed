/*
 * locks.c — the LOCKS selector: each page's log-sum-exp estimated from its summary,
 *
 *     s_hj = log sum_i exp(scale * (q_h . mu_j + (V_j^T q_h) . c_i)),
 *
 * reading only the summary (DESIGN.md §1). V_j^T q is computed once per query head and
 * page and reused for the 16 coefficient rows.
 */
#include <string.h>

#include "selector.h"
#include "summary.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

/* Scores one page for the G heads from an fp32 summary (mu[d], basis[r][d], coef[16][r]). */
static void score_page_f32(const locks_sel_ctx *x, const float *mu, const float *basis,
                           const float *coef, int32_t j, float *scores, int32_t ld) {
    const int32_t d = x->c->d, r = x->c->r;
    float y[LOCKS_MAX_RANK], logit[P];
    for (int32_t g = 0; g < x->group; g++) {
        const float *q = x->q + (size_t)g * d;
        float qm = locks_dot(q, mu, d);
        for (int32_t k = 0; k < r; k++) y[k] = locks_dot(q, basis + (size_t)k * d, d);
        for (int32_t i = 0; i < P; i++) {
            float s = qm;
            for (int32_t k = 0; k < r; k++) s += coef[i * r + k] * y[k];
            logit[i] = x->scale * s;
        }
        scores[(size_t)g * ld + j] = locks_lse(logit, P);
    }
}

void locks_sel_locks_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld) {
    const int32_t d = x->c->d, r = x->c->r;
    locks_sum_arrays a = locks_cache_summaries(x->c, x->layer, x->kv_head);
    if (x->c->p.summary_prec == LOCKS_SUMMARY_F32) {
        for (int32_t j = j0; j < j1; j++) {
            size_t p = (size_t)x->table[j];
            score_page_f32(x, a.mu + p * d, a.basis + p * r * d, a.coef + p * P * r, j, scores, ld);
        }
        return;
    }
    float mu[LOCKS_MAX_HEAD_DIM], basis[LOCKS_MAX_RANK * LOCKS_MAX_HEAD_DIM], coef[P * LOCKS_MAX_RANK];
    for (int32_t j = j0; j < j1; j++) {
        size_t p = (size_t)x->table[j];
        locks_qsummary q = {a.mu_q + p * d, a.mu_s + p, a.v_q + p * r * d / 2, a.v_s + p * r,
                            a.c_q + p * P * r, a.c_s + p * r};
        locks_summary_dequantize(d, r, q, mu, basis, coef);
        score_page_f32(x, mu, basis, coef, j, scores, ld);
    }
}
