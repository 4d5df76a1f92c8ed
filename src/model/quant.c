/*
 * quant.c — Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights (layouts and maths in quant.h).
 *
 * Everything works on 32-element sub-blocks: decode_sub (portable) and decode_sub_avx2
 * turn sub-block b of a row into 32 small integers, a scale per 16-element half and an
 * offset, and the products are integer dot products with the int8 activation blocks of
 * matmul.h, scaled once per sub-block. The portable loops are the reference; the AVX2
 * kernels (chosen at run time, AVX-VNNI's vpdpbusd when present) compute the same
 * integer sums.
 */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "util.h"
#include "vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QUANT_X86 1
#include <immintrin.h>
#endif

#define ROW_TILE 8

/* ================================================================================ */
/* Types                                                                            */
/* ================================================================================ */

int quant_is_ext(ggml_type type) {
    return type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_Q4_K ||
           type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K;
}

int32_t quant_block_elems(ggml_type type) {
    return type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1 ? 32 : 256;
}

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return locks_f16_to_f32(h);
}

static inline uint32_t rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Six-bit scale and min of sub-block s (< 8) of a Q4_K / Q5_K block. */
static inline void kq_scale_min(const uint8_t *sc12, int s, int *sc, int *m) {
    if (s < 4) {
        *sc = sc12[s] & 63;
        *m = sc12[s + 4] & 63;
    } else {
        *sc = (sc12[s + 4] & 15) | (sc12[s - 4] >> 6) << 4;
        *m = (sc12[s + 4] >> 4) | (sc12[s] >> 6) << 4;
    }
}

/* ================================================================================ */
/* Portable sub-block decode                                                        */
/* ================================================================================ */

