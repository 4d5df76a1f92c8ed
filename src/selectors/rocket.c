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
 *    of the last prefill queries, votes pooled over neighbouring tokens). That stage is
 *    optional here and page-granular: locks_cache_snapkv_observe computes the votes
 *    once from the window's queries, locks_cache_snapkv_keep keeps the pages with the
 *    most votes and ranks the rest last (`locks eval --snapkv F`, row "rocket+snapkv",
 *    keeps F x budget tokens). Evicted pages are not freed: the cache is shared by
 *    every selector.
 *  - Its chunk size and the number of channels follow from a target compression ratio;
 *    here chunks are pages (16 tokens) and n_ch is a parameter (default
 *    LOCKS_ROCKET_CHANNELS, a quarter of the head dimension).
 *  - RocketKV's attention over the selected tokens is token-level top-k within the kept
 *    set; here, like every selector here, it attends whole pages.
 *  - The temperature generalises to a model scale s != 1/sqrt(d) as s / sqrt(frac).
 */
#include <math.h>
#include <stdlib.h>
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

/* ---- SnapKV state: the cache's LOCKS_META_SNAPKV block ---------------------------------
 * votes[l][h][p]: the page's pooled SnapKV vote, +INF for pages that must stay (pages
 * overlapping the observation window, pages filled after the observation, pages never
 * observed); evicted[l][h][p]: 1 if locks_cache_snapkv_keep dropped it. */
typedef struct {
    float *votes;
    uint8_t *evicted;
} snap_meta;

#define SNAP_POOL 7           /* SnapKV's max-pool kernel over tokens */
#define SNAP_EVICTED (-1e30f) /* score of an evicted page: mass exp(-1e30 - Z) = 0 */

static size_t snap_index(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page) {
    return ((size_t)layer * (size_t)c->hkv + (size_t)kv_head) * (size_t)c->p.n_pages + (size_t)page;
}

static size_t snap_records(const locks_cache *c) {
    return (size_t)c->p.n_layers * (size_t)c->hkv * (size_t)c->p.n_pages;
}

static size_t snap_layout(const locks_cache *c, size_t *votes, size_t *evicted) {
    size_t end = 0;
    *votes = locks_meta_take(&end, snap_records(c), sizeof(float));
    *evicted = locks_meta_take(&end, snap_records(c), sizeof(uint8_t));
    return end;
}

size_t locks_sel_rocket_bytes(const locks_cache *c) {
    size_t a, b;
    return snap_layout(c, &a, &b);
}

/* The arrays of c's SnapKV block (c must hold it). */
static snap_meta snap_view(const locks_cache *c) {
    size_t a, b;
    snap_layout(c, &a, &b);
    uint8_t *base = locks_cache_meta(c, LOCKS_META_SNAPKV);
    return (snap_meta){(float *)(void *)(base + a), base + b};
}

void locks_sel_rocket_start(locks_cache *c) {
    const snap_meta m = snap_view(c);
    for (size_t i = 0, n = snap_records(c); i < n; i++) m.votes[i] = INFINITY;
}

void locks_sel_rocket_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k) {
    (void)k;
    const snap_meta m = snap_view(c);
    size_t i = snap_index(c, layer, kv_head, page);
    m.votes[i] = INFINITY;
    m.evicted[i] = 0;
}

/* Reads quest.c's min/max; n_ch = the cache's rank r (docs/DESIGN.md §2: "channels I = top-r").
 * Pages SnapKV evicted score SNAP_EVICTED. */
void locks_sel_rocket_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld) {
    const locks_cache *c = x->c;
    const locks_minmax_meta m = locks_sel_minmax(c);
    const snap_meta sm = snap_view(c);
    size_t off = locks_minmax_offset(c, x->layer, x->kv_head);
    locks_rocket_score(c->d, x->group, j1 - j0, x->table + j0, m.kmin + off, m.kmax + off, x->q,
                       x->scale, c->r, scores + j0, ld, NULL);
    for (int32_t j = j0; j < j1; j++) {
        if (!sm.evicted[snap_index(c, x->layer, x->kv_head, x->table[j])]) continue;
        for (int32_t g = 0; g < x->group; g++) scores[(size_t)g * (size_t)ld + (size_t)j] = SNAP_EVICTED;
    }
}

