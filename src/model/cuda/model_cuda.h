/*
 * model_cuda.h — the Llama-family forward pass on the GPU (the .cu files of src/model/cuda/), callable
 * from C: device weights, the per-token kernels, the causal prefill attention over the
 * paged cache, device sampling, and a decode engine whose whole token (every layer's
 * projections, K/V write and summary build, the LOCKS or dense step, the FFN, the logits
 * and the sampling) is captured once as a CUDA graph and replayed while the sequences
 * grow.
 *
 * What always holds:
 *  - Arrays named d_* are device memory, the rest host memory.
 *  - Weights are row-major (rows, cols) in one 16-bit type (LOCKS_DTYPE_F16 or BF16);
 *    Wq|Wk|Wv are stored as one (q_dim + 2 kv_dim, dim) matrix and Wgate|Wup as one
 *    (2 ffn, dim) matrix, so a layer runs 4 products (cuBLAS, fp32 accumulation, fp32
 *    output). Norm weights are fp32. The residual stream stays fp32; the input of every
 *    product is rounded once to the weight type. The lab switch engine_gemv = 1 (or 2: with
 *    programmatic dependent launch) runs the decode token's products through gemv.cu
 *    instead, with the RMSNorms, the casts and SwiGLU folded into them (off by default:
 *    slower on the H200, bench/RESULTS.md).
 *  - The engine's sequences are the cache's slots 0 .. n_seqs - 1 (a CUDA-backend
 *    locks_cache). The caller keeps the host bookkeeping (locks_cache_append before each
 *    decode token, which mirrors block tables and lengths to the device); the decode
 *    kernels read the new token's position as seq_len - 1 on the device.
 *  - Errors of the runtime or cuBLAS are logged and returned as LOCKS_ERR_BACKEND.
 */
#ifndef LOCKS_MODEL_CUDA_H
#define LOCKS_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What sets an architecture's layer apart from Llama's (llama.c's arch_desc; all zero:
 * the Llama layer). */
typedef struct {
    int32_t rope_neox;  /* RoPE on (x[i], x[i + n_rot/2]) instead of (x[2i], x[2i+1]) */
    int32_t qkv_bias;   /* LG_BQKV added (fp32) to the QKV product */
    int32_t qk_norm;    /* LG_Q_NORM / LG_K_NORM: RMSNorm of each q and k head, before RoPE */
    int32_t post_norms; /* LG_POST_ATTN_NORM / LG_POST_FFN_NORM: each branch's output normed
                         * before the residual add */
    int32_t geglu;      /* gelu_tanh(g) * u instead of silu(g) * u */
    int32_t emb_scale;  /* embeddings times sqrtf(dim) */
    /* sliding-window (local) layers: layer l is local if swa_window > 0 and
     * (l + 1) % swa_period != 0 (lg_layer_local); they attend keys p - swa_window + 1 .. p
     * from a ring of their own (swa.cu), with RoPE base rope_theta_swa; the cache holds the
     * other (global) layers only, in order */
    int32_t swa_window, swa_period;
    float rope_theta_swa;
} lg_arch;

typedef struct {
    int32_t n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, n_rot;
    float rope_theta, norm_eps;
    locks_dtype wtype; /* LOCKS_DTYPE_F16 or LOCKS_DTYPE_BF16 */
    int32_t tied;      /* 1: the output matrix is the token embedding */
    int32_t device;
    /* NULL: every matrix in wtype. Else [LG_QTYPES(n_layers)] ggml type codes (gguf.h) of
     * the matrices kept quantized on the device (lg_qtype_supported; any other value: that
     * matrix in wtype): [0] the output matrix, [1 + 7 l + i] layer l's Wq, Wk, Wv, Wo,
     * Wgate, Wup, Wdown (i = 0..6). The token embedding is always wtype (a lookup reads one
     * row a token). Parts of Wq|Wk|Wv (Wgate|Wup) of one type share one matrix; parts of
     * different types are separate products into the same output rows. lg_model_alloc
     * copies the array. */
    const int32_t *qtypes;
    lg_arch arch; /* {0}: the Llama layer */
} lg_shape;
#define LG_QTYPES(n_layers) (1 + 7 * (n_layers))

