/*
 * verify.cu — causal attention of a few tokens (a speculative verify: K + 1 queries)
 * over a long paged context, on tensor cores, split over the keys.
 *
 * The prefill kernel (prefill.cu) gives a block 64 query rows of one head and walks all
 * keys; with n = K + 1 rows that is hq blocks each reading the whole context, 1/16 of
 * the rows live: at 256K tokens it runs about as long as hq full decode steps. Here the
 * rows of a block are the n queries times the G query heads of one KV head (row r:
 * query r / G, head kvh * G + r % G; n * G <= VF_MAX_ROWS), so every K/V page is read
 * once per KV head, and the keys are split over blocks:
 *
 *   grid (splits, hkv), 4 warps. A split is a range of pages; the block streams tiles of
 *   KP pages into shared memory by cp.async, one tile ahead of the one it computes (slots
 *   past the written end zero-filled, as prefill.cu zeroes them), and
 *   each warp takes one 16-row m-tile and every (4 / m-tiles)-th page of a tile:
 *   S = Q K^T (mma m16n8k16, Q pre-scaled by scale * log2 e and rounded to the kv type),
 *   the causal mask (key position > the row's token position), online softmax in fp32,
 *   O += P V. The warps of one m-tile are merged in shared memory and the block writes
 *   its split's (max, sum, unnormalised O) per row; a second kernel merges the splits
 *   (the usual log-sum-exp rescale) and normalises.
 *
 * Numerics are prefill.cu's (P and Q rounded to the kv type, fp32 accumulation, exp2),
 * in a different order of summation. Reference: locks_prefill_attend (attend.c), dense
 * causal softmax in fp32; tests/test_gpu_verify.c compares both with float64.
 */
#include "model_ops.cuh"

#define VF_WARPS 4
#define VF_MAX_ROWS 32 /* two m-tiles */
#define VF_KP 4        /* pages per shared-memory tile */
#define VF_BLOCKS_PER_SM 3

template <int D> struct vf_cfg {
    static constexpr int LD = D + 8; /* padded row (conflict-free fragment loads) */
};

