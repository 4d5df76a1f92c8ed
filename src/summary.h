/*
 * summary.h — page summaries: build (Jacobi eigendecomposition of the 16x16 Gram
 * matrix of the centred keys), quantize and dequantize.
 *
 * A summary of one page of 16 keys k_i (d floats each) is mu = mean_i k_i, an
 * orthonormal basis V (r rows of d floats: the top-r right singular vectors of
 * X = K - mu) and coefficients C = X V (16 x r), so k_i ~= mu + sum_k C[i][k] V[k].
 * Null directions (singular value below 1e-6 of the largest, or a zero page) get a
 * zero basis row and zero coefficients. Rank 15 reconstructs a page exactly.
 *
 * Quantized format (LOCKS_SUMMARY_Q), per (page, KV head); every fp16 scale is
 * rounded *up* to the next fp16 value so that |x / scale| <= qmax always holds and
 * each element's round-trip error is at most scale / 2:
 *   mu_q   int8[d]      mu[c] ~= mu_s * mu_q[c],             |mu_q| <= 127
 *   mu_s   fp16         max_c |mu[c]| / 127
 *   v_q    uint8[r][d/2] two signed 4-bit values per byte, element 2i in the low
 *                       nibble, 2i+1 in the high nibble, two's complement, [-7, 7]:
 *                       V[k][c] ~= v_s[k] * nib(k, c)
 *   v_s    fp16[r]      max_c |V[k][c]| / 7
 *   c_q    int8[16][r]  C[i][k] ~= c_s[k] * c_q[i][k],        |c_q| <= 127
 *   c_s    fp16[r]      max_i |C[i][k]| / 127
 * Total d + 2 + r d / 2 + 2 r + 16 r + 2 r bytes (802 at d = 128, r = 8).
 */
#ifndef LOCKS_SUMMARY_H
#define LOCKS_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

/* Pointers to one quantized summary (any may point into the cache's SoA arrays). */
typedef struct {
    int8_t *mu_q;     /* [d] */
    uint16_t *mu_s;   /* [1] */
    uint8_t *v_q;     /* [r][d/2] */
    uint16_t *v_s;    /* [r] */
    int8_t *c_q;      /* [16][r] */
    uint16_t *c_s;    /* [r] */
} locks_qsummary;

/* Quantizes an fp32 summary (mu[d], basis[r][d], coef[16][r]) into q. d even. */
void locks_summary_quantize(int32_t d, int32_t r, const float *mu, const float *basis,
                            const float *coef, locks_qsummary q);
/* Dequantizes q back to fp32 mu[d], basis[r][d], coef[16][r]. */
void locks_summary_dequantize(int32_t d, int32_t r, locks_qsummary q, float *mu, float *basis,
                              float *coef);

/* Checks one stored summary record (locks_cache_read_summaries' layout, locks_summary_bytes
 * long, any alignment): any int8 / int4 bits are valid, the fp16 scales (Q) or every
 * float (F32) must be finite, so scoring from it gives finite numbers. Returns the byte
 * offset of the first bad value in the record, or SIZE_MAX if there is none. */
size_t locks_summary_record_bad(int32_t d, int32_t r, locks_summary_prec prec, const void *rec);

/* The signed value of element c of a packed int4 row. */
int32_t locks_int4_get(const uint8_t *row, int32_t c);

#endif
