/*
 * mass.cu — second pass of the two-pass normaliser: Z_h = log sum_j exp(s_hj) from the
 * score kernel's per-block partials, then the group mass m_j = mean_h exp(s_hj - Z_h)
 * of every full page (the partial page is left out, as on the CPU). Many blocks per
 * (sequence, KV head); each also histograms the top 11 bits of the candidates'
 * masses (the first digit of the radix select in topk.cu) into hist[seg][2048], which
 * the score kernel zeroes (score.cu; locks_cuda_select_mb's own caller: a memset).
 */
#include "common.cuh"

#define MASS_THREADS 256
#define MASS_BINS 2048
#define MASS_UNROLL 8 /* normaliser partials in flight per lane */
#define MASS_PAGES_PER_BLOCK 512

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
    pdl_wait(); /* the scores and partials of the score kernel */
    pdl_trigger();
    for (int h = warp; h < G; h += MASS_THREADS / 32) {
        /* MASS_UNROLL loads in flight per lane, then their combines */
        float2 r = make_float2(-INFINITY, 0.f);
        const float2 *lp = lse_part + (size_t)seg * nblk_score * G + h;
        for (int b0 = lane; b0 < nblk_score; b0 += 32 * MASS_UNROLL) {
            float2 x[MASS_UNROLL];
#pragma unroll
            for (int u = 0; u < MASS_UNROLL; u++) {
                const int b = b0 + 32 * u;
                x[u] = b < nblk_score ? lp[(size_t)b * G] : make_float2(-INFINITY, 0.f);
            }
#pragma unroll
            for (int u = 0; u < MASS_UNROLL; u++) r = lse_combine(r, x[u]);
        }
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
            if ((G & 3) == 0) { /* 16-byte loads, all issued before the exps; same order of sums */
                const float4 *r4 = reinterpret_cast<const float4 *>(sc + (size_t)j * G);
                float4 x[LOCKS_CUDA_MAX_GROUP / 4];
#pragma unroll
                for (int q = 0; q < LOCKS_CUDA_MAX_GROUP / 4; q++)
                    if (4 * q < G) x[q] = r4[q];
#pragma unroll
                for (int q = 0; q < LOCKS_CUDA_MAX_GROUP / 4; q++)
                    if (4 * q < G) {
                        m += __expf(x[q].x - zs[4 * q]);
                        m += __expf(x[q].y - zs[4 * q + 1]);
                        m += __expf(x[q].z - zs[4 * q + 2]);
                        m += __expf(x[q].w - zs[4 * q + 3]);
                    }
            } else {
                for (int h = 0; h < G; h++) m += __expf(sc[(size_t)j * G + h] - zs[h]);
            }
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
                                    int32_t nblk, int32_t max_pages, int with_hist, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    /* sized by the batch's pages, not the pool's: every block recomputes the segment's
     * normalisers from the nblk x G partials, so idle blocks cost (run 19: 257 blocks per
     * segment of a 1M pool for a 128K GLM-4 step, 9 us) */
    const int32_t ppb = c->ws.mass_ppb > 0 ? c->ws.mass_ppb : MASS_PAGES_PER_BLOCK;
    int32_t blocks = (max_pages + ppb - 1) / ppb;
    const int32_t want = (c->n_sm * 8 + n_seqs * hkv - 1) / (n_seqs * hkv);
    if (blocks > want) blocks = want;
    if (blocks < 1) blocks = 1;
    dim3 grid((unsigned)blocks, (unsigned)(n_seqs * hkv));
    CU_TRY(launch_k(c->ws.pdl, mass_kernel, grid, dim3(MASS_THREADS), 0, st, c->ws.seq_slots, c->seq_len, hkv, G,
                    (const float *)c->ws.scores, c->ws.max_pages, (const float2 *)c->ws.lse_part, nblk, p->n_sink,
                    p->n_recent, c->ws.mass, c->ws.hist, with_hist));
    return LOCKS_OK;
}
