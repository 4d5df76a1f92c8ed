/*
 * step.cu — the decode step on the GPU: workspace, the piece-wise entries (score,
 * select, attend, dense attend), the whole step, and its CUDA graph.
 *
 * Step order on the cache's stream (every buffer at a fixed address in the workspace):
 *   qprep (queries -> fp16 scoring copy + pre-scaled attention copy, NaN flag)
 *   score (summaries -> page LSE per head + normaliser partials; zeroes hist)
 *   mass (Z_h, group mass, first radix histogram)
 *   topk (selection, ascending logical pages: topk_mb.cu, or topk.cu for huge contexts)
 *   attend + merge (sparse flash-decoding over the selection)
 * Every kernel after qprep is launched with programmatic dependent launch (common.cuh),
 * so each one's prologue (sequence tables, the first summary copies) overlaps the tail
 * of the one before, in the graph too.
 * Sequence lengths and block tables are read on the device, so a captured graph stays
 * valid while the sequences grow (up to the context the grids were sized for).
 */
#include "common.cuh"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPLITS 1024

static void dfree_ptr(void *p) {
    if (p) cudaFree(p);
}

static const locks_cuda_lab lab_default = {1, 1, 0, -1, 0, 0, 1, 1, 1, 1, 0};
static locks_cuda_lab lab_now = lab_default;

extern "C" locks_cuda_lab locks_cuda_lab_default(void) { return lab_default; }
extern "C" void locks_cuda_set_lab(const locks_cuda_lab *lab) { lab_now = lab ? *lab : lab_default; }
extern "C" locks_cuda_lab locks_cuda_get_lab(void) { return lab_now; }

locks_status locks_cuda_ws_reserve(locks_cuda_cache *c, int32_t n_seqs, int32_t hq) {
    struct locks_cuda_ws *w = &c->ws;
    /* A failure part-way leaves the workspace marked not ready (w->ready, w->hq are set
     * last), so the next call completes it instead of using missing buffers. */
    if (!w->ready) {
        if (!w->status) CU_TRY(cudaMalloc((void **)&w->status, 4));
        CU_TRY(cudaMemset(w->status, 0, 4));
        if (!w->seq_slots) CU_TRY(cudaMalloc((void **)&w->seq_slots, (size_t)c->p.max_seqs * 4));
        CU_TRY(cudaMemset(w->seq_slots, 0, (size_t)c->p.max_seqs * 4));
        LOCKS_TRY(locks_cuda_attend_prepare(c));
        LOCKS_TRY(locks_cuda_score_prepare(c));
        LOCKS_TRY(locks_cuda_topk_mb_prepare(c));
        LOCKS_TRY(locks_cuda_mass_cut_prepare(c));
        /* lab switches (locks_cuda.h; bench/RESULTS.md, issue 12) */
        w->pdl = lab_now.pdl;
        w->score_i8_g16 = lab_now.score_i8_g16;
        w->att_min_pps = lab_now.att_min_pps;
        w->topk_mb_min = lab_now.topk_mb_min;
        w->mass_ppb = lab_now.mass_ppb;
        w->ready = 1;
    }
    const int32_t hkv = c->p.n_kv_heads, G = hq / hkv;
    (void)n_seqs;
    if (w->q_attn && w->hq >= hq) return LOCKS_OK;
    /* (re)allocate for max_seqs sequences and this many query heads */
    w->hq = 0;
    CU_TRY(cudaStreamSynchronize(c->stream));
    dfree_ptr(w->q_attn);
    w->q_attn = NULL;
    dfree_ptr(w->q_score);
    w->q_score = NULL;
    dfree_ptr(w->q_amax);
    w->q_amax = NULL;
    dfree_ptr(w->q_i8);
    w->q_i8 = NULL;
    dfree_ptr(w->q_isum);
    w->q_isum = NULL;
    dfree_ptr(w->scores);
    w->scores = NULL;
    dfree_ptr(w->lse_part);
    w->lse_part = NULL;
    dfree_ptr(w->mass);
    w->mass = NULL;
    dfree_ptr(w->hist);
    w->hist = NULL;
    dfree_ptr(w->taken);
    w->taken = NULL;
    dfree_ptr(w->cand_idx);
    w->cand_idx = NULL;
    dfree_ptr(w->cand_key);
    w->cand_key = NULL;
    dfree_ptr(w->sel);
    w->sel = NULL;
    dfree_ptr(w->sel_n);
    w->sel_n = NULL;
    dfree_ptr(w->part_o);
    w->part_o = NULL;
    dfree_ptr(w->part_ml);
    w->part_ml = NULL;
    const size_t S = (size_t)c->p.max_seqs, D = (size_t)c->p.head_dim, NP = (size_t)c->p.n_pages;
    const size_t segs = S * (size_t)hkv;
    w->max_segs = (int32_t)segs;
    w->max_group = G;
    w->max_pages = c->p.n_pages;
    w->score_blocks = 1024;
    w->max_splits = MAX_SPLITS;
    w->nseq = c->p.max_seqs;
    CU_TRY(cudaMalloc((void **)&w->q_attn, S * hq * D * 2));
    CU_TRY(cudaMalloc((void **)&w->q_score, S * hq * D * 2));
    CU_TRY(cudaMalloc((void **)&w->q_amax, S * hq * 4));
    CU_TRY(cudaMalloc((void **)&w->q_i8, S * hq * D * 4));
    CU_TRY(cudaMalloc((void **)&w->q_isum, S * hq * 4));
    CU_TRY(cudaMalloc((void **)&w->scores, segs * NP * G * 4));
    CU_TRY(cudaMalloc((void **)&w->lse_part, segs * (size_t)w->score_blocks * G * sizeof(float2)));
    CU_TRY(cudaMalloc((void **)&w->mass, segs * NP * 4));
    CU_TRY(cudaMalloc((void **)&w->hist, segs * LOCKS_CUDA_HIST_STRIDE * 4));
    CU_TRY(cudaMalloc((void **)&w->taken, segs * NP * 4));
    CU_TRY(cudaMalloc((void **)&w->cand_idx, segs * NP * 4));
    CU_TRY(cudaMalloc((void **)&w->cand_key, segs * NP * 4));
    CU_TRY(cudaMalloc((void **)&w->sel, segs * NP * 4));
    CU_TRY(cudaMalloc((void **)&w->sel_n, segs * 4));
    CU_TRY(cudaMalloc((void **)&w->part_o, segs * MAX_SPLITS * G * D * 4));
    CU_TRY(cudaMalloc((void **)&w->part_ml, segs * MAX_SPLITS * G * sizeof(float2)));
    w->hq = hq; /* every buffer is there */
    return LOCKS_OK;
}

