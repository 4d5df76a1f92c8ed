/*
 * attend.cu — exact paged attention over a page list (sparse) or over every page
 * (dense), flash-decoding: the list of each (sequence, KV head) is cut into splits of
 * `pps` pages; a block of ATT_WARPS warps takes one split, each warp one page at a
 * time for all G query heads of the group (rows of a 16-row MMA tile):
 *     S = Q K^T   (m16n8k16, two 8-token tiles per 16-token page, k = head dims)
 *     online softmax in exp2 (queries are pre-scaled by scale * log2 e)
 *     O += P V    (m16n8k16, k = the page's 16 tokens, V transposed in registers
 *                  with movmatrix so every K/V load is a 16-byte row load)
 * The warps of a block merge through shared memory and write one (max, sum, O)
 * partial per split; merge_kernel combines the splits by log-sum-exp.
 * Lane (g, t) loads rows g and g+8 of the page, dims [t d/4, (t+1) d/4); in k-chunk c
 * its k slots are the dims t d/4 + 4c + {0,1 | 2,3}, for Q and K alike; its output
 * columns in n-tile x are the dims t d/4 + 2x + {0, 1}.
 */
#include "common.cuh"

#define ATT_WARPS 4
#define MERGE_THREADS 256
#define ATT_MAX_SPLITS 1024
#define ATT_BLOCKS_PER_SM 2
#define ATT_STAGES 3 /* pages per warp in the d = 128 shared-memory ring */

/* MR (rows mode, dense only): a block takes one split of one KV head for up to 16 / G
 * query rows of ONE sequence (a verify: rows r = 0 .. mr_rows - 1 at lengths mr_len0 + r),
 * rows-per-tile x G heads in the 16-row MMA tile; tile row i is query row tile * rpt + i / G,
 * head i % G. blockIdx.x = split * tiles + tile (the tiles of one split run side by side and
 * share the split's K/V through L2), blockIdx.y = KV head. The block walks the pages of its
 * longest row; each row is masked to its own length, and a page past a row's length leaves
 * that row's state bit-for-bit as it was (exp2(0) = 1 rescale, p = 0, O += 0 V), so a row's
 * arithmetic is the dense decode's at that length: same pps, splits, page-to-warp order,
 * warp merge; merge_kernel then merges a row's ceil(count / pps) splits as decode does.
 * With MR false the kernel is the decode kernel, unchanged. */
