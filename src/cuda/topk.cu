/*
 * topk.cu — page selection per (sequence, KV head), one 1024-thread block each, no
 * host round trip.
 *
 * Forced pages (n_sink leading, n_recent trailing full pages, the partial page) are
 * always taken; the remaining budget k = (budget - forced tokens) / 16 goes to the
 * candidates with the largest group mass, ties to the lower logical index — the CPU
 * rule, so equal inputs give equal selections. Masses are >= 0, so their IEEE bits
 * order like the values: a radix select over the bits (digits of 11, 11 and 10 bits,
 * the first histogram already built by mass.cu) finds the k-th largest key T and how
 * many of the keys equal to T to take; it stops early when a digit's bin holds exactly
 * the elements still needed. A last pass writes the selection in ascending order: each
 * thread owns a contiguous stretch of candidates, counts (> T, == T) in it, one block
 * scan turns the counts into output positions.
 * Output: pages[seg][...] ascending logical indices, n_pages[seg] (-1 if the forced
 * pages exceed the budget; the host checks that first).
 */
#include "common.cuh"

#define TOPK_BINS 2048
#define TOPK_UNROLL 16 /* independent loads in flight per thread */

/* Exclusive block scan of a 64-bit value over the T threads of the block; *total gets the sum. */
template <int T> static __device__ uint64_t block_excl_scan(uint64_t v, uint64_t *ws, uint64_t *total) {
    constexpr int NW = T / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t x = v;
    for (int o = 1; o < 32; o <<= 1) {
        uint64_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        uint64_t w = lane < NW ? ws[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            uint64_t y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        ws[lane] = w; /* inclusive over warps */
    }
    __syncthreads();
    const uint64_t before = (warp > 0 ? ws[warp - 1] : 0) + x - v;
    *total = ws[NW - 1];
    __syncthreads();
    return before;
}

template <int T>
static __global__ void __launch_bounds__(T)
topk_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
            const float *__restrict__ mass, int32_t mass_stride, const uint32_t *__restrict__ ghist, int use_hist,
            int32_t budget, int32_t n_sink, int32_t n_recent, int32_t *__restrict__ out, int32_t *__restrict__ out_n,
            int32_t out_stride) {
    __shared__ uint32_t hist[TOPK_BINS];
    __shared__ uint64_t scan_ws[32];
    __shared__ uint32_t s_bin, s_above;
    const int32_t seg = blockIdx.x;
    const int32_t slot = seq_slots[seg / hkv];
    const locks_plan pl = locks_plan_make(seq_len[slot], budget, n_sink, n_recent, 0);
    const int32_t n_tot = pl.n_tot;
    int32_t *o = out + (size_t)seg * out_stride;
    const int tid = threadIdx.x;

    const int32_t sink = pl.sink, rs = pl.rs, n_cand = pl.n_cand, k = pl.k;
    pdl_wait(); /* the masses and histogram of mass.cu */
    pdl_trigger();
    if (pl.every) { /* everything: dense */
        for (int32_t j = tid; j < n_tot; j += T) o[j] = j;
        if (tid == 0) out_n[seg] = n_tot;
        return;
    }
    if (k < 0) {
        if (tid == 0) out_n[seg] = -1;
        return;
    }
    const float *m = mass + (size_t)seg * mass_stride;
    uint32_t prefix = 0, mask = 0;
    uint32_t krem = (uint32_t)k;
    if (k > 0) {
        for (int pass = 0; pass < 3; pass++) {
            const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
            const int nb = pass == 2 ? 1024 : 2048;
            if (pass == 0 && use_hist) {
                for (int i = tid; i < TOPK_BINS; i += T) hist[i] = ghist[(size_t)seg * LOCKS_CUDA_HIST_STRIDE + i];
                __syncthreads();
            } else {
                for (int i = tid; i < TOPK_BINS; i += T) hist[i] = 0;
                __syncthreads();
                /* TOPK_UNROLL independent loads in flight per thread (uniform trip count) */
                for (int32_t base = sink; base < rs; base += T * TOPK_UNROLL) {
                    uint32_t key[TOPK_UNROLL];
#pragma unroll
                    for (int u = 0; u < TOPK_UNROLL; u++) {
                        const int32_t j = base + u * T + tid;
                        key[u] = j < rs ? __float_as_uint(m[j]) : 0xFFFFFFFFu;
                    }
#pragma unroll
                    for (int u = 0; u < TOPK_UNROLL; u++) {
                        const int32_t j = base + u * T + tid;
                        /* below the first digit the bins spread out: plain atomics */
                        if (j < rs && (key[u] & mask) == prefix) atomicAdd(&hist[(key[u] >> shift) & (uint32_t)(nb - 1)], 1u);
                    }
                }
                __syncthreads();
            }
            /* find the bin holding the krem-th largest: threads own bins from the top */
            const int bpt = nb / T; /* 1 to 8 */
            uint32_t local = 0;
            for (int z = 0; z < bpt; z++) local += hist[nb - 1 - (tid * bpt + z)];
            uint64_t tot;
            uint32_t above = (uint32_t)block_excl_scan<T>(local, scan_ws, &tot);
            for (int z = 0; z < bpt; z++) {
                const int bin = nb - 1 - (tid * bpt + z);
                const uint32_t cnt = hist[bin];
                if (above < krem && krem <= above + cnt) {
                    s_bin = (uint32_t)bin;
                    s_above = above;
                }
                above += cnt;
            }
            __syncthreads();
            const uint32_t bin = s_bin;
            krem -= s_above;
            prefix |= bin << shift;
            mask |= (uint32_t)(nb - 1) << shift;
            const uint32_t in_bin = hist[bin];
            __syncthreads();
            if (in_bin == krem) break; /* take the whole bin */
        }
    } else {
        prefix = 0xFFFFFFFFu; /* nothing is above or equal: (key & 0) never > or == */
        mask = 0;
    }
    /* emission: sinks, chosen candidates ascending, recent pages, partial page */
    for (int32_t j = tid; j < sink; j += T) o[j] = j;
    const int32_t chunk = (n_cand + T - 1) / T;
    const int32_t c0 = sink + tid * chunk, c1 = min(c0 + chunk, rs);
    uint32_t n_gt = 0, n_eq = 0;
    for (int32_t j = c0; j < c1; j += TOPK_UNROLL) { /* loads first, then the counts */
        uint32_t key[TOPK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) key[u] = j + u < c1 ? __float_as_uint(m[j + u]) : 0;
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const uint32_t k2 = key[u] & mask;
            n_gt += j + u < c1 && k2 > prefix;
            n_eq += j + u < c1 && k2 == prefix;
        }
    }
    uint64_t tot;
    const uint64_t before = block_excl_scan<T>(((uint64_t)n_gt << 32) | n_eq, scan_ws, &tot);
    uint32_t eq_before = (uint32_t)(before & 0xFFFFFFFFu);
    int32_t pos = sink + (int32_t)(before >> 32) + (int32_t)min(eq_before, krem);
    if (n_gt + n_eq > 0) /* most threads own no selected page at all */
        for (int32_t j = c0; j < c1; j += TOPK_UNROLL) {
            uint32_t key[TOPK_UNROLL];
#pragma unroll
            for (int u = 0; u < TOPK_UNROLL; u++) key[u] = j + u < c1 ? __float_as_uint(m[j + u]) & mask : 0;
#pragma unroll
            for (int u = 0; u < TOPK_UNROLL; u++) {
                if (j + u >= c1) break;
                if (key[u] > prefix) {
                    o[pos++] = j + u;
                } else if (key[u] == prefix) {
                    if (eq_before < krem) o[pos++] = j + u;
                    eq_before++;
                }
            }
        }
    const int32_t base = sink + k;
    for (int32_t j = rs + tid; j < n_tot; j += T) o[base + (j - rs)] = j;
    if (tid == 0) out_n[seg] = base + (n_tot - rs);
}

