/*
 * matmul_avx512.c — the AVX-512 kernels (F, BW, VL, VNNI) of matmul.c, for every block
 * type with int8 activations (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) and the
 * float types (F32, F16, BF16). Compiled with target attributes and chosen at run time
 * (locks_have_avx512); matmul.c keeps the AVX2 and portable versions.
 *
 * One 512-bit vpdpbusd takes 64 weight bytes, two 32-element blocks (a "unit"): the
 * weights as unsigned bytes u_j = q_j + bias (bias 128 for Q8_0, 8 for Q4_0, 16 for
 * Q5_0, 32 for Q6_K, 0 for the types with a float offset), the activations as signed
 * bytes, and its 16 int32 lanes start from -bias * (sum of the lane's 4 activations) so
 * that they end as the exact integer sums of q_j x_j that the portable loops form. A
 * chunk is 8 blocks (one super-block for the K-quants), 4 units. Each lane is scaled by
 * its weight scale (d, or d sc_s for K-quants, per 16-element half for Q6_K: a "slot")
 * times the activation block's d_x, and the float offsets (Q4_1 / Q5_1: m; Q4_K / Q5_K:
 * -dmin m_s) add m * d_x sum(q_x) once per chunk. Only the fp32 accumulation order
 * differs from the portable loops.
 *
 * A tile is 4 weight rows x 4 tokens (16 accumulators): each weight unit is decoded once
 * and meets 4 activation vectors, each activation vector meets 4 rows (prefill as
 * matrix-matrix work; a decode token uses the 4 x 1 tile, or 1 x 1 on a weight far
 * larger than the cache, which it streams). Each tile prefetches the next tile's rows.
 * The tiles read the file's layout; Q4_1 and Q8_0 weights repacked at load (matmul_pack:
 * 16 rows in the lanes) go through rows_packed instead, below. A prefill (8 tokens or more)
 * decodes each tile of weight rows once, units and lane scales into an L1/L2-sized
 * dec_tile, for the 4-token tiles of a group of up to 64 tokens, instead of once per
 * 4-token tile; each output's sums are formed in the same order, so bit for bit alike.
 */
#include "matmul.h"

#include <string.h>

#include "matmul_tile.h"
#include "quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define AVX512 __attribute__((target(AVX512_TARGET)))
#define AVX512_INLINE __attribute__((target(AVX512_TARGET), always_inline)) static inline

#define TILE_R 4           /* weight rows per tile */
#define TILE_T 4           /* tokens per tile */
#define TILE_TX 5          /* tokens per tile at most: a full tile and one rider (a verify of 5) */
#define MAX_BLOCKS 2048    /* activation blocks per token the scratch holds (65,536 cols) */
/* A single token against a weight above this streams it from memory: one row at a
 * time then (interleaved A/B runs: ~15-20% faster on Gemma 3's 168 MB output matrix,
 * ~25% slower on cache-resident ones, where the 4-row tile shares each activation). */
#define STREAM_BYTES ((size_t)64 << 20)
/* Prefill: from PREFILL_MIN full-tile tokens on, each row tile is decoded once into a
 * dec_tile (rows of at most DEC_CHUNKS chunks, 8,192 columns: 70 KB) and meets the
 * token tiles of a group of at most PREFILL_GROUP tokens (their activations stay in L2). */
#define PREFILL_MIN 8
#define PREFILL_GROUP 64
#define DEC_CHUNKS 32
#define AS_FLOATS MATMUL_AS_FLOATS /* act_scales' floats per array */
_Static_assert(2 * TILE_T * MAX_BLOCKS == AS_FLOATS, "act_scales holds 2 tiles of 4 tokens of 2048 blocks");

