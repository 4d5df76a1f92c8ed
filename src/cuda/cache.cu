/*
 * cache.cu — the device cache: allocation (plain cudaMalloc, everything up front),
 * sequence tables mirrored from the host, K/V writes (fp32 -> fp16/bf16 with a
 * non-finite check first) that build the summaries of the pages they fill, read-back
 * helpers for tests, a random fill for benchmarks, and small timing utilities.
 */
#include "common.cuh"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITE_THREADS 256
#define CHECK_THREADS 256
#define FILL_THREADS 256

static void dfree(void *p) {
    if (p) cudaFree(p);
}
#define DFREE(x)                                                                           \
    do {                                                                                   \
        dfree((void *)(x));                                                                \
        (x) = NULL;                                                                        \
    } while (0)

/* ---- range check: flag[0] |= 1 if any element is NaN or |x| > lim (Inf included):
 * lim is the storage type's largest finite value (65504 for fp16: a larger value would
 * be stored as Inf), so such input is refused like NaN, as on the CPU ---------------- */

static __global__ void nonfinite_kernel(const float *__restrict__ x, size_t n, float lim, int32_t *flag) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    int bad = 0;
    for (; i < n; i += stride) bad |= !(fabsf(x[i]) <= lim); /* false for NaN */
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) atomicOr(flag, 1);
}

static locks_status nonfinite_launch(const float *x, size_t n, float lim, int32_t *flag, cudaStream_t st) {
    unsigned blocks = (unsigned)((n + CHECK_THREADS - 1) / CHECK_THREADS);
    if (blocks > 4096) blocks = 4096;
    if (blocks == 0) blocks = 1;
    nonfinite_kernel<<<blocks, CHECK_THREADS, 0, st>>>(x, n, lim, flag);
    CU_LAUNCH_CHECK(nonfinite_kernel);
    return LOCKS_OK;
}

/* common.cuh */
locks_status sync_stack_copies(cudaStream_t st) {
    cudaError_t e = locks_fault_hit() ? cudaErrorUnknown : cudaStreamSynchronize(st);
    if (e == cudaSuccess) return LOCKS_OK;
    locks_log(LOCKS_LOG_ERROR, "cuda: stream synchronisation failed: %s", cudaGetErrorString(e));
    (void)cudaStreamSynchronize(st);
    return LOCKS_ERR_BACKEND;
}

/* ---- K/V write: token-major fp32 [n][Hkv][d] -> pages [page][Hkv][16][d] ------------ */

template <typename T>
static __global__ void write_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                    int32_t pos, int32_t n, int32_t hkv, int32_t d,
                                    const int32_t *__restrict__ bt, uint16_t *kpool,
                                    uint16_t *vpool) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)n * hkv * d;
    if (i >= total) return;
    int32_t dim = (int32_t)(i % d);
    int32_t h = (int32_t)((i / d) % hkv);
    int32_t tok = (int32_t)(i / ((size_t)d * hkv)) + pos;
    int32_t page = bt[tok / 16];
    size_t dst = (((size_t)page * hkv + h) * 16 + (tok % 16)) * d + dim;
    T kk = kv_traits<T>::from_f(k[i]), vv = kv_traits<T>::from_f(v[i]);
    kpool[dst] = *reinterpret_cast<uint16_t *>(&kk);
    vpool[dst] = *reinterpret_cast<uint16_t *>(&vv);
}

/* ---- random fill (benchmarks): hash-based uniform values ---------------------------- */

static __device__ __forceinline__ float hash_unit(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (float)(x >> 40) * (1.f / 16777216.f) * 2.f - 1.f;
}

template <typename T>
static __global__ void fill_kernel(uint16_t *kpool, uint16_t *vpool, size_t n, uint64_t seed, float a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        T kk = kv_traits<T>::from_f(a * hash_unit(seed * 0x9e3779b97f4a7c15ull + 2 * i));
        T vv = kv_traits<T>::from_f(hash_unit(seed * 0x9e3779b97f4a7c15ull + 2 * i + 1));
        kpool[i] = *reinterpret_cast<uint16_t *>(&kk);
        vpool[i] = *reinterpret_cast<uint16_t *>(&vv);
    }
}

