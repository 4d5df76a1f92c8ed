/*
 * swa.cu — Gemma 3's sliding-window (local) layers on the GPU: their K/V rings and their
 * exact attention, the device twin of swa.c (see swa.h for the ring and the window).
 *
 * A local layer's K/V never enter the LOCKS cache: each (engine sequence, local layer)
 * has a ring of cap positions, fp16 [cap][hkv][d] keys then values, position p in slot
 * p % cap, rounded to nearest even as swa.c stores them. The query at position p attends
 * keys max(0, p - window + 1) .. p, every one, whatever the decode step's selector.
 *
 * Both kernels read the rows' positions (and, in a decode, the rows' cache slots) from
 * device memory, so they are valid inside the captured decode graph; a row whose
 * position is -1 (an idle row of a subset step) is skipped, and its attention output
 * zeroed. The attention: one block of SWA_WARPS warps per (row, query head); warp w takes
 * keys lo + w, lo + w + SWA_WARPS, ... with an online softmax of its own (lane i holds
 * dims i, i + 32, ...), and the warps' states are merged at the end. A row's result
 * depends on its position and the ring only, so a decode token and the same row of a
 * prefill or verify chunk agree bit for bit.
 */
#include "cuda/common.cuh"
#include "model_ops.cuh"

#include <math.h>

#define SWA_WARPS 8
#define SWA_STORE_THREADS 128

/* Ring r's keys (values: + half). */
static __device__ __forceinline__ __half *ring_k(const lg_swa_rings &r, int32_t slot, int32_t li) {
    const size_t half = (size_t)r.cap * r.hkv * r.d;
    return reinterpret_cast<__half *>(r.base) + ((size_t)slot * r.n_local + li) * 2 * half;
}

static __global__ void swa_store_kernel(lg_swa_rings r, int32_t li, const float *__restrict__ qkv, int32_t row_stride,
                                        int32_t k_off, const int32_t *__restrict__ pos,
                                        const int32_t *__restrict__ slots, int32_t seq) {
    const int32_t t = blockIdx.x, p = pos[t], slot = slots ? slots[t] : seq;
    if (p < 0 || slot < 0) return;
    const int32_t kv_dim = r.hkv * r.d;
    const size_t half = (size_t)r.cap * kv_dim;
    __half *k = ring_k(r, slot, li) + (size_t)(p % r.cap) * kv_dim, *v = k + half;
    const float *row = qkv + (size_t)t * row_stride + k_off;
    for (int32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        k[i] = __float2half_rn(row[i]);
        v[i] = __float2half_rn(row[kv_dim + i]);
    }
}

locks_status lg_swa_store_launch(const lg_swa_rings *r, int32_t li, const float *qkv, int32_t row_stride,
                                 int32_t k_off, const int32_t *pos, const int32_t *slots, int32_t seq, int32_t n,
                                 cudaStream_t st) {
    if (n < 1) return LOCKS_OK;
    swa_store_kernel<<<(unsigned)n, SWA_STORE_THREADS, 0, st>>>(*r, li, qkv, row_stride, k_off, pos, slots, seq);
    CU_LAUNCH_CHECK(swa_store_kernel);
    return LOCKS_OK;
}

/* NJ = d / 32 dims per lane. */
template <int NJ>
static __global__ void __launch_bounds__(SWA_WARPS * 32)
swa_attend_kernel(lg_swa_rings r, int32_t li, const float *__restrict__ qkv, int32_t row_stride, int32_t hq,
                  const int32_t *__restrict__ pos, const int32_t *__restrict__ slots, int32_t seq, int32_t window,
                  float scale, float *__restrict__ out, int32_t out_stride) {
    __shared__ float sm_m[SWA_WARPS], sm_l[SWA_WARPS];
    __shared__ float sm_acc[SWA_WARPS][NJ * 32];
    const int32_t t = blockIdx.x / hq, h = blockIdx.x % hq, d = NJ * 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t p = pos[t], slot = slots ? slots[t] : seq;
    float *o = out + (size_t)t * out_stride + (size_t)h * d;
    if (p < 0 || slot < 0) { /* an idle row: defined output, never read */
        for (int32_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = 0.f;
        return;
    }
    const int32_t kvh = h / (hq / r.hkv), kv_dim = r.hkv * d;
    const size_t half = (size_t)r.cap * kv_dim;
    const __half *K = ring_k(r, slot, li) + (size_t)kvh * d, *V = K + half;
    const float *q = qkv + (size_t)t * row_stride + (size_t)h * d;
    float qv[NJ], acc[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        qv[j] = q[lane + 32 * j];
        acc[j] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int32_t lo = p - window + 1 > 0 ? p - window + 1 : 0;
    for (int32_t key = lo + warp; key <= p; key += SWA_WARPS) {
        const size_t off = (size_t)(key % r.cap) * kv_dim;
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < NJ; j++) dot += qv[j] * __half2float(K[off + lane + 32 * j]);
        dot = warp_sum(dot) * scale;
        const float mn = fmaxf(m, dot), corr = expf(m - mn), w = expf(dot - mn);
        l = l * corr + w;
#pragma unroll
        for (int j = 0; j < NJ; j++) acc[j] = acc[j] * corr + w * __half2float(V[off + lane + 32 * j]);
        m = mn;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) sm_acc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < SWA_WARPS; w++) M = fmaxf(M, sm_m[w]);
    float L = 0.f, f[SWA_WARPS];
    for (int w = 0; w < SWA_WARPS; w++) {
        f[w] = sm_m[w] == -INFINITY ? 0.f : expf(sm_m[w] - M); /* a warp with no key */
        L += f[w] * sm_l[w];
    }
    const float inv = 1.f / L;
    for (int32_t i = threadIdx.x; i < d; i += blockDim.x) {
        float a = 0.f;
        for (int w = 0; w < SWA_WARPS; w++) a += f[w] * sm_acc[w][i];
        o[i] = a * inv;
    }
}

locks_status lg_swa_attend_launch(const lg_swa_rings *r, int32_t li, const float *qkv, int32_t row_stride, int32_t hq,
                                  const int32_t *pos, const int32_t *slots, int32_t seq, int32_t n, int32_t window,
                                  float scale, float *out, int32_t out_stride, cudaStream_t st) {
    if (n < 1) return LOCKS_OK;
    if (hq % r->hkv != 0 || window < 1) return LOCKS_ERR_INVALID_ARG;
    const dim3 grid((unsigned)((int64_t)n * hq)), block(SWA_WARPS * 32);
    switch (r->d) {
    case 64:
        swa_attend_kernel<2><<<grid, block, 0, st>>>(*r, li, qkv, row_stride, hq, pos, slots, seq, window, scale, out,
                                                     out_stride);
        break;
    case 128:
        swa_attend_kernel<4><<<grid, block, 0, st>>>(*r, li, qkv, row_stride, hq, pos, slots, seq, window, scale, out,
                                                     out_stride);
        break;
    case 256:
        swa_attend_kernel<8><<<grid, block, 0, st>>>(*r, li, qkv, row_stride, hq, pos, slots, seq, window, scale, out,
                                                     out_stride);
        break;
    default: return LOCKS_ERR_UNSUPPORTED;
    }
    CU_LAUNCH_CHECK(swa_attend_kernel);
    return LOCKS_OK;
}
