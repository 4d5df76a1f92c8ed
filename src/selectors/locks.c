/*
 * locks.c — the LOCKS selector: each page's log-sum-exp estimated from its summary,
 *
 *     s_hj = log sum_i exp(scale * (q_h . mu_j + (V_j^T q_h) . c_i)),
 *
 * reading only the summary (docs/DESIGN.md §1). V_j^T q is computed once per query head and
 * page and reused for the 16 coefficient rows.
 */
#include <math.h>
#include <string.h>

#include "selector.h"
#include "summary.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };
/* Quantized scoring asks for the summary of the page this many ahead in the page table
 * (the pages of a sequence need not be adjacent in the pool, so the hardware's stream
 * prefetchers do not always see them coming). */
#define SCORE_AHEAD 4

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
        const float mx = locks_max_n(logit, P);
        scores[(size_t)g * ld + j] = mx + logf((float)locks_exp_sum_n(logit, P, mx));
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

__attribute__((target("avx2"))) static float hmax_ps(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* acc += sum over each group of 4 bytes of u[i] * s[i] (u unsigned, s signed), per
 * 32-bit lane: AVX-VNNI's vpdpbusd. Inline assembly ({vex}: the AVX-VNNI encoding) so
 * the kernel body compiles once for both instruction sets; only score_q8_vnni, chosen
 * when the CPU reports AVX-VNNI, executes it. */
__attribute__((target("avx2"))) static __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
}

/* The same instruction in its AVX-512 VL + VNNI encoding ({evex}), for CPUs with
 * AVX512-VNNI but not AVX-VNNI (AMD Zen 4; Intel from Ice Lake to before Alder Lake):
 * only score_q8_vnni512, chosen when the AVX-512 kernels are on, executes it. */
__attribute__((target("avx2"))) static __m256i dpbusd_evex(__m256i acc, __m256i u, __m256i s) {
    __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
}

/* 2^x for 8 floats x <= 0 (below -126: ~0): the exponent bits take 2^round(x), a
 * degree-4 Taylor polynomial the fraction in [-1/2, 1/2] (relative error < 5e-5).
 * Only page scores use it: ranking needs far less than the int8 query rounding
 * already costs (~1e-2), and the attention itself uses the exact exp. */
__attribute__((target("avx2,fma"))) static __m256 exp2_fast8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(9.6181291e-3f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504109e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022651e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}

/* Quantized summaries, r = 8, d a multiple of 64. Per page, the summary is unpacked
 * once into registers / L1 (nibbles as unsigned bytes, |mu|, the columns of C as
 * floats) and reused by every head of the group:
 *   V^T q   int8 x uint4 dot products (maddubs), corrected for the +8 nibble offset;
 *   q . mu  int8 x int8 dot products;
 *   logits  sum_k z[k] C[:, k] by FMAs on columns of C, z = (V^T q) * scales.
 * C is stored row-major [16][8]; read as dwords, byte b of every dword is column b
 * (even lanes) or 4 + b (odd lanes) of some rows, so shifts give the columns without
 * shuffles; the row order inside the logit vectors is permuted, which the page
 * log-sum-exp does not see. The LSE works in base 2 (logits times log2 e) with one max
 * per head and block of pages (pages 126 octaves below the block's best get mass ~0
 * anyway), exp2_fast8, and one batched log per block.
 * A block of pages goes in two passes: the integer sums of every (page, head) first (the
 * +8 of the nibbles and, with vpdpbusd, the +128 of mu (read as mu ^ 0x80) taken back
 * exactly), then the float work, whose chains (z, the logits) no longer wait on a head's
 * dot products and overlap across heads and pages. The sums are exact below 2^24 (d <=
 * 256), so converting them after the correction gives the same floats as before it: the
 * scores did not change when the kernel was split (logits of both models bit for bit). */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void
