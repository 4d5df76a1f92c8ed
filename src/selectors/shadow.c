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
 *    eigenvectors by subspace iteration (a 16-vector block, Rayleigh-Ritz through
 *    locks_eig_sym), not an exact full SVD; the test checks the captured energy against
 *    a float64 reference.
 */
#include <math.h>
#include <string.h>

#include "refsel.h"
#include "util.h"

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
    for (int32_t it = 0; it < SHADOW_ITERS; it++) {
        /* Z = gram Q (d x d @ d x b) */
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
                        float *s) {
    for (int32_t g = 0; g < G; g++) {
        float qp[LOCKS_MAX_RANK];
        locks_shadow_project(d, r, basis, q + (size_t)g * (size_t)d, qp);
        for (int32_t j = 0; j < n; j++) {
            const float *pj = proj + (size_t)pages[j] * (size_t)r;
            float acc = 0.0f;
            for (int32_t k = 0; k < r; k++) acc += qp[k] * pj[k];
            s[(size_t)g * (size_t)n + (size_t)j] = scale * acc;
        }
    }
}

void locks_landmark_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                          const uint16_t *lm, const float *q, float scale, float *s) {
    float L[LOCKS_MAX_HEAD_DIM];
    for (int32_t j = 0; j < n; j++) {
        const uint16_t *lj = lm + (size_t)pages[j] * (size_t)d;
        for (int32_t c = 0; c < d; c++) L[c] = locks_f16_to_f32(lj[c]);
        for (int32_t g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * (size_t)d;
            float acc = 0.0f;
            for (int32_t c = 0; c < d; c++) acc += qg[c] * L[c];
            s[(size_t)g * (size_t)n + (size_t)j] = scale * acc;
        }
    }
}
