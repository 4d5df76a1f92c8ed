/*
 * gemv.cu — the decode token's matrix products for 1..8 rows on the CUDA cores, with the
 * small per-token ops folded into them (model_cuda.h, LG_GEMV_*):
 *
 *   y (n, rows) = X (n, cols) . W^T  (+ y)      W row-major 16-bit, fp32 accumulation
 *
 * where X, the product's 16-bit input, is made on the fly from the engine's fp32
 * activations and rounded once to the weight type, as the cuBLAS path's separate kernels
 * do (model_ops.cu):
 *   LG_GEMV_X16     X read as it is (16-bit of the weight type)
 *   LG_GEMV_F32     X = T(x)                            (the attention output before Wo)
 *   LG_GEMV_NORM    X = T(x * r_t * nw)                 (RMSNorm; r_t from partial sums of
 *                   squares of x's rows that the product that wrote x left, see below)
 *   LG_GEMV_SWIGLU  X = T(silu(g) * u), g|u = rows of gu (n, 2 cols)   (before Wdown)
 * and, when ss_out is given, each block also writes the sums of squares of the y rows it
 * wrote (after the residual add): ss_out[block][t]. The next NORM product sums those
 * partials in a fixed order, so no kernel computes a norm on its own and the result does
 * not depend on scheduling (graph replay == kernel-by-kernel launches, bit for bit).
 *
 * Layout: a warp owns R consecutive rows of W; its lanes stream the rows in 16-byte
 * chunks (8 values), U chunks ahead, through the non-coherent path without L1
 * allocation; X's chunk is made once per lane and used for the R rows. Blocks of 8 warps;
 * the grid covers rows / (8 R) blocks, so even Wo (4096 rows) has 256 blocks.
 */
#include "common.cuh"
#include "model_ops.cuh"

#include <math.h>

#define GV_WARPS 8
#define GV_THREADS (GV_WARPS * 32)

static __host__ __device__ constexpr int gv_rows_per_warp(int n) { return n <= 2 ? 2 : 4; }

extern "C" int32_t lg_gemv_blocks(int32_t rows, int32_t n) {
    const int32_t per = GV_WARPS * gv_rows_per_warp(n);
    return (rows + per - 1) / per;
}

static __device__ __forceinline__ uint4 ld_stream16(const void *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

template <typename T> static __device__ __forceinline__ void unpack8(uint4 v, float *f);
template <> __device__ __forceinline__ void unpack8<__nv_bfloat16>(uint4 v, float *f) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
template <> __device__ __forceinline__ void unpack8<__half>(uint4 v, float *f) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 h = *reinterpret_cast<const __half2 *>(&u[i]);
        const float2 p = __half22float2(h);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

template <typename T> static __device__ __forceinline__ float round16(float v) {
    return kv_traits<T>::to_f(kv_traits<T>::from_f(v));
}

struct gv_args {
    const void *w;
    int32_t rows, cols;
    const void *x;
    int32_t x_ld;       /* row stride of x in elements */
    const float *nw;    /* NORM: norm weight (cols) */
    const float *ss_in; /* NORM: partial sums of squares [ss_nblk][n] of x's rows */
    int32_t ss_nblk;
    float eps;
    float *y;
    int32_t y_ld;
    int beta;      /* 1: y += product */
    float *ss_out; /* [gridDim.x][n] or NULL */
};

/* The 8 input values of row t at column k (k a multiple of 8, k < cols). */
template <typename T, int MODE>
static __device__ __forceinline__ void load_x8(const gv_args &a, int t, int32_t k, float r, const float *nwv,
                                               float *xf) {
    if (MODE == LG_GEMV_X16) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(reinterpret_cast<const uint16_t *>(a.x) +
                                                              (size_t)t * a.x_ld + k));
        unpack8<T>(v, xf);
    } else {
        const float *p = reinterpret_cast<const float *>(a.x) + (size_t)t * a.x_ld + k;
        const float4 x0 = __ldg(reinterpret_cast<const float4 *>(p)), x1 = __ldg(reinterpret_cast<const float4 *>(p) + 1);
        float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        if (MODE == LG_GEMV_SWIGLU) {
            const float4 u0 = __ldg(reinterpret_cast<const float4 *>(p + a.cols)),
                         u1 = __ldg(reinterpret_cast<const float4 *>(p + a.cols) + 1);
            const float u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = v[j] / (1.f + expf(-v[j])) * u[j]; /* as swiglu_kernel */
        } else if (MODE == LG_GEMV_NORM) {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = v[j] * r * nwv[j]; /* as rmsnorm_kernel */
        }
#pragma unroll
        for (int j = 0; j < 8; j++) xf[j] = round16<T>(v[j]);
    }
}

