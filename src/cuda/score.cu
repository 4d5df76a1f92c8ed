/*
 * score.cu — LOCKS page scores from the quantized summaries, on the tensor cores.
 * Two kernels: score_i8_kernel (below, integer MMAs) for every group G <= 16 (G 9..16
 * in two column tiles of 8 heads, one per block), and this fp16 one, kept for A/B runs
 * (the lab switch score_i8_g16 = 0 sends G 9..16 here; it was their kernel before issue 12).
 * Both take quantized summaries of rank <= 8 (8 rank slots); ranks 9..15 and fp32
 * summaries go to the plain fp32 kernel score_gen_kernel (near the end).
 * Both zero the segment's radix histogram for mass.cu (the step's memset node before)
 * and read the queries only after pdl_wait() (common.cuh), so the first summary copies
 * are in flight while qprep runs.
 *
 * One warp scores 8 pages at a time for all G query heads of its KV head, so each
 * summary is read once per group. Per page (rows = query heads, padded to 16):
 *   b = Q V^T        m16n8k16 x d/16, B = int4 basis rows (exact in fp16), n = 8 slots
 *   z = (b * sV * sC) C^T + Q mu * smu     m16n8k8 x 2 (the 16 tokens), C int8 exact
 *   s_hj = log sum_i exp(scale * |q|max * z_hi)
 * and Q mu for the 8 pages of the batch is one more m16n8k16 x d/16 with the 8 pages'
 * mu as the n columns. Queries arrive in fp16 divided by their max |q| (qprep.cu), so
 * the only rounding beyond the CPU's fp32 is the fp16 query and the fp16 b.
 * Outputs: scores[seg][j][G] (natural log) and per-block (max, sum exp) partials of
 * each head's normaliser Z_h (the first pass of the two-pass normaliser, mass.cu is
 * the second).
 *
 * Lane (g, t) = (lane / 4, lane % 4) owns the d/4 dimensions [t d/4, (t+1) d/4): within
 * them, 32-bit word i of the packed int4 basis row holds local dims 8i..8i+7 and the
 * k-chunk pair (2i, 2i+1) uses them as chunk 2i: (8i, 8i+4 | 8i+1, 8i+5), chunk 2i+1:
 * (8i+2, 8i+6 | 8i+3, 8i+7) — the order the nibble unpacking produces. Queries and
 * mu (int8, via byte_perm) are laid out the same way.
 */
#include "common.cuh"

#include <cstddef>

#ifndef SCORE_WARPS /* (overridable for pipeline-shape experiments: -DSCORE_WARPS=...) */
#define SCORE_WARPS 4 /* warps per block */
#endif
#define SCORE_BATCH 8 /* pages per warp iteration (the n of the mu MMA) */
#ifndef SCORE_STAGES
#define SCORE_STAGES 2 /* cp.async pipeline depth per warp (batches) */
#endif
#ifndef SCORE_BLOCKS_PER_SM
#define SCORE_BLOCKS_PER_SM 4 /* resident blocks per SM (shared memory: stages) */
#endif

/* Zeroes the segment's first-digit histogram and counters for mass.cu / the top-k (this
 * block's stripe; the step's memset node before). Called after pdl_wait(). */
static __device__ __forceinline__ void zero_hist(uint32_t *hist, int32_t seg) {
    uint32_t *hs = hist + (size_t)seg * LOCKS_CUDA_HIST_STRIDE;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < LOCKS_CUDA_HIST_STRIDE; i += gridDim.x * blockDim.x)
        hs[i] = 0;
}

/* One pipeline stage of a warp: the summaries of SCORE_BATCH pages, copied with
 * cp.async (16-byte pieces; the 2-byte mu scale as the aligned 4-byte word holding it). */
template <int D> struct __align__(16) score_stage {
    uint8_t v[SCORE_BATCH][LOCKS_CUDA_MAX_RANK * D / 2];
    int8_t c[SCORE_BATCH][16 * LOCKS_CUDA_MAX_RANK];
    int8_t mu[SCORE_BATCH][D];
    __half bs[SCORE_BATCH][LOCKS_CUDA_MAX_RANK];
    __half cs[SCORE_BATCH][LOCKS_CUDA_MAX_RANK];
    uint32_t msw[SCORE_BATCH]; /* word holding the mu scale */
    int32_t hi[SCORE_BATCH];   /* which half of msw; -1: no page */
};

/* Issues the copies of one batch (pages p of lanes 0..7, -1 = none) into stage st. The
 * arrays are already offset to this (layer, KV head), so page offsets fit 32 bits. */
template <int D>
static __device__ __forceinline__ void score_issue(score_stage<D> &st, int32_t my_p, int lane, const int8_t *mu_q,
                                                   const __half *mu_s, const uint8_t *basis_q, const __half *basis_s,
                                                   const int8_t *coef_q, const __half *coef_s) {
    constexpr int VB = LOCKS_CUDA_MAX_RANK * D / 2; /* basis bytes per page */
    constexpr int VCH = VB / 16;                    /* 16-byte pieces of one page's basis */
    constexpr int MCH = D / 16;
#pragma unroll
    for (int k = 0; k < SCORE_BATCH * VCH / 32; k++) {
        const int ch = lane + 32 * k, i = ch / VCH, o = ch % VCH;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i);
        if (p >= 0) cp_async16(&st.v[i][16 * o], basis_q + ((uint32_t)p * VB + 16u * o));
    }
#pragma unroll
    for (int k = 0; k < SCORE_BATCH * 8 / 32; k++) {
        const int ch = lane + 32 * k, i = ch / 8, o = ch % 8;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i);
        if (p >= 0) cp_async16(&st.c[i][16 * o], coef_q + ((uint32_t)p * (16 * LOCKS_CUDA_MAX_RANK) + 16u * o));
    }
#pragma unroll
    for (int k = 0; k < (SCORE_BATCH * MCH + 31) / 32; k++) {
        const int ch = lane + 32 * k, i = ch / MCH, o = ch % MCH;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i < SCORE_BATCH ? i : 0);
        if (ch < SCORE_BATCH * MCH && p >= 0) cp_async16(&st.mu[i][16 * o], mu_q + ((uint32_t)p * D + 16u * o));
    }
    {
        const int i = lane & 7;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i);
        if (p >= 0) {
            if (lane < 8) cp_async16(&st.bs[i][0], basis_s + (uint32_t)p * LOCKS_CUDA_MAX_RANK);
            else if (lane < 16) cp_async16(&st.cs[i][0], coef_s + (uint32_t)p * LOCKS_CUDA_MAX_RANK);
            else if (lane < 24) {
                const uintptr_t a = (uintptr_t)(mu_s + p);
                cp_async4(&st.msw[i], (const void *)(a & ~(uintptr_t)3));
            }
        }
        if (lane < 8) st.hi[i] = p < 0 ? -1 : (int32_t)(((uintptr_t)(mu_s + (p < 0 ? 0 : p)) >> 1) & 1);
    }
}

/* The pages one warp of a score kernel scores: its sequence's full pages (n_full) and
 * block-table row (bt), and the warp's batches of SCORE_BATCH pages b0, b0 + bstride, ...
 * (my_n of them). */