static locks_status cache_snapkv_observe_locked(locks_cache *c, int32_t seq_id, int32_t layer,
                                        const float *q_obs, int32_t n_obs, int32_t n_q_heads,
                                        float scale) {
    if (!c || !q_obs || layer < 0 || layer >= c->p.n_layers || n_q_heads < c->hkv ||
        n_q_heads % c->hkv != 0)
        return LOCKS_ERR_INVALID_ARG;
    if (c->p.backend != LOCKS_BACKEND_CPU) return LOCKS_ERR_UNSUPPORTED;
    if (locks_cache_kv_ld(c) != (size_t)c->d) return LOCKS_ERR_UNSUPPORTED; /* caller's NHD pages */
    if (!locks_cache_meta(c, LOCKS_META_SNAPKV)) return LOCKS_ERR_NO_META;
    const locks_seq *sq = locks_cache_seq(c, seq_id);
    if (!sq) return LOCKS_ERR_NO_SEQ;
    if (n_obs < 1 || n_obs > sq->len) return LOCKS_ERR_INVALID_ARG;
    const int32_t d = c->d, G = n_q_heads / c->hkv, len = sq->len, w0 = len - n_obs;
    for (size_t i = 0; i < (size_t)n_q_heads * (size_t)d * (size_t)n_obs; i++)
        if (!isfinite(q_obs[i])) return LOCKS_ERR_NONFINITE;
    if (scale <= 0.0f) scale = 1.0f / sqrtf((float)d);
    const snap_meta m = snap_view(c);
    double *vote = locks_alloc((size_t)w0 + 1, sizeof *vote);
    double *pooled = locks_alloc((size_t)w0 + 1, sizeof *pooled);
    double *lg = locks_alloc((size_t)len, sizeof *lg);
    float *kf = locks_alloc((size_t)len * (size_t)d, sizeof *kf);
    if (!vote || !pooled || !lg || !kf) {
        locks_free(vote), locks_free(pooled), locks_free(lg), locks_free(kf);
        return LOCKS_ERR_OOM;
    }
    for (int32_t h = 0; h < c->hkv; h++) {
        for (int32_t t = 0; t < len; t++) {
            const uint16_t *kb = locks_cache_kblock(c, layer, sq->table[t / LOCKS_PAGE], h) +
                                 (size_t)(t % LOCKS_PAGE) * (size_t)d;
            for (int32_t e = 0; e < d; e++) kf[(size_t)t * (size_t)d + (size_t)e] = locks_f16_to_f32(kb[e]);
        }
        memset(vote, 0, ((size_t)w0 + 1) * sizeof *vote);
        /* each window query (causal: it sees tokens up to its own) over every group head */
        for (int32_t i = 0; i < n_obs; i++) {
            const int32_t p = w0 + i;
            for (int32_t g = 0; g < G; g++) {
                const float *qv = q_obs + ((size_t)i * (size_t)n_q_heads + (size_t)h * (size_t)G + (size_t)g) * (size_t)d;
                double mx = -INFINITY, z = 0.0;
                for (int32_t t = 0; t <= p; t++) {
                    double acc = 0.0;
                    for (int32_t e = 0; e < d; e++) acc += (double)qv[e] * (double)kf[(size_t)t * (size_t)d + (size_t)e];
                    lg[t] = (double)scale * acc;
                    mx = lg[t] > mx ? lg[t] : mx;
                }
                for (int32_t t = 0; t <= p; t++) z += exp(lg[t] - mx);
                for (int32_t t = 0; t < w0; t++) vote[t] += exp(lg[t] - mx) / z;
            }
        }
        for (int32_t t = 0; t < w0; t++) { /* max-pool, kernel SNAP_POOL, centred, clipped */
            double best = 0.0;
            for (int32_t u = t - SNAP_POOL / 2; u <= t + SNAP_POOL / 2; u++)
                if (u >= 0 && u < w0 && vote[u] > best) best = vote[u];
            pooled[t] = best;
        }
        const int32_t n_full = len / LOCKS_PAGE;
        for (int32_t j = 0; j < n_full; j++) {
            size_t idx = snap_index(c, layer, h, sq->table[j]);
            m.evicted[idx] = 0;
            if ((j + 1) * LOCKS_PAGE > w0) {
                m.votes[idx] = INFINITY; /* overlaps the window */
                continue;
            }
            double acc = 0.0;
            for (int32_t t = j * LOCKS_PAGE; t < (j + 1) * LOCKS_PAGE; t++) acc += pooled[t];
            m.votes[idx] = (float)acc;
        }
    }
    locks_free(vote), locks_free(pooled), locks_free(lg), locks_free(kf);
    return LOCKS_OK;
}

typedef struct {
    float vote;
    int32_t j;
} snap_rank;

static int snap_cmp(const void *a, const void *b) { /* more votes first, then lower page */
    const snap_rank *x = a, *y = b;
    if (x->vote != y->vote) return x->vote > y->vote ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

static locks_status cache_snapkv_keep_locked(locks_cache *c, int32_t seq_id, int32_t layer,
                                     int32_t keep_tokens) {
    if (!c || layer < 0 || layer >= c->p.n_layers) return LOCKS_ERR_INVALID_ARG;
    /* a CUDA cache has no selector metadata on the host, as in observe */
    if (c->p.backend != LOCKS_BACKEND_CPU) return LOCKS_ERR_UNSUPPORTED;
    const locks_seq *sq = locks_cache_seq(c, seq_id);
    if (!sq) return LOCKS_ERR_NO_SEQ;
    if (!locks_cache_meta(c, LOCKS_META_SNAPKV)) return LOCKS_ERR_NO_META;
    const snap_meta m = snap_view(c);
    const int32_t n_full = sq->len / LOCKS_PAGE;
    const int32_t keep = keep_tokens <= 0 ? n_full : keep_tokens / LOCKS_PAGE;
    snap_rank *r = locks_alloc((size_t)n_full + 1, sizeof *r);
    if (!r) return LOCKS_ERR_OOM;
    for (int32_t h = 0; h < c->hkv; h++) {
        for (int32_t j = 0; j < n_full; j++) r[j] = (snap_rank){m.votes[snap_index(c, layer, h, sq->table[j])], j};
        qsort(r, (size_t)n_full, sizeof *r, snap_cmp);
        for (int32_t i = 0; i < n_full; i++)
            m.evicted[snap_index(c, layer, h, sq->table[r[i].j])] = (uint8_t)(i >= keep);
    }
    locks_free(r);
    return LOCKS_OK;
}

locks_status locks_cache_snapkv_observe(locks_cache *c, int32_t seq_id, int32_t layer, const float *q_obs,
                                        int32_t n_obs, int32_t n_q_heads, float scale) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_snapkv_observe: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, cache_snapkv_observe_locked(c, seq_id, layer, q_obs, n_obs, n_q_heads, scale), "locks_cache_snapkv_observe", mark);
}

locks_status locks_cache_snapkv_keep(locks_cache *c, int32_t seq_id, int32_t layer, int32_t keep_tokens) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_snapkv_keep: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, cache_snapkv_keep_locked(c, seq_id, layer, keep_tokens), "locks_cache_snapkv_keep", mark);
}
