/*
 * model_ops.cu — the small per-token kernels of the forward pass on the GPU: embedding
 * gather (times Gemma's sqrt(dim)), RMSNorm, RoPE (adjacent pairs, llama.cpp's GGUF
 * convention, or NeoX's (i, i + n_rot/2)), SwiGLU and GeGLU, the Q/K/V bias and per-head
 * QK-norm of the QKV product, the post-branch norm + residual add (Gemma 3), the
 * decode-time K/V append at device positions, and sampling (greedy, or top-k ->
 * temperature softmax -> top-p -> one draw). Each has a plain C twin in llama.c /
 * sampler.c that the GPU tests compare against.
 */
#include "cuda/common.cuh"
#include "model_ops.cuh"

#include <math.h>

#define ROW_THREADS 256
#define SAMPLE_THREADS 1024
#define SAMPLE_CAND 2048 /* candidate slots: top-k plus ties at the k-th value */

/* ---- 16-bit stores ----------------------------------------------------------------- */

static __device__ __forceinline__ void store_out(void *out, size_t i, float v, int type) {
    if (type == LOCKS_DTYPE_F16) reinterpret_cast<__half *>(out)[i] = __float2half_rn(v);
    else if (type == LOCKS_DTYPE_BF16) reinterpret_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(v);
    else reinterpret_cast<float *>(out)[i] = v;
}
static __device__ __forceinline__ float load16(const void *p, size_t i, int type) {
    if (type == LOCKS_DTYPE_BF16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(p)[i]);
    return __half2float(reinterpret_cast<const __half *>(p)[i]);
}

/* ---- embedding ---------------------------------------------------------------------- */

/* x = E[tok] * scale (llama.c: the row in fp32, then times sqrtf(dim) for Gemma, 1 else) */
static __global__ void embed_kernel(const void *__restrict__ e, int type, const int32_t *__restrict__ tok,
                                    int32_t dim, float scale, float *__restrict__ x) {
    const int32_t t = blockIdx.x;
    const size_t row = (size_t)tok[t] * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) x[(size_t)t * dim + i] = load16(e, row + i, type) * scale;
}

locks_status lg_embed_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t n, int32_t dim, float *x,
                             cudaStream_t st) {
    return lg_embed_scaled_launch(e, type, tok, n, dim, 1.f, x, st);
}

locks_status lg_embed_scaled_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t n, int32_t dim,
                                    float scale, float *x, cudaStream_t st) {
    embed_kernel<<<(unsigned)n, ROW_THREADS, 0, st>>>(e, (int)type, tok, dim, scale, x);
    CU_LAUNCH_CHECK(embed_kernel);
    return LOCKS_OK;
}

/* ---- RMSNorm: one block per row, fp32 sum of squares ---------------------------------- */

static __device__ float block_sum(float v, float *ws) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) ws[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += ws[i];
    return s;
}

static __global__ void rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ w, int32_t dim,
                                      float eps, int type, void *out) {
    __shared__ float ws[32];
    const int32_t t = blockIdx.x;
    const float *xt = x + (size_t)t * dim;
    float ss = 0.f;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xt[i] * xt[i];
    ss = block_sum(ss, ws);
    const float r = rsqrtf(ss / (float)dim + eps);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) store_out(out, (size_t)t * dim + i, xt[i] * r * w[i], type);
}

/* The same norm with the row held in registers: thread i takes elements i + ROW_THREADS k,
 * k < K, loads them all before the first use (one round trip instead of K) and reads x
 * once; the sums are formed in the order of rmsnorm_kernel (per thread ascending k, then
 * block_sum), so the output is bit for bit the same. With programmatic dependent launch
 * (pdl) the norm weights are loaded before the wait and x after it: x is the previous
 * kernel's output, so it is read through a plain pointer (common.cuh's PDL rules). */