score_q8_body(const locks_sel_ctx *x, locks_sum_arrays a, int32_t j0, int32_t j1, float *scores,
              int32_t ld, const int32_t nch /* d / 64: a constant in each caller */,
              const int vnni /* constant: use vpdpbusd for the byte dot products: 1 AVX-VNNI, 2 AVX512-VNNI */) {
    const int32_t d = nch * 64, G = x->group, half = d / 2;
    int32_t qblock = (256 / G) & ~7; /* pages per exp/log batch: multiple of 8, <= 32 */
    qblock = qblock < 8 ? 8 : qblock > 32 ? 32 : qblock;
    q8 qq[64];
    for (int32_t g = 0; g < G; g++) q8_prepare(x->q + (size_t)g * d, d, &qq[g]);
    const __m256i mask4 = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x88);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256 vscale = _mm256_set1_ps(x->scale * 1.44269504f); /* base-2 logits */
    __m256i zidx[4];
    for (int32_t b = 0; b < 4; b++) zidx[b] = _mm256_setr_epi32(b, 4 + b, b, 4 + b, b, 4 + b, b, 4 + b);
    __m256i nib[8][8];   /* [k][2 * nch]: row k's low nibbles then high nibbles, + 8 */
    __m256i mu8[8];      /* mu, 32 bytes per chunk: + 128 (vpdpbusd), or |mu| (maddubs) */
    __m256i msgn[8];     /* mu itself (maddubs: the signs it gives q) */
    float lg[512][P];    /* [g * nbp + page]: scaled logits, then exp(logit - max) */
    int32_t yi[512][8];  /* [page * G + g]: the integer V^T q of the block's pages */
    int32_t mi[32][8];   /* [page][g < 8]: the integer q . mu (G > 8: 8 heads at a time) */
    float qsv[8];
    for (int32_t b0 = j0; b0 < j1; b0 += qblock) {
        const int32_t b1 = b0 + qblock < j1 ? b0 + qblock : j1, nb = b1 - b0, nbp = (nb + 7) & ~7;
        for (int32_t g8 = 0; g8 < G; g8 += 8) {
            const int32_t ng = G - g8 < 8 ? G - g8 : 8;
            for (int32_t g = 0; g < 8; g++) qsv[g] = g < ng ? qq[g8 + g].qs : 0.0f;
            /* pass A, integers only: each page's nibbles unpacked once for its heads, V^T q and
             * q . mu as exact int32 sums into yi and mi (independent of the float work below) */
            for (int32_t j = b0; j < b1; j++) {
                const size_t p = (size_t)x->table[j];
                const uint8_t *vq = a.v_q + p * 8 * half;
                if (g8 == 0 && j + SCORE_AHEAD < j1) { /* the page SCORE_AHEAD on: its whole summary (G > 8: once) */
                    const size_t pf = (size_t)x->table[j + SCORE_AHEAD];
                    for (int32_t o = 0; o < 8 * half; o += 64) _mm_prefetch((const char *)(a.v_q + pf * 8 * half + o), _MM_HINT_T0);
                    for (int32_t o = 0; o < d; o += 64) _mm_prefetch((const char *)(a.mu_q + pf * d + o), _MM_HINT_T0);
                    _mm_prefetch((const char *)(a.c_q + pf * P * 8), _MM_HINT_T0);
                    _mm_prefetch((const char *)(a.c_q + pf * P * 8 + 64), _MM_HINT_T0);
                    _mm_prefetch((const char *)(a.v_s + pf * 8), _MM_HINT_T0);
                    _mm_prefetch((const char *)(a.c_s + pf * 8), _MM_HINT_T0);
                    _mm_prefetch((const char *)(a.mu_s + pf), _MM_HINT_T0);
                }
                for (int32_t k = 0; k < 8; k++)
                    for (int32_t ch = 0; ch < nch; ch++) {
                        __m256i bytes = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(vq + k * half + ch * 32)), flip);
                        nib[k][ch] = _mm256_and_si256(bytes, mask4);
                        nib[k][nch + ch] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask4);
                    }
                const int8_t *muq = a.mu_q + p * d;
                for (int32_t ch = 0; ch < d / 32; ch++) {
                    msgn[ch] = _mm256_loadu_si256((const __m256i *)(muq + ch * 32));
                    mu8[ch] = vnni ? _mm256_xor_si256(msgn[ch], _mm256_set1_epi8((char)0x80)) : _mm256_abs_epi8(msgn[ch]);
                }
                __m256i mv[8];
                for (int32_t g = 0; g < 8; g++) mv[g] = _mm256_setzero_si256();
                for (int32_t g = 0; g < ng; g++) {
                    const q8 *qg = &qq[g8 + g];
                    __m256i yk[8];
                    for (int32_t k = 0; k < 8; k++) {
                        if (vnni) {
                            __m256i acc = _mm256_setzero_si256();
                            for (int32_t ch = 0; ch < nch; ch++) {
                                const __m256i qa = _mm256_load_si256((const __m256i *)(qg->qp + ch * 32));
                                const __m256i qb = _mm256_load_si256((const __m256i *)(qg->qp + half + ch * 32));
                                acc = vnni == 2 ? dpbusd_evex(acc, nib[k][ch], qa) : dpbusd(acc, nib[k][ch], qa);
                                acc = vnni == 2 ? dpbusd_evex(acc, nib[k][nch + ch], qb) : dpbusd(acc, nib[k][nch + ch], qb);
                            }
                            yk[k] = acc;
                        } else {
                            __m256i s16 = _mm256_setzero_si256();
                            for (int32_t ch = 0; ch < nch; ch++) {
                                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(nib[k][ch], _mm256_load_si256((const __m256i *)(qg->qp + ch * 32))));
                                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(nib[k][nch + ch], _mm256_load_si256((const __m256i *)(qg->qp + half + ch * 32))));
                            }
                            yk[k] = _mm256_madd_epi16(s16, ones16);
                        }
                    }
                    /* the +8 of the nibbles taken back: sum_k (v + 8) q - 8 sum q */
                    _mm256_storeu_si256((__m256i *)yi[(j - b0) * G + g8 + g],
                                        _mm256_sub_epi32(hsum8_epi32(yk), _mm256_set1_epi32(8 * qg->qsum)));
                    __m256i macc = _mm256_setzero_si256();
                    for (int32_t ch = 0; ch < d / 32; ch++) {
                        __m256i qv = _mm256_load_si256((const __m256i *)(qg->qi + ch * 32));
                        if (vnni == 2) macc = dpbusd_evex(macc, mu8[ch], qv); /* (mu + 128) . q */
                        else if (vnni) macc = dpbusd(macc, mu8[ch], qv);
                        else macc = _mm256_add_epi32(macc, _mm256_madd_epi16(_mm256_maddubs_epi16(mu8[ch], _mm256_sign_epi8(qv, msgn[ch])), ones16));
                    }
                    mv[g] = vnni ? _mm256_sub_epi32(macc, _mm256_setr_epi32(128 * qg->qsum, 0, 0, 0, 0, 0, 0, 0)) : macc;
                }
                _mm256_storeu_si256((__m256i *)mi[j - b0], hsum8_epi32(mv)); /* lane g: q_g . mu */
            }
            /* pass B, floats: per page the coefficient columns, per head z = (V^T q) scales and
             * the 16 logits; the heads' chains are independent of each other */
            for (int32_t j = b0; j < b1; j++) {
                const size_t p = (size_t)x->table[j];
                __m256 ccol[4][4]; /* [m][b]: rows 4m..4m+3, column b (even lanes) / 4 + b (odd) */
                const int8_t *cq = a.c_q + p * P * 8;
                for (int32_t m = 0; m < 4; m++) {
                    __m256i rows = _mm256_loadu_si256((const __m256i *)(cq + m * 32));
                    ccol[m][0] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(rows, 24), 24));
                    ccol[m][1] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(rows, 16), 24));
                    ccol[m][2] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(rows, 8), 24));
                    ccol[m][3] = _mm256_cvtepi32_ps(_mm256_srai_epi32(rows, 24));
                }
                const __m256 vc = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a.v_s + p * 8))),
                                                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a.c_s + p * 8))));
                const float mus = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(a.mu_s[p]))) * x->scale * 1.44269504f;
                float qm[8];
                _mm256_storeu_ps(qm, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)mi[j - b0])),
                                                                 _mm256_loadu_ps(qsv)),
                                                   _mm256_set1_ps(mus)));
                for (int32_t g = 0; g < ng; g++) {
                    const q8 *qg = &qq[g8 + g];
                    __m256 y = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)yi[(j - b0) * G + g8 + g]));
                    __m256 z = _mm256_mul_ps(_mm256_mul_ps(y, _mm256_set1_ps(qg->qs)), vc);
                    __m256 zb[4], t[4];
                    for (int32_t b = 0; b < 4; b++) zb[b] = _mm256_permutevar8x32_ps(z, zidx[b]);
                    for (int32_t m = 0; m < 4; m++) {
                        __m256 acc = _mm256_mul_ps(ccol[m][0], zb[0]);
                        acc = _mm256_fmadd_ps(ccol[m][1], zb[1], acc);
                        acc = _mm256_fmadd_ps(ccol[m][2], zb[2], acc);
                        t[m] = _mm256_fmadd_ps(ccol[m][3], zb[3], acc);
                    }
                    const __m256 qmu = _mm256_broadcast_ss(&qm[g]);
                    float *row = lg[(g8 + g) * nbp + (j - b0)];
                    _mm256_storeu_ps(row, _mm256_fmadd_ps(_mm256_hadd_ps(t[0], t[1]), vscale, qmu));
                    _mm256_storeu_ps(row + 8, _mm256_fmadd_ps(_mm256_hadd_ps(t[2], t[3]), vscale, qmu));
                }
            }
        }
        for (int32_t g = 0; g < G; g++) {
            float(*rows)[P] = &lg[g * nbp];
            __m256 vmx = _mm256_set1_ps(-INFINITY);
            for (int32_t jj = 0; jj < nb; jj++)
                vmx = _mm256_max_ps(vmx, _mm256_max_ps(_mm256_loadu_ps(rows[jj]), _mm256_loadu_ps(rows[jj] + 8)));
            const float mx = hmax_ps(vmx);
            vmx = _mm256_set1_ps(mx);
            float sums[32];
            for (int32_t jj = 0; jj < nbp; jj += 8) {
                __m256 v[8];
                for (int32_t i = 0; i < 8; i++) {
                    if (jj + i < nb) {
                        v[i] = _mm256_add_ps(exp2_fast8(_mm256_sub_ps(_mm256_loadu_ps(rows[jj + i]), vmx)),
                                             exp2_fast8(_mm256_sub_ps(_mm256_loadu_ps(rows[jj + i] + 8), vmx)));
                    } else {
                        v[i] = _mm256_set1_ps(1.0f); /* padding, not stored */
                    }
                }
                _mm256_storeu_ps(sums + jj, _mm256_max_ps(hsum8_ps(v), _mm256_set1_ps(1e-30f)));
            }
            locks_log_n(sums, (size_t)nbp);
            float *srow = scores + (size_t)g * ld + b0;
            for (int32_t jj = 0; jj < nb; jj++) srow[jj] = sums[jj] + mx * 0.69314718f; /* ln 2 */
        }
    }
}