struct score_walk {
    const int32_t *bt;
    int32_t npool, n_full, b0, bstride, my_n;
    /* lane i < SCORE_BATCH: physical page i of the warp's k-th batch, -1 past the end */
    __device__ __forceinline__ int32_t page_of(int32_t k, int lane) const {
        const int32_t j = (b0 + k * bstride) * SCORE_BATCH + lane;
        /* the block-table load does not wait for the length (one DRAM round trip less) */
        const int32_t pj = lane < SCORE_BATCH && j < npool ? bt[j] : -1;
        return k < my_n && j < n_full ? pj : -1;
    }
};

/* The score kernels' common prologue for segment (s, h), warp `warp` of block bx of nbx
 * along x: the sequence's length and block-table row, the summary arrays moved to KV head
 * h's physical page 0 (so page offsets fit 32 bits), and the warp's batches. */
template <int D>
static __device__ __forceinline__ score_walk
score_walk_init(int32_t s, int32_t h, int32_t bx, int32_t nbx, int warp, const int32_t *__restrict__ seq_slots,
                const int32_t *__restrict__ seq_len, const int32_t *__restrict__ block_table, int32_t npool,
                const int8_t *__restrict__ &mu_q, const __half *__restrict__ &mu_s,
                const uint8_t *__restrict__ &basis_q, const __half *__restrict__ &basis_s,
                const int8_t *__restrict__ &coef_q, const __half *__restrict__ &coef_s) {
    score_walk w;
    const int32_t slot = seq_slots[s];
    w.npool = npool;
    w.n_full = seq_len[slot] / 16;
    w.bt = block_table + (size_t)slot * npool;
    const size_t sbase = (size_t)h * npool; /* summary index of physical page 0 */
    mu_q += sbase * D;
    mu_s += sbase;
    basis_q += sbase * (LOCKS_CUDA_MAX_RANK * D / 2);
    basis_s += sbase * LOCKS_CUDA_MAX_RANK;
    coef_q += sbase * (16 * LOCKS_CUDA_MAX_RANK);
    coef_s += sbase * LOCKS_CUDA_MAX_RANK;
    const int32_t n_batch = (w.n_full + SCORE_BATCH - 1) / SCORE_BATCH;
    w.b0 = bx * SCORE_WARPS + warp, w.bstride = nbx * SCORE_WARPS;
    w.my_n = w.b0 < n_batch ? (n_batch - w.b0 + w.bstride - 1) / w.bstride : 0;
    return w;
}

