/*
 * prefill.cu — causal attention of a prefill chunk over the paged cache, on tensor cores.
 *
 * Flash-attention style, no n x n buffer: a block takes 64 query rows (chunk tokens)
 * of one query head, 4 warps of 16 rows each, and walks the sequence's keys from
 * position 0 to its last row in tiles of KP pages (16 keys each), loaded by the whole
 * block into shared memory. Per page a warp computes S = Q K^T with mma m16n8k16
 * (Q fragments stay in registers, pre-scaled by scale * log2(e) and rounded to the kv
 * type), masks keys past each row's position, updates the online softmax (max, sum
 * in fp32, exp2), and accumulates O += P V (P rounded to the kv type; V fragments by
 * ldmatrix.trans). Key slots past the written end are zeroed in shared memory, so
 * unwritten pool memory never meets a zero weight (0 * NaN).
 * Reference: the CPU's locks_prefill_attend (attend.c), dense causal softmax in fp32.
 */
#include "model_ops.cuh"

#define PF_WARPS 4
#define PF_ROWS (16 * PF_WARPS)

template <int D> struct pf_cfg {
    static constexpr int KP = D <= 128 ? 4 : 2; /* pages per shared-memory tile */
    static constexpr int LD = D + 8;            /* padded row (conflict-free fragment loads) */
};

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, const void *smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

