/*
 * locks_core.h — LOCKS: page-local compact key summaries for sparse long-context decoding.
 *
 * The library keeps a paged KV cache fully resident and, for each 16-token page of
 * keys, a tiny spectral summary (centroid + rank-r basis + per-token coefficients).
 * Each decode step scores every page from its summary alone, averages the estimated
 * attention masses over each GQA group, and attends exactly to the top pages that fit
 * a token budget. See docs/DESIGN.md for the method; this header is the contract.
 *
 * ---------------------------------------------------------------------------------
 * Conventions
 * ---------------------------------------------------------------------------------
 *  - Every function returns a locks_status (or a value documented beside it). The
 *    library never exits, never prints to stdout; it logs through locks_set_log().
 *  - Objects are opaque and come in init/free pairs. Parameter structs are transparent:
 *    get defaults from locks_*_default_params() and change what you need.
 *  - A failed call leaves its object as it was (no partial appends, no half-built
 *    summaries), unless its comment says otherwise. locks_last_error() says why it
 *    failed (which argument, which value).
 *  - Threads: a cache may be used from several threads at once. Every call on a cache
 *    (and on a step plan or graph of it) runs under the cache's own lock, so calls that
 *    change it are serialised whole: each sees the cache as the previous call left it,
 *    and work inside a call is still spread over the cache's pool. The calls that only
 *    read the sequence tables (locks_cache_seq_len, locks_cache_block_table,
 *    locks_cache_free_pages) share the lock: they run side by side, and a call that
 *    changes the cache waits for them (a waiting one goes before new reads). Calls
 *    that only read what never changes after init (locks_cache_get_params,
 *    locks_cache_serves, locks_cache_pool, locks_cache_summary_bytes,
 *    locks_cache_k_page / v_page) skip the lock. Pointers a call returns into the cache
 *    (locks_cache_block_table, the K/V pages) stay valid only while no other thread
 *    changes that sequence. Calls on
 *    different caches run in parallel (caches sharing a pool take turns inside it).
 *    locks_cache_free must not overlap any other call on that cache. An engine
 *    context (locks_model.h) is used by one thread at a time.
 *
 * ---------------------------------------------------------------------------------
 * Cache layout (CPU backend; the CUDA backend keeps the same layout in device memory)
 * ---------------------------------------------------------------------------------
 *  P = LOCKS_PAGE = 16 tokens per page, d = head_dim, Hkv = n_kv_heads.
 *
 *  A *physical page* id p in [0, n_pages) names one 16-token slot in every layer: the
 *  pool is shared by all layers, like vLLM's block tables. For one layer l:
 *
 *      K[l] : [n_pages][Hkv][P][d]  fp16   (HND: one contiguous P x d block per
 *      V[l] : [n_pages][Hkv][P][d]  fp16    (page, head): 2*P*d bytes per block)
 *
 *  Keys are stored as given (after RoPE: the caller applies positions).
 *
 *  Each sequence owns a *block table*: logical page i (tokens [16 i, 16 i + 16)) ->
 *  physical page. Pages are taken from a free list on append and returned on
 *  sequence removal. Token t of a sequence lives in physical page
 *  block_table[t / 16], slot t % 16.
 *
 *  A page is *full* when all 16 slots have been written. A full page of layer l gets
 *  a summary per KV head (built on the write that fills it). The last page of a
 *  sequence, if not full, is the *partial page*: it has no summary and is always
 *  attended.
 *
 * ---------------------------------------------------------------------------------
 * Summary format (per layer, KV head, physical page), rank r (1..15), as docs/DESIGN.md §1
 * ---------------------------------------------------------------------------------
 *  mu = mean of the page's 16 keys;  X = K - mu = C V^T with V (d x r) orthonormal
 *  columns (top-r right singular vectors, from a Jacobi eigendecomposition of the
 *  16x16 Gram matrix X X^T) and C = X V (16 x r).
 *
 *  LOCKS_SUMMARY_F32:   mu f32[d], V f32[r][d] (basis vector k contiguous), C f32[16][r]
 *                       -> 4 (d + r d + 16 r) bytes.
 *  LOCKS_SUMMARY_Q (the paper's deployed format):
 *      mu      int8[d]            with one fp16 scale  (mu ~= scale * q)
 *      V       int4[r][d] packed two per byte, low nibble first, signed [-7, 7],
 *              one fp16 scale per basis vector
 *      C       int8[16][r]        one fp16 scale per basis vector (column of C)
 *      -> d + 2 + r d / 2 + 2 r + 16 r + 2 r bytes  (802 at d = 128, r = 8).
 *  locks_summary_bytes() returns the exact count. Summaries of one (layer, KV head)
 *  are stored page after page in separate arrays (structure of arrays), so scoring
 *  all pages of a head streams contiguous memory.
 *
 * ---------------------------------------------------------------------------------
 * Score / select / attend (one decode step, one layer)
 * ---------------------------------------------------------------------------------
 *  score:  s_hj = log sum_{i in page j} exp(scale * (q_h . mu_j + (V_j^T q_h) . c_i))
 *          for every full page j and query head h.
 *  mass:   m_hj = exp(s_hj - Z_h), Z_h = log sum over j of exp(s_hj) taken over the
 *          *scored* (full, summarised) pages only; the partial page is always attended
 *          and is left out of the normaliser. m_j = mean over the G heads of a group.
 *  select: forced pages = partial page + n_sink leading + n_recent trailing full
 *          pages; the rest of the token budget is filled with the top pages by m_j
 *          (ties broken by lower logical index). The budget counts every attended
 *          token (a full page 16, the partial page its length). If the forced pages
 *          alone exceed the budget the call fails with LOCKS_ERR_BUDGET (no clamp).
 *          budget >= context length selects every page: exactly dense attention.
 *          With a mass target (locks_step_params.mass) the top pages are taken only
 *          until their summed m_j (forced full pages counted) reaches the target.
 *  attend: exact softmax attention over the selected pages, fp32 accumulation,
 *          flash-decoding (split over pages, merged by log-sum-exp).
 */