template <int D>
static __global__ void __launch_bounds__(SCORE_WARPS * 32)
score_kernel(const int8_t *__restrict__ mu_q, const __half *__restrict__ mu_s,
             const uint8_t *__restrict__ basis_q, const __half *__restrict__ basis_s,
             const int8_t *__restrict__ coef_q, const __half *__restrict__ coef_s,
             const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len,
             const int32_t *__restrict__ block_table, int32_t npool, int32_t hkv, int32_t G,
             float scale, const __half *__restrict__ q_score, const float *__restrict__ q_amax,
             int32_t hq, float *__restrict__ scores, int32_t score_stride, float2 *__restrict__ lse_part,
             uint32_t *__restrict__ hist) {
    constexpr int DL = D / 4;   /* dims per lane */
    constexpr int NC = D / 16;  /* k-chunks */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float2 red[SCORE_WARPS][LOCKS_CUDA_MAX_GROUP];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    score_stage<D> *stages = reinterpret_cast<score_stage<D> *>(smem_raw) + warp * SCORE_STAGES;
    const int g = lane >> 2, t = lane & 3;
    const int32_t seg = blockIdx.y;
    const int32_t s = seg / hkv, h = seg % hkv;
    const score_walk w = score_walk_init<D>(s, h, blockIdx.x, gridDim.x, warp, seq_slots, seq_len, block_table, npool,
                                            mu_q, mu_s, basis_q, basis_s, coef_q, coef_s);
    const int32_t n_full = w.n_full, b0 = w.b0, bstride = w.bstride, my_n = w.my_n;
    auto page_of = [&](int32_t k) -> int32_t { return w.page_of(k, lane); };
    /* prologue: stages 0 .. SCORE_STAGES-2 in flight, the block table one batch further */
#pragma unroll
    for (int k = 0; k < SCORE_STAGES - 1; k++) {
        score_issue<D>(stages[k], page_of(k), lane, mu_q, mu_s, basis_q, basis_s, coef_q, coef_s);
        cp_async_commit();
    }
    int32_t next_p = page_of(SCORE_STAGES - 1);
    pdl_wait(); /* the queries of qprep; the summary copies above are already in flight */
    zero_hist(hist, seg);

    /* query fragments (rows g and g+8 of the group) */
    uint32_t qa[NC][4];
    {
        const int r0 = h * G + g, r1 = h * G + g + 8;
        const __half *q0 = q_score + ((size_t)s * hq + r0) * D + t * DL;
        const __half *q1 = q_score + ((size_t)s * hq + r1) * D + t * DL;
#pragma unroll
        for (int i = 0; i < D / 32; i++) {
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const int c = 2 * i + b, l0 = 8 * i + 2 * b;
                const __half z = __float2half_rn(0.f);
                const __half a0 = g < G ? q0[l0] : z, a4 = g < G ? q0[l0 + 4] : z;
                const __half a1 = g < G ? q0[l0 + 1] : z, a5 = g < G ? q0[l0 + 5] : z;
                const __half c0 = g + 8 < G ? q1[l0] : z, c4 = g + 8 < G ? q1[l0 + 4] : z;
                const __half c1 = g + 8 < G ? q1[l0 + 1] : z, c5 = g + 8 < G ? q1[l0 + 5] : z;
                qa[c][0] = h2_as_u32(__halves2half2(a0, a4));
                qa[c][1] = h2_as_u32(__halves2half2(c0, c4));
                qa[c][2] = h2_as_u32(__halves2half2(a1, a5));
                qa[c][3] = h2_as_u32(__halves2half2(c1, c5));
            }
        }
    }
    constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
    const float mul_g = g < G ? scale * LOG2E * q_amax[(size_t)s * hq + h * G + g] : 0.f;
    const float mul_g8 = g + 8 < G ? scale * LOG2E * q_amax[(size_t)s * hq + h * G + g + 8] : 0.f;
    float2 run_g = make_float2(-INFINITY, 0.f), run_g8 = make_float2(-INFINITY, 0.f);
    float *sc_out = scores + (size_t)seg * score_stride * G;

    for (int32_t k = 0; k < my_n; k++) {
        /* keep SCORE_STAGES - 1 batches in flight */
        score_issue<D>(stages[(k + SCORE_STAGES - 1) % SCORE_STAGES], next_p, lane, mu_q, mu_s, basis_q, basis_s,
                       coef_q, coef_s);
        cp_async_commit();
        next_p = page_of(k + SCORE_STAGES);
        cp_async_wait<SCORE_STAGES - 1>();
        __syncwarp();
        const score_stage<D> &st = stages[k % SCORE_STAGES];
        const int32_t j0 = (b0 + k * bstride) * SCORE_BATCH;
        float *sc_row = sc_out + (size_t)j0 * G + g; /* page j0 + i, head g: sc_row[i * G] */

        /* Q mu for the 8 pages: rows heads, columns pages (lane's B column: page g) */
        float am[4] = {0.f, 0.f, 0.f, 0.f};
        {
            const uint4 *mrow = reinterpret_cast<const uint4 *>(&st.mu[g][t * DL]);
            uint32_t mw[D / 16];
#pragma unroll
            for (int u = 0; u < D / 64; u++) {
                const uint4 w = mrow[u];
                mw[4 * u] = w.x;
                mw[4 * u + 1] = w.y;
                mw[4 * u + 2] = w.z;
                mw[4 * u + 3] = w.w;
            }
#pragma unroll
            for (int i = 0; i < D / 32; i++) {
                const uint32_t w0 = mw[2 * i], w1 = mw[2 * i + 1];
                mma16816_f16(am, qa[2 * i], int8x2_to_h2(__byte_perm(w0, w1, 0x0400), 0),
                             int8x2_to_h2(__byte_perm(w0, w1, 0x0501), 0));
                mma16816_f16(am, qa[2 * i + 1], int8x2_to_h2(__byte_perm(w0, w1, 0x0602), 0),
                             int8x2_to_h2(__byte_perm(w0, w1, 0x0703), 0));
            }
            float ms0 = 0.f, ms1 = 0.f;
            const int32_t h0 = st.hi[2 * t], h1 = st.hi[2 * t + 1];
            if (h0 >= 0) ms0 = __half2float(__ushort_as_half((unsigned short)(st.msw[2 * t] >> (16 * h0))));
            if (h1 >= 0) ms1 = __half2float(__ushort_as_half((unsigned short)(st.msw[2 * t + 1] >> (16 * h1))));
            am[0] *= ms0;
            am[1] *= ms1;
            am[2] *= ms0;
            am[3] *= ms1;
        }
        /* the 8 pages are independent (no early exit) so the compiler can interleave them;
         * rows g+8 exist only for groups > 8 (uniform branch) */
        const bool two_rows = G > 8;
        float lse_a[SCORE_BATCH], lse_b[SCORE_BATCH];
#pragma unroll
        for (int i = 0; i < SCORE_BATCH; i++) {
            const int32_t j = j0 + i;
            /* Q mu of page i for heads g and g+8 lives in lane (g, i/2), element i%2 */
            const float mu_g = __shfl_sync(0xffffffffu, am[i & 1], 4 * g + (i >> 1));
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
            const uint4 vq = *reinterpret_cast<const uint4 *>(&st.v[i][g * (D / 2) + t * (D / 8)]);
            uint32_t vr[D / 32];
            if constexpr (D == 64) {
                vr[0] = vq.x;
                vr[1] = vq.y;
            } else {
                vr[0] = vq.x;
                vr[1] = vq.y;
                vr[2] = vq.z;
                vr[3] = vq.w;
                if constexpr (D == 256) {
                    const uint4 v2 = *reinterpret_cast<const uint4 *>(&st.v[i][g * (D / 2) + t * (D / 8) + 16]);
                    vr[4] = v2.x;
                    vr[5] = v2.y;
                    vr[6] = v2.z;
                    vr[7] = v2.w;
                }
            }
#pragma unroll
            for (int u = 0; u < D / 32; u++) {
                uint32_t hb[4];
                int4x8_to_h2x4(vr[u], hb);
                mma16816_f16(acc, qa[2 * u], hb[0], hb[1]);
                mma16816_f16(acc, qa[2 * u + 1], hb[2], hb[3]);
            }
            const __half2 bsc = *reinterpret_cast<const __half2 *>(&st.bs[i][2 * t]);
            const __half2 csc = *reinterpret_cast<const __half2 *>(&st.cs[i][2 * t]);
            const float f0 = __low2float(bsc) * __low2float(csc), f1 = __high2float(bsc) * __high2float(csc);
            const uint32_t a0 = h2_as_u32(__floats2half2_rn(acc[0] * f0, acc[1] * f1));
            const uint32_t a1 = h2_as_u32(__floats2half2_rn(acc[2] * f0, acc[3] * f1));
            const uint32_t cw0 = *reinterpret_cast<const uint16_t *>(&st.c[i][g * LOCKS_CUDA_MAX_RANK + 2 * t]);
            const uint32_t cw1 = *reinterpret_cast<const uint16_t *>(&st.c[i][(g + 8) * LOCKS_CUDA_MAX_RANK + 2 * t]);
            float z0[4] = {0.f, 0.f, 0.f, 0.f}, z1[4] = {0.f, 0.f, 0.f, 0.f};
            mma1688_f16(z0, a0, a1, int8x2_to_h2(__byte_perm(cw0, 0, 0x0100), 0));
            mma1688_f16(z1, a0, a1, int8x2_to_h2(__byte_perm(cw1, 0, 0x0100), 0));
            /* row g: z0[0], z0[1], z1[0], z1[1]; row g+8: z0[2], z0[3], z1[2], z1[3] */
            /* logits in log2 units: mul = scale * |q|max * log2(e) */
            const float cg = mul_g * mu_g;
            const float x0 = fmaf(mul_g, z0[0], cg), x1 = fmaf(mul_g, z0[1], cg);
            const float x2 = fmaf(mul_g, z1[0], cg), x3 = fmaf(mul_g, z1[1], cg);
            float mx = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float sx = fast_exp2(x0 - mx) + fast_exp2(x1 - mx) + fast_exp2(x2 - mx) + fast_exp2(x3 - mx);
            sx += __shfl_xor_sync(0xffffffffu, sx, 1);
            sx += __shfl_xor_sync(0xffffffffu, sx, 2);
            const bool valid = j < n_full;
            lse_a[i] = valid ? (mx + fast_log2(sx)) * LN2 : -INFINITY;
            lse_b[i] = -INFINITY;
            if (two_rows) {
                const float mu_g8 = __shfl_sync(0xffffffffu, am[2 + (i & 1)], 4 * g + (i >> 1));
                const float c8 = mul_g8 * mu_g8;
                const float y0 = fmaf(mul_g8, z0[2], c8), y1 = fmaf(mul_g8, z0[3], c8);
                const float y2 = fmaf(mul_g8, z1[2], c8), y3 = fmaf(mul_g8, z1[3], c8);
                float my = fmaxf(fmaxf(y0, y1), fmaxf(y2, y3));
                my = fmaxf(my, __shfl_xor_sync(0xffffffffu, my, 1));
                my = fmaxf(my, __shfl_xor_sync(0xffffffffu, my, 2));
                float sy = fast_exp2(y0 - my) + fast_exp2(y1 - my) + fast_exp2(y2 - my) + fast_exp2(y3 - my);
                sy += __shfl_xor_sync(0xffffffffu, sy, 1);
                sy += __shfl_xor_sync(0xffffffffu, sy, 2);
                lse_b[i] = valid ? (my + fast_log2(sy)) * LN2 : -INFINITY;
            }
            if (t == 0 && valid) {
                if (g < G) sc_row[i * G] = lse_a[i];
                if (g + 8 < G) sc_row[i * G + 8] = lse_b[i];
            }
        }
        /* fold the batch into the running normaliser partials: one max, 8 exps */
        {
            float ma = lse_a[0], mb = lse_b[0];
#pragma unroll
            for (int i = 1; i < SCORE_BATCH; i++) {
                ma = fmaxf(ma, lse_a[i]);
                mb = fmaxf(mb, lse_b[i]);
            }
            float sa = 0.f, sb = 0.f;
#pragma unroll
            for (int i = 0; i < SCORE_BATCH; i++) sa += ma == -INFINITY ? 0.f : __expf(lse_a[i] - ma);
            run_g = lse_combine(run_g, make_float2(ma, sa));
            if (two_rows) {
#pragma unroll
                for (int i = 0; i < SCORE_BATCH; i++) sb += mb == -INFINITY ? 0.f : __expf(lse_b[i] - mb);
                run_g8 = lse_combine(run_g8, make_float2(mb, sb));
            }
        }
        __syncwarp(); /* every lane is done with this stage before it is refilled */
    }
    pdl_trigger();
    cp_async_wait<0>();
    /* block partial of each head's normaliser */
    if (t == 0) {
        if (g < G) red[warp][g] = run_g;
        if (g + 8 < G) red[warp][g + 8] = run_g8;
    }
    __syncthreads();
    if ((int)threadIdx.x < G) {
        float2 r = red[0][threadIdx.x];
        for (int w = 1; w < SCORE_WARPS; w++) r = lse_combine(r, red[w][threadIdx.x]);
        lse_part[((size_t)seg * gridDim.x + blockIdx.x) * G + threadIdx.x] = r;
    }
}

