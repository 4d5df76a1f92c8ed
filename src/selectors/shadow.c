/*
 * shadow.c — ShadowKV-style selection from a shared low-rank key basis (Sun et al.,
 * 2024), and ShadowKV's own landmark rule.
 *
 * ShadowKV observes that the pre-RoPE key cache of a prompt is low-rank as a whole,
 * stores it as a rank-r SVD, and picks the chunks to fetch by comparing the query with
 * chunk "landmarks". The property the paper's Proposition 1 is about is the *shared*
 * basis: one rank-r subspace per (layer, KV head) for every page. The shared-basis rule
 * here scores page j by the logit of its centroid inside that subspace,
 *     s_hj = scale * (B q_h) . (B mu_j),   B = top-r right singular vectors of the
 *                                             sequence's prefill keys (r x d),
 * so any two pages whose centroids differ only outside span(B) get equal scores, however
 * different the queries' true attention to them is. The landmark rule is ShadowKV's:
 *     s_hj = scale * q_h . L_j,  L_j = chunk mean (chunk = page), softmax, max over group.
 *
 * Deviations from the original method (also stated in bench/RESULTS.md):
 *  - ShadowKV takes the SVD of the *pre*-RoPE keys (for reconstruction) and keeps its
 *    landmarks post-RoPE; the basis here is fitted to the cached (post-RoPE) keys, the
 *    same keys the scores are compared against, which can only help it.
 *  - ShadowKV keeps "outlier" chunks (lowest intra-chunk cosine similarity) and all
 *    generated tokens in full, outside its sparse budget. Here every attended token
 *    counts against the one budget and forced pages are those of every selector, so no
 *    outliers are kept; generated pages that fill after the fit are projected on the
 *    prefill basis when they fill (ShadowKV has no summary for them).
 *  - ShadowKV's chunks are 8 tokens; here they are pages of 16.
 *  - The basis comes from K^T K of the prefill keys (uncentred, as an SVD of K), top-r
 *    eigenvectors by subspace iteration (a 16-vector block, at most 100 iterations,
 *    stopped when the block's captured energy stops moving; Rayleigh-Ritz through
 *    locks_eig_sym), not an exact full SVD; the test checks the captured energy against
 *    a float64 reference.
 */
#include <math.h>
#include <string.h>

#include "refsel.h"
#include "selector.h"
#include "util.h"
#include "vmath.h"

#define SHADOW_BLOCK 16
#define SHADOW_ITERS 100

/* Modified Gram-Schmidt (twice) on the b columns of Q (d x b, column k at Q + k*d).
 * A column that vanishes is replaced by the next unit vector that survives. */
static void orthonormalize(int32_t d, int32_t b, double *Q) {
    int32_t next_unit = 0;
    for (int32_t k = 0; k < b; k++) {
        double *x = Q + (size_t)k * (size_t)d;
        for (int32_t attempt = 0;; attempt++) {
            double n0 = 0.0;
            for (int32_t c = 0; c < d; c++) n0 += x[c] * x[c];
            n0 = sqrt(n0);
            for (int32_t pass = 0; pass < 2; pass++) {
                for (int32_t j = 0; j < k; j++) {
                    const double *y = Q + (size_t)j * (size_t)d;
                    double dot = 0.0;
                    for (int32_t c = 0; c < d; c++) dot += x[c] * y[c];
                    for (int32_t c = 0; c < d; c++) x[c] -= dot * y[c];
                }
            }
            double nn = 0.0;
            for (int32_t c = 0; c < d; c++) nn += x[c] * x[c];
            nn = sqrt(nn);
            if (nn > 1e-10 * n0 && nn > 1e-300) {
                for (int32_t c = 0; c < d; c++) x[c] /= nn;
                break;
            }
            /* degenerate: restart from a unit vector (there are d >= b of them) */
            memset(x, 0, (size_t)d * sizeof *x);
            x[next_unit++ % d] = 1.0;
            if (attempt > d + 1) break; /* cannot happen for k < d; guard the loop */
        }
    }
}

