/*
 * matmul_avx2.c — the AVX2 kernels (with FMA and F16C) of matmul.c for every block type
 * with int8 activations (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): the design of
 * matmul_avx512.c in 256-bit registers. Compiled with target attributes and chosen at run
 * time (locks_have_avx2); AVX-VNNI's vpdpbusd replaces maddubs + madd where the CPU has it
 * (locks_have_avxvnni), except for Q6_K. matmul.c keeps the float types and the exact
 * (fp32 activation) mode.
 *
 * A "unit" is one 32-element block (a sub-block of the K-quants) as 32 bytes in element
 * order. maddubs takes an unsigned and a signed operand: the types with a float offset
 * per block (Q4_0 -8 d, Q5_0 -16 d, Q4_1 / Q5_1 m, Q4_K / Q5_K -dmin m_s) give their
 * unsigned quants and add offset * d_x sum(q_x) once per 8 blocks (a "chunk", one
 * super-block for the K-quants) with one FMA; Q8_0 and Q6_K (q - 32) are signed and use
 * the sign trick (|q| against x with q's sign; 128 * 127 * 2 < 32768: no saturation).
 * madd widens the pair sums to 8 int32 lanes (lanes 0-3: elements 0-15); Q6_K's scales
 * per 16-element half enter there as int16 multipliers instead of ones. Each block's
 * integer sum is exact; its lanes are scaled by S_b = (weight scale of block b) x d_x,b
 * (S formed as one 8-wide product per chunk, then broadcast per block) with one FMA into
 * the (row, token) accumulator; a horizontal sum at the end. Only the fp32 order
 * differs from the portable loops.
 *
 * Exactness: every (row, token) output is formed by the same operations in the same
 * order whatever the tile it falls in (the scales, the offset FMA, the block FMAs, the
 * final sum), so a token's result does not depend on how many tokens share the call
 * (speculation's verify pass gives dense decoding's logits bit for bit).
 *
 * Tiles: 16 ymm registers hold a tile of 4 weight rows x 2 tokens (8 accumulators and
 * 4 weight units). A decode token uses 4 x 1 (the activation unit loaded once for 4
 * rows), prefetching the next tile's rows. Three tokens or more: each tile of 4 weight
 * rows is decoded once (units, lane scales) into an L1-sized dec_tile, and the 2-token
 * tiles of a group of up to 64 tokens (their activations in L2) run on it, so prefill
 * and the verify pass read and decode each weight row once per group.
 */
#include "matmul.h"

#include <string.h>

#include "matmul_tile.h"
#include "quant.h"
#include "vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "simd_avx2.h"

#define TILE_R 4          /* weight rows per tile */
#define TILE_T 2          /* tokens per tile */
#define MAX_BLOCKS 2048   /* activation blocks per token the scratch holds (65,536 cols) */
#define GROUP 64          /* tokens per group of the decoded-tile path */
#define DEC_BLOCKS 512    /* blocks per row a dec_tile holds (16,384 cols) */
#define AS_FLOATS MATMUL_AS_FLOATS /* act_scales' floats per array: a group's tokens */
_Static_assert(GROUP * MAX_BLOCKS / 8 == AS_FLOATS, "act_scales holds a group of 64 tokens of 2048 / 8 blocks");

static const int32_t q6k_half_idx[4][8] __attribute__((aligned(32))) = {
    {0, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 2, 2, 3, 3, 3, 3}, {4, 4, 4, 4, 5, 5, 5, 5}, {6, 6, 6, 6, 7, 7, 7, 7}};

/* ================================================================================ */
/* Types                                                                            */
/* ================================================================================ */

/* 1 for the signed types (sign trick): Q8_0, Q6_K. */
static inline int is_signed(ggml_type t) { return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q6_K; }

/* 1 when the type has a float offset per block. */
static inline int has_min(ggml_type t) { return t != GGML_TYPE_Q8_0 && t != GGML_TYPE_Q6_K; }