/* score_issue for the int8 kernel with the shared-memory side as 32-bit addresses
 * computed once (the generic-pointer form above re-derives every destination: ~250
 * instructions per batch in SASS); destination piece ch of each array is byte 16 ch. */
static __device__ __forceinline__ void cp_async16_s(uint32_t saddr, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(g));
}
static __device__ __forceinline__ void cp_async4_s(uint32_t saddr, const void *g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(g));
}
template <int D>
static __device__ __forceinline__ void score_issue_s(uint32_t sst, score_stage<D> &st, int32_t my_p, int lane,
                                                     const int8_t *mu_q, const __half *mu_s, const uint8_t *basis_q,
                                                     const __half *basis_s, const int8_t *coef_q,
                                                     const __half *coef_s) {
    typedef score_stage<D> S;
    constexpr int VB = LOCKS_CUDA_MAX_RANK * D / 2, VCH = VB / 16, MCH = D / 16;
#pragma unroll
    for (int k = 0; k < SCORE_BATCH * VCH / 32; k++) {
        const int ch = lane + 32 * k, i = ch / VCH, o = ch % VCH;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i);
        if (p >= 0) cp_async16_s(sst + (uint32_t)offsetof(S, v) + 16u * ch, basis_q + ((uint32_t)p * VB + 16u * o));
    }
#pragma unroll
    for (int k = 0; k < SCORE_BATCH * 8 / 32; k++) {
        const int ch = lane + 32 * k, i = ch / 8, o = ch % 8;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i);
        if (p >= 0)
            cp_async16_s(sst + (uint32_t)offsetof(S, c) + 16u * ch,
                         coef_q + ((uint32_t)p * (16 * LOCKS_CUDA_MAX_RANK) + 16u * o));
    }
#pragma unroll
    for (int k = 0; k < (SCORE_BATCH * MCH + 31) / 32; k++) {
        const int ch = lane + 32 * k, i = ch / MCH, o = ch % MCH;
        const int32_t p = __shfl_sync(0xffffffffu, my_p, i < SCORE_BATCH ? i : 0);
        if (ch < SCORE_BATCH * MCH && p >= 0)
            cp_async16_s(sst + (uint32_t)offsetof(S, mu) + 16u * ch, mu_q + ((uint32_t)p * D + 16u * o));
    }
    const int i = lane & 7;
    const int32_t p = __shfl_sync(0xffffffffu, my_p, i);
    if (p >= 0) {
        if (lane < 16) {
            const __half *src = (lane < 8 ? basis_s : coef_s) + (uint32_t)p * LOCKS_CUDA_MAX_RANK;
            cp_async16_s(sst + (uint32_t)(lane < 8 ? offsetof(S, bs) : offsetof(S, cs)) + 16u * i, src);
        } else if (lane < 24) {
            cp_async4_s(sst + (uint32_t)offsetof(S, msw) + 4u * i,
                        (const void *)((uintptr_t)(mu_s + p) & ~(uintptr_t)3));
        }
    }
    if (lane < 8) st.hi[i] = p < 0 ? -1 : (int32_t)(((uintptr_t)(mu_s + (p < 0 ? 0 : p)) >> 1) & 1);
}

/* ---- integer kernel (G <= 16) -----------------------------------------------------
 * G 9..16: nct = 2 column tiles; block x takes tile x % 2 (heads 8 (x % 2) .. +7) of the
 * pages of block x / 2, so both tiles' reads of a page meet in L2.
 * Same pipeline and outputs as score_kernel, but b = V^T q on the int8 tensor cores.
 * Queries: Q = round(32512 q / |q|max) = 256 hi + lo, two int8 parts (qprep.cu; one
 * int8 alone would cost ~1% in the page logits). The int4 basis is widened to u8 with
 * one LOP3 per 4 values and no shift: low nibbles (even dims) as (w & 0x0F..) ^ 0x08.. =
 * v + 8, high nibbles (odd dims) in place as (w & 0xF0..) ^ 0x80.. = 16 (v + 8); the
 * basis copy of the query holds the odd dims as Q / 16, so all four m16n8k32 u8 x s8
 * MMAs of a k-step chain into two accumulators (hi part, lo part) and
 * b = 256 acc_hi + acc_lo - 8 sum(basis query) exactly (q_isum; the lo accumulator
 * starts there). The MMA rows are (page, basis vector): pages 2p and 2p+1 of a batch
 * fill the 16 rows and the n = 8 columns are the query heads, so nothing is padding at
 * G = 8. At G <= 4 (PACK) the columns hold the group twice and the coefficient MMA
 * takes both pages at once: A = [C_2p | C_2p+1] (16 tokens x 16), B = blockdiag(w_2p,
 * w_2p+1) built by one movmatrix, so the 16-token softmax runs on 8 useful columns
 * (4 heads x 2 pages). Without PACK each page has its own m16n8k8. q . mu is one s8 MMA
 * per k-step with the two query parts as A rows (g: hi, g+8: lo of head g) and the
 * batch's 8 mu rows as B columns. Lane (g, t) reads basis row g of both pages
 * (words [NW t, NW t + NW), NW = d / 32), its 2 columns are 2t, 2t+1. */