#ifndef LOCKS_CORE_H
#define LOCKS_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOCKS_PAGE 16     /* tokens per page */
#define LOCKS_MAX_RANK 15 /* a centred 16-key page has rank <= 15 */
#define LOCKS_MAX_HEAD_DIM 256

/* ------------------------------------------------------------------------------ */
/* Status, logging                                                                  */
/* ------------------------------------------------------------------------------ */

typedef enum {
    LOCKS_OK = 0,
    LOCKS_ERR_INVALID_ARG,  /* a parameter is out of range or a pointer is NULL */
    LOCKS_ERR_OOM,          /* a host or device allocation failed */
    LOCKS_ERR_POOL_FULL,    /* the page pool has no free page; nothing was changed */
    LOCKS_ERR_NONFINITE,    /* NaN or Inf in a query, key or value; nothing was changed */
    LOCKS_ERR_BUDGET,       /* budget <= 0, or smaller than the forced pages */
    LOCKS_ERR_NO_SEQ,       /* unknown or removed sequence id */
    LOCKS_ERR_UNSUPPORTED,  /* valid request this build or backend cannot do */
    LOCKS_ERR_IO,           /* file open/read/write failed */
    LOCKS_ERR_FORMAT,       /* malformed file (dump, GGUF, ...) */
    LOCKS_ERR_BACKEND,      /* the CUDA runtime reported an error */
    LOCKS_ERR_NO_META,      /* the cache keeps no metadata for this selector
                             * (locks_cache_params.selectors) */
    LOCKS_STATUS_COUNT
} locks_status;

/* Human-readable name of a status; never NULL. */
const char *locks_status_str(locks_status s);

/* Why the last failed call on this thread failed, in words ("locks_decode_step:
 * n_q_heads 12 is not a positive multiple of n_kv_heads 8"); "" if none failed since
 * locks_clear_error. Thread-local. Successful calls leave it alone (so a rollback after
 * a failure keeps the failure's reason); every failing call on a cache (and
 * locks_cache_init / init_ext) sets it, to the status' name at least, so right after
 * one of them fails the message is that call's. Other calls (the model loader, the
 * engine) set it where they say why, and may leave an older message when they don't:
 * call locks_clear_error first to tell. */
const char *locks_last_error(void);
void locks_clear_error(void);

