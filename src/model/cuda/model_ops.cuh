/*
 * model_ops.cuh — launch wrappers of the forward pass's kernels (model_ops.cu,
 * prefill.cu), shared by the engine (model_engine.cu). All asynchronous on st.
 */
#ifndef LOCKS_MODEL_OPS_CUH
#define LOCKS_MODEL_OPS_CUH

#include "cuda/common.cuh"

extern "C" {
#include "model_cuda.h"
}

locks_status lg_embed_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t n, int32_t dim, float *x,
                             cudaStream_t st);
locks_status lg_rmsnorm_launch(const float *x, const float *w, int32_t n, int32_t dim, float eps, locks_dtype type,
                               void *out, cudaStream_t st);
/* x = E[tok] * scale (Gemma 3: sqrtf(dim)). */
locks_status lg_embed_scaled_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t n, int32_t dim,
                                    float scale, float *x, cudaStream_t st);
/* neox: pairs (i, i + n_rot/2), else (2i, 2i+1). */
locks_status lg_rope_launch(float *x, int32_t n, int32_t row_stride, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                            const float *inv_freq, const int32_t *pos, int neox, cudaStream_t st);
locks_status lg_swiglu_launch(const float *gu, int32_t n, int32_t ffn, locks_dtype type, void *out, cudaStream_t st);
/* out[t][i] = T(gelu_tanh(gu[t][i]) * gu[t][ffn + i]) (Gemma 3's GeGLU, vmath.c's formula). */
locks_status lg_geglu_launch(const float *gu, int32_t n, int32_t ffn, locks_dtype type, void *out, cudaStream_t st);
/* In place on n rows [q | k | v] of hq + 2 hkv heads of d (row_stride floats): + b
 * ([q_dim + 2 kv_dim], NULL: none), then the RMSNorm (eps) of each q head with qn [d]
 * and each k head with kn [d] (NULL: none). Nothing to do: no launch. */
locks_status lg_qkv_fix_launch(float *qkv, int32_t n, int32_t row_stride, int32_t hq, int32_t hkv, int32_t d,
                               const float *b, const float *qn, const float *kn, float eps, cudaStream_t st);
/* x[t] += rms(y[t]) * w for n rows of dim (Gemma 3's post-branch norms). */
locks_status lg_norm_add_launch(float *x, const float *y, const float *w, int32_t n, int32_t dim, float eps,
                                cudaStream_t st);
/* How the small kernels below are launched (the _ex forms): LG_OPS_PLAIN the first
 * versions, LG_OPS_FAST the same arithmetic (bit for bit) in fewer memory round trips,
 * LG_OPS_PDL that with programmatic dependent launch (the kernel's launch overlaps the
 * end of the previous kernel; it reads that kernel's output only after its wait). */
enum { LG_OPS_PLAIN = 0, LG_OPS_FAST = 1, LG_OPS_PDL = 2 };
locks_status lg_rmsnorm_launch_ex(const float *x, const float *w, int32_t n, int32_t dim, float eps, locks_dtype type,
                                  void *out, int how, cudaStream_t st);
locks_status lg_swiglu_launch_ex(const float *gu, int32_t n, int32_t ffn, locks_dtype type, void *out, int how,
                                 cudaStream_t st);
locks_status lg_cast_launch_ex(const float *x, size_t n, locks_dtype type, void *out, int how, cudaStream_t st);
/* The decode token's rows (n_seqs of them): row s decodes cache slot slots[s] (device;
 * slots NULL: slot s), or is idle where slots[s] < 0. lg_decode_prep_launch: pos[s] = that
 * slot's seq_len - 1 and build[s] = the page the token fills (else -1); an idle row gets
 * pos = build = -1, and the K/V writes below skip it. lg_embed_prep_launch: that and
 * lg_embed_launch of the n_seqs tokens in one kernel. */
locks_status lg_embed_prep_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t dim, float scale, float *x,
                                  const int32_t *slots, const int32_t *seq_len, const int32_t *bt, int32_t n_pages_pool,
                                  int32_t n_seqs, int32_t *pos, int32_t *build, cudaStream_t st);
