/*
 * summary.c — per-page key summaries (see summary.h and docs/DESIGN.md §1).
 *
 * The build works in double: the 16 x 16 Gram matrix of the centred keys is small, and
 * Jacobi in double keeps the basis orthonormal to ~1e-15 so the rank-15 summary
 * reproduces the page's logits to float precision (the exactness test relies on it).
 */
#include "summary.h"

#include <math.h>
#include <string.h>

#include "util.h"
#include "vmath.h"

size_t locks_summary_bytes(int32_t head_dim, int32_t rank, locks_summary_prec prec) {
    if (head_dim <= 0 || rank < 1 || rank > LOCKS_MAX_RANK) return 0;
    if (prec != LOCKS_SUMMARY_F32 && head_dim % 2 != 0) return 0; /* int4 basis rows pack pairs */
    size_t d = (size_t)head_dim, r = (size_t)rank;
    if (prec == LOCKS_SUMMARY_F32) return 4 * (d + r * d + LOCKS_PAGE * r);
    return d + 2 + r * d / 2 + 2 * r + LOCKS_PAGE * r + 2 * r;
}

size_t locks_summary_record_bad(int32_t d, int32_t r, locks_summary_prec prec, const void *rec) {
    const unsigned char *p = rec;
    const size_t D = (size_t)d, R = (size_t)r;
    if (prec == LOCKS_SUMMARY_F32) {
        for (size_t i = 0; i < D + R * D + LOCKS_PAGE * R; i++) {
            float x;
            memcpy(&x, p + 4 * i, 4);
            if (!isfinite(x)) return 4 * i;
        }
        return SIZE_MAX;
    }
    const size_t at[3] = {D, D + 2 + R * D / 2, D + 2 + R * D / 2 + 2 * R + LOCKS_PAGE * R}; /* mu_s, v_s, c_s */
    const size_t n[3] = {1, R, R};
    for (int32_t j = 0; j < 3; j++) {
        const size_t i = locks_f16_first_nonfinite(p + at[j], n[j]);
        if (i < n[j]) return at[j] + 2 * i;
    }
    return SIZE_MAX;
}

/* ---------------------------------------------------------------------------------- */
/* Cyclic Jacobi                                                                       */
/* ---------------------------------------------------------------------------------- */

/* Cyclic Jacobi in the round-robin ("parallel") ordering: a sweep is m - 1 rounds
 * (m = n rounded up to even) of m / 2 disjoint pairs (p, q), so each pair meets once
 * per sweep, as in the row-cyclic order. The rotations of one round commute; they are
 * applied together, A' = J^T A J with J block diagonal:
 *   - rotation parameters of every pair from the current A (independent square roots
 *     and divisions, which the CPU overlaps: in the row-cyclic order each waits for
 *     the previous rotation);
 *   - rows p, q of A (contiguous, vectorised), then columns p, q of every row;
 *   - each 2x2 block set by its closed form, A'[p][q] = 0 exactly;
 *   - rows p, q of Ut (the transposed eigenvector estimate).
 * Rotations below double precision of both diagonal entries are skipped (their entry
 * set to 0), which also keeps the arithmetic out of subnormals. jacobi_round is one
 * round: the m / 2 pairs (pl[i], pl[m - 1 - i]) of the players pl. */