static inline int is_k(ggml_type t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

AVX2_INLINE float rdh(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ================================================================================ */
/* Weights: chunk scales and units                                                  */
/* ================================================================================ */

/* Chunk c of a row: *sl the float scale of each of its 8 blocks (d; d sc_s; Q6_K: d),
 * *mn their float offsets (zero past nblk blocks and for Q8_0 / Q6_K), and for Q6_K
 * p6[2] the int8 half-block scales as int16 pairs (int32 lane j of p6[h]: half 8 h + j
 * twice). */
AVX2_INLINE void chunk_scales(ggml_type t, const uint8_t *row, int32_t c, int nblk, __m256 *sl, __m256 *mn,
                              __m256i p6[2]) {
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) {
        const uint8_t *blk = row + (size_t)c * quant_block_bytes(t);
        uint64_t sc8, m8; /* the six-bit scales and mins of the 8 sub-blocks, a byte each */
        quant_kq_scales_mins(blk + 4, &sc8, &m8);
        __m128i sc = _mm_cvtsi64_si128((long long)sc8);
        __m128i m = _mm_cvtsi64_si128((long long)m8);
        *sl = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc)), _mm256_set1_ps(rdh(blk)));
        *mn = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)), _mm256_set1_ps(-rdh(blk + 2)));
    } else if (t == GGML_TYPE_Q6_K) {
        const uint8_t *blk = row + (size_t)c * 210;
        __m128i sc = _mm_loadu_si128((const __m128i *)(blk + 192));
        p6[0] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc, sc));
        p6[1] = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(sc, sc));
        *sl = _mm256_set1_ps(rdh(blk + 208));
        *mn = _mm256_setzero_ps();
    } else {
        /* the dword at each block's start: d, then m (Q4_1 / Q5_1) or quant bytes */
        const size_t bb = quant_block_bytes(t);
        const uint8_t *p = row + (size_t)c * 8 * bb;
        uint32_t v[8];
        for (int k = 0; k < 8; k++) v[k] = k < nblk ? quant_rd32(p + k * bb) : 0;
        __m256i g = _mm256_setr_epi32((int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], (int)v[6], (int)v[7]);
        /* [d0-3, x0-3 | d4-7, x4-7] as uint16, then d0-7 | x0-7 */
        __m256i h = _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(g, 16));
        h = _mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0));
        *sl = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        if (t == GGML_TYPE_Q4_0) *mn = _mm256_mul_ps(*sl, _mm256_set1_ps(-8.0f));
        else if (t == GGML_TYPE_Q5_0) *mn = _mm256_mul_ps(*sl, _mm256_set1_ps(-16.0f));
        else if (has_min(t)) *mn = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
        else *mn = _mm256_setzero_ps();
    }
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set (byte j <- bit j). */
AVX2_INLINE __m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL,
                                            0x0303030303030303LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* Block j (< 8) of chunk c of a row as the unsigned maddubs operand *u (element order);
 * for the signed types *s = the signed quants (the sign source of the activations) and
 * *u = |s|. */