locks_status locks_shadow_fit(int32_t d, int32_t r, const double *gram, float *basis,
                              double *evals) {
    if (d < 2 || d > LOCKS_MAX_HEAD_DIM || r < 1 || r > LOCKS_MAX_RANK || r >= d || !gram || !basis)
        return LOCKS_ERR_INVALID_ARG;
    const int32_t b = d < SHADOW_BLOCK ? d : SHADOW_BLOCK;
    double *Q = locks_alloc((size_t)b * (size_t)d, sizeof *Q);
    double *Z = locks_alloc((size_t)b * (size_t)d, sizeof *Z);
    if (!Q || !Z) {
        locks_free(Q);
        locks_free(Z);
        return LOCKS_ERR_OOM;
    }
    /* start from the b channels with the largest diagonal (the block spans them) */
    unsigned char used[LOCKS_MAX_HEAD_DIM];
    memset(used, 0, sizeof used);
    for (int32_t k = 0; k < b; k++) {
        int32_t best = -1;
        for (int32_t c = 0; c < d; c++)
            if (!used[c] && (best < 0 || gram[(size_t)c * (size_t)d + (size_t)c] >
                                             gram[(size_t)best * (size_t)d + (size_t)best]))
                best = c;
        used[best] = 1;
        /* column k = gram e_best + e_best (the identity part keeps it nonzero) */
        for (int32_t c = 0; c < d; c++) Q[(size_t)k * (size_t)d + (size_t)c] = gram[(size_t)c * (size_t)d + (size_t)best];
        Q[(size_t)k * (size_t)d + (size_t)best] += 1.0;
    }
    orthonormalize(d, b, Q);
    double prev_trace = -1.0;
    for (int32_t it = 0; it < SHADOW_ITERS; it++) {
        /* Z = gram Q (d x d @ d x b); trace(Q^T gram Q) watches convergence */
        double trace = 0.0;
        for (int32_t k = 0; k < b; k++) {
            const double *x = Q + (size_t)k * (size_t)d;
            double *z = Z + (size_t)k * (size_t)d;
            for (int32_t c = 0; c < d; c++) {
                const double *row = gram + (size_t)c * (size_t)d;
                double acc = 0.0;
                for (int32_t e = 0; e < d; e++) acc += row[e] * x[e];
                z[c] = acc;
                trace += x[c] * acc;
            }
        }
        /* the captured energy only grows; stop once it no longer moves */
        if (prev_trace > 0.0 && fabs(trace - prev_trace) <= 1e-13 * trace) break;
        prev_trace = trace;
        memcpy(Q, Z, (size_t)b * (size_t)d * sizeof *Q);
        orthonormalize(d, b, Q);
    }
    /* Rayleigh-Ritz: H = Q^T gram Q (b x b), H = U diag(w) U^T, basis_k = Q u_k */
    double H[SHADOW_BLOCK * SHADOW_BLOCK], w[SHADOW_BLOCK], U[SHADOW_BLOCK * SHADOW_BLOCK];
    for (int32_t k = 0; k < b; k++) {
        const double *x = Q + (size_t)k * (size_t)d;
        double *z = Z + (size_t)k * (size_t)d;
        for (int32_t c = 0; c < d; c++) {
            const double *row = gram + (size_t)c * (size_t)d;
            double acc = 0.0;
            for (int32_t e = 0; e < d; e++) acc += row[e] * x[e];
            z[c] = acc;
        }
    }
    for (int32_t i = 0; i < b; i++)
        for (int32_t j = 0; j < b; j++) {
            double acc = 0.0;
            for (int32_t c = 0; c < d; c++) acc += Q[(size_t)i * (size_t)d + (size_t)c] * Z[(size_t)j * (size_t)d + (size_t)c];
            H[i * b + j] = acc;
        }
    for (int32_t i = 0; i < b; i++) /* symmetrise rounding */
        for (int32_t j = 0; j < i; j++) H[i * b + j] = H[j * b + i] = 0.5 * (H[i * b + j] + H[j * b + i]);
    locks_status st = locks_eig_sym(b, H, w, U);
    if (st == LOCKS_OK) {
        for (int32_t k = 0; k < r; k++) {
            for (int32_t c = 0; c < d; c++) {
                double acc = 0.0;
                for (int32_t i = 0; i < b; i++) acc += Q[(size_t)i * (size_t)d + (size_t)c] * U[i * b + k];
                basis[(size_t)k * (size_t)d + (size_t)c] = (float)acc;
            }
            if (evals) evals[k] = w[k];
        }
    }
    locks_free(Q);
    locks_free(Z);
    return st;
}

void locks_shadow_project(int32_t d, int32_t r, const float *basis, const float *x, float *proj) {
    for (int32_t k = 0; k < r; k++) {
        const float *bk = basis + (size_t)k * (size_t)d;
        float acc = 0.0f;
        for (int32_t c = 0; c < d; c++) acc += bk[c] * x[c];
        proj[k] = acc;
    }
}