template <int K>
static __global__ void __launch_bounds__(ROW_THREADS)
rmsnorm_reg_kernel(const float *x, const float *__restrict__ w, int32_t dim, float eps, int type, void *out) {
    __shared__ float ws[32];
    const int32_t t = blockIdx.x;
    float wv[K], xv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int32_t i = threadIdx.x + ROW_THREADS * k;
        wv[k] = i < dim ? w[i] : 0.f;
    }
    pdl_wait();
    const float *xt = x + (size_t)t * dim;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int32_t i = threadIdx.x + ROW_THREADS * k;
        xv[k] = i < dim ? xt[i] : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (threadIdx.x + ROW_THREADS * k < dim) ss += xv[k] * xv[k];
    ss = block_sum(ss, ws);
    const float r = rsqrtf(ss / (float)dim + eps);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int32_t i = threadIdx.x + ROW_THREADS * k;
        if (i < dim) store_out(out, (size_t)t * dim + i, xv[k] * r * wv[k], type);
    }
}

locks_status lg_rmsnorm_launch_ex(const float *x, const float *w, int32_t n, int32_t dim, float eps, locks_dtype type,
                                  void *out, int how, cudaStream_t st) {
    const int32_t k = (dim + ROW_THREADS - 1) / ROW_THREADS;
    if (how == LG_OPS_PLAIN || k > 32) {
        rmsnorm_kernel<<<(unsigned)n, ROW_THREADS, 0, st>>>(x, w, dim, eps, (int)type, out);
        CU_LAUNCH_CHECK(rmsnorm_kernel);
        return LOCKS_OK;
    }
    void (*kern)(const float *, const float *, int32_t, float, int, void *) =
        k <= 2 ? rmsnorm_reg_kernel<2> : k <= 4 ? rmsnorm_reg_kernel<4> : k <= 8 ? rmsnorm_reg_kernel<8>
        : k <= 16 ? rmsnorm_reg_kernel<16> : rmsnorm_reg_kernel<32>;
    CU_TRY(launch_k(how == LG_OPS_PDL, kern, dim3((unsigned)n), dim3(ROW_THREADS), 0, st, x, w, dim, eps, (int)type, out));
    return LOCKS_OK;
}

locks_status lg_rmsnorm_launch(const float *x, const float *w, int32_t n, int32_t dim, float eps, locks_dtype type,
                               void *out, cudaStream_t st) {
    return lg_rmsnorm_launch_ex(x, w, n, dim, eps, type, out, LG_OPS_FAST, st);
}

/* ---- RoPE: thread per (token, head, pair); angles in double like the CPU -------------- */

static __global__ void rope_kernel(float *x, int32_t n, int32_t row_stride, int32_t n_heads, int32_t head_dim,
                                   int32_t n_rot, const float *__restrict__ inv_freq, const int32_t *__restrict__ pos,
                                   int neox) {
    const int32_t half = n_rot / 2;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * n_heads * half) return;
    const int32_t k = (int32_t)(i % half), h = (int32_t)((i / half) % n_heads), t = (int32_t)(i / ((int64_t)half * n_heads));
    double sn, cs;
    sincos((double)pos[t] * (double)inv_freq[k], &sn, &cs);
    const float c = (float)cs, s = (float)sn;
    /* the pair (2k, 2k+1), or NeoX's (k, k + n_rot/2) */
    float *p = x + (size_t)t * row_stride + (size_t)h * head_dim + (neox ? k : 2 * k);
    const int32_t o = neox ? half : 1;
    const float x0 = p[0], x1 = p[o];
    p[0] = x0 * c - x1 * s;
    p[o] = x0 * s + x1 * c;
}

locks_status lg_rope_launch(float *x, int32_t n, int32_t row_stride, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                            const float *inv_freq, const int32_t *pos, int neox, cudaStream_t st) {
    const int64_t items = (int64_t)n * n_heads * (n_rot / 2);
    if (items == 0) return LOCKS_OK;
    rope_kernel<<<(unsigned)((items + ROW_THREADS - 1) / ROW_THREADS), ROW_THREADS, 0, st>>>(
        x, n, row_stride, n_heads, head_dim, n_rot, inv_freq, pos, neox);
    CU_LAUNCH_CHECK(rope_kernel);
    return LOCKS_OK;
}

/* ---- SwiGLU ------------------------------------------------------------------------------ */

static __global__ void swiglu_kernel(const float *__restrict__ gu, int32_t n, int32_t ffn, int type, void *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * ffn) return;
    const int32_t t = (int32_t)(i / ffn), j = (int32_t)(i % ffn);
    const float g = gu[(size_t)t * 2 * ffn + j], u = gu[(size_t)t * 2 * ffn + ffn + j];
    store_out(out, (size_t)i, g / (1.f + expf(-g)) * u, type);
}

