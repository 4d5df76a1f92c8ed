/*
 * masscut.cu — the mass target's cut of a selection (locks_step_params.mass), run
 * after topk.cu / topk_mb.cu when the target is on; the step without a target does
 * not launch it, so its kernels and speed are unchanged.
 *
 * The top-k kernels write, per (sequence, KV head): the sink pages, the k chosen
 * candidates in ascending order, the recent pages and the partial page. The cut keeps,
 * of the k candidates, the largest masses first (ties to the lower logical index)
 * until the covered mass, forced full pages included, reaches the target: select.c's
 * mass_prefix. One block per segment:
 *   1. the candidates' rank keys (mass bits high, complemented index low: the CPU's
 *      locks_rank_key) are bitonic-sorted descending in shared memory;
 *   2. the forced full pages' mass (block sum) and an inclusive block scan of the
 *      sorted masses (each thread a contiguous stretch) give the first position t - 1
 *      where forced + covered >= target; t = k if never reached, 0 if the forced pages
 *      reach it alone;
 *   3. the candidates whose key is >= the t-th key are compacted in place (ascending),
 *      followed by the recent and partial pages.
 * Sums are in double as on the CPU, but in a different order (block reductions, not one
 * running sum), so a target within ~1e-16 of a partial sum may cut one page apart;
 * otherwise equal masses give equal selections.
 * Limit: min(budget / 16, pages) <= LOCKS_CUDA_CUT_MAX (the keys live in shared memory);
 * larger gives LOCKS_ERR_UNSUPPORTED before anything is launched.
 */
#include "common.cuh"

#define CUT_THREADS 1024
#define CUT_PER (LOCKS_CUDA_CUT_MAX / CUT_THREADS) /* candidates per thread at most */

/* Exclusive block scan of a double over CUT_THREADS threads; *total gets the sum. */
static __device__ double block_excl_scan_f64(double v, double *ws, double *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        double w = ws[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        ws[lane] = w;
    }
    __syncthreads();
    const double before = (warp > 0 ? ws[warp - 1] : 0.0) + x - v;
    *total = ws[31];
    __syncthreads();
    return before;
}

static __device__ __forceinline__ uint64_t rank_key(float m, int32_t j) {
    uint32_t b = __float_as_uint(m);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << 32) | (uint32_t)~(uint32_t)j;
}

static __device__ __forceinline__ float key_mass(uint64_t key) {
    uint32_t b = (uint32_t)(key >> 32);
    b = (b & 0x80000000u) ? (b & 0x7FFFFFFFu) : ~b;
    return __uint_as_float(b);
}

