/*
 * topk_mb.cu — the step's top-k with the whole machine, not one block per segment.
 *
 * Same rule as topk.cu (forced pages, top masses, ties to the lower logical index;
 * equal inputs give equal selections), in two kernels after mass.cu has built the
 * histogram of the first radix digit (the top 11 bits of the mass):
 *   collect  many blocks per segment: every block finds the bin b0 holding the k-th
 *            largest mass from the histogram, then scans its slice of candidates and
 *            appends (warp-aggregated atomics) pages whose digit is above b0 to a
 *            "taken" list and pages in bin b0 to a candidate list.
 *   final    one block per segment: radix select (digits of 11 and 10 bits) among the
 *            candidates only, ties resolved by a radix select on the complemented
 *            page index; the taken pages are marked in a shared-memory bitmap over the
 *            segment's pages, which is then emitted in ascending order (per-thread
 *            word ranges, one block scan) after the sink pages and before the recent
 *            and partial pages.
 * Used when the bitmap fits in shared memory (TKF_MAX_PAGES full pages); otherwise the
 * step falls back to topk.cu.
 */
#include "common.cuh"

#define TKC_THREADS 256  /* collect block */
#define TKF_THREADS 1024 /* final block */
#define TK_BINS 2048
#define TKC_UNROLL 4
#define TKF_MAX_PAGES (96 * 1024 * 8) /* bitmap of 96 KiB of shared memory */
#define TK_MB_MIN_PAGES 24576          /* below this the one-block kernel is faster */

/* Exclusive scan over the block (any multiple of 32 threads up to 1024). */
static __device__ uint32_t block_scan_u32(uint32_t v, uint32_t *ws, uint32_t *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    uint32_t x = v;
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = lane < nw ? ws[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        ws[lane] = w;
    }
    __syncthreads();
    const uint32_t before = (warp > 0 ? ws[warp - 1] : 0) + x - v;
    *total = ws[nw - 1];
    __syncthreads();
    return before;
}

/* Given the histogram h[nb] of the elements still in play, the bin holding the krem-th
 * largest (bins counted from the top) and how many lie in higher bins. */
static __device__ void find_bin(const uint32_t *h, int nb, uint32_t krem, uint32_t *ws, uint32_t *s_bin,
                                uint32_t *s_above) {
    const int bpt = (nb + blockDim.x - 1) / blockDim.x;
    uint32_t local = 0;
    for (int z = 0; z < bpt; z++) {
        const int bin = nb - 1 - ((int)threadIdx.x * bpt + z);
        if (bin >= 0) local += h[bin];
    }
    uint32_t tot;
    uint32_t above = block_scan_u32(local, ws, &tot);
    for (int z = 0; z < bpt; z++) {
        const int bin = nb - 1 - ((int)threadIdx.x * bpt + z);
        if (bin < 0) break;
        const uint32_t cnt = h[bin];
        if (above < krem && krem <= above + cnt) {
            *s_bin = (uint32_t)bin;
            *s_above = above;
        }
        above += cnt;
    }
    __syncthreads();
}

/* Appends v to dst[atomicAdd(ctr)] for the lanes with pred (one atomic per warp). */
static __device__ __forceinline__ void warp_append(bool pred, uint32_t *ctr, int32_t *dst, int32_t v,
                                                   uint32_t *dst2, uint32_t v2) {
    const unsigned m = __ballot_sync(0xffffffffu, pred);
    if (!m) return;
    const int lane = threadIdx.x & 31, leader = __ffs(m) - 1;
    uint32_t base = 0;
    if (lane == leader) base = atomicAdd(ctr, (uint32_t)__popc(m));
    base = __shfl_sync(0xffffffffu, base, leader);
    if (pred) {
        const uint32_t at = base + (uint32_t)__popc(m & ((1u << lane) - 1u));
        dst[at] = v;
        if (dst2) dst2[at] = v2;
    }
}