/* Sub-block b (32 elements) of a row: w_j = s[j / 16] q[j] + *o. */
static void decode_sub(ggml_type type, const uint8_t *row, int32_t b, int8_t q[32], float s[2], float *o) {
    switch (type) {
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1: {
        const uint8_t *blk = row + (size_t)b * quant_block_bytes(type);
        float d = h2f(blk);
        int off = type == GGML_TYPE_Q5_1 ? 4 : 2;
        uint32_t qh = rd_u32(blk + off);
        const uint8_t *qs = blk + off + 4;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((qs[j] & 15) | ((qh >> j) & 1) << 4);
            q[j + 16] = (int8_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        s[0] = s[1] = d;
        *o = type == GGML_TYPE_Q5_1 ? h2f(blk + 2) : -16.0f * d;
        return;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        const uint8_t *blk = row + (size_t)(b / 8) * quant_block_bytes(type);
        int sb = b % 8, sc, m;
        kq_scale_min(blk + 4, sb, &sc, &m);
        const uint8_t *qh = blk + 16;
        const uint8_t *qs = blk + 16 + (type == GGML_TYPE_Q5_K ? 32 : 0) + 32 * (sb / 2);
        int sh = 4 * (sb % 2);
        for (int l = 0; l < 32; l++) {
            int v = (qs[l] >> sh) & 15;
            if (type == GGML_TYPE_Q5_K) v |= ((qh[l] >> sb) & 1) << 4;
            q[l] = (int8_t)v;
        }
        s[0] = s[1] = h2f(blk) * (float)sc;
        *o = -h2f(blk + 2) * (float)m;
        return;
    }
    case GGML_TYPE_Q6_K: {
        const uint8_t *blk = row + (size_t)(b / 8) * 210;
        int h = (b % 8) / 4, k = b % 4;
        const uint8_t *ql = blk + 64 * h + 32 * (k % 2);
        const uint8_t *qh = blk + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + 2 * k;
        int shl = 4 * (k / 2), shh = 2 * k;
        for (int l = 0; l < 32; l++)
            q[l] = (int8_t)((((ql[l] >> shl) & 15) | ((qh[l] >> shh) & 3) << 4) - 32);
        float d = h2f(blk + 208);
        s[0] = d * (float)sc[0];
        s[1] = d * (float)sc[1];
        *o = 0.0f;
        return;
    }
    default:
        memset(q, 0, 32);
        s[0] = s[1] = *o = 0.0f;
        return;
    }
}

void quant_dequant_block(ggml_type type, const uint8_t *blk, float *out) {
    int32_t nsub = quant_block_elems(type) / 32;
    for (int32_t b = 0; b < nsub; b++) {
        int8_t q[32];
        float s[2], o;
        decode_sub(type, blk, b, q, s, &o);
        for (int j = 0; j < 32; j++) out[32 * b + j] = s[j / 16] * (float)q[j] + o;
    }
}

locks_status quant_check_scales(ggml_type type, const uint8_t *data, size_t n_blocks, size_t *bad_block) {
    size_t bb;
    int offs[2], n_offs;
    switch (type) {
    case GGML_TYPE_Q8_0: bb = 34; offs[0] = 0; n_offs = 1; break;
    case GGML_TYPE_Q4_0: bb = 18; offs[0] = 0; n_offs = 1; break;
    case GGML_TYPE_Q4_1: bb = 20; offs[0] = 0; offs[1] = 2; n_offs = 2; break;
    case GGML_TYPE_Q5_0: bb = 22; offs[0] = 0; n_offs = 1; break;
    case GGML_TYPE_Q5_1: bb = 24; offs[0] = 0; offs[1] = 2; n_offs = 2; break;
    case GGML_TYPE_Q4_K: bb = 144; offs[0] = 0; offs[1] = 2; n_offs = 2; break;
    case GGML_TYPE_Q5_K: bb = 176; offs[0] = 0; offs[1] = 2; n_offs = 2; break;
    case GGML_TYPE_Q6_K: bb = 210; offs[0] = 208; n_offs = 1; break;
    default: return LOCKS_OK; /* float types have no block scales */
    }
    for (size_t i = 0; i < n_blocks; i++)
        for (int k = 0; k < n_offs; k++) {
            uint16_t h;
            memcpy(&h, data + i * bb + offs[k], 2);
            if ((h & 0x7C00) == 0x7C00) { /* exponent all ones: Inf or NaN */
                if (bad_block) *bad_block = i;
                return LOCKS_ERR_FORMAT;
            }
        }
    return LOCKS_OK;
}

/* ================================================================================ */
/* Portable products                                                                */
/* ================================================================================ */

/* One row . one int8-quantized vector (nsub 32-element blocks). */
static float dot_q8_c(ggml_type type, const uint8_t *row, const matmul_q8 *x, int32_t nsub) {
    float acc = 0.0f;
    for (int32_t b = 0; b < nsub; b++) {
        int8_t q[32];
        float s[2], o;
        decode_sub(type, row, b, q, s, &o);
        int32_t sa = 0, sb = 0;
        for (int j = 0; j < 16; j++) sa += q[j] * x[b].q[j];
        for (int j = 16; j < 32; j++) sb += q[j] * x[b].q[j];
        acc += x[b].d * (s[0] * (float)sa + s[1] * (float)sb) + o * x[b].ds;
    }
    return acc;
}

/* One row . fp32 x, each sub-block dequantized on the fly (exact mode). */
static float dot_f32_c(ggml_type type, const uint8_t *row, const float *x, int32_t nsub) {
    float acc = 0.0f;
    for (int32_t b = 0; b < nsub; b++, x += 32) {
        int8_t q[32];
        float s[2], o;
        decode_sub(type, row, b, q, s, &o);
        for (int j = 0; j < 32; j++) acc += (s[j / 16] * (float)q[j] + o) * x[j];
    }
    return acc;
}

void quant_rows_c(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
    int32_t nsub = w->cols / 32;
    for (int32_t rt = r0; rt < r1; rt += ROW_TILE) {
        int32_t re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
        for (int32_t t = 0; t < a->n; t++)
            for (int32_t r = rt; r < re; r++) {
                const uint8_t *row = w->data + (size_t)r * w->row_bytes;
                y[(size_t)t * ldy + r] = a->xq ? dot_q8_c(w->type, row, a->xq + (size_t)t * nsub, nsub)
                                               : dot_f32_c(w->type, row, a->x + (size_t)t * w->cols, nsub);
            }
    }
}

/* ================================================================================ */
/* AVX2 / AVX-VNNI products                                                         */
/* ================================================================================ */

#ifdef QUANT_X86
#include "simd_avx2.h"

/* fp16 -> fp32 with F16C (h2f calls util's portable conversion: a call per sub-block) */
AVX2_INLINE float h2f_f16c(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set (byte j <- bit j). */
AVX2_INLINE __m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL,
                                            0x0202020202020202LL, 0x0303030303030303LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* (v >> sh) & mask on every byte of 32, for a run-time sh. */
AVX2_INLINE __m256i srl_bytes(__m256i v, int sh, int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(sh)), _mm256_set1_epi8((char)mask));
}

/* The AVX2 twin of decode_sub: the 32 integers as bytes, the per-lane scales of the 8
 * int32 partial sums of a byte dot product (lanes 0-3 hold elements 0-15), the offset. */
