/*
 * stream.cu — which CUDA stream a device cache issues its work on. By default its own
 * non-blocking stream (created at init); locks_cache_set_stream points it at the
 * caller's (e.g. torch.cuda.current_stream()), so the caller's kernels and the
 * cache's are ordered by the stream itself, with no host wait between them. Also the
 * capturable step plans (locks_step_plan, below), whose entries take the stream per
 * call and only enqueue on it.
 */
#include "common.cuh"

#include <math.h>
#include <string.h>

extern "C" locks_status locks_cuda_set_stream(locks_cuda_cache *c, void *stream) {
    if (!c) return LOCKS_ERR_INVALID_ARG;
    cudaStream_t next = stream ? (cudaStream_t)stream : c->own_stream;
    if (next == c->stream) return LOCKS_OK;
    /* work already issued on the old stream comes first: an event, not a host wait */
    CU_TRY(cudaEventRecord(c->ev[7], c->stream));
    CU_TRY(cudaStreamWaitEvent(next, c->ev[7], 0));
    c->stream = next;
    return LOCKS_OK;
}

/* ---- capturable step plans ---------------------------------------------------------
 * locks.h, "Capturable decode step". A plan holds what the synchronous step checks on
 * the host every call, fixed at set-up: the batch's slots (also in device memory, so a
 * step puts them into the workspace with a device-to-device copy), the parameters, the
 * grid sizes for max_ctx. Its per-step entries only enqueue: kernels and device-side
 * copies on the caller's stream, nothing that waits, allocates or reads host memory
 * when the work runs. What the host would have checked is checked on the device and
 * or'ed into the plan's status word. While an entry enqueues, c->stream is the
 * caller's stream (the step's launch helpers issue on c->stream), then goes back. */

#define PLAN_MAX_NEW 64                        /* tokens one pages_filled may cover */
#define PLAN_FILL_PER_SEQ (PLAN_MAX_NEW / 16 + 1) /* pages n_new tokens can fill */

struct locks_cuda_plan {
    locks_cuda_cache *c;
    int32_t n_seqs, hq, max_ctx, max_pages, max_list;
    locks_step_params p;
    float scale;
    int32_t *seq_ids;   /* [n_seqs] host */
    int32_t *d_slots;   /* [n_seqs] the same, device */
    uint32_t *d_status; /* [1] LOCKS_DEV_* bits, sticky */
    int32_t *d_fill;    /* [n_seqs][PLAN_FILL_PER_SEQ] pages a pages_filled builds, -1: none */
    cudaStream_t last;  /* the stream of the last enqueue (0: the legacy default stream) */
    int used;           /* something was enqueued on last */
};

/* Per sequence (one block each): the new length and table, checked, then stored. */
static __global__ void plan_set_lens_kernel(const int32_t *__restrict__ slots, const int32_t *__restrict__ lens,
                                            const int32_t *__restrict__ tables, int32_t stride, int32_t max_ctx,
                                            int32_t npool, int32_t *__restrict__ seq_len,
                                            int32_t *__restrict__ block_table, uint32_t *__restrict__ status) {
    const int32_t i = blockIdx.x, slot = slots[i], len = lens[i];
    const int32_t np = (len + 15) / 16;
    const int ok = len >= 0 && len <= max_ctx && (!tables || np <= stride);
    int bad = !ok;
    if (ok && tables)
        for (int32_t j = threadIdx.x; j < np; j += blockDim.x) {
            const int32_t v = tables[(size_t)i * stride + j];
            if (v < 0 || v >= npool) bad = 1;
        }
    bad = __syncthreads_or(bad);
    if (bad) {
        if (threadIdx.x == 0) atomicOr(status, LOCKS_DEV_BAD_LEN);
        return;
    }
    if (tables)
        for (int32_t j = threadIdx.x; j < np; j += blockDim.x)
            block_table[(size_t)slot * npool + j] = tables[(size_t)i * stride + j];
    if (threadIdx.x == 0) seq_len[slot] = len;
}

