/*
 * locks.c — the LOCKS selector: each page's log-sum-exp estimated from its summary,
 *
 *     s_hj = log sum_i exp(scale * (q_h . mu_j + (V_j^T q_h) . c_i)),
 *
 * reading only the summary (DESIGN.md §1). V_j^T q is computed once per query head and
 * page and reused for the 16 coefficient rows.
 */
#include <math.h>
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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LOCKS_X86 1
#include <immintrin.h>

/* Queries of one group prepared for integer dot products with the quantized summary:
 * q_g ~= qs[g] * qi[g] with qi int8 in [-127, 127]; qp[g] the same values reordered to
 * meet packed int4 rows: for each 32-byte chunk ch of a row (64 elements), the 32 even
 * elements ch*64 + 2b at qp + ch*32 + b, the 32 odd ones at qp + d/2 + ch*32 + b. */
typedef struct {
    int8_t qi[LOCKS_MAX_HEAD_DIM] __attribute__((aligned(32)));
    int8_t qp[LOCKS_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float qs;
    int32_t qsum; /* sum of qi: the int4 rows are read as unsigned nib + 8 */
} q8;

static void q8_prepare(const float *q, int32_t d, q8 *o) {
    float amax = 0.0f;
    for (int32_t c = 0; c < d; c++) amax = fabsf(q[c]) > amax ? fabsf(q[c]) : amax;
    o->qs = amax > 0.0f ? amax / 127.0f : 1.0f;
    const float inv = 1.0f / o->qs;
    o->qsum = 0;
    for (int32_t c = 0; c < d; c++) {
        int32_t v = (int32_t)lrintf(q[c] * inv);
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        o->qi[c] = (int8_t)v;
        o->qsum += v;
    }
    for (int32_t ch = 0; ch < d / 64; ch++)
        for (int32_t b = 0; b < 32; b++) {
            o->qp[ch * 32 + b] = o->qi[ch * 64 + 2 * b];
            o->qp[d / 2 + ch * 32 + b] = o->qi[ch * 64 + 2 * b + 1];
        }
}

/* 8 int32 vectors -> one vector of their 8 horizontal sums (lane k = sum of v[k]). */
__attribute__((target("avx2"))) static __m256i hsum8_epi32(const __m256i *v) {
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), e = _mm256_hadd_epi32(v[6], v[7]);
    a = _mm256_hadd_epi32(a, b);
    c = _mm256_hadd_epi32(c, e);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

/* Same for floats. */
__attribute__((target("avx2"))) static __m256 hsum8_ps(const __m256 *v) {
    __m256 a = _mm256_hadd_ps(v[0], v[1]), b = _mm256_hadd_ps(v[2], v[3]);
    __m256 c = _mm256_hadd_ps(v[4], v[5]), e = _mm256_hadd_ps(v[6], v[7]);
    a = _mm256_hadd_ps(a, b);
    c = _mm256_hadd_ps(c, e);
    return _mm256_add_ps(_mm256_permute2f128_ps(a, c, 0x20), _mm256_permute2f128_ps(a, c, 0x31));
}

__attribute__((target("avx2"))) static int32_t hsum_epi32(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

__attribute__((target("avx2"))) static float hmax_ps(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

enum { QBLOCK = 32 /* pages per inner block: logits kept for the batched exp/log */ };

/* Quantized summaries, r = 8, d a multiple of 64: per page and group head,
 *   V^T q   by int8 x uint4 dot products (maddubs), one pass over the packed rows shared
 *           by the heads, corrected for the +8 offset of the unsigned nibbles;
 *   q . mu  by int8 x int8 dot products;
 *   logits  16 rows of C (as floats) times z = V^T q scaled, summed horizontally;
 * then the page LSE from a batched exp and log over QBLOCK pages. */
__attribute__((target("avx2,fma,f16c"))) static void score_q8_avx2(const locks_sel_ctx *x,
                                                                   locks_sum_arrays a, int32_t j0,
                                                                   int32_t j1, float *scores,
                                                                   int32_t ld) {
    const int32_t d = x->c->d, G = x->group, half = d / 2, nch = d / 64;
    q8 qq[64];
    for (int32_t g = 0; g < G; g++) q8_prepare(x->q + (size_t)g * d, d, &qq[g]);
    const __m256i mask4 = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x88);
    const __m256i ones16 = _mm256_set1_epi16(1);
    float lg[QBLOCK][P];  /* logits of one head, then exp(logit - max) */
    float mx[64][QBLOCK]; /* per head, per page of the block: max logit */
    for (int32_t b0 = j0; b0 < j1; b0 += QBLOCK) {
        const int32_t b1 = b0 + QBLOCK < j1 ? b0 + QBLOCK : j1;
        for (int32_t g = 0; g < G; g++) {
            const q8 *qg = &qq[g];
            const float zq = qg->qs, base8 = 8.0f * (float)qg->qsum;
            for (int32_t j = b0; j < b1; j++) {
                const size_t p = (size_t)x->table[j];
                const uint8_t *vq = a.v_q + p * 8 * half;
                const int8_t *muq = a.mu_q + p * d;
                /* y[k] = sum_c u[k][c] qi[c], u = nib + 8 */
                __m256i yk[8];
                for (int32_t k = 0; k < 8; k++) {
                    __m256i s16 = _mm256_setzero_si256();
                    for (int32_t ch = 0; ch < nch; ch++) {
                        __m256i bytes = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(vq + k * half + ch * 32)), flip);
                        __m256i lo = _mm256_and_si256(bytes, mask4);
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask4);
                        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)(qg->qp + ch * 32))));
                        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)(qg->qp + half + ch * 32))));
                    }
                    yk[k] = _mm256_madd_epi16(s16, ones16);
                }
                __m256 y = _mm256_sub_ps(_mm256_cvtepi32_ps(hsum8_epi32(yk)), _mm256_set1_ps(base8));
                /* z[k] = y[k] * qs * v_s[k] * c_s[k] */
                __m256 vs = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a.v_s + p * 8)));
                __m256 cs = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a.c_s + p * 8)));
                __m256 z = _mm256_mul_ps(_mm256_mul_ps(y, _mm256_set1_ps(zq)), _mm256_mul_ps(vs, cs));
                /* q . mu */
                __m256i macc = _mm256_setzero_si256();
                for (int32_t c = 0; c < d; c += 32) {
                    __m256i m8 = _mm256_loadu_si256((const __m256i *)(muq + c));
                    __m256i q8v = _mm256_load_si256((const __m256i *)(qg->qi + c));
                    macc = _mm256_add_epi32(macc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(m8), _mm256_sign_epi8(q8v, m8)), ones16));
                }
                const float qmu = (float)hsum_epi32(macc) * zq * locks_f16_to_f32(a.mu_s[p]);
                /* logits[i] = scale * (qmu + sum_k C[i][k] z[k]) */
                const int8_t *cq = a.c_q + p * P * 8;
                __m256 prod[8];
                __m256 out[2];
                for (int32_t h2 = 0; h2 < 2; h2++) {
                    for (int32_t i = 0; i < 8; i++) {
                        __m256 crow = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(cq + (h2 * 8 + i) * 8))));
                        prod[i] = _mm256_mul_ps(crow, z);
                    }
                    out[h2] = _mm256_mul_ps(_mm256_add_ps(hsum8_ps(prod), _mm256_set1_ps(qmu)), _mm256_set1_ps(x->scale));
                }
                const float m = hmax_ps(_mm256_max_ps(out[0], out[1]));
                mx[g][j - b0] = m;
                _mm256_storeu_ps(lg[j - b0], _mm256_sub_ps(out[0], _mm256_set1_ps(m)));
                _mm256_storeu_ps(lg[j - b0] + 8, _mm256_sub_ps(out[1], _mm256_set1_ps(m)));
            }
            const int32_t nb = b1 - b0;
            locks_exp_n(&lg[0][0], (size_t)nb * P);
            float *srow = scores + (size_t)g * ld + b0;
            for (int32_t j = 0; j < nb; j++) {
                __m256 s = _mm256_add_ps(_mm256_loadu_ps(lg[j]), _mm256_loadu_ps(lg[j] + 8));
                __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                srow[j] = _mm_cvtss_f32(h);
            }
            locks_log_n(srow, (size_t)nb);
            for (int32_t j = 0; j < nb; j++) srow[j] += mx[g][j];
        }
    }
}
#endif

void locks_sel_locks_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld) {
    const int32_t d = x->c->d, r = x->c->r;
    locks_sum_arrays a = locks_cache_summaries(x->c, x->layer, x->kv_head);
#ifdef LOCKS_X86
    if (x->c->p.summary_prec == LOCKS_SUMMARY_Q && r == 8 && d % 64 == 0 && x->group <= 64 &&
        locks_have_avx2()) {
        score_q8_avx2(x, a, j0, j1, scores, ld);
        return;
    }
#endif
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
