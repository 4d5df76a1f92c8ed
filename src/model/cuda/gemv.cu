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
 * Layout: a warp owns groups of R consecutive rows of W (2 for n <= 2, else 4); its lanes
 * stream the rows in 16-byte chunks (8 values) through a cp.async ring in shared memory,
 * 4 steps (8 KB per warp) ahead. X is made once per block into shared memory (16-bit).
 * Blocks of 4 warps, at most 4 blocks per SM and one wave (lg_gemv_blocks): warps take
 * groups g, g + grid warps, ...
 */
#include "cuda/common.cuh"
#include "model_ops.cuh"

#include <math.h>

#define GV_WARPS 4
#define GV_THREADS (GV_WARPS * 32)
#define GV_STAGES 5 /* ring stages per warp: GV_WARPS * 5 * 2 KB = 40 KB of shared memory per block */
#define GV_BLOCKS_PER_SM 4

static __host__ __device__ constexpr int gv_rows_per_warp(int n) { return n <= 2 ? 2 : 4; }
/* 16-byte chunks per row and lane in one step: R * U = 4 chunks, 2 KB per warp and stage */
static __host__ __device__ constexpr int gv_chunks(int n) { return n <= 2 ? 2 : 1; }

#define GV_RING_BYTES (GV_WARPS * GV_STAGES * 4 * 32 * 16)
#define GV_SMEM_MAX (227 * 1024)

/* Dynamic shared memory of a block: the ring and X (n rows of cols 16-bit values). */
static size_t gv_smem(int32_t cols, int32_t n) { return GV_RING_BYTES + (size_t)n * cols * 2; }

extern "C" int lg_gemv_supported(int32_t cols, int32_t n) {
    return cols >= 8 && cols % 8 == 0 && n >= 1 && n <= LG_GEMV_MAX_N && gv_smem(cols, n) <= GV_SMEM_MAX - 1024;
}

/* Persistent grid: as many blocks as fit on the SMs at once (at most GV_BLOCKS_PER_SM
 * each), one wave; fewer if there are fewer row groups. */
extern "C" int32_t lg_gemv_blocks(int32_t rows, int32_t cols, int32_t n) {
    static int n_sm = 0;
    if (!n_sm) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            v < 1)
            v = 132;
        n_sm = v;
    }
    int32_t per_sm = (int32_t)((GV_SMEM_MAX - 1024) / (gv_smem(cols, n) + 1024)); /* 1 KB per block reserved */
    if (per_sm > GV_BLOCKS_PER_SM) per_sm = GV_BLOCKS_PER_SM;
    if (per_sm < 1) per_sm = 1;
    const int32_t groups = (rows + gv_rows_per_warp(n) - 1) / gv_rows_per_warp(n);
    const int32_t want = (groups + GV_WARPS - 1) / GV_WARPS, cap = per_sm * n_sm;
    return want < cap ? want : cap;
}

static __device__ __forceinline__ void gv_cp16(void *smem, const void *g) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g) : "memory");
}
static __device__ __forceinline__ void gv_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int K> static __device__ __forceinline__ void gv_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(K) : "memory");
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

/* A warp owns row groups g = its index, + the grid's warps, ...; a group is R rows and
 * takes `steps` steps of U 16-byte chunks per row and lane. The warp streams its
 * (group, step) sequence through a ring of GV_STAGES stages in shared memory with
 * cp.async, GV_STAGES - 1 steps ahead, across group boundaries; each lane reads back only
 * the chunks it copied itself (no barrier). Launched with programmatic dependent launch
 * (lg_gemv_launch's pdl), a block lets the next kernel start at once and issues its first
 * copies of W (constant) before it waits for the previous kernel; everything it reads
 * that a kernel writes (x, ss_in, y) and everything it writes comes after the wait.
 * Without the attribute both are no-ops. */
