/*
 * qgemv.cu — quantized weights on the device (model_cuda.h, "quantized weights"): the
 * device layout of Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K matrices, the int8 quantization of a
 * product's input, the decode products of 1..8 rows that read the blocks as they lie and
 * decode them in registers, and the dequantization of a matrix to 16-bit for the prefill's
 * cuBLAS products.
 *
 * Everything works on 32-element sub-blocks, as quant.c does on the CPU: sub-block b of a
 * row decodes to 32 signed integers q (eight words of four int8), a scale per 16-element
 * half s[0], s[1] and an offset o, with w_j = s[j / 16] q_j + o. Against the int8 input
 * block (d, ds = d sum(x_q), x_q) of the same 32 columns the sub-block contributes
 *
 *     d (s[0] sa + s[1] sb) + o ds,    sa, sb = the integer dot products of the halves
 *
 * (four dp4a each): quant.c's dot_q8_c term for term, with explicit roundings (__fmul_rn,
 * __fadd_rn) so that no instantiation contracts differently. A warp owns a row; lane l
 * takes sub-blocks l, l + 32, ...; the lanes' sums meet in a fixed butterfly. Row t's sum
 * is the same code for every N, so a row does not depend on how many rows came with it.
 *
 * Device layout (lg_qmat_pack): Q4_K and Q5_K blocks as the file has them (144 and 176
 * bytes, so 16-byte aligned); Q6_K, Q8_0, Q4_0 and Q4_1 blocks without their fp16 scales
 * (208, 32, 16 and 16 bytes: Q6_K's d is its last two bytes, the others' d (Q4_1: d, m)
 * their first, which would leave the rest 2-byte aligned), then every block's scales in
 * block order after the blocks.
 */
#include "cuda/common.cuh"
#include "model_ops.cuh"

extern "C" {
#include "model/gguf.h"
}

#include <string.h>

#define QG_WARPS 4
#define QG_THREADS (QG_WARPS * 32)

/* ---- the layout (host) ------------------------------------------------------------- */

typedef struct {
    int32_t elems;      /* per block */
    int32_t file_bytes; /* per block in the file */
    int32_t dev_bytes;  /* per block in the device layout (without a split d) */
    int32_t d_off;      /* offset of the fp16 scales that move after the blocks; -1: none move */
    int32_t d_bytes;    /* how many bytes move (2: d; 4: Q4_1's d and m) */
} qg_info;

static int qg_type_info(int32_t type, qg_info *qi) {
    switch (type) {
    case GGML_TYPE_Q4_0: *qi = (qg_info){32, 18, 16, 0, 2}; return 1;
    case GGML_TYPE_Q4_1: *qi = (qg_info){32, 20, 16, 0, 4}; return 1;
    case GGML_TYPE_Q8_0: *qi = (qg_info){32, 34, 32, 0, 2}; return 1;
    case GGML_TYPE_Q4_K: *qi = (qg_info){256, 144, 144, -1, 0}; return 1;
    case GGML_TYPE_Q5_K: *qi = (qg_info){256, 176, 176, -1, 0}; return 1;
    case GGML_TYPE_Q6_K: *qi = (qg_info){256, 210, 208, 208, 2}; return 1;
    default: return 0;
    }
}

static __host__ __device__ __forceinline__ int64_t qg_align(int64_t x) { return (x + 255) & ~(int64_t)255; }

extern "C" int lg_qtype_supported(int32_t type) {
    qg_info qi;
    return qg_type_info(type, &qi);
}

extern "C" size_t lg_qmat_bytes(int32_t type, int32_t rows, int32_t cols) {
    qg_info qi;
    if (!qg_type_info(type, &qi) || rows < 1 || cols < 1 || cols % qi.elems) return 0;
    const size_t nblk = (size_t)rows * (size_t)(cols / qi.elems);
    return (size_t)qg_align((int64_t)nblk * qi.dev_bytes) + (qi.d_off >= 0 ? nblk * qi.d_bytes : 0);
}

