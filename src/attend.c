/*
 * attend.c — exact paged attention: decode (over a page list, split over page chunks
 * and merged by log-sum-exp, i.e. flash-decoding) and causal prefill.
 *
 * All G query heads of a KV group are processed together against each K/V block, so
 * the block is read (and converted from fp16) once per group, never copied per head.
 * Accumulation is fp32 with an online softmax per chunk: state (m, l, acc[d]) per
 * head, acc = sum_t exp(logit_t - m) v_t, l = sum_t exp(logit_t - m).
 */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "util.h"
#include "vmath.h"

/* Pages in flight, asked for into L2 (prefetcht1: __builtin_prefetch's locality 2; into
 * L1 read slower on Zen 4, docs/DESIGN.md): the verify the current one and the next two,
 * a decode step the next three (its page takes under half the verify's time). */
enum { P = LOCKS_PAGE, PREFETCH_AHEAD = 3, DECODE_AHEAD = 4, PREFETCH_LOCALITY = 2 };

/* A later page's K and V blocks (bytes each), asked for a part at a time while the
 * kernels work on this page: a burst of a whole page's line requests fills the core's
 * miss buffers and holds up the arithmetic until they drain, so the reads and the
 * arithmetic do not overlap (dense decode attention over 30 layers x 6,480 tokens from
 * DRAM on Zen 4, spread over the 4 logit steps rather than asked for at once: 1.17-1.43x
 * faster on one thread, 1.20-1.44x on two; the verify's attend_rows_avx512 found the
 * same). k NULL: nothing to ask for. */
typedef struct {
    const char *k, *v;
    size_t bytes;
} page_prefetch;

static const page_prefetch NO_PREFETCH = {NULL, NULL, 0};

/* Asks for the lines [a lines / n, b lines / n) of both blocks (a < b <= n): parts a .. b
 * of n, so that the parts 0..1, 1..2, ..., n-1..n ask for every line once. */
static inline void prefetch_part(page_prefetch pf, int32_t a, int32_t b, int32_t n) {
    if (!pf.k) return;
    const size_t lines = (pf.bytes + 63) / 64; /* a last partial line too */
    for (size_t o = lines * (size_t)a / (size_t)n * 64; o < lines * (size_t)b / (size_t)n * 64; o += 64) {
        __builtin_prefetch(pf.k + o, 0, PREFETCH_LOCALITY);
        __builtin_prefetch(pf.v + o, 0, PREFETCH_LOCALITY);
    }
}

/* Online-softmax state of G heads: m[G], l[G], acc[G][d]. */
typedef struct {
    float *m, *l, *acc;
} attn_state;

static void state_reset(attn_state st, int32_t G, int32_t d) {
    for (int32_t g = 0; g < G; g++) {
        st.m[g] = -INFINITY;
        st.l[g] = 0.0f;
    }
    memset(st.acc, 0, sizeof(float) * (size_t)G * d);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LOCKS_X86 1
#include <immintrin.h>

/* AVX2. The AVX-512 kernels' scheme at 8 lanes, with the logits of a block stored key
 * major (lg[t][g], rows of GS = G rounded up to 8 floats) so that the softmax works on
 * 8 heads per vector. Logits: 8 accumulators of 8 channels each, 2 keys x 4 heads (4
 * keys x 2 heads, 8 keys x 1 head for the last heads of a group), summed lane-wise into
 * one vector by a transpose-and-add tree (reduce8), so a key row is loaded once per 4
 * heads and every product is register to register. Accumulation: 3 heads x 32 channels
 * (12 accumulators) held in registers across the keys. Key and value rows are
 * converted from fp16 as they are loaded, also for many heads (the verify): on Zen 3
 * that beat converting the block to fp32 once. Each (head, key) logit is a chain of FMAs over the channels in order, then
 * the same tree of additions ((0+1)+(2+3))+((4+5)+(6+7)) whatever its slot; each
 * accumulated channel is a chain of FMAs over the keys in order; the softmax works lane
 * by lane: so a head's results do not depend on which other heads or keys share its
 * call (the verify pass relies on that), and they are the portable path's operations
 * (max, exp by exp8, the weights summed one by one in key order). */
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
/* Keeps v (a query row) in a register: GCC would otherwise fold a value used by several
 * FMAs into each of them as a memory operand, one load per FMA. */
#define IN_REG(v) __asm__("" : "+x"(v))

/* 8 channels of an fp16 key or value row, in fp32. */
AVX2_TARGET static inline __m256 load_kv8(const uint16_t *b, size_t off) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + off)));
}

/* r[j] = the sum of the 8 lanes of a[j], ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). */
AVX2_TARGET static inline __m256 reduce8(const __m256 *a) {
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    /* t0 = [a0..a3 lanes 0-3 | a0..a3 lanes 4-7], t1 likewise for a4..a7 */
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* lg[t][g0 + i] = scale q_{g0 + i} . k_t for HN heads (1..4, a constant) and every key
 * t < nt: NK = 2, 4 or 8 keys per step (the last repeated past nt); slot HW j + i holds
 * key j, head i (HW = 4, 2, 1: a 3-head step leaves slot 4 j + 3 at zero, and column
 * g0 + 3, padding, gets that zero). */
AVX2_TARGET static inline __attribute__((always_inline)) void
logits_heads_avx2(const uint16_t *kb, int32_t nt, const float *q, int32_t g0, int32_t d, float scale, float *lg,
                  int32_t GS, const int HN, page_prefetch pf) {
    const int HW = HN > 2 ? 4 : HN, NK = 8 / HW;
    const __m256 vs = _mm256_set1_ps(scale);
    const float *qh = q + (size_t)g0 * d;
    for (int32_t t0 = 0; t0 < nt; t0 += NK) {
        prefetch_part(pf, t0, t0 + NK < nt ? t0 + NK : nt, nt);
        size_t k[8];
        for (int j = 0; j < NK; j++) k[j] = (size_t)(t0 + j < nt ? t0 + j : nt - 1) * d;
        __m256 a[8];
        for (int s = 0; s < 8; s++) a[s] = _mm256_setzero_ps();
        for (int32_t c = 0; c < d; c += 8) {
            __m256 x[4];
            for (int i = 0; i < HN; i++) {
                x[i] = _mm256_loadu_ps(qh + (size_t)i * d + c);
                if (NK > 1) IN_REG(x[i]);
            }
            for (int j = 0; j < NK; j++) {
                const __m256 kv = load_kv8(kb, k[j] + (size_t)c);
                for (int i = 0; i < HN; i++) a[HW * j + i] = _mm256_fmadd_ps(kv, x[i], a[HW * j + i]);
            }
        }
        const __m256 r = _mm256_mul_ps(reduce8(a), vs);
        float *o = lg + (size_t)t0 * GS + g0;
        if (t0 + NK <= nt && HW == 4) {
            _mm_storeu_ps(o, _mm256_castps256_ps128(r));
            _mm_storeu_ps(o + GS, _mm256_extractf128_ps(r, 1));
        } else {
            float rs[8];
            _mm256_storeu_ps(rs, r);
            for (int j = 0; j < NK && t0 + j < nt; j++)
                for (int i = 0; i < HN; i++) o[(size_t)j * GS + i] = rs[HW * j + i];
        }
    }
}

/* pf: asked for by the first pass over the keys */
AVX2_TARGET static void block_logits_avx2(const uint16_t *kb, int32_t nt, const float *q, int32_t G, int32_t d,
                                          float scale, float *lg, int32_t GS, page_prefetch pf) {
    int32_t g0 = 0;
    for (; g0 + 4 <= G; g0 += 4, pf = NO_PREFETCH) logits_heads_avx2(kb, nt, q, g0, d, scale, lg, GS, 4, pf);
    switch (G - g0) {
    case 3: logits_heads_avx2(kb, nt, q, g0, d, scale, lg, GS, 3, pf); g0 += 4; break;
    case 2: logits_heads_avx2(kb, nt, q, g0, d, scale, lg, GS, 2, pf); g0 += 2; break;
    case 1: logits_heads_avx2(kb, nt, q, g0, d, scale, lg, GS, 1, pf); g0 += 1; break;
    default: break;
    }
    for (int32_t t = 0; t < nt; t++) /* the padding columns: zeros, not stale stack */
        for (int32_t g = g0; g < GS; g++) lg[(size_t)t * GS + g] = 0.0f;
}

/* acc[g0 + i][c0 .. c0 + 8 NC) += sum_t w[t][g0 + i] v_t[...] for HN heads (1..3) and
 * NC 8-channel vectors (1 or 4), all held in registers across the nt keys (w key major,
 * rows of GS). */
AVX2_TARGET static inline __attribute__((always_inline)) void
accum_tile_avx2(const uint16_t *vb, int32_t nt, const float *w, int32_t GS, int32_t g0, int32_t c0, int32_t d,
                float *acc, const int HN, const int NC) {
    __m256 a[3][4];
    for (int i = 0; i < HN; i++)
        for (int v = 0; v < NC; v++) a[i][v] = _mm256_loadu_ps(acc + (size_t)(g0 + i) * d + c0 + 8 * v);
    for (int32_t t = 0; t < nt; t++) {
        __m256 wt[3];
        for (int i = 0; i < HN; i++) wt[i] = _mm256_broadcast_ss(w + (size_t)t * GS + g0 + i);
        for (int v = 0; v < NC; v++) {
            const __m256 vv = load_kv8(vb, (size_t)t * d + (size_t)c0 + 8 * (size_t)v);
            for (int i = 0; i < HN; i++) a[i][v] = _mm256_fmadd_ps(wt[i], vv, a[i][v]);
        }
    }
    for (int i = 0; i < HN; i++)
        for (int v = 0; v < NC; v++) _mm256_storeu_ps(acc + (size_t)(g0 + i) * d + c0 + 8 * v, a[i][v]);
}

AVX2_TARGET static inline __attribute__((always_inline)) void
accum_heads_avx2(const uint16_t *vb, int32_t nt, const float *w, int32_t GS, int32_t g0, int32_t d, float *acc,
                 const int HN) {
    int32_t c0 = 0;
    for (; c0 + 32 <= d; c0 += 32) accum_tile_avx2(vb, nt, w, GS, g0, c0, d, acc, HN, 4);
    for (; c0 < d; c0 += 8) accum_tile_avx2(vb, nt, w, GS, g0, c0, d, acc, HN, 1);
}

AVX2_TARGET static void block_accum_avx2(const uint16_t *vb, int32_t nt, const float *w, int32_t GS, int32_t G,
                                         int32_t d, float *acc) {
    int32_t g0 = 0;
    for (; g0 + 3 <= G; g0 += 3) accum_heads_avx2(vb, nt, w, GS, g0, d, acc, 3);
    if (G - g0 == 2) accum_heads_avx2(vb, nt, w, GS, g0, d, acc, 2);
    if (G - g0 == 1) accum_heads_avx2(vb, nt, w, GS, g0, d, acc, 1);
}

/* exp(x) for 8 floats: LOCKS_EXP_CEPHES (vmath.h), as vmath's exp8, so the same values. */
AVX2_TARGET static inline __m256 exp8(__m256 x) {
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    __m256 res;
    LOCKS_EXP_CEPHES(256, _mm256_round_ps, x, res);
    return _mm256_andnot_ps(under, res);
}

/* attend_block's softmax step on AVX2, 8 heads per vector over the key-major logits lg
 * [nt][GS]: the portable path's operations lane by lane (the maximum of the state's and
 * the block's, one key at a time; exp(logit - max) by exp8, as locks_exp_n; the weights
 * summed one by one in key order), so its results bit for bit. */
AVX2_TARGET static void block_softmax_avx2(float *lg, int32_t GS, int32_t nt, int32_t G, int32_t d, attn_state st) {
    for (int32_t g0 = 0; g0 < G; g0 += 8) {
        const int32_t gn = G - g0 < 8 ? G - g0 : 8;
        float m[8] = {0}, l[8];
        for (int32_t i = 0; i < gn; i++) m[i] = st.m[g0 + i];
        const __m256 m_old = _mm256_loadu_ps(m);
        __m256 mx = m_old;
        for (int32_t t = 0; t < nt; t++) mx = _mm256_max_ps(_mm256_loadu_ps(lg + (size_t)t * GS + g0), mx);
        _mm256_storeu_ps(m, mx);
        int up = _mm256_movemask_ps(_mm256_cmp_ps(mx, m_old, _CMP_GT_OQ)) & ((1 << gn) - 1);
        while (up) {
            const int i = __builtin_ctz((unsigned)up);
            up &= up - 1;
            const int32_t g = g0 + i;
            const float corr = expf(st.m[g] - m[i]); /* 0 on the first block (m = -inf) */
            float *acc = st.acc + (size_t)g * d;
            st.l[g] *= corr;
            for (int32_t x = 0; x < d; x++) acc[x] *= corr;
            st.m[g] = m[i];
        }
        __m256 sum = _mm256_setzero_ps();
        for (int32_t t = 0; t < nt; t++) {
            float *row = lg + (size_t)t * GS + g0;
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row), mx));
            _mm256_storeu_ps(row, e);
            sum = _mm256_add_ps(sum, e);
        }
        _mm256_storeu_ps(l, sum);
        for (int32_t i = 0; i < gn; i++) st.l[g0 + i] += l[i];
    }
}

