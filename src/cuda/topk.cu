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

#define TOPK_THREADS 1024
#define TOPK_BINS 2048
#define TOPK_UNROLL 16 /* independent loads in flight per thread */

/* Exclusive block scan of a 64-bit value over TOPK_THREADS threads; *total gets the sum. */
static __device__ uint64_t block_excl_scan(uint64_t v, uint64_t *ws, uint64_t *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t x = v;
    for (int o = 1; o < 32; o <<= 1) {
        uint64_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        uint64_t w = ws[lane];
        for (int o = 1; o < 32; o <<= 1) {
            uint64_t y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        ws[lane] = w; /* inclusive over warps */
    }
    __syncthreads();
    const uint64_t before = (warp > 0 ? ws[warp - 1] : 0) + x - v;
    *total = ws[31];
    __syncthreads();
    return before;
}

static __global__ void __launch_bounds__(TOPK_THREADS)
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
        for (int32_t j = tid; j < n_tot; j += TOPK_THREADS) o[j] = j;
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
                for (int i = tid; i < TOPK_BINS; i += TOPK_THREADS) hist[i] = ghist[(size_t)seg * LOCKS_CUDA_HIST_STRIDE + i];
                __syncthreads();
            } else {
                for (int i = tid; i < TOPK_BINS; i += TOPK_THREADS) hist[i] = 0;
                __syncthreads();
                /* TOPK_UNROLL independent loads in flight per thread (uniform trip count) */
                for (int32_t base = sink; base < rs; base += TOPK_THREADS * TOPK_UNROLL) {
                    uint32_t key[TOPK_UNROLL];
#pragma unroll
                    for (int u = 0; u < TOPK_UNROLL; u++) {
                        const int32_t j = base + u * TOPK_THREADS + tid;
                        key[u] = j < rs ? __float_as_uint(m[j]) : 0xFFFFFFFFu;
                    }
#pragma unroll
                    for (int u = 0; u < TOPK_UNROLL; u++) {
                        const int32_t j = base + u * TOPK_THREADS + tid;
                        /* below the first digit the bins spread out: plain atomics */
                        if (j < rs && (key[u] & mask) == prefix) atomicAdd(&hist[(key[u] >> shift) & (uint32_t)(nb - 1)], 1u);
                    }
                }
                __syncthreads();
            }
            /* find the bin holding the krem-th largest: threads own bins from the top */
            const int bpt = nb / TOPK_THREADS; /* 1 or 2 */
            uint32_t local = 0;
            for (int z = 0; z < bpt; z++) local += hist[nb - 1 - (tid * bpt + z)];
            uint64_t tot;
            uint32_t above = (uint32_t)block_excl_scan(local, scan_ws, &tot);
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
    for (int32_t j = tid; j < sink; j += TOPK_THREADS) o[j] = j;
    const int32_t chunk = (n_cand + TOPK_THREADS - 1) / TOPK_THREADS;
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
    const uint64_t before = block_excl_scan(((uint64_t)n_gt << 32) | n_eq, scan_ws, &tot);
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
    for (int32_t j = rs + tid; j < n_tot; j += TOPK_THREADS) o[base + (j - rs)] = j;
    if (tid == 0) out_n[seg] = base + (n_tot - rs);
}

locks_status locks_cuda_topk_launch(locks_cuda_cache *c, int32_t n_seqs, const locks_step_params *p,
                                    const float *mass, int32_t mass_stride, int32_t *out, int32_t *out_n,
                                    int32_t out_stride, int use_hist, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads;
    CU_TRY(launch_k(c->ws.pdl, topk_kernel, dim3((unsigned)(n_seqs * hkv)), dim3(TOPK_THREADS), 0, st,
                    (const int32_t *)c->ws.seq_slots, (const int32_t *)c->seq_len, hkv, mass, mass_stride,
                    (const uint32_t *)c->ws.hist, use_hist, p->budget, p->n_sink, p->n_recent, out, out_n,
                    out_stride));
    return LOCKS_OK;
}