/* swiglu_kernel's arithmetic, launchable with programmatic dependent launch: gu (the
 * previous product's output) is read after the wait, through a plain pointer. */
static __global__ void swiglu_pdl_kernel(const float *gu, int32_t n, int32_t ffn, int type, void *out) {
    pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * ffn) return;
    const int32_t t = (int32_t)(i / ffn), j = (int32_t)(i % ffn);
    const float g = gu[(size_t)t * 2 * ffn + j], u = gu[(size_t)t * 2 * ffn + ffn + j];
    store_out(out, (size_t)i, g / (1.f + expf(-g)) * u, type);
}

locks_status lg_swiglu_launch_ex(const float *gu, int32_t n, int32_t ffn, locks_dtype type, void *out, int how,
                                 cudaStream_t st) {
    const int64_t items = (int64_t)n * ffn;
    const unsigned blocks = (unsigned)((items + ROW_THREADS - 1) / ROW_THREADS);
    if (how == LG_OPS_PLAIN) {
        swiglu_kernel<<<blocks, ROW_THREADS, 0, st>>>(gu, n, ffn, (int)type, out);
        CU_LAUNCH_CHECK(swiglu_kernel);
        return LOCKS_OK;
    }
    CU_TRY(launch_k(how == LG_OPS_PDL, swiglu_pdl_kernel, dim3(blocks), dim3(ROW_THREADS), 0, st, gu, n, ffn, (int)type,
                    out));
    return LOCKS_OK;
}

locks_status lg_swiglu_launch(const float *gu, int32_t n, int32_t ffn, locks_dtype type, void *out, cudaStream_t st) {
    return lg_swiglu_launch_ex(gu, n, ffn, type, out, LG_OPS_PLAIN, st);
}

/* ---- GeGLU (Gemma 3) ----------------------------------------------------------------------- */

/* gelu_tanh(g) * u as vmath.c's AVX2 path forms it: x / (1 + exp(-2 y)) with y =
 * sqrt(2 / pi) (x + 0.044715 x^3) (exp saturating to inf gives -0, the limit). A plain
 * launch: gu is read after the product before it has finished. */
static __global__ void geglu_kernel(const float *__restrict__ gu, int32_t n, int32_t ffn, int type, void *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * ffn) return;
    const int32_t t = (int32_t)(i / ffn), j = (int32_t)(i % ffn);
    const float g = gu[(size_t)t * 2 * ffn + j], u = gu[(size_t)t * 2 * ffn + ffn + j];
    const float y = -2.0f * 0.7978845608028654f * fmaf(0.044715f, g * g * g, g);
    store_out(out, (size_t)i, g / (1.0f + expf(y)) * u, type);
}

locks_status lg_geglu_launch(const float *gu, int32_t n, int32_t ffn, locks_dtype type, void *out, cudaStream_t st) {
    const int64_t items = (int64_t)n * ffn;
    geglu_kernel<<<(unsigned)((items + ROW_THREADS - 1) / ROW_THREADS), ROW_THREADS, 0, st>>>(gu, n, ffn, (int)type,
                                                                                               out);
    CU_LAUNCH_CHECK(geglu_kernel);
    return LOCKS_OK;
}

/* ---- the QKV product's bias and QK-norm (Qwen2, Qwen3, Gemma 3) ------------------------------- */

/* One warp per (row, head) of n rows [q heads | k heads | v heads] (row_stride floats, d
 * wide heads): + b (bias, [qkv_dim], may be NULL), then for the q and k heads with qn / kn
 * (may be NULL) x / sqrt(mean(x^2) + eps) * w, as llama.c's rmsnorm (the sum of squares in
 * double, the factor rounded once to float). */