static __global__ void __launch_bounds__(TKC_THREADS)
topk_collect_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
                    const float *__restrict__ mass, int32_t stride, uint32_t *__restrict__ hist, int32_t budget,
                    int32_t n_sink, int32_t n_recent, int32_t *__restrict__ taken, int32_t *__restrict__ cand_idx,
                    uint32_t *__restrict__ cand_key) {
    __shared__ uint32_t h[TK_BINS];
    __shared__ uint32_t ws[32];
    __shared__ uint32_t s_bin, s_above;
    const int32_t seg = blockIdx.y;
    const locks_plan pl = locks_plan_make(seq_len[seq_slots[seg / hkv]], budget, n_sink, n_recent, 0);
    pdl_wait(); /* the masses and histogram of mass.cu */
    pdl_trigger();
    if (pl.every || pl.k <= 0) return; /* nothing to rank, or over budget */
    uint32_t *gh = hist + (size_t)seg * LOCKS_CUDA_HIST_STRIDE;
    for (int i = threadIdx.x; i < TK_BINS; i += TKC_THREADS) h[i] = gh[i];
    __syncthreads();
    find_bin(h, TK_BINS, (uint32_t)pl.k, ws, &s_bin, &s_above);
    const uint32_t b0 = s_bin;
    const float *m = mass + (size_t)seg * stride;
    const size_t off = (size_t)seg * stride;
    const int32_t step = gridDim.x * TKC_THREADS * TKC_UNROLL;
    for (int32_t base = pl.sink + blockIdx.x * TKC_THREADS * TKC_UNROLL; base < pl.rs; base += step) {
        uint32_t key[TKC_UNROLL];
#pragma unroll
        for (int u = 0; u < TKC_UNROLL; u++) {
            const int32_t j = base + u * TKC_THREADS + threadIdx.x;
            key[u] = j < pl.rs ? __float_as_uint(m[j]) : 0u;
        }
#pragma unroll
        for (int u = 0; u < TKC_UNROLL; u++) {
            const int32_t j = base + u * TKC_THREADS + threadIdx.x;
            const uint32_t d0 = key[u] >> 21;
            const bool ok = j < pl.rs;
            warp_append(ok && d0 > b0, gh + TK_BINS, taken + off, j, NULL, 0);
            warp_append(ok && d0 == b0, gh + TK_BINS + 1, cand_idx + off, j, cand_key + off, key[u]);
        }
    }
}

/* Radix select over list elements with (key & mask) == prefix, digits (shift, bits)
 * from the table starting at pass `first`: narrows prefix/mask/krem like topk.cu. */
static __device__ void list_select(int32_t n, const uint32_t *keys, int first, uint32_t *prefix, uint32_t *mask, uint32_t *krem, uint32_t *h, uint32_t *ws,
                                   uint32_t *s_bin, uint32_t *s_above) {
    const int shifts[3] = {21, 10, 0};
    for (int pass = first; pass < 3; pass++) {
        const int shift = shifts[pass], nb = pass == 2 ? 1024 : 2048;
        for (int i = threadIdx.x; i < nb; i += blockDim.x) h[i] = 0;
        __syncthreads();
        for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
            const uint32_t key = keys[i];
            if ((key & *mask) == *prefix) atomicAdd(&h[(key >> shift) & (uint32_t)(nb - 1)], 1u);
        }
        __syncthreads();
        find_bin(h, nb, *krem, ws, s_bin, s_above);
        const uint32_t bin = *s_bin;
        *krem -= *s_above;
        *prefix |= bin << shift;
        *mask |= (uint32_t)(nb - 1) << shift;
        const uint32_t in_bin = h[bin];
        __syncthreads();
        if (in_bin == *krem) break;
    }
}

