/*
 * matmul.c — y = W x on GGUF weight types, one vector (decode) or a batch (prefill).
 *
 * The block kernels with int8 activations: plain C loops here and in quant.c (portable,
 * the reference), and on x86-64 with GCC/Clang the tile kernels of matmul_avx512.c and
 * matmul_avx2.c, chosen at run time from what the CPU has (locks_have_avx512,
 * locks_have_avx2; the build never assumes the host CPU). All compute the same integer
 * block sums; only the float accumulation order differs. This file keeps the float
 * types and the fp32-activation (exact) mode, with AVX2 versions for F32, Q4_0, Q4_1
 * and Q8_0, and the activation quantization. Rows are cut into a few tasks per pool
 * thread; inside a task of the C loops, ROW_TILE rows are held in cache while every
 * vector of the batch passes over them.
 */
#include "matmul.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "quant.h"
#include "util.h"
#include "vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MATMUL_X86 1
#include <immintrin.h>
#endif

/* Rows are cut into TASKS_PER_THREAD tasks per pool thread (dynamic: a thread the
 * machine slows down takes fewer), each a multiple of 4 rows (the AVX-512 tile) and at
 * least MIN_TASK_ROWS. */
#define TASKS_PER_THREAD 4
#define MIN_TASK_ROWS 16
#define ROW_TILE 8

/* ================================================================================ */
/* fp16 table                                                                       */
/* ================================================================================ */

static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void build_f16_table(void) {
    for (uint32_t i = 0; i < 65536; i++) f16_table[i] = locks_f16_to_f32((uint16_t)i);
}

void matmul_init_tables(void) { pthread_once(&f16_once, build_f16_table); }

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_table[h];
}

/* ================================================================================ */
/* Activation quantization                                                          */
/* ================================================================================ */

int matmul_wants_q8(ggml_type type) {
    return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 || quant_is_ext(type);
}

