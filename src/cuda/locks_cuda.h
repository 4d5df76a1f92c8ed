/*
 * locks_cuda.h — internal declarations of the CUDA backend (the .cu files of src/cuda), callable
 * from C. The public API (locks.h) dispatches here when a cache is created with
 * LOCKS_BACKEND_CUDA; tests and the benchmark also call these directly.
 *
 * What always holds:
 *  - Every array argument named d_* is device memory; everything else is host memory.
 *  - The device cache keeps the layout of locks.h in device memory, with the K/V
 *    pages in fp16 or bf16 ([layer][page][Hkv][16][d]) and the quantized summaries in
 *    structure-of-arrays form per (layer, KV head), page after page:
 *        mu        int8 [L][Hkv][n_pages][d]        mu_scale    fp16 [L][Hkv][n_pages]
 *        basis     int4 [L][Hkv][n_pages][RS][d/2]  basis_scale fp16 [L][Hkv][n_pages][RS]
 *        coef      int8 [L][Hkv][n_pages][16][RS]   coef_scale  fp16 [L][Hkv][n_pages][RS]
 *    or, for LOCKS_SUMMARY_F32, unquantized fp32 mu [..][d], basis [..][RS][d] and
 *    coef [..][16][RS]. RS, the rank slot count, is 8 (LOCKS_CUDA_MAX_RANK) for ranks
 *    1..8 and 16 (LOCKS_CUDA_RANK_SLOTS) for 9..15, so every row is 16-byte aligned;
 *    slots >= rank are zero. Values are the CPU's (quantized) values. The tensor-core
 *    score kernels take quantized rank <= 8; ranks 9..15 and fp32 summaries are scored
 *    by a plain fp32 kernel (score.cu).
 *  - Supported: LOCKS_SUMMARY_Q and LOCKS_SUMMARY_F32, rank 1..15, head_dim 64/128/256,
 *    GQA group <= 16. Anything else returns LOCKS_ERR_UNSUPPORTED.
 *  - Sequence bookkeeping (free list, block tables on the host) stays with the caller;
 *    after every change of a sequence's pages or length the caller mirrors it into the
 *    device with locks_cuda_seq_sync().
 *  - Device frees set the pointer to NULL. Errors of the CUDA runtime are logged and
 *    returned as LOCKS_ERR_BACKEND.
 */
#ifndef LOCKS_CUDA_H
#define LOCKS_CUDA_H

#include "locks.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOCKS_CUDA_MAX_RANK 8  /* rank slots of the tensor-core layout (ranks 1..8, quantized) */
#define LOCKS_CUDA_RANK_SLOTS 16 /* rank slots for ranks 9..15 */
#define LOCKS_CUDA_MAX_GROUP 16 /* query heads per KV head (one MMA row tile) */

typedef struct locks_cuda_cache locks_cuda_cache;

/* ---- cache --------------------------------------------------------------------- */

/* Allocates the K/V pool, the summary pool and the per-sequence tables on
 * p->device with cudaMalloc. NULL and *err on failure. */
locks_cuda_cache *locks_cuda_cache_init(const locks_cache_params *p, locks_status *err);
/* The same over the caller's K/V pages (k_pages, v_pages: [n_layers] device pointers
 * in layout, page_stride elements apart or 0 for Hkv * 16 * d; locks.h "Caller-owned KV
 * pages"): no K/V pool of its own. */
locks_cuda_cache *locks_cuda_cache_init_ext(const locks_cache_params *p, const void *const *k_pages,
                                           const void *const *v_pages, locks_kv_layout layout,
                                           size_t page_stride, locks_status *err);
/* Caller-owned pages: builds the summaries of n physical pages (host array) of one layer
 * from the caller's keys. Synchronous. */
locks_status locks_cuda_ext_build(locks_cuda_cache *c, int32_t layer, const int32_t *pages, int32_t n);

/* Frees everything and sets *c to NULL. */
void locks_cuda_cache_free(locks_cuda_cache **c);

/* Issues the cache's work on `stream` (a cudaStream_t) from now on; NULL: the cache's
 * own stream. Work issued before is ordered first through an event (no host wait). */
locks_status locks_cuda_set_stream(locks_cuda_cache *c, void *stream);

/* Mirrors one sequence slot: its block table (n_pages logical -> physical) and its
 * length in tokens. len 0 marks the slot unused. */
locks_status locks_cuda_seq_sync(locks_cuda_cache *c, int32_t seq, const int32_t *block_table,
                                 int32_t n_pages, int32_t len);