template <typename T, int N, int MODE>
static __global__ void __launch_bounds__(GV_THREADS, GV_BLOCKS_PER_SM) gemv_kernel(const gv_args a) {
    constexpr int R = gv_rows_per_warp(N), U = gv_chunks(N), C = U * R;
    constexpr int32_t STEP = 32 * 8 * U;
    extern __shared__ uint4 gv_dyn[];
    uint4(*ring)[GV_STAGES][C][32] = reinterpret_cast<uint4(*)[GV_STAGES][C][32]>(gv_dyn);
    uint16_t *xs = reinterpret_cast<uint16_t *>(gv_dyn + GV_WARPS * GV_STAGES * C * 32); /* X: [N][cols] */
    __shared__ float red[GV_WARPS][R * N]; /* N <= R * N <= 32 */
    __shared__ float rs[N];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t steps = (a.cols + STEP - 1) / STEP, groups = (a.rows + R - 1) / R;
    const int32_t g0 = (int32_t)blockIdx.x * GV_WARPS + warp, gstride = (int32_t)gridDim.x * GV_WARPS;
    const int32_t mine_groups = g0 < groups ? (groups - g0 + gstride - 1) / gstride : 0;
    const int32_t total = mine_groups * steps;
    const uint16_t *w = reinterpret_cast<const uint16_t *>(a.w);
    /* copies of iteration it into stage it % GV_STAGES (one commit group per iteration,
     * empty past the end, so wait_group counts stay uniform) */
    int32_t ig = g0, is = 0; /* (group, step) of the next iteration to issue */
    int32_t issued = 0;
    auto issue = [&]() {
        if (issued < total) {
            const int32_t stage = issued % GV_STAGES;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int32_t row = ig * R + r < a.rows ? ig * R + r : a.rows - 1;
                const uint16_t *wr = w + (size_t)row * a.cols;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int32_t k = is * STEP + u * 256 + lane * 8;
                    if (k < a.cols) gv_cp16(&ring[warp][stage][u * R + r][lane], wr + k);
                }
            }
            if (++is == steps) is = 0, ig += gstride;
        }
        issued++;
        gv_commit();
    };
    pdl_trigger();
#pragma unroll
    for (int i = 0; i < GV_STAGES - 1; i++) issue();
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
            for (int w2 = 0; w2 < GV_WARPS; w2++) s += red[w2][threadIdx.x];
            rs[threadIdx.x] = rsqrtf(s / (float)a.cols + a.eps);
        }
        __syncthreads();
    }
    /* X, made once per block (the cols-wide input transform costs as much as a few rows of
     * the product, so each warp making its own was the bottleneck) */
    for (int32_t k = threadIdx.x * 8; k < a.cols; k += GV_THREADS * 8) {
        float nwv[8];
        if (MODE == LG_GEMV_NORM) {
            const float4 n0 = __ldg(reinterpret_cast<const float4 *>(a.nw + k)),
                         n1 = __ldg(reinterpret_cast<const float4 *>(a.nw + k) + 1);
            nwv[0] = n0.x, nwv[1] = n0.y, nwv[2] = n0.z, nwv[3] = n0.w;
            nwv[4] = n1.x, nwv[5] = n1.y, nwv[6] = n1.z, nwv[7] = n1.w;
        }
#pragma unroll
        for (int t = 0; t < N; t++) {
            if (MODE == LG_GEMV_X16) {
                *reinterpret_cast<uint4 *>(xs + (size_t)t * a.cols + k) = __ldg(reinterpret_cast<const uint4 *>(
                    reinterpret_cast<const uint16_t *>(a.x) + (size_t)t * a.x_ld + k));
                continue;
            }
            float xf[8];
            load_x8<T, MODE>(a, t, k, MODE == LG_GEMV_NORM ? rs[t] : 1.f, nwv, xf);
            uint32_t pk[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                T lo = kv_traits<T>::from_f(xf[2 * j]), hi = kv_traits<T>::from_f(xf[2 * j + 1]);
                pk[j] = (uint32_t)*reinterpret_cast<uint16_t *>(&lo) | ((uint32_t)*reinterpret_cast<uint16_t *>(&hi) << 16);
            }
            *reinterpret_cast<uint4 *>(xs + (size_t)t * a.cols + k) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
        }
    }
    __syncthreads();
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < N; t++) acc[r][t] = 0.f;
    float sq = 0.f; /* lane r * N + t: sum of squares of the (row, t) outputs it wrote */
    int32_t g = g0, s = 0;
    for (int32_t it = 0; it < total; it++) {
        issue();
        gv_wait<GV_STAGES - 1>(); /* iteration it's copies have landed */
        const int32_t stage = it % GV_STAGES;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int32_t k = s * STEP + u * 256 + lane * 8;
            if (k >= a.cols) break;
            float wf[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) unpack8<T>(ring[warp][stage][u * R + r][lane], wf[r]);
#pragma unroll
            for (int t = 0; t < N; t++) {
                float xf[8];
                unpack8<T>(*reinterpret_cast<const uint4 *>(xs + (size_t)t * a.cols + k), xf);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
            }
        }
        if (++s < steps) continue;
        /* the group is done: every lane gets every sum; lane r * N + t writes (g R + r, t) */
        float v = 0.f;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < N; t++) {
                const float sum = warp_sum(acc[r][t]);
                acc[r][t] = 0.f;
                if (lane == r * N + t) v = sum;
            }
        if (lane < R * N) {
            const int32_t row = g * R + lane / N;
            if (row < a.rows) {
                float *yp = a.y + (size_t)(lane % N) * a.y_ld + row;
                if (a.beta) v += *yp;
                *yp = v;
                sq += v * v;
            }
        }
        s = 0;
        g += gstride;
    }
    gv_wait<0>();
    if (!a.ss_out) return;
    if (lane < R * N) red[warp][lane] = sq;
    __syncthreads();
    if (threadIdx.x < N) {
        float t_ss = 0.f;
        for (int w2 = 0; w2 < GV_WARPS; w2++)
            for (int r = 0; r < R; r++) t_ss += red[w2][r * N + threadIdx.x];
        a.ss_out[(size_t)blockIdx.x * N + threadIdx.x] = t_ss;
    }
}