template <int D, typename T, bool MR = false>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
attend_kernel(const uint16_t *__restrict__ kpool, const uint16_t *__restrict__ vpool, kv_strides ld,
              const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len,
              const int32_t *__restrict__ block_table, int32_t npool, int32_t hkv, int32_t G,
              const uint16_t *q_attn /* not __restrict__: see below */, int32_t hq, const int32_t *__restrict__ list,
              const int32_t *__restrict__ list_n, int32_t list_stride, int dense, int32_t pps,
              float *__restrict__ part_o, float2 *__restrict__ part_ml, int32_t max_splits, int32_t mr_len0,
              int32_t mr_rows) {
    constexpr int DL = D / 4;  /* dims per lane */
    constexpr int NC = D / 16; /* k-chunks of QK */
    constexpr int NT = D / 8;  /* n-tiles of PV */
    constexpr int NW = DL / 8; /* uint4 per row stretch */
    constexpr bool ASYNC = D == 128;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int32_t seg = blockIdx.y, s = MR ? 0 : seg / hkv, h = MR ? seg : seg % hkv;
    const int32_t slot = seq_slots[s];
    /* rows mode: tile rows g and g+8 are query rows rA / rB (heads hA / hB) of lengths
     * lenA / lenB; the block's len is its longest row's */
    const int32_t rpt = MR ? 16 / G : 1, tiles = MR ? (mr_rows + rpt - 1) / rpt : 1;
    const int32_t tile = MR ? (int32_t)blockIdx.x % tiles : 0;
    const int32_t split = MR ? (int32_t)blockIdx.x / tiles : (int32_t)blockIdx.x;
    const int32_t TR = MR ? rpt * G : G; /* tile rows in use (the block merge's rows) */
    const int32_t rA = tile * rpt + g / G, rB = tile * rpt + (g + 8) / G;
    const bool liveA = MR ? g < TR && rA < mr_rows : g < G, liveB = MR ? g + 8 < TR && rB < mr_rows : g + 8 < G;
    const int32_t lenA = mr_len0 + rA, lenB = mr_len0 + rB;
    const int32_t len = MR ? mr_len0 + min(mr_rows - 1, tile * rpt + rpt - 1) : seq_len[slot];
    const int32_t n_full = len / 16;
    float *so = reinterpret_cast<float *>(smem_raw);                         /* [warps][TR][D] */
    float2 *sml = reinterpret_cast<float2 *>(so + (size_t)ATT_WARPS * TR * D); /* [warps][TR] */
    /* dense: qprep is the launch just before, so the queries are read after the wait. With
     * q_attn declared const __restrict__ (data invariant for the kernel's lifetime) ptxas
     * emitted the query loads as LDG.CONSTANT ahead of this wait (ACQBULK): the dense
     * attention of the GPU engine read the previous layer's queries (common.cuh, PDL rules) */
    if (dense) pdl_wait();
    uint32_t qa[NC][4];
    {
        const T *q0 = reinterpret_cast<const T *>(q_attn) + ((size_t)s * hq + h * G + g) * D + t * DL;
        const T *q1 = q0 + 8 * D;
        if constexpr (MR) {
            q0 = reinterpret_cast<const T *>(q_attn) + ((size_t)rA * hq + h * G + g % G) * D + t * DL;
            q1 = reinterpret_cast<const T *>(q_attn) + ((size_t)rB * hq + h * G + (g + 8) % G) * D + t * DL;
        }
#pragma unroll
        for (int u = 0; u < NW; u++) {
            uint4 w0 = liveA ? reinterpret_cast<const uint4 *>(q0)[u] : make_uint4(0, 0, 0, 0);
            uint4 w1 = liveB ? reinterpret_cast<const uint4 *>(q1)[u] : make_uint4(0, 0, 0, 0);
            qa[2 * u][0] = w0.x;
            qa[2 * u][2] = w0.y;
            qa[2 * u + 1][0] = w0.z;
            qa[2 * u + 1][2] = w0.w;
            qa[2 * u][1] = w1.x;
            qa[2 * u][3] = w1.y;
            qa[2 * u + 1][1] = w1.z;
            qa[2 * u + 1][3] = w1.w;
        }
    }
    /* sparse: the queries came from qprep, at least two launches back (readable before
     * the wait, common.cuh) */
    if (!dense) pdl_wait(); /* the selection of the top-k */
    pdl_trigger();
    const int32_t begin = split * pps;
    const int32_t *bt = block_table + (size_t)slot * npool;
    const int32_t *lst = list + (size_t)seg * list_stride;
    /* this warp's first list entry, loaded alongside the count (not after it) */
    const int32_t i0 = begin + warp;
    const int32_t lp0 = !dense && i0 < list_stride ? lst[i0] : i0;
    const int32_t count = dense ? (len + 15) / 16 : list_n[seg];
    if (begin >= count) return; /* the merge only reads splits < ceil(count / pps) */
    const int32_t end = min(begin + pps, count);

    float o[NT][4];
#pragma unroll
    for (int x = 0; x < NT; x++) o[x][0] = o[x][1] = o[x][2] = o[x][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    /* K/V rows g and g+8 of list entry i (0 tokens: past the end or an invalid entry) */
    const int32_t n_tot = (len + 15) / 16;
    auto load = [&](int32_t i, uint4 *k0, uint4 *k1, uint4 *v0, uint4 *v1) -> int32_t {
        if (i >= end) return 0;
        const int32_t lp = dense ? i : lst[i];
        if (lp < 0 || lp >= n_tot) return 0; /* invalid entry (caller's list): skipped */
        const size_t blk = (size_t)bt[lp] * ld.page + (size_t)h * ld.head;
        const uint4 *kg = reinterpret_cast<const uint4 *>(kpool + blk + (size_t)g * ld.tok + t * DL);
        const uint4 *kg8 = reinterpret_cast<const uint4 *>(kpool + blk + (size_t)(g + 8) * ld.tok + t * DL);
        const uint4 *vg = reinterpret_cast<const uint4 *>(vpool + blk + (size_t)g * ld.tok + t * DL);
        const uint4 *vg8 = reinterpret_cast<const uint4 *>(vpool + blk + (size_t)(g + 8) * ld.tok + t * DL);
#pragma unroll
        for (int u = 0; u < NW; u++) {
            k0[u] = kg[u];
            k1[u] = kg8[u];
        }
#pragma unroll
        for (int u = 0; u < NW; u++) {
            v0[u] = vg[u];
            v1[u] = vg8[u];
        }
        return lp < n_full ? 16 : len - 16 * n_full;
    };
    /* One page of K/V (rows g and g+8 of this lane) -> online softmax + O update. Rows past
     * a partial page's length are masked in S and zeroed in V (never-written slots may
     * hold anything, and 0 * NaN is NaN). */
    auto consume = [&](uint4 *K0, uint4 *K1, uint4 *V0, uint4 *V1, int32_t valid, int32_t idx) {
        (void)idx; /* the page (dense: list entry = page), for the rows mode's masks */
        if (valid < 16) {
#pragma unroll
            for (int u = 0; u < NW; u++) {
                if (g >= valid) V0[u] = make_uint4(0, 0, 0, 0);
                if (g + 8 >= valid) V1[u] = make_uint4(0, 0, 0, 0);
            }
        }
        float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int u = 0; u < NW; u++) {
            mma_op<T>::run(s0, qa[2 * u], K0[u].x, K0[u].y);
            mma_op<T>::run(s0, qa[2 * u + 1], K0[u].z, K0[u].w);
            mma_op<T>::run(s1, qa[2 * u], K1[u].x, K1[u].y);
            mma_op<T>::run(s1, qa[2 * u + 1], K1[u].z, K1[u].w);
        }
        /* s0: tokens 2t, 2t+1; s1: tokens 8+2t, 9+2t; [0,1] row g, [2,3] row g+8 */
        if constexpr (MR) { /* each row to its own length */
            const int32_t vA = min(max(lenA - 16 * idx, 0), 16), vB = min(max(lenB - 16 * idx, 0), 16);
            if (2 * t >= vA) s0[0] = -INFINITY;
            if (2 * t + 1 >= vA) s0[1] = -INFINITY;
            if (8 + 2 * t >= vA) s1[0] = -INFINITY;
            if (9 + 2 * t >= vA) s1[1] = -INFINITY;
            if (2 * t >= vB) s0[2] = -INFINITY;
            if (2 * t + 1 >= vB) s0[3] = -INFINITY;
            if (8 + 2 * t >= vB) s1[2] = -INFINITY;
            if (9 + 2 * t >= vB) s1[3] = -INFINITY;
        } else if (valid < 16) {
            if (2 * t >= valid) s0[0] = s0[2] = -INFINITY;
            if (2 * t + 1 >= valid) s0[1] = s0[3] = -INFINITY;
            if (8 + 2 * t >= valid) s1[0] = s1[2] = -INFINITY;
            if (9 + 2 * t >= valid) s1[1] = s1[3] = -INFINITY;
        }
        float mx0 = fmaxf(fmaxf(s0[0], s0[1]), fmaxf(s1[0], s1[1]));
        float mx1 = fmaxf(fmaxf(s0[2], s0[3]), fmaxf(s1[2], s1[3]));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        /* rows mode: a row that has seen no key yet (-inf) stays at zero (decode never
         * visits those pages; -inf - -inf would be NaN) */
        float b0 = n0, b1 = n1;
        if constexpr (MR) {
            if (n0 == -INFINITY) b0 = 0.f;
            if (n1 == -INFINITY) b1 = 0.f;
        }
        const float al0 = exp2f(m0 - b0), al1 = exp2f(m1 - b1);
        m0 = n0;
        m1 = n1;
        const float p00 = exp2f(s0[0] - b0), p01 = exp2f(s0[1] - b0), p02 = exp2f(s1[0] - b0), p03 = exp2f(s1[1] - b0);
        const float p10 = exp2f(s0[2] - b1), p11 = exp2f(s0[3] - b1), p12 = exp2f(s1[2] - b1), p13 = exp2f(s1[3] - b1);
        l0 = l0 * al0 + (p00 + p01 + p02 + p03);
        l1 = l1 * al1 + (p10 + p11 + p12 + p13);
        typedef typename kv_traits<T>::T2 T2;
        T2 pp[4] = {kv_traits<T>::pack(p00, p01), kv_traits<T>::pack(p10, p11), kv_traits<T>::pack(p02, p03),
                    kv_traits<T>::pack(p12, p13)};
        uint32_t pa[4];
#pragma unroll
        for (int z = 0; z < 4; z++) pa[z] = *reinterpret_cast<uint32_t *>(&pp[z]);
#pragma unroll
        for (int x = 0; x < NT; x++) {
            o[x][0] *= al0;
            o[x][1] *= al0;
            o[x][2] *= al1;
            o[x][3] *= al1;
        }
#pragma unroll
        for (int u = 0; u < NW; u++) {
            const uint32_t a0[4] = {V0[u].x, V0[u].y, V0[u].z, V0[u].w};
            const uint32_t a1[4] = {V1[u].x, V1[u].y, V1[u].z, V1[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                mma_op<T>::run(o[4 * u + e], pa, movmatrix_trans(a0[e]), movmatrix_trans(a1[e]));
        }
    };

    if constexpr (ASYNC) {
        /* d = 128: a ring of ATT_STAGES pages per warp in shared memory, filled with
         * cp.async two pages ahead; 16-byte chunks swizzled so the fragment reads are
         * conflict-free (chunk c of row r at c ^ 2 (c >> 3 & 1) ^ (r & 1)) */
        uint16_t *wst = reinterpret_cast<uint16_t *>(smem_raw) + (size_t)warp * ATT_STAGES * 2 * 16 * D;
        auto swz = [](int c, int r) { return c ^ (((c >> 3) & 1) << 1) ^ (r & 1); };
        auto issue = [&](int32_t i, int st) -> int32_t {
            if (i >= end) return 0;
            const int32_t lp = dense ? i : (i == i0 ? lp0 : lst[i]);
            if (lp < 0 || lp >= n_tot) return 0; /* invalid entry (caller's list): skipped */
            const size_t blk = (size_t)bt[lp] * ld.page + (size_t)h * ld.head;
            uint16_t *kd = wst + (size_t)st * 2 * 16 * D, *vd = kd + 16 * D;
#pragma unroll
            for (int m = 0; m < 16 * D / 8 / 32; m++) {
                const int q = lane + 32 * m, r = q / (D / 8), c = q % (D / 8);
                const int off = r * D + swz(c, r) * 8;
                const size_t src = blk + (size_t)r * ld.tok + (size_t)c * 8;
                cp_async16(kd + off, kpool + src);
                cp_async16(vd + off, vpool + src);
            }
            return lp < n_full ? 16 : len - 16 * n_full;
        };
        int32_t va = issue(begin + warp, 0);
        cp_async_commit();
        int32_t vb = issue(begin + warp + ATT_WARPS, 1);
        cp_async_commit();
        int k = 0;
        for (int32_t idx = begin + warp; idx < end; idx += ATT_WARPS, k++) {
            const int32_t vc = issue(idx + 2 * ATT_WARPS, (k + 2) % ATT_STAGES);
            cp_async_commit();
            cp_async_wait<2>();
            __syncwarp();
            const int32_t valid = va;
            va = vb;
            vb = vc;
            if (valid > 0) {
                const uint16_t *kd = wst + (size_t)(k % ATT_STAGES) * 2 * 16 * D, *vd = kd + 16 * D;
                uint4 K0[NW], K1[NW], V0[NW], V1[NW];
#pragma unroll
                for (int u = 0; u < NW; u++) {
                    const int c = t * NW + u;
                    K0[u] = *reinterpret_cast<const uint4 *>(kd + g * D + swz(c, g) * 8);
                    K1[u] = *reinterpret_cast<const uint4 *>(kd + (g + 8) * D + swz(c, g + 8) * 8);
                    V0[u] = *reinterpret_cast<const uint4 *>(vd + g * D + swz(c, g) * 8);
                    V1[u] = *reinterpret_cast<const uint4 *>(vd + (g + 8) * D + swz(c, g + 8) * 8);
                }
                consume(K0, K1, V0, V1, valid, idx);
            }
            __syncwarp(); /* the slot is refilled next iteration */
        }
        cp_async_wait<0>();
        __syncthreads(); /* the merge below reuses the stages' shared memory */
    } else {
        /* the next page's K/V are loaded (into registers) while this one is computed */
        (void)lp0; /* (used by the shared-memory ring only) */
        constexpr bool PF = D <= 128;
        uint4 nK0[NW], nK1[NW], nV0[NW], nV1[NW];
        int32_t nvalid = 0;
        if constexpr (PF) nvalid = load(begin + warp, nK0, nK1, nV0, nV1);
        for (int32_t idx = begin + warp; idx < end; idx += ATT_WARPS) {
            uint4 K0[NW], K1[NW], V0[NW], V1[NW];
            int32_t valid;
            if constexpr (PF) {
#pragma unroll
                for (int u = 0; u < NW; u++) {
                    K0[u] = nK0[u];
                    K1[u] = nK1[u];
                    V0[u] = nV0[u];
                    V1[u] = nV1[u];
                }
                valid = nvalid;
                nvalid = load(idx + ATT_WARPS, nK0, nK1, nV0, nV1);
            } else {
                valid = load(idx, K0, K1, V0, V1);
            }
            if (valid > 0) consume(K0, K1, V0, V1, valid, idx);
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    /* block merge */
    /* (the merge buffer's rows: the G heads, or in rows mode the TR tile rows) */
    if (liveA) {
        float *dst = so + ((size_t)warp * TR + g) * D + t * DL;
#pragma unroll
        for (int x = 0; x < NT; x++) *reinterpret_cast<float2 *>(dst + 2 * x) = make_float2(o[x][0], o[x][1]);
        if (t == 0) sml[warp * TR + g] = make_float2(m0, l0);
    }
    if (liveB) {
        float *dst = so + ((size_t)warp * TR + g + 8) * D + t * DL;
#pragma unroll
        for (int x = 0; x < NT; x++) *reinterpret_cast<float2 *>(dst + 2 * x) = make_float2(o[x][2], o[x][3]);
        if (t == 0) sml[warp * TR + g + 8] = make_float2(m1, l1);
    }
    __syncthreads();
    const size_t pbase = ((size_t)seg * max_splits + split) * G;
    for (int i = threadIdx.x; i < TR * D; i += ATT_WARPS * 32) {
        const int hh = i / D, dim = i % D;
        /* the partial's index: (segment, split, head); rows mode: segment = row x KV heads */
        size_t pi = pbase + hh;
        if constexpr (MR) {
            const int32_t r = tile * rpt + hh / G;
            if (r >= mr_rows) continue;
            pi = ((size_t)(r * hkv + h) * max_splits + split) * G + hh % G;
        }
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sml[w * TR + hh].x);
        float acc = 0.f, L = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < ATT_WARPS; w++) {
                const float2 ml = sml[w * TR + hh];
                const float f = exp2f(ml.x - M);
                acc += f * so[((size_t)w * TR + hh) * D + dim];
                L += f * ml.y;
            }
        }
        part_o[pi * D + dim] = acc;
        if (dim == 0) part_ml[pi] = make_float2(M, L);
    }
}

/* One block per (segment, query head of the group): combine the splits. The split
 * weights exp2(m_i - M) go through shared memory; then each warp sums a strided subset
 * of the splits for all dimensions (16-byte loads) and the warps' partial sums are
 * added in shared memory. */
static __global__ void __launch_bounds__(MERGE_THREADS)
merge_kernel(const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len, int32_t hkv, int32_t G,
             int32_t D, const int32_t *__restrict__ list_n, int dense, int32_t pps,
             const float *__restrict__ part_o, const float2 *__restrict__ part_ml, int32_t max_splits, int32_t hq,
             float *__restrict__ out, float *__restrict__ lse) {
    constexpr int NWARP = MERGE_THREADS / 32;
    __shared__ float wgt[ATT_MAX_SPLITS];
    __shared__ __align__(16) float part[NWARP][LOCKS_MAX_HEAD_DIM];
    __shared__ float red[NWARP];
    __shared__ float s_m, s_l;
    const int32_t seg = blockIdx.y, hh = blockIdx.x;
    const int32_t s = seg / hkv, h = seg % hkv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t len = seq_len[seq_slots[s]];
    pdl_wait(); /* the partials of attend_kernel */
    pdl_trigger();
    const int32_t count = dense ? (len + 15) / 16 : list_n[seg];
    const int32_t ns = min((count + pps - 1) / pps, max_splits);
    const size_t pb = (size_t)seg * max_splits * G;
    float m = -INFINITY;
    for (int32_t i = threadIdx.x; i < ns; i += MERGE_THREADS) m = fmaxf(m, part_ml[pb + (size_t)i * G + hh].x);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float x = red[0];
        for (int w = 1; w < NWARP; w++) x = fmaxf(x, red[w]);
        s_m = x;
    }
    __syncthreads();
    const float M = s_m;
    float l = 0.f;
    for (int32_t i = threadIdx.x; i < ns; i += MERGE_THREADS) {
        const float2 ml = part_ml[pb + (size_t)i * G + hh];
        const float w = ml.x == -INFINITY ? 0.f : exp2f(ml.x - M);
        wgt[i] = w;
        l += w * ml.y;
    }
    l = warp_sum(l);
    __syncthreads();
    if (lane == 0) red[warp] = l;
    __syncthreads();
    if (threadIdx.x == 0) {
        float x = 0.f;
        for (int w = 0; w < NWARP; w++) x += red[w];
        s_l = x;
    }
    __syncthreads();
    const float L = s_l, inv = L > 0.f ? 1.f / L : 0.f;
    for (int d0 = 4 * lane; d0 < D; d0 += 128) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
        for (int32_t i = warp; i < ns; i += NWARP) {
            const float w = wgt[i];
            const float4 x = *reinterpret_cast<const float4 *>(part_o + (pb + (size_t)i * G + hh) * D + d0);
            acc.x += w * x.x;
            acc.y += w * x.y;
            acc.z += w * x.z;
            acc.w += w * x.w;
        }
        *reinterpret_cast<float4 *>(&part[warp][d0]) = acc;
    }
    __syncthreads();
    float *dst = out + ((size_t)s * hq + h * G + hh) * D;
    for (int dim = threadIdx.x; dim < D; dim += MERGE_THREADS) {
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < NWARP; w++) acc += part[w][dim];
        dst[dim] = acc * inv;
    }
    if (lse && threadIdx.x == 0) lse[(size_t)s * hq + h * G + hh] = (M + log2f(L)) * 0.6931471805599453f;
}