template <int U, int R>
static __device__ __forceinline__ void load_w(const uint16_t *const (&wr)[R], int32_t k0, int32_t cols, uint4 (&wv)[U][R]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int32_t k = k0 + u * 256;
#pragma unroll
        for (int r = 0; r < R; r++) wv[u][r] = k < cols ? ld_stream16(wr[r] + k) : make_uint4(0u, 0u, 0u, 0u);
    }
}

/* Launched with programmatic dependent launch (lg_gemv_launch's pdl), a block lets the
 * next kernel start at once and loads its first chunks of W (constant) before waiting for
 * the previous kernel; everything it reads that a kernel writes (x, ss_in, y) and
 * everything it writes comes after the wait. Without the attribute both are no-ops. */
template <typename T, int N, int MODE>
static __global__ void __launch_bounds__(GV_THREADS) gemv_kernel(const gv_args a) {
    constexpr int R = gv_rows_per_warp(N);
    constexpr int U = N <= 2 ? 4 : (N <= 4 ? 2 : 1); /* chunks per row and lane in one step */
    constexpr int32_t STEP = 32 * 8 * U;
    __shared__ float red[GV_WARPS][R * N]; /* N <= R * N <= 32 */
    __shared__ float rs[N];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t row0 = ((int32_t)blockIdx.x * GV_WARPS + warp) * R;
    const uint16_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int32_t row = row0 + r < a.rows ? row0 + r : a.rows - 1;
        wr[r] = reinterpret_cast<const uint16_t *>(a.w) + (size_t)row * a.cols;
    }
    pdl_trigger();
    uint4 wv[U][R]; /* the next step's chunks of W, one step ahead */
    load_w<U, R>(wr, lane * 8, a.cols, wv);
    pdl_wait();
    if (MODE == LG_GEMV_NORM) {
#pragma unroll
        for (int t = 0; t < N; t++) {
            float v = 0.f;
            for (int32_t b = threadIdx.x; b < a.ss_nblk; b += GV_THREADS) v += a.ss_in[(size_t)b * N + t];
            v = warp_sum(v);
            if (lane == 0) red[warp][t] = v;
        }
        __syncthreads();
        if (threadIdx.x < N) {
            float s = 0.f;
            for (int w = 0; w < GV_WARPS; w++) s += red[w][threadIdx.x];
            rs[threadIdx.x] = rsqrtf(s / (float)a.cols + a.eps);
        }
        __syncthreads();
    }
    float r_t[N];