locks_status lg_decode_prep_launch(const int32_t *slots, const int32_t *seq_len, const int32_t *bt, int32_t n_pages_pool,
                                   int32_t n_seqs, int32_t *pos, int32_t *build, cudaStream_t st);
locks_status lg_kv_append_launch(locks_cuda_cache *c, int32_t layer, const float *qkv, int32_t row_stride, int32_t k_off,
                                 const int32_t *pos, const int32_t *slots, int32_t n_seqs, cudaStream_t st);
/* RoPE of the new tokens' query and key heads in their [q | k | v] rows (row_stride floats,
 * in place) + their K/V into page slot pos % 16 of the layer (attn_prep.cu); row s is cache
 * slot s (the _ex form: slots[s], slots NULL: s), a row with pos < 0 is skipped. */
locks_status lg_attn_prep_launch(locks_cuda_cache *c, int32_t layer, float *qkv, int32_t row_stride, int32_t hq,
                                 int32_t n_rot, const float *inv_freq, const int32_t *pos, int32_t n_seqs,
                                 cudaStream_t st);
/* The same, launched with programmatic dependent launch if pdl (qkv read after the wait);
 * neox: RoPE on the pairs (i, i + n_rot/2). */
locks_status lg_attn_prep_launch_ex(locks_cuda_cache *c, int32_t layer, float *qkv, int32_t row_stride, int32_t hq,
                                    int32_t n_rot, const float *inv_freq, const int32_t *pos, const int32_t *slots,
                                    int32_t n_seqs, int neox, int pdl, cudaStream_t st);
/* d_ws: lg_sample_ws_bytes(ws_rows) of device memory (ws_rows >= n_rows), zeroed once before
 * the first call (the greedy argmax's partials and tickets; it leaves the tickets zero). The
 * tickets sit after ws_rows rows of partials whatever n_rows, so launches of different row
 * counts can share one workspace (the engine's decode of n_seqs rows and a prefill's one). */
locks_status lg_sample_launch(const float *logits, int32_t n_rows, int32_t n_vocab, const lg_sample_params *d_p,
                              uint64_t *d_counter, uint64_t *d_ws, int32_t ws_rows, int32_t *d_tok, cudaStream_t st);
extern "C" size_t lg_sample_ws_bytes(int32_t n_rows);
locks_status lg_fill16_launch(void *dst, size_t n, locks_dtype type, uint64_t seed, float a, cudaStream_t st);
locks_status lg_fill_f32_launch(float *dst, size_t n, float v, cudaStream_t st);
locks_status lg_cast_launch(const float *x, size_t n, locks_dtype type, void *out, cudaStream_t st);
/* The decode products (gemv.cu, model_cuda.h's LG_GEMV_*): y (n, rows) = X . W^T (+ y),
 * x rows x_ld apart; NORM reads ss_in [ss_nblk][n]; ss_out (may be NULL) receives
 * [lg_gemv_blocks(rows, cols, n)][n] partial sums of squares of the written y rows. pdl: launched
 * with programmatic dependent launch (the kernel waits for the previous one before it
 * reads or writes anything but W). */
locks_status lg_gemv_launch(int mode, const void *w, locks_dtype wtype, int32_t rows, int32_t cols, int32_t n,
                            const void *x, int32_t x_ld, const float *nw, const float *ss_in, int32_t ss_nblk,
                            float eps, float *y, int32_t y_ld, int beta, float *ss_out, int pdl, cudaStream_t st);
/* x = E[tok] as lg_embed_launch, and ss[t] = the sum of squares of row t (one partial). */
locks_status lg_embed_ss_launch(const void *e, locks_dtype type, const int32_t *tok, int32_t n, int32_t dim, float *x,
                                float *ss, cudaStream_t st);
/* Causal prefill attention (prefill.cu): queries q [n][hq][d] fp32 of tokens
 * [pos, pos + n) of slot seq against keys [0, pos + n) of the layer -> out [n][hq][d]. */