/* AVX-512. Logits: 4 keys x up to 4 heads (HN, a constant per instantiation) make up
 * to 16 accumulators of 16 channels each, so a key row is converted once per 4 heads
 * and every product is register to register; the 16 accumulators are then summed
 * lane-wise into one vector by a transpose-and-add tree (reduce16) instead of a
 * horizontal sum per product. Every accumulator goes through the same sequence of
 * additions whatever its slot, so a (head, key) logit does not depend on which other
 * heads or keys share its call (the verify pass relies on that). */
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

/* r[4 q + m] = sum of the 16 lanes of a[4 m + q]. */
AVX512_TARGET static inline __m512 reduce16(const __m512 *a) {
    __m512 b[8], c[4], e[2];
    for (int i = 0; i < 8; i++) /* 256-bit halves: lane j + lane j + 8 */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* 128-bit quarters: + lane j + 4 */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* within quarters: + lane j + 2 */
        e[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44), _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD)); /* + lane j + 1 */
}

/* 16 fp16 values from p (the first 8 only, the rest 0, when half is set). */
AVX512_TARGET static inline __m512 load_f16x16(const uint16_t *p, int half) {
    return half ? _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p)))
                : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* exp(x) for 16 floats: LOCKS_EXP_CEPHES (vmath.h), as vmath's exp8 and exp16, so the
 * same values. */
AVX512_TARGET static inline __m512 exp16(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    __m512 res;
    LOCKS_EXP_CEPHES(512, _mm512_roundscale_ps, x, res);
    return _mm512_maskz_mov_ps((__mmask16)~under, res);
}

/* The sum of the 16 lanes of x by a fixed tree: ((j + j+8) + (j+4 + j+12)) pairs, then
 * (0 + 2) + (1 + 3) (GCC's _mm512_reduce_add_ps, written out so that the verify's
 * across-vector version, attend_rows_avx512, is the same tree whatever the compiler). */
AVX512_TARGET static inline float sum16(__m512 x) {
    const __m256 a = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)),
                                   _mm512_castps512_ps256(x));
    const __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b)); /* c0 = b0 + b2, c1 = b1 + b3 */
    return _mm_cvtss_f32(c) + _mm_cvtss_f32(_mm_shuffle_ps(c, c, 1));
}

/* 16 keys' or values' channels from an fp16 block, or (F32) from the block converted
 * once to fp32 (the same values: fp16 -> fp32 is exact); the first 8 only when half. */
AVX512_TARGET static inline __m512 load_kv16(const void *b, size_t off, int half, const int F32) {
    if (F32) return _mm512_maskz_loadu_ps(half ? 0x00ff : 0xffff, (const float *)b + off);
    return load_f16x16((const uint16_t *)b + off, half);
}

/* logit[g0 + i][t] for heads g0 .. g0 + HN - 1 and every key t < nt (kb fp16, or fp32
 * when F32). */
AVX512_TARGET static inline __attribute__((always_inline)) void
logits_heads_avx512(const void *kb, int32_t nt, const float *q, int32_t g0, int32_t d, float scale,
                    float (*logit)[P], const int HN, const int F32, page_prefetch pf) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int32_t t0 = 0; t0 < nt; t0 += 4) {
        prefetch_part(pf, t0, t0 + 4 < nt ? t0 + 4 : nt, nt);
        __m512 a[16];
        for (int s = 0; s < 16; s++) a[s] = _mm512_setzero_ps();
        size_t k[4]; /* element offsets of the 4 keys (the last repeated past nt) */
        for (int j = 0; j < 4; j++) k[j] = (size_t)(t0 + j < nt ? t0 + j : nt - 1) * d;
        for (int32_t c = 0; c < d; c += 16) {
            const int half = d - c < 16;
            const __mmask16 m = half ? 0x00ff : 0xffff;
            __m512 kv[4];
            for (int j = 0; j < 4; j++) kv[j] = load_kv16(kb, k[j] + (size_t)c, half, F32);
            for (int i = 0; i < HN; i++) {
                const __m512 qv = _mm512_maskz_loadu_ps(m, q + (size_t)(g0 + i) * d + c);
                for (int j = 0; j < 4; j++) a[4 * j + i] = _mm512_fmadd_ps(qv, kv[j], a[4 * j + i]);
            }
        }
        /* accumulator 4 j + i (head i, key j) sums into lane 4 i + j: a head's 4 logits
         * are one 128-bit lane */
        const __m512 r = _mm512_mul_ps(reduce16(a), vs);
        if (t0 + 4 <= nt) {
            _mm_storeu_ps(&logit[g0][t0], _mm512_castps512_ps128(r));
            if (HN > 1) _mm_storeu_ps(&logit[g0 + 1][t0], _mm512_extractf32x4_ps(r, 1));
            if (HN > 2) _mm_storeu_ps(&logit[g0 + 2][t0], _mm512_extractf32x4_ps(r, 2));
            if (HN > 3) _mm_storeu_ps(&logit[g0 + 3][t0], _mm512_extractf32x4_ps(r, 3));
        } else {
            float rs[16];
            _mm512_storeu_ps(rs, r);
            for (int i = 0; i < HN; i++)
                for (int j = 0; t0 + j < nt; j++) logit[g0 + i][t0 + j] = rs[4 * i + j];
        }
    }
}

AVX512_TARGET static inline __attribute__((always_inline)) void
logits_avx512(const void *kb, int32_t nt, const float *q, int32_t G, int32_t d, float scale, float (*logit)[P],
              const int F32, page_prefetch pf) {
    int32_t g0 = 0; /* pf: asked for by the first pass over the keys */
    for (; g0 + 4 <= G; g0 += 4, pf = NO_PREFETCH) logits_heads_avx512(kb, nt, q, g0, d, scale, logit, 4, F32, pf);
    switch (G - g0) {
    case 3: logits_heads_avx512(kb, nt, q, g0, d, scale, logit, 3, F32, pf); break;
    case 2: logits_heads_avx512(kb, nt, q, g0, d, scale, logit, 2, F32, pf); break;
    case 1: logits_heads_avx512(kb, nt, q, g0, d, scale, logit, 1, F32, pf); break;
    default: break;
    }
}

AVX512_TARGET static void block_logits_avx512(const uint16_t *kb, int32_t nt, const float *q, int32_t G, int32_t d,
                                              float scale, float (*logit)[P], page_prefetch pf) {
    logits_avx512(kb, nt, q, G, d, scale, logit, 0, pf);
}

/* The same from a block converted to fp32 (kf [nt][d]): for many heads (G > 4), which
 * would otherwise convert each key once per 4 heads. */
AVX512_TARGET static void block_logits_f32_avx512(const float *kf, int32_t nt, const float *q, int32_t G, int32_t d,
                                                  float scale, float (*logit)[P], page_prefetch pf) {
    logits_avx512(kf, nt, q, G, d, scale, logit, 1, pf);
}

/* acc[g0 + i] += sum_t w(g0 + i, t) v_t for HN heads: 64 channels (4 vectors, the
 * ones past d masked off) of every head held in registers across the keys; vb fp16, or
 * fp32 when F32; w(g, t) = w[g gs + t ts]. */
AVX512_TARGET static inline __attribute__((always_inline)) void
accum_heads_avx512(const void *vb, int32_t nt, const float *w, int32_t gs, int32_t ts, int32_t g0, int32_t d,
                   float *acc, const int HN, const int F32) {
    for (int32_t c0 = 0; c0 < d; c0 += 64) {
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            const int32_t left = d - c0 - 16 * v;
            m[v] = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        }
        __m512 a[4][4];
        for (int i = 0; i < HN; i++)
            for (int v = 0; v < 4; v++) a[i][v] = _mm512_maskz_loadu_ps(m[v], acc + (size_t)(g0 + i) * d + c0 + 16 * v);
        for (int32_t t = 0; t < nt; t++) {
            __m512 vv[4];
            for (int v = 0; v < 4; v++)
                vv[v] = F32 ? _mm512_maskz_loadu_ps(m[v], (const float *)vb + (size_t)t * d + c0 + 16 * v)
                            : _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[v], (const uint16_t *)vb + (size_t)t * d + c0 + 16 * v));
            for (int i = 0; i < HN; i++) {
                const __m512 wt = _mm512_set1_ps(w[(size_t)(g0 + i) * gs + (size_t)t * ts]);
                for (int v = 0; v < 4; v++) a[i][v] = _mm512_fmadd_ps(wt, vv[v], a[i][v]);
            }
        }
        for (int i = 0; i < HN; i++)
            for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(acc + (size_t)(g0 + i) * d + c0 + 16 * v, m[v], a[i][v]);
    }
}

AVX512_TARGET static inline __attribute__((always_inline)) void
accum_avx512(const void *vb, int32_t nt, const float (*w)[P], int32_t G, int32_t d, float *acc, const int F32) {
    int32_t g0 = 0;
    const float *wf = &w[0][0];
    for (; g0 + 4 <= G; g0 += 4) accum_heads_avx512(vb, nt, wf, P, 1, g0, d, acc, 4, F32);
    switch (G - g0) {
    case 3: accum_heads_avx512(vb, nt, wf, P, 1, g0, d, acc, 3, F32); break;
    case 2: accum_heads_avx512(vb, nt, wf, P, 1, g0, d, acc, 2, F32); break;
    case 1: accum_heads_avx512(vb, nt, wf, P, 1, g0, d, acc, 1, F32); break;
    default: break;
    }
}