/* ---- init / free ---------------------------------------------------------------------- */

extern "C" void locks_cuda_cache_free(locks_cuda_cache **pc) {
    if (!pc || !*pc) return;
    locks_cuda_cache *c = *pc;
    if (c->stream) cudaStreamSynchronize(c->stream);
    DFREE(c->k);
    DFREE(c->v);
    DFREE(c->mu);
    DFREE(c->mu_scale);
    DFREE(c->basis);
    DFREE(c->basis_scale);
    DFREE(c->coef);
    DFREE(c->coef_scale);
    DFREE(c->mu_f);
    DFREE(c->basis_f);
    DFREE(c->coef_f);
    DFREE(c->seq_len);
    DFREE(c->block_table);
    DFREE(c->page_list);
    struct locks_cuda_ws *w = &c->ws;
    DFREE(w->seq_slots);
    DFREE(w->status);
    DFREE(w->q_attn);
    DFREE(w->q_score);
    DFREE(w->q_amax);
    DFREE(w->q_i8);
    DFREE(w->q_isum);
    DFREE(w->scores);
    DFREE(w->lse_part);
    DFREE(w->mass);
    DFREE(w->hist);
    DFREE(w->taken);
    DFREE(w->cand_idx);
    DFREE(w->cand_key);
    DFREE(w->sel);
    DFREE(w->sel_n);
    DFREE(w->part_o);
    DFREE(w->part_ml);
    DFREE(c->flush_buf);
    for (int i = 0; i < 8; i++)
        if (c->ev[i]) cudaEventDestroy(c->ev[i]);
    if (c->own_stream) cudaStreamDestroy(c->own_stream);
    locks_free(c->h_seq_len);
    locks_free(c->ext_k);
    locks_free(c->ext_v);
    locks_free(c);
    *pc = NULL;
}

#define DALLOC(ptr, bytes)                                                                 \
    do {                                                                                   \
        if (locks_fault_hit() || cudaMalloc((void **)&(ptr), (bytes)) != cudaSuccess) {    \
            locks_log(LOCKS_LOG_ERROR, "cuda: cudaMalloc of %zu bytes failed", (size_t)(bytes)); \
            st = LOCKS_ERR_OOM;                                                            \
            goto fail;                                                                     \
        }                                                                                  \
    } while (0)

extern "C" locks_cuda_cache *locks_cuda_cache_init(const locks_cache_params *p, locks_status *err) {
    return locks_cuda_cache_init_ext(p, NULL, NULL, LOCKS_LAYOUT_HND, 0, err);
}