AVX2_INLINE void weight_unit(ggml_type t, const uint8_t *row, int32_t c, int j, __m256i *u, __m256i *s) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (t == GGML_TYPE_Q8_0) {
        *s = _mm256_loadu_si256((const __m256i *)(row + ((size_t)c * 8 + (size_t)j) * 34 + 2));
        *u = _mm256_sign_epi8(*s, *s);
        return;
    }
    if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1) {
        const size_t bb = quant_block_bytes(t);
        const int qoff = t == GGML_TYPE_Q4_0 ? 2 : t == GGML_TYPE_Q4_1 ? 4 : t == GGML_TYPE_Q5_0 ? 6 : 8;
        const uint8_t *b0 = row + ((size_t)c * 8 + (size_t)j) * bb;
        /* low nibbles: elements 0-15, high: 16-31 */
        __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + qoff)));
        q = _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), m4);
        if (t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1) /* element j's fifth bit: bit j of qh */
            q = _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(quant_rd32(b0 + (t == GGML_TYPE_Q5_0 ? 2 : 4))),
                                                    _mm256_set1_epi8(0x10)));
        *u = q;
        return;
    }
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) {
        /* sub-block j: qs[32 (j / 2) + l] >> 4 (j % 2) & 15, fifth bit (Q5_K) qh[l] >> j & 1 */
        const uint8_t *blk = row + (size_t)c * quant_block_bytes(t);
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + (t == GGML_TYPE_Q5_K ? 48 : 16) + 32 * (j / 2)));
        q = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
        if (t == GGML_TYPE_Q5_K) {
            const __m256i bit = _mm256_set1_epi8((char)(1 << j));
            __m256i qh = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(blk + 16)), bit);
            q = _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(qh, bit), _mm256_set1_epi8(0x10)));
        }
        *u = q;
        return;
    }
    /* Q6_K sub-block j = 4 h + k: ql[64 h + 32 (k % 2) + l] >> 4 (k / 2) & 15,
     * qh[32 h + l] >> 2 k & 3 on top; minus 32 */
    const uint8_t *blk = row + (size_t)c * 210;
    const int h = j / 4, k = j % 4;
    __m256i l = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (k % 2)));
    l = _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(l, 4) : l, m4);
    __m256i hb = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
    hb = k == 0 ? _mm256_slli_epi16(hb, 4) : k == 1 ? _mm256_slli_epi16(hb, 2) : k == 3 ? _mm256_srli_epi16(hb, 2) : hb;
    hb = _mm256_and_si256(hb, _mm256_set1_epi8(0x30));
    *s = _mm256_sub_epi8(_mm256_or_si256(l, hb), _mm256_set1_epi8(32));
    *u = _mm256_sign_epi8(*s, *s);
}

/* Q6_K: the int16 multipliers of block j's lanes (half 2 j on lanes 0-3, 2 j + 1 on 4-7). */
AVX2_INLINE __m256i q6k_mult(const __m256i p6[2], int j) {
    return _mm256_permutevar8x32_epi32(p6[j / 4], _mm256_load_si256((const __m256i *)q6k_half_idx[j % 4]));
}

/* The 8 int32 lane sums of unit u (sign source s, Q6_K multipliers m6) against
 * activation bytes x. */
AVX2_INLINE __m256i unit_dot(ggml_type t, __m256i u, __m256i s, __m256i m6, __m256i x, const int vnni) {
    if (is_signed(t)) x = _mm256_sign_epi8(x, s);
    if (t == GGML_TYPE_Q6_K) return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), m6);
    return dot_u8s8(u, x, vnni);
}

/* Activations: act_scales (matmul_tile.h), slots 0 .. of a tile's or a group's tokens. */

/* ================================================================================ */
/* The tile                                                                         */
/* ================================================================================ */

/* A tile of NR rows decoded (tile_decode): per block the units (u, and s for the signed
 * types, the multipliers m6 for Q6_K), per chunk the scales and offsets. */
typedef struct {
    uint8_t u[DEC_BLOCKS][TILE_R][32] __attribute__((aligned(32)));
    uint8_t s[DEC_BLOCKS][TILE_R][32] __attribute__((aligned(32)));
    uint8_t m6[DEC_BLOCKS][TILE_R][32] __attribute__((aligned(32)));
    float sl[DEC_BLOCKS / 8][TILE_R][8] __attribute__((aligned(32)));
    float mn[DEC_BLOCKS / 8][TILE_R][8] __attribute__((aligned(32)));
} dec_tile;

/* y[k][row + r] for NR rows x NT tokens (x[k], scales in slots k0 + k of as), NR, NT and dec
 * compile-time constants: the weights read from the rows (dec 0: decode tokens, small
 * batches) or from dt (dec 1, filled by tile_decode); the same operations either way. */