size_t lg_qrow_block_bytes(int32_t type, int32_t cols) {
    qg_info qi;
    return qg_type_info(type, &qi) ? (size_t)(cols / qi.elems) * qi.dev_bytes : 0;
}
size_t lg_qrow_d_bytes(int32_t type, int32_t cols) {
    qg_info qi;
    return qg_type_info(type, &qi) && qi.d_off >= 0 ? (size_t)(cols / qi.elems) * qi.d_bytes : 0;
}

extern "C" void lg_qmat_pack(int32_t type, const void *src, int32_t rows, int32_t cols, void *dst) {
    qg_info qi;
    if (!qg_type_info(type, &qi) || cols % qi.elems) return;
    const size_t nblk = (size_t)rows * (size_t)(cols / qi.elems);
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *o = (uint8_t *)dst;
    if (qi.d_off < 0) {
        memcpy(o, s, nblk * (size_t)qi.file_bytes);
        return;
    }
    uint8_t *dd = o + qg_align((int64_t)nblk * qi.dev_bytes);
    for (size_t b = 0; b < nblk; b++, s += qi.file_bytes, o += qi.dev_bytes) {
        const uint8_t *rest = qi.d_off == 0 ? s + qi.d_bytes : s; /* the block's bytes other than the scales */
        memcpy(o, rest, (size_t)qi.dev_bytes);
        memcpy(dd + (size_t)qi.d_bytes * b, s + qi.d_off, (size_t)qi.d_bytes);
    }
}

/* ---- decoding one 32-element sub-block (device) ------------------------------------ */

/* 1 for the types whose block is one 32-element sub-block (else 8 of them, 256 elements). */
static __host__ __device__ constexpr bool qg_small_block(int type) {
    return type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q8_0;
}

struct qg_sub {
    uint32_t q[8]; /* 32 signed int8, element 4k + i in byte i of q[k] */
    float s0, s1, o;
};

static __device__ __forceinline__ float qg_h2f(uint32_t bits16) {
    return __half2float(__ushort_as_half((unsigned short)(bits16 & 0xffffu)));
}