extern "C" locks_cuda_cache *locks_cuda_cache_init_ext(const locks_cache_params *p, const void *const *k_pages,
                                                      const void *const *v_pages, locks_kv_layout layout,
                                                      size_t page_stride, locks_status *err) {
    locks_status st = LOCKS_OK;
    locks_cuda_cache *c = NULL;
    size_t L, H, NP, D, nsum;
    cudaDeviceProp prop;
    if (!p || p->n_layers < 1 || p->n_kv_heads < 1 || p->n_pages < 1 || p->max_seqs < 1 ||
        p->rank < 1 || p->rank > LOCKS_MAX_RANK) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    if ((p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256) ||
        (p->summary_prec != LOCKS_SUMMARY_Q && p->summary_prec != LOCKS_SUMMARY_F32) ||
        (p->kv_dtype != LOCKS_DTYPE_F16 && p->kv_dtype != LOCKS_DTYPE_BF16)) {
        locks_log(LOCKS_LOG_ERROR, "cuda: unsupported cache (head_dim %d, rank %d, prec %d, dtype %d)",
                  p->head_dim, p->rank, (int)p->summary_prec, (int)p->kv_dtype);
        st = LOCKS_ERR_UNSUPPORTED;
        goto fail;
    }
    if (cudaSetDevice(p->device) != cudaSuccess || cudaGetDeviceProperties(&prop, p->device) != cudaSuccess) {
        locks_log(LOCKS_LOG_ERROR, "cuda: no usable device %d", p->device);
        st = LOCKS_ERR_BACKEND;
        goto fail;
    }
    c = (locks_cuda_cache *)locks_alloc(1, sizeof *c);
    if (!c) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    c->p = *p;
    c->rank = p->rank;
    c->rslots = locks_cuda_rank_slots(p->rank);
    c->f32 = p->summary_prec == LOCKS_SUMMARY_F32;
    c->n_sm = prop.multiProcessorCount;
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    if (cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking) != cudaSuccess) {
        st = LOCKS_ERR_BACKEND;
        goto fail;
    }
    c->stream = c->own_stream;
    for (int i = 0; i < 8; i++)
        if (cudaEventCreate(&c->ev[i]) != cudaSuccess) {
            st = LOCKS_ERR_BACKEND;
            goto fail;
        }
    L = (size_t)p->n_layers;
    H = (size_t)p->n_kv_heads;
    NP = (size_t)p->n_pages;
    D = (size_t)p->head_dim;
    c->kv_layer_elems = NP * H * 16 * D;
    nsum = L * H * NP;
    c->page_ld = page_stride ? page_stride : H * 16 * D;
    c->head_ld = layout == LOCKS_LAYOUT_NHD ? D : 16 * D;
    c->tok_ld = layout == LOCKS_LAYOUT_NHD ? H * D : D;
    if (k_pages) { /* the caller's pages: only their addresses are kept */
        c->ext_k = (const uint16_t **)locks_alloc(L, sizeof *c->ext_k);
        c->ext_v = (const uint16_t **)locks_alloc(L, sizeof *c->ext_v);
        if (!c->ext_k || !c->ext_v) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
        for (size_t l = 0; l < L; l++) {
            c->ext_k[l] = (const uint16_t *)k_pages[l];
            c->ext_v[l] = (const uint16_t *)v_pages[l];
        }
    } else {
        DALLOC(c->k, L * c->kv_layer_elems * 2);
        DALLOC(c->v, L * c->kv_layer_elems * 2);
    }
    if (c->f32) {
        DALLOC(c->mu_f, nsum * D * 4);
        DALLOC(c->basis_f, nsum * (size_t)c->rslots * D * 4);
        DALLOC(c->coef_f, nsum * 16 * (size_t)c->rslots * 4);
    } else {
        DALLOC(c->mu, nsum * D);
        DALLOC(c->mu_scale, nsum * 2);
        DALLOC(c->basis, nsum * (size_t)c->rslots * D / 2);
        DALLOC(c->basis_scale, nsum * (size_t)c->rslots * 2);
        DALLOC(c->coef, nsum * 16 * (size_t)c->rslots);
        DALLOC(c->coef_scale, nsum * (size_t)c->rslots * 2);
    }
    DALLOC(c->seq_len, (size_t)p->max_seqs * 4);
    DALLOC(c->block_table, (size_t)p->max_seqs * NP * 4);
    DALLOC(c->page_list, NP * 4);
    if (cudaMemset(c->seq_len, 0, (size_t)p->max_seqs * 4) != cudaSuccess ||
        cudaMemset(c->block_table, 0, (size_t)p->max_seqs * NP * 4) != cudaSuccess) {
        st = LOCKS_ERR_BACKEND;
        goto fail;
    }
    c->h_seq_len = (int32_t *)locks_alloc((size_t)p->max_seqs, sizeof(int32_t));
    if (!c->h_seq_len) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    if (err) *err = LOCKS_OK;
    return c;
fail:
    locks_cuda_cache_free(&c);
    if (err) *err = st;
    return NULL;
}