/* 1 if layer l of s is a sliding-window layer; the global layers' count (the cache's
 * n_layers), and the cache layer of global layer l (-1 for a local one). */
int lg_layer_local(const lg_shape *s, int32_t l);
int32_t lg_n_global(const lg_shape *s);
int32_t lg_cache_layer(const lg_shape *s, int32_t l);

typedef struct lg_model lg_model;

/* Free and total memory of a device; LOCKS_ERR_BACKEND if there is no such device. */
locks_status lg_device_memory(int32_t device, size_t *free_bytes, size_t *total_bytes);
/* Bytes of device memory the weights take. */
size_t lg_model_bytes(const lg_shape *s);
/* Allocates the weights on s->device. Checks free device memory first: LOCKS_ERR_OOM with
 * the numbers in the log if they do not fit (nothing left allocated). */
lg_model *lg_model_alloc(const lg_shape *s, locks_status *err);
void lg_model_free(lg_model *m);
lg_shape lg_model_shape(const lg_model *m);

typedef enum {
    LG_TOK_EMBD = 0, /* (n_vocab, dim) */
    LG_OUTPUT,       /* (n_vocab, dim); not for tied models */
    LG_OUTPUT_NORM,  /* (dim,) fp32 */
    LG_ATTN_NORM,    /* (dim,) fp32, per layer */
    LG_FFN_NORM,     /* (dim,) fp32, per layer */
    LG_WQKV,         /* (q_dim + 2 kv_dim, dim): rows of Wq, then Wk, then Wv */
    LG_WO,           /* (dim, q_dim) */
    LG_WGATE_UP,     /* (2 ffn, dim): rows of Wgate, then Wup */
    LG_WDOWN,        /* (dim, ffn) */
    LG_Q_NORM,       /* (head_dim,) fp32, per layer, arch.qk_norm */
    LG_K_NORM,       /* (head_dim,) fp32, per layer, arch.qk_norm */
    LG_POST_ATTN_NORM, /* (dim,) fp32, per layer, arch.post_norms */
    LG_POST_FFN_NORM,  /* (dim,) fp32, per layer, arch.post_norms */
    LG_BQKV,         /* (q_dim + 2 kv_dim,) fp32, per layer, arch.qkv_bias: bq | bk | bv */
} lg_tensor;

/* Copies rows [row0, row0 + n_rows) of a tensor from the host: 16-bit values of the
 * weight type (uint16 bits) for matrices, fp32 for norms (row0 = 0, n_rows = 1). The rows
 * must lie in parts kept in wtype (LOCKS_ERR_INVALID_ARG for rows of a quantized part).
 * The fp32 vectors (norms, LG_BQKV) take row0 = 0, n_rows = 1, and exist only where the
 * shape's arch asks for them (else LOCKS_ERR_INVALID_ARG). */
locks_status lg_model_upload(lg_model *m, lg_tensor t, int32_t layer, int32_t row0, int32_t n_rows,
                             const void *src);
/* Copies rows [row0, row0 + n_rows) of a quantized part from the host in the file's bytes
 * (n_rows * the type's row bytes, as the GGUF holds them), laid out for the device there
 * (lg_qmat_pack). The rows must lie in one quantized part of tensor t (Wq at 0, Wk at q_dim,
 * ..., Wup at ffn; the output matrix: t = LG_OUTPUT, also for a tied model);
 * LOCKS_ERR_INVALID_ARG otherwise. */
locks_status lg_model_upload_q(lg_model *m, lg_tensor t, int32_t layer, int32_t row0, int32_t n_rows,
                               const void *src);