/* Dynamic shared memory: the block merge ([warps][G][d] floats + (max, sum) pairs), and
 * for d = 128 the K/V page ring it aliases. */
template <int D> static size_t attend_smem(int32_t G) {
    const size_t merge = (size_t)ATT_WARPS * G * D * sizeof(float) + (size_t)ATT_WARPS * G * sizeof(float2);
    const size_t ring = D == 128 ? (size_t)ATT_WARPS * ATT_STAGES * 2 * 16 * D * sizeof(uint16_t) : 0;
    return merge > ring ? merge : ring;
}

static int32_t attend_pps(const locks_cuda_cache *c, int32_t n_seqs, int32_t max_list) {
    const int32_t segs = n_seqs * c->p.n_kv_heads;
    /* about one wave of resident blocks (2 per SM at ~250 registers), each warp several
     * pages so the prefetch pays; the merge reads every split */
    int32_t splits = c->n_sm * ATT_BLOCKS_PER_SM / segs; /* floor: no partial second wave */
    if (splits > ATT_MAX_SPLITS) splits = ATT_MAX_SPLITS;
    if (splits < 1) splits = 1;
    int32_t pps = (max_list + splits - 1) / splits;
    pps = (pps + ATT_WARPS - 1) / ATT_WARPS * ATT_WARPS;
    if (pps < ATT_WARPS) pps = ATT_WARPS;
    if (pps < c->ws.att_min_pps) pps = (c->ws.att_min_pps + ATT_WARPS - 1) / ATT_WARPS * ATT_WARPS;
    while ((max_list + pps - 1) / pps > ATT_MAX_SPLITS) pps += ATT_WARPS;
    return pps;
}