typedef enum { LOCKS_LOG_ERROR = 0, LOCKS_LOG_WARN, LOCKS_LOG_INFO, LOCKS_LOG_DEBUG } locks_log_level;
typedef void (*locks_log_fn)(locks_log_level level, const char *msg, void *user);
/* Sets the process-wide log callback (NULL: silent, the default). */
void locks_set_log(locks_log_fn fn, void *user);

/* For bindings that mirror the public structs by hand (python/locks/_capi.py): the
 * sizeof of struct `type` ("locks_cache_params", "locks_step_params",
 * "locks_selection", "locks_step_stats", "locks_ext_kv") when field is NULL, else the
 * offsetof of that field; (size_t)-1 for an unknown name. locks_abi_fields: how many
 * fields the struct has (0 for an unknown name). */
size_t locks_abi_layout(const char *type, const char *field);
size_t locks_abi_fields(const char *type);

/* ------------------------------------------------------------------------------ */
/* Enums                                                                            */
/* ------------------------------------------------------------------------------ */

typedef enum { LOCKS_DTYPE_F32 = 0, LOCKS_DTYPE_F16, LOCKS_DTYPE_BF16 } locks_dtype;

typedef enum {
    LOCKS_SUMMARY_F32 = 0, /* unquantized: Theorem 1's coverage bound holds */
    LOCKS_SUMMARY_Q,       /* deployed: int8 mu, int4 basis, int8 coefficients */
} locks_summary_prec;

typedef enum {
    LOCKS_SEL_FULL = 0, /* every page (dense attention) */
    LOCKS_SEL_ORACLE,   /* exact page LSE from all keys, same group mass and top-k */
    LOCKS_SEL_LOCKS,    /* summary-estimated page LSE */
    LOCKS_SEL_QUEST,    /* per-channel min/max bound (Quest) */
    LOCKS_SEL_SHADOW,   /* shared per-(layer, head) basis (ShadowKV-style) */
    LOCKS_SEL_ROCKET,   /* top-r channel min/max, temperature softmax (RocketKV-style) */
    LOCKS_SEL_SHADOW_LM, /* ShadowKV's landmark rule: page means, softmax, max over group */
    LOCKS_SEL_COUNT
} locks_selector;

/* Sets of selectors (locks_cache_params.selectors): LOCKS_SEL_BIT(LOCKS_SEL_QUEST) |
 * LOCKS_SEL_BIT(LOCKS_SEL_ROCKET), or LOCKS_SEL_ALL. */
#define LOCKS_SEL_BIT(s) (1u << (unsigned)(s))
#define LOCKS_SEL_ALL ((1u << (unsigned)LOCKS_SEL_COUNT) - 1u)

/* "full", "oracle", "locks", ...; NULL for an out-of-range value. */
const char *locks_selector_name(locks_selector s);
/* Parses a selector name; returns LOCKS_ERR_INVALID_ARG for an unknown name. */
locks_status locks_selector_parse(const char *name, locks_selector *out);

typedef enum { LOCKS_BACKEND_CPU = 0, LOCKS_BACKEND_CUDA } locks_backend;

/* ------------------------------------------------------------------------------ */
/* Thread pool                                                                      */
/* ------------------------------------------------------------------------------ */

/* A small pthreads pool that runs "n tasks of one function" jobs: n_threads workers
 * in total, the calling thread included (1 runs everything inline, no threads are
 * created). locks_pool_run hands out task indices 0..n_tasks-1 dynamically and returns
 * when every task has finished; each task also receives the index of the thread
 * running it (0 = caller, 1..n_threads-1 = workers), for per-thread scratch without
 * locks. One job at a time per pool: jobs from several threads (caches or contexts
 * sharing it, see locks_cache_params.pool) are serialised, and a task must not call
 * locks_pool_run on the same pool (not reentrant). Every cache runs its work
 * on one (locks_cache_pool); an engine can run its own work (matmuls) on the same. */
typedef struct locks_pool locks_pool;
typedef void (*locks_pool_fn)(void *arg, int32_t task, int32_t thread);

/* n_threads >= 1. Returns NULL if a thread or an allocation failed. A pool is shared by
 * reference: every cache (and engine context) using it holds one, locks_pool_free drops
 * the caller's, and the last one stops the threads. A job wakes only the workers it can
 * use (min(n_tasks, n_threads) - 1). */
