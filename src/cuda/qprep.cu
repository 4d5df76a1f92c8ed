/*
 * qprep.cu — query preparation for a step: one warp per (sequence, query head).
 * Writes the attention copy (kv dtype, pre-multiplied by scale * log2(e) so the
 * softmax runs in exp2) and the scoring copy (fp16 divided by the head's max |q|,
 * which keeps any query in fp16 range; the score kernel multiplies it back), and sets
 * status bit 0 on a NaN/Inf.
 */
#include "common.cuh"

#define QPREP_WARPS 4

template <typename T>
static __global__ void qprep_kernel(const float *__restrict__ q, int32_t seq_stride, int32_t hq, int32_t rows,
                                    int32_t d, float attn_mul,
                                    uint16_t *q_attn, __half *q_score, float *q_amax, int8_t *q_i8,
                                    int32_t *q_isum, int32_t *status) {
    pdl_trigger(); /* the score kernel may start its summary copies now (common.cuh) */
    const int32_t row = blockIdx.x * QPREP_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *x = q + (size_t)(row / hq) * seq_stride + (size_t)(row % hq) * d;
    float amax = 0.f;
    int bad = 0;
    for (int i = lane; i < d; i += 32) {
        float v = x[i];
        bad |= !isfinite(v);
        amax = fmaxf(amax, fabsf(v));
    }
    amax = warp_max(amax);
    if (__any_sync(0xffffffffu, bad) && lane == 0) atomicOr(status, 1);
    const float inv = amax > 0.f ? 1.f / amax : 0.f, inv16 = amax > 0.f ? 32512.f / amax : 0.f;
    T *qa = reinterpret_cast<T *>(q_attn) + (size_t)row * d;
    int8_t *qi = q_i8 + (size_t)row * 4 * d;
    int32_t bsum = 0;
    for (int i = lane; i < d; i += 32) {
        qa[i] = kv_traits<T>::from_f(x[i] * attn_mul);
        q_score[(size_t)row * d + i] = __float2half_rn(x[i] * inv);
        /* Q = round(32512 q / |q|max) = 256 hi + lo (hi in [-127, 127], lo in [-128, 127]);
         * the basis copy holds odd dimensions as Q / 16 (they meet 16 x the int4 value) */
        const int32_t v = bad ? 0 : max(-32512, min(32512, __float2int_rn(x[i] * inv16)));
        const int32_t vb = (i & 1) ? (bad ? 0 : max(-2032, min(2032, __float2int_rn(x[i] * (inv16 * 0.0625f))))) : v;
        const int32_t vh = (v + 128) >> 8, bh = (vb + 128) >> 8;
        qi[i] = (int8_t)bh;
        qi[d + i] = (int8_t)(vb - 256 * bh);
        qi[2 * d + i] = (int8_t)vh;
        qi[3 * d + i] = (int8_t)(v - 256 * vh);
        bsum += (i & 1) ? 16 * vb : vb;
    }
    for (int o = 16; o > 0; o >>= 1) bsum += __shfl_xor_sync(0xffffffffu, bsum, o);
    if (lane == 0) {
        q_amax[row] = amax;
        q_isum[row] = 8 * bsum;
    }
}

locks_status locks_cuda_qprep_launch(locks_cuda_cache *c, const float *d_q, int32_t seq_stride, int32_t n_seqs,
                                     int32_t hq, float scale, cudaStream_t st) {
    const int32_t rows = n_seqs * hq;
    const unsigned blocks = (unsigned)((rows + QPREP_WARPS - 1) / QPREP_WARPS);
    const float mul = scale * 1.4426950408889634f;
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        qprep_kernel<__nv_bfloat16><<<blocks, QPREP_WARPS * 32, 0, st>>>(d_q, seq_stride, hq, rows, c->p.head_dim, mul, c->ws.q_attn,
                                                                       c->ws.q_score, c->ws.q_amax, c->ws.q_i8, c->ws.q_isum,
                                                                       c->ws.status);
    else
        qprep_kernel<__half><<<blocks, QPREP_WARPS * 32, 0, st>>>(d_q, seq_stride, hq, rows, c->p.head_dim, mul, c->ws.q_attn,
                                                                c->ws.q_score, c->ws.q_amax, c->ws.q_i8, c->ws.q_isum,
                                                                       c->ws.status);
    CU_LAUNCH_CHECK(qprep_kernel);
    return LOCKS_OK;
}