AVX512_TARGET static void block_accum_avx512(const uint16_t *vb, int32_t nt, const float (*w)[P], int32_t G,
                                             int32_t d, float *acc) {
    accum_avx512(vb, nt, w, G, d, acc, 0);
}

AVX512_TARGET static void block_accum_f32_avx512(const float *vf, int32_t nt, const float (*w)[P], int32_t G,
                                                 int32_t d, float *acc) {
    accum_avx512(vf, nt, w, G, d, acc, 1);
}

/* dst[i] = src[i] for n fp16 values, 16 at a time (the last ones masked). */
AVX512_TARGET static void f16_to_f32_avx512(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}
#endif

void locks_block_logits(const uint16_t *kb, int32_t nt, const float *q, int32_t G, int32_t d,
                        float scale, float (*logit)[LOCKS_PAGE]) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        block_logits_avx512(kb, nt, q, G, d, scale, logit, NO_PREFETCH);
        return;
    }
    if (locks_have_avx2()) { /* key major, then transposed */
        const int32_t GS = (G + 7) / 8 * 8;
        float lg[P * 64];
        block_logits_avx2(kb, nt, q, G, d, scale, lg, GS, NO_PREFETCH);
        for (int32_t g = 0; g < G; g++)
            for (int32_t t = 0; t < nt; t++) logit[g][t] = lg[(size_t)t * GS + g];
        return;
    }
#endif
    float kv[P * LOCKS_MAX_HEAD_DIM];
    locks_f16_to_f32_n(kb, kv, (size_t)nt * d);
    for (int32_t g = 0; g < G; g++)
        for (int32_t t = 0; t < nt; t++) logit[g][t] = scale * locks_dot(q + (size_t)g * d, kv + (size_t)t * d, d);
}

static void block_accum(const uint16_t *vb, int32_t nt, const float (*w)[P], int32_t G, int32_t d,
                        float *acc) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        block_accum_avx512(vb, nt, w, G, d, acc);
        return;
    }
#endif
    float kv[P * LOCKS_MAX_HEAD_DIM];
    locks_f16_to_f32_n(vb, kv, (size_t)nt * d);
    for (int32_t g = 0; g < G; g++) {
        float *a = acc + (size_t)g * d;
        for (int32_t t = 0; t < nt; t++) {
            const float *vt = kv + (size_t)t * d;
            const float wt = w[g][t];
            for (int32_t i = 0; i < d; i++) a[i] += wt * vt[i];
        }
    }
}

/* Asks for the K and V blocks of the next page while this one is processed: blocks of
 * one KV head sit Hkv * 4 KiB apart, a new 4 KiB page for every block, which the
 * hardware prefetchers do not follow on their own. */
static void prefetch_blocks(const uint16_t *kb, const uint16_t *vb, size_t bytes) {
    prefetch_part((page_prefetch){(const char *)kb, (const char *)vb, bytes}, 0, 1, 1); /* at once */
}

#ifdef LOCKS_X86
/* attend_block's softmax step, one head's 16 logits as one vector: masked max, exp16,
 * the sum by a fixed tree; logits from nt on become 0. */
AVX512_TARGET static void block_softmax_avx512(float (*logit)[P], int32_t nt, int32_t G, int32_t d, attn_state st) {
    const __mmask16 k = (__mmask16)((1u << nt) - 1);
    for (int32_t g = 0; g < G; g++) {
        const __m512 x = _mm512_maskz_loadu_ps(k, logit[g]);
        float mx = _mm512_mask_reduce_max_ps(k, x);
        if (mx > st.m[g]) {
            const float corr = expf(st.m[g] - mx); /* 0 on the first block (m = -inf) */
            float *acc = st.acc + (size_t)g * d;
            st.l[g] *= corr;
            for (int32_t i = 0; i < d; i++) acc[i] *= corr;
            st.m[g] = mx;
        }
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(x, _mm512_set1_ps(st.m[g]))));
        _mm512_storeu_ps(logit[g], e);
        st.l[g] += sum16(e);
    }
}

/* ---- Verify: up to 16 rows (query x head pairs of one KV head) in the lanes ---- */
/*
 * For the verify pass's whole pages (attend_rows_avx512): a vector holds one key's
 * value for 16 rows, so a logit needs no horizontal sum and the softmax of 16 rows is a
 * handful of vectors. Each number is formed by the operations attend_block's kernels use
 * for a row on its own, in the same order, so bit for bit alike:
 *  - logit (row, key) = scale * tree(P_0 .. P_15), P_j = the FMA chain over channels
 *    j, j + 16, j + 32, ... from 0 (logits_heads_avx512's lane j), tree = reduce16's:
 *    ((P_j + P_j+8) + (.. +4)) then + 2, + 1 (here across vectors, there across lanes);
 *  - the softmax: the max over the keys, the rescale when it grows (per row, scalar),
 *    exp16 of (logit - m), their sum by sum16's tree across the 16 key vectors;
 *  - acc (row, channel) = the FMA chain over the keys in order (accum_heads_avx512).
 */

/* S1_j = P_j + P_j+8 for the 4 keys t0 .. t0 + 3 of kf [P][d] (fp32) against the rows
 * of qT [d][16]: P_j the FMA chain over channels j, j + 16, ... (from 0). */
AVX512_TARGET static inline __attribute__((always_inline)) void
rows_pair_avx512(const float *kf, int32_t t0, const float *qT, int32_t d, int j, __m512 *s1) {
    __m512 pa[4], pb[4];
    for (int k = 0; k < 4; k++) pa[k] = pb[k] = _mm512_setzero_ps();
    for (int32_t c = j; c < d; c += 16) {
        const __m512 qa = _mm512_load_ps(qT + (size_t)c * 16), qb = _mm512_load_ps(qT + (size_t)(c + 8) * 16);
        for (int k = 0; k < 4; k++) {
            const float *kr = kf + (size_t)(t0 + k) * d;
            pa[k] = _mm512_fmadd_ps(qa, _mm512_set1_ps(kr[c]), pa[k]);
            pb[k] = _mm512_fmadd_ps(qb, _mm512_set1_ps(kr[c + 8]), pb[k]);
        }
    }
    for (int k = 0; k < 4; k++) s1[k] = _mm512_add_ps(pa[k], pb[k]);
}

/* lg[t0 .. t0 + 3]: reduce16's tree, S2_j = S1_j + S1_j+4, S3_j = S2_j + S2_j+2,
 * S3_0 + S3_1, times the scale. */
AVX512_TARGET static inline __attribute__((always_inline)) void
rows_logits4_avx512(const float *kf, int32_t t0, const float *qT, int32_t d, __m512 vs, __m512 *lg) {
    __m512 a[4], b[4], s20[4], s30[4], s21[4];
    rows_pair_avx512(kf, t0, qT, d, 0, a);
    rows_pair_avx512(kf, t0, qT, d, 4, b);
    for (int k = 0; k < 4; k++) s20[k] = _mm512_add_ps(a[k], b[k]);
    rows_pair_avx512(kf, t0, qT, d, 2, a);
    rows_pair_avx512(kf, t0, qT, d, 6, b);
    for (int k = 0; k < 4; k++) s30[k] = _mm512_add_ps(s20[k], _mm512_add_ps(a[k], b[k]));
    rows_pair_avx512(kf, t0, qT, d, 1, a);
    rows_pair_avx512(kf, t0, qT, d, 5, b);
    for (int k = 0; k < 4; k++) s21[k] = _mm512_add_ps(a[k], b[k]);
    rows_pair_avx512(kf, t0, qT, d, 3, a);
    rows_pair_avx512(kf, t0, qT, d, 7, b);
    for (int k = 0; k < 4; k++)
        lg[t0 + k] = _mm512_mul_ps(_mm512_add_ps(s30[k], _mm512_add_ps(s21[k], _mm512_add_ps(a[k], b[k]))), vs);
}

/* Folds one whole page (kb, vb fp16 [P][d], d a multiple of 16) into rows [lo, hi) of
 * the 16 whose queries qT [d][16] holds (lanes outside [lo, hi) are computed and
 * dropped); row r's state is m[r], l[r], acc[r * d ..] of st. kf, vf: [P][d] scratch.
 * pf: a later page's blocks, asked for a quarter at a time between the logit steps
 * (page_prefetch; attn_dram.c, 30 layers x 6,480 tokens from DRAM, 5 queries on 2
 * threads: 23.0-29.1 ms with the burst, 18.3-22.2 spread). */
AVX512_TARGET static void attend_rows_avx512(const uint16_t *kb, const uint16_t *vb, const float *qT, int32_t lo,
                                             int32_t hi, int32_t d, float scale, attn_state st, float *kf, float *vf,
                                             page_prefetch pf) {
    f16_to_f32_avx512(kb, kf, (size_t)P * d);
    f16_to_f32_avx512(vb, vf, (size_t)P * d);
    __m512 lg[P];
    const __m512 vs = _mm512_set1_ps(scale);
    for (int32_t t0 = 0; t0 < P; t0 += 4) {
        prefetch_part(pf, t0, t0 + 4, P);
        rows_logits4_avx512(kf, t0, qT, d, vs, lg);
    }
    /* softmax: the max over the keys, then each row's rescale as block_softmax_avx512 */
    __m512 mx = lg[0];
    for (int t = 1; t < P; t++) mx = _mm512_max_ps(mx, lg[t]);
    float mxs[16], ms[16];
    _mm512_storeu_ps(mxs, mx);
    for (int32_t r = lo; r < hi; r++) {
        if (mxs[r] > st.m[r]) {
            const float corr = expf(st.m[r] - mxs[r]);
            float *acc = st.acc + (size_t)r * d;
            st.l[r] *= corr;
            for (int32_t i = 0; i < d; i++) acc[i] *= corr;
            st.m[r] = mxs[r];
        }
    }
    for (int r = 0; r < 16; r++) ms[r] = r >= lo && r < hi ? st.m[r] : 0.0f;
    const __m512 mv = _mm512_loadu_ps(ms);
    float w[P][16] __attribute__((aligned(64)));
    __m512 e[P];
    for (int t = 0; t < P; t++) {
        e[t] = exp16(_mm512_sub_ps(lg[t], mv));
        _mm512_store_ps(w[t], e[t]);
    }
    /* sum16's tree over the keys: (t + t+8), (+ t+4), (0 + 2, 1 + 3), (0 + 1) */
    for (int t = 0; t < 8; t++) e[t] = _mm512_add_ps(e[t + 8], e[t]);
    for (int t = 0; t < 4; t++) e[t] = _mm512_add_ps(e[t + 4], e[t]);
    const __m512 ls = _mm512_add_ps(_mm512_add_ps(e[0], e[2]), _mm512_add_ps(e[1], e[3]));
    float lss[16];
    _mm512_storeu_ps(lss, ls);
    for (int32_t r = lo; r < hi; r++) st.l[r] += lss[r];
    /* acc[r] += sum_t w[t][r] v_t: accum_heads_avx512 with the weights key major */
    int32_t r0 = lo;
    for (; r0 + 4 <= hi; r0 += 4) accum_heads_avx512(vf, P, &w[0][0], 1, 16, r0, d, st.acc, 4, 1);
    switch (hi - r0) {
    case 3: accum_heads_avx512(vf, P, &w[0][0], 1, 16, r0, d, st.acc, 3, 1); break;
    case 2: accum_heads_avx512(vf, P, &w[0][0], 1, 16, r0, d, st.acc, 2, 1); break;
    case 1: accum_heads_avx512(vf, P, &w[0][0], 1, 16, r0, d, st.acc, 1, 1); break;
    default: break;
    }
}