/* int32 lane -> scale slot of unit u, per layout (see the unit loaders). */
enum { KIND_NIB, KIND_Q8, KIND_KQ, KIND_Q6K };
static const int32_t slot_of_lane[4][4][16] __attribute__((aligned(64))) = {
    /* NIB */ {{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1},
               {2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 3, 3},
               {4, 4, 4, 4, 5, 5, 5, 5, 4, 4, 4, 4, 5, 5, 5, 5},
               {6, 6, 6, 6, 7, 7, 7, 7, 6, 6, 6, 6, 7, 7, 7, 7}},
    /* Q8 */ {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
              {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
              {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
              {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7}},
    /* KQ */ {{0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2},
              {1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3},
              {4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6},
              {5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7}},
    /* Q6K */ {{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
               {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
               {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
               {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}}};
/* Q6_K's 16 slots are half blocks: slot j takes the d_x of block j / 2. */
static const int32_t half_to_block[16] __attribute__((aligned(64))) = {0, 0, 1, 1, 2, 2, 3, 3,
                                                                       4, 4, 5, 5, 6, 6, 7, 7};

/* ================================================================================ */
/* Types                                                                            */
/* ================================================================================ */

static inline int kind_of(ggml_type t) {
    switch (t) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1: return KIND_Q8; /* the two blocks one after the other */
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: return KIND_KQ;
    case GGML_TYPE_Q6_K: return KIND_Q6K;
    default: return KIND_NIB; /* Q4_0, Q4_1: low nibbles of both blocks, then high */
    }
}

static inline int bias_of(ggml_type t) {
    switch (t) {
    case GGML_TYPE_Q8_0: return 128;
    case GGML_TYPE_Q4_0: return 8;
    case GGML_TYPE_Q5_0: return 16;
    case GGML_TYPE_Q6_K: return 32;
    default: return 0;
    }
}

/* 1 when the type has a float offset per block (m or -dmin m_s). */
static inline int has_min(ggml_type t) {
    return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K;
}

AVX512_INLINE float rdh(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ================================================================================ */
/* Weights: chunk scales and units                                                  */
/* ================================================================================ */

/* Chunk c of a row: *sl the weight scale of each slot (8 blocks / sub-blocks, 16 half
 * blocks for Q6_K), *mn the float offset of each of the 8 blocks (has_min types). nblk
 * (< 8 only in the last chunk of a 32-element type) blocks are there. */
AVX512_INLINE void chunk_scales(ggml_type t, const uint8_t *row, int32_t c, int nblk, __m512 *sl, __m256 *mn) {
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) {
        const uint8_t *blk = row + (size_t)c * quant_block_bytes(t);
        uint64_t sc8, m8; /* the six-bit scales and mins of the 8 sub-blocks, a byte each */
        quant_kq_scales_mins(blk + 4, &sc8, &m8);
        __m128i sc = _mm_cvtsi64_si128((long long)sc8);
        __m128i m = _mm_cvtsi64_si128((long long)m8);
        __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc));
        __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m));
        *sl = _mm512_castps256_ps512(_mm256_mul_ps(scf, _mm256_set1_ps(rdh(blk))));
        *mn = _mm256_mul_ps(mf, _mm256_set1_ps(-rdh(blk + 2)));
    } else if (t == GGML_TYPE_Q6_K) {
        const uint8_t *blk = row + (size_t)c * 210;
        __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
        *sl = _mm512_mul_ps(sc, _mm512_set1_ps(rdh(blk + 208)));
        *mn = _mm256_setzero_ps();
    } else {
        /* the dword at each block's start: d, then m (Q4_1 / Q5_1) or quant bytes */
        size_t bb = quant_block_bytes(t);
        const uint8_t *p = row + (size_t)c * 8 * bb;
        uint32_t v[8];
        for (int k = 0; k < 8; k++) v[k] = k < nblk ? quant_rd32(p + k * bb) : 0;
        __m256i g = _mm256_setr_epi32((int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], (int)v[6], (int)v[7]);
        *sl = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_cvtepi32_epi16(g)));
        *mn = has_min(t) ? _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(g, 16))) : _mm256_setzero_ps();
    }
}

/* Unit u (< 4) of chunk c as 64 unsigned bytes, in the order of the unit's activation
 * vector (act_unit). two: the unit's second block is there (the last chunk of a
 * 32-element type may end after one). */
AVX512_INLINE __m512i weight_unit(ggml_type t, const uint8_t *row, int32_t c, int u, int two) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    if (t == GGML_TYPE_Q8_0) {
        const uint8_t *b0 = row + ((size_t)c * 8 + 2 * (size_t)u) * 34 + 2;
        __m256i w0 = _mm256_loadu_si256((const __m256i *)b0);
        __m256i w1 = two ? _mm256_loadu_si256((const __m256i *)(b0 + 34)) : _mm256_set1_epi8((char)0x80);
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1) {
        size_t bb = quant_block_bytes(t);
        int qoff = t == GGML_TYPE_Q4_0 ? 2 : t == GGML_TYPE_Q4_1 ? 4 : t == GGML_TYPE_Q5_0 ? 6 : 8;
        const uint8_t *b0 = row + ((size_t)c * 8 + 2 * (size_t)u) * bb;
        __m128i qa = _mm_loadu_si128((const __m128i *)(b0 + qoff));
        __m128i qb = two ? _mm_loadu_si128((const __m128i *)(b0 + bb + qoff)) : _mm_setzero_si128();
        __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), qb, 1);
        /* [low nibbles of b0, of b1, high nibbles of b0, of b1] */
        __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
        if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1) /* elements 0-15 of b0, of b1, 16-31 of b0, of b1 */
            return _mm512_and_si512(w, m4);
        /* Q5: b0's 32 elements, then b1's, so that qh (element j <- bit j) is the byte mask */
        w = _mm512_and_si512(_mm512_shuffle_i64x2(w, w, _MM_SHUFFLE(3, 1, 2, 0)), m4);
        int hoff = t == GGML_TYPE_Q5_0 ? 2 : 4;
        uint64_t bits = quant_rd32(b0 + hoff) | (uint64_t)(two ? quant_rd32(b0 + bb + hoff) : 0) << 32;
        return _mm512_mask_add_epi8(w, (__mmask64)bits, w, _mm512_set1_epi8(16));
    }
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) {
        /* 64 bytes of qs hold sub-blocks 4h, 4h + 2 (low nibbles) and 4h + 1, 4h + 3 (high) */
        const uint8_t *blk = row + (size_t)c * quant_block_bytes(t);
        int h = u >> 1, hi = u & 1;
        __m512i z = _mm512_loadu_si512((const void *)(blk + (t == GGML_TYPE_Q5_K ? 48 : 16) + 64 * h));
        __m512i w = _mm512_and_si512(hi ? _mm512_srli_epi16(z, 4) : z, m4);
        if (t == GGML_TYPE_Q5_K) { /* bit s of qh[l] is the fifth bit of sub-block s */
            __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
            int s0 = 4 * h + hi;
            __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << s0)), _mm256_set1_epi8((char)(1 << (s0 + 2))), 1);
            w = _mm512_mask_add_epi8(w, _mm512_test_epi8_mask(qh, sel), w, _mm512_set1_epi8(16));
        }
        return w;
    }
    /* Q6_K: ql[64 h ..] low nibbles are blocks 4h, 4h + 1, high nibbles 4h + 2, 4h + 3;
     * qh[32 h + l] bits 2k, 2k + 1 are the top bits of block 4h + k */
    const uint8_t *blk = row + (size_t)c * 210;
    int h = u >> 1, hi = u & 1;
    __m512i l = _mm512_loadu_si512((const void *)(blk + 64 * h));
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
    __m512i top;
    if (hi) {
        l = _mm512_srli_epi16(l, 4);
        top = _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
    } else {
        top = _mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1));
    }
    /* (l & 0x0F) | (top & 0x30) */
    return _mm512_ternarylogic_epi32(_mm512_and_si512(l, m4), top, _mm512_set1_epi8(0x30), 0xF8);
}