locks_status locks_cuda_topk_launch(locks_cuda_cache *c, int32_t n_seqs, const locks_step_params *p,
                                    const float *mass, int32_t mass_stride, int32_t *out, int32_t *out_n,
                                    int32_t out_stride, int use_hist, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads;
    const int t = c->ws.topk_threads;
    void (*kern)(const int32_t *, const int32_t *, int32_t, const float *, int32_t, const uint32_t *, int, int32_t,
                 int32_t, int32_t, int32_t *, int32_t *, int32_t) =
        t == 256 ? topk_kernel<256> : t == 512 ? topk_kernel<512> : topk_kernel<1024>;
    CU_TRY(launch_k(c->ws.pdl, kern, dim3((unsigned)(n_seqs * hkv)), dim3(t == 256 || t == 512 ? t : 1024), 0, st,
                    (const int32_t *)c->ws.seq_slots, (const int32_t *)c->seq_len, hkv, mass, mass_stride,
                    (const uint32_t *)c->ws.hist, use_hist, p->budget, p->n_sink, p->n_recent, out, out_n,
                    out_stride));
    return LOCKS_OK;
}

/* ---- the group mass folded into the top-k (the step's path; mass.cu's kernel is then
 * not launched) ------------------------------------------------------------------------
 * One cluster of C 1024-thread blocks per segment (C = 1..16, thread block clusters of
 * sm_90). Rank r owns the r-th contiguous slice of the candidates [sink, rs) (rank 0
 * also the sink pages, rank C-1 the recent full pages) and:
 *   1. combines the segment's normalisers Z_h from the score kernel's nblk x G
 *      (max, sum) partials (every rank, the same order: the same Z in every rank),
 *   2. writes the group mass mean_h exp(s_hj - Z_h) of its pages (the same sums as
 *      mass.cu, so the same bits) and histograms the first digit of its candidates,
 *   3. runs the radix select of topk_kernel, each digit's histogram summed over the
 *      cluster's blocks through distributed shared memory (every rank the same sum, so
 *      the same bin), reading only masses it wrote itself,
 *   4. emits its slice's chosen pages at the positions that the lower ranks' counts
 *      (read from their shared memory) leave free.
 * Histograms alternate between two buffers, so one cluster barrier per digit keeps a
 * block from clearing a histogram that a peer still reads. */
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define TKZ_MAX_CLUSTER 16