#ifdef MATMUL_X86
/* The same rounding (nearest, ties to even, as lrintf) with AVX2. */
__attribute__((target("avx2,fma"))) static void quantize_avx2(const float *x, int32_t nblocks, matmul_q8 *xq) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int32_t b = 0; b < nblocks; b++, x += GGML_QBLOCK) {
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float d = _mm_cvtss_f32(m4) / 127.0f;
        __m256 id = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        /* packs interleave the 128-bit lanes; the permute puts the 32 bytes back in order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)xq[b].q, p);
        xq[b].d = d;
        xq[b].ds = d * (float)_mm_cvtsi128_si32(s4);
    }
}
#endif

/* Round-to-nearest int8 with one scale per 32 values: d = max|x| / 127. */
void matmul_quantize(const float *x, int32_t n, int32_t cols, matmul_q8 *xq) {
    int32_t nb = cols / GGML_QBLOCK;
#ifdef MATMUL_X86
    if (locks_have_avx2()) {
        quantize_avx2(x, n * nb, xq);
        return;
    }
#endif
    for (int32_t t = 0; t < n; t++) {
        for (int32_t b = 0; b < nb; b++) {
            const float *v = x + (size_t)t * cols + (size_t)b * GGML_QBLOCK;
            matmul_q8 *o = &xq[(size_t)t * nb + b];
            float amax = 0.0f;
            for (int j = 0; j < GGML_QBLOCK; j++) amax = fmaxf(amax, fabsf(v[j]));
            float d = amax / 127.0f;
            float id = d > 0.0f ? 1.0f / d : 0.0f;
            int32_t sum = 0;
            for (int j = 0; j < GGML_QBLOCK; j++) {
                int32_t q = (int32_t)lrintf(v[j] * id);
                o->q[j] = (int8_t)q;
                sum += q;
            }
            o->d = d;
            o->ds = d * (float)sum;
        }
    }
}

/* ================================================================================ */
/* Row . vector kernels                                                             */
/* ================================================================================ */

/* Q8_0 row (nb blocks of 34 bytes) . quantized x */
static inline float dot_q8_0(const uint8_t *w, const matmul_q8 *x, int32_t nb) {
    float acc = 0.0f;
    for (int32_t b = 0; b < nb; b++, w += 34) {
        const int8_t *qw = (const int8_t *)(w + 2);
        int32_t s = 0;
        for (int j = 0; j < 32; j++) s += qw[j] * x[b].q[j];
        acc += f16_at(w) * x[b].d * (float)s;
    }
    return acc;
}

/* Q4_0 row (18-byte blocks: d, 16 bytes of nibbles) . quantized x */
static inline float dot_q4_0(const uint8_t *w, const matmul_q8 *x, int32_t nb) {
    float acc = 0.0f;
    for (int32_t b = 0; b < nb; b++, w += 18) {
        const uint8_t *qs = w + 2;
        const int8_t *q = x[b].q;
        int32_t s = 0;
        for (int j = 0; j < 16; j++) s += ((qs[j] & 15) - 8) * q[j] + ((qs[j] >> 4) - 8) * q[j + 16];
        acc += f16_at(w) * x[b].d * (float)s;
    }
    return acc;
}

/* Q4_1 row (20-byte blocks: d, m, 16 bytes of nibbles) . quantized x */
static inline float dot_q4_1(const uint8_t *w, const matmul_q8 *x, int32_t nb) {
    float acc = 0.0f;
    for (int32_t b = 0; b < nb; b++, w += 20) {
        const uint8_t *qs = w + 4;
        const int8_t *q = x[b].q;
        int32_t s = 0;
        for (int j = 0; j < 16; j++) s += (qs[j] & 15) * q[j] + (qs[j] >> 4) * q[j + 16];
        acc += x[b].d * f16_at(w) * (float)s + f16_at(w + 2) * x[b].ds;
    }
    return acc;
}

static inline float dot_f32(const uint8_t *w, const float *x, int32_t n) {
    float acc = 0.0f;
    for (int32_t j = 0; j < n; j++) {
        float v;
        memcpy(&v, w + 4 * (size_t)j, 4);
        acc += v * x[j];
    }
    return acc;
}

static inline float dot_f16(const uint8_t *w, const float *x, int32_t n) {
    float acc = 0.0f;
    for (int32_t j = 0; j < n; j++) acc += f16_at(w + 2 * (size_t)j) * x[j];
    return acc;
}

static inline float dot_bf16(const uint8_t *w, const float *x, int32_t n) {
    float acc = 0.0f;
    for (int32_t j = 0; j < n; j++) {
        uint16_t h;
        memcpy(&h, w + 2 * (size_t)j, 2);
        uint32_t u = (uint32_t)h << 16;
        float v;
        memcpy(&v, &u, 4);
        acc += v * x[j];
    }
    return acc;
}

#ifdef MATMUL_X86
/* ---- AVX2 kernels of the fp32-activation mode (Q4_0, Q4_1, Q8_0) and F32 weights; the
 * int8 products are matmul_avx2.c's. ---- */

#include "simd_avx2.h"

/* 16 bytes of nibbles -> 32 unsigned bytes: low nibbles (elements 0..15), then high. */
AVX2_INLINE __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(raw, m4);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    return _mm256_set_m128i(hi, lo);
}

/* A weight block as bytes: *wa the nibbles (Q4) or |w|, *ws the signed bytes (Q8_0) or
 * the nibbles, *d its scale and *mo its offset (Q4_1: m; Q4_0: -8 d; Q8_0: 0). */
AVX2_INLINE void load_block(ggml_type type, const uint8_t *w, __m256i *wa, __m256i *ws, float *d,
                            float *mo) {
    *d = f16_at(w);
    if (type == GGML_TYPE_Q8_0) {
        *ws = _mm256_loadu_si256((const __m256i *)(w + 2));
        *wa = _mm256_sign_epi8(*ws, *ws);
        *mo = 0.0f;
    } else if (type == GGML_TYPE_Q4_0) {
        *wa = *ws = unpack_nibbles(w + 2);
        *mo = -8.0f * *d;
    } else {
        *wa = *ws = unpack_nibbles(w + 4);
        *mo = f16_at(w + 2);
    }
}

AVX2_INLINE float dot_f32_avx2(const uint8_t *w, const float *x, int32_t n) {
    __m256 acc = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(const void *)(w + 4 * (size_t)j)),
                              _mm256_loadu_ps(x + j), acc);
    float s = hsum8(acc);
    for (; j < n; j++) {
        float v;
        memcpy(&v, w + 4 * (size_t)j, 4);
        s += v * x[j];
    }
    return s;
}