/* 1 if the model keeps any matrix quantized. */
int lg_model_quantized(const lg_model *m);
/* Random weights made on the device (benchmarks): uniform in [-1/sqrt(cols), 1/sqrt(cols)],
 * norms 1. */
locks_status lg_model_fill_random(lg_model *m, uint64_t seed);

/* ---- the engine ------------------------------------------------------------------- */

typedef struct lg_ctx lg_ctx;

/* Device sampling parameters (read by the graph at every replay, so they may change). */
typedef struct {
    float temp;    /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k; /* <= 0 or > LG_MAX_TOPK: LG_MAX_TOPK */
    float top_p;   /* >= 1: off */
    uint64_t seed;
} lg_sample_params;
#define LG_MAX_TOPK 1024

/* Parts of the decode token that lg_decode enqueues (all for a real token; subsets for
 * the benchmark's time split): the products; the rest (norms, SwiGLU, casts, embedding,
 * sampling); attention = its preparation (RoPE of q and k, K/V into the cache, summary of
 * a page that fills, qprep) + the step (score, mass, top-k, attend + merge, or dense). */
enum {
    LG_PART_GEMM = 1,
    LG_PART_REST = 4,
    LG_PART_PREP = 8,
    LG_PART_STEP = 16,
    LG_PART_ATTN = LG_PART_PREP | LG_PART_STEP,
    LG_PART_ALL = LG_PART_GEMM | LG_PART_REST | LG_PART_ATTN
};

/* An engine for n_seqs sequences (cache slots 0 .. n_seqs - 1, n_seqs <= 32) of a CUDA
 * cache whose shape matches the model (n_layers: lg_n_global), prefill chunks of up to
 * max_chunk tokens. The decode token's products run in pieces of 8 rows (one row or 2..8:
 * one piece padded to 8), each piece the product of a batch of one, so a row's sums do not
 * depend on the batch (bit for bit); a batch of 9..32 reads the weights once a piece. The
 * lab path engine_gemv (gemv.cu) takes up to 8 sequences; an engine of more runs the
 * default products. Sliding-window layers (arch.swa_window > 0) get a ring of swa_cap
 * positions per (sequence, local layer), fp16 K/V [cap][n_kv_heads][head_dim] (swa.h's
 * layout); swa_cap <= 0 takes swa_window - 1 + max_chunk. A chunk of n tokens at pos
 * needs swa_cap >= swa_window - 1 + n or pos + n <= swa_cap (else lg_prefill / lg_verify
 * refuse it, LOCKS_ERR_INVALID_ARG), a decode token swa_cap >= swa_window or a length
 * <= swa_cap. The rings keep positions max(0, len - swa_cap) .. len - 1 of a sequence of
 * len tokens: the caller keeps that bookkeeping (a truncation back further is its to
 * refuse). */
lg_ctx *lg_ctx_init(lg_model *m, locks_cache *cache, int32_t n_seqs, int32_t max_chunk, int32_t swa_cap,
                    locks_status *err);
void lg_ctx_free(lg_ctx *e);

/* Prefill: tokens [pos, pos + n) of slot seq (n <= max_chunk; reserved in the cache,
 * earlier ones written) through every layer; K/V go into the cache through
 * locks_cache_write (summaries of filled pages built there), attention is the causal
 * prefill kernel. logits (host, may be NULL): [n_vocab] of the last token; d_logits_keep
 * != 0 leaves them in the engine's device logits row seq (for lg_sample_logits). */
locks_status lg_prefill(lg_ctx *e, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos, float *logits);

/* Verify pass of speculative decoding: tokens [pos, pos + n) of slot seq (reserved in the
 * cache, earlier ones written; n <= max_chunk, n + pos % 16 <= 1008, pos + n <= the decode's
 * max_ctx) through every layer with the decode token's kernels (dense attention in
 * verify.cu's rows mode), K/V written to the cache and the summaries of the pages they fill
 * built, as the decode graph does: row i's logits and K/V are bit for bit those of a dense
 * decode token at position pos + i (selector FULL, the same max_ctx; the default cuBLAS
 * products, not engine_gemv). logits (host): [n][n_vocab], every token's. Not captured. */
