/*
 * locks_device.h — the CUDA backend: streams, step graphs and capturable step plans
 * (part of the public API; locks.h includes it, and every call here needs locks_core.h).
 */
#ifndef LOCKS_DEVICE_H
#define LOCKS_DEVICE_H

#include "locks_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* CUDA backend                                                                     */
/* ------------------------------------------------------------------------------ */
/* A cache created with backend = LOCKS_BACKEND_CUDA (builds with LOCKS_HAVE_CUDA;
 * otherwise locks_cache_init fails with LOCKS_ERR_UNSUPPORTED) keeps its pages and
 * summaries in device memory (plain cudaMalloc, all at init) and runs every step
 * there. For that backend the arrays passed to locks_cache_write (k, v),
 * locks_decode_step (q, out), locks_score (q, mass), locks_select (mass, pages,
 * n_pages) and locks_attend (q, pages, n_pages, out, lse) are DEVICE pointers; seq_ids,
 * params, sel and stats stay on the host (sel is copied back, which synchronises).
 * Calls are synchronous. Supported: kv_dtype F16 or BF16, summary_prec Q or F32, rank
 * 1..15 (quantized rank <= 8 on the tensor cores, the rest on a plain fp32 kernel),
 * head_dim 64/128/256, GQA group <= 16, selectors FULL and LOCKS; anything else gives
 * LOCKS_ERR_UNSUPPORTED, as does locks_prefill_attend. locks_cache_k_page/v_page return
 * NULL. stats times are CUDA-event times of the phases. */

/* Runs the cache's device work on `stream` (a cudaStream_t, e.g. PyTorch's current
 * stream) from now on, so kernels the caller queued there before a call (writing q, k,
 * v) finish before the cache reads them, with no host wait; NULL goes back to the
 * cache's own stream. Work already issued stays ordered first (an event). The caller
 * keeps the stream alive while the cache uses it. The calls stay synchronous as above
 * (locks_step_plan below has calls that are not). CUDA's legacy default stream
 * (torch's default stream) is cudaStreamLegacy, (void *)0x1, here.
 * CPU backend: LOCKS_OK for NULL, LOCKS_ERR_UNSUPPORTED for a stream. */
locks_status locks_cache_set_stream(locks_cache *c, void *stream);

/* The whole decode step (score -> group mass -> top-k -> sparse attention) of a fixed
 * batch, captured once into a CUDA graph and replayed. q [n_seqs][n_q_heads][d] and
 * out (same shape) are device buffers whose addresses are baked into the graph: write
 * the next queries into q, replay, read out. Sequences may grow between replays (block
 * tables and lengths are read on the device) up to max_ctx tokens each. CUDA backend
 * and LOCKS selector only (else NULL with LOCKS_ERR_UNSUPPORTED). */
typedef struct locks_step_graph locks_step_graph;
locks_step_graph *locks_step_graph_capture(locks_cache *c, int32_t layer, const int32_t *seq_ids,
                                           int32_t n_seqs, const float *q, int32_t n_q_heads,
                                           const locks_step_params *p, int32_t max_ctx, float *out,
                                           locks_status *err);
/* Replays the graph on the cache's stream and waits for it. LOCKS_ERR_BUDGET if a
 * sequence's forced pages no longer fit the budget, LOCKS_ERR_INVALID_ARG past max_ctx.
 * No NaN check of q (that would need a round trip): NaN queries give NaN outputs. */
locks_status locks_step_graph_replay(locks_step_graph *g);
/* Frees the graph (NULL is fine). Free graphs before their cache. */
void locks_step_graph_free(locks_step_graph *g);

/* ---- Capturable decode step (CUDA backend; src/cuda/stream.cu) --------------------
 * For an engine that records whole decode steps into its own CUDA graph
 * (torch.cuda.CUDAGraph, vLLM's full CUDA graphs), or that just must not stall its
 * stream. A *plan* fixes at set-up time what the synchronous calls check on the host
 * in every call: the batch (sequence ids), the query heads, the step parameters and
 * the longest context max_ctx; it sizes the workspace then. Its per-step calls
 * (set_lens, pages_filled, decode) only enqueue work on the stream the caller names
 * (a cudaStream_t, e.g. torch.cuda.current_stream().cuda_stream; NULL is CUDA's legacy
 * default stream, which torch's default stream is): they never
 * synchronise, allocate, copy from host memory or return a result computed on the
 * device, so they may run inside a stream capture and replay as graph nodes. Lengths,
 * block tables and queries are read from device memory when the work runs, so one
 * captured step stays right while the sequences grow.
 *
 * Errors found on the device go into the plan's status word (LOCKS_DEV_* bits,
 * sticky until read) instead of a return value; the host reads them outside the step
 * with locks_step_plan_status. A per-step call itself returns LOCKS_OK or a set-up
 * error it can see on the host (NULL plan, layer out of range, a launch error).
 *
 * What the caller guarantees:
 *  - the cache's earlier work on another stream is finished or ordered before the
 *    plan's stream (create the plan, then synchronise once; torch's graph warm-up and
 *    capture do that);
 *  - q / out and the device arrays handed to set_lens stay at their addresses while a
 *    graph that captured them is replayed;
 *  - the K/V of new tokens are in its pages (written earlier on the same stream)
 *    before set_lens and pages_filled of that step run;
 *  - nothing else uses the cache between a plan's enqueue and its work (the plan
 *    reuses the cache's one step workspace, also for locks_step_graph), and no call
 *    with more query heads than the plan's is made on the cache after a graph was
 *    captured (that grows, so moves, the workspace).
 * The synchronous calls see the device's lengths, tables and filled pages only after
 * locks_step_plan_status, which copies them back to the host. */