template <typename T, int N>
static locks_status launch_n(int mode, const gv_args &a, int pdl, cudaStream_t st) {
    const dim3 grid((unsigned)lg_gemv_blocks(a.rows, a.cols, N)), block(GV_THREADS);
    const size_t smem = gv_smem(a.cols, N);
    switch (mode) {
    case LG_GEMV_X16: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_X16>, grid, block, smem, st, a)); break;
    case LG_GEMV_F32: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_F32>, grid, block, smem, st, a)); break;
    case LG_GEMV_NORM: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_NORM>, grid, block, smem, st, a)); break;
    case LG_GEMV_SWIGLU: CU_TRY(launch_k(pdl, gemv_kernel<T, N, LG_GEMV_SWIGLU>, grid, block, smem, st, a)); break;
    default: return LOCKS_ERR_INVALID_ARG;
    }
    return LOCKS_OK;
}

template <typename T, int N> static locks_status prepare_n() {
    const int m = GV_SMEM_MAX - 1024;
    CU_TRY(cudaFuncSetAttribute(gemv_kernel<T, N, LG_GEMV_X16>, cudaFuncAttributeMaxDynamicSharedMemorySize, m));
    CU_TRY(cudaFuncSetAttribute(gemv_kernel<T, N, LG_GEMV_F32>, cudaFuncAttributeMaxDynamicSharedMemorySize, m));
    CU_TRY(cudaFuncSetAttribute(gemv_kernel<T, N, LG_GEMV_NORM>, cudaFuncAttributeMaxDynamicSharedMemorySize, m));
    CU_TRY(cudaFuncSetAttribute(gemv_kernel<T, N, LG_GEMV_SWIGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, m));
    return LOCKS_OK;
}

template <typename T> static locks_status prepare_t() {
    LOCKS_TRY((prepare_n<T, 1>()));
    LOCKS_TRY((prepare_n<T, 2>()));
    LOCKS_TRY((prepare_n<T, 3>()));
    LOCKS_TRY((prepare_n<T, 4>()));
    LOCKS_TRY((prepare_n<T, 5>()));
    LOCKS_TRY((prepare_n<T, 6>()));
    LOCKS_TRY((prepare_n<T, 7>()));
    LOCKS_TRY((prepare_n<T, 8>()));
    return LOCKS_OK;
}

/* Raises the kernels' dynamic shared-memory limit (once per process and device, before
 * any graph capture). */
extern "C" locks_status lg_gemv_prepare(void) {
    static int done = -1;
    int dev = 0;
    CU_TRY(cudaGetDevice(&dev));
    if (done == dev) return LOCKS_OK;
    LOCKS_TRY(prepare_t<__nv_bfloat16>());
    LOCKS_TRY(prepare_t<__half>());
    done = dev;
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
        gv_smem(cols, n) > GV_SMEM_MAX - 1024 ||
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
    LOCKS_TRY(lg_gemv_prepare());
    const int32_t nblk = lg_gemv_blocks(rows, cols, n);
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