static __device__ __forceinline__ void qg_ld32(const uint8_t *p, uint32_t *w) {
    const uint4 a = __ldg(reinterpret_cast<const uint4 *>(p)), b = __ldg(reinterpret_cast<const uint4 *>(p + 16));
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

/* Six-bit scale and min of sub-block s (< 8) from the 12 scale bytes in words u0..u2
 * (quant.c's kq_scale_min). */
static __device__ __forceinline__ void qg_scale_min(uint32_t u0, uint32_t u1, uint32_t u2, int s, int *sc, int *m) {
    const int j = s & 3;
    const uint32_t a = (u0 >> (8 * j)) & 0xffu, b = (u1 >> (8 * j)) & 0xffu, c = (u2 >> (8 * j)) & 0xffu;
    if (s < 4) {
        *sc = (int)(a & 63);
        *m = (int)(b & 63);
    } else { /* sc12[s + 4] = c, sc12[s - 4] = a, sc12[s] = b */
        *sc = (int)((c & 15) | (a >> 6) << 4);
        *m = (int)((c >> 4) | (b >> 6) << 4);
    }
}

/* Sub-block b of row r of a rows x cols matrix of type TYPE in the device layout at w
 * (nsub = cols / 32 sub-blocks a row; n_blk = blocks of the whole matrix). */
template <int TYPE>
static __device__ __forceinline__ void qg_decode(const uint8_t *__restrict__ w, int64_t n_blk, int32_t r, int32_t nsub,
                                                 int32_t b, qg_sub &u) {
    if (qg_small_block(TYPE)) {
        const int64_t blk = (int64_t)r * nsub + b;
        const int bytes = TYPE == GGML_TYPE_Q8_0 ? 32 : 16;
        float d, m = 0.f;
        if (TYPE == GGML_TYPE_Q4_1) { /* d and m, w = d q + m */
            const uint32_t dm = __ldg(reinterpret_cast<const uint32_t *>(w + qg_align(n_blk * bytes)) + blk);
            d = qg_h2f(dm);
            m = qg_h2f(dm >> 16);
        } else {
            d = __half2float(reinterpret_cast<const __half *>(w + qg_align(n_blk * bytes))[blk]);
        }
        if (TYPE == GGML_TYPE_Q8_0) {
            qg_ld32(w + blk * 32, u.q);
        } else {
            const uint4 a = __ldg(reinterpret_cast<const uint4 *>(w + blk * 16));
            const uint32_t x[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t bias = TYPE == GGML_TYPE_Q4_0 ? 0x08080808u : 0u;
                u.q[k] = __vsub4(x[k] & 0x0f0f0f0fu, bias);
                u.q[k + 4] = __vsub4((x[k] >> 4) & 0x0f0f0f0fu, bias);
            }
        }
        u.s0 = u.s1 = d;
        u.o = m;
    } else if (TYPE == GGML_TYPE_Q4_K || TYPE == GGML_TYPE_Q5_K) {
        const int bb = TYPE == GGML_TYPE_Q4_K ? 144 : 176;
        const int64_t blk = (int64_t)r * (nsub / 8) + b / 8;
        const int sb = b & 7;
        const uint8_t *B = w + blk * bb;
        const uint4 h = __ldg(reinterpret_cast<const uint4 *>(B));
        int sc, m;
        qg_scale_min(h.y, h.z, h.w, sb, &sc, &m);
        const float d = qg_h2f(h.x), dmin = qg_h2f(h.x >> 16);
        uint32_t qs[8];
        qg_ld32(B + (TYPE == GGML_TYPE_Q5_K ? 48 : 16) + 32 * (sb >> 1), qs);
        const int sh = 4 * (sb & 1);
        if (TYPE == GGML_TYPE_Q5_K) {
            uint32_t qh[8];
            qg_ld32(B + 16, qh);
#pragma unroll
            for (int k = 0; k < 8; k++) u.q[k] = ((qs[k] >> sh) & 0x0f0f0f0fu) | (((qh[k] >> sb) & 0x01010101u) << 4);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) u.q[k] = (qs[k] >> sh) & 0x0f0f0f0fu;
        }
        u.s0 = u.s1 = __fmul_rn(d, (float)sc);
        u.o = -__fmul_rn(dmin, (float)m);
    } else { /* GGML_TYPE_Q6_K */
        const int64_t blk = (int64_t)r * (nsub / 8) + b / 8;
        const int sb = b & 7, hh = sb >> 2, k4 = sb & 3;
        const uint8_t *B = w + blk * 208;
        const __half *dt = reinterpret_cast<const __half *>(w + qg_align(n_blk * 208));
        const float d = __half2float(dt[blk]);
        uint32_t ql[8], qh[8];
        qg_ld32(B + 64 * hh + 32 * (k4 & 1), ql);
        qg_ld32(B + 128 + 32 * hh, qh);
        const int shl = 4 * (k4 >> 1), shh = 2 * k4;
#pragma unroll
        for (int k = 0; k < 8; k++)
            u.q[k] = __vsub4(((ql[k] >> shl) & 0x0f0f0f0fu) | (((qh[k] >> shh) & 0x03030303u) << 4), 0x20202020u);
        const int8_t *sc = reinterpret_cast<const int8_t *>(B + 192) + 8 * hh + 2 * k4;
        u.s0 = __fmul_rn(d, (float)sc[0]);
        u.s1 = __fmul_rn(d, (float)sc[1]);
        u.o = 0.f;
    }
}

/* ---- input quantization ------------------------------------------------------------ */