void locks_shadow_score(int32_t d, int32_t r, int32_t G, int32_t n, const int32_t *pages,
                        const float *proj, const float *basis, const float *q, float scale,
                        float *s, int32_t ld) {
    for (int32_t g = 0; g < G; g++) {
        float qp[LOCKS_MAX_RANK];
        locks_shadow_project(d, r, basis, q + (size_t)g * (size_t)d, qp);
        for (int32_t j = 0; j < n; j++) {
            const float *pj = proj + (size_t)pages[j] * (size_t)r;
            float acc = 0.0f;
            for (int32_t k = 0; k < r; k++) acc += qp[k] * pj[k];
            s[(size_t)g * (size_t)ld + (size_t)j] = scale * acc;
        }
    }
}

void locks_landmark_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                          const uint16_t *lm, const float *q, float scale, float *s,
                          int32_t ld) {
    float L[LOCKS_MAX_HEAD_DIM];
    for (int32_t j = 0; j < n; j++) {
        const uint16_t *lj = lm + (size_t)pages[j] * (size_t)d;
        for (int32_t c = 0; c < d; c++) L[c] = locks_f16_to_f32(lj[c]);
        for (int32_t g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * (size_t)d;
            float acc = 0.0f;
            for (int32_t c = 0; c < d; c++) acc += qg[c] * L[c];
            s[(size_t)g * (size_t)ld + (size_t)j] = scale * acc;
        }
    }
}

/* ---- per-cache state -------------------------------------------------------------
 * Landmarks (fp16 page means) per (layer, KV head, physical page), written by the
 * page-fill hook. The shared basis belongs to a (sequence slot, layer): basis[seq][l]
 * [Hkv][r][d], fitted by locks_cache_shadow_fit or, failing that, by the first shadow
 * step (locks_selector_prepare). Each fit gets a fresh generation number; a page's
 * projected centroid proj[l][h][p][r] is valid for the fit whose generation is in
 * proj_gen[l][h][p] (0: none; the fill hook resets it), so pages that fill after the
 * fit (generated tokens) are projected on the prefill basis the first time they are
 * scored. A fit is dropped when its sequence is removed or truncated below the length
 * it was fitted at (the block's truncate hook), so a reused slot (the engine's
 * locks_ctx_reset) is never scored with the previous prompt's basis; the next fit is
 * locks_cache_shadow_fit's (call it after each prefill) or the first shadow step's. */
typedef struct {
    uint16_t *lm;       /* [L][Hkv][n_pages][d] fp16 page means */
    float *proj;        /* [L][Hkv][n_pages][r] */
    uint32_t *proj_gen; /* [L][Hkv][n_pages] */
    float *basis;       /* [max_seqs][L][Hkv][r][d] */
    uint32_t *fit_gen;  /* [max_seqs][L], 0 = not fitted */
    int32_t *fit_len;   /* [max_seqs][L], sequence length at the fit */
    uint32_t *next_gen; /* [1]: the next fit's generation, never 0 */
} shadow_meta;

/* The cache's LOCKS_META_SHADOW block holds next_gen[1], then the arrays above. */
static size_t shadow_layout(const locks_cache *c, size_t off[7]) {
    const size_t L = (size_t)c->p.n_layers, H = (size_t)c->hkv, NP = (size_t)c->p.n_pages;
    const size_t d = (size_t)c->d, r = (size_t)c->r, S = (size_t)c->p.max_seqs;
    size_t end = 0;
    off[0] = locks_meta_take(&end, 1, sizeof(uint32_t));
    off[1] = locks_meta_take(&end, L * H * NP * d, sizeof(uint16_t));
    off[2] = locks_meta_take(&end, L * H * NP * r, sizeof(float));
    off[3] = locks_meta_take(&end, L * H * NP, sizeof(uint32_t));
    off[4] = locks_meta_take(&end, S * L * H * r * d, sizeof(float));
    off[5] = locks_meta_take(&end, S * L, sizeof(uint32_t));
    off[6] = locks_meta_take(&end, S * L, sizeof(int32_t));
    return end;
}

size_t locks_sel_shadow_bytes(const locks_cache *c) {
    size_t off[7];
    return shadow_layout(c, off);
}