/* ================================================================================ */
/* Activations                                                                      */
/* ================================================================================ */

/* The activation bytes of unit u of chunk c (x: the token's blocks), in weight_unit's order. */
AVX512_INLINE __m512i act_unit(ggml_type t, const matmul_q8 *x, int32_t c, int u, int two) {
    int32_t b0, b1;
    int kind = kind_of(t);
    if (kind == KIND_KQ) {
        b0 = 8 * c + 4 * (u >> 1) + (u & 1);
        b1 = b0 + 2;
    } else {
        b0 = 8 * c + 2 * u;
        b1 = b0 + 1;
    }
    __m256i xa = _mm256_loadu_si256((const __m256i *)x[b0].q);
    __m256i xb = two ? _mm256_loadu_si256((const __m256i *)x[b1].q) : _mm256_setzero_si256();
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(xa), xb, 1);
    if (kind == KIND_NIB) v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)); /* a.lo b.lo a.hi b.hi */
    return v;
}

/* act_scales (matmul_tile.h): slots [0, TILE_T) hold a tile's tokens (a group's tokens
 * in the prefill path), the ones after them the tail tokens that ride along the last full
 * tile (rows_q). */

/* ================================================================================ */
/* The tile                                                                         */
/* ================================================================================ */

/* Token k of a tile's accumulators: acc[r][k], the rider's (k = TILE_T) rid[r]. Two
 * arrays, not one of TILE_TX columns: GCC keeps a 4 x 4 array in registers but not a
 * 4 x 5 one (the 4-token tiles ran 10-30% slower with it). */
#define ACC(r, k) (*((k) < TILE_T ? &acc[r][(k) < TILE_T ? (k) : 0] : &rid[r]))

/* Chunk c (nblk blocks) of NR rows x NT tokens (scales in slots k0 ..) into acc (and rid
 * for a fifth token). */
AVX512_INLINE void tile_chunk(ggml_type t, const uint8_t *const *rows, const matmul_q8 *const *x, const act_scales *as,
                              int k0, int32_t c, const int nblk, __m512 acc[TILE_R][TILE_T], __m512 rid[TILE_R],
                              const int NR, const int NT) {
    const int kind = kind_of(t), bias = bias_of(t), mins = has_min(t);
    __m512 sl[TILE_R];
    __m256 mn[TILE_R];
    for (int r = 0; r < NR; r++) chunk_scales(t, rows[r], c, nblk, &sl[r], &mn[r]);
    __m512 dxs[TILE_TX];
    for (int k = 0; k < NT; k++) {
        __m512 d8 = _mm512_castps256_ps512(_mm256_load_ps(&as->d[(size_t)(k0 + k) * as->nbp + 8 * c]));
        dxs[k] = kind == KIND_Q6K ? _mm512_permutexvar_ps(_mm512_load_si512((const void *)half_to_block), d8) : d8;
        if (NT == 1) /* one token: d_x folds into the weight scales, once per chunk */
            for (int r = 0; r < NR; r++) sl[r] = _mm512_mul_ps(sl[r], dxs[0]);
        if (mins) {
            __m256 ds8 = _mm256_load_ps(&as->ds[(size_t)(k0 + k) * as->nbp + 8 * c]);
            for (int r = 0; r < NR; r++)
                ACC(r, k) = _mm512_mask3_fmadd_ps(_mm512_castps256_ps512(mn[r]), _mm512_castps256_ps512(ds8),
                                                  ACC(r, k), 0xFF);
        }
    }
    for (int u = 0; u < (nblk + 1) / 2; u++) {
        const int two = 2 * u + 1 < nblk;
        __m512i idx = _mm512_load_si512((const void *)slot_of_lane[kind][u]);
        __m512i wq[TILE_R];
        __m512 ws[TILE_R];
        for (int r = 0; r < NR; r++) {
            wq[r] = weight_unit(t, rows[r], c, u, two);
            ws[r] = _mm512_permutexvar_ps(idx, sl[r]);
        }
        for (int k = 0; k < NT; k++) {
            __m512i xv = act_unit(t, x[k], c, u, two);
            __m512i start = _mm512_setzero_si512();
            if (bias) /* -bias * (sum of each lane's 4 activations) */
                start = _mm512_sub_epi32(start, _mm512_dpbusd_epi32(start, _mm512_set1_epi8((char)bias), xv));
            __m512 xs = _mm512_permutexvar_ps(idx, dxs[k]);
            for (int r = 0; r < NR; r++) {
                __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wq[r], xv));
                ACC(r, k) = _mm512_fmadd_ps(p, NT == 1 ? ws[r] : _mm512_mul_ps(ws[r], xs), ACC(r, k));
            }
        }
    }
}

