/*
 * quant.c — Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights (layouts and maths in quant.h).
 *
 * Everything works on 32-element sub-blocks: decode_sub (portable) and decode_sub_avx2
 * turn sub-block b of a row into 32 small integers, a scale per 16-element half and an
 * offset, and the products are integer dot products with the int8 activation blocks of
 * matmul.h, scaled once per sub-block. These portable loops are the reference; the
 * SIMD kernels (matmul_avx2.c, matmul_avx512.c) compute the same integer sums.
 */
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "vmath.h"

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
        uint32_t qh = quant_rd32(blk + off);
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

void quant_q4_0_from_f32(const float *x, int32_t n, uint8_t *out) {
    for (int32_t b = 0; b < n / 32; b++, x += 32, out += 18) {
        float mx = x[0], mn = x[0];
        for (int j = 1; j < 32; j++) {
            mx = x[j] > mx ? x[j] : mx;
            mn = x[j] < mn ? x[j] : mn;
        }
        const float m = mx >= -mn ? mx : mn; /* the largest magnitude, the positive one on a tie */
        const float d = m != 0.0f ? m / -8.0f : 0.0f, id = d != 0.0f ? 1.0f / d : 0.0f; /* +0 for a zero block */
        const uint16_t h = locks_f32_to_f16(d);
        memcpy(out, &h, 2);
        for (int j = 0; j < 16; j++) { /* x id + 8.5 >= 0.5: the cast rounds half up */
            const int lo = (int)(x[j] * id + 8.5f), hi = (int)(x[j + 16] * id + 8.5f);
            out[2 + j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default"))) /* a one-time copy, but 1.5 M blocks for SmolLM2 */
#endif
void quant_q4_0_from_q8_0(const uint8_t *src, int32_t n_blocks, uint8_t *out) {
    for (int32_t b = 0; b < n_blocks; b++, src += 34, out += 18) {
        const int8_t *q = (const int8_t *)(src + 2);
        int mx = q[0], mn = q[0];
        for (int j = 1; j < 32; j++) {
            mx = q[j] > mx ? q[j] : mx;
            mn = q[j] < mn ? q[j] : mn;
        }
        /* d8 q is monotone in q (exact: 11 x 8 bits), so the same element as from floats */
        const float d8 = h2f(src);
        const float m = d8 >= 0.0f ? (mx >= -mn ? d8 * (float)mx : d8 * (float)mn)
                                   : (mn <= -mx ? d8 * (float)mn : d8 * (float)mx);
        const float d = m != 0.0f ? m / -8.0f : 0.0f, id = d != 0.0f ? 1.0f / d : 0.0f; /* +0 for a zero block */
        const uint16_t h = locks_f32_to_f16(d);
        memcpy(out, &h, 2);
        for (int j = 0; j < 16; j++) {
            const int lo = (int)(d8 * (float)q[j] * id + 8.5f), hi = (int)(d8 * (float)q[j + 16] * id + 8.5f);
            out[2 + j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
        }
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