static __device__ __forceinline__ void imma_u8s8(int32_t *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void imma_s8s8(int32_t *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two int8 coefficients (16-bit value x) -> exact half2 */
static __device__ __forceinline__ uint32_t coef2_h2(uint32_t x) { return int8x2_to_h2(__byte_perm(x, 0, 0x0100), 0); }

/* 16-token log-sum-exp of one column (lane holds tokens g and g+8), log2 units */
static __device__ __forceinline__ float col_lse2(float e0, float e1, float mul) {
    float m = fmaxf(e0, e1);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
    const float mm = m * mul;
    float sx = fast_exp2(fmaf(e0, mul, -mm)) + fast_exp2(fmaf(e1, mul, -mm));
    sx += __shfl_xor_sync(0xffffffffu, sx, 4);
    sx += __shfl_xor_sync(0xffffffffu, sx, 8);
    sx += __shfl_xor_sync(0xffffffffu, sx, 16);
    return mm + fast_log2(sx);
}

template <int D, bool PACK>
static __global__ void __launch_bounds__(SCORE_WARPS * 32)
score_i8_kernel(const int8_t *__restrict__ mu_q, const __half *__restrict__ mu_s,
                const uint8_t *__restrict__ basis_q, const __half *__restrict__ basis_s,
                const int8_t *__restrict__ coef_q, const __half *__restrict__ coef_s,
                const int32_t *__restrict__ seq_slots, const int32_t *__restrict__ seq_len,
                const int32_t *__restrict__ block_table, int32_t npool, int32_t hkv, int32_t G, float scale,
                const int8_t *__restrict__ q_i8, const int32_t *__restrict__ q_isum,
                const float *__restrict__ q_amax, int32_t hq, float *__restrict__ scores, int32_t score_stride,
                float2 *__restrict__ lse_part, uint32_t *__restrict__ hist, int32_t nct) {
    constexpr int NW = D / 32; /* basis words per lane per row */
    constexpr int NM = D / 16; /* mu words per lane */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ float2 red[SCORE_WARPS][32][2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    score_stage<D> *stages = reinterpret_cast<score_stage<D> *>(smem_raw) + warp * SCORE_STAGES;
    const int g = lane >> 2, t = lane & 3;
    const int32_t seg = blockIdx.y;
    const int32_t s = seg / hkv, h = seg % hkv;
    /* column tile: heads [h0, h0 + gt) of the group; blocks 2 bx and 2 bx + 1 (nct = 2) read
     * the same pages at about the same time, so the second read is an L2 hit */
    const int32_t tile = blockIdx.x % nct, bx = blockIdx.x / nct, nbx = gridDim.x / nct;
    const int32_t h0 = 8 * tile, gt = min(8, G - h0);
    const score_walk w = score_walk_init<D>(s, h, bx, nbx, warp, seq_slots, seq_len, block_table, npool, mu_q, mu_s,
                                            basis_q, basis_s, coef_q, coef_s);
    const int32_t n_full = w.n_full, b0 = w.b0, bstride = w.bstride, my_n = w.my_n;
    auto page_of = [&](int32_t k) -> int32_t { return w.page_of(k, lane); };
    const uint32_t sst0 = (uint32_t)__cvta_generic_to_shared(stages);
    constexpr uint32_t STB = sizeof(score_stage<D>);
#pragma unroll
    for (int k = 0; k < SCORE_STAGES - 1; k++) {
        score_issue_s<D>(sst0 + k * STB, stages[k], page_of(k), lane, mu_q, mu_s, basis_q, basis_s, coef_q, coef_s);
        cp_async_commit();
    }
    int32_t next_p = page_of(SCORE_STAGES - 1);
    pdl_wait(); /* the queries of qprep; the summary copies above are already in flight */
    zero_hist(hist, seg);

    /* B fragments: column g = head hb (PACK: the group twice) */
    const int hb = PACK ? (g & 3) : g;
    uint32_t qlo[2][NW], qhi[2][NW]; /* [hi/lo part] */
    uint32_t qa[NM / 2][4]; /* A of the q . mu MMA: rows g / g+8 = hi / lo part of head g */
    {
        const bool okm = g < gt;
        const uint32_t *qm0 =
            reinterpret_cast<const uint32_t *>(q_i8 + ((size_t)s * hq + h * G + h0 + (okm ? g : 0)) * 4 * D + 2 * D);
#pragma unroll
        for (int m = 0; m < NM / 2; m++) {
            qa[m][0] = okm ? qm0[t * NM + 2 * m] : 0u;
            qa[m][1] = okm ? qm0[D / 4 + t * NM + 2 * m] : 0u;
            qa[m][2] = okm ? qm0[t * NM + 2 * m + 1] : 0u;
            qa[m][3] = okm ? qm0[D / 4 + t * NM + 2 * m + 1] : 0u;
        }
    }
    {
        const bool ok = hb < gt;
        const int8_t *qrow = q_i8 + ((size_t)s * hq + h * G + h0 + (ok ? hb : 0)) * 4 * D;
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const uint32_t *qw = reinterpret_cast<const uint32_t *>(qrow + part * D);
#pragma unroll
            for (int k = 0; k < NW; k++) {
                const uint32_t x = ok ? qw[2 * (NW * t + k)] : 0u, y = ok ? qw[2 * (NW * t + k) + 1] : 0u;
                qlo[part][k] = __byte_perm(x, y, 0x6420); /* even dims */
                qhi[part][k] = __byte_perm(x, y, 0x7531); /* odd dims (Q / 16) */
            }
        }
    }
    /* this lane's output columns 2t, 2t+1: heads hc[c] */
    constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
    int hc[2];
    float mulc[2];
    int32_t bias[2];
#pragma unroll
    for (int c = 0; c < 2; c++) {
        hc[c] = PACK ? ((2 * t + c) & 3) : 2 * t + c;
        const bool ok = hc[c] < gt;
        const size_t qi = (size_t)s * hq + h * G + h0 + (ok ? hc[c] : 0);
        mulc[c] = ok ? scale * LOG2E * q_amax[qi] : 0.f;
        bias[c] = ok ? q_isum[qi] : 0;
    }
    float run_m[2] = {-1e30f, -1e30f}, run_s[2] = {0.f, 0.f};
    constexpr float INVQ = 1.f / 32512.f; /* Q units -> q / |q|max (keeps b in fp16 range) */
    float *sc_out = scores + (size_t)seg * score_stride * G;

    for (int32_t k = 0; k < my_n; k++) {
        {
            const int si = (k + SCORE_STAGES - 1) % SCORE_STAGES;
            score_issue_s<D>(sst0 + si * STB, stages[si], next_p, lane, mu_q, mu_s, basis_q, basis_s, coef_q, coef_s);
        }
        cp_async_commit();
        next_p = page_of(k + SCORE_STAGES);
        cp_async_wait<SCORE_STAGES - 1>();
        __syncwarp();
        const score_stage<D> &st = stages[k % SCORE_STAGES];
        const int32_t j0 = (b0 + k * bstride) * SCORE_BATCH;

        /* q . mu: one MMA per k-step, A = the query parts (rows g, g+8: hi, lo of head g),
         * B = the batch's mu (column g = page g): lane (g, t) gets head g x pages 2t, 2t+1;
         * the writer lane of page g fetches its columns' heads with 2 shuffles each */
        float qmu[2];
        {
            int32_t am[4] = {0, 0, 0, 0};
            uint32_t mw[NM];
#pragma unroll
            for (int u = 0; u < NM / 4; u++) {
                const uint4 w = *reinterpret_cast<const uint4 *>(&st.mu[g][t * (D / 4) + 16 * u]);
                mw[4 * u] = w.x;
                mw[4 * u + 1] = w.y;
                mw[4 * u + 2] = w.z;
                mw[4 * u + 3] = w.w;
            }
#pragma unroll
            for (int m = 0; m < NM / 2; m++) imma_s8s8(am, qa[m], mw[2 * m], mw[2 * m + 1]);
            const int32_t v0 = 256 * am[0] + am[2], v1 = 256 * am[1] + am[3];
            const int32_t hi = st.hi[g];
            const float ms = hi >= 0 ? __half2float(__ushort_as_half((unsigned short)(st.msw[g] >> (16 * hi)))) : 0.f;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int src = 4 * hc[c] + (g >> 1);
                const int32_t x0 = __shfl_sync(0xffffffffu, v0, src), x1 = __shfl_sync(0xffffffffu, v1, src);
                qmu[c] = (float)((g & 1) ? x1 : x0) * (ms * INVQ);
            }
        }

        /* each lane writes at most one page per batch: page g, its columns 2t, 2t+1 (PACK:
         * page g's 4 heads are the columns of lanes t < 2 for even g, t >= 2 for odd g) */
        float mine[2] = {0.f, 0.f};
#pragma unroll
        for (int p = 0; p < SCORE_BATCH / 2; p++) {
            const int pa = 2 * p, pb = 2 * p + 1;
            uint32_t wa[NW], wb[NW];
            if constexpr (NW == 2) {
                const uint2 x = *reinterpret_cast<const uint2 *>(&st.v[pa][g * (D / 2) + t * 4 * NW]);
                const uint2 y = *reinterpret_cast<const uint2 *>(&st.v[pb][g * (D / 2) + t * 4 * NW]);
                wa[0] = x.x, wa[1] = x.y, wb[0] = y.x, wb[1] = y.y;
            } else {
#pragma unroll
                for (int u = 0; u < NW / 4; u++) {
                    const uint4 x = *reinterpret_cast<const uint4 *>(&st.v[pa][g * (D / 2) + t * 4 * NW + 16 * u]);
                    const uint4 y = *reinterpret_cast<const uint4 *>(&st.v[pb][g * (D / 2) + t * 4 * NW + 16 * u]);
                    wa[4 * u] = x.x, wa[4 * u + 1] = x.y, wa[4 * u + 2] = x.z, wa[4 * u + 3] = x.w;
                    wb[4 * u] = y.x, wb[4 * u + 1] = y.y, wb[4 * u + 2] = y.z, wb[4 * u + 3] = y.w;
                }
            }
            /* accH: hi parts, accL: lo parts (starts at -8 sum: the +8 of the nibbles) */
            int32_t accH[4] = {0, 0, 0, 0}, accL[4] = {-bias[0], -bias[1], -bias[0], -bias[1]};
#pragma unroll
            for (int m = 0; m < NW / 2; m++) {
                const uint32_t al[4] = {and_xor(wa[2 * m], 0x0F0F0F0Fu, 0x08080808u), and_xor(wb[2 * m], 0x0F0F0F0Fu, 0x08080808u),
                                        and_xor(wa[2 * m + 1], 0x0F0F0F0Fu, 0x08080808u),
                                        and_xor(wb[2 * m + 1], 0x0F0F0F0Fu, 0x08080808u)};
                const uint32_t ah[4] = {and_xor(wa[2 * m], 0xF0F0F0F0u, 0x80808080u), and_xor(wb[2 * m], 0xF0F0F0F0u, 0x80808080u),
                                        and_xor(wa[2 * m + 1], 0xF0F0F0F0u, 0x80808080u),
                                        and_xor(wb[2 * m + 1], 0xF0F0F0F0u, 0x80808080u)};
                imma_u8s8(accH, al, qlo[0][2 * m], qlo[0][2 * m + 1]);
                imma_u8s8(accL, al, qlo[1][2 * m], qlo[1][2 * m + 1]);
                imma_u8s8(accH, ah, qhi[0][2 * m], qhi[0][2 * m + 1]);
                imma_u8s8(accL, ah, qhi[1][2 * m], qhi[1][2 * m + 1]);
            }
            /* b = V^T Q (integer), row g of page pa: [0],[1]; of page pb: [2],[3] */
            int32_t b[4];
#pragma unroll
            for (int e = 0; e < 4; e++) b[e] = 256 * accH[e] + accL[e];
            const uint32_t ca0 = *reinterpret_cast<const uint16_t *>(&st.c[pa][g * LOCKS_CUDA_MAX_RANK + 2 * t]);
            const uint32_t ca1 = *reinterpret_cast<const uint16_t *>(&st.c[pa][(g + 8) * LOCKS_CUDA_MAX_RANK + 2 * t]);
            const uint32_t cb0 = *reinterpret_cast<const uint16_t *>(&st.c[pb][g * LOCKS_CUDA_MAX_RANK + 2 * t]);
            const uint32_t cb1 = *reinterpret_cast<const uint16_t *>(&st.c[pb][(g + 8) * LOCKS_CUDA_MAX_RANK + 2 * t]);
            if constexpr (PACK) {
                const bool first = t < 2;
                const int32_t u0 = first ? b[0] : b[2], u1 = first ? b[1] : b[3];
                const int ps = first ? pa : pb;
                const float f = __half2float(st.bs[ps][g]) * __half2float(st.cs[ps][g]) * INVQ;
                const uint32_t y = movmatrix_trans(h2_as_u32(__floats2half2_rn((float)u0 * f, (float)u1 * f)));
                const uint32_t a[4] = {coef2_h2(ca0), coef2_h2(ca1), coef2_h2(cb0), coef2_h2(cb1)};
                float e[4] = {0.f, 0.f, 0.f, 0.f};
                mma16816_f16(e, a, g < 4 ? y : 0u, g < 4 ? 0u : y);
                const int pl = first ? pa : pb; /* page of this lane's columns */
                /* qmu of page pl, column c lives in lane (pl, t): the writer itself */
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float v = col_lse2(e[c], e[2 + c], mulc[c]);
                    if (g == pl) mine[c] = v;
                }
            } else {
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    const int pl = q ? pb : pa;
                    const float f = __half2float(st.bs[pl][g]) * __half2float(st.cs[pl][g]) * INVQ;
                    const int32_t u0 = b[2 * q], u1 = b[2 * q + 1];
                    const uint32_t y = movmatrix_trans(h2_as_u32(__floats2half2_rn((float)u0 * f, (float)u1 * f)));
                    float e[4] = {0.f, 0.f, 0.f, 0.f};
                    mma1688_f16(e, coef2_h2(q ? cb0 : ca0), coef2_h2(q ? cb1 : ca1), y);
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const float v = col_lse2(e[c], e[2 + c], mulc[c]);
                        if (g == pl) mine[c] = v;
                    }
                }
            }
        }
        /* PACK: page g's heads sit in lanes t < 2 for even g, t >= 2 for odd g */
        if (j0 + g < n_full && (!PACK || (g & 1) == (t >> 1))) {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                if (hc[c] < gt) {
                    const float v = mine[c] + mulc[c] * qmu[c];
                    sc_out[(size_t)(j0 + g) * G + h0 + hc[c]] = v * LN2;
                    const float mn = fmaxf(run_m[c], v);
                    run_s[c] = run_s[c] * fast_exp2(run_m[c] - mn) + fast_exp2(v - mn);
                    run_m[c] = mn;
                }
            }
        }
        __syncwarp();
    }
    pdl_trigger();
    cp_async_wait<0>();
    /* block partial of each head's normaliser: lanes of one t hold the same heads */
    float2 rc[2];