/* Writes K/V of tokens [pos, pos + n) of one layer of sequence seq (the slot's block
 * table must cover them): d_k, d_v [n][Hkv][d] fp32 device memory. Checks for
 * non-finite input first (LOCKS_ERR_NONFINITE, nothing written), then converts and
 * stores, then builds the summaries of the n_build physical pages build_pages (host
 * array: the pages this write made or kept full; the caller tracks filled slots).
 * Synchronous. *stored (may be NULL) says whether the store began: 0 on every failure
 * that left the device cache untouched, 1 once the K/V store was launched (a failure
 * then leaves those slots and the summaries of build_pages undefined). */
locks_status locks_cuda_cache_write(locks_cuda_cache *c, int32_t seq, int32_t layer, int32_t pos,
                                    int32_t n, const float *d_k, const float *d_v,
                                    const int32_t *build_pages, int32_t n_build, int *stored);

/* Builds the summaries of n physical pages d_pages[n] of one layer, all KV heads,
 * from the stored keys (asynchronous on the cache's stream). */
locks_status locks_cuda_summary_build(locks_cuda_cache *c, int32_t layer, const int32_t *d_pages,
                                      int32_t n);

/* One page's summary, dequantized to fp32 on the host: mu[d], basis[r][d], coef[16][r]. */
locks_status locks_cuda_summary_get(locks_cuda_cache *c, int32_t layer, int32_t kv_head,
                                    int32_t page, float *mu, float *basis, float *coef);

/* Raw quantized summary of one page (host copies), RS = locks_cuda_rank_slots(rank):
 * mu_q[d], *mu_scale, basis_q[RS][d/2], basis_scale[RS], coef_q[16][RS], coef_scale[RS]
 * (fp16 bits). LOCKS_ERR_UNSUPPORTED for an fp32-summary cache. */
locks_status locks_cuda_summary_get_raw(locks_cuda_cache *c, int32_t layer, int32_t kv_head,
                                        int32_t page, int8_t *mu_q, uint16_t *mu_scale,
                                        uint8_t *basis_q, uint16_t *basis_scale, int8_t *coef_q,
                                        uint16_t *coef_scale);

/* Copies the stored K and V block of (layer, physical page) to the host as
 * [Hkv][16][d] uint16 (fp16 or bf16 bits, the cache's kv dtype). Owned pages only. */
locks_status locks_cuda_kv_page_get(locks_cuda_cache *c, int32_t layer, int32_t page, uint16_t *k,
                                    uint16_t *v);

/* Fills the K/V pages of one layer (the whole pool) with i.i.d. hash-random values,
 * uniform in [-a, a] for keys and [-1, 1] for values. For benchmarks: timing only
 * (near-uniform attention, the top-k's worst case), not for fidelity. */
locks_status locks_cuda_fill_random(locks_cuda_cache *c, int32_t layer, uint64_t seed, float a);

/* ---- decode step pieces (device arrays, on the cache's stream) ------------------- */

/* Group masses of the sequence's full pages: d_mass[Hkv][n_full] (device), from
 * queries d_q[n_q_heads][d] fp32 (device). */
locks_status locks_cuda_score(locks_cuda_cache *c, int32_t layer, int32_t seq, const float *d_q,
                              int32_t n_q_heads, const locks_step_params *p, float *d_mass);

/* Selection from group masses (device d_mass[Hkv][n_full]) into device
 * d_pages[Hkv][max_pages], d_n_pages[Hkv]; same rules as locks_select. */
locks_status locks_cuda_select(locks_cuda_cache *c, int32_t seq, const float *d_mass,
                               const locks_step_params *p, int32_t *d_pages, int32_t *d_n_pages,
                               int32_t max_pages);

/* locks_cuda_select through the step's multi-block top-k (topk_mb.cu) instead of the
 * one-block kernel, for tests; the budget must already be checked. */
locks_status locks_cuda_select_mb(locks_cuda_cache *c, int32_t seq, const float *d_mass,
                                  const locks_step_params *p, int32_t *d_pages, int32_t *d_n_pages,
                                  int32_t max_pages);

/* Exact attention over listed pages (device d_pages[Hkv][max_pages], d_n_pages[Hkv]),
 * d_q[n_q_heads][d] fp32 -> d_out[n_q_heads][d] fp32, d_lse[n_q_heads] (may be NULL). */
