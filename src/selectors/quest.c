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
 *    pages by the mean of those per-head distributions (docs/DESIGN.md §2).
 *  - Quest's page size is a tuning knob (16 in its paper); here it is LOCKS_PAGE = 16.
 *  - Quest keeps the first two layers dense; here every layer is replayed with the same
 *    selector (the evaluation reports per layer, so the first layers can be read off).
 *  - min/max are stored in fp16 (exact: they are values of the fp16 keys).
 */
#include <math.h>

#include "refsel.h"
#include "selector.h"
#include "util.h"

/* ---- per-cache metadata: fp16 key min/max per (layer, KV head, physical page) ------
 * The cache's LOCKS_META_MINMAX block: kmin[L][Hkv][n_pages][d], then kmax alike. */

static size_t minmax_layout(const locks_cache *c, size_t *kmin, size_t *kmax) {
    const size_t n = (size_t)c->p.n_layers * (size_t)c->hkv * (size_t)c->p.n_pages * (size_t)c->d;
    size_t end = 0;
    *kmin = locks_meta_take(&end, n, sizeof(uint16_t));
    *kmax = locks_meta_take(&end, n, sizeof(uint16_t));
    return end;
}

size_t locks_sel_minmax_bytes(const locks_cache *c) {
    size_t a, b;
    return minmax_layout(c, &a, &b);
}

locks_minmax_meta locks_sel_minmax(const locks_cache *c) {
    size_t a, b;
    minmax_layout(c, &a, &b);
    uint8_t *base = locks_cache_meta(c, LOCKS_META_MINMAX);
    return (locks_minmax_meta){(uint16_t *)(void *)(base + a), (uint16_t *)(void *)(base + b)};
}

size_t locks_minmax_offset(const locks_cache *c, int32_t layer, int32_t kv_head) {
    return ((size_t)layer * (size_t)c->hkv + (size_t)kv_head) * (size_t)c->p.n_pages * (size_t)c->d;
}

void locks_sel_minmax_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k) {
    const locks_minmax_meta m = locks_sel_minmax(c);
    size_t off = locks_minmax_offset(c, layer, kv_head) + (size_t)page * (size_t)c->d;
    locks_minmax_build(c->d, k, m.kmin + off, m.kmax + off);
}

void locks_sel_quest_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld) {
    const locks_cache *c = x->c;
    const locks_minmax_meta m = locks_sel_minmax(c);
    size_t off = locks_minmax_offset(c, x->layer, x->kv_head);
    locks_quest_score(c->d, x->group, j1 - j0, x->table + j0, m.kmin + off, m.kmax + off, x->q,
                      x->scale, scores + j0, ld);
}

void locks_minmax_build(int32_t d, const float *k, uint16_t *kmin, uint16_t *kmax) {
    for (int32_t c = 0; c < d; c++) {
        float lo = k[c], hi = k[c];
        for (int32_t i = 1; i < LOCKS_PAGE; i++) {
            float x = k[(size_t)i * (size_t)d + (size_t)c];
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        kmin[c] = locks_f32_to_f16(lo);
        kmax[c] = locks_f32_to_f16(hi);
    }
}

void locks_quest_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                       const uint16_t *kmin, const uint16_t *kmax, const float *q, float scale,
                       float *s, int32_t ld) {
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
            s[(size_t)g * (size_t)ld + (size_t)j] = scale * acc;
        }
    }
}