template <int XT> static __device__ __forceinline__ void qg_load_x32(const void *x, int64_t i0, float *v) {
    if (XT == LOCKS_DTYPE_F32) {
        const float4 *p = reinterpret_cast<const float4 *>((const float *)x + i0);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float4 a = p[k];
            v[4 * k] = a.x, v[4 * k + 1] = a.y, v[4 * k + 2] = a.z, v[4 * k + 3] = a.w;
        }
    } else {
        const uint4 *p = reinterpret_cast<const uint4 *>((const uint16_t *)x + i0);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 a = p[k];
            const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (XT == LOCKS_DTYPE_BF16) {
                    v[8 * k + 2 * i] = __uint_as_float(u[i] << 16);
                    v[8 * k + 2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
                } else {
                    v[8 * k + 2 * i] = qg_h2f(u[i]);
                    v[8 * k + 2 * i + 1] = qg_h2f(u[i] >> 16);
                }
            }
        }
    }
}

/* One thread per 32-value block: matmul_quantize's d = max|x| / 127, q = rint(x * (1 / d))
 * (round to nearest even, as lrintf), ds = d * sum(q). */
template <int XT>
__global__ void qg_quantize_kernel(const void *x, int64_t n_blocks, int8_t *__restrict__ q, float2 *__restrict__ ds) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    pdl_wait(); /* x is the previous kernel's output (plain loads: common.cuh's PDL rules) */
    if (i >= n_blocks) return;
    float v[32];
    qg_load_x32<XT>(x, i * 32, v);
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
    const float d = amax / 127.0f, id = d > 0.f ? 1.0f / d : 0.f;
    uint32_t w[8];
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t p = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qi = __float2int_rn(__fmul_rn(v[4 * k + i], id));
            sum += qi;
            p |= ((uint32_t)qi & 0xffu) << (8 * i);
        }
        w[k] = p;
    }
    uint4 *o = reinterpret_cast<uint4 *>(q + i * 32);
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
    ds[i] = make_float2(d, __fmul_rn(d, (float)sum));
}

locks_status lg_q8_quantize_launch(const void *x, locks_dtype xtype, int32_t n, int32_t cols, int8_t *q, float *ds,
                                   int pdl, cudaStream_t st) {
    if (n < 1 || cols < 32 || cols % 32) return LOCKS_ERR_INVALID_ARG;
    const int64_t nb = (int64_t)n * (cols / 32);
    const dim3 grid((unsigned)((nb + 127) / 128)), block(128);
    float2 *d2 = reinterpret_cast<float2 *>(ds);
    switch (xtype) {
    case LOCKS_DTYPE_F32:
        CU_TRY(launch_k(pdl, qg_quantize_kernel<LOCKS_DTYPE_F32>, grid, block, 0, st, x, nb, q, d2));
        break;
    case LOCKS_DTYPE_F16:
        CU_TRY(launch_k(pdl, qg_quantize_kernel<LOCKS_DTYPE_F16>, grid, block, 0, st, x, nb, q, d2));
        break;
    case LOCKS_DTYPE_BF16:
        CU_TRY(launch_k(pdl, qg_quantize_kernel<LOCKS_DTYPE_BF16>, grid, block, 0, st, x, nb, q, d2));
        break;
    default: return LOCKS_ERR_INVALID_ARG;
    }
    return LOCKS_OK;
}

/* ---- the decode product ------------------------------------------------------------- */

/* y[t][r] (+)= row r . x_t for t < N: a warp a row, lane l the sub-blocks l, l + 32, ...,
 * each decoded one step ahead of its products. Launched with programmatic dependent launch
 * (pdl), the first sub-block's weights load before the wait for the previous kernel (the
 * input's quantization): weights are written by no kernel; the input and y are read after
 * it with plain loads (common.cuh's PDL rules). */