/* qT [d][16] = rows [r0, r0 + 16) of q [n_rows][d] transposed (rows past n_rows: 0). */
static void rows_transpose(const float *q, int32_t n_rows, int32_t r0, int32_t d, float *qT) {
    for (int32_t c = 0; c < d; c++)
        for (int32_t r = 0; r < 16; r++) qT[(size_t)c * 16 + r] = r0 + r < n_rows ? q[(size_t)(r0 + r) * d + c] : 0.0f;
}

#endif

/* Folds the first nt tokens of one (page, KV head) block into the state of G heads; asks
 * for pf's blocks on the way (the SIMD kernels spread over the logit steps, the portable
 * path at once). */
static void attend_block(const uint16_t *kb, const uint16_t *vb, int32_t nt, const float *q,
                         int32_t G, int32_t d, float scale, attn_state st, page_prefetch pf) {
    float logit[64][P]; /* G <= 64 (checked by the callers) */
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        if (G > 4) { /* several 4-head passes: convert K and V once, not once per pass */
            float kf[P * LOCKS_MAX_HEAD_DIM], vf[P * LOCKS_MAX_HEAD_DIM];
            f16_to_f32_avx512(kb, kf, (size_t)nt * d);
            f16_to_f32_avx512(vb, vf, (size_t)nt * d);
            block_logits_f32_avx512(kf, nt, q, G, d, scale, logit, pf);
            block_softmax_avx512(logit, nt, G, d, st);
            block_accum_f32_avx512(vf, nt, (const float(*)[P])logit, G, d, st.acc);
            return;
        }
        block_logits_avx512(kb, nt, q, G, d, scale, logit, pf);
        block_softmax_avx512(logit, nt, G, d, st);
        block_accum(vb, nt, (const float(*)[P])logit, G, d, st.acc);
        return;
    }
    if (locks_have_avx2()) { /* the logits key major: lg [nt][GS] */
        const int32_t GS = (G + 7) / 8 * 8;
        float *lg = &logit[0][0];
        block_logits_avx2(kb, nt, q, G, d, scale, lg, GS, pf);
        block_softmax_avx2(lg, GS, nt, G, d, st);
        block_accum_avx2(vb, nt, lg, GS, G, d, st.acc);
        return;
    }
#endif
    prefetch_part(pf, 0, 1, 1);
    locks_block_logits(kb, nt, q, G, d, scale, logit);
    for (int32_t g = 0; g < G; g++) {
        float mx = st.m[g];
        for (int32_t t = 0; t < nt; t++) mx = logit[g][t] > mx ? logit[g][t] : mx;
        if (mx > st.m[g]) {
            float corr = expf(st.m[g] - mx); /* 0 on the first block (m = -inf) */
            float *acc = st.acc + (size_t)g * d;
            st.l[g] *= corr;
            for (int32_t i = 0; i < d; i++) acc[i] *= corr;
            st.m[g] = mx;
        }
        for (int32_t t = 0; t < nt; t++) logit[g][t] -= mx;
        for (int32_t t = nt; t < P; t++) logit[g][t] = -100.0f;
    }
    locks_exp_n(&logit[0][0], (size_t)G * P);
    for (int32_t g = 0; g < G; g++) {
        float l = 0.0f;
        for (int32_t t = 0; t < nt; t++) l += logit[g][t];
        st.l[g] += l;
    }
    block_accum(vb, nt, (const float(*)[P])logit, G, d, st.acc);
}

/* ---------------------------------------------------------------------------------- */
/* Decode: chunks of the selected pages, then a log-sum-exp merge                       */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t seq, h, first, count; /* pages[first .. first + count) of (seq, KV head h) */
} attn_chunk;

typedef struct {
    locks_cache *c;
    int32_t layer, G;
    float scale;
    locks_seq_work *w;
    attn_chunk *chunks;
    float *part; /* [n_chunks][G][d + 2]: acc, then m, l */
} attend_job;

static void attend_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    attend_job *j = arg;
    const attn_chunk ch = j->chunks[t];
    const locks_seq_work *w = &j->w[ch.seq];
    const int32_t d = j->c->d, G = j->G;
    float *part = j->part + (size_t)t * G * (d + 2);
    attn_state st = {part + (size_t)G * d, part + (size_t)G * d + G, part};
    state_reset(st, G, d);
    const int32_t *pg = w->pages + (size_t)ch.h * w->max_pages + ch.first;
    const float *q = w->q + (size_t)ch.h * G * d;
    const size_t block_bytes = (size_t)P * d * sizeof(uint16_t);
    uint16_t tmp_k[P * LOCKS_MAX_HEAD_DIM], tmp_v[P * LOCKS_MAX_HEAD_DIM];
    for (int32_t i = 0; i < ch.count && i < DECODE_AHEAD - 1; i++) {
        int32_t next = w->s->table[pg[i]];
        prefetch_blocks(locks_cache_kblock(j->c, j->layer, next, ch.h),
                        locks_cache_vblock(j->c, j->layer, next, ch.h), block_bytes);
    }
    for (int32_t i = 0; i < ch.count; i++) {
        int32_t lp = pg[i], nt = w->s->len - lp * P;
        if (nt > P) nt = P;
        int32_t phys = w->s->table[lp];
        page_prefetch pf = NO_PREFETCH; /* the page DECODE_AHEAD - 1 on, spread over this one's */
        if (i + DECODE_AHEAD - 1 < ch.count) {
            int32_t next = w->s->table[pg[i + DECODE_AHEAD - 1]];
            pf = (page_prefetch){(const char *)locks_cache_kblock(j->c, j->layer, next, ch.h),
                                 (const char *)locks_cache_vblock(j->c, j->layer, next, ch.h), block_bytes};
        }
        /* contiguous [P][d] blocks: the stored ones, or row copies of a caller's NHD page */
        const uint16_t *kb, *vb;
        locks_cache_kv_rows(j->c, j->layer, phys, ch.h, tmp_k, tmp_v, &kb, &vb);
        attend_block(kb, vb, nt, q, G, d, j->scale, st, pf);
    }
}

/* Pages per chunk of a decode attention over total (KV head, page) blocks: ~8 tasks per
 * thread overall, 8..256 pages each. The verify pass (below) uses it too: the chunks
 * decide the merge, so they are part of the result. */
static int32_t attend_chunk_pages(int64_t total, int32_t threads) {
    const int64_t per = total / (8 * (int64_t)threads);
    return per < 8 ? 8 : per > 256 ? 256 : (int32_t)per;
}

locks_status locks_attend_run(locks_cache *c, int32_t layer, locks_seq_work *w, int32_t n_seqs,
                              int32_t n_q_heads, float scale) {
    const int32_t H = c->hkv, G = n_q_heads / H, d = c->d;
    if (G > 64) return LOCKS_ERR_UNSUPPORTED;
    int64_t total = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t h = 0; h < H; h++) total += w[s].n_pages[h];
    const int32_t chunk = attend_chunk_pages(total, locks_pool_threads(c->pool));
    int64_t n_chunks = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t h = 0; h < H; h++) n_chunks += (w[s].n_pages[h] + chunk - 1) / chunk;
    size_t part_floats = (size_t)G * (d + 2);
    size_t bytes = (size_t)n_chunks * (sizeof(attn_chunk) + part_floats * sizeof(float)) + 64;
    uint8_t *buf = locks_cache_scratch(c, 2, bytes);
    if (!buf) return LOCKS_ERR_OOM;
    float *part = (float *)(void *)buf;
    attn_chunk *chunks = (attn_chunk *)(void *)(buf + (size_t)n_chunks * part_floats * sizeof(float));
    int32_t n = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t h = 0; h < H; h++)
            for (int32_t f = 0; f < w[s].n_pages[h]; f += chunk) {
                int32_t cnt = w[s].n_pages[h] - f < chunk ? w[s].n_pages[h] - f : chunk;
                chunks[n++] = (attn_chunk){s, h, f, cnt};
            }
    attend_job job = {c, layer, G, scale, w, chunks, part};
    locks_pool_run(c->pool, n, attend_task, &job);
    /* merge: chunks of one (seq, h) are consecutive */
    int32_t i = 0;
    while (i < n) {
        int32_t e = i;
        while (e < n && chunks[e].seq == chunks[i].seq && chunks[e].h == chunks[i].h) e++;
        locks_seq_work *ws = &w[chunks[i].seq];
        for (int32_t g = 0; g < G; g++) {
            int32_t hq = chunks[i].h * G + g;
            float M = -INFINITY;
            for (int32_t k = i; k < e; k++) {
                float mk = part[(size_t)k * part_floats + (size_t)G * d + g];
                M = mk > M ? mk : M;
            }
            float L = 0.0f;
            float *o = ws->out + (size_t)hq * d;
            memset(o, 0, sizeof(float) * (size_t)d);
            for (int32_t k = i; k < e; k++) {
                const float *pk = part + (size_t)k * part_floats;
                float mk = pk[(size_t)G * d + g], lk = pk[(size_t)G * d + G + g];
                if (lk == 0.0f) continue;
                float f = expf(mk - M);
                L += lk * f;
                for (int32_t x = 0; x < d; x++) o[x] += f * pk[(size_t)g * d + x];
            }
            float inv = L > 0.0f ? 1.0f / L : 0.0f;
            for (int32_t x = 0; x < d; x++) o[x] *= inv;
            if (ws->lse) ws->lse[hq] = M + logf(L);
        }
        i = e;
    }
    /* a (seq, head) with no page at all gets zeros */
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t h = 0; h < H; h++)
            if (w[s].n_pages[h] == 0)
                for (int32_t g = 0; g < G; g++) {
                    memset(w[s].out + ((size_t)h * G + g) * d, 0, sizeof(float) * (size_t)d);
                    if (w[s].lse) w[s].lse[h * G + g] = -INFINITY;
                }
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Verify: dense decode attention of n consecutive queries, each K/V page read once      */
/* ---------------------------------------------------------------------------------- */

/*
 * Query i (0 <= i < n) is the token at position len0 + i - 1 and sees the first
 * len_i = len0 + i tokens. On its own it would be a dense decode step: every page
 * 0 .. np_i - 1 of every KV head through locks_attend_run, split into chunks of
 * chunk(np_i) pages, merged. Here the queries whose chunk size is the same (lengths are
 * consecutive, so they form runs) share tasks: a task (run, KV head, chunk c) folds
 * every page of chunk c once into the state of every query of the run that sees it.
 * The queries that see a page whole are a suffix of the run and go through attend_block
 * together as (queries x G) heads; the few that see it partially (their last page) one
 * by one. attend_block's arithmetic is per head (the SIMD kernels compute each head's
 * dot products and sums alike in any slot and lane, exp is elementwise; fp32 K/V for
 * many heads are the fp16 values exactly), and
 * the merge below is locks_attend_run's, so each query's output is bit for bit its own
 * decode step's. */

typedef struct {
    int32_t qa, qb, chunk; /* queries [qa, qb), chunk pages */
    int32_t n_chunks;      /* chunks of its longest query */
    size_t part0;          /* offset of its first task's state (floats) */
} verify_run;