locks_pool *locks_pool_init(int32_t n_threads);
/* Adds an owner (a reference that locks_pool_free drops); returns p. */
locks_pool *locks_pool_retain(locks_pool *p);
void locks_pool_free(locks_pool *p);
int32_t locks_pool_threads(const locks_pool *p);
/* Runs fn(arg, t, thread) for t in [0, n_tasks); returns when all are done. */
void locks_pool_run(locks_pool *p, int32_t n_tasks, locks_pool_fn fn, void *arg);

/* ------------------------------------------------------------------------------ */
/* Summaries of one page (stand-alone, for tools and tests)                         */
/* ------------------------------------------------------------------------------ */

/* Bytes one (page, KV head) summary occupies in the cache at this precision. */
size_t locks_summary_bytes(int32_t head_dim, int32_t rank, locks_summary_prec prec);

/* Symmetric eigendecomposition of an n x n matrix a (row-major, n <= 16) by cyclic
 * Jacobi, in double precision. Writes eigenvalues in descending order to w[n] and the
 * matching unit eigenvectors as the columns of u (n x n, row-major). a is not changed. */
locks_status locks_eig_sym(int32_t n, const double *a, double *w, double *u);

/* Unquantized summary of one page: keys k[16][d] (fp32) -> mu[d], basis[r][d]
 * (orthonormal rows; zero rows for null directions), coef[16][r]. Any head_dim in
 * 1..LOCKS_MAX_HEAD_DIM and rank in 1..LOCKS_MAX_RANK (else LOCKS_ERR_INVALID_ARG);
 * rank min(d, 15) reconstructs the page exactly. (The quantized layout needs an even
 * d: locks_summary_bytes is 0 for LOCKS_SUMMARY_Q at odd d; a CPU cache takes head_dim
 * multiples of 8, a CUDA cache 64/128/256.) */
locks_status locks_summary_build_f32(int32_t head_dim, int32_t rank, const float *k,
                                     float *mu, float *basis, float *coef);

/* ------------------------------------------------------------------------------ */
/* Paged KV cache                                                                   */
/* ------------------------------------------------------------------------------ */

typedef struct locks_cache locks_cache;

typedef struct {
    int32_t n_layers;   /* >= 1 */
    int32_t n_kv_heads; /* Hkv >= 1 */
    int32_t head_dim;   /* 64, 128 or 256 */
    int32_t n_pages;    /* physical pages in the pool (each holds 16 tokens of every layer) */
    int32_t max_seqs;   /* sequence slots */
    int32_t rank;       /* summary rank r, 1..15 (default 8) */
    locks_summary_prec summary_prec; /* default LOCKS_SUMMARY_Q */
    locks_dtype kv_dtype;            /* LOCKS_DTYPE_F16 (BF16 on CUDA) */
    locks_backend backend;           /* default CPU; CUDA: see "CUDA backend" below */
    int32_t n_threads;               /* CPU worker threads (default: 1); ignored with pool */
    int32_t device;                  /* CUDA device ordinal */
    /* The selectors this cache serves (LOCKS_SEL_BIT set, default
     * LOCKS_SEL_BIT(LOCKS_SEL_LOCKS)): the cache keeps only their page metadata. FULL,
     * ORACLE and LOCKS need none beyond what every cache holds (the K/V pages and the
     * LOCKS summaries), so 0 serves those three; QUEST adds fp16 key min/max per page
     * (4 d bytes per page and KV head), ROCKET that min/max and the SnapKV votes (5
     * bytes), SHADOW and SHADOW_LM the landmarks and projections (2 d + 4 r + 4 bytes)
     * and a basis per sequence slot, layer and KV head (4 r d bytes). Asking a step or
     * score for a selector the cache does not serve gives LOCKS_ERR_NO_META. A CUDA
     * cache keeps none (its step serves FULL and LOCKS). Bits past LOCKS_SEL_ALL give
     * LOCKS_ERR_INVALID_ARG. */
    uint32_t selectors;
    /* CPU: the thread pool to run on, shared by reference: the cache holds its own
     * reference, so the caller may locks_pool_free its pool right after creating its
     * caches; NULL (default): the cache starts its own of n_threads. */
    locks_pool *pool;
} locks_cache_params;

locks_cache_params locks_cache_default_params(void);

