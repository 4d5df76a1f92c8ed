/*
 * matmul.h — matrix products on quantized GGUF weights, multi-threaded.
 *
 * A weight W is `rows x cols`, row-major in its ggml type (GGUF ne[0] = cols is the
 * contiguous dimension, ne[1] = rows). Products compute y = W x for one or a batch of
 * activation vectors x.
 *
 * For the block-quantized types (Q8_0, Q4_0, Q4_1) the activations are first quantized
 * to int8 in 32-element blocks (one fp32 scale per block, like llama.cpp's q8 activation
 * blocks), and each block product is an integer dot product scaled once:
 *     Q8_0:  d_w d_x sum q_w q_x
 *     Q4_0:  d_w d_x sum (n_w - 8) q_x
 *     Q4_1:  d_w d_x sum n_w q_x + m_w (d_x sum q_x)
 * The float types (F32, F16, BF16) use the fp32 activations directly.
 *
 * Work is split over rows in tasks of the caller's pool; a batch of T vectors reuses
 * each block of weight rows from cache across all T (prefill).
 */
#ifndef LOCKS_MATMUL_H
#define LOCKS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "pool.h"

typedef struct {
    const uint8_t *data; /* rows * row_bytes */
    ggml_type type;
    int32_t rows, cols;
    size_t row_bytes;
    const uint8_t *packed; /* NULL, or the rows repacked by matmul_pack (below) */
} matmul_weight;

/* One 32-element activation block: x ~= d * q; ds = d * sum(q) (for the Q4_1 / Q4_0
 * offset terms). */
typedef struct {
    float d;
    float ds;
    int8_t q[32];
} matmul_q8;

/* Activations of one batch in whichever form the weight type wants. */
typedef struct {
    const float *x;      /* [n][cols] fp32 */
    const matmul_q8 *xq; /* [n][cols / 32] for block types; NULL: fp32 activations
                          * with blocks dequantized on the fly (slow, for validation) */
    int32_t n, cols;
} matmul_act;

/* Builds the fp16 -> fp32 table (once, thread-safe; matmul and matmul_row_f32 call it). */
void matmul_init_tables(void);

/* Quantizes x[n][cols] (cols a multiple of 32) to xq[n][cols / 32]. */
void matmul_quantize(const float *x, int32_t n, int32_t cols, matmul_q8 *xq);
/* 1 if the weight type needs quantized activations. */
int matmul_wants_q8(ggml_type type);

/* y[t][r] = sum_c W[r][c] x[t][c] for t < a->n, r < W->rows; y row stride = ldy floats.
 * Runs on the pool (NULL: inline). */
void matmul(locks_pool *pool, const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy);

/* matmul of n weights on the same activations, y[i] (row stride w[i]->rows) = w[i] . x,
 * as one pool job (up to 4 products a job): the Q, K and V products of a layer, or the
 * gate and up ones, wake the pool once and leave no thread idle between them. Each
 * y[i] is bit for bit what matmul gives. */
void matmul_n(locks_pool *pool, const matmul_weight *const *w, int32_t n, const matmul_act *a, float *const *y);

/* Rows [r0, r1) of y as matmul computes them, with the AVX-512 kernels
 * (matmul_avx512.c; call only when locks_have_avx512()). Returns 0, doing nothing, for
 * what they do not cover (block types without int8 activations, rows of more than
 * 65,536 columns, non-x86 builds). */
int matmul_rows_avx512(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1);
/* matmul_rows_avx512 with the prefill path (8 or more tokens: each tile of weight rows
 * decoded once for many token tiles) on (prefill 1, what matmul_rows_avx512 does) or off
 * (0: every 4-token tile decodes the rows again); the outputs are the same bit for bit
 * (test_matmul_paths checks it). */
int matmul_rows_avx512_tiles(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                             int32_t r1, int prefill);

/* Rows [r0, r1) of y as matmul computes them, with the AVX2 kernels (matmul_avx2.c;
 * call only when locks_have_avx2(); AVX-VNNI's vpdpbusd where locks_have_avxvnni()).
 * Returns 0, doing nothing, for what they do not cover (float types, fp32 activations,
 * rows of more than 65,536 columns, non-x86 builds). Each output is the same bit for
 * bit whatever a->n and the token's place in the batch. */
int matmul_rows_avx2(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1);

/* Q4_1 and Q8_0 weights (of at most MATMUL_PACK_MAX_BYTES) repacked for the AVX-512
 * kernels, 16 rows in the lanes (MATMUL_PACK_ROWS). For each group of 16 rows (the last
 * padded with zero rows) and each 32-column block: Q4_1, 320 bytes: the 16 rows' d
 * (fp16), their m (fp16), then 4 x 64 bytes, vector j holding in lane i the quant bytes
 * 4j .. 4j + 3 of row i's block (low nibbles: elements 4j .. 4j + 3; high: 16 + 4j ..);
 * Q8_0, 544 bytes: the 16 d, then 8 x 64 bytes, vector j holding in lane i row i's quants
 * 4j .. 4j + 3 plus 128 (unsigned for vpdpbusd; the kernel takes 128 times the
 * activation block's sum back). One vpdpbusd per 4 columns then serves 16 rows, the
 * block scales apply to 16 rows at once, and no sum crosses lanes; a row's output is
 * formed the same way whatever the number of tokens (decode, verify, prefill), so bit
 * for bit alike across batch sizes. matmul_pack fills w->packed when the type is Q4_1
 * or Q8_0, the weight at most MATMUL_PACK_MAX_BYTES and this CPU has the AVX-512
 * kernels (0; w unchanged otherwise, also 0), or fails with -1 (out of memory, w
 * unchanged); matmul_pack_free releases it. w->data stays the reference for the other
 * paths. */
#define MATMUL_PACK_ROWS 16
#define MATMUL_PACK_BLOCK_BYTES 320    /* Q4_1 */
#define MATMUL_PACK_Q8_BLOCK_BYTES 544 /* Q8_0: d x 16, then 8 x 64 bytes of q + 128 */
#define MATMUL_PACK_MAX_BYTES ((size_t)64 << 20) /* larger weights stay as they are */
int matmul_pack(matmul_weight *w);
void matmul_pack_free(matmul_weight *w);
/* The packed bytes matmul_pack would allocate for w (0: it would not pack it). */
size_t matmul_pack_bytes(const matmul_weight *w);
/* Rows [r0, r1) of the product of packed weights, written at y[t ldy + row - ybase]
 * (ybase 0: as matmul_rows_avx512; r0: into a scratch of the range alone). 0 (nothing
 * done) when w is not packed or a has no int8 activations. For one row alone as a full
 * product gives it (the drafts' head): matmul_row_exact. */
int matmul_rows_avx512_packed(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                              int32_t r1, int32_t ybase);
/* y[t] (t < a->n, stride ldy) = row r of W x, bit for bit what matmul gives it. */
void matmul_row_exact(const matmul_weight *w, const matmul_act *a, int32_t r, float *y, int32_t ldy);

/* Row r of W dequantized to fp32 (out[cols]); for embeddings. Read from the packed copy
 * when there is one (the same values). */
void matmul_row_f32(const matmul_weight *w, int32_t r, float *out);

#endif