typedef struct {
    locks_cache *c;
    const locks_seq *s;
    int32_t layer, G, len0, n_q_heads;
    float scale;
    const float *qh; /* [Hkv][n][G][d] the queries, per KV head */
    int32_t n;
    const verify_run *runs;
    const int32_t *task_run; /* task -> run */
    const int32_t *task_first; /* task -> first task of its run */
    float *part;              /* per task: acc[nq G][d], m[nq G], l[nq G] */
    float *qT;                /* NULL, or per thread qT_floats: the task's rows by 16, transposed */
    size_t qT_floats;
} verify_job;

static size_t verify_state_floats(int32_t nq, int32_t G, int32_t d) { return (size_t)nq * G * (d + 2); }

static void verify_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    verify_job *j = arg;
    const verify_run *r = &j->runs[j->task_run[t]];
    /* tasks chunk major (every KV head's first chunk, then the second, ...): the short
     * last chunks go last, so the threads finish together; the states stay head major */
    const int32_t H = j->c->hkv, local = t - j->task_first[t], h = local % H, ci = local / H;
    const int32_t d = j->c->d, G = j->G, nq = r->qb - r->qa, GN = nq * G;
    float *part = j->part + r->part0 + ((size_t)h * r->n_chunks + ci) * verify_state_floats(nq, G, d);
    attn_state st = {part + (size_t)GN * d, part + (size_t)GN * d + GN, part};
    state_reset(st, GN, d);
    const float *q = j->qh + ((size_t)h * j->n + r->qa) * G * d;
    const int32_t first = ci * r->chunk;
    const int32_t len_max = j->len0 + r->qb - 1, np_max = (len_max + P - 1) / P;
    const int32_t last = first + r->chunk < np_max ? first + r->chunk : np_max;
    const int32_t per_call = 64 / G; /* attend_block takes up to 64 heads */
    uint16_t tmp_k[P * LOCKS_MAX_HEAD_DIM], tmp_v[P * LOCKS_MAX_HEAD_DIM];
#ifdef LOCKS_X86
    /* whole pages by 16 rows in the lanes (attend_rows_avx512) where it applies */
    float *qT = j->qT ? j->qT + (size_t)thread * j->qT_floats : NULL;
    float kf[P * LOCKS_MAX_HEAD_DIM] __attribute__((aligned(64))), vf[P * LOCKS_MAX_HEAD_DIM] __attribute__((aligned(64)));
    if (qT)
        for (int32_t g0 = 0; g0 < GN; g0 += 16) rows_transpose(q, GN, g0, d, qT + (size_t)g0 * d);
#endif
    const size_t block_bytes = (size_t)P * d * sizeof(uint16_t);
    for (int32_t lp = first; lp < last && lp < first + PREFETCH_AHEAD - 1; lp++) { /* as attend_task */
        const int32_t next = j->s->table[lp];
        prefetch_blocks(locks_cache_kblock(j->c, j->layer, next, h), locks_cache_vblock(j->c, j->layer, next, h),
                        block_bytes);
    }
    for (int32_t lp = first; lp < last; lp++) {
        const int32_t phys = j->s->table[lp];
        /* query i (run-local) sees nt_i = len0 + qa + i - 16 lp tokens of this page */
        const int32_t base = j->len0 + r->qa - lp * P;
        int32_t i_act = 1 - base, i_full = P - base; /* first seeing it at all / whole */
        if (i_act < 0) i_act = 0;
        if (i_full < 0) i_full = 0;
        if (i_full > nq) i_full = nq;
        page_prefetch pf = NO_PREFETCH; /* the page PREFETCH_AHEAD - 1 on, for the first whole-page call */
        if (lp + PREFETCH_AHEAD - 1 < last) {
            const int32_t next = j->s->table[lp + PREFETCH_AHEAD - 1];
            const uint16_t *nk = locks_cache_kblock(j->c, j->layer, next, h), *nv = locks_cache_vblock(j->c, j->layer, next, h);
            if (i_full < nq) /* a whole-page call follows: it spreads the requests */
                pf = (page_prefetch){(const char *)nk, (const char *)nv, block_bytes};
            else
                prefetch_blocks(nk, nv, block_bytes);
        }
        const uint16_t *kb, *vb;
        locks_cache_kv_rows(j->c, j->layer, phys, h, tmp_k, tmp_v, &kb, &vb);
        for (int32_t i = i_act; i < i_full; i++) { /* partial: one query at a time */
            attn_state si = {st.m + (size_t)i * G, st.l + (size_t)i * G, st.acc + (size_t)i * G * d};
            attend_block(kb, vb, base + i, q + (size_t)i * G * d, G, d, j->scale, si, NO_PREFETCH);
        }
#ifdef LOCKS_X86
        if (qT) { /* whole: rows [i_full G, GN) by groups of 16 */
            for (int32_t g0 = i_full * G / 16 * 16; g0 < GN; g0 += 16) {
                const int32_t lo = i_full * G > g0 ? i_full * G - g0 : 0, hi = GN - g0 < 16 ? GN - g0 : 16;
                attn_state sg = {st.m + g0, st.l + g0, st.acc + (size_t)g0 * d};
                attend_rows_avx512(kb, vb, qT + (size_t)g0 * d, lo, hi, d, j->scale, sg, kf, vf, pf);
                pf = NO_PREFETCH;
            }
            continue;
        }
#endif
        for (int32_t i = i_full; i < nq; i += per_call) { /* whole: queries x heads at once */
            const int32_t m = nq - i < per_call ? nq - i : per_call;
            attn_state si = {st.m + (size_t)i * G, st.l + (size_t)i * G, st.acc + (size_t)i * G * d};
            attend_block(kb, vb, P, q + (size_t)i * G * d, m * G, d, j->scale, si, pf);
            pf = NO_PREFETCH;
        }
    }
}