template <int TYPE, int N>
__global__ void __launch_bounds__(QG_THREADS) qg_gemv_kernel(const uint8_t *__restrict__ w, int32_t rows, int32_t cols,
                                                             const int8_t *xq, const float2 *xds, float *y, int32_t ldy,
                                                             int beta) {
    const int lane = threadIdx.x & 31;
    const int32_t r = (int32_t)blockIdx.x * QG_WARPS + (threadIdx.x >> 5);
    const int32_t nsub = cols / 32;
    const int64_t n_blk = (int64_t)rows * (qg_small_block(TYPE) ? nsub : nsub / 8);
    qg_sub u;
    if (r < rows && lane < nsub) qg_decode<TYPE>(w, n_blk, r, nsub, lane, u);
    pdl_wait();
    if (r >= rows) return;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++) acc[t] = 0.f;
    for (int32_t b = lane; b < nsub; b += 32) {
        qg_sub nx;
        if (b + 32 < nsub) qg_decode<TYPE>(w, n_blk, r, nsub, b + 32, nx);
#pragma unroll
        for (int t = 0; t < N; t++) {
            const int64_t xb = (int64_t)t * nsub + b;
            const uint4 *xp = reinterpret_cast<const uint4 *>(xq + xb * 32);
            const uint4 x0 = xp[0], x1 = xp[1];
            const float2 dsv = xds[xb];
            int sa = 0, sb = 0;
            sa = __dp4a((int)u.q[0], (int)x0.x, sa);
            sa = __dp4a((int)u.q[1], (int)x0.y, sa);
            sa = __dp4a((int)u.q[2], (int)x0.z, sa);
            sa = __dp4a((int)u.q[3], (int)x0.w, sa);
            sb = __dp4a((int)u.q[4], (int)x1.x, sb);
            sb = __dp4a((int)u.q[5], (int)x1.y, sb);
            sb = __dp4a((int)u.q[6], (int)x1.z, sb);
            sb = __dp4a((int)u.q[7], (int)x1.w, sb);
            /* x.d * (s0 sa + s1 sb) + o x.ds, rounded as written */
            const float in = __fadd_rn(__fmul_rn(u.s0, (float)sa), __fmul_rn(u.s1, (float)sb));
            acc[t] = __fadd_rn(acc[t], __fadd_rn(__fmul_rn(dsv.x, in), __fmul_rn(u.o, dsv.y)));
        }
        u = nx;
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        float v = acc[t];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
        acc[t] = v;
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < N; t++) {
            float *yp = y + (int64_t)t * ldy + r;
            *yp = beta ? __fadd_rn(*yp, acc[t]) : acc[t];
        }
    }
}

template <int TYPE>
static locks_status qg_gemv_type(const lg_qmat *w, int32_t n, const int8_t *q, const float *ds, float *y, int32_t ldy,
                                 int beta, int pdl, cudaStream_t st) {
    const dim3 grid((unsigned)((w->rows + QG_WARPS - 1) / QG_WARPS)), block(QG_THREADS);
    const uint8_t *wp = (const uint8_t *)w->d_w;
    const float2 *d2 = reinterpret_cast<const float2 *>(ds);
#define QG_CASE(NN)                                                                                        \
    case NN:                                                                                               \
        CU_TRY(launch_k(pdl, qg_gemv_kernel<TYPE, NN>, grid, block, 0, st, wp, w->rows, w->cols, q, d2, y, \
                        ldy, beta));                                                                       \
        break;
    switch (n) {
        QG_CASE(1)
        QG_CASE(2)
        QG_CASE(3)
        QG_CASE(4)
        QG_CASE(5)
        QG_CASE(6)
        QG_CASE(7)
        QG_CASE(8)
    default: return LOCKS_ERR_INVALID_ARG;
    }
#undef QG_CASE
    return LOCKS_OK;
}

/* The matrix's shape against its type (cols a whole number of blocks, a device pointer). */
static int qg_ok(const lg_qmat *w) {
    return w && w->d_w && w->rows >= 1 && lg_qmat_bytes(w->type, w->rows, w->cols) > 0;
}