static __global__ void __launch_bounds__(CUT_THREADS)
mass_cut_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv,
                const float *__restrict__ mass, int32_t mass_stride, int32_t budget, int32_t n_sink,
                int32_t n_recent, float target, int32_t *__restrict__ out, int32_t *__restrict__ out_n,
                int32_t out_stride) {
    extern __shared__ uint64_t keys[]; /* [n2], n2 = next power of two >= k */
    __shared__ double ws[32];
    __shared__ int32_t s_t;
    const int32_t seg = blockIdx.x;
    const locks_plan pl = locks_plan_make(seq_len[seq_slots[seg / hkv]], budget, n_sink, n_recent, 0);
    const int tid = threadIdx.x;
    pdl_wait(); /* the selection of the top-k kernel (and the masses before it) */
    pdl_trigger();
    const int32_t k = pl.k; /* == n_cand when the budget holds everything */
    if (k <= 0) return;     /* nothing to cut, or over budget (n_pages -1 stays) */
    const float *m = mass + (size_t)seg * mass_stride;
    int32_t *o = out + (size_t)seg * out_stride;
    const int32_t sink = pl.sink;

    /* 1. keys of the chosen candidates, sorted descending */
    int32_t n2 = 1;
    while (n2 < k) n2 <<= 1;
    for (int32_t i = tid; i < n2; i += CUT_THREADS) {
        uint64_t key = 0; /* below every real key: its high half is >= 2^31 for m >= 0 */
        if (i < k) {
            const int32_t j = o[sink + i];
            key = rank_key(m[j], j);
        }
        keys[i] = key;
    }
    __syncthreads();
    for (int32_t len = 2; len <= n2; len <<= 1)
        for (int32_t half = len >> 1; half > 0; half >>= 1) {
            for (int32_t i = tid; i < n2; i += CUT_THREADS) {
                const int32_t x = i ^ half;
                if (x > i) {
                    const uint64_t a = keys[i], b = keys[x];
                    const bool desc = (i & len) == 0;
                    if (desc ? a < b : a > b) {
                        keys[i] = b;
                        keys[x] = a;
                    }
                }
            }
            __syncthreads();
        }

    /* 2. forced mass, then the first sorted position reaching the target */
    double f = 0.0;
    for (int32_t j = tid; j < pl.n_full; j += CUT_THREADS)
        if (j < sink || j >= pl.rs) f += (double)m[j];
    double forced;
    (void)block_excl_scan_f64(f, ws, &forced);
    const int32_t chunk = (k + CUT_THREADS - 1) / CUT_THREADS;
    const int32_t c0 = tid * chunk, c1 = min(c0 + chunk, k);
    double local = 0.0;
    for (int32_t i = c0; i < c1; i++) local += (double)key_mass(keys[i]);
    double tot;
    double run = forced + block_excl_scan_f64(local, ws, &tot);
    if (tid == 0) s_t = forced >= (double)target ? 0 : k;
    __syncthreads();
    if (forced < (double)target)
        for (int32_t i = c0; i < c1; i++) {
            run += (double)key_mass(keys[i]);
            if (run >= (double)target) {
                atomicMin(&s_t, i + 1);
                break;
            }
        }
    __syncthreads();
    const int32_t t = s_t;
    if (t == k) return; /* every candidate is needed: the selection stands */

    /* 3. compaction: candidates with key >= keys[t - 1], ascending, then the rest */
    const uint64_t kt = t > 0 ? keys[t - 1] : ~(uint64_t)0;
    int32_t mine[CUT_PER];
    uint32_t keep = 0, n_keep = 0;
#pragma unroll
    for (int u = 0; u < CUT_PER; u++) {
        const int32_t i = c0 + u;
        mine[u] = -1;
        if (i < c1) {
            const int32_t j = o[sink + i];
            if (t > 0 && rank_key(m[j], j) >= kt) {
                mine[u] = j;
                keep |= 1u << u;
                n_keep++;
            }
        }
    }
    double n_before_d;
    const int32_t pos0 = sink + (int32_t)block_excl_scan_f64((double)n_keep, ws, &n_before_d); /* syncs */
    int32_t pos = pos0;
#pragma unroll
    for (int u = 0; u < CUT_PER; u++)
        if (keep & (1u << u)) o[pos++] = mine[u];
    for (int32_t j = pl.rs + tid; j < pl.n_tot; j += CUT_THREADS) o[sink + t + (j - pl.rs)] = j;
    if (tid == 0) out_n[seg] = sink + t + (pl.n_tot - pl.rs);
}

/* The largest k of any sequence of up to max_pages pages under p: min(budget / 16, max_pages). */
static int32_t cut_kmax(const locks_step_params *p, int32_t max_pages) {
    int32_t kmax = p->budget / 16 < max_pages ? p->budget / 16 : max_pages;
    return kmax < 1 ? 1 : kmax;
}

locks_status locks_cuda_mass_cut_check(const locks_step_params *p, int32_t max_pages) {
    return p->mass != 0.f && cut_kmax(p, max_pages) > LOCKS_CUDA_CUT_MAX ? LOCKS_ERR_UNSUPPORTED : LOCKS_OK;
}

locks_status locks_cuda_mass_cut_prepare(locks_cuda_cache *c) {
    (void)c;
    CU_TRY(cudaFuncSetAttribute(mass_cut_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                LOCKS_CUDA_CUT_MAX * 8));
    return LOCKS_OK;
}

locks_status locks_cuda_mass_cut_launch(locks_cuda_cache *c, int32_t n_seqs, const locks_step_params *p,
                                        const float *mass, int32_t mass_stride, int32_t max_pages, int32_t *out,
                                        int32_t *out_n, int32_t out_stride, cudaStream_t st) {
    if (p->mass == 0.f) return LOCKS_OK;
    LOCKS_TRY(locks_cuda_mass_cut_check(p, max_pages));
    /* shared memory for the largest k any sequence of up to max_pages pages can have */
    int32_t n2 = 1;
    while (n2 < cut_kmax(p, max_pages)) n2 <<= 1;
    const int32_t hkv = c->p.n_kv_heads;
    CU_TRY(launch_k(c->ws.pdl, mass_cut_kernel, dim3((unsigned)(n_seqs * hkv)), dim3(CUT_THREADS), (size_t)n2 * 8, st,
                    (const int32_t *)c->ws.seq_slots, (const int32_t *)c->seq_len, hkv, mass, mass_stride, p->budget,
                    p->n_sink, p->n_recent, p->mass, out, out_n, out_stride));
    return LOCKS_OK;
}