/* fp32 summaries (the unquantized mode, rank R a constant): per page and head, q . mu
 * and V^T q as R + 1 vector accumulators over d (one pass over q), reduced by
 * hsum8_ps; the 16 logits by scalar FMAs over the coefficient rows; the page LSE with
 * the exact vector exp. Same arithmetic as score_page_f32, in another order. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
score_f32_body(const locks_sel_ctx *x, locks_sum_arrays a, int32_t j0, int32_t j1, float *scores,
               int32_t ld, const int32_t R) {
    const int32_t d = x->c->d;
    for (int32_t j = j0; j < j1; j++) {
        const size_t p = (size_t)x->table[j];
        const float *mu = a.mu + p * d, *basis = a.basis + p * R * d, *coef = a.coef + p * P * R;
        for (int32_t g = 0; g < x->group; g++) {
            const float *q = x->q + (size_t)g * d;
            __m256 acc[16], am = _mm256_setzero_ps();
            for (int32_t k = 0; k < 16; k++) acc[k] = _mm256_setzero_ps();
            for (int32_t c = 0; c < d; c += 8) {
                const __m256 qv = _mm256_loadu_ps(q + c);
                am = _mm256_fmadd_ps(_mm256_loadu_ps(mu + c), qv, am);
                for (int32_t k = 0; k < R; k++)
                    acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(basis + (size_t)k * d + c), qv, acc[k]);
            }
            float y[16], logit[P];
            _mm256_storeu_ps(y, hsum8_ps(acc));
            if (R > 8) _mm256_storeu_ps(y + 8, hsum8_ps(acc + 8));
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            const float qm = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
            for (int32_t i = 0; i < P; i++) {
                float sum = qm;
                for (int32_t k = 0; k < R; k++) sum += coef[i * R + k] * y[k];
                logit[i] = x->scale * sum;
            }
            const float mx = locks_max_n(logit, P);
            scores[(size_t)g * ld + j] = mx + logf((float)locks_exp_sum_n(logit, P, mx));
        }
    }
}

__attribute__((target("avx2,fma"))) static int score_f32_avx2(const locks_sel_ctx *x, locks_sum_arrays a,
                                                              int32_t j0, int32_t j1, float *scores,
                                                              int32_t ld) {
    switch (x->c->r) {
    case 8: score_f32_body(x, a, j0, j1, scores, ld, 8); return 1;
    case 15: score_f32_body(x, a, j0, j1, scores, ld, 15); return 1;
    default: return 0; /* other ranks: the portable loop */
    }
}

