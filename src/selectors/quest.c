/*
 * quest.c — Quest's page score (Tang et al., 2024) and the per-channel key min/max
 * metadata it shares with the RocketKV-style selector.
 *
 * Rule: for every page keep the element-wise minimum m and maximum M of its keys; the
 * criticality of page j for query q is sum_c max(q_c M_c, q_c m_c), an upper bound of
 * max_i q . k_i. Pages are ranked by it and the top pages that fit the budget attended.
 *
 * Deviations from the original method (also stated in bench/RESULTS.md):
 *  - Quest is MHA-only: it selects pages per query head. Here the heads of a GQA group
 *    share one selection (one gather per group, as every selector in this project), so
 *    each head's scaled bound is softmax-normalised over the pages and the group ranks
 *    pages by the mean of those per-head distributions (DESIGN §2).
 *  - Quest's page size is a tuning knob (16 in its paper); here it is LOCKS_PAGE = 16.
 *  - Quest keeps the first two layers dense; here every layer is replayed with the same
 *    selector (the evaluation reports per layer, so the first layers can be read off).
 *  - min/max are stored in fp16 (exact: they are values of the fp16 keys).
 */
#include <math.h>

#include "refsel.h"
#include "util.h"

void locks_minmax_build(int32_t d, const uint16_t *k, uint16_t *kmin, uint16_t *kmax) {
    for (int32_t c = 0; c < d; c++) {
        float lo = locks_f16_to_f32(k[c]), hi = lo;
        uint16_t blo = k[c], bhi = k[c];
        for (int32_t i = 1; i < LOCKS_PAGE; i++) {
            uint16_t b = k[(size_t)i * (size_t)d + (size_t)c];
            float x = locks_f16_to_f32(b);
            if (x < lo) {
                lo = x;
                blo = b;
            }
            if (x > hi) {
                hi = x;
                bhi = b;
            }
        }
        kmin[c] = blo;
        kmax[c] = bhi;
    }
}

void locks_page_mean(int32_t d, const uint16_t *k, float *mean) {
    for (int32_t c = 0; c < d; c++) {
        float acc = 0.0f;
        for (int32_t i = 0; i < LOCKS_PAGE; i++) acc += locks_f16_to_f32(k[(size_t)i * (size_t)d + (size_t)c]);
        mean[c] = acc * (1.0f / (float)LOCKS_PAGE);
    }
}

void locks_quest_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                       const uint16_t *kmin, const uint16_t *kmax, const float *q, float scale,
                       float *s) {
    float lo[LOCKS_MAX_HEAD_DIM], hi[LOCKS_MAX_HEAD_DIM];
    for (int32_t j = 0; j < n; j++) {
        const uint16_t *mn = kmin + (size_t)pages[j] * (size_t)d;
        const uint16_t *mx = kmax + (size_t)pages[j] * (size_t)d;
        for (int32_t c = 0; c < d; c++) {
            lo[c] = locks_f16_to_f32(mn[c]);
            hi[c] = locks_f16_to_f32(mx[c]);
        }
        for (int32_t g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * (size_t)d;
            float acc = 0.0f;
            for (int32_t c = 0; c < d; c++) acc += qg[c] > 0.0f ? qg[c] * hi[c] : qg[c] * lo[c];
            s[(size_t)g * (size_t)n + (size_t)j] = scale * acc;
        }
    }
}