AVX2_INLINE void tile(ggml_type t, const matmul_weight *w, int32_t row, const dec_tile *dt, const matmul_q8 *const *x,
                      const act_scales *as, int k0, float *y, int32_t ldy, const int NR, const int NT, const int dec,
                      const int vnni) {
    const int32_t nb = w->cols / GGML_QBLOCK, n_chunks = (nb + 7) / 8;
    const uint8_t *rows[TILE_R];
    for (int r = 0; r < NR; r++) rows[r] = w->data + (size_t)(row + r) * w->row_bytes;
    __m256 acc[TILE_R][TILE_T];
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < NT; k++) acc[r][k] = _mm256_setzero_ps();
    /* the hardware prefetchers lose track of NR interleaved row streams: each chunk
     * prefetches its share of the next tile's rows (contiguous after these) */
    const size_t span = (size_t)NR * w->row_bytes, step = (span + (size_t)n_chunks - 1) / (size_t)n_chunks;
    const char *next = (const char *)rows[0] + span;
    for (int32_t c = 0; c < n_chunks; c++) {
        const int nblk = c < nb / 8 ? 8 : nb % 8;
        if (!dec)
            for (size_t o = (size_t)c * step; o < (size_t)(c + 1) * step && o < span; o += 64)
                _mm_prefetch(next + o, _MM_HINT_T0);
        __m256 sl[TILE_R], mn[TILE_R];
        __m256i p6[TILE_R][2];
        for (int r = 0; r < NR; r++) {
            if (dec) {
                sl[r] = _mm256_load_ps(dt->sl[c][r]);
                mn[r] = _mm256_load_ps(dt->mn[c][r]);
            } else {
                chunk_scales(t, rows[r], c, nblk, &sl[r], &mn[r], p6[r]);
            }
        }
        /* S[r][k][j] = weight scale x d_x of block j, broadcast per block below */
        float S[TILE_R][TILE_T][8] __attribute__((aligned(32)));
        for (int k = 0; k < NT; k++) {
            const size_t o = (size_t)(k0 + k) * as->nbp + 8 * (size_t)c;
            const __m256 dx = _mm256_load_ps(&as->d[o]);
            const __m256 ds = _mm256_load_ps(&as->ds[o]);
            for (int r = 0; r < NR; r++) {
                _mm256_store_ps(S[r][k], _mm256_mul_ps(sl[r], dx));
                if (has_min(t)) acc[r][k] = _mm256_fmadd_ps(mn[r], ds, acc[r][k]);
            }
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            if (j >= nblk) break;
            const int32_t b = 8 * c + j;
            __m256i u[TILE_R], s[TILE_R], m6[TILE_R];
            for (int r = 0; r < NR; r++) {
                s[r] = m6[r] = _mm256_setzero_si256();
                if (dec) {
                    u[r] = _mm256_load_si256((const __m256i *)dt->u[b][r]);
                    if (is_signed(t)) s[r] = _mm256_load_si256((const __m256i *)dt->s[b][r]);
                    if (t == GGML_TYPE_Q6_K) m6[r] = _mm256_load_si256((const __m256i *)dt->m6[b][r]);
                } else {
                    weight_unit(t, rows[r], c, j, &u[r], &s[r]);
                    if (t == GGML_TYPE_Q6_K) m6[r] = q6k_mult(p6[r], j);
                }
            }
            for (int k = 0; k < NT; k++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)x[k][b].q);
                for (int r = 0; r < NR; r++) {
                    __m256 p = _mm256_cvtepi32_ps(unit_dot(t, u[r], s[r], m6[r], xv, vnni));
                    acc[r][k] = _mm256_fmadd_ps(p, _mm256_broadcast_ss(&S[r][k][j]), acc[r][k]);
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < NT; k++) y[(size_t)k * ldy + row + r] = hsum8(acc[r][k]);
}