locks_status locks_cuda_attend(locks_cuda_cache *c, int32_t layer, int32_t seq, const float *d_q,
                               int32_t n_q_heads, float scale, const int32_t *d_pages,
                               const int32_t *d_n_pages, int32_t max_pages, float *d_out,
                               float *d_lse);

/* Dense attention over every page of each sequence (flash-decoding), batch of n_seqs. */
locks_status locks_cuda_attend_dense(locks_cuda_cache *c, int32_t layer, const int32_t *seq_ids,
                                     int32_t n_seqs, const float *d_q, int32_t n_q_heads,
                                     float scale, float *d_out);

/* The whole step (score -> group mass -> top-k -> sparse attention) for a batch:
 * d_q [n_seqs][n_q_heads][d] fp32 device, d_out the same shape. sel (host, may be
 * NULL) receives the selection (copied back); stats (may be NULL) gets bytes and
 * per-phase times (CUDA events; timing adds synchronisation). Synchronous. */
locks_status locks_cuda_decode_step(locks_cuda_cache *c, int32_t layer, const int32_t *seq_ids,
                                    int32_t n_seqs, const float *d_q, int32_t n_q_heads,
                                    const locks_step_params *p, float *d_out,
                                    locks_selection *sel, locks_step_stats *stats);

/* ---- CUDA graph of the step ----------------------------------------------------- */

typedef struct locks_cuda_graph locks_cuda_graph;

/* Captures the whole step for a fixed batch, fixed d_q / d_out buffers and fixed
 * parameters into a CUDA graph. Sequence lengths and block tables are read from the
 * device when the graph runs, so appending tokens (locks_cuda_seq_sync) between
 * replays is fine as long as every sequence keeps <= max_ctx tokens (the grid is sized
 * for max_ctx) and the budget covers the forced pages (checked at each replay). */
locks_cuda_graph *locks_cuda_graph_capture(locks_cuda_cache *c, int32_t layer,
                                           const int32_t *seq_ids, int32_t n_seqs,
                                           const float *d_q, int32_t n_q_heads,
                                           const locks_step_params *p, int32_t max_ctx,
                                           float *d_out, locks_status *err);
/* Launches the graph; sync != 0 waits for it. */
locks_status locks_cuda_graph_replay(locks_cuda_graph *g, int sync);
void locks_cuda_graph_free(locks_cuda_graph **g);

/* ---- capturable step plans (stream.cu; locks.h "Capturable decode step") ----------- */

typedef struct locks_cuda_plan locks_cuda_plan;

/* Validates and sizes everything for the batch (set-up, synchronises). */
locks_cuda_plan *locks_cuda_plan_init(locks_cuda_cache *c, const int32_t *seq_ids, int32_t n_seqs,
                                      int32_t n_q_heads, const locks_step_params *p, int32_t max_ctx,
                                      locks_status *err);
void locks_cuda_plan_free(locks_cuda_plan **pl);
/* The per-step calls: enqueue on `stream` (a cudaStream_t; NULL: the legacy default
 * stream) only. d_lens, d_tables, d_q, d_out are device memory. */
locks_status locks_cuda_plan_set_lens(locks_cuda_plan *pl, const int32_t *d_lens, const int32_t *d_tables,
                                      int32_t table_stride, void *stream);
locks_status locks_cuda_plan_pages_filled(locks_cuda_plan *pl, int32_t layer, int32_t n_new, void *stream);
locks_status locks_cuda_plan_decode(locks_cuda_plan *pl, int32_t layer, const float *d_q, float *d_out,
                                    void *stream);
locks_status locks_cuda_plan_selection(const locks_cuda_plan *pl, const int32_t **d_pages,
                                       const int32_t **d_n_pages, int32_t *stride);
/* Waits for the last stream, reads and clears the status bits, and copies sequence i's
 * device length to lens[i] and its table (ceil(len / 16) entries) to
 * tables[i * table_stride ..] (host arrays; tables may be NULL). */
locks_status locks_cuda_plan_status(locks_cuda_plan *pl, uint32_t *bits, int32_t *lens, int32_t *tables,
                                    int32_t table_stride);

/* Device selection of the last step/replay: d_pages [n_seqs*Hkv][max_sel], counts. */
locks_status locks_cuda_last_selection(locks_cuda_cache *c, int32_t n_seqs, locks_selection *sel);

/* ---- timing helpers for tools (events on the cache's stream) ---------------------- */