locks_status lg_verify(lg_ctx *e, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos, float *logits);

/* Sets the decode step (selector FULL or LOCKS) and the decode context bound max_ctx
 * (grids are sized for it); drops a captured graph when they change. */
locks_status lg_set_step(lg_ctx *e, const locks_step_params *p, int32_t max_ctx);
locks_status lg_set_sampler(lg_ctx *e, const lg_sample_params *p);

/* The sequences the next decode tokens are for (continuous batching): row i decodes slot
 * seqs[i] (distinct, 0 .. n_seqs - 1), 1 <= n <= n_seqs, any order; seqs NULL: every
 * sequence in order (the default). The graph is the same for every subset: all n_seqs
 * rows run, the rows from n on idle (they write nothing to the cache; their step reads row
 * 0's sequence), so a sequence's logits do not depend on which others decode with it, bit
 * for bit, and a subset costs a whole batch's step. LOCKS_ERR_INVALID_ARG, nothing
 * changed, for a bad set. */
locks_status lg_set_rows(lg_ctx *e, const int32_t *seqs, int32_t n);
/* Writes the next input token of every row (host tokens[n], n the rows of lg_set_rows). */
locks_status lg_set_tokens(lg_ctx *e, const int32_t *tokens);
/* One decode token for the rows' sequences (each must already hold the new token's slot:
 * locks_cache_append). use_graph: replay the captured graph (captured on first use),
 * else launch kernel by kernel (the same kernels). The sampled tokens become the next
 * input; next (host, may be NULL) receives them, logits (host, may be NULL) [n][n_vocab],
 * in the rows' order. Checks the budget against the forced pages (LOCKS_ERR_BUDGET) and
 * the lengths against max_ctx (LOCKS_ERR_INVALID_ARG) before launching. */
locks_status lg_decode(lg_ctx *e, int use_graph, int32_t *next, float *logits);
/* Samples from the device logits of slot seq (after lg_prefill) into the next input of
 * that slot; *tok receives it. */
locks_status lg_sample_prefill(lg_ctx *e, int32_t seq, int32_t *tok);

/* Benchmark: device ms of one decode token through a graph of the given parts, median of
 * trials replays (no host bookkeeping in between: the sequences keep their length). */
locks_status lg_time_decode(lg_ctx *e, int parts, int trials, double *median_ms);
/* Profiling: one replay of that graph (after a warm-up replay) between cudaProfilerStart
 * and cudaProfilerStop, so `ncu --profile-from-start off` sees exactly one token's kernels. */
locks_status lg_profile_decode(lg_ctx *e, int parts);

/* ---- the decode products for 1..8 rows (gemv.cu; engines of up to 8 sequences) -------- */

/* What a product's 16-bit input X is made of (each value rounded once to the weight type):
 * X16 the 16-bit input itself; F32 fp32 values; NORM the RMSNorm of fp32 rows x with
 * weight nw; SWIGLU silu(g) * u of fp32 rows g|u (2 cols wide). */
enum { LG_GEMV_X16 = 0, LG_GEMV_F32 = 1, LG_GEMV_NORM = 2, LG_GEMV_SWIGLU = 3 };
#define LG_GEMV_MAX_N 8
/* Blocks of one product of `rows` rows and `cols` columns for n input rows (= the partial
 * sums of squares it writes per input row). */
int32_t lg_gemv_blocks(int32_t rows, int32_t cols, int32_t n);
/* 1 if the products take inputs of cols columns for n rows (cols a multiple of 8, X of
 * n x cols 16-bit values fits in a block's shared memory). */