static void jacobi_round(int32_t n, int32_t m, double *A, double *Ut, const int32_t *pl) {
    int32_t P_[8], Q_[8], np = 0;
    double C[8], S[8], T[8], App[8], Aqq[8], Apq[8];
    for (int32_t i = 0; i < m / 2; i++) {
        int32_t p = pl[i], q = pl[m - 1 - i];
        if (p > q) {
            int32_t tmp = p;
            p = q;
            q = tmp;
        }
        if (q >= n) continue; /* the odd player out this round */
        const double apq = A[p * n + q], app = A[p * n + p], aqq = A[q * n + q];
        if (fabs(apq) <= 1e-18 * sqrt(fabs(app * aqq)) || fabs(apq) < 1e-280) {
            A[p * n + q] = A[q * n + p] = 0.0;
            continue;
        }
        const double theta = (aqq - app) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
        const double c = 1.0 / sqrt(t * t + 1.0);
        P_[np] = p, Q_[np] = q, C[np] = c, S[np] = t * c, T[np] = t;
        App[np] = app, Aqq[np] = aqq, Apq[np] = apq;
        np++;
    }
    for (int32_t k = 0; k < np; k++) { /* rows: J^T A */
        double *Ap = A + P_[k] * n, *Aq = A + Q_[k] * n;
        const double c = C[k], s = S[k];
        for (int32_t x = 0; x < n; x++) {
            const double va = Ap[x], vb = Aq[x];
            Ap[x] = c * va - s * vb;
            Aq[x] = s * va + c * vb;
        }
    }
    for (int32_t r = 0; r < n; r++) { /* columns: (J^T A) J */
        double *Ar = A + r * n;
        for (int32_t k = 0; k < np; k++) {
            const double va = Ar[P_[k]], vb = Ar[Q_[k]];
            Ar[P_[k]] = C[k] * va - S[k] * vb;
            Ar[Q_[k]] = S[k] * va + C[k] * vb;
        }
    }
    for (int32_t k = 0; k < np; k++) {
        const int32_t p = P_[k], q = Q_[k];
        A[p * n + p] = App[k] - T[k] * Apq[k];
        A[q * n + q] = Aqq[k] + T[k] * Apq[k];
        A[p * n + q] = A[q * n + p] = 0.0;
        double *Up = Ut + p * n, *Uq = Ut + q * n;
        const double c = C[k], s = S[k];
        for (int32_t x = 0; x < n; x++) {
            const double va = Up[x], vb = Uq[x];
            Up[x] = c * va - s * vb;
            Uq[x] = s * va + c * vb;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define EIG_AVX512 __attribute__((target("avx512f")))

/* jacobi_round for n = 16 (8 disjoint pairs covering every index) on
 * AVX-512, the 8 pairs in the lanes: each number formed by the same IEEE operations as
 * the scalar round (products, sums, square roots and quotients are correctly rounded,
 * and nothing is fused), so bit for bit its results. A 16-double row is two vectors;
 * a row's columns p (q) of every pair are one permute of the two, and the rotated
 * columns go back by the inverse permutation. */
EIG_AVX512 static void jacobi_round16(double *A, double *Ut, const int32_t *pl) {
    int32_t pp[8], qq[8], inv[16];
    for (int32_t i = 0; i < 8; i++) {
        const int32_t a = pl[i], b = pl[15 - i];
        pp[i] = a < b ? a : b;
        qq[i] = a < b ? b : a;
        inv[pp[i]] = i;
        inv[qq[i]] = 8 + i;
    }
    const __m256i vp = _mm256_loadu_si256((const __m256i *)pp), vq = _mm256_loadu_si256((const __m256i *)qq);
    const __m512i ip = _mm512_cvtepi32_epi64(vp), iq = _mm512_cvtepi32_epi64(vq);
    const __m512i inv_lo = _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i *)inv));
    const __m512i inv_hi = _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i *)(inv + 8)));
    const __m256i v17 = _mm256_set1_epi32(17);
    const __m512d app = _mm512_i32gather_pd(_mm256_mullo_epi32(vp, v17), A, 8);
    const __m512d aqq = _mm512_i32gather_pd(_mm256_mullo_epi32(vq, v17), A, 8);
    const __m512d apq = _mm512_i32gather_pd(_mm256_add_epi32(_mm256_slli_epi32(vp, 4), vq), A, 8);
    const __m512d one = _mm512_set1_pd(1.0);
    const __m512d aapq = _mm512_abs_pd(apq);
    /* skipped: |apq| <= 1e-18 sqrt(|app aqq|) or |apq| < 1e-280 */
    const __mmask8 skip =
        _mm512_cmp_pd_mask(aapq, _mm512_mul_pd(_mm512_set1_pd(1e-18), _mm512_sqrt_pd(_mm512_abs_pd(_mm512_mul_pd(app, aqq)))),
                           _CMP_LE_OQ) |
        _mm512_cmp_pd_mask(aapq, _mm512_set1_pd(1e-280), _CMP_LT_OQ);
    const __mmask8 act = (__mmask8)~skip;
    const __m512d theta = _mm512_div_pd(_mm512_sub_pd(aqq, app), _mm512_mul_pd(_mm512_set1_pd(2.0), apq));
    const __m512d sgn = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(theta, _mm512_setzero_pd(), _CMP_GE_OQ),
                                             _mm512_set1_pd(-1.0), one);
    const __m512d t = _mm512_div_pd(
        sgn, _mm512_add_pd(_mm512_abs_pd(theta), _mm512_sqrt_pd(_mm512_add_pd(_mm512_mul_pd(theta, theta), one))));
    const __m512d c = _mm512_div_pd(one, _mm512_sqrt_pd(_mm512_add_pd(_mm512_mul_pd(t, t), one)));
    const __m512d sn = _mm512_mul_pd(t, c);
    double C[8], S[8], T[8], App[8], Aqq[8], Apq[8];
    _mm512_storeu_pd(C, c);
    _mm512_storeu_pd(S, sn);
    _mm512_storeu_pd(T, t);
    _mm512_storeu_pd(App, app);
    _mm512_storeu_pd(Aqq, aqq);
    _mm512_storeu_pd(Apq, apq);
    for (int32_t k = 0; k < 8; k++)
        if (skip >> k & 1) A[pp[k] * 16 + qq[k]] = A[qq[k] * 16 + pp[k]] = 0.0;
    if (!act) return;
    /* rows p, q of A and of Ut: J^T A */
    for (int32_t k = 0; k < 8; k++) {
        if (!(act >> k & 1)) continue;
        const __m512d ck = _mm512_set1_pd(C[k]), sk = _mm512_set1_pd(S[k]);
        double *rows[2] = {A, Ut};
        for (int32_t m = 0; m < 2; m++) {
            double *Ap = rows[m] + pp[k] * 16, *Aq = rows[m] + qq[k] * 16;
            for (int32_t h = 0; h < 16; h += 8) {
                const __m512d va = _mm512_loadu_pd(Ap + h), vb = _mm512_loadu_pd(Aq + h);
                _mm512_storeu_pd(Ap + h, _mm512_sub_pd(_mm512_mul_pd(ck, va), _mm512_mul_pd(sk, vb)));
                _mm512_storeu_pd(Aq + h, _mm512_add_pd(_mm512_mul_pd(sk, va), _mm512_mul_pd(ck, vb)));
            }
        }
    }
    /* columns p, q of every row: (J^T A) J */
    for (int32_t r = 0; r < 16; r++) {
        double *Ar = A + r * 16;
        const __m512d lo = _mm512_loadu_pd(Ar), hi = _mm512_loadu_pd(Ar + 8);
        const __m512d va = _mm512_permutex2var_pd(lo, ip, hi), vb = _mm512_permutex2var_pd(lo, iq, hi);
        const __m512d na = _mm512_mask_blend_pd(act, va, _mm512_sub_pd(_mm512_mul_pd(c, va), _mm512_mul_pd(sn, vb)));
        const __m512d nb = _mm512_mask_blend_pd(act, vb, _mm512_add_pd(_mm512_mul_pd(sn, va), _mm512_mul_pd(c, vb)));
        _mm512_storeu_pd(Ar, _mm512_permutex2var_pd(na, inv_lo, nb));
        _mm512_storeu_pd(Ar + 8, _mm512_permutex2var_pd(na, inv_hi, nb));
    }
    /* each 2x2 block by its closed form */
    for (int32_t k = 0; k < 8; k++) {
        if (!(act >> k & 1)) continue;
        const int32_t p = pp[k], q = qq[k];
        A[p * 16 + p] = App[k] - T[k] * Apq[k];
        A[q * 16 + q] = Aqq[k] + T[k] * Apq[k];
        A[p * 16 + q] = A[q * 16 + p] = 0.0;
    }
}
#endif

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
    const int32_t m = n + (n & 1);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const int vec16 = n == 16 && locks_have_avx512(); /* the rounds on AVX-512 (jacobi_round16) */