/* Allocates the whole pool up front. Returns NULL and sets *err (if err != NULL) on
 * invalid parameters (LOCKS_ERR_INVALID_ARG) or allocation failure (LOCKS_ERR_OOM). */
locks_cache *locks_cache_init(locks_cache_params params, locks_status *err);
void locks_cache_free(locks_cache *c);
locks_cache_params locks_cache_get_params(const locks_cache *c);
/* 1 if the cache holds the metadata selector s reads (see locks_cache_params.selectors),
 * else 0 (also for an out-of-range s or a NULL cache). */
int locks_cache_serves(const locks_cache *c, locks_selector s);
/* The thread pool the cache's CPU work runs on (its own or params.pool); NULL on CUDA. */
locks_pool *locks_cache_pool(const locks_cache *c);

/* Sequences. seq_add writes a new id to *seq_id (LOCKS_ERR_INVALID_ARG if all slots are
 * taken). seq_remove frees the sequence's pages.
 * seq_remove, seq_truncate and append are all-or-nothing: on any error (on a CUDA
 * cache also LOCKS_ERR_BACKEND from the device copy of the sequence, which is updated
 * first) the cache is unchanged. */
locks_status locks_cache_seq_add(locks_cache *c, int32_t *seq_id);
locks_status locks_cache_seq_remove(locks_cache *c, int32_t seq_id);
/* Number of tokens reserved in the sequence (-1 for an unknown id). */
int32_t locks_cache_seq_len(const locks_cache *c, int32_t seq_id);
/* The sequence's block table: *n_pages logical pages; returns a pointer valid until
 * the next append/remove on that sequence, or NULL for an unknown id. */
const int32_t *locks_cache_block_table(const locks_cache *c, int32_t seq_id, int32_t *n_pages);
/* Free physical pages left in the pool. */
int32_t locks_cache_free_pages(const locks_cache *c);

/* Shared prefix pages (CPU backend, the cache's own pages). Sequence dst, which must be
 * live and empty, takes sequence src's first n_pages pages (1 .. src's length / 16, each
 * written in full in every layer) into its block table: the same physical pages, K/V,
 * summaries and selector metadata, so dst holds n_pages * 16 tokens, attended exactly as
 * src's, without copying or computing anything. Each page counts its holders; it goes
 * back to the pool when the last one drops it (seq_remove, or a truncate below it). A
 * shared page never changes: a write into one is refused (LOCKS_ERR_INVALID_ARG), and a
 * truncate whose new end falls inside a shared page first gives that sequence its own
 * copy of the page (LOCKS_ERR_POOL_FULL if no page is free, nothing changed). Dropping
 * or truncating one holder leaves every other holder's tokens as they were. A RocketKV
 * SnapKV eviction (locks_cache_snapkv_keep) marks physical pages, so it reaches every
 * holder. LOCKS_ERR_NO_SEQ for an unknown or removed dst / src; LOCKS_ERR_INVALID_ARG
 * for dst == src, a non-empty dst or pages that are not full; LOCKS_ERR_UNSUPPORTED on a
 * CUDA cache or one over the caller's pages. On any error nothing changes. */
locks_status locks_cache_seq_share(locks_cache *c, int32_t dst, int32_t src, int32_t n_pages);
/* How many block tables hold physical page `page` (0: free); -1 for a page out of range. */
int32_t locks_cache_page_refs(const locks_cache *c, int32_t page);

/* Shortens the sequence to its first len tokens (0 <= len <= its length, else
 * LOCKS_ERR_INVALID_ARG; LOCKS_ERR_NO_SEQ for an unknown id): pages past the new end go
 * back to the pool, and a page that becomes partial loses its summary (rebuilt when a
 * write fills it again). For decoding several continuations of one prefix. */
locks_status locks_cache_seq_truncate(locks_cache *c, int32_t seq_id, int32_t len);

/* Reserves n_tokens more positions at the end of the sequence (for all layers),
 * taking pages from the pool. LOCKS_ERR_POOL_FULL if the pool cannot hold them:
 * then nothing is reserved and the cache is unchanged. */
locks_status locks_cache_append(locks_cache *c, int32_t seq_id, int32_t n_tokens);