/* y[t][r] for NR rows (from row) x NT tokens (x[t], scales in slots k0 ..), NR and NT
 * compile-time constants. */
AVX512_INLINE void tile(ggml_type t, const matmul_weight *w, int32_t row, const matmul_q8 *const *x,
                        const act_scales *as, int k0, float *y, int32_t ldy, const int NR, const int NT) {
    const int32_t nb = w->cols / GGML_QBLOCK;
    const uint8_t *rows[TILE_R];
    for (int r = 0; r < NR; r++) rows[r] = w->data + (size_t)(row + r) * w->row_bytes;
    __m512 acc[TILE_R][TILE_T], rid[TILE_R];
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < NT; k++) ACC(r, k) = _mm512_setzero_ps();
    /* The hardware prefetchers lose track of NR interleaved row streams: each chunk
     * prefetches its share of the next tile's rows (contiguous after these). */
    const int32_t n_chunks = (nb + 7) / 8;
    const size_t span = (size_t)NR * w->row_bytes, step = (span + (size_t)n_chunks - 1) / (size_t)n_chunks;
    const char *next = (const char *)rows[0] + span;
    for (int32_t c = 0; c < nb / 8; c++) {
        for (size_t o = (size_t)c * step; o < (size_t)(c + 1) * step; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
        tile_chunk(t, rows, x, as, k0, c, 8, acc, rid, NR, NT);
    }
    if (nb % 8)
        for (size_t o = (size_t)(nb / 8) * step; o < span; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
    switch (nb % 8) { /* the K-quants have whole chunks (super-blocks) */
    case 1: tile_chunk(t, rows, x, as, k0, nb / 8, 1, acc, rid, NR, NT); break;
    case 2: tile_chunk(t, rows, x, as, k0, nb / 8, 2, acc, rid, NR, NT); break;
    case 3: tile_chunk(t, rows, x, as, k0, nb / 8, 3, acc, rid, NR, NT); break;
    case 4: tile_chunk(t, rows, x, as, k0, nb / 8, 4, acc, rid, NR, NT); break;
    case 5: tile_chunk(t, rows, x, as, k0, nb / 8, 5, acc, rid, NR, NT); break;
    case 6: tile_chunk(t, rows, x, as, k0, nb / 8, 6, acc, rid, NR, NT); break;
    case 7: tile_chunk(t, rows, x, as, k0, nb / 8, 7, acc, rid, NR, NT); break;
    default: break;
    }
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < NT; k++) y[(size_t)k * ldy + row + r] = _mm512_reduce_add_ps(ACC(r, k));
}
#undef ACC

/* ================================================================================ */
/* Prefill: a row tile decoded once for many token tiles                           */
/* ================================================================================ */

/* NR rows decoded: each unit's bytes (weight_unit), its lane scales (the slot scales
 * permuted to the lanes) and each chunk's float offsets, so that a token tile only
 * loads them. */
typedef struct {
    uint8_t wq[DEC_CHUNKS][4][TILE_R][64] __attribute__((aligned(64)));
    float ws[DEC_CHUNKS][4][TILE_R][16] __attribute__((aligned(64)));
    float mn[DEC_CHUNKS][TILE_R][8] __attribute__((aligned(32)));
} dec_tile;

/* Rows [row, row + NR) into dt (nb / 8 rounded up <= DEC_CHUNKS), prefetching the next
 * tile's rows as tile does. */
AVX512_INLINE void tile_decode(ggml_type t, const matmul_weight *w, int32_t row, dec_tile *dt, const int NR) {
    const int32_t nb = w->cols / GGML_QBLOCK, n_chunks = (nb + 7) / 8;
    const int kind = kind_of(t);
    const size_t span = (size_t)NR * w->row_bytes, step = (span + (size_t)n_chunks - 1) / (size_t)n_chunks;
    const uint8_t *base = w->data + (size_t)row * w->row_bytes;
    for (int32_t c = 0; c < n_chunks; c++) {
        for (size_t o = (size_t)c * step; o < (size_t)(c + 1) * step && o < span; o += 64)
            _mm_prefetch((const char *)base + span + o, _MM_HINT_T0);
        const int nblk = c < nb / 8 ? 8 : nb % 8;
        for (int r = 0; r < NR; r++) {
            const uint8_t *rp = base + (size_t)r * w->row_bytes;
            __m512 sl;
            __m256 mn;
            chunk_scales(t, rp, c, nblk, &sl, &mn);
            _mm256_store_ps(dt->mn[c][r], mn);
            for (int u = 0; u < (nblk + 1) / 2; u++) {
                __m512i idx = _mm512_load_si512((const void *)slot_of_lane[kind][u]);
                _mm512_store_si512((void *)dt->wq[c][u][r], weight_unit(t, rp, c, u, 2 * u + 1 < nblk));
                _mm512_store_ps(dt->ws[c][u][r], _mm512_permutexvar_ps(idx, sl));
            }
        }
    }
}