extern "C" locks_status locks_cuda_seq_sync(locks_cuda_cache *c, int32_t seq, const int32_t *block_table,
                                            int32_t n_pages, int32_t len) {
    if (!c || seq < 0 || seq >= c->p.max_seqs || n_pages < 0 || n_pages > c->p.n_pages || len < 0 ||
        len > 16 * n_pages || (n_pages > 0 && !block_table))
        return LOCKS_ERR_INVALID_ARG;
    /* The table entries the old length covers keep their values (the host changes only
     * entries past them before it commits), so a failure before the length is copied
     * leaves the device as it was. A failure after it puts the old length back. */
    if (n_pages > 0)
        CU_TRY(cudaMemcpyAsync(c->block_table + (size_t)seq * c->p.n_pages, block_table,
                               (size_t)n_pages * 4, cudaMemcpyHostToDevice, c->stream));
    CU_TRY(cudaMemcpyAsync(c->seq_len + seq, &len, 4, cudaMemcpyHostToDevice, c->stream));
    if (sync_stack_copies(c->stream) != LOCKS_OK) { /* &len is a stack address */
        int32_t old = c->h_seq_len[seq];
        (void)cudaMemcpyAsync(c->seq_len + seq, &old, 4, cudaMemcpyHostToDevice, c->stream);
        (void)cudaStreamSynchronize(c->stream);
        return LOCKS_ERR_BACKEND;
    }
    c->h_seq_len[seq] = len;
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_cache_write(locks_cuda_cache *c, int32_t seq, int32_t layer, int32_t pos,
                                               int32_t n, const float *d_k, const float *d_v,
                                               const int32_t *build_pages, int32_t n_build, int *stored) {
    if (stored) *stored = 0;
    if (!c || seq < 0 || seq >= c->p.max_seqs || layer < 0 || layer >= c->p.n_layers || pos < 0 || n < 0 ||
        (n > 0 && (!d_k || !d_v)) || n_build < 0 || n_build > c->p.n_pages || (n_build > 0 && !build_pages))
        return LOCKS_ERR_INVALID_ARG;
    if (n == 0) return LOCKS_OK;
    if (c->ext_k) return LOCKS_ERR_UNSUPPORTED; /* the caller writes its own pages */
    if (pos + n > c->h_seq_len[seq]) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(locks_cuda_ws_reserve(c, 1, c->p.n_kv_heads));
    const size_t elems = (size_t)n * c->p.n_kv_heads * c->p.head_dim;
    int32_t flag = 0;
    CU_TRY(cudaMemsetAsync(c->ws.status, 0, 4, c->stream));
    const float lim = c->p.kv_dtype == LOCKS_DTYPE_BF16 ? FLT_MAX : 65504.0f;
    LOCKS_TRY(nonfinite_launch(d_k, elems, lim, c->ws.status, c->stream));
    LOCKS_TRY(nonfinite_launch(d_v, elems, lim, c->ws.status, c->stream));
    /* the pages to build go up before the first store, so everything that can fail
     * without a device fault happens while the cache is still untouched */
    if (n_build > 0)
        CU_TRY(cudaMemcpyAsync(c->page_list, build_pages, (size_t)n_build * 4, cudaMemcpyHostToDevice, c->stream));
    CU_TRY(cudaMemcpyAsync(&flag, c->ws.status, 4, cudaMemcpyDeviceToHost, c->stream));
    LOCKS_TRY(sync_stack_copies(c->stream)); /* &flag is a stack address */
    if (flag) return LOCKS_ERR_NONFINITE;

    const int32_t *bt = c->block_table + (size_t)seq * c->p.n_pages;
    const unsigned blocks = (unsigned)((elems + WRITE_THREADS - 1) / WRITE_THREADS);
    uint16_t *kp = c->k + (size_t)layer * c->kv_layer_elems, *vp = c->v + (size_t)layer * c->kv_layer_elems;
    if (stored) *stored = 1; /* from here on a failure leaves the slots half-written */
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        write_kernel<__nv_bfloat16><<<blocks, WRITE_THREADS, 0, c->stream>>>(d_k, d_v, pos, n, c->p.n_kv_heads,
                                                                          c->p.head_dim, bt, kp, vp);
    else
        write_kernel<__half><<<blocks, WRITE_THREADS, 0, c->stream>>>(d_k, d_v, pos, n, c->p.n_kv_heads,
                                                                   c->p.head_dim, bt, kp, vp);
    CU_LAUNCH_CHECK(write_kernel);
    if (n_build > 0) LOCKS_TRY(locks_cuda_summary_build(c, layer, c->page_list, n_build));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}

/* ---- read-back --------------------------------------------------------------------- */

static float h2f_host(uint16_t h) { return locks_f16_to_f32(h); }

extern "C" locks_status locks_cuda_summary_get_raw(locks_cuda_cache *c, int32_t layer, int32_t kv_head,
                                                   int32_t page, int8_t *mu_q, uint16_t *mu_scale,
                                                   uint8_t *basis_q, uint16_t *basis_scale, int8_t *coef_q,
                                                   uint16_t *coef_scale) {
    if (!c || layer < 0 || layer >= c->p.n_layers || kv_head < 0 || kv_head >= c->p.n_kv_heads || page < 0 ||
        page >= c->p.n_pages)
        return LOCKS_ERR_INVALID_ARG;
    if (c->f32) return LOCKS_ERR_UNSUPPORTED; /* nothing quantized */
    const size_t D = (size_t)c->p.head_dim, R = (size_t)c->rslots;
    const size_t s = summary_index(c, layer, kv_head) + (size_t)page;
    CU_TRY(cudaStreamSynchronize(c->stream));
    CU_TRY(cudaMemcpy(mu_q, c->mu + s * D, D, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(mu_scale, c->mu_scale + s, 2, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(basis_q, c->basis + s * R * D / 2, R * D / 2, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(basis_scale, c->basis_scale + s * R, R * 2, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(coef_q, c->coef + s * 16 * R, 16 * R, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(coef_scale, c->coef_scale + s * R, R * 2, cudaMemcpyDeviceToHost));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_summary_get(locks_cuda_cache *c, int32_t layer, int32_t kv_head, int32_t page,
                                               float *mu, float *basis, float *coef) {
    if (!c || !mu || !basis || !coef) return LOCKS_ERR_INVALID_ARG;
    if (layer < 0 || layer >= c->p.n_layers || kv_head < 0 || kv_head >= c->p.n_kv_heads || page < 0 ||
        page >= c->p.n_pages)
        return LOCKS_ERR_INVALID_ARG;
    const int D = c->p.head_dim, r = c->rank, R = c->rslots;
    if (c->f32) {
        const size_t s = summary_index(c, layer, kv_head) + (size_t)page;
        float cf[16 * LOCKS_CUDA_RANK_SLOTS];
        CU_TRY(cudaStreamSynchronize(c->stream));
        CU_TRY(cudaMemcpy(mu, c->mu_f + s * D, (size_t)D * 4, cudaMemcpyDeviceToHost));
        CU_TRY(cudaMemcpy(basis, c->basis_f + s * R * D, (size_t)r * D * 4, cudaMemcpyDeviceToHost));
        CU_TRY(cudaMemcpy(cf, c->coef_f + s * 16 * R, (size_t)16 * R * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 16; i++)
            for (int k = 0; k < r; k++) coef[i * r + k] = cf[i * R + k];
        return LOCKS_OK;
    }
    int8_t mu_q[LOCKS_MAX_HEAD_DIM], coef_q[16 * LOCKS_CUDA_RANK_SLOTS];
    uint8_t basis_q[LOCKS_CUDA_RANK_SLOTS * LOCKS_MAX_HEAD_DIM / 2];
    uint16_t mu_s, basis_s[LOCKS_CUDA_RANK_SLOTS], coef_s[LOCKS_CUDA_RANK_SLOTS];
    LOCKS_TRY(locks_cuda_summary_get_raw(c, layer, kv_head, page, mu_q, &mu_s, basis_q, basis_s, coef_q, coef_s));
    for (int i = 0; i < D; i++) mu[i] = h2f_host(mu_s) * (float)mu_q[i];
    for (int k = 0; k < r; k++)
        for (int i = 0; i < D; i++) {
            uint8_t b = basis_q[k * D / 2 + i / 2];
            int nib = (i & 1) ? (b >> 4) : (b & 0xF);
            if (nib >= 8) nib -= 16;
            basis[k * D + i] = h2f_host(basis_s[k]) * (float)nib;
        }
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < r; k++) coef[i * r + k] = h2f_host(coef_s[k]) * (float)coef_q[i * R + k];
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_ext_build(locks_cuda_cache *c, int32_t layer, const int32_t *pages, int32_t n) {
    if (!c || !c->ext_k || layer < 0 || layer >= c->p.n_layers || n < 0 || n > c->p.n_pages) return LOCKS_ERR_INVALID_ARG;
    if (n == 0) return LOCKS_OK;
    CU_TRY(cudaMemcpyAsync(c->page_list, pages, (size_t)n * 4, cudaMemcpyHostToDevice, c->stream));
    LOCKS_TRY(locks_cuda_summary_build(c, layer, c->page_list, n));
    CU_TRY(cudaStreamSynchronize(c->stream)); /* pages is the caller's host array */
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_kv_page_get(locks_cuda_cache *c, int32_t layer, int32_t page, uint16_t *k,
                                               uint16_t *v) {
    if (!c || layer < 0 || layer >= c->p.n_layers || page < 0 || page >= c->p.n_pages) return LOCKS_ERR_INVALID_ARG;
    if (c->ext_k) return LOCKS_ERR_UNSUPPORTED;
    const size_t blk = (size_t)c->p.n_kv_heads * 16 * c->p.head_dim;
    const size_t off = (size_t)layer * c->kv_layer_elems + (size_t)page * blk;
    CU_TRY(cudaStreamSynchronize(c->stream));
    if (k) CU_TRY(cudaMemcpy(k, c->k + off, blk * 2, cudaMemcpyDeviceToHost));
    if (v) CU_TRY(cudaMemcpy(v, c->v + off, blk * 2, cudaMemcpyDeviceToHost));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_fill_random(locks_cuda_cache *c, int32_t layer, uint64_t seed, float a) {
    if (!c || layer < 0 || layer >= c->p.n_layers) return LOCKS_ERR_INVALID_ARG;
    if (c->ext_k) return LOCKS_ERR_UNSUPPORTED;
    uint16_t *kp = c->k + (size_t)layer * c->kv_layer_elems, *vp = c->v + (size_t)layer * c->kv_layer_elems;
    const unsigned blocks = (unsigned)c->n_sm * 16;
    if (c->p.kv_dtype == LOCKS_DTYPE_BF16)
        fill_kernel<__nv_bfloat16><<<blocks, FILL_THREADS, 0, c->stream>>>(kp, vp, c->kv_layer_elems, seed, a);
    else
        fill_kernel<__half><<<blocks, FILL_THREADS, 0, c->stream>>>(kp, vp, c->kv_layer_elems, seed, a);
    CU_LAUNCH_CHECK(fill_kernel);
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}

/* ---- utilities ------------------------------------------------------------------------ */

extern "C" locks_status locks_cuda_sync(locks_cuda_cache *c) {
    if (!c) return LOCKS_ERR_INVALID_ARG;
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

extern "C" locks_status locks_cuda_time(locks_cuda_cache *c, locks_cuda_launch_fn fn, void *arg, int reps,
                                        int trials, double *median_ms) {
    if (!c || !fn || reps < 1 || trials < 1 || trials > 64 || !median_ms) return LOCKS_ERR_INVALID_ARG;
    double t[64];
    LOCKS_TRY(fn(arg)); /* warm-up */
    CU_TRY(cudaStreamSynchronize(c->stream));
    for (int i = 0; i < trials; i++) {
        CU_TRY(cudaEventRecord(c->ev[6], c->stream));
        for (int r = 0; r < reps; r++) LOCKS_TRY(fn(arg));
        CU_TRY(cudaEventRecord(c->ev[7], c->stream));
        CU_TRY(cudaEventSynchronize(c->ev[7]));
        float ms = 0.f;
        CU_TRY(cudaEventElapsedTime(&ms, c->ev[6], c->ev[7]));
        t[i] = (double)ms / reps;
    }
    qsort(t, (size_t)trials, sizeof t[0], cmp_double);
    *median_ms = t[trials / 2];
    return LOCKS_OK;
}

#define FLUSH_BYTES ((size_t)256 << 20)

extern "C" locks_status locks_cuda_flush_l2(locks_cuda_cache *c) {
    if (!c) return LOCKS_ERR_INVALID_ARG;
    if (!c->flush_buf) CU_TRY(cudaMalloc(&c->flush_buf, FLUSH_BYTES));
    CU_TRY(cudaMemsetAsync(c->flush_buf, c->ev[0] ? 1 : 0, FLUSH_BYTES, c->stream));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_time_cold(locks_cuda_cache *c, locks_cuda_launch_fn fn, void *arg, int trials,
                                             double *median_ms) {
    if (!c || !fn || trials < 1 || trials > 64 || !median_ms) return LOCKS_ERR_INVALID_ARG;
    double t[64];
    LOCKS_TRY(fn(arg)); /* warm-up */
    for (int i = 0; i < trials; i++) {
        LOCKS_TRY(locks_cuda_flush_l2(c));
        CU_TRY(cudaEventRecord(c->ev[6], c->stream));
        LOCKS_TRY(fn(arg));
        CU_TRY(cudaEventRecord(c->ev[7], c->stream));
        CU_TRY(cudaEventSynchronize(c->ev[7]));
        float ms = 0.f;
        CU_TRY(cudaEventElapsedTime(&ms, c->ev[6], c->ev[7]));
        t[i] = (double)ms;
    }
    qsort(t, (size_t)trials, sizeof t[0], cmp_double);
    *median_ms = t[trials / 2];
    return LOCKS_OK;
}

extern "C" void *locks_cuda_malloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
    return p;
}
extern "C" void locks_cuda_free_ptr(void **p) {
    if (p && *p) {
        cudaFree(*p);
        *p = NULL;
    }
}
extern "C" locks_status locks_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return LOCKS_OK;
}
extern "C" locks_status locks_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return LOCKS_OK;
}
extern "C" const char *locks_cuda_device_name(locks_cuda_cache *c) { return c ? c->device_name : "?"; }
extern "C" size_t locks_cuda_summary_stored_bytes(int32_t head_dim) {
    return locks_cuda_summary_stored_bytes_of(head_dim, LOCKS_CUDA_MAX_RANK, LOCKS_SUMMARY_Q);
}
extern "C" int32_t locks_cuda_rank_slots(int32_t rank) { return rank <= LOCKS_CUDA_MAX_RANK ? LOCKS_CUDA_MAX_RANK : LOCKS_CUDA_RANK_SLOTS; }
extern "C" size_t locks_cuda_summary_stored_bytes_of(int32_t head_dim, int32_t rank, locks_summary_prec prec) {
    const size_t R = (size_t)locks_cuda_rank_slots(rank), d = (size_t)head_dim;
    if (prec == LOCKS_SUMMARY_F32) return 4 * (d + R * d + 16 * R);
    return d + 2 + R * d / 2 + 2 * R + 16 * R + 2 * R;
}