/* The physical pages the last n_new tokens of each sequence filled (-1: none). */
static __global__ void plan_fill_list_kernel(const int32_t *__restrict__ slots, const int32_t *__restrict__ seq_len,
                                             const int32_t *__restrict__ block_table, int32_t npool, int32_t n_seqs,
                                             int32_t n_new, int32_t *__restrict__ list) {
    for (int32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n_seqs * PLAN_FILL_PER_SEQ;
         idx += gridDim.x * blockDim.x) {
        const int32_t slot = slots[idx / PLAN_FILL_PER_SEQ], len = seq_len[slot];
        const int32_t first = (len > n_new ? len - n_new : 0) / 16, lp = first + idx % PLAN_FILL_PER_SEQ;
        list[idx] = lp < len / 16 ? block_table[(size_t)slot * npool + lp] : -1;
    }
}

/* What the synchronous step refuses on the host, found on the device (after qprep,
 * whose non-finite flag it folds in). */
static __global__ void plan_check_kernel(const int32_t *__restrict__ slots, const int32_t *__restrict__ seq_len,
                                         int32_t n_seqs, int32_t budget, int32_t n_sink, int32_t n_recent,
                                         const int32_t *__restrict__ ws_status, uint32_t *__restrict__ status) {
    uint32_t bits = 0;
    for (int32_t i = threadIdx.x; i < n_seqs; i += blockDim.x) {
        const int32_t len = seq_len[slots[i]];
        if (len <= 0) {
            bits |= LOCKS_DEV_EMPTY;
            continue;
        }
        const locks_plan pl = locks_plan_make(len, budget, n_sink, n_recent, 0);
        if (!pl.dense && pl.k < 0) bits |= LOCKS_DEV_BUDGET;
    }
    if (threadIdx.x == 0 && (ws_status[0] & 1)) bits |= LOCKS_DEV_NONFINITE;
    if (bits) atomicOr(status, bits);
}

extern "C" void locks_cuda_plan_free(locks_cuda_plan **ppl) {
    if (!ppl || !*ppl) return;
    locks_cuda_plan *pl = *ppl;
    if (pl->used) cudaStreamSynchronize(pl->last);
    if (pl->d_slots) cudaFree(pl->d_slots);
    if (pl->d_status) cudaFree(pl->d_status);
    if (pl->d_fill) cudaFree(pl->d_fill);
    locks_free(pl->seq_ids);
    locks_free(pl);
    *ppl = NULL;
}

