/*
 * summary.c — per-page key summaries (see summary.h and DESIGN.md §1).
 *
 * The build works in double: the 16 x 16 Gram matrix of the centred keys is small, and
 * Jacobi in double keeps the basis orthonormal to ~1e-15 so the rank-15 summary
 * reproduces the page's logits to float precision (the exactness test relies on it).
 */
#include "summary.h"

#include <math.h>
#include <string.h>

#include "util.h"

size_t locks_summary_bytes(int32_t head_dim, int32_t rank, locks_summary_prec prec) {
    if (head_dim <= 0 || rank < 1 || rank > LOCKS_MAX_RANK) return 0;
    size_t d = (size_t)head_dim, r = (size_t)rank;
    if (prec == LOCKS_SUMMARY_F32) return 4 * (d + r * d + LOCKS_PAGE * r);
    return d + 2 + r * d / 2 + 2 * r + LOCKS_PAGE * r + 2 * r;
}

/* ---------------------------------------------------------------------------------- */
/* Cyclic Jacobi                                                                       */
/* ---------------------------------------------------------------------------------- */

/* One Jacobi rotation A' = J^T A J that zeroes A[p][q] (p < q), with the eigenvector
 * estimate kept as the rows of Ut (Ut' = J^T Ut). Symmetry makes this cheap: the new
 * rows p and q are also the new columns p and q, so one pass writes both; the 2x2
 * block is set by the closed form, with A'[p][q] = 0 exactly. */
static void jacobi_rotate(int32_t n, double *A, double *Ut, int32_t p, int32_t q) {
    double *Ap = A + p * n, *Aq = A + q * n;
    const double apq = Ap[q], app = Ap[p], aqq = Aq[q];
    const double theta = (aqq - app) / (2.0 * apq);
    const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
    const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
    for (int32_t k = 0; k < n; k++) { /* one scalar loop: stores forward to later loads */
        double a = Ap[k], b = Aq[k], na = c * a - s * b, nb = s * a + c * b;
        Ap[k] = na;
        Aq[k] = nb;
        A[k * n + p] = na;
        A[k * n + q] = nb;
    }
    Ap[p] = app - t * apq;
    Aq[q] = aqq + t * apq;
    Ap[q] = Aq[p] = 0.0;
    double *Up = Ut + p * n, *Uq = Ut + q * n;
    for (int32_t k = 0; k < n; k++) {
        double a = Up[k], b = Uq[k];
        Up[k] = c * a - s * b;
        Uq[k] = s * a + c * b;
    }
}