#define FIX_WARPS 4
static __global__ void __launch_bounds__(FIX_WARPS * 32)
qkv_fix_kernel(float *qkv, int32_t n, int32_t row_stride, int32_t hq, int32_t hkv, int32_t d,
               const float *__restrict__ b, const float *__restrict__ qn, const float *__restrict__ kn, float eps) {
    const int32_t heads = hq + 2 * hkv;
    const int64_t item = (int64_t)blockIdx.x * FIX_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (item >= (int64_t)n * heads) return;
    const int32_t t = (int32_t)(item / heads), j = (int32_t)(item % heads);
    float *x = qkv + (size_t)t * row_stride + (size_t)j * d;
    if (b)
        for (int32_t i = lane; i < d; i += 32) x[i] += b[(size_t)j * d + i];
    const float *w = j < hq ? qn : j < hq + hkv ? kn : NULL;
    if (!w) return;
    double ss = 0.0;
    for (int32_t i = lane; i < d; i += 32) ss += (double)x[i] * (double)x[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float r = (float)(1.0 / sqrt(ss / d + (double)eps));
    for (int32_t i = lane; i < d; i += 32) x[i] = x[i] * r * w[i];
}

locks_status lg_qkv_fix_launch(float *qkv, int32_t n, int32_t row_stride, int32_t hq, int32_t hkv, int32_t d,
                               const float *b, const float *qn, const float *kn, float eps, cudaStream_t st) {
    if (!b && !qn) return LOCKS_OK;
    const int64_t items = (int64_t)n * (hq + 2 * hkv);
    qkv_fix_kernel<<<(unsigned)((items + FIX_WARPS - 1) / FIX_WARPS), FIX_WARPS * 32, 0, st>>>(qkv, n, row_stride, hq,
                                                                                               hkv, d, b, qn, kn, eps);
    CU_LAUNCH_CHECK(qkv_fix_kernel);
    return LOCKS_OK;
}

/* ---- post-branch norm + residual add (Gemma 3) ------------------------------------------------ */

/* x[t] += rms(y[t]) * w, one block per row: llama.c's rmsnorm of the branch output (sum of
 * squares in double, the factor rounded once) and its fp32 add. */
static __global__ void norm_add_kernel(float *__restrict__ x, const float *__restrict__ y, const float *__restrict__ w,
                                       int32_t dim, float eps) {
    __shared__ double ws[32];
    const int32_t t = blockIdx.x;
    const float *yt = y + (size_t)t * dim;
    double ss = 0.0;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)yt[i] * (double)yt[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) ws[warp] = ss;
    __syncthreads();
    double tot = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += ws[i];
    const float r = (float)(1.0 / sqrt(tot / dim + (double)eps));
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) x[(size_t)t * dim + i] += yt[i] * r * w[i];
}

locks_status lg_norm_add_launch(float *x, const float *y, const float *w, int32_t n, int32_t dim, float eps,
                                cudaStream_t st) {
    norm_add_kernel<<<(unsigned)n, ROW_THREADS, 0, st>>>(x, y, w, dim, eps);
    CU_LAUNCH_CHECK(norm_add_kernel);
    return LOCKS_OK;
}

/* ---- decode: positions, K/V append, pages to summarise ------------------------------------ */

/* For each decode row s, the cache slot slot = slots[s] (slots NULL: slot s): pos[s] =
 * seq_len[slot] - 1 (the new token), and build[s] = the physical page that token fills, or
 * -1 if the page is not full yet. An idle row (slot < 0) gets pos -1 and build -1: the
 * attention prep then writes nothing for it and no summary is built. */
static __device__ __forceinline__ void prep_row(const int32_t *__restrict__ slots, const int32_t *__restrict__ seq_len,
                                                const int32_t *__restrict__ bt, int32_t n_pages_pool, int32_t s,
                                                int32_t *pos, int32_t *build) {
    const int32_t slot = slots ? slots[s] : s;
    if (slot < 0) {
        pos[s] = -1;
        build[s] = -1;
        return;
    }
    const int32_t p = seq_len[slot] - 1;
    pos[s] = p;
    build[s] = (p % 16 == 15) ? bt[(size_t)slot * n_pages_pool + p / 16] : -1;
}

static __global__ void decode_prep_kernel(const int32_t *__restrict__ slots, const int32_t *__restrict__ seq_len,
                                          const int32_t *__restrict__ bt, int32_t n_pages_pool, int32_t n_seqs,
                                          int32_t *pos, int32_t *build) {
    for (int32_t s = threadIdx.x; s < n_seqs; s += blockDim.x) prep_row(slots, seq_len, bt, n_pages_pool, s, pos, build);
}