#pragma unroll
    for (int c = 0; c < 2; c++) {
        rc[c] = run_s[c] > 0.f ? make_float2(run_m[c] * LN2, run_s[c]) : make_float2(-INFINITY, 0.f);
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            const float2 x = make_float2(__shfl_xor_sync(0xffffffffu, rc[c].x, o), __shfl_xor_sync(0xffffffffu, rc[c].y, o));
            rc[c] = lse_combine(rc[c], x);
        }
        if (lane < 4) red[warp][lane][c] = rc[c];
    }
    __syncthreads();
    if ((int)threadIdx.x < gt) {
        const int hh = threadIdx.x;
        float2 r = make_float2(-INFINITY, 0.f);
        for (int w = 0; w < SCORE_WARPS; w++)
#pragma unroll
            for (int l = 0; l < 4; l++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int hx = PACK ? ((2 * l + c) & 3) : 2 * l + c;
                    if (hx == hh) r = lse_combine(r, red[w][l][c]);
                }
        lse_part[((size_t)seg * nbx + bx) * G + h0 + hh] = r;
    }
}

/* ---- plain fp32 kernel: ranks 9..15 (16 rank slots) and fp32 summaries ---------------
 * No tensor cores: one warp per page (pages wid, wid + warps of the grid, ...), lane l
 * owning dimensions l + 32 m. Per rank slot k < rank the warp loads basis row k once and
 * reduces q_h . v_k for every head of the group (shuffles), adding b_hk c_ik to the
 * logit of token i = l % 16 (lanes 16..31 repeat tokens 0..15); mu likewise. Queries are
 * the scoring copy (fp16 q / |q|max, times |q|max here): the one rounding beyond the CPU's
 * fp32. The normaliser partials and the histogram zeroing are as in the other kernels.
 * Meant for the rank / precision ablation, not tuned: an fp32 summary of rank 15 is
 * ~11x the bytes of the deployed one. */