/* Exact mode: a block's 32 weights as fp32 (d * q + o) times fp32 x, 8 lanes at a time.
 * Q4_1: o = m; Q4_0: o = -8 d; Q8_0: signed bytes, o = 0. */
AVX2_INLINE float dot_qf_avx2(ggml_type type, const uint8_t *w, const float *x, int32_t nb) {
    __m256 acc = _mm256_setzero_ps();
    size_t bb = quant_block_bytes(type);
    for (int32_t b = 0; b < nb; b++, w += bb, x += GGML_QBLOCK) {
        __m256i wa, ws;
        float d, o;
        load_block(type, w, &wa, &ws, &d, &o);
        __m256i q = type == GGML_TYPE_Q8_0 ? ws : wa;
        __m128i half[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
        __m256 vd = _mm256_set1_ps(d), vo = _mm256_set1_ps(o);
        for (int k = 0; k < 4; k++) {
            __m128i bytes = (k & 1) ? _mm_srli_si128(half[k >> 1], 8) : half[k >> 1];
            __m256i i32 = type == GGML_TYPE_Q8_0 ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
            __m256 wf = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), vd, vo);
            acc = _mm256_fmadd_ps(wf, _mm256_loadu_ps(x + 8 * k), acc);
        }
    }
    return hsum8(acc);
}

/* Rows [r0, r1) for every vector, F32 weights or block weights against fp32
 * activations (exact mode): a tile of ROW_TILE rows stays in L1 while the vectors pass
 * over it. */
AVX2 static void rows_float_avx2(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy, int32_t r0,
                                 int32_t r1) {
    int32_t nb = w->cols / GGML_QBLOCK;
    for (int32_t rt = r0; rt < r1; rt += ROW_TILE) {
        int32_t re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
        for (int32_t t = 0; t < a->n; t++) {
            for (int32_t r = rt; r < re; r++) {
                const uint8_t *row = w->data + (size_t)r * w->row_bytes;
                y[(size_t)t * ldy + r] = w->type == GGML_TYPE_F32
                                             ? dot_f32_avx2(row, a->x + (size_t)t * w->cols, w->cols)
                                             : dot_qf_avx2(w->type, row, a->x + (size_t)t * w->cols, nb);
            }
        }
    }
}
#endif

/* Block-quantized row . fp32 x, dequantizing each block on the fly (exact mode). */
static inline float dot_q_f32(ggml_type type, const uint8_t *w, const float *x, int32_t nb) {
    float acc = 0.0f;
    float tmp[GGML_QBLOCK];
    size_t bb = type == GGML_TYPE_Q8_0 ? 34 : type == GGML_TYPE_Q4_0 ? 18 : 20;
    for (int32_t b = 0; b < nb; b++, w += bb, x += GGML_QBLOCK) {
        float d = f16_at(w);
        if (type == GGML_TYPE_Q8_0) {
            for (int j = 0; j < 32; j++) tmp[j] = d * (float)((const int8_t *)(w + 2))[j];
        } else if (type == GGML_TYPE_Q4_0) {
            for (int j = 0; j < 16; j++) {
                tmp[j] = d * (float)((w[2 + j] & 15) - 8);
                tmp[j + 16] = d * (float)((w[2 + j] >> 4) - 8);
            }
        } else {
            float m = f16_at(w + 2);
            for (int j = 0; j < 16; j++) {
                tmp[j] = d * (float)(w[4 + j] & 15) + m;
                tmp[j + 16] = d * (float)(w[4 + j] >> 4) + m;
            }
        }
        for (int j = 0; j < 32; j++) acc += tmp[j] * x[j];
    }
    return acc;
}

static inline float dot_row(const matmul_weight *w, const uint8_t *row, const matmul_act *a, int32_t t) {
    int32_t nb = w->cols / GGML_QBLOCK;
    if (!a->xq && matmul_wants_q8(w->type)) return dot_q_f32(w->type, row, a->x + (size_t)t * w->cols, nb);
    switch (w->type) {
    case GGML_TYPE_Q8_0: return dot_q8_0(row, a->xq + (size_t)t * nb, nb);
    case GGML_TYPE_Q4_0: return dot_q4_0(row, a->xq + (size_t)t * nb, nb);
    case GGML_TYPE_Q4_1: return dot_q4_1(row, a->xq + (size_t)t * nb, nb);
    case GGML_TYPE_F32: return dot_f32(row, a->x + (size_t)t * w->cols, w->cols);
    case GGML_TYPE_F16: return dot_f16(row, a->x + (size_t)t * w->cols, w->cols);
    case GGML_TYPE_BF16: return dot_bf16(row, a->x + (size_t)t * w->cols, w->cols);
    default: break; /* Q5_x / K-quants go through quant.c */
    }
    return 0.0f;
}