locks_status locks_attend_verify_run(locks_cache *c, int32_t layer, const locks_seq *s, int32_t len0, int32_t n,
                                     const float *q, int32_t n_q_heads, float scale, float *out) {
    const int32_t H = c->hkv, G = n_q_heads / H, d = c->d, threads = locks_pool_threads(c->pool);
    if (G > 64) return LOCKS_ERR_UNSUPPORTED;
    /* runs of equal chunk size */
    int32_t n_runs = 0, n_tasks = 0;
    size_t part_floats = 0;
    for (int32_t i = 0; i < n;) {
        const int32_t np = (len0 + i + P - 1) / P, ch = attend_chunk_pages((int64_t)H * np, threads);
        int32_t e = i + 1;
        while (e < n && attend_chunk_pages((int64_t)H * ((len0 + e + P - 1) / P), threads) == ch) e++;
        const int32_t np_max = (len0 + e - 1 + P - 1) / P, nc = (np_max + ch - 1) / ch;
        n_runs++;
        n_tasks += H * nc;
        part_floats += (size_t)H * nc * verify_state_floats(e - i, G, d);
        i = e;
    }
    /* attend_rows_avx512's transposed rows: every row of a run, by 16, per thread */
    size_t qT_floats = 0;
#ifdef LOCKS_X86
    if (locks_have_avx512() && d % 16 == 0) qT_floats = (size_t)((n * G + 15) / 16) * 16 * d;
#endif
    const size_t bytes = part_floats * sizeof(float) + (size_t)H * n * G * d * sizeof(float) +
                         (size_t)n_runs * sizeof(verify_run) + (size_t)n_tasks * 2 * sizeof(int32_t) +
                         (size_t)threads * qT_floats * sizeof(float) + 320;
    uint8_t *buf = locks_cache_scratch(c, 2, bytes);
    if (!buf) return LOCKS_ERR_OOM;
    float *part = (float *)(void *)buf;
    float *qh = part + part_floats;
    verify_run *runs = (verify_run *)(void *)(((uintptr_t)(qh + (size_t)H * n * G * d) + 63) & ~(uintptr_t)63);
    int32_t *task_run = (int32_t *)(void *)(runs + n_runs), *task_first = task_run + n_tasks;
    for (int32_t h = 0; h < H; h++) /* qh[h][i] = the G heads of KV head h of query i */
        for (int32_t i = 0; i < n; i++)
            memcpy(qh + ((size_t)h * n + i) * G * d, q + (size_t)i * n_q_heads * d + (size_t)h * G * d,
                   sizeof(float) * (size_t)G * d);
    n_runs = 0;
    n_tasks = 0;
    part_floats = 0;
    for (int32_t i = 0; i < n;) {
        const int32_t np = (len0 + i + P - 1) / P, ch = attend_chunk_pages((int64_t)H * np, threads);
        int32_t e = i + 1;
        while (e < n && attend_chunk_pages((int64_t)H * ((len0 + e + P - 1) / P), threads) == ch) e++;
        const int32_t np_max = (len0 + e - 1 + P - 1) / P, nc = (np_max + ch - 1) / ch;
        runs[n_runs] = (verify_run){i, e, ch, nc, part_floats};
        for (int32_t k = 0; k < H * nc; k++) {
            task_run[n_tasks + k] = n_runs;
            task_first[n_tasks + k] = n_tasks;
        }
        n_tasks += H * nc;
        part_floats += (size_t)H * nc * verify_state_floats(e - i, G, d);
        n_runs++;
        i = e;
    }
    float *qT = qT_floats ? (float *)(void *)(((uintptr_t)(task_first + n_tasks) + 63) & ~(uintptr_t)63) : NULL;
    verify_job job = {c, s, layer, G, len0, n_q_heads, scale, qh, n, runs, task_run, task_first, part, qT, qT_floats};
    locks_pool_run(c->pool, n_tasks, verify_task, &job);
    /* merge, per query and head, over its own chunks in order: locks_attend_run's merge */
    for (int32_t ri = 0; ri < n_runs; ri++) {
        const verify_run *r = &runs[ri];
        const int32_t nq = r->qb - r->qa, GN = nq * G;
        const size_t sf = verify_state_floats(nq, G, d);
        for (int32_t i = 0; i < nq; i++) {
            const int32_t np = (len0 + r->qa + i + P - 1) / P, nc = (np + r->chunk - 1) / r->chunk;
            for (int32_t h = 0; h < H; h++)
                for (int32_t g = 0; g < G; g++) {
                    const size_t row = (size_t)i * G + g; /* row of the task's state */
                    const float *p0 = part + r->part0 + (size_t)h * r->n_chunks * sf;
                    float M = -INFINITY;
                    for (int32_t k = 0; k < nc; k++) {
                        float mk = p0[(size_t)k * sf + (size_t)GN * d + row];
                        M = mk > M ? mk : M;
                    }
                    float L = 0.0f;
                    float *o = out + (size_t)(r->qa + i) * n_q_heads * d + ((size_t)h * G + g) * d;
                    memset(o, 0, sizeof(float) * (size_t)d);
                    for (int32_t k = 0; k < nc; k++) {
                        const float *pk = p0 + (size_t)k * sf;
                        float mk = pk[(size_t)GN * d + row], lk = pk[(size_t)GN * d + GN + row];
                        if (lk == 0.0f) continue;
                        float f = expf(mk - M);
                        L += lk * f;
                        for (int32_t x = 0; x < d; x++) o[x] += f * pk[row * d + x];
                    }
                    float inv = L > 0.0f ? 1.0f / L : 0.0f;
                    for (int32_t x = 0; x < d; x++) o[x] *= inv;
                }
        }
    }
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Prefill: causal dense attention, one task per (KV head, tile of query tokens)        */
/* ---------------------------------------------------------------------------------- */

/*
 * A tile is T = max(1, PREFILL_ROWS / G) consecutive query tokens of the chunk; its
 * R = T * G rows (token-major: the G heads of one token are adjacent) all attend to
 * the same KV head, so each visible K/V page is converted from fp16 once per tile, not
 * once per query token. Pages are taken PREFILL_KEYS keys (4 pages) at a time: K
 * transposed ([d][keys], so the logits of a row are 8-wide FMA accumulators over the
 * channels with no horizontal sums), V as [keys][d]. Every row keeps its own online
 * softmax state (m, l, acc[d]) in fp32, updated once per key block. The causal mask is
 * a per-row count of visible keys, below the block size only on the blocks holding the
 * tile's own tokens. Tasks are handed out last tile first (the longest), for balance.
 */

enum {
    PREFILL_ROWS = 64, /* rows (token, head) per tile; G <= 64 keeps R <= 64 */
    PREFILL_KEYS = 64  /* keys per block: 4 pages */
};
#define KB PREFILL_KEYS

/* Per-thread scratch of a tile: R = rows, d = head dim. */
typedef struct {
    float *q;     /* [R][d] the tile's queries */
    float *acc;   /* [R][d] */
    float *m, *l; /* [R] */
    float *lg;    /* [R][KB] logits, then softmax weights */
    float *kt;    /* [d][KB] K block, fp32, transposed */
    float *kf;    /* [P][d] one K page, fp32 (before the transpose) */
    float *v;     /* [KB][d] V block, fp32 */
} prefill_scratch;

static size_t prefill_scratch_floats(int32_t R, int32_t d) {
    return (size_t)R * d * 2 + (size_t)R * 2 + (size_t)R * KB + (size_t)d * KB * 2 + (size_t)P * d;
}

static prefill_scratch prefill_scratch_at(float *base, int32_t R, int32_t d) {
    prefill_scratch s;
    s.q = base;
    s.acc = s.q + (size_t)R * d;
    s.m = s.acc + (size_t)R * d;
    s.l = s.m + R;
    s.lg = s.l + R;
    s.kt = s.lg + (size_t)R * KB;
    s.v = s.kt + (size_t)d * KB;
    s.kf = s.v + (size_t)KB * d;
    return s;
}

#ifdef LOCKS_X86
/* lg[r][t] = scale * q_r . k_t for R rows and the nk keys (a multiple of 16) of kt
 * [d][KB]: 16 keys of four rows at a time (eight independent accumulators); a last
 * group of fewer rows repeats its last row and drops the extra results. */
__attribute__((target("avx2,fma"))) static void tile_logits_avx2(const float *q, int32_t R, const float *kt,
                                                                  int32_t d, int32_t nk, float scale, float *lg) {
    const __m256 vs = _mm256_set1_ps(scale);
    for (int32_t r0 = 0; r0 < R; r0 += 4) {
        const int32_t rn = R - r0 < 4 ? R - r0 : 4;
        const float *q0 = q + (size_t)r0 * d, *q1 = q + (size_t)(r0 + (rn > 1)) * d,
                    *q2 = q + (size_t)(r0 + (rn > 2) * 2) * d, *q3 = q + (size_t)(r0 + (rn > 3) * 3) * d;
        for (int32_t k0 = 0; k0 < nk; k0 += 16) {
            __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
            for (int32_t c = 0; c < d; c++) {
                const float *kc = kt + (size_t)c * KB + k0;
                const __m256 klo = _mm256_loadu_ps(kc), khi = _mm256_loadu_ps(kc + 8);
                __m256 x = _mm256_broadcast_ss(q0 + c);
                a0 = _mm256_fmadd_ps(x, klo, a0);
                b0 = _mm256_fmadd_ps(x, khi, b0);
                x = _mm256_broadcast_ss(q1 + c);
                a1 = _mm256_fmadd_ps(x, klo, a1);
                b1 = _mm256_fmadd_ps(x, khi, b1);
                x = _mm256_broadcast_ss(q2 + c);
                a2 = _mm256_fmadd_ps(x, klo, a2);
                b2 = _mm256_fmadd_ps(x, khi, b2);
                x = _mm256_broadcast_ss(q3 + c);
                a3 = _mm256_fmadd_ps(x, klo, a3);
                b3 = _mm256_fmadd_ps(x, khi, b3);
            }
            float *o = lg + (size_t)r0 * KB + k0;
            _mm256_storeu_ps(o, _mm256_mul_ps(a0, vs));
            _mm256_storeu_ps(o + 8, _mm256_mul_ps(b0, vs));
            if (rn > 1) {
                _mm256_storeu_ps(o + KB, _mm256_mul_ps(a1, vs));
                _mm256_storeu_ps(o + KB + 8, _mm256_mul_ps(b1, vs));
            }
            if (rn > 2) {
                _mm256_storeu_ps(o + 2 * KB, _mm256_mul_ps(a2, vs));
                _mm256_storeu_ps(o + 2 * KB + 8, _mm256_mul_ps(b2, vs));
            }
            if (rn > 3) {
                _mm256_storeu_ps(o + 3 * KB, _mm256_mul_ps(a3, vs));
                _mm256_storeu_ps(o + 3 * KB + 8, _mm256_mul_ps(b3, vs));
            }
        }
    }
}

/* acc[r] += sum_{t < nk} w[r][t] v_t for R rows and an fp32 V block [KB][d]: 32
 * channels of two rows at a time (eight accumulators held across the keys), then the
 * 8-channel remainder. */
__attribute__((target("avx2,fma"))) static void tile_accum_avx2(const float *w, int32_t R, int32_t nk,
                                                                 const float *v, int32_t d, float *acc) {
    for (int32_t r0 = 0; r0 < R; r0 += 2) {
        const int32_t r1 = r0 + 1 < R ? r0 + 1 : r0; /* an odd last row is done twice, stored once */
        const float *w0 = w + (size_t)r0 * KB, *w1 = w + (size_t)r1 * KB;
        float *o0 = acc + (size_t)r0 * d, *o1 = acc + (size_t)r1 * d;
        int32_t c = 0;
        for (; c + 32 <= d; c += 32) {
            __m256 a0 = _mm256_loadu_ps(o0 + c), a1 = _mm256_loadu_ps(o0 + c + 8), a2 = _mm256_loadu_ps(o0 + c + 16),
                   a3 = _mm256_loadu_ps(o0 + c + 24);
            __m256 b0 = _mm256_loadu_ps(o1 + c), b1 = _mm256_loadu_ps(o1 + c + 8), b2 = _mm256_loadu_ps(o1 + c + 16),
                   b3 = _mm256_loadu_ps(o1 + c + 24);
            for (int32_t t = 0; t < nk; t++) {
                const float *vt = v + (size_t)t * d + c;
                const __m256 v0 = _mm256_loadu_ps(vt), v1 = _mm256_loadu_ps(vt + 8), v2 = _mm256_loadu_ps(vt + 16),
                             v3 = _mm256_loadu_ps(vt + 24);
                const __m256 x = _mm256_broadcast_ss(w0 + t), y = _mm256_broadcast_ss(w1 + t);
                a0 = _mm256_fmadd_ps(x, v0, a0);
                a1 = _mm256_fmadd_ps(x, v1, a1);
                a2 = _mm256_fmadd_ps(x, v2, a2);
                a3 = _mm256_fmadd_ps(x, v3, a3);
                b0 = _mm256_fmadd_ps(y, v0, b0);
                b1 = _mm256_fmadd_ps(y, v1, b1);
                b2 = _mm256_fmadd_ps(y, v2, b2);
                b3 = _mm256_fmadd_ps(y, v3, b3);
            }
            _mm256_storeu_ps(o1 + c, b0);
            _mm256_storeu_ps(o1 + c + 8, b1);
            _mm256_storeu_ps(o1 + c + 16, b2);
            _mm256_storeu_ps(o1 + c + 24, b3);
            _mm256_storeu_ps(o0 + c, a0);
            _mm256_storeu_ps(o0 + c + 8, a1);
            _mm256_storeu_ps(o0 + c + 16, a2);
            _mm256_storeu_ps(o0 + c + 24, a3);
        }
        for (; c < d; c += 8) {
            __m256 a = _mm256_loadu_ps(o0 + c), b = _mm256_loadu_ps(o1 + c);
            for (int32_t t = 0; t < nk; t++) {
                const __m256 vv = _mm256_loadu_ps(v + (size_t)t * d + c);
                a = _mm256_fmadd_ps(_mm256_broadcast_ss(w0 + t), vv, a);
                b = _mm256_fmadd_ps(_mm256_broadcast_ss(w1 + t), vv, b);
            }
            _mm256_storeu_ps(o1 + c, b);
            _mm256_storeu_ps(o0 + c, a);
        }
    }
}

/* AVX-512: lg[r][t] for four rows and NV (a constant: nk / 16) vectors of 16 keys, the
 * whole block's keys of four rows in 16 accumulators; the last group of fewer rows
 * repeats its last row and drops the extra results. */
AVX512_TARGET static inline __attribute__((always_inline)) void
tile_logits_rows_avx512(const float *q, int32_t R, const float *kt, int32_t d, float scale, float *lg, const int NV) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int32_t r0 = 0; r0 < R; r0 += 4) {
        const int32_t rn = R - r0 < 4 ? R - r0 : 4;
        const float *qr[4];
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) qr[i] = q + (size_t)(r0 + (i < rn ? i : rn - 1)) * d;
        __m512 a[4][4];
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            #pragma GCC unroll 4
            for (int v = 0; v < NV; v++) a[i][v] = _mm512_setzero_ps();
        for (int32_t c = 0; c < d; c++) {
            __m512 kv[4];
            #pragma GCC unroll 4
            for (int v = 0; v < NV; v++) kv[v] = _mm512_loadu_ps(kt + (size_t)c * KB + 16 * v);
            #pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m512 x = _mm512_set1_ps(qr[i][c]);
                #pragma GCC unroll 4
                for (int v = 0; v < NV; v++) a[i][v] = _mm512_fmadd_ps(x, kv[v], a[i][v]);
            }
        }
        #pragma GCC unroll 4
        for (int i = 0; i < rn; i++)
            #pragma GCC unroll 4
            for (int v = 0; v < NV; v++) _mm512_storeu_ps(lg + (size_t)(r0 + i) * KB + 16 * v, _mm512_mul_ps(a[i][v], vs));
    }
}

AVX512_TARGET static void tile_logits_avx512(const float *q, int32_t R, const float *kt, int32_t d, int32_t nk,
                                             float scale, float *lg) {
    switch (nk / 16) {
    case 4: tile_logits_rows_avx512(q, R, kt, d, scale, lg, 4); break;
    case 3: tile_logits_rows_avx512(q, R, kt, d, scale, lg, 3); break;
    case 2: tile_logits_rows_avx512(q, R, kt, d, scale, lg, 2); break;
    default: tile_logits_rows_avx512(q, R, kt, d, scale, lg, 1); break;
    }
}

/* acc[r] += sum_{t < nk} w[r][t] v_t: four rows x 64 channels (4 vectors, those past d
 * masked off) in 16 accumulators across the keys. */