/* Writes K/V of tokens [pos, pos + n) of one layer (they must be reserved).
 * k, v: [n][Hkv][d] fp32 (host memory on CPU, device memory on CUDA). NaN, Inf or a
 * value the storage type cannot hold (|x| > 65504 for fp16) gives LOCKS_ERR_NONFINITE
 * and writes nothing (the sequence is as it was). The CPU backend attends only written
 * tokens: a step, score or attend over a sequence with a token appended but not written
 * in that layer fails with LOCKS_ERR_INVALID_ARG (locks_last_error names the token). For every page of this layer
 * that the write fills, the summaries are built before returning (multi-threaded when
 * the write spans several pages). On the CPU a write cannot fail once it stores. On
 * CUDA a device failure (LOCKS_ERR_BACKEND) before the store changes nothing; one
 * after the store began leaves those slots undefined and marked unwritten (their pages
 * are not full, so no selector reads their summaries): write them again. */
locks_status locks_cache_write(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos,
                               int32_t n, const float *k, const float *v);

/* Direct access to the stored pages (CPU backend only; NULL otherwise): the fp16 K or V
 * block of (layer, physical page) as [Hkv][P][d] uint16_t (IEEE half bits). */
const uint16_t *locks_cache_k_page(const locks_cache *c, int32_t layer, int32_t page);
const uint16_t *locks_cache_v_page(const locks_cache *c, int32_t layer, int32_t page);

/* Reads back one full page's summary of (layer, KV head, physical page), dequantized to
 * fp32: mu[d], basis[r][d], coef[16][r]. LOCKS_ERR_INVALID_ARG if that page has no
 * summary (not full yet). */
locks_status locks_cache_summary_get(const locks_cache *c, int32_t layer, int32_t kv_head,
                                     int32_t page, float *mu, float *basis, float *coef);

/* A sequence's stored page summaries out and back in, as the cache holds them, so nothing
 * is quantized again (slot save / restore): a sequence loaded with them selects exactly
 * as the one they were read from, on any machine. CPU backend, the cache's own pages
 * (LOCKS_ERR_UNSUPPORTED on CUDA or over the caller's pages); LOCKS_ERR_NO_SEQ for an
 * unknown sequence, LOCKS_ERR_INVALID_ARG for a bad layer or range.
 *
 * A record is one (page, KV head) summary of locks_summary_bytes(head_dim, rank, prec)
 * bytes, its arrays in this order, host byte order, no padding:
 *   LOCKS_SUMMARY_Q:   mu int8[d], mu scale fp16, V int4[r][d] (d / 2 bytes a row, low
 *                      nibble first), V scales fp16[r], C int8[16][r], C scales fp16[r]
 *                      (the Summary format above)
 *   LOCKS_SUMMARY_F32: mu f32[d], V f32[r][d], C f32[16][r]
 *
 * read_summaries: dst [len / 16][Hkv][record] gets the records of the sequence's full
 * pages in layer `layer`, in logical order (dst may be NULL when it has none).
 * LOCKS_ERR_INVALID_ARG if one of those pages is not written in full in that layer. */
locks_status locks_cache_read_summaries(const locks_cache *c, int32_t seq_id, int32_t layer, void *dst);
/* As locks_cache_write, with k, v [n][Hkv][d] fp16 bits stored as given (no conversion)
 * and, if sums is not NULL, the summaries of the pages the write covers whole taken from
 * sums instead of built: pos must then be a multiple of 16 and sums holds
 * [(pos + n) / 16 - pos / 16][Hkv][record] records as read_summaries gives them (a page
 * the write fills but does not cover whole, and every page when sums is NULL, gets a
 * summary built from its keys). The selectors' page metadata is built from the keys
 * either way. Every value is checked before anything is stored: a NaN or Inf among the
 * K/V bits, or a record with a non-finite fp16 scale (Q) or float (F32), gives
 * LOCKS_ERR_NONFINITE and writes nothing; any other bits are valid data (a wrong
 * summary only selects badly, never reads out of bounds). */
locks_status locks_cache_write_f16(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                   const uint16_t *k, const uint16_t *v, const void *sums);

/* Bytes of summaries stored per (page, KV head): on the CPU the bytes the cache's
 * summary arrays hold, divided by (layers x KV heads x pages) (802 at d = 128, r = 8,
 * LOCKS_SUMMARY_Q); on CUDA locks_summary_bytes of the cache's shape (the device pads
 * the rank to 8 slots). */