/* The arrays of c's shadow block (c must hold it: locks_selector_served). */
static shadow_meta shadow_view(const locks_cache *c) {
    size_t off[7];
    shadow_layout(c, off);
    uint8_t *base = locks_cache_meta(c, LOCKS_META_SHADOW);
    shadow_meta m;
    m.next_gen = (uint32_t *)(void *)(base + off[0]);
    m.lm = (uint16_t *)(void *)(base + off[1]);
    m.proj = (float *)(void *)(base + off[2]);
    m.proj_gen = (uint32_t *)(void *)(base + off[3]);
    m.basis = (float *)(void *)(base + off[4]);
    m.fit_gen = (uint32_t *)(void *)(base + off[5]);
    m.fit_len = (int32_t *)(void *)(base + off[6]);
    return m;
}

void locks_sel_shadow_start(locks_cache *c) { *shadow_view(c).next_gen = 1; }

static size_t page_index(const locks_cache *c, int32_t layer, int32_t kv_head, int32_t page) {
    return ((size_t)layer * (size_t)c->hkv + (size_t)kv_head) * (size_t)c->p.n_pages + (size_t)page;
}

void locks_sel_shadow_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k) {
    const shadow_meta mv = shadow_view(c), *m = &mv;
    size_t i = page_index(c, layer, kv_head, page);
    float mean[LOCKS_MAX_HEAD_DIM];
    locks_page_mean(c->d, k, mean);
    for (int32_t e = 0; e < c->d; e++) m->lm[i * (size_t)c->d + (size_t)e] = locks_f32_to_f16(mean[e]);
    m->proj_gen[i] = 0;
}

void locks_sel_shadow_seq_truncated(locks_cache *c, int32_t seq_id, int32_t len) {
    const shadow_meta mv = shadow_view(c), *m = &mv;
    for (int32_t l = 0; l < c->p.n_layers; l++) {
        size_t sl = (size_t)seq_id * (size_t)c->p.n_layers + (size_t)l;
        if (m->fit_gen[sl] != 0 && (len == 0 || len < m->fit_len[sl])) {
            m->fit_gen[sl] = 0;
            m->fit_len[sl] = 0;
            memset(m->basis + sl * (size_t)c->hkv * (size_t)c->r * (size_t)c->d, 0,
                   (size_t)c->hkv * (size_t)c->r * (size_t)c->d * sizeof *m->basis);
        }
    }
}

/* Fits the basis of (seq, layer) from every token written so far, all KV heads. */
static locks_status shadow_fit_layer(locks_cache *c, const shadow_meta *m, int32_t seq_id,
                                     int32_t layer) {
    const locks_seq *sq = locks_cache_seq(c, seq_id);
    if (!sq) return LOCKS_ERR_NO_SEQ;
    if (sq->len < 1) return LOCKS_ERR_INVALID_ARG;
    const int32_t d = c->d, r = c->r;
    double *gram = locks_alloc((size_t)d * (size_t)d, sizeof *gram);
    if (!gram) return LOCKS_ERR_OOM;
    locks_status st = LOCKS_OK;
    for (int32_t h = 0; h < c->hkv && st == LOCKS_OK; h++) {
        memset(gram, 0, (size_t)d * (size_t)d * sizeof *gram);
        double kd[LOCKS_MAX_HEAD_DIM];
        for (int32_t t = 0; t < sq->len; t++) {
            const uint16_t *kb = locks_cache_kblock(c, layer, sq->table[t / LOCKS_PAGE], h) +
                                 (size_t)(t % LOCKS_PAGE) * (size_t)d;
            for (int32_t e = 0; e < d; e++) kd[e] = (double)locks_f16_to_f32(kb[e]);
            for (int32_t a = 0; a < d; a++) /* upper triangle; mirrored below */
                for (int32_t b = a; b < d; b++) gram[(size_t)a * (size_t)d + (size_t)b] += kd[a] * kd[b];
        }
        for (int32_t a = 0; a < d; a++)
            for (int32_t b = 0; b < a; b++) gram[(size_t)a * (size_t)d + (size_t)b] = gram[(size_t)b * (size_t)d + (size_t)a];
        float *basis = m->basis + (((size_t)seq_id * (size_t)c->p.n_layers + (size_t)layer) * (size_t)c->hkv + (size_t)h) *
                                      (size_t)r * (size_t)d;
        st = locks_shadow_fit(d, r, gram, basis, NULL);
    }
    locks_free(gram);
    if (st != LOCKS_OK) return st;
    size_t sl = (size_t)seq_id * (size_t)c->p.n_layers + (size_t)layer;
    m->fit_gen[sl] = (*m->next_gen)++;
    if (*m->next_gen == 0) *m->next_gen = 1;
    m->fit_len[sl] = sq->len;
    return LOCKS_OK;
}

