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

/* Rotates rows/columns p, q of the symmetric n x n matrix A by the Jacobi rotation that
 * zeroes A[p][q] (A' = J^T A J) and accumulates J into the eigenvector matrix U. */
static void jacobi_rotate(int32_t n, double *A, double *U, int32_t p, int32_t q) {
    double apq = A[p * n + q];
    double theta = (A[q * n + q] - A[p * n + p]) / (2.0 * apq);
    double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
    double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
    for (int32_t k = 0; k < n; k++) { /* columns p, q */
        double akp = A[k * n + p], akq = A[k * n + q];
        A[k * n + p] = c * akp - s * akq;
        A[k * n + q] = s * akp + c * akq;
    }
    for (int32_t k = 0; k < n; k++) { /* rows p, q */
        double apk = A[p * n + k], aqk = A[q * n + k];
        A[p * n + k] = c * apk - s * aqk;
        A[q * n + k] = s * apk + c * aqk;
    }
    A[p * n + q] = A[q * n + p] = 0.0;
    for (int32_t k = 0; k < n; k++) {
        double ukp = U[k * n + p], ukq = U[k * n + q];
        U[k * n + p] = c * ukp - s * ukq;
        U[k * n + q] = s * ukp + c * ukq;
    }
}

locks_status locks_eig_sym(int32_t n, const double *a, double *w, double *u) {
    if (n < 1 || n > 16 || !a || !w || !u) return LOCKS_ERR_INVALID_ARG;
    double A[256], U[256];
    memcpy(A, a, sizeof(double) * (size_t)(n * n));
    double norm = 0.0;
    for (int32_t i = 0; i < n * n; i++) {
        if (!isfinite(A[i])) return LOCKS_ERR_NONFINITE;
        norm += A[i] * A[i];
        U[i] = 0.0;
    }
    for (int32_t i = 0; i < n; i++) U[i * n + i] = 1.0;
    for (int32_t sweep = 0; sweep < 64; sweep++) {
        double off = 0.0;
        for (int32_t p = 0; p < n; p++)
            for (int32_t q = p + 1; q < n; q++) off += A[p * n + q] * A[p * n + q];
        if (off <= 1e-32 * norm || off == 0.0) break;
        for (int32_t p = 0; p < n; p++)
            for (int32_t q = p + 1; q < n; q++)
                if (A[p * n + q] != 0.0) jacobi_rotate(n, A, U, p, q);
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
        for (int32_t k = 0; k < n; k++) u[k * n + i] = U[k * n + order[i]];
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
    for (int32_t c = 0; c < d; c++) {
        double s = 0.0;
        for (int32_t i = 0; i < P; i++) s += (double)k[i * d + c];
        m[c] = s / P;
    }
    for (int32_t i = 0; i < P; i++)
        for (int32_t c = 0; c < d; c++) X[i * d + c] = (double)k[i * d + c] - m[c];
    if (!isfinite(m[0])) return LOCKS_ERR_NONFINITE;
    /* Gram = X X^T (16 x 16) */
    double G[P * P], w[P], U[P * P];
    for (int32_t i = 0; i < P; i++)
        for (int32_t j = i; j < P; j++) {
            double s = 0.0;
            for (int32_t c = 0; c < d; c++) s += X[i * d + c] * X[j * d + c];
            G[i * P + j] = G[j * P + i] = s;
        }
    locks_status st = locks_eig_sym(P, G, w, U);
    if (st != LOCKS_OK) return st;
    for (int32_t c = 0; c < d; c++) mu[c] = (float)m[c];
    double sig0 = w[0] > 0.0 ? sqrt(w[0]) : 0.0;
    for (int32_t kk = 0; kk < r; kk++) {
        double sig = w[kk] > 0.0 ? sqrt(w[kk]) : 0.0;
        float *vrow = basis + (size_t)kk * d;
        if (sig == 0.0 || sig <= 1e-6 * sig0) { /* null direction */
            for (int32_t c = 0; c < d; c++) vrow[c] = 0.0f;
            for (int32_t i = 0; i < P; i++) coef[i * r + kk] = 0.0f;
            continue;
        }
        /* v_k = X^T u_k / sigma_k ; c_ik = sigma_k u_ik */
        for (int32_t c = 0; c < d; c++) {
            double s = 0.0;
            for (int32_t i = 0; i < P; i++) s += X[i * d + c] * U[i * P + kk];
            vrow[c] = (float)(s / sig);
        }
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
