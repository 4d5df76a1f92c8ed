/*
 * rocket.c — RocketKV-style page score (Behnam et al., 2025), decode stage.
 *
 * RocketKV's second stage, hybrid sparse attention, approximates each query's attention
 * from a reduced set of key channels and per-chunk element-wise key bounds: it picks the
 * channels I with the largest |q| summed over the GQA group, approximates each chunk's
 * logit by sum_{c in I} q_c * (q_c > 0 ? max_c : min_c), turns that into a distribution
 * with a softmax whose temperature sqrt(d * ||q_I||_1 / ||q||_1) corrects for the
 * dropped channels (SparQ's rule), averages it over the group and attends the top
 * chunks. This file is that rule with chunk = page, over the min/max that quest.c
 * builds.
 *
 * Deviations from the original method (also stated in bench/RESULTS.md):
 *  - RocketKV first evicts tokens at the end of prefill with SnapKV (observation window
 *    of the last prefill queries, pooled). That is a separate stage, not a step rule:
 *    it is not part of this selector (`locks eval` has no prefill queries to run it).
 *  - Its chunk size and the number of channels follow from a target compression ratio;
 *    here chunks are pages (16 tokens) and n_ch is a parameter (default
 *    LOCKS_ROCKET_CHANNELS, a quarter of the head dimension).
 *  - RocketKV's attention over the selected tokens is token-level top-k within the kept
 *    set; here, like every selector here, it attends whole pages.
 *  - The temperature generalises to a model scale s != 1/sqrt(d) as s / sqrt(frac).
 */
#include <math.h>
#include <string.h>

#include "refsel.h"
#include "selector.h"
#include "util.h"

void locks_rocket_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                        const uint16_t *kmin, const uint16_t *kmax, const float *q, float scale,
                        int32_t n_ch, float *s, int32_t ld, int32_t *chan) {
    if (n_ch < 1) n_ch = 1;
    if (n_ch > d) n_ch = d;
    /* channel importance over the group; pick the n_ch largest (stable: lower c wins ties) */
    float w[LOCKS_MAX_HEAD_DIM];
    unsigned char take[LOCKS_MAX_HEAD_DIM];
    memset(take, 0, sizeof take);
    for (int32_t c = 0; c < d; c++) {
        float a = 0.0f;
        for (int32_t g = 0; g < G; g++) a += fabsf(q[(size_t)g * (size_t)d + (size_t)c]);
        w[c] = a;
    }
    int32_t I[LOCKS_MAX_HEAD_DIM];
    for (int32_t k = 0; k < n_ch; k++) {
        int32_t best = -1;
        for (int32_t c = 0; c < d; c++)
            if (!take[c] && (best < 0 || w[c] > w[best])) best = c;
        take[best] = 1;
    }
    int32_t m = 0;
    for (int32_t c = 0; c < d; c++)
        if (take[c]) I[m++] = c;
    if (chan) memcpy(chan, I, (size_t)m * sizeof *I);
    /* per head: inverse temperature scale / sqrt(||q_I||_1 / ||q||_1), then every page */
    for (int32_t g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * (size_t)d;
        double all = 0.0, part = 0.0;
        for (int32_t c = 0; c < d; c++) all += fabs((double)qg[c]);
        for (int32_t k = 0; k < m; k++) part += fabs((double)qg[I[k]]);
        float inv_t = part > 0.0 ? (float)((double)scale / sqrt(part / all)) : scale;
        float qi[LOCKS_MAX_HEAD_DIM];
        for (int32_t k = 0; k < m; k++) qi[k] = qg[I[k]];
        for (int32_t j = 0; j < n; j++) {
            const uint16_t *mn = kmin + (size_t)pages[j] * (size_t)d;
            const uint16_t *mx = kmax + (size_t)pages[j] * (size_t)d;
            float acc = 0.0f;
            for (int32_t k = 0; k < m; k++)
                acc += qi[k] > 0.0f ? qi[k] * locks_f16_to_f32(mx[I[k]]) : qi[k] * locks_f16_to_f32(mn[I[k]]);
            s[(size_t)g * (size_t)ld + (size_t)j] = inv_t * acc;
        }
    }
}

/* Reads quest.c's min/max; n_ch = the cache's rank r (DESIGN §2: "channels I = top-r"). */
void locks_sel_rocket_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld) {
    const locks_cache *c = x->c;
    const locks_minmax_meta *m = c->sel_meta[LOCKS_SEL_QUEST];
    size_t off = locks_minmax_offset(c, x->layer, x->kv_head);
    locks_rocket_score(c->d, x->group, j1 - j0, x->table + j0, m->kmin + off, m->kmax + off, x->q,
                       x->scale, c->r, scores + j0, ld, NULL);
}