template <typename T> static __device__ __forceinline__ uint32_t pack2(float a, float b) {
    typename kv_traits<T>::T2 h = kv_traits<T>::pack(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

template <int D, typename T>
static __global__ void __launch_bounds__(PF_WARPS * 32)
prefill_kernel(const uint16_t *__restrict__ kpool, const uint16_t *__restrict__ vpool, const int32_t *__restrict__ bt,
               int32_t hkv, int32_t G, int32_t pos, int32_t n, const float *__restrict__ q, int32_t hq, float qmul,
               float *__restrict__ out) {
    constexpr int KP = pf_cfg<D>::KP, LD = pf_cfg<D>::LD;
    __shared__ __align__(16) uint16_t ks[KP * 16][LD];
    __shared__ __align__(16) uint16_t vs[KP * 16][LD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int32_t h = blockIdx.y, kvh = h / G;
    const int32_t row0 = blockIdx.x * PF_ROWS + warp * 16; /* chunk-relative first row of this warp */
    const int32_t total = pos + n;                          /* keys written */
    const int32_t ra = row0 + g, rb = row0 + g + 8;
    /* rows past the chunk compute like its last row and are not stored */
    const int32_t qa_pos = pos + min(ra, n - 1), qb_pos = pos + min(rb, n - 1);
    const int32_t block_last = pos + min((int32_t)(blockIdx.x + 1) * PF_ROWS, n) - 1;
    const int32_t warp_last = pos + min(row0 + 15, n - 1);
    const bool warp_live = row0 < n;

    /* Q fragments: a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..) per 16-dim chunk */
    uint32_t qf[D / 16][4];
    {
        const float *qa = q + ((size_t)min(ra, n - 1) * hq + h) * D;
        const float *qb = q + ((size_t)min(rb, n - 1) * hq + h) * D;
#pragma unroll
        for (int kc = 0; kc < D / 16; kc++) {
            const int c0 = kc * 16 + 2 * t, c1 = c0 + 8;
            qf[kc][0] = pack2<T>(qa[c0] * qmul, qa[c0 + 1] * qmul);
            qf[kc][1] = pack2<T>(qb[c0] * qmul, qb[c0 + 1] * qmul);
            qf[kc][2] = pack2<T>(qa[c1] * qmul, qa[c1 + 1] * qmul);
            qf[kc][3] = pack2<T>(qb[c1] * qmul, qb[c1 + 1] * qmul);
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

    const int32_t n_lp = block_last / 16 + 1; /* logical pages the block needs */
    for (int32_t lp0 = 0; lp0 < n_lp; lp0 += KP) {
        __syncthreads();
        /* tile of KP pages -> shared memory (16-byte chunks; slots past `total` zeroed) */
        constexpr int CH = D / 8; /* chunks per key row */
        for (int i = threadIdx.x; i < KP * 16 * CH; i += PF_WARPS * 32) {
            const int key = i / CH, ch = i % CH;
            const int32_t lp = lp0 + key / 16, kpos = lp * 16 + key % 16;
            uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
            if (lp < n_lp && kpos < total) {
                const size_t off = (((size_t)bt[lp] * hkv + kvh) * 16 + key % 16) * D + ch * 8;
                kw = *reinterpret_cast<const uint4 *>(kpool + off);
                vw = *reinterpret_cast<const uint4 *>(vpool + off);
            }
            *reinterpret_cast<uint4 *>(&ks[key][ch * 8]) = kw;
            *reinterpret_cast<uint4 *>(&vs[key][ch * 8]) = vw;
        }
        __syncthreads();
        if (!warp_live) continue;
#pragma unroll 1
        for (int pg = 0; pg < KP; pg++) {
            const int32_t kp0 = (lp0 + pg) * 16;
            if (kp0 > warp_last) break;
            const int kr = pg * 16; /* first shared row of the page */
            /* S = Q K^T: two n-tiles of 8 keys */
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
            /* causal mask: element (row, key kp0 + nt*8 + 2t + j) */
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
            /* P (16 x 16 keys) as the A operand: the S accumulator layout is the A layout */
            uint32_t pa[4];
            pa[0] = pack2<T>(p[0][0], p[0][1]);
            pa[1] = pack2<T>(p[0][2], p[0][3]);
            pa[2] = pack2<T>(p[1][0], p[1][1]);
            pa[3] = pack2<T>(p[1][2], p[1][3]);
            /* O += P V: V fragments of two 8-dim tiles per ldmatrix.x4.trans */
            const int mi = lane >> 3, mr = lane & 7;
#pragma unroll
            for (int nd = 0; nd < D / 8; nd += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, &vs[kr + (mi & 1) * 8 + mr][nd * 8 + (mi >> 1) * 8]);
                mma_op<T>::run(o[nd], pa, b[0], b[1]);
                mma_op<T>::run(o[nd + 1], pa, b[2], b[3]);
            }
        }
    }
    if (!warp_live) return;
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    const float ia = 1.f / l_a, ib = 1.f / l_b;
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
        const int c = nd * 8 + 2 * t;
        if (ra < n) {
            float *oa = out + ((size_t)ra * hq + h) * D + c;
            oa[0] = o[nd][0] * ia;
            oa[1] = o[nd][1] * ia;
        }
        if (rb < n) {
            float *ob = out + ((size_t)rb * hq + h) * D + c;
            ob[0] = o[nd][2] * ib;
            ob[1] = o[nd][3] * ib;
        }
    }
}

template <int D, typename T>
static locks_status prefill_launch_t(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                     const float *q, int32_t hq, float scale, float *out, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads;
    const size_t koff = (size_t)layer * c->kv_layer_elems;
    dim3 grid((unsigned)((n + PF_ROWS - 1) / PF_ROWS), (unsigned)hq);
    prefill_kernel<D, T><<<grid, PF_WARPS * 32, 0, st>>>(c->k + koff, c->v + koff,
                                                        c->block_table + (size_t)seq * c->p.n_pages, hkv, hq / hkv, pos,
                                                        n, q, hq, scale * 1.4426950408889634f, out);
    CU_LAUNCH_CHECK(prefill_kernel);
    return LOCKS_OK;
}

locks_status lg_prefill_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                      const float *q, int32_t hq, float scale, float *out, cudaStream_t st) {
    if (n <= 0) return LOCKS_OK;
    const bool bf = c->p.kv_dtype == LOCKS_DTYPE_BF16;
    switch (c->p.head_dim) {
    case 64:
        return bf ? prefill_launch_t<64, __nv_bfloat16>(c, layer, seq, pos, n, q, hq, scale, out, st)
                  : prefill_launch_t<64, __half>(c, layer, seq, pos, n, q, hq, scale, out, st);
    case 128:
        return bf ? prefill_launch_t<128, __nv_bfloat16>(c, layer, seq, pos, n, q, hq, scale, out, st)
                  : prefill_launch_t<128, __half>(c, layer, seq, pos, n, q, hq, scale, out, st);
    case 256:
        return bf ? prefill_launch_t<256, __nv_bfloat16>(c, layer, seq, pos, n, q, hq, scale, out, st)
                  : prefill_launch_t<256, __half>(c, layer, seq, pos, n, q, hq, scale, out, st);
    default: return LOCKS_ERR_UNSUPPORTED;
    }
}