/* Group mass of page j (the sums of mass.cu's kernel, in its order). */
static __device__ __forceinline__ float group_mass(const float *row, const float *zs, int32_t G, float invg) {
    float m = 0.f;
    if ((G & 3) == 0) {
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
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
        for (int h = 0; h < G; h++) m += __expf(row[h] - zs[h]);
    }
    return m * invg;
}

template <int T>
static __global__ void __launch_bounds__(T, 1)
topk_fused_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
                  int32_t G, const float *scores, int32_t stride, const float2 *lse_part, int32_t nblk_score,
                  float *mass, int32_t budget, int32_t n_sink, int32_t n_recent, int32_t *out, int32_t *out_n,
                  int32_t out_stride) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap(); /* thread block clusters: sm_90 (the host never launches it below) */
#else
    constexpr int U = 2048 / T; /* pages per thread in flight in the mass pass (G/4 float4 each) */
    __shared__ uint32_t hist[2][TOPK_BINS];
    __shared__ uint32_t hsum[TOPK_BINS];
    __shared__ uint64_t scan_ws[32];
    __shared__ uint64_t s_tot; /* this rank's (taken above T) << 32 | (equal to T) */
    __shared__ float zs[LOCKS_CUDA_MAX_GROUP];
    __shared__ uint32_t s_bin, s_above;
    cg::cluster_group cl = cg::this_cluster();
    const int C = (int)cl.num_blocks(), r = (int)cl.block_rank();
    const int32_t seg = blockIdx.x / C;
    const int32_t slot = seq_slots[seg / hkv];
    const locks_plan pl = locks_plan_make(seq_len[slot], budget, n_sink, n_recent, 0);
    const int32_t n_full = pl.n_full, n_tot = pl.n_tot, sink = pl.sink, rs = pl.rs, k = pl.k;
    const int32_t span = (pl.n_cand + C - 1) / C;
    const int32_t a = min(sink + r * span, rs), b = min(a + span, rs); /* this rank's candidates */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int32_t *o = out + (size_t)seg * out_stride;
    pdl_wait(); /* the scores and partials of the score kernel */
    pdl_trigger();
    /* 1. normalisers */
    for (int h = warp; h < G; h += T / 32) {
        float2 z = make_float2(-INFINITY, 0.f);
        const float2 *lp = lse_part + (size_t)seg * nblk_score * G + h;
        for (int b0 = lane; b0 < nblk_score; b0 += 32 * 8) {
            float2 x[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int bb = b0 + 32 * u;
                x[u] = bb < nblk_score ? lp[(size_t)bb * G] : make_float2(-INFINITY, 0.f);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) z = lse_combine(z, x[u]);
        }
        for (int off = 16; off > 0; off >>= 1) {
            float2 x = make_float2(__shfl_xor_sync(0xffffffffu, z.x, off), __shfl_xor_sync(0xffffffffu, z.y, off));
            z = lse_combine(z, x);
        }
        if (lane == 0) zs[h] = z.x + logf(z.y);
    }
    for (int i = tid; i < TOPK_BINS; i += T) hist[0][i] = 0;
    __syncthreads();
    /* 2. masses: the forced full pages (no histogram), then the candidates */
    const float *sc = scores + (size_t)seg * stride * G;
    float *m = mass + (size_t)seg * stride;
    const float invg = 1.f / (float)G;
    if (r == 0)
        for (int32_t j = tid; j < sink; j += T) m[j] = group_mass(sc + (size_t)j * G, zs, G, invg);
    if (r == C - 1)
        for (int32_t j = rs + tid; j < n_full; j += T) m[j] = group_mass(sc + (size_t)j * G, zs, G, invg);
    for (int32_t base = a; base < b; base += T * U) { /* uniform per warp */
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int32_t j = base + u * T + tid;
            v[u] = j < b ? group_mass(sc + (size_t)j * G, zs, G, invg) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int32_t j = base + u * T + tid;
            if (j < b) m[j] = v[u];
            hist_add(hist[0], __float_as_uint(v[u]) >> 21, j < b);
        }
    }
    __syncthreads(); /* masses and the first histogram of this block */
    if (pl.every) {
        if (r == 0) {
            for (int32_t j = tid; j < n_tot; j += T) o[j] = j;
            if (tid == 0) out_n[seg] = n_tot;
        }
        return; /* uniform over the cluster: no barrier below is reached */
    }
    if (k < 0) {
        if (r == 0 && tid == 0) out_n[seg] = -1;
        return;
    }
    /* 3. radix select over the cluster */
    uint32_t prefix = 0, mask = 0;
    uint32_t krem = (uint32_t)k;
    if (k > 0) {
        for (int pass = 0; pass < 3; pass++) {
            const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
            const int nb = pass == 2 ? 1024 : 2048;
            uint32_t *hl = hist[pass & 1];
            if (pass > 0) {
                for (int i = tid; i < TOPK_BINS; i += T) hl[i] = 0;
                __syncthreads();
                for (int32_t base = a; base < b; base += T * TOPK_UNROLL) {
                    uint32_t key[TOPK_UNROLL];
#pragma unroll
                    for (int u = 0; u < TOPK_UNROLL; u++) {
                        const int32_t j = base + u * T + tid;
                        key[u] = j < b ? __float_as_uint(m[j]) : 0xFFFFFFFFu;
                    }
#pragma unroll
                    for (int u = 0; u < TOPK_UNROLL; u++) {
                        const int32_t j = base + u * T + tid;
                        if (j < b && (key[u] & mask) == prefix) atomicAdd(&hl[(key[u] >> shift) & (uint32_t)(nb - 1)], 1u);
                    }
                }
            }
            const uint32_t *h = hl;
            if (C > 1) {
                cl.sync(); /* every block's histogram of this digit is complete */
                for (int i = tid; i < nb; i += T) {
                    uint32_t s = 0;
                    for (int q = 0; q < C; q++) s += cl.map_shared_rank(hl, q)[i];
                    hsum[i] = s;
                }
                h = hsum;
            }
            __syncthreads();
            const int bpt = nb / T; /* 1 to 8 */
            uint32_t local = 0;
            for (int z = 0; z < bpt; z++) local += h[nb - 1 - (tid * bpt + z)];
            uint64_t tot;
            uint32_t above = (uint32_t)block_excl_scan<T>(local, scan_ws, &tot);
            for (int z = 0; z < bpt; z++) {
                const int bin = nb - 1 - (tid * bpt + z);
                const uint32_t cnt = h[bin];
                if (above < krem && krem <= above + cnt) {
                    s_bin = (uint32_t)bin;
                    s_above = above;
                }
                above += cnt;
            }
            __syncthreads();
            const uint32_t bin = s_bin;
            krem -= s_above;
            prefix |= bin << shift;
            mask |= (uint32_t)(nb - 1) << shift;
            const uint32_t in_bin = h[bin];
            __syncthreads();
            if (in_bin == krem) break; /* the same in every rank */
        }
    } else {
        prefix = 0xFFFFFFFFu;
        mask = 0;
    }
    /* 4. emission: sinks, chosen candidates ascending, recent pages, partial page */
    if (r == 0)
        for (int32_t j = tid; j < sink; j += T) o[j] = j;
    const int32_t chunk = (b - a + T - 1) / T;
    const int32_t c0 = a + tid * chunk, c1 = min(c0 + chunk, b);
    uint32_t n_gt = 0, n_eq = 0;
    for (int32_t j = c0; j < c1; j += TOPK_UNROLL) {
        uint32_t key[TOPK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) key[u] = j + u < c1 ? __float_as_uint(m[j + u]) : 0;
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const uint32_t k2 = key[u] & mask;
            n_gt += j + u < c1 && k2 > prefix;
            n_eq += j + u < c1 && k2 == prefix;
        }
    }
    uint64_t tot;
    uint64_t before = block_excl_scan<T>(((uint64_t)n_gt << 32) | n_eq, scan_ws, &tot);
    if (C > 1) {
        if (tid == 0) s_tot = tot;
        cl.sync(); /* every rank's totals are in its shared memory */
        for (int q = 0; q < r; q++) before += *cl.map_shared_rank(&s_tot, q);
    }
    uint32_t eq_before = (uint32_t)(before & 0xFFFFFFFFu);
    int32_t pos = sink + (int32_t)(before >> 32) + (int32_t)min(eq_before, krem);
    if (n_gt + n_eq > 0)
        for (int32_t j = c0; j < c1; j += TOPK_UNROLL) {
            uint32_t key[TOPK_UNROLL];
#pragma unroll
            for (int u = 0; u < TOPK_UNROLL; u++) key[u] = j + u < c1 ? __float_as_uint(m[j + u]) & mask : 0;
#pragma unroll
            for (int u = 0; u < TOPK_UNROLL; u++) {
                if (j + u >= c1) break;
                if (key[u] > prefix) {
                    o[pos++] = j + u;
                } else if (key[u] == prefix) {
                    if (eq_before < krem) o[pos++] = j + u;
                    eq_before++;
                }
            }
        }
    if (r == C - 1) {
        const int32_t base = sink + k;
        for (int32_t j = rs + tid; j < n_tot; j += T) o[base + (j - rs)] = j;
        if (tid == 0) out_n[seg] = base + (n_tot - rs);
    }
    if (C > 1) cl.sync(); /* no block leaves while a peer may still read its totals */