template <int D, typename T>
static locks_status attend_launch_t(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t hq,
                                    const int32_t *pages, const int32_t *n_pages, int32_t list_stride, int dense,
                                    int32_t max_list, float *out, float *lse, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    const int32_t pps = attend_pps(c, n_seqs, max_list);
    const int32_t splits = (max_list + pps - 1) / pps;
    if (splits > c->ws.max_splits) return LOCKS_ERR_INVALID_ARG;
    const size_t smem = attend_smem<D>(G);
    /* the dynamic shared memory limit was raised by locks_cuda_attend_prepare */
    dim3 grid((unsigned)splits, (unsigned)(n_seqs * hkv));
    CU_TRY(launch_k(c->ws.pdl, attend_kernel<D, T>, grid, dim3(ATT_WARPS * 32), smem, st,
                    cache_layer_k(c, layer), cache_layer_v(c, layer), cache_strides(c),
                    (const int32_t *)c->ws.seq_slots, (const int32_t *)c->seq_len,
                    (const int32_t *)c->block_table, c->p.n_pages, hkv, G, (const uint16_t *)c->ws.q_attn, hq,
                    pages, n_pages, list_stride, dense, pps, c->ws.part_o, c->ws.part_ml, c->ws.max_splits, 0, 0));
    dim3 mgrid((unsigned)G, (unsigned)(n_seqs * hkv));
    CU_TRY(launch_k(c->ws.pdl, merge_kernel, mgrid, dim3(MERGE_THREADS), 0, st, (const int32_t *)c->ws.seq_slots,
                    (const int32_t *)c->seq_len, hkv, G, (int32_t)D, n_pages, dense, pps,
                    (const float *)c->ws.part_o, (const float2 *)c->ws.part_ml, c->ws.max_splits, hq, out, lse));
    return LOCKS_OK;
}