/* y[t][r] for the NR decoded rows of dt (from row) x NT tokens (x[t], scales in slots
 * k0 ..): tile's sums in tile's order, so bit for bit what tile gives. (With NT = 1,
 * tile folds d_x into the slot scales and permutes the product; the lane scale here is
 * the permuted slot scale times the permuted d_x: the same fp32 product.) */
AVX512_INLINE void tile_run(ggml_type t, const dec_tile *dt, int32_t nb, const matmul_q8 *const *x,
                            const act_scales *as, int k0, float *y, int32_t ldy, int32_t row, const int NR,
                            const int NT) {
    const int kind = kind_of(t), bias = bias_of(t), mins = has_min(t);
    const int32_t n_chunks = (nb + 7) / 8;
    __m512 acc[TILE_R][TILE_T];
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < NT; k++) acc[r][k] = _mm512_setzero_ps();
    for (int32_t c = 0; c < n_chunks; c++) {
        const int nblk = c < nb / 8 ? 8 : nb % 8;
        __m512 dxs[TILE_T];
        for (int k = 0; k < NT; k++) {
            const size_t o = (size_t)(k0 + k) * as->nbp + 8 * (size_t)c;
            __m512 d8 = _mm512_castps256_ps512(_mm256_load_ps(&as->d[o]));
            dxs[k] = kind == KIND_Q6K ? _mm512_permutexvar_ps(_mm512_load_si512((const void *)half_to_block), d8) : d8;
            if (mins) {
                __m256 ds8 = _mm256_load_ps(&as->ds[o]);
                for (int r = 0; r < NR; r++)
                    acc[r][k] = _mm512_mask3_fmadd_ps(_mm512_castps256_ps512(_mm256_load_ps(dt->mn[c][r])),
                                                      _mm512_castps256_ps512(ds8), acc[r][k], 0xFF);
            }
        }
        for (int u = 0; u < (nblk + 1) / 2; u++) {
            const int two = 2 * u + 1 < nblk;
            __m512i idx = _mm512_load_si512((const void *)slot_of_lane[kind][u]);
            for (int k = 0; k < NT; k++) {
                __m512i xv = act_unit(t, x[k], c, u, two);
                __m512i start = _mm512_setzero_si512();
                if (bias) /* -bias * (sum of each lane's 4 activations) */
                    start = _mm512_sub_epi32(start, _mm512_dpbusd_epi32(start, _mm512_set1_epi8((char)bias), xv));
                __m512 xs = _mm512_permutexvar_ps(idx, dxs[k]);
                for (int r = 0; r < NR; r++) {
                    __m512i wq = _mm512_load_si512((const void *)dt->wq[c][u][r]);
                    __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wq, xv));
                    acc[r][k] = _mm512_fmadd_ps(p, _mm512_mul_ps(_mm512_load_ps(dt->ws[c][u][r]), xs), acc[r][k]);
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < NT; k++) y[(size_t)k * ldy + row + r] = _mm512_reduce_add_ps(acc[r][k]);
}

/* The prefill path of rows_q (n_full >= PREFILL_MIN full-tile tokens, nb <= 8
 * DEC_CHUNKS): the tokens by groups, each row tile decoded once per group; the tail
 * tokens ride along the last group's row tiles as in rows_q. */
AVX512_INLINE void rows_q_prefill(ggml_type t, const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy,
                                  int32_t r0, int32_t r1, act_scales *as, dec_tile *dt) {
    const int32_t nb = w->cols / GGML_QBLOCK, n_full = a->n - a->n % TILE_T;
    const int tail = a->n - n_full;
    const int32_t slots = AS_FLOATS / ((nb + 7) & ~7);
    int32_t group = (slots - TILE_T) / TILE_T * TILE_T;
    if (group > PREFILL_GROUP) group = PREFILL_GROUP;
    const matmul_q8 *xt[TILE_T], *xg[PREFILL_GROUP];
    for (int k = 0; k < tail; k++) xt[k] = a->xq + (size_t)(n_full + k) * nb;
    float *yt = y + (size_t)n_full * ldy;
    for (int32_t g0 = 0; g0 < n_full; g0 += group) {
        const int ng = n_full - g0 < group ? (int)(n_full - g0) : (int)group;
        const int ride = g0 + ng == n_full ? tail : 0;
        for (int k = 0; k < ng; k++) xg[k] = a->xq + (size_t)(g0 + k) * nb;
        act_scales_fill(as, 0, xg, ng, nb);
        if (ride) act_scales_fill(as, ng, xt, ride, nb);
        float *yg = y + (size_t)g0 * ldy;
        int32_t r = r0;
        for (; r + TILE_R <= r1; r += TILE_R) {
            tile_decode(t, w, r, dt, TILE_R);
            for (int k = 0; k < ng; k += TILE_T)
                tile_run(t, dt, nb, &xg[k], as, k, yg + (size_t)k * ldy, ldy, r, TILE_R, TILE_T);
            for (int k = 0; k < ride; k++) tile_run(t, dt, nb, &xt[k], as, ng + k, yt + (size_t)k * ldy, ldy, r, TILE_R, 1);
        }
        for (; r < r1; r++) {
            tile_decode(t, w, r, dt, 1);
            for (int k = 0; k < ng; k += TILE_T)
                tile_run(t, dt, nb, &xg[k], as, k, yg + (size_t)k * ldy, ldy, r, 1, TILE_T);
            for (int k = 0; k < ride; k++) tile_run(t, dt, nb, &xt[k], as, ng + k, yt + (size_t)k * ldy, ldy, r, 1, 1);
        }
    }
}

