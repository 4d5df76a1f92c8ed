/*
 * attn_prep.cu — the GPU engine's decode-time preparation of one layer's attention in one
 * kernel (it replaced two RoPE launches, a 2D copy of the queries and the K/V append):
 * RoPE of the new token's query and key heads in place in its [q | k | v] row (the
 * adjacent-pair convention, or with neox the pairs (i, i + n_rot/2) of Qwen and Gemma, and
 * the arithmetic of model_ops.cu's rope_kernel: angle pos * inv_freq in double, rotation
 * in float), then the token's K and V rounded to the
 * cache's type and stored in page slot pos % 16. The step's qprep reads the rotated queries
 * straight from the rows (locks_cuda_qprep_launch's seq_stride), so no copy is made.
 * One warp per (sequence, head) over the hq query heads and the hkv KV heads; positions,
 * the rows' cache slots and block tables are read on the device, so the kernel stays valid
 * in a decode graph; a row whose position is -1 (an idle row of a subset step) is skipped.
 * The summary of a page the token fills is built by the next launch (summary.cu): it needs
 * every key of the page, and the step's score kernel may read summaries before its
 * programmatic-launch wait, so the build must be a completed kernel ahead of qprep (with
 * the full selector nothing reads summaries, and the engine builds on a forked branch).
 * The engine launches this kernel with programmatic dependent launch after the QKV
 * product: it waits before it reads anything (a no-op in a plain launch).
 */
#include "cuda/common.cuh"
#include "model_ops.cuh"

#define PREP_WARPS 4

template <typename T>
static __global__ void __launch_bounds__(PREP_WARPS * 32)
attn_prep_kernel(float *qkv, int32_t row_stride, int32_t hq, int32_t hkv, int32_t d, int32_t n_rot,
                 const float *__restrict__ inv_freq, const int32_t *__restrict__ pos,
                 const int32_t *__restrict__ slots, const int32_t *__restrict__ bt, int32_t n_pages_pool,
                 uint16_t *kpool, uint16_t *vpool, int32_t n_items, int neox) {
    pdl_wait(); /* qkv is the previous product's output (a no-op in a plain launch) */
    const int32_t item = blockIdx.x * PREP_WARPS + (int32_t)(threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (item >= n_items) return;
    const int32_t nh = hq + hkv, s = item / nh, j = item % nh;
    const int32_t p = pos[s];
    if (p < 0) return; /* an idle decode row (model_ops.cu's prep): nothing to rotate or store */
    /* head j of the row: query heads first, then the key heads (k starts at hq * d) */
    float *x = qkv + (size_t)s * row_stride + (size_t)j * d;
    const int32_t o = neox ? n_rot / 2 : 1; /* the pair (i0, i0 + o) */
    for (int32_t k = lane; k < n_rot / 2; k += 32) {
        double sn, cs;
        sincos((double)p * (double)inv_freq[k], &sn, &cs);
        const float c = (float)cs, sf = (float)sn;
        const int32_t i0 = neox ? k : 2 * k;
        const float x0 = x[i0], x1 = x[i0 + o];
        x[i0] = x0 * c - x1 * sf;
        x[i0 + o] = x0 * sf + x1 * c;
    }
    if (j < hq) return;
    __syncwarp(); /* the lanes store dimensions other lanes rotated */
    const int32_t h = j - hq;
    const int32_t page = bt[(size_t)(slots ? slots[s] : s) * n_pages_pool + p / 16];
    const size_t dst = (((size_t)page * hkv + h) * 16 + (p % 16)) * d;
    const float *v = x + (size_t)hkv * d; /* v head h sits kv_dim after k head h */
    for (int32_t i = lane; i < d; i += 32) {
        T kk = kv_traits<T>::from_f(x[i]), vv = kv_traits<T>::from_f(v[i]);
        kpool[dst + i] = *reinterpret_cast<uint16_t *>(&kk);
        vpool[dst + i] = *reinterpret_cast<uint16_t *>(&vv);
    }
}

locks_status lg_attn_prep_launch_ex(locks_cuda_cache *c, int32_t layer, float *qkv, int32_t row_stride, int32_t hq,
                                    int32_t n_rot, const float *inv_freq, const int32_t *pos, const int32_t *slots,
                                    int32_t n_seqs, int neox, int pdl, cudaStream_t st) {
    if (!c->k) return LOCKS_ERR_UNSUPPORTED; /* caller-owned pages: the engine does not write them */
    const int32_t hkv = c->p.n_kv_heads, d = c->p.head_dim;
    const int32_t items = n_seqs * (hq + hkv);
    const unsigned blocks = (unsigned)((items + PREP_WARPS - 1) / PREP_WARPS);
    uint16_t *kp = c->k + (size_t)layer * c->kv_layer_elems, *vp = c->v + (size_t)layer * c->kv_layer_elems;
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        CU_TRY(launch_k(pdl, attn_prep_kernel<__nv_bfloat16>, dim3(blocks), dim3(PREP_WARPS * 32), 0, st, qkv, row_stride,
                        hq, hkv, d, n_rot, inv_freq, pos, slots, (const int32_t *)c->block_table, c->p.n_pages, kp, vp,
                        items, neox));
    else
        CU_TRY(launch_k(pdl, attn_prep_kernel<__half>, dim3(blocks), dim3(PREP_WARPS * 32), 0, st, qkv, row_stride, hq,
                        hkv, d, n_rot, inv_freq, pos, slots, (const int32_t *)c->block_table, c->p.n_pages, kp, vp,
                        items, neox));
    return LOCKS_OK;
}

locks_status lg_attn_prep_launch(locks_cuda_cache *c, int32_t layer, float *qkv, int32_t row_stride, int32_t hq,
                                 int32_t n_rot, const float *inv_freq, const int32_t *pos, int32_t n_seqs,
                                 cudaStream_t st) {
    return lg_attn_prep_launch_ex(c, layer, qkv, row_stride, hq, n_rot, inv_freq, pos, NULL, n_seqs, 0, 0, st);
}

locks_status lg_attn_prep_rows_launch(locks_cuda_cache *c, int32_t layer, float *qkv, int32_t row_stride, int32_t hq,
                                      int32_t n_rot, const float *inv_freq, const int32_t *pos, int32_t n,
                                      int32_t seq, int neox, cudaStream_t st) {
    if (!c->k) return LOCKS_ERR_UNSUPPORTED;
    const int32_t hkv = c->p.n_kv_heads, d = c->p.head_dim;
    const int32_t items = n * (hq + hkv);
    const unsigned blocks = (unsigned)((items + PREP_WARPS - 1) / PREP_WARPS);
    uint16_t *kp = c->k + (size_t)layer * c->kv_layer_elems, *vp = c->v + (size_t)layer * c->kv_layer_elems;
    /* every row reads the block-table row of seq: the table at that row, a row stride of 0 */
    const int32_t *bt = c->block_table + (size_t)seq * c->p.n_pages;
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        CU_TRY(launch_k(0, attn_prep_kernel<__nv_bfloat16>, dim3(blocks), dim3(PREP_WARPS * 32), 0, st, qkv, row_stride,
                        hq, hkv, d, n_rot, inv_freq, pos, (const int32_t *)NULL, bt, (int32_t)0, kp, vp, items, neox));
    else
        CU_TRY(launch_k(0, attn_prep_kernel<__half>, dim3(blocks), dim3(PREP_WARPS * 32), 0, st, qkv, row_stride, hq,
                        hkv, d, n_rot, inv_freq, pos, (const int32_t *)NULL, bt, (int32_t)0, kp, vp, items, neox));
    return LOCKS_OK;
}