template <int D, int RS, bool F32>
static __global__ void __launch_bounds__(SCORE_WARPS * 32)
score_gen_kernel(const void *__restrict__ mu_v, const __half *__restrict__ mu_s, const void *__restrict__ basis_v,
                 const __half *__restrict__ basis_s, const void *__restrict__ coef_v,
                 const __half *__restrict__ coef_s, const int32_t *__restrict__ seq_slots,
                 const int32_t *__restrict__ seq_len, const int32_t *__restrict__ block_table, int32_t npool,
                 int32_t hkv, int32_t G, int32_t rank, float scale, const __half *__restrict__ q_score,
                 const float *__restrict__ q_amax, int32_t hq, float *__restrict__ scores, int32_t score_stride,
                 float2 *__restrict__ lse_part, uint32_t *__restrict__ hist) {
    constexpr int DL = D / 32;
    constexpr int GM = LOCKS_CUDA_MAX_GROUP;
    __shared__ float qs[GM][D];
    __shared__ float2 red[SCORE_WARPS][GM];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tok = lane & 15;
    const int32_t seg = blockIdx.y;
    const int32_t s = seg / hkv, h = seg % hkv;
    const int32_t slot = seq_slots[s];
    const int32_t n_full = seq_len[slot] / 16;
    const int32_t *bt = block_table + (size_t)slot * npool;
    const size_t sbase = (size_t)h * npool;
    pdl_wait(); /* the queries of qprep */
    zero_hist(hist, seg);
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        const int hh = i / D, x = i % D;
        const size_t row = (size_t)s * hq + (size_t)h * G + hh;
        qs[hh][x] = __half2float(q_score[row * D + x]) * q_amax[row];
    }
    __syncthreads();
    float2 run = make_float2(-INFINITY, 0.f); /* lane hh < G: head hh's normaliser partial */
    float *sc_out = scores + (size_t)seg * score_stride * G;
    const int32_t wstride = gridDim.x * SCORE_WARPS;
    for (int32_t j = blockIdx.x * SCORE_WARPS + warp; j < n_full; j += wstride) {
        const size_t idx = sbase + (size_t)bt[j];
        float z[GM];
        {
            float muv[DL];
#pragma unroll
            for (int m = 0; m < DL; m++) {
                const int x = lane + 32 * m;
                muv[m] = F32 ? reinterpret_cast<const float *>(mu_v)[idx * D + x]
                             : __half2float(mu_s[idx]) * (float)reinterpret_cast<const int8_t *>(mu_v)[idx * D + x];
            }
#pragma unroll
            for (int hh = 0; hh < GM; hh++) {
                z[hh] = 0.f;
                if (hh < G) {
                    float a = 0.f;
#pragma unroll
                    for (int m = 0; m < DL; m++) a = fmaf(qs[hh][lane + 32 * m], muv[m], a);
                    z[hh] = warp_sum(a);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < RS; k++) {
            if (k < rank) {
                float vk[DL];
                float ck;
                if (F32) {
                    const float *vr = reinterpret_cast<const float *>(basis_v) + (idx * RS + k) * D;
#pragma unroll
                    for (int m = 0; m < DL; m++) vk[m] = vr[lane + 32 * m];
                    ck = reinterpret_cast<const float *>(coef_v)[(idx * 16 + tok) * RS + k];
                } else {
                    const uint8_t *vr = reinterpret_cast<const uint8_t *>(basis_v) + (idx * RS + k) * (D / 2);
                    const float bsc = __half2float(basis_s[idx * RS + k]);
#pragma unroll
                    for (int m = 0; m < DL; m++) {
                        const int x = lane + 32 * m;
                        const int b = vr[x >> 1];
                        int nib = (x & 1) ? (b >> 4) : (b & 15);
                        nib -= (nib & 8) << 1;
                        vk[m] = bsc * (float)nib;
                    }
                    ck = __half2float(coef_s[idx * RS + k]) *
                         (float)reinterpret_cast<const int8_t *>(coef_v)[(idx * 16 + tok) * RS + k];
                }
#pragma unroll
                for (int hh = 0; hh < GM; hh++)
                    if (hh < G) {
                        float a = 0.f;
#pragma unroll
                        for (int m = 0; m < DL; m++) a = fmaf(qs[hh][lane + 32 * m], vk[m], a);
                        z[hh] = fmaf(warp_sum(a), ck, z[hh]);
                    }
            }
        }
        /* page LSE per head over the 16 tokens (each half-warp holds all 16) */
#pragma unroll
        for (int hh = 0; hh < GM; hh++)
            if (hh < G) {
                const float x = scale * z[hh];
                float mx = x;
                for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                float e = expf(x - mx);
                for (int o = 8; o > 0; o >>= 1) e += __shfl_xor_sync(0xffffffffu, e, o);
                const float v = mx + logf(e);
                if (lane == 0) sc_out[(size_t)j * G + hh] = v;
                if (lane == hh) run = lse_combine(run, make_float2(v, 1.f));
            }
    }
    pdl_trigger();
    if (lane < G) red[warp][lane] = run;
    __syncthreads();
    if ((int)threadIdx.x < G) {
        float2 r = red[0][threadIdx.x];
        for (int w = 1; w < SCORE_WARPS; w++) r = lse_combine(r, red[w][threadIdx.x]);
        lse_part[((size_t)seg * gridDim.x + blockIdx.x) * G + threadIdx.x] = r;
    }
}

template <int D, int RS, bool F32>
static locks_status score_gen_launch(locks_cuda_cache *c, size_t base, int32_t segs, int32_t hq, float scale,
                                     int32_t nblk, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    const void *mu = F32 ? (const void *)(c->mu_f + base * D) : (const void *)(c->mu + base * D);
    const void *basis = F32 ? (const void *)(c->basis_f + base * RS * D) : (const void *)(c->basis + base * RS * (D / 2));
    const void *coef = F32 ? (const void *)(c->coef_f + base * 16 * RS) : (const void *)(c->coef + base * 16 * RS);
    const __half *mu_s = F32 ? nullptr : c->mu_scale + base;
    const __half *bs = F32 ? nullptr : c->basis_scale + base * RS;
    const __half *cs = F32 ? nullptr : c->coef_scale + base * RS;
    CU_TRY(launch_k(c->ws.pdl, score_gen_kernel<D, RS, F32>, dim3((unsigned)nblk, (unsigned)segs),
                    dim3(SCORE_WARPS * 32), 0, st, mu, mu_s, basis, bs, coef, cs, (const int32_t *)c->ws.seq_slots,
                    (const int32_t *)c->seq_len, (const int32_t *)c->block_table, c->p.n_pages, hkv, G, c->rank,
                    scale, (const __half *)c->ws.q_score, (const float *)c->ws.q_amax, hq, c->ws.scores,
                    c->ws.max_pages, c->ws.lse_part, c->ws.hist));
    return LOCKS_OK;
}

/* Whether the cache's summaries go to the plain fp32 kernel (not the tensor-core ones). */
static bool score_generic(const locks_cuda_cache *c) { return c->f32 || c->rslots != LOCKS_CUDA_MAX_RANK; }

/* Column tiles of the int8 kernel for a group of G (0: the fp16 kernel). */
static int32_t score_tiles(const locks_cuda_cache *c, int32_t G) {
    if (score_generic(c)) return 1; /* the plain kernel: one block per grid column */
    return G <= 8 ? 1 : (c->ws.score_i8_g16 ? 2 : 0);
}

int32_t locks_cuda_score_blocks(const locks_cuda_cache *c, int32_t n_seqs, int32_t hq, int32_t max_pages) {
    /* one wave: SCORE_BLOCKS_PER_SM resident blocks per SM, spread over the segments and
     * column tiles (two waves of single-batch warps cost GLM-4's 128K step ~12 us, run 20) */
    const int32_t segs = n_seqs * c->p.n_kv_heads;
    const int32_t nct = score_tiles(c, hq / c->p.n_kv_heads);
    int32_t want = c->n_sm * SCORE_BLOCKS_PER_SM / (segs * (nct > 1 ? nct : 1)); /* floor: no partial second wave */
    int32_t batches = (max_pages + SCORE_BATCH - 1) / SCORE_BATCH;
    int32_t most = (batches + SCORE_WARPS - 1) / SCORE_WARPS;
    if (score_generic(c)) { /* latency-bound, no shared-memory stages: twice the blocks, >= 4 pages a warp */
        want = 2 * c->n_sm * SCORE_BLOCKS_PER_SM / segs;
        most = (max_pages + 4 * SCORE_WARPS - 1) / (4 * SCORE_WARPS);
    }
    if (want > most) want = most;
    if (want < 1) want = 1;
    if (want > c->ws.score_blocks) want = c->ws.score_blocks;
    return want;
}

template <int D> static size_t score_smem(void) { return sizeof(score_stage<D>) * SCORE_STAGES * SCORE_WARPS; }

template <int D> static locks_status score_prepare_t(void) {
    CU_TRY(cudaFuncSetAttribute(score_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)score_smem<D>()));
    CU_TRY(cudaFuncSetAttribute(score_i8_kernel<D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)score_smem<D>()));
    CU_TRY(cudaFuncSetAttribute(score_i8_kernel<D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)score_smem<D>()));
    return LOCKS_OK;
}