/* Rows [r0, r1) x every token, for one block type (a constant after inlining). The
 * tokens go by tiles of TILE_T; the last n % TILE_T ride along the last full tile, one
 * at a time on each row tile just read (so a pass of 5 tokens, speculation's verify,
 * reads each weight row once), or, with no full tile (a decode token), on their own. A
 * single rider joins the tile itself (4 rows x 5 tokens, 20 accumulators): each weight
 * unit is decoded once for all 5 tokens instead of again for the rider; a token's sums
 * are formed in the same order either way (with NT = 1 the lane scale is the permuted
 * product of the slot scale and d_x, here the product of the permuted ones: the same
 * fp32 value), so the outputs do not change. */
AVX512_INLINE void rows_q(ggml_type t, const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy,
                          int32_t r0, int32_t r1, act_scales *as, dec_tile *dt) {
    const int32_t nb = w->cols / GGML_QBLOCK, n_full = a->n - a->n % TILE_T;
    const int tail = a->n - n_full;
    if (dt && n_full >= PREFILL_MIN && (nb + 7) / 8 <= DEC_CHUNKS) {
        rows_q_prefill(t, w, a, y, ldy, r0, r1, as, dt);
        return;
    }
    const matmul_q8 *xt[TILE_T];
    for (int k = 0; k < tail; k++) xt[k] = a->xq + (size_t)(n_full + k) * nb;
    float *yt = y + (size_t)n_full * ldy;
    for (int32_t t0 = 0; t0 < n_full; t0 += TILE_T) {
        const matmul_q8 *x[TILE_TX];
        for (int k = 0; k < TILE_T; k++) x[k] = a->xq + (size_t)(t0 + k) * nb;
        const int ride = t0 + TILE_T == n_full ? tail : 0;
        act_scales_fill(as, 0, x, TILE_T, nb);
        if (ride) act_scales_fill(as, TILE_T, xt, ride, nb);
        float *yf = y + (size_t)t0 * ldy;
        int32_t r = r0;
        if (ride == 1) { /* one rider (the verify of 5 tokens): in the tile, 4 x 5, each unit decoded once */
            x[TILE_T] = xt[0]; /* its scales in slot TILE_T, its outputs at yt = yf + TILE_T ldy */
            for (; r + TILE_R <= r1; r += TILE_R) tile(t, w, r, x, as, 0, yf, ldy, TILE_R, TILE_TX);
        }
        for (; r + TILE_R <= r1; r += TILE_R) {
            tile(t, w, r, x, as, 0, yf, ldy, TILE_R, TILE_T);
            for (int k = 0; k < ride; k++) tile(t, w, r, &xt[k], as, TILE_T + k, yt + (size_t)k * ldy, ldy, TILE_R, 1);
        }
        for (; r < r1; r++) {
            tile(t, w, r, x, as, 0, yf, ldy, 1, TILE_T);
            for (int k = 0; k < ride; k++) tile(t, w, r, &xt[k], as, TILE_T + k, yt + (size_t)k * ldy, ldy, 1, 1);
        }
    }
    if (n_full > 0) return;
    /* no full tile: the tokens one at a time (a decode token: this path alone) */
    const int stream = (size_t)w->rows * w->row_bytes > STREAM_BYTES;
    for (int k = 0; k < tail; k++) {
        act_scales_fill(as, 0, &xt[k], 1, nb);
        int32_t r = r0;
        for (; r + TILE_R <= r1 && !stream; r += TILE_R) tile(t, w, r, &xt[k], as, 0, yt + (size_t)k * ldy, ldy, TILE_R, 1);
        for (; r < r1; r++) tile(t, w, r, &xt[k], as, 0, yt + (size_t)k * ldy, ldy, 1, 1);
    }
}

#define ROWS_Q(name, type)                                                                                        \
    AVX512 static void name(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,       \
                            int32_t r1, act_scales *as, dec_tile *dt) {                                           \
        rows_q(type, w, a, y, ldy, r0, r1, as, dt);                                                               \
    }
ROWS_Q(rows_q4_0, GGML_TYPE_Q4_0)
ROWS_Q(rows_q4_1, GGML_TYPE_Q4_1)
ROWS_Q(rows_q5_0, GGML_TYPE_Q5_0)
ROWS_Q(rows_q5_1, GGML_TYPE_Q5_1)
ROWS_Q(rows_q8_0, GGML_TYPE_Q8_0)
ROWS_Q(rows_q4_k, GGML_TYPE_Q4_K)
ROWS_Q(rows_q5_k, GGML_TYPE_Q5_K)
ROWS_Q(rows_q6_k, GGML_TYPE_Q6_K)
#undef ROWS_Q

/* ================================================================================ */
/* Float weights                                                                    */
/* ================================================================================ */