/* ---- validation shared by the entries -------------------------------------------------- */

static float step_scale(const locks_cuda_cache *c, float scale) {
    return scale > 0.f ? scale : 1.f / sqrtf((float)c->p.head_dim);
}

static locks_status check_heads(const locks_cuda_cache *c, int32_t hq) {
    const int32_t hkv = c->p.n_kv_heads;
    if (hq < hkv || hq % hkv != 0) return LOCKS_ERR_INVALID_ARG;
    if (hq / hkv > LOCKS_CUDA_MAX_GROUP) return LOCKS_ERR_UNSUPPORTED;
    return LOCKS_OK;
}

/* Tokens one sequence attends under p (host mirror of the selection rule). */
static int64_t attended_tokens(int32_t len, const locks_step_params *p, int32_t *n_list) {
    const locks_plan pl = locks_plan_make(len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    if (pl.every) {
        *n_list = pl.n_tot;
        return len;
    }
    *n_list = pl.sink + pl.k + (pl.n_full - pl.rs) + (pl.part > 0);
    return (int64_t)pl.forced + 16 * (int64_t)pl.k;
}

static locks_status check_seqs(const locks_cuda_cache *c, const int32_t *seq_ids, int32_t n_seqs,
                               const locks_step_params *p, int32_t *max_pages, int32_t *max_list) {
    if (!seq_ids || n_seqs < 1 || n_seqs > c->p.max_seqs) return LOCKS_ERR_INVALID_ARG;
    *max_pages = 0;
    *max_list = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const int32_t s = seq_ids[i];
        if (s < 0 || s >= c->p.max_seqs) return LOCKS_ERR_NO_SEQ;
        const int32_t len = c->h_seq_len[s];
        if (len <= 0) return LOCKS_ERR_INVALID_ARG;
        const int32_t np = (len + 15) / 16;
        if (np > *max_pages) *max_pages = np;
        if (p) {
            const locks_plan pl = locks_plan_make(len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
            if (!pl.dense && pl.k < 0) return LOCKS_ERR_BUDGET;
            if (p->selector != LOCKS_SEL_FULL) LOCKS_TRY(locks_cuda_mass_cut_check(p, np));
            int32_t nl;
            attended_tokens(len, p, &nl);
            if (nl > *max_list) *max_list = nl;
        }
    }
    return LOCKS_OK;
}

static locks_status check_params(const locks_step_params *p) {
    if (!p || p->budget <= 0 || p->n_sink < 0 || p->n_recent < 0 || p->scale < 0.f) {
        return p && p->budget <= 0 ? LOCKS_ERR_BUDGET : LOCKS_ERR_INVALID_ARG;
    }
    if (!(p->mass == 0.f || (p->mass > 0.f && p->mass < 1.f))) return LOCKS_ERR_INVALID_ARG;
    if (p->selector != LOCKS_SEL_LOCKS && p->selector != LOCKS_SEL_FULL) return LOCKS_ERR_UNSUPPORTED;
    return LOCKS_OK;
}

static locks_status upload_slots(locks_cuda_cache *c, const int32_t *seq_ids, int32_t n_seqs) {
    c->slots_owner = NULL;
    CU_TRY(cudaStreamSynchronize(c->stream));
    CU_TRY(cudaMemcpy(c->ws.seq_slots, seq_ids, (size_t)n_seqs * 4, cudaMemcpyHostToDevice));
    return LOCKS_OK;
}

locks_status locks_cuda_use_slots(locks_cuda_cache *c, const int32_t *ids, int32_t n, const void *owner, int changed) {
    if (owner && c->slots_owner == owner && !changed) return LOCKS_OK;
    LOCKS_TRY(upload_slots(c, ids, n));
    c->slots_owner = owner;
    return LOCKS_OK;
}

int32_t locks_cuda_ws_max_pages(const locks_cuda_cache *c) { return c->ws.max_pages; }

/* qprep + non-finite check with read-back (the API promises out untouched on NaN). */
static locks_status prep_checked(locks_cuda_cache *c, const float *d_q, int32_t n_seqs, int32_t hq, float scale) {
    int32_t flag = 0;
    CU_TRY(cudaMemsetAsync(c->ws.status, 0, 4, c->stream));
    LOCKS_TRY(locks_cuda_qprep_launch(c, d_q, hq * c->p.head_dim, n_seqs, hq, scale, c->stream));
    CU_TRY(cudaMemcpyAsync(&flag, c->ws.status, 4, cudaMemcpyDeviceToHost, c->stream));
    LOCKS_TRY(sync_stack_copies(c->stream)); /* &flag is a stack address */
    return flag ? LOCKS_ERR_NONFINITE : LOCKS_OK;
}

/* ---- the step ------------------------------------------------------------------------------ */

/* The step after qprep (common.cuh): one enqueue path for locks_cuda_decode_step, the step
 * graph and the GPU engine (model_engine.cu). */
locks_status locks_cuda_step_enqueue(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t hq,
                                     const locks_step_params *p, float scale, int32_t max_pages, int32_t max_list,
                                     float *d_out, int dense_sel, int timed) {
    cudaStream_t st = c->stream;
    if (p->selector == LOCKS_SEL_FULL) {
        if (timed) CU_TRY(cudaEventRecord(c->ev[1], st));
        if (dense_sel) { /* the selection is every page (read back by the caller) */
            locks_step_params all = *p;
            all.budget = INT32_MAX;
            LOCKS_TRY(locks_cuda_topk_launch(c, n_seqs, &all, c->ws.mass, c->ws.max_pages, c->ws.sel, c->ws.sel_n,
                                             c->ws.max_pages, 0, st));
        }
        if (timed) CU_TRY(cudaEventRecord(c->ev[2], st));
        if (timed) CU_TRY(cudaEventRecord(c->ev[3], st));
        LOCKS_TRY(locks_cuda_attend_launch(c, layer, n_seqs, hq, NULL, NULL, 0, 1, max_pages, d_out, NULL, st));
        if (timed) CU_TRY(cudaEventRecord(c->ev[4], st));
        return LOCKS_OK;
    }
    const int32_t nblk = locks_cuda_score_blocks(c, n_seqs, hq, max_pages);
    if (timed) CU_TRY(cudaEventRecord(c->ev[1], st));
    /* the score kernel also zeroes the histograms that mass.cu fills */
    LOCKS_TRY(locks_cuda_score_launch(c, layer, n_seqs, hq, scale, nblk, st));
    LOCKS_TRY(locks_cuda_mass_launch(c, n_seqs, hq, p, nblk, max_pages, 1, st));
    if (timed) CU_TRY(cudaEventRecord(c->ev[2], st));
    if (locks_cuda_topk_mb_pays(c, max_pages)) /* the whole machine; else one block per segment */
        LOCKS_TRY(locks_cuda_topk_mb_launch(c, n_seqs, p, max_pages, st));
    else
        LOCKS_TRY(locks_cuda_topk_launch(c, n_seqs, p, c->ws.mass, c->ws.max_pages, c->ws.sel, c->ws.sel_n,
                                         c->ws.max_pages, 1, st));
    /* a mass target keeps only the top pages reaching it (nothing launched without one) */
    LOCKS_TRY(locks_cuda_mass_cut_launch(c, n_seqs, p, c->ws.mass, c->ws.max_pages, max_pages, c->ws.sel,
                                         c->ws.sel_n, c->ws.max_pages, st));
    if (timed) CU_TRY(cudaEventRecord(c->ev[3], st));
    if (d_out) /* NULL: selection only (a capturable plan's select) */
        LOCKS_TRY(locks_cuda_attend_launch(c, layer, n_seqs, hq, c->ws.sel, c->ws.sel_n, c->ws.max_pages, 0,
                                           max_list, d_out, NULL, st));
    if (timed) CU_TRY(cudaEventRecord(c->ev[4], st));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_decode_step(locks_cuda_cache *c, int32_t layer, const int32_t *seq_ids,
                                               int32_t n_seqs, const float *d_q, int32_t hq,
                                               const locks_step_params *p, float *d_out, locks_selection *sel,
                                               locks_step_stats *stats) {
    if (!c || !d_q || !d_out || layer < 0 || layer >= c->p.n_layers) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(check_params(p));
    LOCKS_TRY(check_heads(c, hq));
    int32_t max_pages, max_list;
    LOCKS_TRY(check_seqs(c, seq_ids, n_seqs, p, &max_pages, &max_list));
    if (sel && (!sel->pages || !sel->n_pages || sel->max_pages < max_pages)) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(locks_cuda_ws_reserve(c, n_seqs, hq));
    LOCKS_TRY(upload_slots(c, seq_ids, n_seqs));
    const float scale = step_scale(c, p->scale);
    const int timed = stats != NULL;
    if (timed) CU_TRY(cudaEventRecord(c->ev[0], c->stream));
    LOCKS_TRY(prep_checked(c, d_q, n_seqs, hq, scale));
    const int32_t hkv = c->p.n_kv_heads, segs = n_seqs * hkv;
    LOCKS_TRY(locks_cuda_step_enqueue(c, layer, n_seqs, hq, p, scale, max_pages, max_list, d_out, 1, timed));
    CU_TRY(cudaStreamSynchronize(c->stream));
    if (sel) {
        CU_TRY(cudaMemcpy2D(sel->pages, (size_t)sel->max_pages * 4, c->ws.sel, (size_t)c->ws.max_pages * 4,
                            (size_t)max_pages * 4, (size_t)segs, cudaMemcpyDeviceToHost));
        CU_TRY(cudaMemcpy(sel->n_pages, c->ws.sel_n, (size_t)segs * 4, cudaMemcpyDeviceToHost));
    }
    if (stats) {
        memset(stats, 0, sizeof *stats);
        const size_t sb = locks_summary_bytes(c->p.head_dim, c->rank, c->p.summary_prec);
        const uint64_t tok_bytes = (uint64_t)c->p.head_dim * 2 * 2; /* K + V of one token, one head */
        /* under a mass target the pages attended are known only after the step: read back */
        const int cut = p->mass != 0.f && p->selector != LOCKS_SEL_FULL;
        int32_t *n_sel = cut ? (int32_t *)locks_alloc((size_t)segs, 4) : NULL;
        if (cut && !n_sel) return LOCKS_ERR_OOM;
        if (cut) {
            const cudaError_t e = cudaMemcpy(n_sel, c->ws.sel_n, (size_t)segs * 4, cudaMemcpyDeviceToHost);
            if (e != cudaSuccess) {
                locks_free(n_sel);
                CU_TRY(e);
            }
        }
        for (int32_t i = 0; i < n_seqs; i++) {
            const int32_t len = c->h_seq_len[seq_ids[i]];
            int32_t nl;
            const int64_t att = attended_tokens(len, p, &nl);
            if (p->selector != LOCKS_SEL_FULL) stats->bytes_meta += (uint64_t)(len / 16) * sb * hkv;
            if (cut) { /* every listed page is full but the partial one, always listed */
                const int32_t part = len % 16;
                for (int32_t h = 0; h < hkv; h++)
                    stats->bytes_kv += (uint64_t)(16 * (int64_t)n_sel[i * hkv + h] - (part ? 16 - part : 0)) * tok_bytes;
            } else {
                stats->bytes_kv += (uint64_t)att * tok_bytes * hkv;
            }
            stats->bytes_dense += (uint64_t)len * tok_bytes * hkv;
        }
        locks_free(n_sel);
        float a = 0.f, b = 0.f, d = 0.f;
        CU_TRY(cudaEventElapsedTime(&a, c->ev[1], c->ev[2]));
        CU_TRY(cudaEventElapsedTime(&b, c->ev[2], c->ev[3]));
        CU_TRY(cudaEventElapsedTime(&d, c->ev[3], c->ev[4]));
        stats->score_ms = a;
        stats->select_ms = b;
        stats->attend_ms = d;
    }
    return LOCKS_OK;
}

/* ---- pieces -------------------------------------------------------------------------------- */

extern "C" locks_status locks_cuda_score(locks_cuda_cache *c, int32_t layer, int32_t seq, const float *d_q,
                                         int32_t hq, const locks_step_params *p, float *d_mass) {
    if (!c || !d_q || !d_mass || !p || layer < 0 || layer >= c->p.n_layers) return LOCKS_ERR_INVALID_ARG;
    if (p->selector != LOCKS_SEL_LOCKS) return LOCKS_ERR_UNSUPPORTED;
    LOCKS_TRY(check_heads(c, hq));
    int32_t max_pages, max_list;
    LOCKS_TRY(check_seqs(c, &seq, 1, NULL, &max_pages, &max_list));
    LOCKS_TRY(locks_cuda_ws_reserve(c, 1, hq));
    LOCKS_TRY(upload_slots(c, &seq, 1));
    const float scale = step_scale(c, p->scale);
    LOCKS_TRY(prep_checked(c, d_q, 1, hq, scale));
    const int32_t n_full = c->h_seq_len[seq] / 16;
    if (n_full == 0) return LOCKS_OK;
    const int32_t nblk = locks_cuda_score_blocks(c, 1, hq, max_pages);
    LOCKS_TRY(locks_cuda_score_launch(c, layer, 1, hq, scale, nblk, c->stream));
    LOCKS_TRY(locks_cuda_mass_launch(c, 1, hq, p, nblk, max_pages, 0, c->stream));
    CU_TRY(cudaMemcpy2DAsync(d_mass, (size_t)n_full * 4, c->ws.mass, (size_t)c->ws.max_pages * 4, (size_t)n_full * 4,
                             (size_t)c->p.n_kv_heads, cudaMemcpyDeviceToDevice, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_select(locks_cuda_cache *c, int32_t seq, const float *d_mass,
                                          const locks_step_params *p, int32_t *d_pages, int32_t *d_n_pages,
                                          int32_t max_pages) {
    if (!c || !d_mass || !d_pages || !d_n_pages) return LOCKS_ERR_INVALID_ARG;
    if (!p || p->budget <= 0) return LOCKS_ERR_BUDGET;
    if (p->n_sink < 0 || p->n_recent < 0) return LOCKS_ERR_INVALID_ARG;
    if (!(p->mass == 0.f || (p->mass > 0.f && p->mass < 1.f))) return LOCKS_ERR_INVALID_ARG;
    locks_step_params q = *p;
    q.selector = LOCKS_SEL_LOCKS;
    int32_t mp, ml;
    LOCKS_TRY(check_seqs(c, &seq, 1, &q, &mp, &ml));
    if (max_pages < mp) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(locks_cuda_ws_reserve(c, 1, c->p.n_kv_heads));
    LOCKS_TRY(upload_slots(c, &seq, 1));
    const int32_t n_full = c->h_seq_len[seq] / 16;
    LOCKS_TRY(locks_cuda_topk_launch(c, 1, &q, d_mass, n_full, d_pages, d_n_pages, max_pages, 0, c->stream));
    LOCKS_TRY(locks_cuda_mass_cut_launch(c, 1, &q, d_mass, n_full, mp, d_pages, d_n_pages, max_pages, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_attend(locks_cuda_cache *c, int32_t layer, int32_t seq, const float *d_q,
                                          int32_t hq, float scale, const int32_t *d_pages, const int32_t *d_n_pages,
                                          int32_t max_pages, float *d_out, float *d_lse) {
    if (!c || !d_q || !d_out || !d_pages || !d_n_pages || max_pages < 1 || layer < 0 || layer >= c->p.n_layers)
        return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(check_heads(c, hq));
    int32_t mp, ml;
    LOCKS_TRY(check_seqs(c, &seq, 1, NULL, &mp, &ml));
    LOCKS_TRY(locks_cuda_ws_reserve(c, 1, hq));
    LOCKS_TRY(upload_slots(c, &seq, 1));
    LOCKS_TRY(prep_checked(c, d_q, 1, hq, step_scale(c, scale)));
    LOCKS_TRY(locks_cuda_attend_launch(c, layer, 1, hq, d_pages, d_n_pages, max_pages, 0, max_pages, d_out, d_lse,
                                       c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}

extern "C" locks_status locks_cuda_attend_dense(locks_cuda_cache *c, int32_t layer, const int32_t *seq_ids,
                                                int32_t n_seqs, const float *d_q, int32_t hq, float scale,
                                                float *d_out) {
    if (!c || !d_q || !d_out || layer < 0 || layer >= c->p.n_layers) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(check_heads(c, hq));
    int32_t mp, ml;
    LOCKS_TRY(check_seqs(c, seq_ids, n_seqs, NULL, &mp, &ml));
    LOCKS_TRY(locks_cuda_ws_reserve(c, n_seqs, hq));
    LOCKS_TRY(upload_slots(c, seq_ids, n_seqs));
    locks_step_params full = locks_step_default_params();
    full.selector = LOCKS_SEL_FULL;
    LOCKS_TRY(locks_cuda_qprep_launch(c, d_q, hq * c->p.head_dim, n_seqs, hq, step_scale(c, scale), c->stream));
    LOCKS_TRY(locks_cuda_step_enqueue(c, layer, n_seqs, hq, &full, step_scale(c, scale), mp, mp, d_out, 0, 0));
    return LOCKS_OK; /* asynchronous: benchmarks time it with events */
}

extern "C" locks_status locks_cuda_last_selection(locks_cuda_cache *c, int32_t n_seqs, locks_selection *sel) {
    if (!c || !sel || !sel->pages || !sel->n_pages || n_seqs < 1 || !c->ws.sel) return LOCKS_ERR_INVALID_ARG;
    const int32_t segs = n_seqs * c->p.n_kv_heads;
    const int32_t w = sel->max_pages < c->ws.max_pages ? sel->max_pages : c->ws.max_pages;
    CU_TRY(cudaStreamSynchronize(c->stream));
    CU_TRY(cudaMemcpy2D(sel->pages, (size_t)sel->max_pages * 4, c->ws.sel, (size_t)c->ws.max_pages * 4, (size_t)w * 4,
                        (size_t)segs, cudaMemcpyDeviceToHost));
    CU_TRY(cudaMemcpy(sel->n_pages, c->ws.sel_n, (size_t)segs * 4, cudaMemcpyDeviceToHost));
    return LOCKS_OK;
}

/* ---- CUDA graph ------------------------------------------------------------------------------ */

struct locks_cuda_graph {
    locks_cuda_cache *c;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int32_t n_seqs;
    int32_t seq_ids[64];
    locks_step_params p;
    int32_t max_ctx;
};

extern "C" void locks_cuda_graph_free(locks_cuda_graph **pg) {
    if (!pg || !*pg) return;
    locks_cuda_graph *g = *pg;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    locks_free(g);
    *pg = NULL;
}

static locks_status graph_build(locks_cuda_graph *g, int32_t layer, const float *d_q, int32_t hq, float *d_out) {
    locks_cuda_cache *c = g->c;
    const int32_t max_pages = (g->max_ctx + 15) / 16;
    int32_t max_list = g->p.budget / 16 + 2;
    if (max_list > max_pages) max_list = max_pages;
    const float scale = step_scale(c, g->p.scale);
    CU_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    locks_status st = locks_cuda_qprep_launch(c, d_q, hq * c->p.head_dim, g->n_seqs, hq, scale, c->stream);
    if (st == LOCKS_OK) st = locks_cuda_step_enqueue(c, layer, g->n_seqs, hq, &g->p, scale, max_pages, max_list, d_out, 0, 0);
    cudaError_t e = cudaStreamEndCapture(c->stream, &g->graph);
    if (st != LOCKS_OK) return st;
    CU_TRY(e);
    CU_TRY(cudaGraphInstantiate(&g->exec, g->graph, 0));
    return LOCKS_OK;
}

extern "C" locks_cuda_graph *locks_cuda_graph_capture(locks_cuda_cache *c, int32_t layer, const int32_t *seq_ids,
                                                      int32_t n_seqs, const float *d_q, int32_t hq,
                                                      const locks_step_params *p, int32_t max_ctx, float *d_out,
                                                      locks_status *err) {
    locks_status st = LOCKS_OK;
    locks_cuda_graph *g = NULL;
    int32_t mp, ml;
    if (!c || !d_q || !d_out || layer < 0 || layer >= c->p.n_layers || n_seqs > 64 || max_ctx < 1) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    if ((st = check_params(p)) != LOCKS_OK) goto fail;
    if (p->selector != LOCKS_SEL_LOCKS) {
        st = LOCKS_ERR_UNSUPPORTED;
        goto fail;
    }
    if ((st = check_heads(c, hq)) != LOCKS_OK) goto fail;
    if ((st = check_seqs(c, seq_ids, n_seqs, p, &mp, &ml)) != LOCKS_OK) goto fail;
    if ((st = locks_cuda_ws_reserve(c, n_seqs, hq)) != LOCKS_OK) goto fail;
    if ((st = upload_slots(c, seq_ids, n_seqs)) != LOCKS_OK) goto fail;
    g = (locks_cuda_graph *)locks_alloc(1, sizeof *g);
    if (!g) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    g->c = c;
    g->n_seqs = n_seqs;
    memcpy(g->seq_ids, seq_ids, (size_t)n_seqs * 4);
    g->p = *p;
    g->max_ctx = max_ctx;
    if ((st = graph_build(g, layer, d_q, hq, d_out)) != LOCKS_OK) goto fail;
    c->slots_owner = g;
    if (err) *err = LOCKS_OK;
    return g;
fail:
    locks_cuda_graph_free(&g);
    if (err) *err = st;
    return NULL;
}

extern "C" locks_status locks_cuda_graph_replay(locks_cuda_graph *g, int sync) {
    if (!g) return LOCKS_ERR_INVALID_ARG;
    locks_cuda_cache *c = g->c;
    /* the grids were sized for max_ctx; the forced pages must fit the budget */
    int32_t mp, ml;
    LOCKS_TRY(check_seqs(c, g->seq_ids, g->n_seqs, &g->p, &mp, &ml));
    for (int32_t i = 0; i < g->n_seqs; i++)
        if (c->h_seq_len[g->seq_ids[i]] > g->max_ctx) return LOCKS_ERR_INVALID_ARG;
    if (c->slots_owner != (const void *)g) { /* another call used the slot buffer since */
        LOCKS_TRY(upload_slots(c, g->seq_ids, g->n_seqs));
        c->slots_owner = g;
    }
    CU_TRY(cudaGraphLaunch(g->exec, c->stream));
    if (sync) CU_TRY(cudaStreamSynchronize(c->stream));
    return LOCKS_OK;
}