locks_status lg_qgemv_launch(const lg_qmat *w, int32_t n, const int8_t *q, const float *ds, float *y, int32_t ldy,
                             int beta, int pdl, cudaStream_t st) {
    if (!qg_ok(w) || n < 1 || n > LG_GEMV_MAX_N || !q || !ds || !y || ldy < w->rows)
        return LOCKS_ERR_INVALID_ARG;
    switch (w->type) {
    case GGML_TYPE_Q4_0: return qg_gemv_type<GGML_TYPE_Q4_0>(w, n, q, ds, y, ldy, beta, pdl, st);
    case GGML_TYPE_Q4_1: return qg_gemv_type<GGML_TYPE_Q4_1>(w, n, q, ds, y, ldy, beta, pdl, st);
    case GGML_TYPE_Q8_0: return qg_gemv_type<GGML_TYPE_Q8_0>(w, n, q, ds, y, ldy, beta, pdl, st);
    case GGML_TYPE_Q4_K: return qg_gemv_type<GGML_TYPE_Q4_K>(w, n, q, ds, y, ldy, beta, pdl, st);
    case GGML_TYPE_Q5_K: return qg_gemv_type<GGML_TYPE_Q5_K>(w, n, q, ds, y, ldy, beta, pdl, st);
    case GGML_TYPE_Q6_K: return qg_gemv_type<GGML_TYPE_Q6_K>(w, n, q, ds, y, ldy, beta, pdl, st);
    default: return LOCKS_ERR_INVALID_ARG;
    }
}

/* ---- dequantization to 16-bit (prefill) --------------------------------------------- */

/* One thread per sub-block: w_j = s[j / 16] q_j + o (a product, then a sum, as quant.c's
 * quant_dequant_block), rounded once to T. */
template <int TYPE, typename T>
__global__ void qg_dequant_kernel(const uint8_t *__restrict__ w, int32_t rows, int32_t cols, T *__restrict__ out) {
    const int32_t nsub = cols / 32;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * nsub) return;
    const int32_t r = (int32_t)(i / nsub), b = (int32_t)(i % nsub);
    const int64_t n_blk = (int64_t)rows * (qg_small_block(TYPE) ? nsub : nsub / 8);
    qg_sub u;
    qg_decode<TYPE>(w, n_blk, r, nsub, b, u);
    uint32_t o[16];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int q = (int)(int8_t)((u.q[k] >> (8 * j)) & 0xffu);
            f[j] = __fadd_rn(__fmul_rn(k < 4 ? u.s0 : u.s1, (float)q), u.o);
        }
        const typename kv_traits<T>::T2 a = kv_traits<T>::pack(f[0], f[1]), c = kv_traits<T>::pack(f[2], f[3]);
        o[2 * k] = *reinterpret_cast<const uint32_t *>(&a);
        o[2 * k + 1] = *reinterpret_cast<const uint32_t *>(&c);
    }
    uint4 *op = reinterpret_cast<uint4 *>(out + i * 32);
#pragma unroll
    for (int k = 0; k < 4; k++) op[k] = make_uint4(o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]);
}

template <int TYPE>
static locks_status qg_dequant_type(const lg_qmat *w, locks_dtype ot, void *out, cudaStream_t st) {
    const int64_t n = (int64_t)w->rows * (w->cols / 32);
    const unsigned grid = (unsigned)((n + 127) / 128);
    const uint8_t *wp = (const uint8_t *)w->d_w;
    if (ot == LOCKS_DTYPE_BF16)
        qg_dequant_kernel<TYPE, __nv_bfloat16><<<grid, 128, 0, st>>>(wp, w->rows, w->cols, (__nv_bfloat16 *)out);
    else
        qg_dequant_kernel<TYPE, __half><<<grid, 128, 0, st>>>(wp, w->rows, w->cols, (__half *)out);
    CU_LAUNCH_CHECK(qg_dequant_kernel);
    return LOCKS_OK;
}