/* 16 weights from column j of a float-type row as fp32 (n < 16: the rest zero). */
AVX512_INLINE __m512 float_weights(ggml_type t, const uint8_t *row, int32_t j, int n) {
    __mmask16 k = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
    if (t == GGML_TYPE_F32) return _mm512_maskz_loadu_ps(k, row + 4 * (size_t)j);
    __m256i h = _mm256_maskz_loadu_epi16(k, row + 2 * (size_t)j);
    if (t == GGML_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* BF16 */
}

/* 4 rows at a time, every token: W (fp32 once loaded) . x, 16 columns per step. */
AVX512 static void rows_float(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                              int32_t r1) {
    ggml_type t = w->type;
    int32_t n = w->cols;
    for (int32_t r = r0; r < r1; r += TILE_R) {
        int nr = r1 - r < TILE_R ? r1 - r : TILE_R;
        for (int32_t k = 0; k < a->n; k++) {
            const float *x = a->x + (size_t)k * n;
            __m512 acc[TILE_R] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int32_t j = 0; j < n; j += 16) {
                int m = n - j < 16 ? n - j : 16;
                __m512 xv = _mm512_maskz_loadu_ps((__mmask16)(m == 16 ? 0xFFFFu : (1u << m) - 1u), x + j);
                for (int i = 0; i < nr; i++) {
                    const uint8_t *row = w->data + (size_t)(r + i) * w->row_bytes;
                    acc[i] = _mm512_fmadd_ps(float_weights(t, row, j, m), xv, acc[i]);
                }
            }
            for (int i = 0; i < nr; i++) y[(size_t)k * ldy + r + i] = _mm512_reduce_add_ps(acc[i]);
        }
    }
}

/* ================================================================================ */
/* Q4_1 and Q8_0 packed by 16 rows (matmul_pack, matmul.h)                         */
/* ================================================================================ */

#define PACK_T 6 /* tokens per pass over a group's blocks */

/* 4 activation bytes as one int32, read in place: broadcast straight from memory (a
 * copy to a local array made GCC move them through general registers). */
typedef int32_t act4 __attribute__((may_alias, aligned(4)));

/* A block's exact integer sum for 16 rows: sum_j a[j] . q[j] + b[j] . q[4 + j] (unsigned
 * weight bytes a, b against the activation's 4-byte groups q), as two chains of 4. */
AVX512_INLINE __m512i block_isum(const __m512i *a, const __m512i *b, const act4 *q) {
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a[0], _mm512_set1_epi32(q[0]));
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b[0], _mm512_set1_epi32(q[4]));
    for (int j = 1; j < 4; j++) {
        s0 = _mm512_dpbusd_epi32(s0, a[j], _mm512_set1_epi32(q[j]));
        s1 = _mm512_dpbusd_epi32(s1, b[j], _mm512_set1_epi32(q[4 + j]));
    }
    return _mm512_add_epi32(s0, s1);
}

/* The 16 rows of group g (packed, nb blocks) x NT tokens x[k] into out[k ldo ..]: per
 * (row, token), over the blocks in order, A = fma(float(isum), d_w d_x, A) and
 * M = fma(m_w, d_x sum(q_x), M); out = A + M. isum is the block's exact integer sum
 * (two vpdpbusd chains of 4, added), so nothing depends on NT. */
AVX512_INLINE void packed_q4_1_tile(const uint8_t *g, int32_t nb, const matmul_q8 *const *x, float *out, size_t ldo,
                                    const int NT) {
    __m512 A[PACK_T], M[PACK_T];
    for (int k = 0; k < NT; k++) A[k] = M[k] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int32_t b = 0; b < nb; b++, g += MATMUL_PACK_BLOCK_BYTES) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)g));
        const __m512 mw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(g + 32)));
        __m512i lo[4], hi[4];
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_load_si512((const void *)(g + 64 + 64 * j));
            lo[j] = _mm512_and_si512(v, m4);
            hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        for (int k = 0; k < NT; k++) {
            const matmul_q8 *xb = x[k] + b;
            const __m512 sf = _mm512_cvtepi32_ps(block_isum(lo, hi, (const act4 *)(const void *)xb->q));
            A[k] = _mm512_fmadd_ps(sf, _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), A[k]);
            M[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xb->ds), M[k]);
        }
    }
    for (int k = 0; k < NT; k++) _mm512_storeu_ps(out + (size_t)k * ldo, _mm512_add_ps(A[k], M[k]));
}

/* The 16 rows of a packed Q8_0 group (bytes stored as q + 128, so unsigned for
 * vpdpbusd; sx[k][b] = sum of token k's block b, for the 128 sum(q_x) taken back) x NT
 * tokens into out[k ldo ..]: per (row, token), over the blocks in order,
 * A = fma(float(isum), d_w d_x, A); out = A. */
AVX512_INLINE void packed_q8_0_tile(const uint8_t *g, int32_t nb, const matmul_q8 *const *x, const int32_t *sx,
                                    int32_t ldsx, float *out, size_t ldo, const int NT) {
    __m512 A[PACK_T];
    for (int k = 0; k < NT; k++) A[k] = _mm512_setzero_ps();
    for (int32_t b = 0; b < nb; b++, g += MATMUL_PACK_Q8_BLOCK_BYTES) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)g));
        __m512i wq[8];
        for (int j = 0; j < 8; j++) wq[j] = _mm512_loadu_si512((const void *)(g + 32 + 64 * j)); /* 544-byte blocks */
        for (int k = 0; k < NT; k++) {
            const matmul_q8 *xb = x[k] + b;
            const __m512i s = _mm512_sub_epi32(block_isum(wq, wq + 4, (const act4 *)(const void *)xb->q),
                                               _mm512_set1_epi32(128 * sx[(size_t)k * ldsx + b]));
            A[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), A[k]);
        }
    }
    for (int k = 0; k < NT; k++) _mm512_storeu_ps(out + (size_t)k * ldo, A[k]);
}

