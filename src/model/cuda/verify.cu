/*
 * verify.cu — the attention of a speculative verify (K + 1 query rows of one sequence at
 * positions pos .. pos + K), bit for bit the dense decode token's at each row's length.
 *
 * Row r must come out exactly as the decode graph's dense attention of the token at
 * position pos + r would (tests/test_gpu_verify.c compares them with memcmp), so it runs
 * the decode's own code: the queries converted as qprep.cu converts them (kv type, times
 * scale * log2 e), then attend.cu's kernel in its rows mode (the decode kernel with several
 * query rows of one sequence in the MMA tile, each masked to its own length; same pages per
 * split, page-to-warp order and warp merge as the decode at that length, pps from the
 * decode's max_list and engine batch) and the decode's split merge with each row a
 * "sequence" of its own length. A tile holds 16 / G rows, so K/V are read once per
 * ceil(n G / 16) tiles (the tiles of one split run side by side, mostly from L2).
 * Reference: tests/test_gpu_verify.c (float64, and the decode kernel bit for bit).
 */
#include "model_ops.cuh"

#define VQ_WARPS 4

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

/* ws: [ints: slot, ident[n], lens[n]] [q_attn n x hq x d] [part_ml] [part_o] */
size_t lg_verify_ws_bytes(const locks_cuda_cache *c, int32_t n, int32_t hq, int32_t n_seqs, int32_t max_list) {
    const size_t d = (size_t)c->p.head_dim, stride = (size_t)locks_cuda_attend_rows_splits(c, n_seqs, max_list);
    const size_t parts = (size_t)n * hq * stride; /* (row, KV head, split, head of the group) */
    return al256(((size_t)2 * n + 1) * 4) + al256((size_t)n * hq * d * 2) + al256(parts * 8) + parts * d * 4;
}

/* One warp per (row, query head): q_attn = kv type of (q * attn_mul), as qprep_kernel
 * computes it; block 0 also writes the row tables the attention reads. */
template <typename T>
static __global__ void verify_qattn_kernel(const float *__restrict__ q, int32_t seq_stride, int32_t hq, int32_t rows,
                                           int32_t d, float attn_mul, uint16_t *q_attn, int32_t *ints, int32_t seq,
                                           int32_t len0, int32_t n) {
    if (blockIdx.x == 0)
        for (int32_t i = (int32_t)threadIdx.x; i < n; i += (int32_t)blockDim.x) {
            ints[1 + i] = i;
            ints[1 + n + i] = len0 + i;
            if (i == 0) ints[0] = seq;
        }
    const int32_t row = blockIdx.x * VQ_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *x = q + (size_t)(row / hq) * seq_stride + (size_t)(row % hq) * d;
    T *qa = reinterpret_cast<T *>(q_attn) + (size_t)row * d;
    for (int i = lane; i < d; i += 32) qa[i] = kv_traits<T>::from_f(x[i] * attn_mul);
}

locks_status lg_verify_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                     const float *q, int32_t q_stride, int32_t hq, float scale, int32_t n_seqs,
                                     int32_t max_list, void *ws, float *out, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads, d = c->p.head_dim;
    if (n < 1 || pos < 0 || hq % hkv != 0 || hq / hkv > 16 || (int64_t)pos + n > (int64_t)max_list * 16)
        return LOCKS_ERR_INVALID_ARG;
    const size_t stride = (size_t)locks_cuda_attend_rows_splits(c, n_seqs, max_list);
    const size_t parts = (size_t)n * hq * stride;
    char *w = (char *)ws;
    int32_t *ints = (int32_t *)w;
    uint16_t *qa = (uint16_t *)(w + al256(((size_t)2 * n + 1) * 4));
    float2 *part_ml = (float2 *)((char *)qa + al256((size_t)n * hq * d * 2));
    float *part_o = (float *)((char *)part_ml + al256(parts * 8));
    const int32_t rows = n * hq;
    const unsigned blocks = (unsigned)((rows + VQ_WARPS - 1) / VQ_WARPS);
    const float mul = scale * 1.4426950408889634f; /* as locks_cuda_qprep_launch */
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        verify_qattn_kernel<__nv_bfloat16><<<blocks, VQ_WARPS * 32, 0, st>>>(q, q_stride, hq, rows, d, mul, qa, ints,
                                                                            seq, pos + 1, n);
    else
        verify_qattn_kernel<__half><<<blocks, VQ_WARPS * 32, 0, st>>>(q, q_stride, hq, rows, d, mul, qa, ints, seq,
                                                                     pos + 1, n);
    CU_LAUNCH_CHECK(verify_qattn_kernel);
    return locks_cuda_attend_rows_launch(c, layer, n_seqs, max_list, hq, qa, n, pos + 1, ints, ints + 1, ints + 1 + n,
                                         part_o, part_ml, out, st);
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