#endif
}

/* Blocks per segment of the fused top-k for this batch, 0 where it should not run:
 * about `ppc` candidate pages per block (default 32768 / G: ~128 KB of scores), at most
 * TKZ_MAX_CLUSTER (LOCKS_CUDA_TOPK_CLUSTER fixes it), and all blocks in one wave. */
int32_t locks_cuda_topk_fused_blocks(const locks_cuda_cache *c, int32_t n_seqs, int32_t hq, int32_t max_pages) {
    const struct locks_cuda_ws *w = &c->ws;
    if (w->topk_fuse == 0) return 0;
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv, segs = n_seqs * hkv;
    int32_t C;
    if (w->topk_cluster > 0) {
        C = w->topk_cluster;
    } else {
        const int32_t ppc = w->topk_ppc > 0 ? w->topk_ppc : 32768 / G;
        C = (max_pages + ppc - 1) / ppc;
        if (C < 1) C = 1;
        if (C > 8) C = 8; /* portable cluster size */
    }
    if (C > TKZ_MAX_CLUSTER) C = TKZ_MAX_CLUSTER;
    if (w->topk_fuse < 0 && (int64_t)segs * C > c->n_sm) return 0; /* more than one wave: mass + top-k */
    return C;
}

locks_status locks_cuda_topk_fused_launch(locks_cuda_cache *c, int32_t n_seqs, int32_t hq, const locks_step_params *p,
                                          int32_t nblk_score, int32_t C, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    struct locks_cuda_ws *w = &c->ws;
    cudaLaunchConfig_t cfg = {};
    const int t = w->topk_threads == 256 || w->topk_threads == 512 ? w->topk_threads : 1024;
    cfg.gridDim = dim3((unsigned)(n_seqs * hkv * C));
    cfg.blockDim = dim3((unsigned)t);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = st;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)C;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = w->pdl ? 2 : 1;
    void (*kern)(const int32_t *, const int32_t *, int32_t, int32_t, const float *, int32_t, const float2 *, int32_t,
                 float *, int32_t, int32_t, int32_t, int32_t *, int32_t *, int32_t) =
        t == 256 ? topk_fused_kernel<256> : t == 512 ? topk_fused_kernel<512> : topk_fused_kernel<1024>;
    CU_TRY(cudaLaunchKernelEx(&cfg, kern, (const int32_t *)w->seq_slots, (const int32_t *)c->seq_len, hkv,
                              G, (const float *)w->scores, w->max_pages, (const float2 *)w->lse_part, nblk_score,
                              w->mass, p->budget, p->n_sink, p->n_recent, w->sel, w->sel_n, w->max_pages));
    return LOCKS_OK;
}

locks_status locks_cuda_topk_fused_prepare(locks_cuda_cache *c) {
    int dev = 0, major = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) { /* no thread block clusters */
        c->ws.topk_fuse = 0;
        return LOCKS_OK;
    }
    CU_TRY(cudaFuncSetAttribute(topk_fused_kernel<256>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CU_TRY(cudaFuncSetAttribute(topk_fused_kernel<512>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CU_TRY(cudaFuncSetAttribute(topk_fused_kernel<1024>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return LOCKS_OK;
}