/* ================================================================================ */
/* Parallel product                                                                 */
/* ================================================================================ */

/* One product of a job: its rows cut into tasks [task0, task0 + n_tasks) of task_rows. */
typedef struct {
    const matmul_weight *w;
    float *y;
    int32_t ldy, task_rows, task0, n_tasks;
} matmul_part;

enum { MATMUL_MAX_PARTS = 4 };

typedef struct {
    const matmul_act *a;
    int32_t n_parts;
    matmul_part part[MATMUL_MAX_PARTS];
} matmul_job;

/* Rows [r0, r1) for every vector of the batch: a tile of rows stays in L1 while the
 * vectors stream past it. */
static void matmul_rows_c(const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy,
                        int32_t r0, int32_t r1) {
    for (int32_t rt = r0; rt < r1; rt += ROW_TILE) {
        int32_t re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
        for (int32_t t = 0; t < a->n; t++)
            for (int32_t r = rt; r < re; r++)
                y[(size_t)t * ldy + r] = dot_row(w, w->data + (size_t)r * w->row_bytes, a, t);
    }
}

static void matmul_task(void *arg, int32_t task, int32_t thread) {
    (void)thread;
    const matmul_job *jb = arg;
    int32_t pi = 0;
    while (task >= jb->part[pi].task0 + jb->part[pi].n_tasks) pi++;
    const matmul_part *j = &jb->part[pi];
    const matmul_act *a = jb->a;
    int32_t r0 = (task - j->task0) * j->task_rows;
    int32_t r1 = r0 + j->task_rows < j->w->rows ? r0 + j->task_rows : j->w->rows;
#ifdef MATMUL_X86
    if (locks_have_avx512() && matmul_rows_avx512(j->w, a, j->y, j->ldy, r0, r1)) return;
    if (locks_have_avx2() && matmul_rows_avx2(j->w, a, j->y, j->ldy, r0, r1)) return;
#endif
    if (quant_is_ext(j->w->type)) { /* Q5_x and K-quants: quant.c's portable loops */
        quant_rows_c(j->w, a, j->y, j->ldy, r0, r1);
        return;
    }
#ifdef MATMUL_X86
    /* the exact mode of Q4_0 / Q4_1 / Q8_0 and F32; F16 / BF16 stay portable */
    if (locks_have_avx2() && (matmul_wants_q8(j->w->type) || j->w->type == GGML_TYPE_F32)) {
        rows_float_avx2(j->w, a, j->y, j->ldy, r0, r1);
        return;
    }
#endif
    matmul_rows_c(j->w, a, j->y, j->ldy, r0, r1);
}

/* ================================================================================ */
/* Q4_1 and Q8_0 packed by 16 rows (matmul.h)                                      */
/* ================================================================================ */

size_t matmul_pack_bytes(const matmul_weight *w) {
#ifdef MATMUL_X86
    if ((w->type != GGML_TYPE_Q4_1 && w->type != GGML_TYPE_Q8_0) || w->cols % GGML_QBLOCK != 0 || w->rows <= 0 ||
        (size_t)w->rows * w->row_bytes > MATMUL_PACK_MAX_BYTES || !locks_have_avx512())
        return 0;
    const size_t groups = ((size_t)w->rows + MATMUL_PACK_ROWS - 1) / MATMUL_PACK_ROWS;
    return groups * (size_t)(w->cols / GGML_QBLOCK) *
           (w->type == GGML_TYPE_Q8_0 ? MATMUL_PACK_Q8_BLOCK_BYTES : MATMUL_PACK_BLOCK_BYTES);
#else
    (void)w;
    return 0;
#endif
}