static __global__ void __launch_bounds__(TKF_THREADS)
topk_final_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
                  const uint32_t *__restrict__ hist, int32_t stride, int32_t budget, int32_t n_sink, int32_t n_recent,
                  const int32_t *__restrict__ taken, const int32_t *__restrict__ cand_idx,
                  const uint32_t *__restrict__ cand_key, int32_t *__restrict__ out, int32_t *__restrict__ out_n,
                  int32_t out_stride) {
    extern __shared__ uint32_t bits[]; /* [(n_full + 31) / 32] */
    __shared__ uint32_t h[TK_BINS];
    __shared__ uint32_t ws[32];
    __shared__ uint32_t s_bin, s_above;
    const int32_t seg = blockIdx.x;
    const locks_plan pl = locks_plan_make(seq_len[seq_slots[seg / hkv]], budget, n_sink, n_recent, 0);
    int32_t *o = out + (size_t)seg * out_stride;
    const int tid = threadIdx.x;
    pdl_wait(); /* the lists of topk_collect_kernel */
    pdl_trigger();
    if (pl.every) {
        for (int32_t j = tid; j < pl.n_tot; j += TKF_THREADS) o[j] = j;
        if (tid == 0) out_n[seg] = pl.n_tot;
        return;
    }
    if (pl.k < 0) { /* forced pages over the budget */
        if (tid == 0) out_n[seg] = -1;
        return;
    }
    const int32_t n_words = (pl.n_full + 31) / 32;
    for (int32_t w = tid; w < n_words; w += TKF_THREADS) bits[w] = 0;
    __syncthreads();
    if (pl.k > 0) {
        const uint32_t *gh = hist + (size_t)seg * LOCKS_CUDA_HIST_STRIDE;
        for (int i = tid; i < TK_BINS; i += TKF_THREADS) h[i] = gh[i];
        __syncthreads();
        find_bin(h, TK_BINS, (uint32_t)pl.k, ws, &s_bin, &s_above);
        const uint32_t b0 = s_bin, n_taken = gh[TK_BINS], n_c = gh[TK_BINS + 1];
        uint32_t krem = (uint32_t)pl.k - s_above;
        __syncthreads();
        const size_t off = (size_t)seg * stride;
        const int32_t *tk = taken + off;
        const int32_t *ci = cand_idx + off;
        const uint32_t *ck = cand_key + off;
        for (uint32_t i = tid; i < n_taken; i += TKF_THREADS) atomicOr(&bits[tk[i] >> 5], 1u << (tk[i] & 31));
        uint32_t prefix = b0 << 21, mask = 0x7FFu << 21;
        if (n_c > krem) /* narrow among the candidates of bin b0 */
            list_select((int32_t)n_c, ck, 1, &prefix, &mask, &krem, h, ws, &s_bin, &s_above);
        /* now: take (key & mask) > prefix, and krem of those == prefix (lowest index) */
        uint32_t n_eq = 0;
        for (uint32_t i = tid; i < n_c; i += TKF_THREADS) n_eq += (ck[i] & mask) == prefix;
        uint32_t tot;
        block_scan_u32(n_eq, ws, &tot);
        uint32_t iprefix = 0, imask = 0, ikrem = krem;
        const bool tie_pick = tot > krem && krem > 0;
        if (tie_pick) { /* the krem lowest indices among the equal keys: largest ~index */
            /* restrict the index select to the equal keys by folding them into the key test */
            const int shifts[3] = {21, 10, 0};
            for (int pass = 0; pass < 3; pass++) {
                const int shift = shifts[pass], nb = pass == 2 ? 1024 : 2048;
                for (int i = tid; i < nb; i += TKF_THREADS) h[i] = 0;
                __syncthreads();
                for (uint32_t i = tid; i < n_c; i += TKF_THREADS) {
                    const uint32_t kk = ~(uint32_t)ci[i];
                    if ((ck[i] & mask) == prefix && (kk & imask) == iprefix)
                        atomicAdd(&h[(kk >> shift) & (uint32_t)(nb - 1)], 1u);
                }
                __syncthreads();
                find_bin(h, nb, ikrem, ws, &s_bin, &s_above);
                const uint32_t bin = s_bin;
                ikrem -= s_above;
                iprefix |= bin << shift;
                imask |= (uint32_t)(nb - 1) << shift;
                const uint32_t in_bin = h[bin];
                __syncthreads();
                if (in_bin == ikrem) break;
            }
        }
        for (uint32_t i = tid; i < n_c; i += TKF_THREADS) {
            const uint32_t key = ck[i] & mask;
            bool take = key > prefix;
            if (key == prefix) {
                const uint32_t kk = ~(uint32_t)ci[i] & imask;
                take = !tie_pick ? krem > 0 : kk >= iprefix;
            }
            if (take) atomicOr(&bits[ci[i] >> 5], 1u << (ci[i] & 31));
        }
        __syncthreads();
    }
    /* emission: sinks, marked candidates ascending, recent pages, partial page */
    for (int32_t j = tid; j < pl.sink; j += TKF_THREADS) o[j] = j;
    const int32_t per = (n_words + TKF_THREADS - 1) / TKF_THREADS;
    const int32_t w0 = tid * per, w1 = min(w0 + per, n_words);
    uint32_t cnt = 0;
    for (int32_t w = w0; w < w1; w++) cnt += __popc(bits[w]);
    uint32_t tot;
    uint32_t pos = (uint32_t)pl.sink + block_scan_u32(cnt, ws, &tot);
    for (int32_t w = w0; w < w1; w++) {
        uint32_t b = bits[w];
        while (b) {
            const int z = __ffs(b) - 1;
            b &= b - 1;
            o[pos++] = w * 32 + z;
        }
    }
    const int32_t base = pl.sink + pl.k;
    for (int32_t j = pl.rs + tid; j < pl.n_tot; j += TKF_THREADS) o[base + (j - pl.rs)] = j;
    if (tid == 0) out_n[seg] = base + (pl.n_tot - pl.rs);
}