/* Rows [row, row + NR) into dt (nb <= DEC_BLOCKS), prefetching the next tile's rows. */
AVX2_INLINE void tile_decode(ggml_type t, const matmul_weight *w, int32_t row, dec_tile *dt, const int NR) {
    const int32_t nb = w->cols / GGML_QBLOCK, n_chunks = (nb + 7) / 8;
    const size_t span = (size_t)NR * w->row_bytes, step = (span + (size_t)n_chunks - 1) / (size_t)n_chunks;
    const uint8_t *base = w->data + (size_t)row * w->row_bytes;
    for (int32_t c = 0; c < n_chunks; c++) {
        for (size_t o = (size_t)c * step; o < (size_t)(c + 1) * step && o < span; o += 64)
            _mm_prefetch((const char *)base + span + o, _MM_HINT_T0);
        const int nblk = c < nb / 8 ? 8 : nb % 8;
        for (int r = 0; r < NR; r++) {
            const uint8_t *rp = base + (size_t)r * w->row_bytes;
            __m256 sl, mn;
            __m256i p6[2];
            chunk_scales(t, rp, c, nblk, &sl, &mn, p6);
            _mm256_store_ps(dt->sl[c][r], sl);
            _mm256_store_ps(dt->mn[c][r], mn);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                if (j >= nblk) break;
                const int32_t b = 8 * c + j;
                __m256i u, s = _mm256_setzero_si256();
                weight_unit(t, rp, c, j, &u, &s);
                _mm256_store_si256((__m256i *)dt->u[b][r], u);
                if (is_signed(t)) _mm256_store_si256((__m256i *)dt->s[b][r], s);
                if (t == GGML_TYPE_Q6_K) _mm256_store_si256((__m256i *)dt->m6[b][r], q6k_mult(p6, j));
            }
        }
    }
}

/* ================================================================================ */
/* Rows x tokens                                                                    */
/* ================================================================================ */

/* NR (1..4, a constant after the switch) rows from row x the nt (1..TILE_T) tokens of x. */
AVX2_INLINE void tile_nr(ggml_type t, const matmul_weight *w, int32_t row, const dec_tile *dt,
                         const matmul_q8 *const *x, const act_scales *as, int k0, float *y, int32_t ldy, const int NR,
                         int nt, const int dec, const int vnni) {
    if (nt == TILE_T) tile(t, w, row, dt, x, as, k0, y, ldy, NR, TILE_T, dec, vnni);
    else tile(t, w, row, dt, x, as, k0, y, ldy, NR, 1, dec, vnni);
}

/* Rows [r0, r1) x every token, for one block type (a constant after inlining). Up to
 * TILE_T tokens (decode: 1): tiles of 4 rows read from the weights (also for a weight
 * far larger than the cache: unlike AVX-512, streaming it one row at a time was slower
 * on AVX2 in interleaved A/B runs on Gemma 3's output matrix). More: the tokens by
 * groups of GROUP, each tile of 4 rows decoded once per group into dt for all the
 * group's token tiles. */
AVX2_INLINE void rows_q(ggml_type t, const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                        int32_t r1, act_scales *as, dec_tile *dt, const int vnni) {
    const int32_t nb = w->cols / GGML_QBLOCK, n = a->n;
    const matmul_q8 *xg[GROUP];
    if (n <= TILE_T || nb > DEC_BLOCKS) {
        for (int32_t t0 = 0; t0 < n; t0 += TILE_T) {
            const int nt = n - t0 < TILE_T ? (int)(n - t0) : TILE_T;
            for (int k = 0; k < nt; k++) xg[k] = a->xq + (size_t)(t0 + k) * nb;
            act_scales_fill(as, 0, xg, nt, nb);
            float *yt = y + (size_t)t0 * ldy;
            int32_t r = r0;
            for (; r + TILE_R <= r1; r += TILE_R)
                tile_nr(t, w, r, NULL, xg, as, 0, yt, ldy, TILE_R, nt, 0, vnni);
            for (; r < r1; r++) tile_nr(t, w, r, NULL, xg, as, 0, yt, ldy, 1, nt, 0, vnni);
        }
        return;
    }
    const int32_t slots = AS_FLOATS / ((nb + 7) & ~7), group = slots < GROUP ? slots : GROUP;
    for (int32_t g0 = 0; g0 < n; g0 += group) {
        const int ng = n - g0 < group ? (int)(n - g0) : (int)group;
        for (int k = 0; k < ng; k++) xg[k] = a->xq + (size_t)(g0 + k) * nb;
        act_scales_fill(as, 0, xg, ng, nb);
        float *yg = y + (size_t)g0 * ldy;
        int32_t r = r0;
        for (; r + TILE_R <= r1; r += TILE_R) {
            tile_decode(t, w, r, dt, TILE_R);
            for (int k = 0; k < ng; k += TILE_T) {
                const int nt = ng - k < TILE_T ? ng - k : TILE_T;
                tile_nr(t, w, r, dt, &xg[k], as, k, yg + (size_t)k * ldy, ldy, TILE_R, nt, 1, vnni);
            }
        }
        for (; r < r1; r++) {
            tile_decode(t, w, r, dt, 1);
            for (int k = 0; k < ng; k += TILE_T) {
                const int nt = ng - k < TILE_T ? ng - k : TILE_T;
                tile_nr(t, w, r, dt, &xg[k], as, k, yg + (size_t)k * ldy, ldy, 1, nt, 1, vnni);
            }
        }
    }
}