int lg_gemv_supported(int32_t cols, int32_t n);
/* Raises the kernels' shared-memory limit; once before any graph capture. */
locks_status lg_gemv_prepare(void);

/* ---- quantized weights (qgemv.cu) ------------------------------------------------------
 * Matrices of Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K stay quantized on the device, in the
 * file's bytes, re-laid so that every load is aligned: Q4_K and Q5_K blocks as stored (144
 * and 176 bytes); Q6_K, Q8_0, Q4_0 and Q4_1 blocks without their fp16 scales (d; Q4_1's d
 * and m) (208, 32, 16 and 16 bytes), all blocks of the matrix in row order, then the scales
 * of every block in the same order (after the blocks, at a 256-byte boundary from d_w).
 * Decode products (1..8 rows; the engine runs 9..32 in pieces of 8) quantize their input to
 * int8 in 32-value blocks exactly as
 * the CPU does (matmul_quantize: d = max|x| / 127, q = round-to-nearest-even(x * (1 / d)))
 * and take the sub-block integer dot products of quant.c with dp4a, one scale per 16
 * values, one offset per 32: the CPU engine's arithmetic, the fp32 sums in another order.
 * Each row's sums do not depend on how many rows come with it (bit for bit). Prefill
 * products dequantize the matrix to 16-bit and run cuBLAS. The lg_op_* calls below check
 * their arguments (LOCKS_ERR_INVALID_ARG: an unsupported type, cols not whole blocks, n
 * outside 1..8, ldy < rows) and return after the device has finished; d_q and d_ds are
 * read as 16- and 8-byte vectors (cudaMalloc'd arrays are). */

/* 1 for the ggml types kept quantized (GGML_TYPE_Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K). */
int lg_qtype_supported(int32_t type);
/* Device bytes of a rows x cols matrix of that type (0: type not supported, or cols not a
 * multiple of its block: 32 for Q4_0 / Q4_1 / Q8_0, 256 for the K types). */
size_t lg_qmat_bytes(int32_t type, int32_t rows, int32_t cols);
/* Host: rows x cols of the file's bytes (rows * row_bytes, row-major) -> the device layout
 * (lg_qmat_bytes(type, rows, cols) bytes at dst, host memory). */
void lg_qmat_pack(int32_t type, const void *src, int32_t rows, int32_t cols, void *dst);
/* A quantized matrix on the device (d_w: lg_qmat_bytes of the packed layout). */
typedef struct {
    const void *d_w;
    int32_t type, rows, cols;
} lg_qmat;
/* Quantized activations: d_q [n][cols] int8, d_ds [n][cols / 32][2] float {d, d * sum(q)}
 * (matmul_q8's d and ds). From 16-bit input x16 [n][cols] of xtype (F16 or BF16 bits) or
 * fp32 (xtype LOCKS_DTYPE_F32); cols a multiple of 32. */
locks_status lg_op_q8_quantize(const void *d_x, locks_dtype xtype, int32_t n, int32_t cols, int8_t *d_q, float *d_ds);
/* y[t][r] (row stride ldy floats) = sum_c W[r][c] x_t[c] (+ y[t][r] if beta) for t < n
 * (1..LG_GEMV_MAX_N), r < w->rows, from quantized activations of w->cols columns. */
locks_status lg_op_qgemv(const lg_qmat *w, int32_t n, const int8_t *d_q, const float *d_ds, float *d_y, int32_t ldy,
                         int beta);
/* W dequantized: d_out [rows][cols] of out_type (F16 or BF16 bits), each value the fp32
 * d * scale * q + offset of quant.c rounded once. */
locks_status lg_op_qdequant(const lg_qmat *w, locks_dtype out_type, void *d_out);

/* Benchmark (test_gpu_qgemv --perf): mean microseconds of one product, reps rounds over
 * n_copies copies of w's matrix copy_stride bytes apart (more bytes than the L2 holds),
 * launched back to back on a stream of its own (pdl: with programmatic dependent launch). */