AVX512_TARGET static void tile_accum_avx512(const float *w, int32_t R, int32_t nk, const float *v, int32_t d,
                                            float *acc) {
    for (int32_t r0 = 0; r0 < R; r0 += 4) {
        const int32_t rn = R - r0 < 4 ? R - r0 : 4;
        const float *wr[4];
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++) wr[i] = w + (size_t)(r0 + (i < rn ? i : rn - 1)) * KB;
        for (int32_t c0 = 0; c0 < d; c0 += 64) {
            __mmask16 m[4];
            #pragma GCC unroll 4
            for (int x = 0; x < 4; x++) {
                const int32_t left = d - c0 - 16 * x;
                m[x] = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            }
            __m512 a[4][4];
            #pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                #pragma GCC unroll 4
                for (int x = 0; x < 4; x++)
                    a[i][x] = _mm512_maskz_loadu_ps(m[x], acc + (size_t)(r0 + (i < rn ? i : rn - 1)) * d + c0 + 16 * x);
            for (int32_t t = 0; t < nk; t++) {
                __m512 vv[4];
                #pragma GCC unroll 4
                for (int x = 0; x < 4; x++) vv[x] = _mm512_maskz_loadu_ps(m[x], v + (size_t)t * d + c0 + 16 * x);
                #pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    const __m512 wt = _mm512_set1_ps(wr[i][t]);
                    #pragma GCC unroll 4
                    for (int x = 0; x < 4; x++) a[i][x] = _mm512_fmadd_ps(wt, vv[x], a[i][x]);
                }
            }
            #pragma GCC unroll 4
            for (int i = 0; i < rn; i++)
                #pragma GCC unroll 4
                for (int x = 0; x < 4; x++) _mm512_mask_storeu_ps(acc + (size_t)(r0 + i) * d + c0 + 16 * x, m[x], a[i][x]);
        }
    }
}
#endif

#ifdef LOCKS_X86
/* kt[c][t] = k[t][c] for the nt <= 16 fp16 rows of a K block ([P][d]); rows nt..15 give
 * zeros. 16 x 16 transposes in registers: pairs, quads, then 128-bit lanes twice. */
AVX512_TARGET static void transpose_k_avx512(const uint16_t *k, int32_t nt, int32_t d, float *kt) {
    for (int32_t c0 = 0; c0 < d; c0 += 16) {
        const int half = d - c0 < 16;
        __m512 r[16], t[16], u[16], v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) r[i] = i < nt ? load_f16x16(k + (size_t)i * d + c0, half) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        /* u[4 g + j], 128-bit lane L: column 4 L + j of rows 4 g .. 4 g + 3 */
#pragma GCC unroll 4
        for (int g = 0; g < 16; g += 4) {
            u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
            u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
            u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
            u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            v[j] = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);      /* lanes 0, 2 of rows 0-7 */
            v[4 + j] = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);  /* lanes 1, 3 */
            v[8 + j] = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
            v[12 + j] = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        }
        float *o = kt + (size_t)c0 * KB;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            _mm512_storeu_ps(o + (size_t)j * KB, _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88));
            _mm512_storeu_ps(o + (size_t)(4 + j) * KB, _mm512_shuffle_f32x4(v[4 + j], v[12 + j], 0x88));
            if (!half) {
                _mm512_storeu_ps(o + (size_t)(8 + j) * KB, _mm512_shuffle_f32x4(v[j], v[8 + j], 0xDD));
                _mm512_storeu_ps(o + (size_t)(12 + j) * KB, _mm512_shuffle_f32x4(v[4 + j], v[12 + j], 0xDD));
            }
        }
    }
}

/* One row's online-softmax update over its nv visible logits of lr [nkp] (see
 * prefill_row_update): lr becomes the weights, 0 from nv on. */
AVX512_TARGET static void prefill_row_avx512(float *lr, int32_t nv, int32_t nkp, float *m, float *l, float *acc,
                                             int32_t d) {
    if (nv > 0) {
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int32_t t = 0; t < nv; t += 16) {
            const __mmask16 k = nv - t >= 16 ? 0xffff : (__mmask16)((1u << (nv - t)) - 1);
            mx = _mm512_mask_max_ps(mx, k, mx, _mm512_loadu_ps(lr + t));
        }
        const float mxs = _mm512_reduce_max_ps(mx);
        if (mxs > *m) {
            const float corr = expf(*m - mxs); /* 0 on the row's first block (m = -inf) */
            *l *= corr;
            for (int32_t x = 0; x < d; x++) acc[x] *= corr;
            *m = mxs;
        }
        const __m512 vm = _mm512_set1_ps(*m);
        __m512 sum = _mm512_setzero_ps();
        for (int32_t t = 0; t < nkp; t += 16) {
            const int32_t left = nv - t;
            const __mmask16 k = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_loadu_ps(lr + t), vm)));
            _mm512_storeu_ps(lr + t, e);
            sum = _mm512_add_ps(sum, e);
        }
        *l += _mm512_reduce_add_ps(sum);
    } else {
        for (int32_t t = 0; t < nkp; t += 16) _mm512_storeu_ps(lr + t, _mm512_setzero_ps());
    }
}
#endif

/* The online-softmax update of one row given its logits lr [nkp] of a key block, of which
 * the first nv are visible: m, l and acc [d] rescaled to the new maximum, lr replaced by
 * the weights exp(lr - m) (0 from nv on, the causal mask). */
static void prefill_row_update(float *lr, int32_t nv, int32_t nkp, float *m, float *l, float *acc, int32_t d) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        prefill_row_avx512(lr, nv, nkp, m, l, acc, d);
        return;
    }
#endif
    if (nv > 0) {
        const float mx = locks_max_n(lr, (size_t)nv);
        if (mx > *m) {
            const float corr = expf(*m - mx); /* 0 on the row's first block (m = -inf) */
            *l *= corr;
            for (int32_t x = 0; x < d; x++) acc[x] *= corr;
            *m = mx;
        }
        *l += (float)locks_exp_sum_n(lr, (size_t)nv, *m);
    }
    for (int32_t t = nv; t < nkp; t++) lr[t] = 0.0f; /* masked */
}

static void tile_logits(const float *q, int32_t R, const float *kt, int32_t d, int32_t nk, float scale,
                        float *lg) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        tile_logits_avx512(q, R, kt, d, nk, scale, lg);
        return;
    }
    if (locks_have_avx2()) {
        tile_logits_avx2(q, R, kt, d, nk, scale, lg);
        return;
    }
#endif
    for (int32_t r = 0; r < R; r++) {
        float a[KB] = {0};
        const float *qr = q + (size_t)r * d;
        for (int32_t c = 0; c < d; c++)
            for (int32_t t = 0; t < nk; t++) a[t] += qr[c] * kt[(size_t)c * KB + t];
        for (int32_t t = 0; t < nk; t++) lg[(size_t)r * KB + t] = scale * a[t];
    }
}

static void tile_accum(const float *w, int32_t R, int32_t nk, const float *v, int32_t d, float *acc) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        tile_accum_avx512(w, R, nk, v, d, acc);
        return;
    }
    if (locks_have_avx2()) {
        tile_accum_avx2(w, R, nk, v, d, acc);
        return;
    }
#endif
    for (int32_t r = 0; r < R; r++) {
        float *a = acc + (size_t)r * d;
        for (int32_t t = 0; t < nk; t++) {
            const float wt = w[(size_t)r * KB + t], *vt = v + (size_t)t * d;
            for (int32_t x = 0; x < d; x++) a[x] += wt * vt[x];
        }
    }
}

typedef struct {
    locks_cache *c;
    const locks_seq *s;
    int32_t layer, pos, n, G, T, n_tiles;
    float scale;
    const float *q;
    float *out;
    float *scratch; /* per thread: prefill_scratch_floats(T * G, d) */
} prefill_job;

/* Converts keys [k0, k0 + nk) (whole pages but the last, k0 a multiple of KB) of KV
 * head h to fp32: K transposed into kt [d][KB], V into v [KB][d]. Keys from nk up to
 * the next multiple of 16 are zeros (their weights are 0 too, and 0 * 0 keeps the
 * accumulators exact). Returns that multiple of 16. */
/* Columns 0 .. P - 1 of kt [d][KB] from nt <= P fp16 K rows kb [nt][d] (columns nt ..
 * P - 1 zeros); kf [P][d] is scratch for the paths without a register transpose. */
static void load_kt_group(const uint16_t *kb, int32_t nt, int32_t d, float *kt, float *kf) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        transpose_k_avx512(kb, nt, d, kt);
        return;
    }
#endif
    locks_f16_to_f32_n(kb, kf, (size_t)nt * d);
    if (nt < P) memset(kf + (size_t)nt * d, 0, sizeof(float) * (size_t)(P - nt) * d);
    for (int32_t t = 0; t < P; t++)
        for (int32_t c = 0; c < d; c++) kt[(size_t)c * KB + t] = kf[(size_t)t * d + c];
}

static int32_t prefill_load_block(const prefill_job *j, const prefill_scratch *sc, int32_t k0, int32_t h,
                                  int32_t nk) {
    const int32_t d = j->c->d, nkp = (nk + P - 1) / P * P;
    for (int32_t p0 = 0; p0 < nkp; p0 += P) {
        const int32_t lp = (k0 + p0) / P, phys = j->s->table[lp], nt = nk - p0 < P ? nk - p0 : P;
        float *vb = sc->v + (size_t)p0 * d;
        locks_f16_to_f32_n(locks_cache_vblock(j->c, j->layer, phys, h), vb, (size_t)nt * d);
        if (nt < P) memset(vb + (size_t)nt * d, 0, sizeof(float) * (size_t)(P - nt) * d);
        load_kt_group(locks_cache_kblock(j->c, j->layer, phys, h), nt, d, sc->kt + p0, sc->kf);
    }
    return nkp;
}

/* ---------------------------------------------------------------------------------- */
/* Sliding-window tiles over a ring of fp16 K/V (Gemma 3's local layers, model/swa.c)  */
/* ---------------------------------------------------------------------------------- */

/*
 * The prefill tile's work (K block transposed, tile_logits, online softmax per row,
 * tile_accum) on keys addressed by position: key p's row is at k + (p % cap) * ld. Key
 * blocks are aligned to absolute positions (p0 a multiple of KB), and every row's state
 * is updated by its own visible keys only (the others' logits -inf, weights 0), so a
 * row's result does not depend on which other rows share its tile: a decoded token gets,
 * bit for bit, what it gets inside a verify or prefill batch.
 */
size_t locks_window_tile_floats(int32_t R, int32_t d) {
    return prefill_scratch_floats(R, d) + ((size_t)P * d + 1) / 2; /* + one fp16 group gathered */
}