int matmul_pack(matmul_weight *w) {
    const size_t bytes = matmul_pack_bytes(w);
    if (!bytes) return 0;
    uint8_t *pk = locks_alloc_huge(bytes, 1); /* zero-filled: the padding rows are 0 */
    if (!pk) return -1;
    const int32_t nb = w->cols / GGML_QBLOCK;
    if (w->type == GGML_TYPE_Q8_0) {
        for (int32_t r = 0; r < w->rows; r++) {
            const int32_t g = r / MATMUL_PACK_ROWS, i = r % MATMUL_PACK_ROWS;
            const uint8_t *src = w->data + (size_t)r * w->row_bytes;
            for (int32_t b = 0; b < nb; b++, src += 34) { /* Q8_0 block: d, 32 signed quants */
                uint8_t *dst = pk + ((size_t)g * nb + b) * MATMUL_PACK_Q8_BLOCK_BYTES;
                memcpy(dst + 2 * i, src, 2);
                for (int j = 0; j < 8; j++)
                    for (int e = 0; e < 4; e++) dst[32 + 64 * j + 4 * i + e] = (uint8_t)(src[2 + 4 * j + e] ^ 0x80);
            }
        }
        w->packed = pk;
        return 0;
    }
    for (int32_t r = 0; r < w->rows; r++) {
        const int32_t g = r / MATMUL_PACK_ROWS, i = r % MATMUL_PACK_ROWS;
        const uint8_t *src = w->data + (size_t)r * w->row_bytes;
        for (int32_t b = 0; b < nb; b++, src += 20) { /* Q4_1 block: d, m, 16 bytes of nibbles */
            uint8_t *dst = pk + ((size_t)g * nb + b) * MATMUL_PACK_BLOCK_BYTES;
            memcpy(dst + 2 * i, src, 2);
            memcpy(dst + 32 + 2 * i, src + 2, 2);
            for (int j = 0; j < 4; j++) memcpy(dst + 64 + 64 * j + 4 * i, src + 4 + 4 * j, 4);
        }
    }
    w->packed = pk;
    return 0;
}

void matmul_row_exact(const matmul_weight *w, const matmul_act *a, int32_t r, float *y, int32_t ldy) {
#ifdef MATMUL_X86
    if (w->packed && locks_have_avx512() && a->n <= 8) { /* its group of 16 through the packed kernel */
        float part[8 * MATMUL_PACK_ROWS];
        if (matmul_rows_avx512_packed(w, a, part, MATMUL_PACK_ROWS, r, r + 1, r)) {
            for (int32_t t = 0; t < a->n; t++) y[(size_t)t * ldy] = part[t * MATMUL_PACK_ROWS];
            return;
        }
    }
#endif
    const matmul_weight w1 = {w->data + (size_t)r * w->row_bytes, w->type, 1, w->cols, w->row_bytes, NULL};
    matmul(NULL, &w1, a, y, ldy);
}

void matmul_pack_free(matmul_weight *w) {
    locks_free((void *)w->packed);
    w->packed = NULL;
}

/* Rows per task of a product: TASKS_PER_THREAD tasks per thread, a multiple of the
 * kernels' row tiles (4; 16 for packed weights), at least MIN_TASK_ROWS. */
static int32_t task_rows(const matmul_weight *w, int32_t threads) {
    int32_t per = (w->rows + threads * TASKS_PER_THREAD - 1) / (threads * TASKS_PER_THREAD);
    const int32_t tile = w->packed ? MATMUL_PACK_ROWS : 4;
    per = (per + tile - 1) / tile * tile;
    return per < MIN_TASK_ROWS ? MIN_TASK_ROWS : per;
}

void matmul_n(locks_pool *pool, const matmul_weight *const *w, int32_t n, const matmul_act *a, float *const *y) {
    matmul_init_tables(); /* once; an atomic check after that */
    const int32_t threads = pool ? locks_pool_threads(pool) : 1;
    matmul_job job = {a, 0, {{0}}};
    int32_t n_tasks = 0;
    for (int32_t i = 0; i < n; i++) {
        /* each product cut as it would be on its own, so its rows come out the same */
        const int32_t per = task_rows(w[i], threads);
        const int32_t nt = (w[i]->rows + per - 1) / per;
        job.part[job.n_parts++] = (matmul_part){w[i], y[i], w[i]->rows, per, n_tasks, nt};
        n_tasks += nt;
        if (job.n_parts == MATMUL_MAX_PARTS || i == n - 1) { /* a full job (or the last): run it */
            if (pool) {
                locks_pool_run(pool, n_tasks, matmul_task, &job);
            } else {
                for (int32_t t = 0; t < n_tasks; t++) matmul_task(&job, t, 0);
            }
            job.n_parts = 0;
            n_tasks = 0;
        }
    }
}