extern "C" locks_cuda_plan *locks_cuda_plan_init(locks_cuda_cache *c, const int32_t *seq_ids, int32_t n_seqs,
                                                 int32_t hq, const locks_step_params *p, int32_t max_ctx,
                                                 locks_status *err) {
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_cuda_plan *pl = NULL;
    cudaError_t e;
    if (!c || !seq_ids || n_seqs < 1 || n_seqs > c->p.max_seqs || !p || max_ctx < 1 ||
        max_ctx > 16 * c->p.n_pages)
        goto fail;
    for (int32_t i = 0; i < n_seqs; i++)
        if (seq_ids[i] < 0 || seq_ids[i] >= c->p.max_seqs) {
            st = LOCKS_ERR_NO_SEQ;
            goto fail;
        }
    if (p->budget <= 0) {
        st = LOCKS_ERR_BUDGET;
        goto fail;
    }
    if (p->n_sink < 0 || p->n_recent < 0 || !(p->scale >= 0.f && p->scale < INFINITY) ||
        !(p->mass >= 0.f && p->mass < 1.f))
        goto fail;
    if (hq < c->p.n_kv_heads || hq % c->p.n_kv_heads != 0) goto fail;
    st = LOCKS_ERR_UNSUPPORTED;
    if (p->selector != LOCKS_SEL_LOCKS || p->mass != 0.f || hq / c->p.n_kv_heads > LOCKS_CUDA_MAX_GROUP) goto fail;
    st = LOCKS_ERR_OOM;
    pl = (locks_cuda_plan *)locks_alloc(1, sizeof *pl);
    if (!pl) goto fail;
    pl->seq_ids = (int32_t *)locks_alloc((size_t)n_seqs, sizeof(int32_t));
    if (!pl->seq_ids) goto fail;
    memcpy(pl->seq_ids, seq_ids, (size_t)n_seqs * 4);
    pl->c = c;
    pl->n_seqs = n_seqs;
    pl->hq = hq;
    pl->p = *p;
    pl->max_ctx = max_ctx;
    pl->max_pages = (max_ctx + 15) / 16;
    pl->max_list = p->budget / 16 + 2 < pl->max_pages ? p->budget / 16 + 2 : pl->max_pages;
    pl->scale = p->scale > 0.f ? p->scale : 1.f / sqrtf((float)c->p.head_dim);
    if ((st = locks_cuda_ws_reserve(c, n_seqs, hq)) != LOCKS_OK) goto fail;
    st = LOCKS_ERR_OOM;
    if (cudaMalloc((void **)&pl->d_slots, (size_t)n_seqs * 4) != cudaSuccess ||
        cudaMalloc((void **)&pl->d_status, 4) != cudaSuccess ||
        cudaMalloc((void **)&pl->d_fill, (size_t)n_seqs * PLAN_FILL_PER_SEQ * 4) != cudaSuccess)
        goto fail;
    st = LOCKS_ERR_BACKEND;
    if ((e = cudaStreamSynchronize(c->stream)) != cudaSuccess ||
        (e = cudaMemcpy(pl->d_slots, seq_ids, (size_t)n_seqs * 4, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemset(pl->d_status, 0, 4)) != cudaSuccess) {
        locks_log(LOCKS_LOG_ERROR, "cuda: step plan set-up failed: %s", cudaGetErrorString(e));
        goto fail;
    }
    if (err) *err = LOCKS_OK;
    return pl;
fail:
    locks_cuda_plan_free(&pl);
    if (err) *err = st;
    return NULL;
}

/* Points the cache's launches at the caller's stream while one entry enqueues (NULL:
 * the legacy default stream, as for CUDA's own calls; torch's default stream is that). */
static cudaStream_t plan_enter(locks_cuda_plan *pl, void *stream) {
    cudaStream_t before = pl->c->stream;
    pl->c->stream = (cudaStream_t)stream;
    pl->last = pl->c->stream;
    pl->used = 1;
    return before;
}

extern "C" locks_status locks_cuda_plan_set_lens(locks_cuda_plan *pl, const int32_t *d_lens, const int32_t *d_tables,
                                                 int32_t table_stride, void *stream) {
    if (!pl || !d_lens || (d_tables && table_stride < 1)) return LOCKS_ERR_INVALID_ARG;
    locks_cuda_cache *c = pl->c;
    const cudaStream_t st = (cudaStream_t)stream;
    pl->last = st;
    pl->used = 1;
    plan_set_lens_kernel<<<pl->n_seqs, 128, 0, st>>>(pl->d_slots, d_lens, d_tables, table_stride, pl->max_ctx,
                                                      c->p.n_pages, c->seq_len, c->block_table, pl->d_status);
    CU_LAUNCH_CHECK(plan_set_lens_kernel);
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_plan_pages_filled(locks_cuda_plan *pl, int32_t layer, int32_t n_new, void *stream) {
    if (!pl || layer < 0 || layer >= pl->c->p.n_layers || n_new < 1 || n_new > PLAN_MAX_NEW)
        return LOCKS_ERR_INVALID_ARG;
    locks_cuda_cache *c = pl->c;
    const cudaStream_t before = plan_enter(pl, stream);
    const int32_t n = pl->n_seqs * PLAN_FILL_PER_SEQ;
    plan_fill_list_kernel<<<(n + 127) / 128, 128, 0, c->stream>>>(pl->d_slots, c->seq_len, c->block_table,
                                                                   c->p.n_pages, pl->n_seqs, n_new, pl->d_fill);
    locks_status st = cudaGetLastError() == cudaSuccess ? LOCKS_OK : LOCKS_ERR_BACKEND;
    if (st == LOCKS_OK) st = locks_cuda_summary_build(c, layer, pl->d_fill, n); /* skips the -1 entries */
    c->stream = before;
    return st;
}

extern "C" locks_status locks_cuda_plan_decode(locks_cuda_plan *pl, int32_t layer, const float *d_q, float *d_out,
                                               void *stream) {
    if (!pl || !d_q || layer < 0 || layer >= pl->c->p.n_layers) return LOCKS_ERR_INVALID_ARG;
    locks_cuda_cache *c = pl->c;
    for (int32_t i = 0; i < pl->n_seqs; i++) /* lengths set on the host since: the grids' bound */
        if (c->h_seq_len[pl->seq_ids[i]] > pl->max_ctx) return LOCKS_ERR_INVALID_ARG;
    const cudaStream_t before = plan_enter(pl, stream);
    struct locks_cuda_ws *w = &c->ws;
    locks_status st = LOCKS_ERR_BACKEND;
    c->slots_owner = NULL; /* ws.seq_slots holds this batch now (locks_step_graph re-uploads) */
    if (cudaMemcpyAsync(w->seq_slots, pl->d_slots, (size_t)pl->n_seqs * 4, cudaMemcpyDeviceToDevice, c->stream) !=
            cudaSuccess ||
        cudaMemsetAsync(w->status, 0, 4, c->stream) != cudaSuccess)
        goto done;
    if ((st = locks_cuda_qprep_launch(c, d_q, pl->hq * c->p.head_dim, pl->n_seqs, pl->hq, pl->scale, c->stream)) !=
        LOCKS_OK)
        goto done;
    plan_check_kernel<<<1, 128, 0, c->stream>>>(w->seq_slots, c->seq_len, pl->n_seqs, pl->p.budget, pl->p.n_sink,
                                                 pl->p.n_recent, w->status, pl->d_status);
    st = cudaGetLastError() == cudaSuccess ? LOCKS_OK : LOCKS_ERR_BACKEND;
    if (st == LOCKS_OK)
        st = locks_cuda_step_enqueue(c, layer, pl->n_seqs, pl->hq, &pl->p, pl->scale, pl->max_pages, pl->max_list,
                                     d_out, 0, 0);
done:
    if (st == LOCKS_ERR_BACKEND) locks_log(LOCKS_LOG_ERROR, "cuda: enqueueing a plan's step failed");
    c->stream = before;
    return st;
}

extern "C" locks_status locks_cuda_plan_selection(const locks_cuda_plan *pl, const int32_t **d_pages,
                                                  const int32_t **d_n_pages, int32_t *stride) {
    if (!pl || !d_pages || !d_n_pages || !stride) return LOCKS_ERR_INVALID_ARG;
    *d_pages = pl->c->ws.sel;
    *d_n_pages = pl->c->ws.sel_n;
    *stride = pl->c->ws.max_pages;
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_plan_status(locks_cuda_plan *pl, uint32_t *bits, int32_t *lens, int32_t *tables,
                                               int32_t table_stride) {
    if (!pl || !bits || !lens || (tables && table_stride < 1)) return LOCKS_ERR_INVALID_ARG;
    locks_cuda_cache *c = pl->c;
    if (pl->used) CU_TRY(cudaStreamSynchronize(pl->last));
    CU_TRY(cudaStreamSynchronize(c->stream));
    CU_TRY(cudaMemcpy(bits, pl->d_status, 4, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemset(pl->d_status, 0, 4));
    for (int32_t i = 0; i < pl->n_seqs; i++) {
        const int32_t slot = pl->seq_ids[i];
        CU_TRY(cudaMemcpy(&lens[i], c->seq_len + slot, 4, cudaMemcpyDeviceToHost));
        const int32_t np = (lens[i] + 15) / 16;
        if (tables && np > table_stride) return LOCKS_ERR_INVALID_ARG;
        if (tables && np > 0)
            CU_TRY(cudaMemcpy(tables + (size_t)i * table_stride, c->block_table + (size_t)slot * c->p.n_pages,
                              (size_t)np * 4, cudaMemcpyDeviceToHost));
        c->h_seq_len[slot] = lens[i];
    }
    return LOCKS_OK;
}