/* Synchronises the cache's stream. */
locks_status locks_cuda_sync(locks_cuda_cache *c);
/* Milliseconds of device time for reps launches of fn(arg) on the cache's stream,
 * median over `trials` trials each timed with events. */
typedef locks_status (*locks_cuda_launch_fn)(void *arg);
locks_status locks_cuda_time(locks_cuda_cache *c, locks_cuda_launch_fn fn, void *arg, int reps,
                             int trials, double *median_ms);
/* Evicts the L2 cache (writes a 256 MiB scratch buffer, allocated on first use) so the
 * next timed launch starts cold, as a layer's step does in a real model. */
locks_status locks_cuda_flush_l2(locks_cuda_cache *c);
/* Median device time of fn(arg) over `trials` single launches, each after an L2 flush. */
locks_status locks_cuda_time_cold(locks_cuda_cache *c, locks_cuda_launch_fn fn, void *arg, int trials,
                                  double *median_ms);
/* Device memory helpers for tools/tests. */
void *locks_cuda_malloc(size_t bytes);
void locks_cuda_free_ptr(void **p);
locks_status locks_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
locks_status locks_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
/* Name of the device, for logs. */
const char *locks_cuda_device_name(locks_cuda_cache *c);
/* Bytes of one summary as the device stores it: rank 8 quantized (slots padded to 8),
 * and of any rank and precision (slots padded to locks_cuda_rank_slots(rank)). */
size_t locks_cuda_summary_stored_bytes(int32_t head_dim);
size_t locks_cuda_summary_stored_bytes_of(int32_t head_dim, int32_t rank, locks_summary_prec prec);
/* Rank slots the device gives a summary of this rank: 8 or 16. */
int32_t locks_cuda_rank_slots(int32_t rank);

/* ---- Lab switches --------------------------------------------------------------------
 * Earlier or alternative kernel paths kept for A/B timing (bench/RESULTS.md). The library
 * reads no environment: it runs locks_cuda_lab_default() unless a tool or a test calls
 * locks_cuda_set_lab (the `locks` command does once at start, from the environment
 * variables named beside each field; tools/locks.c). Process-wide; a cache reads them when
 * its step workspace is first reserved, a GPU model engine at lg_ctx_init, so set them
 * before making either, and not while another thread makes one. */
typedef struct {
    int pdl;             /* LOCKS_CUDA_PDL: the step's kernels with programmatic dependent launch (1) */
    int score_i8_g16;    /* LOCKS_CUDA_SCORE_I8G16: G 9..16 on the int8 score kernel (1; 0: fp16) */
    int32_t att_min_pps; /* LOCKS_CUDA_ATT_MIN_PPS: fewest pages per attention split (0: by shape) */
    int32_t topk_mb_min; /* LOCKS_CUDA_TOPK_MB_MIN: pages from which the multi-block top-k runs (-1: by shape) */
    int32_t mass_ppb;    /* LOCKS_CUDA_MASS_PPB: pages per mass block (0: by shape) */
    int engine_gemv;     /* LOCKS_CUDA_GEMV: the engine's decode products through cuBLAS and the small
                            kernels (0), gemv.cu (1), gemv.cu with programmatic dependent launch (2) */
    int engine_fused;    /* LOCKS_ENGINE_FUSED: one attention-prep kernel (1) or the earlier launches (0) */
    int engine_pad;      /* LOCKS_ENGINE_PAD: products of fewer than 8 rows run with 8 (1) or as they come (0) */
    int engine_rest;     /* LOCKS_ENGINE_REST: small kernels with PDL, summaries on a forked branch (1) or
                            the earlier launches (0) */
    int engine_qweights; /* LOCKS_ENGINE_QWEIGHTS: Q4_0 / Q4_1 / Q8_0 / K-quant matrices kept quantized on the
                            device, int8 inputs to the decode products (1), or dequantized to fp16 at
                            load, fp16 inputs (0; read by engine_cuda_init and engine_cuda_upload) */
    int engine_wtype;    /* LOCKS_ENGINE_WTYPE=f16|bf16: the engine's 16-bit type forced (LOCKS_DTYPE_F16 or
                            _BF16), or 0: by the model (bf16 for BF16 files and Gemma 3, else fp16; read
                            where engine_qweights is) */
} locks_cuda_lab;
locks_cuda_lab locks_cuda_lab_default(void);
/* lab NULL: back to the defaults. */
void locks_cuda_set_lab(const locks_cuda_lab *lab);
locks_cuda_lab locks_cuda_get_lab(void);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_CUDA_H */