template <typename T> static __device__ __forceinline__ uint32_t vf_pack2(float a, float b) {
    typename kv_traits<T>::T2 h = kv_traits<T>::pack(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

static __device__ __forceinline__ void vf_ldmatrix_x4_trans(uint32_t *r, const void *smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* 16 bytes global -> shared, asynchronous; ok = 0 writes zeros (reads nothing). */
static __device__ __forceinline__ void vf_cp_async16_zfill(void *smem, const void *g, bool ok) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(g), "r"(ok ? 16 : 0));
}

template <int D> static constexpr size_t vf_smem_bytes() { return (size_t)2 * 2 * VF_KP * 16 * vf_cfg<D>::LD * 2; }

/* part_o [split][hkv][VF_MAX_ROWS][D], part_ml [split][hkv][VF_MAX_ROWS][2] (max, sum). */
template <int D, typename T>
static __global__ void __launch_bounds__(VF_WARPS * 32)
verify_kernel(const uint16_t *__restrict__ kpool, const uint16_t *__restrict__ vpool, const int32_t *__restrict__ bt,
              int32_t hkv, int32_t G, int32_t pos, int32_t n, const float *__restrict__ q, int32_t hq, float qmul,
              int32_t pages_per_split, float *__restrict__ part_o, float *__restrict__ part_ml) {
    constexpr int KP = VF_KP, LD = vf_cfg<D>::LD, TILE = KP * 16 * LD; /* elements of one K (or V) tile */
    /* two stages of (K tile, V tile), cp.async one tile ahead; after the key loop the
     * same memory holds the warps' partials */
    extern __shared__ __align__(16) uint16_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int32_t split = blockIdx.x, kvh = blockIdx.y;
    const int32_t R = n * G, MT = (R + 15) / 16, NLG = VF_WARPS / MT;
    const int mt = warp % MT, lgi = warp / MT; /* m-tile, and which pages of a tile */
    const bool warp_live = warp < MT * NLG;
    const int32_t total = pos + n; /* keys written */
    const int32_t ra = mt * 16 + g, rb = ra + 8;
    const int32_t rra = min(ra, R - 1), rrb = min(rb, R - 1); /* rows past R compute like the last */
    const int32_t qa_pos = pos + rra / G, qb_pos = pos + rrb / G;
    const int32_t warp_last = pos + min(mt * 16 + 15, R - 1) / G;
    const int32_t n_lp = (total - 1) / 16 + 1;
    const int32_t lp_begin = split * pages_per_split, lp_end = min(lp_begin + pages_per_split, n_lp);

    uint32_t qf[D / 16][4];
    {
        const float *qa = q + ((size_t)(rra / G) * hq + kvh * G + rra % G) * D;
        const float *qb = q + ((size_t)(rrb / G) * hq + kvh * G + rrb % G) * D;
#pragma unroll
        for (int kc = 0; kc < D / 16; kc++) {
            const int c0 = kc * 16 + 2 * t, c1 = c0 + 8;
            qf[kc][0] = vf_pack2<T>(qa[c0] * qmul, qa[c0 + 1] * qmul);
            qf[kc][1] = vf_pack2<T>(qb[c0] * qmul, qb[c0 + 1] * qmul);
            qf[kc][2] = vf_pack2<T>(qa[c1] * qmul, qa[c1 + 1] * qmul);
            qf[kc][3] = vf_pack2<T>(qb[c1] * qmul, qb[c1 + 1] * qmul);
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

    /* tile of KP pages from lp0 -> stage st (16-byte chunks; slots past `total` or past the
     * split zero-filled) */
    auto issue = [&](int32_t lp0, int st) {
        constexpr int CH = D / 8;
        uint16_t *kd = smem + (size_t)st * 2 * TILE, *vd = kd + TILE;
#pragma unroll
        for (int i = threadIdx.x; i < KP * 16 * CH; i += VF_WARPS * 32) {
            const int key = i / CH, ch = i % CH;
            const int32_t lp = lp0 + key / 16, kpos = lp * 16 + key % 16;
            const bool ok = lp < lp_end && kpos < total;
            const size_t off = ok ? (((size_t)bt[lp] * hkv + kvh) * 16 + key % 16) * D + ch * 8 : 0;
            vf_cp_async16_zfill(kd + key * LD + ch * 8, kpool + off, ok);
            vf_cp_async16_zfill(vd + key * LD + ch * 8, vpool + off, ok);
        }
    };
    if (lp_begin < lp_end) issue(lp_begin, 0);
    cp_async_commit();
    int stage = 0;
    for (int32_t lp0 = lp_begin; lp0 < lp_end; lp0 += KP, stage ^= 1) {
        if (lp0 + KP < lp_end) issue(lp0 + KP, stage ^ 1);
        cp_async_commit();
        cp_async_wait<1>(); /* this tile's group has landed */
        __syncthreads();
        const uint16_t(*ks)[LD] = reinterpret_cast<const uint16_t(*)[LD]>(smem + (size_t)stage * 2 * TILE);
        const uint16_t(*vs)[LD] = reinterpret_cast<const uint16_t(*)[LD]>(smem + (size_t)stage * 2 * TILE + TILE);
#pragma unroll 1
        for (int pg = warp_live ? lgi : KP; pg < KP; pg += NLG) {
            const int32_t kp0 = (lp0 + pg) * 16;
            if (lp0 + pg >= lp_end || kp0 > warp_last) break;
            const int kr = pg * 16;
            float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
            for (int kc = 0; kc < D / 16; kc++) {
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const uint32_t b0 = *reinterpret_cast<const uint32_t *>(&ks[kr + nt * 8 + g][kc * 16 + 2 * t]);
                    const uint32_t b1 = *reinterpret_cast<const uint32_t *>(&ks[kr + nt * 8 + g][kc * 16 + 2 * t + 8]);
                    mma_op<T>::run(s[nt], qf[kc], b0, b1);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int32_t kpos = kp0 + nt * 8 + 2 * t + j;
                    if (kpos > qa_pos) s[nt][j] = -INFINITY;
                    if (kpos > qb_pos) s[nt][2 + j] = -INFINITY;
                }
            float mx_a = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
            float mx_b = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
            const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
            const float mu_a = mn_a == -INFINITY ? 0.f : mn_a, mu_b = mn_b == -INFINITY ? 0.f : mn_b;
            const float al_a = exp2f(m_a - mu_a), al_b = exp2f(m_b - mu_b);
            m_a = mn_a;
            m_b = mn_b;
            float p[2][4];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                p[nt][0] = exp2f(s[nt][0] - mu_a);
                p[nt][1] = exp2f(s[nt][1] - mu_a);
                p[nt][2] = exp2f(s[nt][2] - mu_b);
                p[nt][3] = exp2f(s[nt][3] - mu_b);
            }
            l_a = l_a * al_a + p[0][0] + p[0][1] + p[1][0] + p[1][1];
            l_b = l_b * al_b + p[0][2] + p[0][3] + p[1][2] + p[1][3];
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                o[i][0] *= al_a;
                o[i][1] *= al_a;
                o[i][2] *= al_b;
                o[i][3] *= al_b;
            }
            uint32_t pa[4];
            pa[0] = vf_pack2<T>(p[0][0], p[0][1]);
            pa[1] = vf_pack2<T>(p[0][2], p[0][3]);
            pa[2] = vf_pack2<T>(p[1][0], p[1][1]);
            pa[3] = vf_pack2<T>(p[1][2], p[1][3]);
            const int mi = lane >> 3, mr = lane & 7;
#pragma unroll
            for (int nd = 0; nd < D / 8; nd += 2) {
                uint32_t b[4];
                vf_ldmatrix_x4_trans(b, &vs[kr + (mi & 1) * 8 + mr][nd * 8 + (mi >> 1) * 8]);
                mma_op<T>::run(o[nd], pa, b[0], b[1]);
                mma_op<T>::run(o[nd + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* the next iteration's issue overwrites the other stage only; the one after, this */
    }
    cp_async_wait<0>();

    /* ---- merge the warps of each m-tile, write the split's partials ---- */
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    __syncthreads(); /* the tiles are no longer read */
    float *wb = reinterpret_cast<float *>(smem) + (size_t)warp * (16 * D + 32);
    if (warp_live) {
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++) {
            const int c = nd * 8 + 2 * t;
            wb[g * D + c] = o[nd][0];
            wb[g * D + c + 1] = o[nd][1];
            wb[(g + 8) * D + c] = o[nd][2];
            wb[(g + 8) * D + c + 1] = o[nd][3];
        }
        if (t == 0) {
            wb[16 * D + g] = m_a;
            wb[16 * D + g + 8] = m_b;
            wb[16 * D + 16 + g] = l_a;
            wb[16 * D + 16 + g + 8] = l_b;
        }
    }
    __syncthreads();
    const float *base = reinterpret_cast<const float *>(smem);
    const size_t prow = ((size_t)split * hkv + kvh) * VF_MAX_ROWS;
    for (int i = threadIdx.x; i < MT * 16 * D; i += VF_WARPS * 32) {
        const int tile = i / (16 * D), row = (i / D) % 16, c = i % D, r = tile * 16 + row;
        if (r >= R) continue;
        float mx = -INFINITY;
        for (int j = 0; j < NLG; j++) mx = fmaxf(mx, base[(size_t)(j * MT + tile) * (16 * D + 32) + 16 * D + row]);
        float acc = 0.f, sum = 0.f;
        if (mx != -INFINITY)
            for (int j = 0; j < NLG; j++) {
                const float *w = base + (size_t)(j * MT + tile) * (16 * D + 32);
                const float mj = w[16 * D + row];
                if (mj == -INFINITY) continue;
                const float a = exp2f(mj - mx);
                acc += a * w[row * D + c];
                sum += a * w[16 * D + 16 + row];
            }
        part_o[(prow + r) * D + c] = acc;
        if (c == 0) {
            part_ml[(prow + r) * 2] = mx;
            part_ml[(prow + r) * 2 + 1] = sum;
        }
    }
}

/* out[i][h][c] = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s over the splits. grid (hkv, R), D threads. */
static __global__ void verify_merge_kernel(const float *__restrict__ part_o, const float *__restrict__ part_ml,
                                           int32_t splits, int32_t hkv, int32_t G, int32_t hq, int32_t D,
                                           float *__restrict__ out) {
    const int32_t kvh = blockIdx.x, r = blockIdx.y, c = threadIdx.x;
    float mx = -INFINITY;
    for (int32_t s = 0; s < splits; s++) mx = fmaxf(mx, part_ml[(((size_t)s * hkv + kvh) * VF_MAX_ROWS + r) * 2]);
    float acc = 0.f, sum = 0.f;
    for (int32_t s = 0; s < splits; s++) {
        const size_t pr = ((size_t)s * hkv + kvh) * VF_MAX_ROWS + r;
        const float ms = part_ml[pr * 2];
        if (ms == -INFINITY) continue;
        const float a = exp2f(ms - mx);
        acc += a * part_o[pr * D + c];
        sum += a * part_ml[pr * 2 + 1];
    }
    out[((size_t)(r / G) * hq + kvh * G + r % G) * D + c] = acc / sum;
}

size_t lg_verify_ws_floats(const locks_cuda_cache *c) {
    /* splits * hkv <= ceil(VF_BLOCKS_PER_SM * n_sm / hkv) * hkv (verify_launch_t) */
    const size_t blocks = (size_t)VF_BLOCKS_PER_SM * c->n_sm + (size_t)c->p.n_kv_heads;
    return blocks * VF_MAX_ROWS * ((size_t)c->p.head_dim + 2);
}

int lg_verify_attend_fits(const locks_cuda_cache *c, int32_t n, int32_t hq) {
    const int32_t d = c->p.head_dim;
    return !c->ext_k && (d == 64 || d == 128) && n >= 1 && (int64_t)n * (hq / c->p.n_kv_heads) <= VF_MAX_ROWS;
}

template <int D, typename T>
static locks_status verify_launch_t(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                    const float *q, int32_t hq, float scale, float *ws, float *out, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    const int32_t n_lp = (pos + n - 1) / 16 + 1;
    /* splits: enough blocks for VF_BLOCKS_PER_SM per SM, each a multiple of the tile */
    int32_t want = (VF_BLOCKS_PER_SM * c->n_sm + hkv - 1) / hkv;
    const int32_t tiles = (n_lp + VF_KP - 1) / VF_KP;
    if (want > tiles) want = tiles;
    if (want < 1) want = 1;
    const int32_t pps = ((tiles + want - 1) / want) * VF_KP;
    const int32_t splits = (n_lp + pps - 1) / pps;
    float *part_ml = ws, *part_o = ws + (size_t)splits * hkv * VF_MAX_ROWS * 2;
    const size_t koff = (size_t)layer * c->kv_layer_elems;
    static_assert(vf_smem_bytes<D>() >= VF_WARPS * (16 * D + 32) * sizeof(float), "merge buffer");
    static bool attr_set = false; /* per instantiation */
    if (!attr_set) {
        CU_TRY(cudaFuncSetAttribute(verify_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)vf_smem_bytes<D>()));
        attr_set = true;
    }
    verify_kernel<D, T><<<dim3((unsigned)splits, (unsigned)hkv), VF_WARPS * 32, vf_smem_bytes<D>(), st>>>(
        c->k + koff, c->v + koff, c->block_table + (size_t)seq * c->p.n_pages, hkv, G, pos, n, q, hq,
        scale * 1.4426950408889634f, pps, part_o, part_ml);
    CU_LAUNCH_CHECK(verify_kernel);
    verify_merge_kernel<<<dim3((unsigned)hkv, (unsigned)(n * G)), D, 0, st>>>(part_o, part_ml, splits, hkv, G, hq, D,
                                                                              out);
    CU_LAUNCH_CHECK(verify_merge_kernel);
    return LOCKS_OK;
}

locks_status lg_verify_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                     const float *q, int32_t hq, float scale, float *ws, float *out,
                                     cudaStream_t st) {
    if (!lg_verify_attend_fits(c, n, hq)) return LOCKS_ERR_UNSUPPORTED;
    const bool bf = c->p.kv_dtype == LOCKS_DTYPE_BF16;
    if (c->p.head_dim == 64)
        return bf ? verify_launch_t<64, __nv_bfloat16>(c, layer, seq, pos, n, q, hq, scale, ws, out, st)
                  : verify_launch_t<64, __half>(c, layer, seq, pos, n, q, hq, scale, ws, out, st);
    return bf ? verify_launch_t<128, __nv_bfloat16>(c, layer, seq, pos, n, q, hq, scale, ws, out, st)
              : verify_launch_t<128, __half>(c, layer, seq, pos, n, q, hq, scale, ws, out, st);
}

/* ---- K/V of the verified tokens ------------------------------------------------------------ */

/* Rows t of qkv [q | k | v] (row_stride floats, k at k_off) -> slot pos + t of slot seq. */
template <typename T>
static __global__ void verify_kv_kernel(const float *__restrict__ qkv, int32_t row_stride, int32_t k_off, int32_t hkv,
                                        int32_t d, int32_t pos, const int32_t *__restrict__ bt, uint16_t *kpool,
                                        uint16_t *vpool) {
    const int32_t t = blockIdx.y, p = pos + t;
    const int32_t page = bt[p / 16], kv_dim = hkv * d;
    const float *row = qkv + (size_t)t * row_stride + k_off;
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < kv_dim; i += gridDim.x * blockDim.x) {
        const int32_t h = i / d, dim = i % d;
        const size_t dst = (((size_t)page * hkv + h) * 16 + (p % 16)) * d + dim;
        T kk = kv_traits<T>::from_f(row[i]), vv = kv_traits<T>::from_f(row[kv_dim + i]);
        kpool[dst] = *reinterpret_cast<uint16_t *>(&kk);
        vpool[dst] = *reinterpret_cast<uint16_t *>(&vv);
    }
}

locks_status lg_verify_kv_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                 const float *qkv, int32_t row_stride, int32_t k_off, cudaStream_t st) {
    const int32_t kv_dim = c->p.n_kv_heads * c->p.head_dim;
    dim3 grid((unsigned)((kv_dim + 255) / 256), (unsigned)n);
    uint16_t *kp = c->k + (size_t)layer * c->kv_layer_elems, *vp = c->v + (size_t)layer * c->kv_layer_elems;
    const int32_t *bt = c->block_table + (size_t)seq * c->p.n_pages;
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        verify_kv_kernel<__nv_bfloat16><<<grid, 256, 0, st>>>(qkv, row_stride, k_off, c->p.n_kv_heads, c->p.head_dim,
                                                              pos, bt, kp, vp);
    else
        verify_kv_kernel<__half><<<grid, 256, 0, st>>>(qkv, row_stride, k_off, c->p.n_kv_heads, c->p.head_dim, pos, bt,
                                                       kp, vp);
    CU_LAUNCH_CHECK(verify_kv_kernel);
    return LOCKS_OK;
}