#pragma unroll
    for (int t = 0; t < N; t++) r_t[t] = MODE == LG_GEMV_NORM ? rs[t] : 1.f;

    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < N; t++) acc[r][t] = 0.f;

    for (int32_t k0 = lane * 8; k0 < a.cols; k0 += STEP) {
        uint4 cur[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) cur[u][r] = wv[u][r];
        if (k0 + STEP < a.cols) load_w<U, R>(wr, k0 + STEP, a.cols, wv);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int32_t k = k0 + u * 256;
            if (k >= a.cols) break;
            float wf[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) unpack8<T>(cur[u][r], wf[r]);
            float nwv[8];
            if (MODE == LG_GEMV_NORM) {
                const float4 n0 = __ldg(reinterpret_cast<const float4 *>(a.nw + k)),
                             n1 = __ldg(reinterpret_cast<const float4 *>(a.nw + k) + 1);
                nwv[0] = n0.x, nwv[1] = n0.y, nwv[2] = n0.z, nwv[3] = n0.w;
                nwv[4] = n1.x, nwv[5] = n1.y, nwv[6] = n1.z, nwv[7] = n1.w;
            }
#pragma unroll
            for (int t = 0; t < N; t++) {
                float xf[8];
                load_x8<T, MODE>(a, t, k, r_t[t], nwv, xf);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
            }
        }
    }
    /* every lane ends with every sum; lane r * N + t writes (row0 + r, t) */
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float s = warp_sum(acc[r][t]);
            if (lane == r * N + t) mine = s;
        }
    float sq = 0.f;
    if (lane < R * N) {
        const int r = lane / N, t = lane % N;
        const int32_t row = row0 + r;
        if (row < a.rows) {
            float *yp = a.y + (size_t)t * a.y_ld + row;
            const float v = a.beta ? mine + *yp : mine;
            *yp = v;
            sq = v * v;
        }
        if (a.ss_out) red[warp][lane] = sq;
    }
    if (!a.ss_out) return;
    __syncthreads();
    if (threadIdx.x < N) {
        float s = 0.f;
        for (int w = 0; w < GV_WARPS; w++)
            for (int r = 0; r < R; r++) s += red[w][r * N + threadIdx.x];
        a.ss_out[(size_t)blockIdx.x * N + threadIdx.x] = s;
    }
}

template <typename T, int N>
static locks_status launch_n(int mode, const gv_args &a, int pdl, cudaStream_t st) {
    const dim3 grid((unsigned)lg_gemv_blocks(a.rows, N)), block(GV_THREADS);
    switch (mode) {
    case LG_GEMV_X16: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_X16>, grid, block, 0, st, a)); break;
    case LG_GEMV_F32: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_F32>, grid, block, 0, st, a)); break;
    case LG_GEMV_NORM: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_NORM>, grid, block, 0, st, a)); break;
    case LG_GEMV_SWIGLU: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_SWIGLU>, grid, block, 0, st, a)); break;
    default: return LOCKS_ERR_INVALID_ARG;
    }
    return LOCKS_OK;
}

template <typename T> static locks_status launch_t(int mode, int32_t n, const gv_args &a, int pdl, cudaStream_t st) {
    switch (n) {
    case 1: return launch_n<T, 1>(mode, a, pdl, st);
    case 2: return launch_n<T, 2>(mode, a, pdl, st);
    case 3: return launch_n<T, 3>(mode, a, pdl, st);
    case 4: return launch_n<T, 4>(mode, a, pdl, st);
    case 5: return launch_n<T, 5>(mode, a, pdl, st);
    case 6: return launch_n<T, 6>(mode, a, pdl, st);
    case 7: return launch_n<T, 7>(mode, a, pdl, st);
    case 8: return launch_n<T, 8>(mode, a, pdl, st);
    default: return LOCKS_ERR_INVALID_ARG;
    }
}

locks_status lg_gemv_launch(int mode, const void *w, locks_dtype wtype, int32_t rows, int32_t cols, int32_t n,
                            const void *x, int32_t x_ld, const float *nw, const float *ss_in, int32_t ss_nblk,
                            float eps, float *y, int32_t y_ld, int beta, float *ss_out, int pdl, cudaStream_t st) {
    if (!w || !x || !y || rows < 1 || cols < 8 || cols % 8 != 0 || x_ld % 8 != 0 || n < 1 || n > LG_GEMV_MAX_N ||
        (mode == LG_GEMV_NORM && (!nw || !ss_in || ss_nblk < 1)) ||
        (wtype != LOCKS_DTYPE_F16 && wtype != LOCKS_DTYPE_BF16))
        return LOCKS_ERR_INVALID_ARG;
    gv_args a;
    a.w = w;
    a.rows = rows;
    a.cols = cols;
    a.x = x;
    a.x_ld = x_ld;
    a.nw = nw;
    a.ss_in = ss_in;
    a.ss_nblk = ss_nblk;
    a.eps = eps;
    a.y = y;
    a.y_ld = y_ld;
    a.beta = beta;
    a.ss_out = ss_out;
    return wtype == LOCKS_DTYPE_BF16 ? launch_t<__nv_bfloat16>(mode, n, a, pdl, st)
                                     : launch_t<__half>(mode, n, a, pdl, st);
}