int locks_cuda_topk_mb_ok(const locks_cuda_cache *c, int32_t max_pages) {
    (void)c;
    return max_pages <= TKF_MAX_PAGES;
}

/* The two-kernel top-k has ~15 us of fixed cost (two launches, several block scans);
 * one block per segment is cheaper until ~24K pages (measured on the H200: 13 vs 18 us
 * at 8K pages, 30 vs 18 us at 32K, 52 vs 18 us at 64K, bench/RESULTS.md). */
int locks_cuda_topk_mb_pays(const locks_cuda_cache *c, int32_t max_pages) {
    const int32_t from = c->ws.topk_mb_min >= 0 ? c->ws.topk_mb_min : TK_MB_MIN_PAGES;
    return locks_cuda_topk_mb_ok(c, max_pages) && max_pages >= from;
}

locks_status locks_cuda_topk_mb_launch(locks_cuda_cache *c, int32_t n_seqs, const locks_step_params *p,
                                       int32_t max_pages, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, segs = n_seqs * hkv;
    int32_t nblk = (c->n_sm * 8 + segs - 1) / segs;
    const int32_t most = (max_pages + TKC_THREADS * TKC_UNROLL - 1) / (TKC_THREADS * TKC_UNROLL);
    if (nblk > most) nblk = most;
    if (nblk < 1) nblk = 1;
    struct locks_cuda_ws *w = &c->ws;
    CU_TRY(launch_k(w->pdl, topk_collect_kernel, dim3((unsigned)nblk, (unsigned)segs), dim3(TKC_THREADS), 0, st,
                    (const int32_t *)w->seq_slots, (const int32_t *)c->seq_len, hkv, (const float *)w->mass,
                    w->max_pages, w->hist, p->budget, p->n_sink, p->n_recent, w->taken, w->cand_idx, w->cand_key));
    const size_t smem = (size_t)((max_pages + 31) / 32) * 4;
    CU_TRY(launch_k(w->pdl, topk_final_kernel, dim3((unsigned)segs), dim3(TKF_THREADS), smem, st,
                    (const int32_t *)w->seq_slots, (const int32_t *)c->seq_len, hkv, (const uint32_t *)w->hist,
                    w->max_pages, p->budget, p->n_sink, p->n_recent, (const int32_t *)w->taken,
                    (const int32_t *)w->cand_idx, (const uint32_t *)w->cand_key, w->sel, w->sel_n, w->max_pages));
    return LOCKS_OK;
}

locks_status locks_cuda_topk_mb_prepare(locks_cuda_cache *c) {
    (void)c;
    CU_TRY(cudaFuncSetAttribute(topk_final_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (TKF_MAX_PAGES + 31) / 32 * 4));
    return LOCKS_OK;
}