/* Raises the score kernel's shared-memory limit (outside any graph capture). */
locks_status locks_cuda_score_prepare(locks_cuda_cache *c) {
    switch (c->p.head_dim) {
    case 64: return score_prepare_t<64>();
    case 128: return score_prepare_t<128>();
    case 256: return score_prepare_t<256>();
    default: return LOCKS_ERR_UNSUPPORTED;
    }
}

template <int D>
static locks_status score_launch_t(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t hq, float scale,
                                   int32_t nblk, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    const size_t base = summary_index(c, layer, 0);
    const int32_t segs = n_seqs * hkv;
    if (score_generic(c)) {
        if (c->f32)
            return c->rslots == LOCKS_CUDA_MAX_RANK ? score_gen_launch<D, LOCKS_CUDA_MAX_RANK, true>(c, base, segs, hq, scale, nblk, st)
                                                    : score_gen_launch<D, LOCKS_CUDA_RANK_SLOTS, true>(c, base, segs, hq, scale, nblk, st);
        return score_gen_launch<D, LOCKS_CUDA_RANK_SLOTS, false>(c, base, segs, hq, scale, nblk, st);
    }
    /* G <= 8: one column tile of the int8 kernel; G 9..16: two tiles, one per block (the
     * same registers as G = 8); the fp16 kernel only if switched off (score_i8_g16 = 0) */
    const int32_t nct = score_tiles(c, G);
    if (nct > 0) {
        auto kern = G <= 4 ? score_i8_kernel<D, true> : score_i8_kernel<D, false>;
        CU_TRY(launch_k(c->ws.pdl, kern, dim3((unsigned)(nblk * nct), (unsigned)segs), dim3(SCORE_WARPS * 32),
                        score_smem<D>(), st, (const int8_t *)(c->mu + base * D), (const __half *)(c->mu_scale + base),
                        (const uint8_t *)(c->basis + base * LOCKS_CUDA_MAX_RANK * (D / 2)),
                        (const __half *)(c->basis_scale + base * LOCKS_CUDA_MAX_RANK),
                        (const int8_t *)(c->coef + base * 16 * LOCKS_CUDA_MAX_RANK),
                        (const __half *)(c->coef_scale + base * LOCKS_CUDA_MAX_RANK), (const int32_t *)c->ws.seq_slots,
                        (const int32_t *)c->seq_len, (const int32_t *)c->block_table, c->p.n_pages, hkv, G, scale,
                        (const int8_t *)c->ws.q_i8, (const int32_t *)c->ws.q_isum, (const float *)c->ws.q_amax, hq,
                        c->ws.scores, c->ws.max_pages, c->ws.lse_part, c->ws.hist, nct));
        return LOCKS_OK;
    }
    CU_TRY(launch_k(c->ws.pdl, score_kernel<D>, dim3((unsigned)nblk, (unsigned)segs), dim3(SCORE_WARPS * 32),
                    score_smem<D>(), st, (const int8_t *)(c->mu + base * D), (const __half *)(c->mu_scale + base),
                    (const uint8_t *)(c->basis + base * LOCKS_CUDA_MAX_RANK * (D / 2)),
                    (const __half *)(c->basis_scale + base * LOCKS_CUDA_MAX_RANK),
                    (const int8_t *)(c->coef + base * 16 * LOCKS_CUDA_MAX_RANK),
                    (const __half *)(c->coef_scale + base * LOCKS_CUDA_MAX_RANK), (const int32_t *)c->ws.seq_slots,
                    (const int32_t *)c->seq_len, (const int32_t *)c->block_table, c->p.n_pages, hkv, G, scale,
                    (const __half *)c->ws.q_score, (const float *)c->ws.q_amax, hq, c->ws.scores, c->ws.max_pages,
                    c->ws.lse_part, c->ws.hist));
    return LOCKS_OK;
}

locks_status locks_cuda_score_launch(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t hq, float scale,
                                     int32_t nblk, cudaStream_t st) {
    switch (c->p.head_dim) {
    case 64: return score_launch_t<64>(c, layer, n_seqs, hq, scale, nblk, st);
    case 128: return score_launch_t<128>(c, layer, n_seqs, hq, scale, nblk, st);
    case 256: return score_launch_t<256>(c, layer, n_seqs, hq, scale, nblk, st);
    default: return LOCKS_ERR_UNSUPPORTED;
    }
}