/* The decode token's first kernel: embed_kernel's gather of row blockIdx.x and, in block 0,
 * decode_prep_kernel's positions and pages to summarise (one launch instead of two). */
static __global__ void embed_prep_kernel(const void *__restrict__ e, int type, const int32_t *__restrict__ tok,
                                         int32_t dim, float scale, float *__restrict__ x, const int32_t *__restrict__ slots,
                                         const int32_t *__restrict__ seq_len, const int32_t *__restrict__ bt,
                                         int32_t n_pages_pool, int32_t n_seqs, int32_t *pos, int32_t *build) {
    const int32_t t = blockIdx.x;
    if (t == 0)
        for (int32_t s = threadIdx.x; s < n_seqs; s += blockDim.x) prep_row(slots, seq_len, bt, n_pages_pool, s, pos, build);
    const size_t row = (size_t)tok[t] * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) x[(size_t)t * dim + i] = load16(e, row + i, type) * scale;
}

locks_status lg_embed_prep_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t dim, float scale, float *x,
                                  const int32_t *slots, const int32_t *seq_len, const int32_t *bt, int32_t n_pages_pool,
                                  int32_t n_seqs, int32_t *pos, int32_t *build, cudaStream_t st) {
    embed_prep_kernel<<<(unsigned)n_seqs, ROW_THREADS, 0, st>>>(e, (int)type, tok, dim, scale, x, slots, seq_len, bt,
                                                                 n_pages_pool, n_seqs, pos, build);
    CU_LAUNCH_CHECK(embed_prep_kernel);
    return LOCKS_OK;
}

locks_status lg_decode_prep_launch(const int32_t *slots, const int32_t *seq_len, const int32_t *bt, int32_t n_pages_pool,
                                   int32_t n_seqs, int32_t *pos, int32_t *build, cudaStream_t st) {
    decode_prep_kernel<<<1, 32, 0, st>>>(slots, seq_len, bt, n_pages_pool, n_seqs, pos, build);
    CU_LAUNCH_CHECK(decode_prep_kernel);
    return LOCKS_OK;
}

/* K/V of the new token of decode row blockIdx.y (cache slot slots[row], slots NULL: the
 * row; pos < 0: an idle row, nothing written): rows of qkv [q | k | v] (row_stride floats,
 * k at k_off, v at k_off + kv_dim) -> page slot pos % 16 of pool layer kpool/vpool. */
template <typename T>
static __global__ void kv_append_kernel(const float *__restrict__ qkv, int32_t row_stride, int32_t k_off, int32_t hkv,
                                        int32_t d, const int32_t *__restrict__ pos, const int32_t *__restrict__ slots,
                                        const int32_t *__restrict__ bt, int32_t n_pages_pool, uint16_t *kpool,
                                        uint16_t *vpool) {
    const int32_t s = blockIdx.y;
    const int32_t p = pos[s];
    if (p < 0) return;
    const int32_t page = bt[(size_t)(slots ? slots[s] : s) * n_pages_pool + p / 16];
    const int32_t kv_dim = hkv * d;
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < kv_dim; i += gridDim.x * blockDim.x) {
        const int32_t h = i / d, dim = i % d;
        const size_t dst = (((size_t)page * hkv + h) * 16 + (p % 16)) * d + dim;
        const float *row = qkv + (size_t)s * row_stride + k_off;
        T kk = kv_traits<T>::from_f(row[i]), vv = kv_traits<T>::from_f(row[kv_dim + i]);
        kpool[dst] = *reinterpret_cast<uint16_t *>(&kk);
        vpool[dst] = *reinterpret_cast<uint16_t *>(&vv);
    }
}