#define ROWS_Q(name, type, vnni)                                                                                   \
    AVX2 static void name(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1, \
                          act_scales *as, dec_tile *dt) {                                                            \
        rows_q(type, w, a, y, ldy, r0, r1, as, dt, vnni);                                                           \
    }
ROWS_Q(rows_q4_0, GGML_TYPE_Q4_0, 0)
ROWS_Q(rows_q4_1, GGML_TYPE_Q4_1, 0)
ROWS_Q(rows_q5_0, GGML_TYPE_Q5_0, 0)
ROWS_Q(rows_q5_1, GGML_TYPE_Q5_1, 0)
ROWS_Q(rows_q8_0, GGML_TYPE_Q8_0, 0)
ROWS_Q(rows_q4_k, GGML_TYPE_Q4_K, 0)
ROWS_Q(rows_q5_k, GGML_TYPE_Q5_K, 0)
ROWS_Q(rows_q6_k, GGML_TYPE_Q6_K, 0)
ROWS_Q(rows_q4_0_vnni, GGML_TYPE_Q4_0, 1)
ROWS_Q(rows_q4_1_vnni, GGML_TYPE_Q4_1, 1)
ROWS_Q(rows_q5_0_vnni, GGML_TYPE_Q5_0, 1)
ROWS_Q(rows_q5_1_vnni, GGML_TYPE_Q5_1, 1)
ROWS_Q(rows_q8_0_vnni, GGML_TYPE_Q8_0, 1)
ROWS_Q(rows_q4_k_vnni, GGML_TYPE_Q4_K, 1)
ROWS_Q(rows_q5_k_vnni, GGML_TYPE_Q5_K, 1)
#undef ROWS_Q

int matmul_rows_avx2(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
    if (!a->xq || w->cols / GGML_QBLOCK > MAX_BLOCKS) return 0;
    static _Thread_local act_scales as; /* 128 KB: too much for a worker's stack */
    static _Thread_local dec_tile dt;   /* 200 KB, of which a tile of Gemma 3's rows uses 4-25 KB */
    const int vnni = locks_have_avxvnni();
    switch (w->type) {
    case GGML_TYPE_Q4_0: (vnni ? rows_q4_0_vnni : rows_q4_0)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q4_1: (vnni ? rows_q4_1_vnni : rows_q4_1)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q5_0: (vnni ? rows_q5_0_vnni : rows_q5_0)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q5_1: (vnni ? rows_q5_1_vnni : rows_q5_1)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q8_0: (vnni ? rows_q8_0_vnni : rows_q8_0)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q4_K: (vnni ? rows_q4_k_vnni : rows_q4_k)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q5_K: (vnni ? rows_q5_k_vnni : rows_q5_k)(w, a, y, ldy, r0, r1, &as, &dt); return 1;
    case GGML_TYPE_Q6_K: rows_q6_k(w, a, y, ldy, r0, r1, &as, &dt); return 1; /* madd carries its scales */
    default: return 0;
    }
}
#else
int matmul_rows_avx2(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0, int32_t r1) {
    (void)w, (void)a, (void)y, (void)ldy, (void)r0, (void)r1;
    return 0;
}
#endif
