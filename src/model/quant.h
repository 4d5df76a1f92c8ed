/*
 * quant.h — the 5-bit and K-quant weight types: block layouts, dequantization, scale
 * checks and their products with int8 activation blocks (matmul.c dispatches here).
 *
 * ---------------------------------------------------------------------------------
 * Block layouts (ggml's; all little-endian, fp16 = IEEE half)
 * ---------------------------------------------------------------------------------
 *  Q5_0 (6)  32 elements, 22 B: fp16 d, u32 qh, u8 qs[16]
 *            q_j = (qs[j % 16] >> 4 * (j / 16) & 15) | (qh >> j & 1) << 4;  x_j = d (q_j - 16)
 *  Q5_1 (7)  32 elements, 24 B: fp16 d, fp16 m, u32 qh, u8 qs[16];          x_j = d q_j + m
 *  Q4_K (12) 256 elements (8 sub-blocks of 32), 144 B:
 *            fp16 d, fp16 dmin, u8 scales[12] (8 six-bit scales sc_s and mins m_s), u8 qs[128]
 *            sub-block s uses qs[32 (s / 2) + l] >> 4 (s % 2) & 15, l < 32;
 *            x = d sc_s q - dmin m_s.  Six-bit unpacking, s < 4: sc = scales[s] & 63,
 *            m = scales[s + 4] & 63; s >= 4: sc = scales[s + 4] & 15 | scales[s - 4] >> 6 << 4,
 *            m = scales[s + 4] >> 4 | scales[s] >> 6 << 4.
 *  Q5_K (13) 256 elements, 176 B: fp16 d, fp16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
 *            as Q4_K with a fifth bit: q += (qh[l] >> s & 1) << 4.
 *  Q6_K (14) 256 elements (16 sub-blocks of 16), 210 B: u8 ql[128], u8 qh[64], i8 sc[16],
 *            fp16 d (last). Element e = 128 h + 32 k + l (h < 2, k < 4, l < 32):
 *            q = (ql[64 h + 32 (k % 2) + l] >> 4 (k / 2) & 15) | (qh[32 h + l] >> 2 k & 3) << 4;
 *            x = d sc[8 h + 2 k + l / 16] (q - 32).
 *
 * ---------------------------------------------------------------------------------
 * Products with int8 activations
 * ---------------------------------------------------------------------------------
 *  Every type is seen as 32-element sub-blocks, each decoded to 32 small integers q_j, a
 *  scale per half (s_a for j < 16, s_b for j >= 16; equal except Q6_K) and an offset o:
 *  w_j = s(j) q_j + o. Against one activation block (d_x, q_x, ds_x = d_x sum q_x):
 *      w . x ~= d_x (s_a sum_{j<16} q_j q_x,j + s_b sum_{j>=16} q_j q_x,j) + o ds_x
 *  Q5_0: q in [0, 31], o = -16 d; Q5_1: o = m; Q4_K / Q5_K: s = d sc, o = -dmin m;
 *  Q6_K: q - 32 in [-32, 31] (signed), o = 0. The SIMD kernels compute the same integer
 *  sums (only the fp32 accumulation order differs).
 */
#ifndef LOCKS_QUANT_H
#define LOCKS_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "locks.h"
#include "matmul.h"

/* The little-endian u32 at p (any alignment). */
static inline uint32_t quant_rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The six-bit scales and mins of the 8 sub-blocks of a Q4_K / Q5_K block's scales[12]
 * (the unpacking above, four sub-blocks per u32): byte s of *sc is sc_s, of *m m_s. */
static inline void quant_kq_scales_mins(const uint8_t *scales, uint64_t *sc, uint64_t *m) {
    const uint32_t u0 = quant_rd32(scales), u1 = quant_rd32(scales + 4), u2 = quant_rd32(scales + 8);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
    *sc = (uint64_t)sc_hi << 32 | sc_lo;
    *m = (uint64_t)m_hi << 32 | m_lo;
}

/* 1 for the types this module implements (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K). */
int quant_is_ext(ggml_type type);
/* Elements of one block of an ext type (K-quants: 256; Q5_x: 32). */
int32_t quant_block_elems(ggml_type type);
/* Bytes of one block of every block-quantized type the matrix products read (0 for any
 * other); inline, since the kernels ask for it per block. */
static inline size_t quant_block_bytes(ggml_type type) {
    switch (type) {
    case GGML_TYPE_Q8_0: return 34;
    case GGML_TYPE_Q4_0: return 18;
    case GGML_TYPE_Q4_1: return 20;
    case GGML_TYPE_Q5_0: return 22;
    case GGML_TYPE_Q5_1: return 24;
    case GGML_TYPE_Q4_K: return 144;
    case GGML_TYPE_Q5_K: return 176;
    case GGML_TYPE_Q6_K: return 210;
    default: return 0;
    }
}

/* x[n] (n a multiple of 32) as Q4_0 blocks into out[n / 32 * 18]: per 32 values the one
 * of largest magnitude m (the positive one on a tie) sets d = m / -8 (+0 for a zero
 * block), q_j = min(15, floor(x_j / d + 8.5)) (x_j / d lies in [-8, 8]), element j < 16
 * in the low nibble of byte j, j + 16 in its high nibble (GGUF's Q4_0). For the drafts'
 * 4-bit copy of the output matrix (llama.c). */
void quant_q4_0_from_f32(const float *x, int32_t n, uint8_t *out);

/* The same from n_blocks Q8_0 blocks (x = d q as matmul_row_f32 dequantizes them), in
 * integers where it can: bit for bit quant_q4_0_from_f32 of the dequantized row. */
void quant_q4_0_from_q8_0(const uint8_t *src, int32_t n_blocks, uint8_t *out);

/* Block blk of type dequantized to out[quant_block_elems(type)]. */
void quant_dequant_block(ggml_type type, const uint8_t *blk, float *out);

/* Checks every block of a tensor (n_blocks consecutive blocks of any block type,
 * including Q8_0 / Q4_0 / Q4_1) for a non-finite fp16 scale (d, m or dmin). Returns
 * LOCKS_OK, or LOCKS_ERR_FORMAT with *bad_block set to the first bad block. */
locks_status quant_check_scales(ggml_type type, const uint8_t *data, size_t n_blocks, size_t *bad_block);

/* y[t][r] for rows [r0, r1) of an ext-type weight and every vector of the batch (int8
 * activations when a->xq, else fp32 with blocks dequantized on the fly), by the portable
 * loops: the reference the SIMD kernels are tested against, and the path where they
 * do not apply (no AVX2, fp32 activations). */
void quant_rows_c(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1);

#endif