locks_status lg_kv_append_launch(locks_cuda_cache *c, int32_t layer, const float *qkv, int32_t row_stride, int32_t k_off,
                                 const int32_t *pos, const int32_t *slots, int32_t n_seqs, cudaStream_t st) {
    const int32_t kv_dim = c->p.n_kv_heads * c->p.head_dim;
    dim3 grid((unsigned)((kv_dim + ROW_THREADS - 1) / ROW_THREADS), (unsigned)n_seqs);
    uint16_t *kp = c->k + (size_t)layer * c->kv_layer_elems, *vp = c->v + (size_t)layer * c->kv_layer_elems;
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        kv_append_kernel<__nv_bfloat16><<<grid, ROW_THREADS, 0, st>>>(qkv, row_stride, k_off, c->p.n_kv_heads,
                                                                     c->p.head_dim, pos, slots, c->block_table,
                                                                     c->p.n_pages, kp, vp);
    else
        kv_append_kernel<__half><<<grid, ROW_THREADS, 0, st>>>(qkv, row_stride, k_off, c->p.n_kv_heads, c->p.head_dim,
                                                              pos, slots, c->block_table, c->p.n_pages, kp, vp);
    CU_LAUNCH_CHECK(kv_append_kernel);
    return LOCKS_OK;
}

/* ---- sampling: one block per row ------------------------------------------------------------ */

/* Order-preserving map of a float to uint32 (larger float -> larger key; NaN ranks first). */
static __device__ __forceinline__ uint32_t f2key(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __host__ __device__ __forceinline__ float uniform_of(uint64_t seed, uint64_t counter, int32_t row) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + counter * 0xBF58476D1CE4E5B9ull + (uint64_t)(row + 1) * 0x94D049BB133111EBull;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (float)(x >> 40) * (1.0f / 16777216.0f);
}

extern "C" float lg_sample_uniform(uint64_t seed, uint64_t counter, int32_t row) { return uniform_of(seed, counter, row); }

static __device__ uint32_t block_count(uint32_t v, uint32_t *ws) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) ws[warp] = v;
    __syncthreads();
    uint32_t s = 0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += ws[i];
    return s;
}