size_t locks_cache_summary_bytes(const locks_cache *c);

/* LOCKS_SEL_SHADOW's shared basis (CPU backend): fits, for every layer and KV head, the
 * top-r right singular vectors of the sequence's keys written so far (call it at the
 * end of prefill) and projects its full pages' centroids on them; pages that fill
 * later are projected on this basis when first scored. Without this call the first
 * shadow step fits the basis from the keys present then. locks_cache_seq_remove, and
 * a truncate below the length it was fitted at, drop the basis (a reused sequence id
 * is never scored with an earlier prompt's basis). */
locks_status locks_cache_shadow_fit(locks_cache *c, int32_t seq_id);

/* RocketKV's optional first stage, SnapKV prefill eviction, for LOCKS_SEL_ROCKET only
 * (CPU backend), page-granular.
 * observe: q_obs [n_obs][n_q_heads][d] are the queries of the sequence's last n_obs
 * tokens (the prefill's observation window). Every full page of (layer, KV head) gets
 * the SnapKV vote: the softmax attention the window's queries (causal, all G heads of
 * the group) pay to each token before the window, max-pooled over 7 tokens, summed
 * over the page. Pages overlapping the window, and pages that fill later, always stay.
 * scale <= 0 means 1/sqrt(d). Clears earlier evictions of those pages.
 * keep: per KV head, keeps the keep_tokens / 16 pages with the most votes (ties: lower
 * page) and evicts the others from rocket's ranking: they get mass 0, so they are
 * ranked last (a budget larger than the kept pages still reaches them); forced pages
 * are attended regardless. keep_tokens <= 0 keeps every page. Other selectors are not
 * affected. */
locks_status locks_cache_snapkv_observe(locks_cache *c, int32_t seq_id, int32_t layer,
                                        const float *q_obs, int32_t n_obs, int32_t n_q_heads,
                                        float scale);
locks_status locks_cache_snapkv_keep(locks_cache *c, int32_t seq_id, int32_t layer,
                                     int32_t keep_tokens);

/* ------------------------------------------------------------------------------ */
/* Decode step                                                                      */
/* ------------------------------------------------------------------------------ */

typedef struct {
    locks_selector selector; /* default LOCKS_SEL_LOCKS */
    int32_t budget;          /* tokens attended per (sequence, KV head), > 0 (default 2048) */
    int32_t n_sink;          /* leading full pages always attended (default 1) */
    int32_t n_recent;        /* trailing full pages always attended (default 1) */
    float scale;             /* softmax scale; 0 -> 1/sqrt(head_dim) (default 0); a
                              * negative, NaN or infinite scale is LOCKS_ERR_INVALID_ARG
                              * on every backend (so for every scale argument below) */
    float mass;              /* mass target: 0 = off (default, fixed budget); 0 < mass < 1:
                              * per (sequence, KV head) the candidate pages are taken in order
                              * of estimated group mass (largest first, ties to the lower
                              * index) until the mass covered, forced full pages included,
                              * reaches `mass`, at most as many as the budget holds. The budget
                              * is then only a cap: budget >= length no longer means dense.
                              * Any other value: LOCKS_ERR_INVALID_ARG. CPU and CUDA (the
                              * same selections on the same masses; on CUDA at most 16384
                              * candidates under the cap, else LOCKS_ERR_UNSUPPORTED). */
} locks_step_params;

locks_step_params locks_step_default_params(void);

/* Selection table of a decode step, owned by the caller.
 * pages[(s * Hkv + h) * max_pages + i], i < n_pages[s * Hkv + h]: logical page indices
 * selected for sequence s (position in the seq_ids array) and KV head h, ascending.
 * max_pages must be >= the longest sequence's page count. */
typedef struct {
    int32_t *pages;   /* [n_seqs][Hkv][max_pages] */
    int32_t *n_pages; /* [n_seqs][Hkv] */
    int32_t max_pages;
} locks_selection;

/* What a step read and how long its phases took (host wall time on CPU, events on CUDA). */
typedef struct {
    uint64_t bytes_meta;  /* selector metadata read (summaries, min/max, ...) */
    uint64_t bytes_kv;    /* K and V bytes of the attended tokens */
    uint64_t bytes_dense; /* K and V bytes a dense step reads */
    double score_ms, select_ms, attend_ms;
} locks_step_stats;