/* ---- stand-alone entry on given masses (tests): first-digit histogram, then the two
 * kernels above ------------------------------------------------------------------------ */

#define HIST0_THREADS 256

static __global__ void __launch_bounds__(HIST0_THREADS)
hist0_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
             const float *__restrict__ mass, int32_t stride, int32_t n_sink, int32_t n_recent, uint32_t *hist) {
    __shared__ uint32_t h[TK_BINS];
    const int32_t seg = blockIdx.y;
    const locks_plan pl = locks_plan_make(seq_len[seq_slots[seg / hkv]], 0, n_sink, n_recent, 0);
    for (int i = threadIdx.x; i < TK_BINS; i += HIST0_THREADS) h[i] = 0;
    __syncthreads();
    const float *m = mass + (size_t)seg * stride;
    for (int32_t j = pl.sink + blockIdx.x * HIST0_THREADS + threadIdx.x; j < pl.rs; j += gridDim.x * HIST0_THREADS)
        atomicAdd(&h[__float_as_uint(m[j]) >> 21], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < TK_BINS; i += HIST0_THREADS)
        if (h[i]) atomicAdd(&hist[(size_t)seg * LOCKS_CUDA_HIST_STRIDE + i], h[i]);
}

extern "C" locks_status locks_cuda_select_mb(locks_cuda_cache *c, int32_t seq, const float *d_mass,
                                             const locks_step_params *p, int32_t *d_pages, int32_t *d_n_pages,
                                             int32_t max_pages) {
    if (!c || !d_mass || !d_pages || !d_n_pages || !p || seq < 0 || seq >= c->p.max_seqs) return LOCKS_ERR_INVALID_ARG;
    const int32_t len = c->h_seq_len[seq], n_full = len / 16, n_tot = (len + 15) / 16, hkv = c->p.n_kv_heads;
    if (len <= 0 || max_pages < n_tot || !locks_cuda_topk_mb_ok(c, n_tot)) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(locks_cuda_mass_cut_check(p, n_tot));
    LOCKS_TRY(locks_cuda_ws_reserve(c, 1, hkv));
    CU_TRY(cudaStreamSynchronize(c->stream));
    c->slots_owner = NULL;
    CU_TRY(cudaMemcpy(c->ws.seq_slots, &seq, 4, cudaMemcpyHostToDevice));
    if (n_full > 0)
        CU_TRY(cudaMemcpy2DAsync(c->ws.mass, (size_t)c->ws.max_pages * 4, d_mass, (size_t)n_full * 4,
                                 (size_t)n_full * 4, (size_t)hkv, cudaMemcpyDeviceToDevice, c->stream));
    CU_TRY(cudaMemsetAsync(c->ws.hist, 0, (size_t)hkv * LOCKS_CUDA_HIST_STRIDE * 4, c->stream));
    hist0_kernel<<<dim3(8, (unsigned)hkv), HIST0_THREADS, 0, c->stream>>>(c->ws.seq_slots, c->seq_len, hkv, c->ws.mass,
                                                                       c->ws.max_pages, p->n_sink, p->n_recent,
                                                                       c->ws.hist);
    CU_LAUNCH_CHECK(hist0_kernel);
    LOCKS_TRY(locks_cuda_topk_mb_launch(c, 1, p, n_tot, c->stream));
    LOCKS_TRY(locks_cuda_mass_cut_launch(c, 1, p, c->ws.mass, c->ws.max_pages, n_tot, c->ws.sel, c->ws.sel_n,
                                         c->ws.max_pages, c->stream));
    CU_TRY(cudaMemcpy2DAsync(d_pages, (size_t)max_pages * 4, c->ws.sel, (size_t)c->ws.max_pages * 4, (size_t)n_tot * 4,
                             (size_t)hkv, cudaMemcpyDeviceToDevice, c->stream));
    CU_TRY(cudaMemcpyAsync(d_n_pages, c->ws.sel_n, (size_t)hkv * 4, cudaMemcpyDeviceToDevice, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}