/* Greedy: argmax, lowest id on ties. Otherwise exactly sampler.c's chain on the top
 * k = min(top_k, LG_MAX_TOPK, n_vocab) logits (sorted by logit desc, id asc): softmax at
 * temperature, top-p prefix, one draw r = u * sum (double). The k-th largest key is found
 * by bisection on the order-preserving key bits (32 counting passes). */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *__restrict__ logits, int32_t n_vocab, const lg_sample_params *__restrict__ pp,
              uint64_t *counter, int32_t *out) {
    __shared__ uint32_t ws[32];
    __shared__ uint32_t cand_key[SAMPLE_CAND];
    __shared__ int32_t cand_id[SAMPLE_CAND];
    __shared__ int32_t sorted[LG_MAX_TOPK];
    __shared__ uint32_t n_cand;
    const int32_t row = blockIdx.x;
    const float *x = logits + (size_t)row * n_vocab;
    const lg_sample_params p = *pp;
    const uint64_t cnt = *counter;
    if (p.temp <= 0.f) return; /* greedy: argmax_kernel */
    int32_t k = p.top_k > 0 && p.top_k < LG_MAX_TOPK ? p.top_k : LG_MAX_TOPK;
    if (k > n_vocab) k = n_vocab;
    /* largest threshold T with count(key >= T) >= k */
    /* 64-bit bounds: with 32 bits, hi - lo + 1 wraps to 0 on the first pass (lo = 0,
     * hi = 2^32 - 1) and the loop never ends */
    uint64_t lo = 0u, hi = 0xffffffffull; /* count(key >= lo) >= k always */
    while (lo < hi) {
        const uint64_t mid = (lo + hi + 1u) / 2u;
        uint32_t cnt_ge = 0;
        for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) cnt_ge += (uint64_t)f2key(x[i]) >= mid;
        cnt_ge = block_count(cnt_ge, ws);
        if (cnt_ge >= (uint32_t)k) lo = mid;
        else hi = mid - 1u;
    }
    if (threadIdx.x == 0) n_cand = 0;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
        const uint32_t key = f2key(x[i]);
        if ((uint64_t)key >= lo) {
            const uint32_t slot = atomicAdd(&n_cand, 1u);
            if (slot < SAMPLE_CAND) {
                cand_key[slot] = key;
                cand_id[slot] = i;
            }
        }
    }
    __syncthreads();
    const int32_t nc = n_cand < SAMPLE_CAND ? (int32_t)n_cand : SAMPLE_CAND;
    /* rank of each candidate (key desc, id asc); the first k go to sorted[] */
    for (int32_t a = threadIdx.x; a < nc; a += blockDim.x) {
        int32_t rank = 0;
        for (int32_t b = 0; b < nc; b++)
            rank += cand_key[b] > cand_key[a] || (cand_key[b] == cand_key[a] && cand_id[b] < cand_id[a]);
        if (rank < k) sorted[rank] = cand_id[a];
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (nc < k) k = nc;
    const float mx = x[sorted[0]];
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) sum += (double)expf((x[sorted[i]] - mx) / p.temp);
    if (p.top_p < 1.f) {
        double cum = 0.0;
        int32_t keep = k;
        for (int32_t i = 0; i < k; i++) {
            cum += (double)expf((x[sorted[i]] - mx) / p.temp) / sum;
            if (cum >= (double)p.top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
        sum = 0.0;
        for (int32_t i = 0; i < k; i++) sum += (double)expf((x[sorted[i]] - mx) / p.temp);
    }
    const double r = (double)uniform_of(p.seed, cnt, row) * sum;
    double cum = 0.0;
    int32_t pick = sorted[k - 1];
    for (int32_t i = 0; i < k; i++) {
        cum += (double)expf((x[sorted[i]] - mx) / p.temp);
        if (r < cum) {
            pick = sorted[i];
            break;
        }
    }
    out[row] = pick;
}

/* Greedy (temp <= 0): argmax of each row, lowest id on ties, over ARGMAX_BLOCKS blocks
 * per row: each block's maximum of (key, ~id) goes to part[row][block]; the block that
 * finishes last (ticket) takes the maximum of the partials, writes the token and resets
 * the ticket for the next call. Exact and order-free, so the result does not depend on
 * which block finishes last. Block (0, 0) also advances the draw counter (after
 * sample_kernel, which read it, in stream order) whatever the temperature. */
#define ARGMAX_BLOCKS 64
#define ARGMAX_THREADS 256

static __device__ __forceinline__ unsigned long long max_u64(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}

static __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_kernel(const float *__restrict__ logits, int32_t n_vocab, const lg_sample_params *__restrict__ pp,
              uint64_t *counter, unsigned long long *part, unsigned int *ticket, int32_t *out) {
    __shared__ unsigned long long wmax[ARGMAX_THREADS / 32];
    __shared__ unsigned int last;
    const int32_t row = blockIdx.y;
    if (blockIdx.x == 0 && row == 0 && threadIdx.x == 0) *counter += 1;
    if (pp->temp > 0.f) return;
    const float *x = logits + (size_t)row * n_vocab;
    const int32_t per = (n_vocab + ARGMAX_BLOCKS - 1) / ARGMAX_BLOCKS;
    const int32_t lo = blockIdx.x * per, hi = lo + per < n_vocab ? lo + per : n_vocab;
    unsigned long long mine = 0ull;
    for (int32_t i = lo + threadIdx.x; i < hi; i += ARGMAX_THREADS) /* larger key first, then lower id */
        mine = max_u64(mine, ((unsigned long long)f2key(x[i]) << 32) | (uint32_t)(~(uint32_t)i));
    for (int o = 16; o > 0; o >>= 1) mine = max_u64(mine, __shfl_xor_sync(0xffffffffu, mine, o));
    if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long b = 0ull;
        for (int w = 0; w < ARGMAX_THREADS / 32; w++) b = max_u64(b, wmax[w]);
        part[(size_t)row * ARGMAX_BLOCKS + blockIdx.x] = b;
        __threadfence();
        last = atomicAdd(&ticket[row], 1u) == ARGMAX_BLOCKS - 1;
    }
    __syncthreads();
    if (!last) return;
    if (threadIdx.x < 32) {
        __threadfence();
        unsigned long long b = 0ull;
        for (int32_t k = threadIdx.x; k < ARGMAX_BLOCKS; k += 32)
            b = max_u64(b, __ldcg(&part[(size_t)row * ARGMAX_BLOCKS + k]));
        for (int o = 16; o > 0; o >>= 1) b = max_u64(b, __shfl_xor_sync(0xffffffffu, b, o));
        if (threadIdx.x == 0) {
            out[row] = (int32_t)(~(uint32_t)(b & 0xffffffffull));
            ticket[row] = 0u;
        }
    }
}