#endif
    for (int32_t sweep = 0; sweep < 64; sweep++) {
        double off = 0.0;
        for (int32_t p = 0; p < n; p++)
            for (int32_t q = p + 1; q < n; q++) off += A[p * n + q] * A[p * n + q];
        if (off <= 1e-32 * norm || off == 0.0) break;
        int32_t pl[16];
        for (int32_t i = 0; i < m; i++) pl[i] = i;
        for (int32_t round = 0; round < m - 1; round++) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
            if (vec16)
                jacobi_round16(A, Ut, pl);
            else
#endif
                jacobi_round(n, m, A, Ut, pl);
            /* next round: player 0 stays, the others move one seat */
            const int32_t last = pl[m - 1];
            for (int32_t i = m - 1; i > 1; i--) pl[i] = pl[i - 1];
            pl[1] = last;
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
    if (d < 1 || d > LOCKS_MAX_HEAD_DIM || r < 1 || r > LOCKS_MAX_RANK || !k || !mu || !basis ||
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
            int32_t c = 0;
            for (; c + 4 <= d; c += 4) {
                s0 += xi[c] * xj[c];
                s1 += xi[c + 1] * xj[c + 1];
                s2 += xi[c + 2] * xj[c + 2];
                s3 += xi[c + 3] * xj[c + 3];
            }
            for (; c < d; c++) s0 += xi[c] * xj[c]; /* any head_dim: the last d % 4 */
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
        float *out = basis + (size_t)k * d;
        for (int32_t b = 0; b < d / 2; b++) { /* low nibble: element 2b, high: 2b + 1 */
            out[2 * b] = s * (float)(((row[b] & 0xf) ^ 8) - 8);
            out[2 * b + 1] = s * (float)(((row[b] >> 4) ^ 8) - 8);
        }
    }
    for (int32_t k = 0; k < r; k++) {
        s = locks_f16_to_f32(q.c_s[k]);
        for (int32_t i = 0; i < P; i++) coef[i * r + k] = s * (float)q.c_q[i * r + k];
    }
}