locks_status lg_prefill_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                      const float *q, int32_t hq, float scale, float *out, cudaStream_t st);
/* Speculative verify (verify.cu): the attention of rows [pos, pos + n) of sequence slot seq
 * (queries q: row r at q + r * q_stride, head h at + h * d, fp32) -> out [n][hq][d], row r
 * bit for bit the dense decode attention at length pos + r + 1 of an engine of n_seqs
 * sequences with max_list pages (its split size); scale as the decode's. The K/V of the
 * n rows must be stored. ws: lg_verify_ws_bytes of device scratch. */
size_t lg_verify_ws_bytes(const locks_cuda_cache *c, int32_t n, int32_t hq, int32_t n_seqs, int32_t max_list);
locks_status lg_verify_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                     const float *q, int32_t q_stride, int32_t hq, float scale, int32_t n_seqs,
                                     int32_t max_list, void *ws, float *out, cudaStream_t st);
/* RoPE + K/V store as lg_attn_prep_launch, for n rows of ONE sequence slot seq at
 * positions pos[0 .. n) (a verify). */
locks_status lg_attn_prep_rows_launch(locks_cuda_cache *c, int32_t layer, float *qkv, int32_t row_stride, int32_t hq,
                                      int32_t n_rot, const float *inv_freq, const int32_t *pos, int32_t n,
                                      int32_t seq, int neox, cudaStream_t st);

/* Sliding-window layers (swa.cu). A ring per (engine sequence, local layer): ring_k /
 * ring_v [cap][hkv][d] fp16, ring r's K at ring + r * ring_stride elements, V at + the
 * half ring (cap * hkv * d). Row t of the n rows is sequence slots[t] (slots NULL: seq)
 * at position pos[t] (< 0: an idle row, skipped; its output row is zeroed).
 * Store: K/V of the rows of qkv ([q | k | v], row_stride floats, RoPE applied) into slot
 * pos % cap of ring (slot * n_local + li). Attend: out [n][hq][d] = softmax(scale q.k) V
 * over keys max(0, pos - window + 1) .. pos of that ring (queries from the qkv rows). */
typedef struct {
    uint16_t *base;      /* (n_seqs, n_local, 2, cap, hkv, d) fp16 */
    int32_t n_local, cap, hkv, d;
} lg_swa_rings;
locks_status lg_swa_store_launch(const lg_swa_rings *r, int32_t li, const float *qkv, int32_t row_stride,
                                 int32_t k_off, const int32_t *pos, const int32_t *slots, int32_t seq, int32_t n,
                                 cudaStream_t st);
locks_status lg_swa_attend_launch(const lg_swa_rings *r, int32_t li, const float *qkv, int32_t row_stride, int32_t hq,
                                  const int32_t *pos, const int32_t *slots, int32_t seq, int32_t n, int32_t window,
                                  float scale, float *out, int32_t out_stride, cudaStream_t st);
/* K/V rows t of qkv ([q | k | v], row_stride floats, k at k_off) -> slot pos + t of the
 * sequence slot seq, layer `layer` (no finiteness check, no summaries). */
locks_status lg_verify_kv_launch(locks_cuda_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                 const float *qkv, int32_t row_stride, int32_t k_off, cudaStream_t st);

/* Quantized weights (qgemv.cu; model_cuda.h's lg_op_q8_quantize, lg_op_qgemv,
 * lg_op_qdequant, asynchronous on st). pdl: launched with programmatic dependent launch
 * (the quantization waits before it reads x; the product loads its first weights before
 * its wait, and its input and y after). */
locks_status lg_q8_quantize_launch(const void *x, locks_dtype xtype, int32_t n, int32_t cols, int8_t *q, float *ds,
                                   int pdl, cudaStream_t st);
locks_status lg_qgemv_launch(const lg_qmat *w, int32_t n, const int8_t *q, const float *ds, float *y, int32_t ldy,
                             int beta, int pdl, cudaStream_t st);
locks_status lg_qdequant_launch(const lg_qmat *w, locks_dtype out_type, void *out, cudaStream_t st);
/* Bytes a row of cols takes in the device layout's blocks, and in its split fp16 scales (0:
 * the type keeps them in its blocks); a matrix of r rows: r * blocks, then at the next
 * 256-byte boundary r * scales. */
size_t lg_qrow_block_bytes(int32_t type, int32_t cols);
size_t lg_qrow_d_bytes(int32_t type, int32_t cols);

#endif