extern "C" size_t lg_sample_ws_bytes(int32_t n_rows) {
    return (size_t)n_rows * ARGMAX_BLOCKS * sizeof(unsigned long long) + (size_t)n_rows * sizeof(unsigned int);
}

locks_status lg_sample_launch(const float *logits, int32_t n_rows, int32_t n_vocab, const lg_sample_params *d_p,
                              uint64_t *d_counter, uint64_t *d_ws, int32_t ws_rows, int32_t *d_tok, cudaStream_t st) {
    sample_kernel<<<(unsigned)n_rows, SAMPLE_THREADS, 0, st>>>(logits, n_vocab, d_p, d_counter, d_tok);
    CU_LAUNCH_CHECK(sample_kernel);
    unsigned long long *part = reinterpret_cast<unsigned long long *>(d_ws);
    /* at ws_rows, not n_rows: a launch of fewer rows must not take another row's partials
     * (left nonzero by a wider launch) for its tickets */
    unsigned int *ticket = reinterpret_cast<unsigned int *>(part + (size_t)ws_rows * ARGMAX_BLOCKS);
    argmax_kernel<<<dim3(ARGMAX_BLOCKS, (unsigned)n_rows), ARGMAX_THREADS, 0, st>>>(logits, n_vocab, d_p, d_counter,
                                                                                   part, ticket, d_tok);
    CU_LAUNCH_CHECK(argmax_kernel);
    return LOCKS_OK;
}

/* ---- random weights (benchmarks) --------------------------------------------------------------- */

static __device__ __forceinline__ float hash_pm1(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (float)(x >> 40) * (1.f / 16777216.f) * 2.f - 1.f;
}

static __global__ void fill16_kernel(void *dst, size_t n, int type, uint64_t seed, float a) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        store_out(dst, i, a * hash_pm1(seed * 0x9e3779b97f4a7c15ull + i), type);
}
static __global__ void fill_f32_kernel(float *dst, size_t n, float v) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = v;
}

locks_status lg_fill16_launch(void *dst, size_t n, locks_dtype type, uint64_t seed, float a, cudaStream_t st) {
    fill16_kernel<<<4096, ROW_THREADS, 0, st>>>(dst, n, (int)type, seed, a);
    CU_LAUNCH_CHECK(fill16_kernel);
    return LOCKS_OK;
}
locks_status lg_fill_f32_launch(float *dst, size_t n, float v, cudaStream_t st) {
    fill_f32_kernel<<<256, ROW_THREADS, 0, st>>>(dst, n, v);
    CU_LAUNCH_CHECK(fill_f32_kernel);
    return LOCKS_OK;
}

/* ---- fp32 -> 16-bit (inputs of the products that follow attention) ------------------------------ */

static __global__ void cast_kernel(const float *__restrict__ x, size_t n, int type, void *out) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        store_out(out, i, x[i], type);
}

/* cast_kernel launchable with programmatic dependent launch (x read after the wait). */
static __global__ void cast_pdl_kernel(const float *x, size_t n, int type, void *out) {
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        store_out(out, i, x[i], type);
}

locks_status lg_cast_launch_ex(const float *x, size_t n, locks_dtype type, void *out, int how, cudaStream_t st) {
    size_t blocks = (n + ROW_THREADS - 1) / ROW_THREADS;
    if (blocks > 4096) blocks = 4096;
    if (how == LG_OPS_PLAIN) {
        cast_kernel<<<(unsigned)blocks, ROW_THREADS, 0, st>>>(x, n, (int)type, out);
        CU_LAUNCH_CHECK(cast_kernel);
        return LOCKS_OK;
    }
    CU_TRY(launch_k(how == LG_OPS_PDL, cast_pdl_kernel, dim3((unsigned)blocks), dim3(ROW_THREADS), 0, st, x, n,
                    (int)type, out));
    return LOCKS_OK;
}

locks_status lg_cast_launch(const float *x, size_t n, locks_dtype type, void *out, cudaStream_t st) {
    return lg_cast_launch_ex(x, n, type, out, LG_OPS_PLAIN, st);
}