locks_status lg_op_qgemv_time(const lg_qmat *w, int32_t n_copies, size_t copy_stride, int32_t n, const int8_t *d_q,
                              const float *d_ds, float *d_y, int32_t reps, int pdl, float *us);

/* ---- single ops, for the GPU tests (device arrays, synchronous) --------------------- */

/* out[t][i] = T(x[t][i] / sqrt(mean(x[t]^2) + eps) * w[i]), T = dtype (F16/BF16 bits) or
 * F32 (float out). */
locks_status lg_op_rmsnorm(const float *d_x, const float *d_w, int32_t n, int32_t dim, float eps,
                           locks_dtype out_type, void *d_out);
/* The engine's small kernels as it launches them (model_ops.cuh's LG_OPS_*: how 0 the first
 * kernels, 1 the register form, 2 that with programmatic dependent launch), each right
 * after a kernel that copies d_x (d_gu) into a scratch buffer first filled with NaN bits,
 * so a PDL kernel that read its input before its wait would see NaNs. op: 0 RMSNorm
 * (as lg_op_rmsnorm), 1 SwiGLU (as lg_op_swiglu, cols = ffn), 2 the fp32 -> out_type cast
 * of n x cols values. */
locks_status lg_op_small(int op, int how, const float *d_x, const float *d_w, int32_t n, int32_t cols, float eps,
                         locks_dtype out_type, void *d_out);
/* RoPE in place on rows of width row_stride: heads [0, n_heads) of head_dim at offset 0
 * of each row, adjacent pairs (2i, 2i+1) of the first n_rot dims (neox: pairs (i, i +
 * n_rot/2)), angle pos[t] * inv_freq[i]. */
locks_status lg_op_rope(float *d_x, int32_t n, int32_t row_stride, int32_t n_heads, int32_t head_dim,
                        int32_t n_rot, const float *d_inv_freq, const int32_t *d_pos, int neox);
/* out[t][i] = T(silu(gu[t][i]) * gu[t][ffn + i]). */
locks_status lg_op_swiglu(const float *d_gu, int32_t n, int32_t ffn, locks_dtype out_type, void *d_out);
/* x[t][i] = float(E[tok[t]][i]) for a 16-bit table E (n_vocab, dim). */
locks_status lg_op_embed(const void *d_e, locks_dtype etype, const int32_t *d_tok, int32_t n, int32_t dim,
                         float *d_x);
/* The layer variants' kernels (lg_arch), as the engine launches them:
 * lg_op_embed_scaled: x = float(E[tok]) * scale (Gemma 3: sqrtf(dim)).
 * lg_op_geglu: out[t][i] = T(gelu_tanh(gu[t][i]) * gu[t][ffn + i]) (vmath.c's GeGLU).
 * lg_op_qkv_fix: in place on n rows [q | k | v] of hq + 2 hkv heads of d (row_stride
 *   floats): + d_b [q_dim + 2 kv_dim] (NULL: none), then each q head RMS-normed with d_qn [d]
 *   and each k head with d_kn [d] (NULL: none), eps as llama.c's rmsnorm.
 * lg_op_norm_add: x[t] += rms(y[t]) * w for n rows of dim.
 * lg_op_swa: the sliding-window kernels (swa.cu) on one ring d_ring of cap positions (2 cap
 *   hkv d fp16: keys, then values): the K/V of n rows of d_qkv ([q | k | v], row_stride
 *   floats) stored at positions d_pos[t] (slot pos % cap), then each row's query heads
 *   attend keys max(0, pos - window + 1) .. pos of the ring -> d_out [n][hq][d] (a row at
 *   pos -1: skipped, zeros). */
locks_status lg_op_embed_scaled(const void *d_e, locks_dtype etype, const int32_t *d_tok, int32_t n, int32_t dim,
                                float scale, float *d_x);