void locks_window_tile(const uint16_t *k, const uint16_t *v, size_t ld, int32_t cap, int32_t d, const float *q,
                       int32_t R, int32_t G, int32_t first, int32_t window, int32_t part, int32_t n_parts,
                       float scale, float *scratch, float *m, float *l, float *acc) {
    prefill_scratch sc = prefill_scratch_at(scratch, R, d); /* its lg, kt, kf and v */
    uint16_t *kg = (uint16_t *)(void *)(scratch + prefill_scratch_floats(R, d));
    const int32_t end = first + R / G, lo = first - window + 1 > 0 ? first - window + 1 : 0;
    for (int32_t k0 = lo / KB * KB; k0 < end; k0 += KB) {
        if ((k0 / KB) % n_parts != part) continue;
        const int32_t nk = end - k0 < KB ? end - k0 : KB, nkp = (nk + P - 1) / P * P;
        for (int32_t p0 = 0; p0 < nkp; p0 += P) { /* K and V of keys k0 + p0 .. + nt - 1 */
            const int32_t nt = nk - p0 < P ? nk - p0 : P, s0 = (k0 + p0) % cap;
            float *vb = sc.v + (size_t)p0 * d;
            const uint16_t *kb = k + (size_t)s0 * ld;
            if (ld == (size_t)d && s0 + nt <= cap) { /* contiguous rows */
                locks_f16_to_f32_n(v + (size_t)s0 * ld, vb, (size_t)nt * d);
            } else {
                for (int32_t t = 0; t < nt; t++) {
                    const size_t row = (size_t)((k0 + p0 + t) % cap) * ld;
                    memcpy(kg + (size_t)t * d, k + row, sizeof(uint16_t) * (size_t)d);
                    locks_f16_to_f32_n(v + row, vb + (size_t)t * d, (size_t)d);
                }
                kb = kg;
            }
            if (nt < P) memset(vb + (size_t)nt * d, 0, sizeof(float) * (size_t)(P - nt) * d);
            load_kt_group(kb, nt, d, sc.kt + p0, sc.kf);
        }
        tile_logits(q, R, sc.kt, d, nkp, scale, sc.lg);
        for (int32_t r = 0; r < R; r++) { /* row r's query at p sees keys p - window + 1 .. p */
            const int32_t p = first + r / G;
            int32_t s = p - window + 1 - k0, e = p + 1 - k0, nv = 0;
            s = s < 0 ? 0 : s;
            e = e > nk ? nk : e;
            float *lr = sc.lg + (size_t)r * KB;
            if (e > s) {
                for (int32_t t = 0; t < s; t++) lr[t] = -INFINITY;
                nv = e;
            }
            prefill_row_update(lr, nv, nkp, &m[r], &l[r], acc + (size_t)r * d, d);
        }
        tile_accum(sc.lg, R, nkp, sc.v, d, acc);
    }
}

static void prefill_task(void *arg, int32_t task, int32_t thread) {
    prefill_job *j = arg;
    const int32_t H = j->c->hkv, d = j->c->d, G = j->G, Hq = H * G;
    const int32_t tile = j->n_tiles - 1 - task / H, h = task % H;
    const int32_t i0 = tile * j->T, tn = j->n - i0 < j->T ? j->n - i0 : j->T, R = tn * G;
    prefill_scratch sc = prefill_scratch_at(j->scratch + (size_t)thread * prefill_scratch_floats(j->T * G, d),
                                            j->T * G, d);
    /* rows r = i * G + g: query token pos + i0 + i, query head h * G + g */
    for (int32_t i = 0; i < tn; i++)
        memcpy(sc.q + (size_t)i * G * d, j->q + ((size_t)(i0 + i) * Hq + (size_t)h * G) * d,
               sizeof(float) * (size_t)G * d);
    for (int32_t r = 0; r < R; r++) {
        sc.m[r] = -INFINITY;
        sc.l[r] = 0.0f;
    }
    memset(sc.acc, 0, sizeof(float) * (size_t)R * d);
    const int32_t first = j->pos + i0, end = first + tn; /* the tile's query positions [first, end) */
    const size_t block_bytes = (size_t)P * d * sizeof(uint16_t);
    for (int32_t k0 = 0; k0 < end; k0 += KB) {
        const int32_t nk = end - k0 < KB ? end - k0 : KB;
        for (int32_t p = k0 + KB; p < k0 + 2 * KB && p < end; p += P) { /* the next block's pages */
            const int32_t next = j->s->table[p / P];
            prefetch_blocks(locks_cache_kblock(j->c, j->layer, next, h), locks_cache_vblock(j->c, j->layer, next, h),
                            block_bytes);
        }
        const int32_t nkp = prefill_load_block(j, &sc, k0, h, nk);
        tile_logits(sc.q, R, sc.kt, d, nkp, j->scale, sc.lg);
        /* online softmax per row over its visible keys [k0, min(k0 + nk, query + 1)) */
        for (int32_t r = 0; r < R; r++) {
            int32_t nv = first + r / G + 1 - k0;
            nv = nv < 0 ? 0 : nv > nk ? nk : nv;
            prefill_row_update(sc.lg + (size_t)r * KB, nv, nkp, &sc.m[r], &sc.l[r], sc.acc + (size_t)r * d, d);
        }
        tile_accum(sc.lg, R, nkp, sc.v, d, sc.acc);
    }
    for (int32_t r = 0; r < R; r++) {
        const int32_t i = r / G, g = r % G;
        float *o = j->out + ((size_t)(i0 + i) * Hq + (size_t)h * G + g) * d;
        const float inv = 1.0f / sc.l[r];
        for (int32_t x = 0; x < d; x++) o[x] = sc.acc[(size_t)r * d + x] * inv;
    }
}

static locks_status prefill_attend(locks_cache *c, int32_t layer, int32_t seq_id, int32_t pos, int32_t n,
                                   const float *q, int32_t n_q_heads, float scale, float *out) {
    const locks_seq *s;
    locks_status st = locks_check_seq(c, seq_id, &s);
    if (st != LOCKS_OK) return st;
    if (!q || !out) return locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !q ? "q" : "out");
    st = locks_check_layer(c, layer);
    if (st == LOCKS_OK) st = locks_check_heads(c, n_q_heads, PREFILL_ROWS);
    if (st == LOCKS_OK) st = locks_check_scale(scale);
    if (st == LOCKS_OK && (pos < 0 || n < 0 || pos > s->len - n))
        st = locks_fail(LOCKS_ERR_INVALID_ARG, "tokens [%d, %d + %d) outside the sequence's %d", pos, pos, n, s->len);
    if (st != LOCKS_OK) return st;
    if (n == 0) return LOCKS_OK;
    if (!c->host_pages)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "a %s cache (prefill attention is CPU-only for now)", c->be->name);
    if (c->ext) return locks_fail(LOCKS_ERR_UNSUPPORTED, "a cache over the caller's pages (the caller's prefill)");
    st = locks_cache_check_written(c, seq_id, layer, pos + n);
    if (st != LOCKS_OK) return st;
    const int32_t G = n_q_heads / c->hkv, d = c->d;
    if (!locks_all_finite(q, (size_t)n * n_q_heads * d)) return locks_fail(LOCKS_ERR_NONFINITE, "the query holds NaN or Inf");
    const int32_t T = PREFILL_ROWS / G, n_tiles = (n + T - 1) / T;
    const size_t per = prefill_scratch_floats(T * G, d);
    float *scratch = locks_cache_scratch(c, 2, per * sizeof(float) * (size_t)locks_pool_threads(c->pool));
    if (!scratch) return LOCKS_ERR_OOM;
    prefill_job job = {c, s, layer, pos, n, G, T, n_tiles, locks_step_scale(c, scale), q, out, scratch};
    locks_pool_run(c->pool, n_tiles * c->hkv, prefill_task, &job);
    return LOCKS_OK;
}

#undef KB

static locks_status attend(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                           float scale, const int32_t *pages, const int32_t *n_pages, int32_t max_pages, float *out,
                           float *lse) {
    const locks_seq *s;
    locks_status st0 = locks_check_seq(c, seq_id, &s);
    if (st0 != LOCKS_OK) return st0;
    const int32_t H = c->hkv;
    if (!q || !pages || !n_pages || !out) return locks_fail(LOCKS_ERR_INVALID_ARG, "NULL array");
    st0 = locks_check_layer(c, layer);
    if (st0 == LOCKS_OK) st0 = locks_check_heads(c, n_q_heads, 1 << 30);
    if (st0 == LOCKS_OK) st0 = locks_check_scale(scale);
    if (st0 == LOCKS_OK && max_pages < 1) st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "max_pages %d (must be >= 1)", max_pages);
    if (st0 == LOCKS_OK) st0 = locks_cache_check_written(c, seq_id, layer, s->len);
    if (st0 != LOCKS_OK) return st0;
    const int32_t *hp, *hn; /* the page lists where the host reads them (a copy, for device arrays) */
    st0 = c->be->attend_lists(c, pages, n_pages, max_pages, &hp, &hn);
    if (st0 != LOCKS_OK) return st0;
    for (int32_t h = 0; h < H; h++) {
        if (hn[h] < 0 || hn[h] > max_pages)
            return locks_fail(LOCKS_ERR_INVALID_ARG, "n_pages[%d] = %d (must be 0..max_pages %d)", h, hn[h], max_pages);
        for (int32_t i = 0; i < hn[h]; i++) {
            int32_t lp = hp[(size_t)h * max_pages + i];
            if (lp < 0 || lp >= s->n_pages)
                return locks_fail(LOCKS_ERR_INVALID_ARG, "KV head %d: page %d is outside the sequence's 0..%d", h, lp,
                                  s->n_pages - 1);
        }
    }
    return c->be->attend(c, layer, seq_id, q, n_q_heads, scale, pages, n_pages, max_pages, out, lse);
}

/* The CPU backend's locks_attend (backend_cpu.c), after attend's checks. */
locks_status locks_cpu_attend(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                              float scale, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                              float *out, float *lse) {
    const locks_seq *s = locks_cache_seq(c, seq_id);
    const int32_t H = c->hkv, d = c->d;
    const size_t n_tab = (size_t)H * max_pages;
    if (!locks_all_finite(q, (size_t)n_q_heads * d)) return locks_fail(LOCKS_ERR_NONFINITE, "the query holds NaN or Inf");
    int32_t *copy = locks_cache_scratch(c, 1, (n_tab + (size_t)H) * sizeof(int32_t));
    if (!copy) return LOCKS_ERR_OOM;
    memcpy(copy, pages, n_tab * sizeof(int32_t));
    memcpy(copy + n_tab, n_pages, (size_t)H * sizeof(int32_t));
    locks_seq_work w;
    memset(&w, 0, sizeof w);
    w.seq_id = seq_id;
    w.s = s;
    w.q = q;
    w.pages = copy;
    w.n_pages = copy + n_tab;
    w.max_pages = max_pages;
    w.out = out;
    w.lse = lse;
    return locks_attend_run(c, layer, &w, 1, n_q_heads, locks_step_scale(c, scale));
}

locks_status locks_prefill_attend(locks_cache *c, int32_t layer, int32_t seq_id, int32_t pos,
                                  int32_t n, const float *q, int32_t n_q_heads, float scale,
                                  float *out) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_prefill_attend: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = prefill_attend(c, layer, seq_id, pos, n, q, n_q_heads, scale, out);
    return locks_cache_leave(c, st, "locks_prefill_attend", mark);
}

locks_status locks_attend(locks_cache *c, int32_t layer, int32_t seq_id, const float *q,
                          int32_t n_q_heads, float scale, const int32_t *pages,
                          const int32_t *n_pages, int32_t max_pages, float *out, float *lse) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_attend: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = attend(c, layer, seq_id, q, n_q_heads, scale, pages, n_pages, max_pages, out, lse);
    return locks_cache_leave(c, st, "locks_attend", mark);
}