locks_status lg_qdequant_launch(const lg_qmat *w, locks_dtype out_type, void *out, cudaStream_t st) {
    if (!qg_ok(w) || !out || (out_type != LOCKS_DTYPE_F16 && out_type != LOCKS_DTYPE_BF16))
        return LOCKS_ERR_INVALID_ARG;
    switch (w->type) {
    case GGML_TYPE_Q4_0: return qg_dequant_type<GGML_TYPE_Q4_0>(w, out_type, out, st);
    case GGML_TYPE_Q4_1: return qg_dequant_type<GGML_TYPE_Q4_1>(w, out_type, out, st);
    case GGML_TYPE_Q8_0: return qg_dequant_type<GGML_TYPE_Q8_0>(w, out_type, out, st);
    case GGML_TYPE_Q4_K: return qg_dequant_type<GGML_TYPE_Q4_K>(w, out_type, out, st);
    case GGML_TYPE_Q5_K: return qg_dequant_type<GGML_TYPE_Q5_K>(w, out_type, out, st);
    case GGML_TYPE_Q6_K: return qg_dequant_type<GGML_TYPE_Q6_K>(w, out_type, out, st);
    default: return LOCKS_ERR_INVALID_ARG;
    }
}

/* ---- the synchronous forms (tests) -------------------------------------------------- */

extern "C" locks_status lg_op_q8_quantize(const void *d_x, locks_dtype xtype, int32_t n, int32_t cols, int8_t *d_q,
                                          float *d_ds) {
    if (!d_x || !d_q || !d_ds) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(lg_q8_quantize_launch(d_x, xtype, n, cols, d_q, d_ds, 0, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}

extern "C" locks_status lg_op_qgemv(const lg_qmat *w, int32_t n, const int8_t *d_q, const float *d_ds, float *d_y,
                                    int32_t ldy, int beta) {
    LOCKS_TRY(lg_qgemv_launch(w, n, d_q, d_ds, d_y, ldy, beta, 0, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}

extern "C" locks_status lg_op_qdequant(const lg_qmat *w, locks_dtype out_type, void *d_out) {
    LOCKS_TRY(lg_qdequant_launch(w, out_type, d_out, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}

extern "C" locks_status lg_op_qgemv_time(const lg_qmat *w, int32_t n_copies, size_t copy_stride, int32_t n,
                                         const int8_t *d_q, const float *d_ds, float *d_y, int32_t reps, int pdl,
                                         float *us) {
    if (!w || n_copies < 1 || reps < 1 || !us) return LOCKS_ERR_INVALID_ARG;
    cudaStream_t st = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    locks_status rc = LOCKS_OK;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        rc = LOCKS_ERR_BACKEND;
    lg_qmat m = *w;
    for (int32_t i = 0; rc == LOCKS_OK && i < n_copies; i++) { /* warm-up */
        m.d_w = (const char *)w->d_w + (size_t)i * copy_stride;
        rc = lg_qgemv_launch(&m, n, d_q, d_ds, d_y, w->rows, 0, pdl, st);
    }
    if (rc == LOCKS_OK && cudaEventRecord(e0, st) != cudaSuccess) rc = LOCKS_ERR_BACKEND;
    for (int32_t k = 0; rc == LOCKS_OK && k < reps; k++)
        for (int32_t i = 0; rc == LOCKS_OK && i < n_copies; i++) {
            m.d_w = (const char *)w->d_w + (size_t)i * copy_stride;
            rc = lg_qgemv_launch(&m, n, d_q, d_ds, d_y, w->rows, 0, pdl, st);
        }
    float ms = 0.f;
    if (rc == LOCKS_OK && (cudaEventRecord(e1, st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                           cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess))
        rc = LOCKS_ERR_BACKEND;
    *us = ms * 1000.f / (float)(reps * n_copies);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (st) cudaStreamDestroy(st);
    return rc;
}