locks_status lg_op_geglu(const float *d_gu, int32_t n, int32_t ffn, locks_dtype out_type, void *d_out);
locks_status lg_op_qkv_fix(float *d_qkv, int32_t n, int32_t row_stride, int32_t hq, int32_t hkv, int32_t d,
                           const float *d_b, const float *d_qn, const float *d_kn, float eps);
locks_status lg_op_norm_add(float *d_x, const float *d_y, const float *d_w, int32_t n, int32_t dim, float eps);
locks_status lg_op_swa(uint16_t *d_ring, int32_t cap, int32_t hkv, int32_t d, const float *d_qkv, int32_t row_stride,
                       int32_t hq, const int32_t *d_pos, int32_t n, int32_t window, float scale, float *d_out);
/* The engine's decode preparation of one layer (attn_prep.cu) on a CUDA cache c with own
 * pages: for sequences s < n_seqs (cache slots), RoPE (as lg_op_rope) of the n_heads query
 * heads and the cache's KV heads of row s of d_qkv (rows of n_heads * d + 2 * kv_dim floats
 * [q | k | v], rotated in place) at d_pos[s], then K and V of the row into page slot
 * d_pos[s] % 16 of the page that slot's block table maps d_pos[s] / 16 to. */
locks_status lg_op_attn_prep(locks_cache *c, int32_t layer, float *d_qkv, int32_t n_seqs, int32_t n_heads,
                             int32_t n_rot, const float *d_inv_freq, const int32_t *d_pos);
/* Causal attention of tokens [pos, pos + n) of cache slot seq, layer `layer`, queries
 * q [n][n_q_heads][d] fp32 -> out (same shape); K/V of [0, pos + n) already written. */
locks_status lg_op_prefill_attend(locks_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                  const float *d_q, int32_t n_q_heads, float scale, float *d_out);
/* The same through the verify's attention (verify.cu): row r bit for bit the dense decode
 * attention at length pos + r + 1 (lg_op_attend_decode) of n_seqs engine sequences and
 * max_list pages (the decode's split size); n_q_heads / n_kv_heads <= 16. */
locks_status lg_op_verify_attend(locks_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                 const float *d_q, int32_t n_q_heads, float scale, int32_t n_seqs, int32_t max_list,
                                 float *d_out);
/* The dense decode attention of one query d_q [n_q_heads][d] of slot seq at its current
 * length, as the decode graph of a one-sequence engine runs it (qprep, attend.cu's dense
 * kernel with max_list pages, merge) -> d_out. */
locks_status lg_op_attend_decode(locks_cache *c, int32_t layer, int32_t seq, const float *d_q, int32_t n_q_heads,
                                 float scale, int32_t max_list, float *d_out);
/* Samples one token per row of logits [n_rows][n_vocab] with p and draw counter
 * *d_counter (incremented per call): tok[n_rows]. */
locks_status lg_op_sample(const float *d_logits, int32_t n_rows, int32_t n_vocab, const lg_sample_params *p,
                          uint64_t *d_counter, int32_t *d_tok);
/* y (n, rows) = X (n, cols) . W^T (+ y if beta), X made from d_x by mode (x rows of cols
 * values, 2 cols for SWIGLU; the NORM's eps, weight d_nw). cols a multiple of 8, n <= 8.
 * ss (host, may be NULL) receives the sums of squares of the n rows of y written, summed
 * from the per-block partials the kernel leaves for a following NORM product. pdl: launch
 * it with programmatic dependent launch (after the partial sums of squares of a NORM). */
locks_status lg_op_gemv(int mode, const void *d_w, locks_dtype wtype, int32_t rows, int32_t cols, int32_t n,
                        const void *d_x, const float *d_nw, float eps, float *d_y, int beta, int pdl, float *ss);
/* The uniform draw the sampler uses for (seed, counter, row), in [0, 1) (host twin). */
float lg_sample_uniform(uint64_t seed, uint64_t counter, int32_t row);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_MODEL_CUDA_H */