void matmul(locks_pool *pool, const matmul_weight *w, const matmul_act *a, float *y, int32_t ldy) {
    matmul_init_tables(); /* once; an atomic check after that */
    int32_t threads = pool ? locks_pool_threads(pool) : 1;
    const int32_t per = task_rows(w, threads);
    int32_t n_tasks = (w->rows + per - 1) / per;
    matmul_job job = {a, 1, {{w, y, ldy, per, 0, n_tasks}}};
    if (pool) {
        locks_pool_run(pool, n_tasks, matmul_task, &job);
    } else {
        for (int32_t t = 0; t < n_tasks; t++) matmul_task(&job, t, 0);
    }
}

/* ================================================================================ */
/* Dequantize one row                                                               */
/* ================================================================================ */

void matmul_row_f32(const matmul_weight *w, int32_t r, float *out) {
    matmul_init_tables();
    const uint8_t *p = w->data + (size_t)r * w->row_bytes;
    int32_t nb = w->cols / GGML_QBLOCK;
    if (w->packed && (w->type == GGML_TYPE_Q8_0 || w->type == GGML_TYPE_Q4_1)) {
        /* from the packed copy (matmul_pack), so that the file's pages stay dropped: the
         * same values (d q, d q + m in fp32) */
        const int32_t i = r % MATMUL_PACK_ROWS, q8 = w->type == GGML_TYPE_Q8_0;
        const size_t bb = q8 ? MATMUL_PACK_Q8_BLOCK_BYTES : MATMUL_PACK_BLOCK_BYTES;
        const uint8_t *g = w->packed + (size_t)(r / MATMUL_PACK_ROWS) * (size_t)nb * bb;
        for (int32_t b = 0; b < nb; b++, g += bb) {
            const float d = f16_at(g + 2 * i);
            float *o = out + (size_t)b * 32;
            if (q8) {
                for (int j = 0; j < 32; j++) o[j] = d * (float)(int8_t)(g[32 + 64 * (j / 4) + 4 * i + j % 4] ^ 0x80);
            } else {
                const float m = f16_at(g + 32 + 2 * i);
                for (int j = 0; j < 16; j++) {
                    const uint8_t q = g[64 + 64 * (j / 4) + 4 * i + j % 4];
                    o[j] = d * (float)(q & 15) + m;
                    o[j + 16] = d * (float)(q >> 4) + m;
                }
            }
        }
        return;
    }
    if (quant_is_ext(w->type)) {
        int32_t be = quant_block_elems(w->type);
        size_t bb = quant_block_bytes(w->type);
        for (int32_t b = 0; b < w->cols / be; b++) quant_dequant_block(w->type, p + (size_t)b * bb, out + (size_t)b * be);
        return;
    }
    switch (w->type) {
    case GGML_TYPE_Q8_0:
        for (int32_t b = 0; b < nb; b++, p += 34) {
            float d = f16_at(p);
            for (int j = 0; j < 32; j++) out[b * 32 + j] = d * (float)((const int8_t *)(p + 2))[j];
        }
        return;
    case GGML_TYPE_Q4_0:
        for (int32_t b = 0; b < nb; b++, p += 18) {
            float d = f16_at(p);
            for (int j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float)((p[2 + j] & 15) - 8);
                out[b * 32 + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        return;
    case GGML_TYPE_Q4_1:
        for (int32_t b = 0; b < nb; b++, p += 20) {
            float d = f16_at(p), m = f16_at(p + 2);
            for (int j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float)(p[4 + j] & 15) + m;
                out[b * 32 + j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
        }
        return;
    case GGML_TYPE_F32: memcpy(out, p, (size_t)w->cols * 4); return;
    case GGML_TYPE_F16:
        for (int32_t j = 0; j < w->cols; j++) out[j] = f16_at(p + 2 * (size_t)j);
        return;
    case GGML_TYPE_BF16:
        for (int32_t j = 0; j < w->cols; j++) {
            uint16_t h;
            memcpy(&h, p + 2 * (size_t)j, 2);
            out[j] = locks_bf16_to_f32(h);
        }
        return;
    default: return; /* the ext types returned above */
    }
}