/* ---- embedding gather with the sums of squares of the rows (the first NORM's input) ---- */

static __global__ void embed_ss_kernel(const void *__restrict__ e, int type, const int32_t *__restrict__ tok,
                                       int32_t dim, float *__restrict__ x, float *__restrict__ ss) {
    __shared__ float ws[32];
    const int32_t t = blockIdx.x;
    const size_t row = (size_t)tok[t] * dim;
    float s = 0.f;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = type == LOCKS_DTYPE_BF16 ? __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(e)[row + i])
                                                 : __half2float(reinterpret_cast<const __half *>(e)[row + i]);
        x[(size_t)t * dim + i] = v;
        s += v * v;
    }
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) a += ws[w];
        ss[t] = a;
    }
}

locks_status lg_embed_ss_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t n, int32_t dim, float *x,
                                float *ss, cudaStream_t st) {
    embed_ss_kernel<<<(unsigned)n, 256, 0, st>>>(e, (int)type, tok, dim, x, ss);
    CU_LAUNCH_CHECK(embed_ss_kernel);
    return LOCKS_OK;
}

/* ---- the op for the tests ------------------------------------------------------------------- */

/* Sums of squares of the rows of x (n, cols) fp32 -> ss[t] (one partial per row). */
static __global__ void row_ss_kernel(const float *__restrict__ x, int32_t cols, float *ss) {
    __shared__ float ws[32];
    const int32_t t = blockIdx.x;
    float s = 0.f;
    for (int32_t i = threadIdx.x; i < cols; i += blockDim.x) s += x[(size_t)t * cols + i] * x[(size_t)t * cols + i];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) a += ws[w];
        ss[t] = a;
    }
}

extern "C" locks_status lg_op_gemv(int mode, const void *d_w, locks_dtype wtype, int32_t rows, int32_t cols, int32_t n,
                                   const void *d_x, const float *d_nw, float eps, float *d_y, int beta, int pdl,
                                   float *ss) {
    if (n < 1 || n > LG_GEMV_MAX_N || rows < 1 || cols < 8) return LOCKS_ERR_INVALID_ARG;
    const int32_t nblk = lg_gemv_blocks(rows, n);
    float *d_in = NULL, *d_out = NULL;
    float *h = NULL;
    locks_status st = LOCKS_OK;
    if (cudaMalloc((void **)&d_in, (size_t)n * 4) != cudaSuccess) d_in = NULL;
    if (cudaMalloc((void **)&d_out, (size_t)nblk * n * 4) != cudaSuccess) d_out = NULL;
    h = (float *)locks_alloc((size_t)nblk * n, sizeof(float));
    if (!d_in || !d_out || !h) st = LOCKS_ERR_OOM;
    if (st == LOCKS_OK && mode == LG_GEMV_NORM) {
        row_ss_kernel<<<(unsigned)n, 256>>>((const float *)d_x, cols, d_in);
        if (cudaGetLastError() != cudaSuccess) st = LOCKS_ERR_BACKEND;
    }
    const int32_t x_ld = mode == LG_GEMV_SWIGLU ? 2 * cols : cols;
    if (st == LOCKS_OK)
        st = lg_gemv_launch(mode, d_w, wtype, rows, cols, n, d_x, x_ld, d_nw, d_in, 1, eps, d_y, rows, beta,
                            ss ? d_out : NULL, pdl, 0);
    if (st == LOCKS_OK && cudaDeviceSynchronize() != cudaSuccess) st = LOCKS_ERR_BACKEND;
    if (st == LOCKS_OK && ss) {
        if (cudaMemcpy(h, d_out, (size_t)nblk * n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) st = LOCKS_ERR_BACKEND;
        for (int32_t t = 0; t < n && st == LOCKS_OK; t++) {
            float s = 0.f;
            for (int32_t b = 0; b < nblk; b++) s += h[(size_t)b * n + t];
            ss[t] = s;
        }
    }
    if (d_in) cudaFree(d_in);
    if (d_out) cudaFree(d_out);
    locks_free(h);
    return st;
}