template <int D, typename T> static locks_status attend_prepare_t(void) {
    const size_t smem = attend_smem<D>(LOCKS_CUDA_MAX_GROUP); /* also the rows mode's 16 tile rows */
    CU_TRY(cudaFuncSetAttribute(attend_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CU_TRY(cudaFuncSetAttribute(attend_kernel<D, T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return LOCKS_OK;
}

/* Raises the attention kernels' shared-memory limit once (not allowed inside a graph
 * capture on every driver, so it happens when the workspace is made). */
locks_status locks_cuda_attend_prepare(locks_cuda_cache *c) {
    const bool bf = c->p.kv_dtype == LOCKS_DTYPE_BF16;
    switch (c->p.head_dim) {
    case 64: return bf ? attend_prepare_t<64, __nv_bfloat16>() : attend_prepare_t<64, __half>();
    case 128: return bf ? attend_prepare_t<128, __nv_bfloat16>() : attend_prepare_t<128, __half>();
    case 256: return bf ? attend_prepare_t<256, __nv_bfloat16>() : attend_prepare_t<256, __half>();
    default: return LOCKS_ERR_UNSUPPORTED;
    }
}

locks_status locks_cuda_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t hq,
                                      const int32_t *pages, const int32_t *n_pages, int32_t list_stride, int dense,
                                      int32_t max_list, float *out, float *lse, cudaStream_t st) {
    const bool bf = c->p.kv_dtype == LOCKS_DTYPE_BF16;
    switch (c->p.head_dim) {
    case 64:
        return bf ? attend_launch_t<64, __nv_bfloat16>(c, layer, n_seqs, hq, pages, n_pages, list_stride, dense, max_list, out, lse, st)
                  : attend_launch_t<64, __half>(c, layer, n_seqs, hq, pages, n_pages, list_stride, dense, max_list, out, lse, st);
    case 128:
        return bf ? attend_launch_t<128, __nv_bfloat16>(c, layer, n_seqs, hq, pages, n_pages, list_stride, dense, max_list, out, lse, st)
                  : attend_launch_t<128, __half>(c, layer, n_seqs, hq, pages, n_pages, list_stride, dense, max_list, out, lse, st);
    case 256:
        return bf ? attend_launch_t<256, __nv_bfloat16>(c, layer, n_seqs, hq, pages, n_pages, list_stride, dense, max_list, out, lse, st)
                  : attend_launch_t<256, __half>(c, layer, n_seqs, hq, pages, n_pages, list_stride, dense, max_list, out, lse, st);
    default: return LOCKS_ERR_UNSUPPORTED;
    }
}

/* ---- rows mode: the decode attention of several query rows of one sequence ---------------- */

/* Splits the decode kernel makes for max_list pages (its pps), the rows mode's partial stride. */
int32_t locks_cuda_attend_rows_splits(const locks_cuda_cache *c, int32_t n_seqs, int32_t max_list) {
    const int32_t pps = attend_pps(c, n_seqs, max_list);
    return (max_list + pps - 1) / pps;
}

template <int D, typename T>
static locks_status attend_rows_t(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t max_list, int32_t hq,
                                  const uint16_t *q_attn, int32_t rows, int32_t len0, const int32_t *d_slot,
                                  const int32_t *d_ident, const int32_t *d_lens, float *part_o, float2 *part_ml,
                                  float *out, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    const int32_t pps = attend_pps(c, n_seqs, max_list), stride = (max_list + pps - 1) / pps;
    const int32_t count = (len0 + rows - 1 + 15) / 16; /* pages of the longest row */
    const int32_t splits = (count + pps - 1) / pps, rpt = 16 / G, tiles = (rows + rpt - 1) / rpt;
    const size_t smem = attend_smem<D>(16);
    dim3 grid((unsigned)(splits * tiles), (unsigned)hkv);
    CU_TRY(launch_k(0, attend_kernel<D, T, true>, grid, dim3(ATT_WARPS * 32), smem, st, cache_layer_k(c, layer),
                    cache_layer_v(c, layer), cache_strides(c), d_slot, (const int32_t *)c->seq_len,
                    (const int32_t *)c->block_table, c->p.n_pages, hkv, G, q_attn, hq, (const int32_t *)NULL,
                    (const int32_t *)NULL, 0, 1, pps, part_o, part_ml, stride, len0, rows));
    /* the decode's merge, each row a "sequence" of its own length (d_ident -> d_lens) */
    dim3 mgrid((unsigned)G, (unsigned)(rows * hkv));
    CU_TRY(launch_k(0, merge_kernel, mgrid, dim3(MERGE_THREADS), 0, st, d_ident, d_lens, hkv, G, (int32_t)D,
                    (const int32_t *)NULL, 1, pps, (const float *)part_o, (const float2 *)part_ml, stride, hq, out,
                    (float *)NULL));
    return LOCKS_OK;
}

locks_status locks_cuda_attend_rows_launch(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t max_list,
                                           int32_t hq, const uint16_t *q_attn, int32_t rows, int32_t len0,
                                           const int32_t *d_slot, const int32_t *d_ident, const int32_t *d_lens,
                                           float *part_o, float2 *part_ml, float *out, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads;
    if (rows < 1 || len0 < 1 || n_seqs < 1 || hq % hkv != 0 || hq / hkv > 16 ||
        (int64_t)len0 + rows - 1 > (int64_t)max_list * 16)
        return LOCKS_ERR_INVALID_ARG;
    const bool bf = c->p.kv_dtype == LOCKS_DTYPE_BF16;
#define ROWS_ARGS c, layer, n_seqs, max_list, hq, q_attn, rows, len0, d_slot, d_ident, d_lens, part_o, part_ml, out, st
    switch (c->p.head_dim) {
    case 64: return bf ? attend_rows_t<64, __nv_bfloat16>(ROWS_ARGS) : attend_rows_t<64, __half>(ROWS_ARGS);
    case 128: return bf ? attend_rows_t<128, __nv_bfloat16>(ROWS_ARGS) : attend_rows_t<128, __half>(ROWS_ARGS);
    case 256: return bf ? attend_rows_t<256, __nv_bfloat16>(ROWS_ARGS) : attend_rows_t<256, __half>(ROWS_ARGS);
    default: return LOCKS_ERR_UNSUPPORTED;
    }
#undef ROWS_ARGS
}