/* Rows [r0, r1) x every token from w->packed (Q4_1 or Q8_0), written at y[t ldy + row -
 * ybase]: PACK_T tokens at a time, each group of 16 rows once per tile (a decode token,
 * a verify of 5: one pass); a group the range covers only in part goes through a
 * scratch and only its rows in range are written. */
AVX512 static void rows_packed(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                               int32_t r1, int32_t ybase) {
    const int32_t nb = w->cols / GGML_QBLOCK, n = a->n;
    const int q8 = w->type == GGML_TYPE_Q8_0;
    const size_t gb = (size_t)nb * (q8 ? MATMUL_PACK_Q8_BLOCK_BYTES : MATMUL_PACK_BLOCK_BYTES);
    static _Thread_local int32_t sx[PACK_T * MAX_BLOCKS]; /* Q8_0: the tile's activation block sums */
    float part[PACK_T][MATMUL_PACK_ROWS] __attribute__((aligned(64)));
    for (int32_t t0 = 0; t0 < n; t0 += PACK_T) {
        const int nt = n - t0 < PACK_T ? n - t0 : PACK_T;
        const matmul_q8 *x[PACK_T];
        for (int k = 0; k < nt; k++) x[k] = a->xq + (size_t)(t0 + k) * nb;
        if (q8)
            for (int k = 0; k < nt; k++)
                for (int32_t b = 0; b < nb; b++) {
                    int32_t sum = 0;
                    for (int j = 0; j < 32; j++) sum += x[k][b].q[j];
                    sx[(size_t)k * nb + b] = sum;
                }
        for (int32_t g0 = r0 / MATMUL_PACK_ROWS * MATMUL_PACK_ROWS; g0 < r1; g0 += MATMUL_PACK_ROWS) {
            const uint8_t *g = w->packed + (size_t)(g0 / MATMUL_PACK_ROWS) * gb;
            const int whole = g0 >= r0 && g0 + MATMUL_PACK_ROWS <= r1;
            float *out = whole ? y + (size_t)t0 * ldy + (g0 - ybase) : &part[0][0];
            const size_t ldo = whole ? (size_t)ldy : MATMUL_PACK_ROWS;
#define PACKED_TILE(N)                                                                                          \
    do {                                                                                                        \
        if (q8) packed_q8_0_tile(g, nb, x, sx, nb, out, ldo, N);                                                \
        else packed_q4_1_tile(g, nb, x, out, ldo, N);                                                           \
    } while (0)
            switch (nt) {
            case 1: PACKED_TILE(1); break;
            case 2: PACKED_TILE(2); break;
            case 3: PACKED_TILE(3); break;
            case 4: PACKED_TILE(4); break;
            case 5: PACKED_TILE(5); break;
            default: PACKED_TILE(PACK_T); break;
            }
#undef PACKED_TILE
            if (whole) continue;
            const int32_t lo = g0 > r0 ? g0 : r0, hi = g0 + MATMUL_PACK_ROWS < r1 ? g0 + MATMUL_PACK_ROWS : r1;
            for (int k = 0; k < nt; k++)
                memcpy(y + (size_t)(t0 + k) * ldy + (lo - ybase), &part[k][lo - g0], sizeof(float) * (size_t)(hi - lo));
        }
    }
}

int matmul_rows_avx512_packed(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                              int32_t r1, int32_t ybase) {
    if (!w->packed || !a->xq || w->cols / GGML_QBLOCK > MAX_BLOCKS ||
        (w->type != GGML_TYPE_Q4_1 && w->type != GGML_TYPE_Q8_0))
        return 0;
    rows_packed(w, a, y, ldy, r0, r1, ybase);
    return 1;
}

int matmul_rows_avx512_tiles(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                              int32_t r1, int prefill) {
    ggml_type t = w->type;
    if (matmul_rows_avx512_packed(w, a, y, ldy, r0, r1, 0)) return 1;
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        rows_float(w, a, y, ldy, r0, r1);
        return 1;
    }
    if (!a->xq || w->cols / GGML_QBLOCK > MAX_BLOCKS) return 0;
    static _Thread_local act_scales as; /* 128 KB: too much for a worker's stack */
    static _Thread_local dec_tile dec;  /* 70 KB */
    dec_tile *dt = prefill ? &dec : NULL;
    switch (t) {
    case GGML_TYPE_Q4_0: rows_q4_0(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q4_1: rows_q4_1(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q5_0: rows_q5_0(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q5_1: rows_q5_1(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q8_0: rows_q8_0(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q4_K: rows_q4_k(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q5_K: rows_q5_k(w, a, y, ldy, r0, r1, &as, dt); return 1;
    case GGML_TYPE_Q6_K: rows_q6_k(w, a, y, ldy, r0, r1, &as, dt); return 1;
    default: return 0;
    }
}
#else
int matmul_rows_avx512_packed(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                              int32_t r1, int32_t ybase) {
    (void)w, (void)a, (void)y, (void)ldy, (void)r0, (void)r1, (void)ybase;
    return 0;
}
int matmul_rows_avx512_tiles(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                              int32_t r1, int prefill) {
    (void)w, (void)a, (void)y, (void)ldy, (void)r0, (void)r1, (void)prefill;
    return 0;
}
#endif

int matmul_rows_avx512(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
    return matmul_rows_avx512_tiles(w, a, y, ldy, r0, r1, 1);
}