AVX2_INLINE void decode_sub_avx2(ggml_type type, const uint8_t *row, int32_t b, __m256i *q, __m256 *s, float *o) {
    if (type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1) {
        const uint8_t *blk = row + (size_t)b * (type == GGML_TYPE_Q5_1 ? 24 : 22);
        int off = type == GGML_TYPE_Q5_1 ? 4 : 2;
        float d = h2f_f16c(blk);
        __m128i raw = _mm_loadu_si128((const __m128i *)(blk + off + 4));
        const __m128i m4 = _mm_set1_epi8(0x0F);
        __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
        __m256i hi = _mm256_and_si256(bits_to_bytes(rd_u32(blk + off)), _mm256_set1_epi8(0x10));
        *q = _mm256_or_si256(nib, hi);
        *s = _mm256_set1_ps(d);
        *o = type == GGML_TYPE_Q5_1 ? h2f_f16c(blk + 2) : -16.0f * d;
    } else if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) {
        const uint8_t *blk = row + (size_t)(b / 8) * (type == GGML_TYPE_Q5_K ? 176 : 144);
        int sb = b % 8, sc, m;
        kq_scale_min(blk + 4, sb, &sc, &m);
        const uint8_t *qs = blk + 16 + (type == GGML_TYPE_Q5_K ? 32 : 0) + 32 * (sb / 2);
        __m256i v = srl_bytes(_mm256_loadu_si256((const __m256i *)qs), 4 * (sb % 2), 15);
        if (type == GGML_TYPE_Q5_K) {
            __m256i h = srl_bytes(_mm256_loadu_si256((const __m256i *)(blk + 16)), sb, 1);
            v = _mm256_or_si256(v, _mm256_slli_epi16(h, 4)); /* h is 0/1 per byte: no carry */
        }
        *q = v;
        *s = _mm256_set1_ps(h2f_f16c(blk) * (float)sc);
        *o = -h2f_f16c(blk + 2) * (float)m;
    } else { /* Q6_K */
        const uint8_t *blk = row + (size_t)(b / 8) * 210;
        int h = (b % 8) / 4, k = b % 4;
        __m256i lo = srl_bytes(_mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (k % 2))), 4 * (k / 2), 15);
        __m256i hb = srl_bytes(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)), 2 * k, 3);
        *q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * h + 2 * k;
        float d = h2f_f16c(blk + 208);
        *s = _mm256_set_m128(_mm_set1_ps(d * (float)sc[1]), _mm_set1_ps(d * (float)sc[0]));
        *o = 0.0f;
    }
}

/* sum over 32 bytes of q_j x_j (q signed or not, |q| <= 63, x int8) as 8 int32 lanes -> fp32.
 * The sign trick makes the unsigned operand |q| and moves q's sign onto x; maddubs
 * cannot saturate (2 * 63 * 128 < 32768). */
AVX2_INLINE __m256 dot_bytes(__m256i q, __m256i x, const int vnni) {
    return dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q), vnni);
}

/* One row against nx (1..4) int8 vectors: each sub-block is decoded once. */
AVX2_INLINE void dotn_body(ggml_type type, const uint8_t *row, const matmul_q8 *const *x, int nx, int32_t nsub,
                           float *out, const int vnni) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float accm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int32_t b = 0; b < nsub; b++) {
        __m256i q;
        __m256 s;
        float o;
        decode_sub_avx2(type, row, b, &q, &s, &o);
        for (int k = 0; k < nx; k++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)x[k][b].q);
            acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(x[k][b].d)), dot_bytes(q, xv, vnni), acc[k]);
            accm[k] += o * x[k][b].ds;
        }
    }
    for (int k = 0; k < nx; k++) out[k] = hsum8(acc[k]) + accm[k];
}

AVX2_INLINE void rows_body(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                           int32_t r1, const int vnni) {
    int32_t nsub = w->cols / 32;
    for (int32_t rt = r0; rt < r1; rt += ROW_TILE) {
        int32_t re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
        for (int32_t t = 0; t < a->n; t += 4) {
            int nx = a->n - t < 4 ? a->n - t : 4;
            const matmul_q8 *x4[4];
            for (int k = 0; k < nx; k++) x4[k] = a->xq + (size_t)(t + k) * nsub;
            for (int32_t r = rt; r < re; r++) {
                float o[4];
                const uint8_t *row = w->data + (size_t)r * w->row_bytes;
                /* nx is 4 for all but the last vectors: the constant lets the loop unroll */
                if (nx == 4) dotn_body(w->type, row, x4, 4, nsub, o, vnni);
                else dotn_body(w->type, row, x4, nx, nsub, o, vnni);
                for (int k = 0; k < nx; k++) y[(size_t)(t + k) * ldy + r] = o[k];
            }
        }
    }
}

AVX2 static void rows_avx2(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
    rows_body(w, a, y, ldy, r0, r1, 0);
}

AVX2 static void rows_vnni(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
    rows_body(w, a, y, ldy, r0, r1, 1);
}
#endif

void quant_rows(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
#ifdef QUANT_X86
    if (a->xq && locks_have_avx2()) {
        if (locks_have_avxvnni()) rows_vnni(w, a, y, ldy, r0, r1);
        else rows_avx2(w, a, y, ldy, r0, r1);
        return;
    }
#endif
    quant_rows_c(w, a, y, ldy, r0, r1);
}