locks_status locks_eig_sym(int32_t n, const double *a, double *w, double *u) {
    if (n < 1 || n > 16 || !a || !w || !u) return LOCKS_ERR_INVALID_ARG;
    double A[256], Ut[256];
    memcpy(A, a, sizeof(double) * (size_t)(n * n));
    double norm = 0.0;
    for (int32_t i = 0; i < n * n; i++) {
        if (!isfinite(A[i])) return LOCKS_ERR_NONFINITE;
        norm += A[i] * A[i];
        Ut[i] = 0.0;
    }
    for (int32_t i = 0; i < n; i++) Ut[i * n + i] = 1.0;
    for (int32_t sweep = 0; sweep < 64; sweep++) {
        double off = 0.0;
        for (int32_t p = 0; p < n; p++)
            for (int32_t q = p + 1; q < n; q++) off += A[p * n + q] * A[p * n + q];
        if (off <= 1e-32 * norm || off == 0.0) break;
        for (int32_t p = 0; p < n; p++)
            for (int32_t q = p + 1; q < n; q++) {
                double apq = A[p * n + q];
                /* below double precision of both diagonal entries: a rotation would not
                 * change them; zeroing it also keeps the arithmetic out of subnormals */
                if (fabs(apq) <= 1e-18 * sqrt(fabs(A[p * n + p] * A[q * n + q])) || fabs(apq) < 1e-280) {
                    A[p * n + q] = A[q * n + p] = 0.0;
                    continue;
                }
                jacobi_rotate(n, A, Ut, p, q);
            }
    }
    /* selection sort of the eigenpairs, descending */
    int32_t order[16];
    for (int32_t i = 0; i < n; i++) order[i] = i;
    for (int32_t i = 0; i < n; i++) {
        int32_t best = i;
        for (int32_t j = i + 1; j < n; j++)
            if (A[order[j] * n + order[j]] > A[order[best] * n + order[best]]) best = j;
        int32_t tmp = order[i];
        order[i] = order[best];
        order[best] = tmp;
    }
    for (int32_t i = 0; i < n; i++) {
        w[i] = A[order[i] * n + order[i]];
        for (int32_t k = 0; k < n; k++) u[k * n + i] = Ut[order[i] * n + k];
    }
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Build                                                                               */
/* ---------------------------------------------------------------------------------- */

locks_status locks_summary_build_f32(int32_t head_dim, int32_t rank, const float *k,
                                     float *mu, float *basis, float *coef) {
    enum { P = LOCKS_PAGE };
    const int32_t d = head_dim, r = rank;
    if (d < 2 || d > LOCKS_MAX_HEAD_DIM || r < 1 || r > LOCKS_MAX_RANK || !k || !mu || !basis ||
        !coef)
        return LOCKS_ERR_INVALID_ARG;
    double m[LOCKS_MAX_HEAD_DIM];
    double X[P * LOCKS_MAX_HEAD_DIM];
    for (int32_t c = 0; c < d; c++) m[c] = 0.0;
    for (int32_t i = 0; i < P; i++)
        for (int32_t c = 0; c < d; c++) m[c] += (double)k[i * d + c];
    for (int32_t c = 0; c < d; c++) m[c] *= 1.0 / P;
    if (!isfinite(m[0])) return LOCKS_ERR_NONFINITE;
    for (int32_t i = 0; i < P; i++)
        for (int32_t c = 0; c < d; c++) X[i * d + c] = (double)k[i * d + c] - m[c];
    /* Gram = X X^T (16 x 16); four partial sums per dot product break the add chain */
    double G[P * P], w[P], U[P * P];
    for (int32_t i = 0; i < P; i++)
        for (int32_t j = i; j < P; j++) {
            const double *xi = X + i * d, *xj = X + j * d;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (int32_t c = 0; c < d; c += 4) { /* d is a multiple of 8 */
                s0 += xi[c] * xj[c];
                s1 += xi[c + 1] * xj[c + 1];
                s2 += xi[c + 2] * xj[c + 2];
                s3 += xi[c + 3] * xj[c + 3];
            }
            G[i * P + j] = G[j * P + i] = (s0 + s1) + (s2 + s3);
        }
    locks_status st = locks_eig_sym(P, G, w, U);
    if (st != LOCKS_OK) return st;
    for (int32_t c = 0; c < d; c++) mu[c] = (float)m[c];
    double sig0 = w[0] > 0.0 ? sqrt(w[0]) : 0.0;
    double v[LOCKS_MAX_HEAD_DIM];
    for (int32_t kk = 0; kk < r; kk++) {
        double sig = w[kk] > 0.0 ? sqrt(w[kk]) : 0.0;
        float *vrow = basis + (size_t)kk * d;
        if (sig == 0.0 || sig <= 1e-6 * sig0) { /* null direction */
            for (int32_t c = 0; c < d; c++) vrow[c] = 0.0f;
            for (int32_t i = 0; i < P; i++) coef[i * r + kk] = 0.0f;
            continue;
        }
        /* v_k = X^T u_k / sigma_k ; c_ik = sigma_k u_ik */
        for (int32_t c = 0; c < d; c++) v[c] = 0.0;
        for (int32_t i = 0; i < P; i++) {
            const double ui = U[i * P + kk];
            for (int32_t c = 0; c < d; c++) v[c] += X[i * d + c] * ui;
        }
        for (int32_t c = 0; c < d; c++) vrow[c] = (float)(v[c] / sig);
        for (int32_t i = 0; i < P; i++) coef[i * r + kk] = (float)(sig * U[i * P + kk]);
    }
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Quantization                                                                        */
/* ---------------------------------------------------------------------------------- */

/* fp16 scale for values of magnitude <= amax mapped to [-qmax, qmax], rounded up so
 * that amax / scale <= qmax. Zero for amax == 0. */
static uint16_t scale_f16(float amax, float qmax) {
    float s = amax / qmax;
    if (!(s > 0.0f)) return 0;
    uint16_t h = locks_f32_to_f16(s);
    if ((h & 0x7fffu) >= 0x7c00u) return 0x7bffu; /* clamp to the largest finite */
    if (locks_f16_to_f32(h) < s) h++;             /* positive: next value up */
    return h;
}

static int32_t quant(float x, float inv, int32_t qmax) {
    float y = nearbyintf(x * inv);
    if (y > (float)qmax) y = (float)qmax;
    if (y < (float)-qmax) y = (float)-qmax;
    return (int32_t)y;
}

int32_t locks_int4_get(const uint8_t *row, int32_t c) {
    int32_t b = row[c >> 1];
    int32_t nib = (c & 1) ? (b >> 4) & 0xf : b & 0xf;
    return (nib ^ 8) - 8;
}

void locks_summary_quantize(int32_t d, int32_t r, const float *mu, const float *basis,
                            const float *coef, locks_qsummary q) {
    enum { P = LOCKS_PAGE };
    float amax = 0.0f;
    for (int32_t c = 0; c < d; c++) amax = fmaxf(amax, fabsf(mu[c]));
    *q.mu_s = scale_f16(amax, 127.0f);
    float s = locks_f16_to_f32(*q.mu_s), inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int32_t c = 0; c < d; c++) q.mu_q[c] = (int8_t)quant(mu[c], inv, 127);

    for (int32_t k = 0; k < r; k++) {
        const float *v = basis + (size_t)k * d;
        amax = 0.0f;
        for (int32_t c = 0; c < d; c++) amax = fmaxf(amax, fabsf(v[c]));
        q.v_s[k] = scale_f16(amax, 7.0f);
        s = locks_f16_to_f32(q.v_s[k]);
        inv = s > 0.0f ? 1.0f / s : 0.0f;
        uint8_t *row = q.v_q + (size_t)k * (d / 2);
        for (int32_t c = 0; c < d; c += 2) {
            uint32_t lo = (uint32_t)quant(v[c], inv, 7) & 0xfu;
            uint32_t hi = (uint32_t)quant(v[c + 1], inv, 7) & 0xfu;
            row[c / 2] = (uint8_t)(lo | (hi << 4));
        }
    }
    for (int32_t k = 0; k < r; k++) {
        amax = 0.0f;
        for (int32_t i = 0; i < P; i++) amax = fmaxf(amax, fabsf(coef[i * r + k]));
        q.c_s[k] = scale_f16(amax, 127.0f);
        s = locks_f16_to_f32(q.c_s[k]);
        inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int32_t i = 0; i < P; i++) q.c_q[i * r + k] = (int8_t)quant(coef[i * r + k], inv, 127);
    }
}

void locks_summary_dequantize(int32_t d, int32_t r, locks_qsummary q, float *mu, float *basis,
                              float *coef) {
    enum { P = LOCKS_PAGE };
    float s = locks_f16_to_f32(*q.mu_s);
    for (int32_t c = 0; c < d; c++) mu[c] = s * (float)q.mu_q[c];
    for (int32_t k = 0; k < r; k++) {
        s = locks_f16_to_f32(q.v_s[k]);
        const uint8_t *row = q.v_q + (size_t)k * (d / 2);
        for (int32_t c = 0; c < d; c++) basis[(size_t)k * d + c] = s * (float)locks_int4_get(row, c);
    }
    for (int32_t k = 0; k < r; k++) {
        s = locks_f16_to_f32(q.c_s[k]);
        for (int32_t i = 0; i < P; i++) coef[i * r + k] = s * (float)q.c_q[i * r + k];
    }
}