/* One decode step of one layer for a batch of sequences.
 * q: [n_seqs][n_q_heads][d] fp32, n_q_heads a multiple of Hkv (GQA group G = Hq/Hkv,
 * query head h belongs to KV head h / G). out: [n_seqs][n_q_heads][d] fp32.
 * sel (may be NULL) receives the selection; stats (may be NULL) is overwritten.
 * Errors: LOCKS_ERR_NONFINITE for a NaN/Inf query, LOCKS_ERR_BUDGET, LOCKS_ERR_NO_SEQ,
 * LOCKS_ERR_INVALID_ARG for an empty sequence or a bad scale, LOCKS_ERR_OOM. On the
 * CPU a failed step writes nothing (out, sel, stats untouched); on CUDA a device
 * failure during the step may leave out and sel partly written (the cache is
 * unchanged either way). */
locks_status locks_decode_step(locks_cache *c, int32_t layer, const int32_t *seq_ids,
                               int32_t n_seqs, const float *q, int32_t n_q_heads,
                               const locks_step_params *p, float *out, locks_selection *sel,
                               locks_step_stats *stats);

/* The step's pieces, for one sequence, so engines can fuse their own way. */

/* Group masses m[Hkv][n_full] of the sequence's full pages (logical order) under the
 * selector p->selector (FULL: all ones). n_full = seq_len / 16. */
locks_status locks_score(locks_cache *c, int32_t layer, int32_t seq_id, const float *q,
                         int32_t n_q_heads, const locks_step_params *p, float *mass);

/* Selection from group masses (as locks_score writes them): pages[Hkv][max_pages],
 * n_pages[Hkv]; forced pages and budget as described at the top of this file. */
locks_status locks_select(const locks_cache *c, int32_t seq_id, const float *mass,
                          const locks_step_params *p, int32_t *pages, int32_t *n_pages,
                          int32_t max_pages);

/* Exact attention of each query head over its KV head's pages (logical indices,
 * pages[Hkv][max_pages], n_pages[Hkv]); the partial page must be listed to be attended.
 * A page outside the sequence or n_pages[h] outside 0..max_pages is
 * LOCKS_ERR_INVALID_ARG with out untouched, on every backend (on CUDA the two small
 * device arrays are copied to the host to be checked, which synchronises).
 * out: [n_q_heads][d]; lse (may be NULL): [n_q_heads] natural-log sum of exp(scaled logits). */
locks_status locks_attend(locks_cache *c, int32_t layer, int32_t seq_id, const float *q,
                          int32_t n_q_heads, float scale, const int32_t *pages,
                          const int32_t *n_pages, int32_t max_pages, float *out, float *lse);

/* Dense attention of one query q [n_q_heads][d] (softmax scale 1/sqrt(d)) over the first
 * len tokens of the sequence (1 <= len <= its length; the sequence is not changed): bit
 * for bit what locks_decode_step with the `full` selector gives on the sequence cut to
 * len tokens. For passes that write several tokens' K/V first and then attend each as a
 * decode step would (verifying drafted tokens). CPU backend (else LOCKS_ERR_UNSUPPORTED). */
locks_status locks_attend_prefix(locks_cache *c, int32_t layer, int32_t seq_id, int32_t len,
                                 const float *q, int32_t n_q_heads, float *out);

/* locks_attend_prefix for n consecutive queries at once: q [n][n_q_heads][d], query i
 * over the first len + i tokens (1 <= len, len + n - 1 <= the sequence's length) ->
 * out [n][n_q_heads][d], each bit for bit its locks_attend_prefix, with every K/V page
 * read (and converted) once for all the queries that see it. CPU backend. */
locks_status locks_attend_prefix_n(locks_cache *c, int32_t layer, int32_t seq_id, int32_t len, int32_t n,
                                   const float *q, int32_t n_q_heads, float *out);

/* Causal dense attention for a prefill chunk: queries of tokens [pos, pos + n) (their
 * K/V already written), q: [n][n_q_heads][d] -> out: [n][n_q_heads][d]. */
locks_status locks_prefill_attend(locks_cache *c, int32_t layer, int32_t seq_id, int32_t pos,
                                  int32_t n, const float *q, int32_t n_q_heads, float scale,
                                  float *out);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_CORE_H */
