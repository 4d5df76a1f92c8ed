/*
 * mass.cu — second pass of the two-pass normaliser: Z_h = log sum_j exp(s_hj) from the
 * score kernel's per-block partials, then the group mass m_j = mean_h exp(s_hj - Z_h)
 * of every full page (the partial page is left out, as on the CPU). Many blocks per
 * (sequence, KV head); each also histograms the top 11 bits of the candidates'
 * masses (the first digit of the radix select in topk.cu) into hist[seg][2048], which
 * the caller zeroes before the launch.
 */
#include "common.cuh"

#define MASS_THREADS 256
#define MASS_BINS 2048

/* warp-aggregated shared-memory histogram increment (many equal bins are common) */
static __device__ __forceinline__ void hist_add(uint32_t *h, uint32_t bin, bool valid) {
    const unsigned active = __activemask();
    const uint32_t key = valid ? bin : 0xFFFFFFFFu;
    const unsigned peers = __match_any_sync(active, key);
    const int leader = __ffs(peers) - 1;
    if (valid && (int)(threadIdx.x & 31) == leader) atomicAdd(&h[bin], (uint32_t)__popc(peers));
}

static __global__ void __launch_bounds__(MASS_THREADS)
mass_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
            int32_t G, const float *__restrict__ scores, int32_t stride, const float2 *__restrict__ lse_part,
            int32_t nblk_score, int32_t n_sink, int32_t n_recent, float *__restrict__ mass,
            uint32_t *__restrict__ hist, int with_hist) {
    __shared__ float zs[LOCKS_CUDA_MAX_GROUP];
    __shared__ uint32_t sh[MASS_BINS];
    const int32_t seg = blockIdx.y;
    const int32_t slot = seq_slots[seg / hkv];
    const locks_plan pl = locks_plan_make(seq_len[slot], 0, n_sink, n_recent, 0);
    const int32_t n_full = pl.n_full, sink = pl.sink, rs = pl.rs;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int h = warp; h < G; h += MASS_THREADS / 32) {
        float2 r = make_float2(-INFINITY, 0.f);
        for (int b = lane; b < nblk_score; b += 32) r = lse_combine(r, lse_part[((size_t)seg * nblk_score + b) * G + h]);
        for (int o = 16; o > 0; o >>= 1) {
            float2 x = make_float2(__shfl_xor_sync(0xffffffffu, r.x, o), __shfl_xor_sync(0xffffffffu, r.y, o));
            r = lse_combine(r, x);
        }
        if (lane == 0) zs[h] = r.x + logf(r.y);
    }
    if (with_hist)
        for (int i = threadIdx.x; i < MASS_BINS; i += MASS_THREADS) sh[i] = 0;
    __syncthreads();
    const float *sc = scores + (size_t)seg * stride * G;
    float *ms = mass + (size_t)seg * stride;
    const float invg = 1.f / (float)G;
    /* uniform trip count so the warp stays converged for __match_any_sync */
    const int32_t per = gridDim.x * MASS_THREADS;
    for (int32_t base = blockIdx.x * MASS_THREADS; base < n_full; base += per) {
        const int32_t j = base + threadIdx.x;
        float m = 0.f;
        if (j < n_full) {
            for (int h = 0; h < G; h++) m += __expf(sc[(size_t)j * G + h] - zs[h]);
            m *= invg;
            ms[j] = m;
        }
        if (with_hist) hist_add(sh, __float_as_uint(m) >> 21, j >= sink && j < rs);
    }
    if (with_hist) {
        __syncthreads();
        for (int i = threadIdx.x; i < MASS_BINS; i += MASS_THREADS)
            if (sh[i]) atomicAdd(&hist[(size_t)seg * LOCKS_CUDA_HIST_STRIDE + i], sh[i]);
    }
}

locks_status locks_cuda_mass_launch(locks_cuda_cache *c, int32_t n_seqs, int32_t hq, const locks_step_params *p,
                                    int32_t nblk, int with_hist, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    int32_t blocks = (c->ws.max_pages + MASS_THREADS - 1) / MASS_THREADS;
    const int32_t want = (c->n_sm * 8 + n_seqs * hkv - 1) / (n_seqs * hkv);
    if (blocks > want) blocks = want;
    if (blocks < 1) blocks = 1;
    dim3 grid((unsigned)blocks, (unsigned)(n_seqs * hkv));
    mass_kernel<<<grid, MASS_THREADS, 0, st>>>(c->ws.seq_slots, c->seq_len, hkv, G, c->ws.scores, c->ws.max_pages,
                                              c->ws.lse_part, nblk, p->n_sink, p->n_recent, c->ws.mass, c->ws.hist,
                                              with_hist);
    CU_LAUNCH_CHECK(mass_kernel);
    return LOCKS_OK;
}