#define LOCKS_DEV_NONFINITE 1u /* a query held NaN or Inf (that step's out is NaN) */
#define LOCKS_DEV_BUDGET 2u    /* a sequence's forced pages exceeded the budget (out undefined) */
#define LOCKS_DEV_BAD_LEN 4u   /* set_lens got a length outside 0..max_ctx or a table entry
                                  outside the pool: that sequence kept its old length and table */
#define LOCKS_DEV_EMPTY 8u     /* a decode ran on a sequence of length 0 (out undefined) */

typedef struct locks_step_plan locks_step_plan;

/* A plan for decode steps of the batch seq_ids[n_seqs] (existing sequences, any
 * length now) with n_q_heads query heads, parameters p (LOCKS selector, no mass
 * target) and sequences of up to max_ctx tokens (1 .. 16 n_pages). Set-up call:
 * validates, sizes the workspace and synchronises. NULL and *err: INVALID_ARG,
 * NO_SEQ, BUDGET (p->budget <= 0), UNSUPPORTED (CPU backend, another selector, a
 * mass target, a build without CUDA), OOM, BACKEND. */
locks_step_plan *locks_step_plan_init(locks_cache *c, const int32_t *seq_ids, int32_t n_seqs,
                                      int32_t n_q_heads, const locks_step_params *p, int32_t max_ctx,
                                      locks_status *err);
/* Synchronises its last stream and frees the plan (NULL is fine). Free plans before
 * their cache. */
void locks_step_plan_free(locks_step_plan *pl);

/* Capturable. Caller-owned pages (locks_cache_init_ext) only, else UNSUPPORTED.
 * The device form of locks_cache_seq_set_pages for the plan's batch: sequence i gets
 * length d_lens[i] (device int32[n_seqs]) and, when d_tables is not NULL, the block
 * table d_tables[i * table_stride + j], j < ceil(len / 16) (device int32; NULL keeps
 * the tables set before, e.g. with locks_cache_seq_set_pages for the whole context).
 * A length outside 0..max_ctx, a table too short (ceil(len / 16) > table_stride) or
 * an entry outside the pool sets LOCKS_DEV_BAD_LEN and leaves that sequence as it was. */
locks_status locks_step_plan_set_lens(locks_step_plan *pl, const int32_t *d_lens, const int32_t *d_tables,
                                      int32_t table_stride, void *stream);

/* Capturable. Caller-owned pages only. The device form of locks_cache_pages_filled
 * for one layer of a step that added n_new tokens (1 .. 64) to every sequence of the
 * batch: builds the summaries (all KV heads) of the pages that those tokens filled,
 * i.e. logical pages floor((len - n_new) / 16) .. len / 16 - 1 at the current device
 * length len. Call it every step, for every layer, after set_lens and after the
 * layer's new K/V are in the pages: a page filled in a step without it is scored from
 * whatever summary its physical page last held. */
locks_status locks_step_plan_pages_filled(locks_step_plan *pl, int32_t layer, int32_t n_new, void *stream);

/* Capturable. One decode step of one layer for the plan's batch, as locks_decode_step
 * with the plan's parameters, through the same kernels (tests/test_gpu_plan.c finds the
 * same output and selection bit for bit; the grids follow max_ctx, not the current
 * length, so in general the normaliser may be summed in another order and masses
 * within a float ulp of each other rank differently): q [n_seqs][n_q_heads][d] fp32 ->
 * out (same shape), device memory. out NULL: score and select only (locks_step_plan_selection reads it).
 * Device errors: LOCKS_DEV_NONFINITE, LOCKS_DEV_BUDGET, LOCKS_DEV_EMPTY. */
locks_status locks_step_plan_decode(locks_step_plan *pl, int32_t layer, const float *q, float *out,
                                    void *stream);

/* Where the last decode's selection is (device memory, valid once that decode's work
 * ran and until the next step on the cache): pages[(s * Hkv + h) * stride + i],
 * i < n_pages[s * Hkv + h], logical pages ascending, as locks_selection. */
locks_status locks_step_plan_selection(const locks_step_plan *pl, const int32_t **pages,
                                       const int32_t **n_pages, int32_t *stride);

/* Host call, outside the step: waits for the plan's last stream, returns the status
 * bits gathered since the last call (and clears them), and copies the batch's device
 * lengths and tables back to the host, marking its full pages reported in every layer
 * that pages_filled ran on, so the synchronous calls can follow. */
locks_status locks_step_plan_status(locks_step_plan *pl, uint32_t *bits);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_DEVICE_H */