/* Makes (seq, layer) ready to score: fitted basis, every full page projected on it. */
locks_status locks_sel_shadow_prepare(locks_cache *c, int32_t layer, int32_t seq_id) {
    const shadow_meta mv = shadow_view(c), *m = &mv;
    const locks_seq *sq = locks_cache_seq(c, seq_id);
    if (!sq) return LOCKS_ERR_NO_SEQ;
    size_t sl = (size_t)seq_id * (size_t)c->p.n_layers + (size_t)layer;
    if (m->fit_gen[sl] == 0 || sq->len < m->fit_len[sl]) {
        locks_status st = shadow_fit_layer(c, m, seq_id, layer);
        if (st != LOCKS_OK) return st;
    }
    const uint32_t gen = m->fit_gen[sl];
    const int32_t d = c->d, r = c->r, n_full = sq->len / LOCKS_PAGE;
    for (int32_t h = 0; h < c->hkv; h++) {
        const float *basis = m->basis + (sl * (size_t)c->hkv + (size_t)h) * (size_t)r * (size_t)d;
        for (int32_t j = 0; j < n_full; j++) {
            size_t i = page_index(c, layer, h, sq->table[j]);
            if (m->proj_gen[i] == gen) continue;
            /* centroid from the stored keys (fp32 mean, not the fp16 landmark) */
            const uint16_t *kb = locks_cache_kblock(c, layer, sq->table[j], h);
            float k[LOCKS_PAGE * LOCKS_MAX_HEAD_DIM], mean[LOCKS_MAX_HEAD_DIM];
            for (size_t e = 0; e < (size_t)LOCKS_PAGE * (size_t)d; e++) k[e] = locks_f16_to_f32(kb[e]);
            locks_page_mean(d, k, mean);
            locks_shadow_project(d, r, basis, mean, m->proj + i * (size_t)r);
            m->proj_gen[i] = gen;
        }
    }
    return LOCKS_OK;
}

static locks_status cache_shadow_fit_locked(locks_cache *c, int32_t seq_id) {
    if (!c) return LOCKS_ERR_INVALID_ARG;
    if (!locks_cache_seq(c, seq_id)) return LOCKS_ERR_NO_SEQ;
    if (c->p.backend != LOCKS_BACKEND_CPU) return LOCKS_ERR_UNSUPPORTED;
    if (locks_cache_kv_ld(c) != (size_t)c->d) return LOCKS_ERR_UNSUPPORTED; /* caller's NHD pages */
    if (!locks_cache_meta(c, LOCKS_META_SHADOW)) return LOCKS_ERR_NO_META;
    const shadow_meta mv = shadow_view(c), *m = &mv;
    for (int32_t l = 0; l < c->p.n_layers; l++) {
        locks_status st = shadow_fit_layer(c, m, seq_id, l);
        if (st == LOCKS_OK) st = locks_sel_shadow_prepare(c, l, seq_id);
        if (st != LOCKS_OK) return st;
    }
    return LOCKS_OK;
}

void locks_sel_shadow_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld) {
    const locks_cache *c = x->c;
    const shadow_meta mv = shadow_view(c), *m = &mv;
    size_t sl = (size_t)x->seq_id * (size_t)c->p.n_layers + (size_t)x->layer;
    const float *basis = m->basis + (sl * (size_t)c->hkv + (size_t)x->kv_head) * (size_t)c->r * (size_t)c->d;
    const float *proj = m->proj + page_index(c, x->layer, x->kv_head, 0) * (size_t)c->r;
    locks_shadow_score(c->d, c->r, x->group, j1 - j0, x->table + j0, proj, basis, x->q, x->scale,
                       scores + j0, ld);
}

void locks_sel_shadow_lm_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                               int32_t ld) {
    const locks_cache *c = x->c;
    const shadow_meta mv = shadow_view(c), *m = &mv;
    const uint16_t *lm = m->lm + page_index(c, x->layer, x->kv_head, 0) * (size_t)c->d;
    locks_landmark_score(c->d, x->group, j1 - j0, x->table + j0, lm, x->q, x->scale, scores + j0, ld);
}

locks_status locks_cache_shadow_fit(locks_cache *c, int32_t seq_id) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_shadow_fit: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, cache_shadow_fit_locked(c, seq_id), "locks_cache_shadow_fit", mark);
}