/* One copy of the kernel per head dim (so the chunk loops unroll) and per dot-product
 * instruction: AVX2 maddubs + madd, or vpdpbusd where the CPU has it (AVX-VNNI's
 * encoding, else AVX512-VNNI's on 256-bit registers). The integer sums are the same
 * (maddubs cannot saturate here: 16 products of a nibble and an int8 per 16-bit lane
 * stay below 32,767), so are the scores. */
#define SCORE_Q8(name, VNNI)                                                                                     \
    __attribute__((target("avx2,fma,f16c"))) static void name(const locks_sel_ctx *x, locks_sum_arrays a, int32_t j0, \
                                                              int32_t j1, float *scores, int32_t ld) {           \
        switch (x->c->d) {                                                                                         \
        case 64: score_q8_body(x, a, j0, j1, scores, ld, 1, VNNI); break;                                          \
        case 128: score_q8_body(x, a, j0, j1, scores, ld, 2, VNNI); break;                                         \
        default: score_q8_body(x, a, j0, j1, scores, ld, 4, VNNI); break; /* 256 */                                \
        }                                                                                                          \
    }
SCORE_Q8(score_q8_avx2, 0)
SCORE_Q8(score_q8_vnni, 1)    /* AVX-VNNI */
#undef SCORE_Q8
/* AVX512-VNNI on 256-bit registers, compiled for AVX-512 VL so that the kernel's vectors
 * can live in all 32 registers (the 16 of AVX2 spill the unpacked summary to the stack):
 * the same instructions on the same values otherwise, so the same scores. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))) static void
score_q8_vnni512(const locks_sel_ctx *x, locks_sum_arrays a, int32_t j0, int32_t j1, float *scores, int32_t ld) {
    switch (x->c->d) {
    case 64: score_q8_body(x, a, j0, j1, scores, ld, 1, 2); break;
    case 128: score_q8_body(x, a, j0, j1, scores, ld, 2, 2); break;
    default: score_q8_body(x, a, j0, j1, scores, ld, 4, 2); break; /* 256 */
    }
}
#endif

void locks_sel_locks_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld) {
    const int32_t d = x->c->d, r = x->c->r;
    locks_sum_arrays a = locks_cache_summaries(x->c, x->layer, x->kv_head);
#ifdef LOCKS_X86
    if (x->c->p.summary_prec == LOCKS_SUMMARY_Q && r == 8 && (d == 64 || d == 128 || d == 256) &&
        x->group <= 64 && locks_have_avx2()) {
        if (locks_have_avxvnni()) score_q8_vnni(x, a, j0, j1, scores, ld);
        else if (locks_have_avx512()) score_q8_vnni512(x, a, j0, j1, scores, ld); /* AVX512-VNNI */
        else score_q8_avx2(x, a, j0, j1, scores, ld);
        return;
    }
    if (x->c->p.summary_prec == LOCKS_SUMMARY_F32 && locks_have_avx2() &&
        score_f32_avx2(x, a, j0, j1, scores, ld))
        return;
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
