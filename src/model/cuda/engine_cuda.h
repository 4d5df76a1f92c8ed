/*
 * engine_cuda.h — a locks_ctx on the GPU (locks_ctx_params.backend = LOCKS_BACKEND_CUDA):
 * the bridge between llama.c's context and the device engine of model_cuda.h.
 *
 * llama.c hands the engine a view of its loaded weights (engine_cuda_model) and calls
 * down; the engine calls nothing in llama.c. What the engine runs is declared in one list
 * (engine_cuda_capabilities: architectures, weight types, selectors, summaries, callbacks);
 * engine_cuda_check refuses anything outside it with LOCKS_ERR_UNSUPPORTED and a message
 * (locks_last_error) naming what and why, before any device is touched, so a build
 * without CUDA and a machine without a GPU refuse the same way.
 *
 * The architectures: llama, qwen2 (Q/K/V biases, NeoX RoPE), qwen3 (QK-norm, NeoX RoPE,
 * heads wider than dim / n_heads) and gemma3 (QK-norm, post-branch norms, GeGLU, scaled
 * embeddings, sliding-window local layers whose K/V live in device rings outside the
 * cache, which holds the global layers only). At init the model's weights are copied to the device (F16 and BF16 as stored; Q4_0, Q4_1, Q8_0,
 * Q4_K, Q5_K and Q6_K matrices as they are, read by the decode products block by block
 * and dequantized to fp16 for prefill products; the other listed types, and the token
 * embedding, dequantized to fp16, or to bf16 when the file holds BF16 weights or the
 * model is Gemma 3), after
 * checking that weights plus the KV cache of n_ctx tokens fit in free device memory. The
 * context's cache is a CUDA-backend locks_cache holding p->n_seqs sequences (slots 0 ..
 * n_seqs - 1, the engine's sequences), n_ctx tokens of room each. Prefill runs in chunks
 * of max(n_batch, 1024) tokens; every decode token is one replay of the captured CUDA
 * graph (or, with cuda_graph = 0, the same kernels launched one by one); a step may
 * decode any subset of the sequences (the idle ones do not move). In a build
 * without CUDA every entry past the check fails with LOCKS_ERR_UNSUPPORTED.
 */
#ifndef LOCKS_ENGINE_CUDA_H
#define LOCKS_ENGINE_CUDA_H

#include "locks_model.h"
#include "model/matmul.h"

typedef struct engine_cuda engine_cuda;

#define ENGINE_CUDA_MIN_CHUNK 1024

/* What the engine reads of a model: pointers into the loaded model (llama.c fills it),
 * valid for the engine_cuda_init call only (the weights are copied to the device). */
typedef struct {
    const matmul_weight *wq, *wk, *wv, *wo;     /* (q_dim | kv_dim | kv_dim, dim), (dim, q_dim) */
    const matmul_weight *w_gate, *w_up, *w_down; /* (ffn, dim) x 2, (dim, ffn) */
    const float *attn_norm, *ffn_norm;           /* (dim,) */
    const float *q_norm, *k_norm;                /* (head_dim,) QK-norm (Qwen3, Gemma 3), or NULL */
    const float *post_attn_norm, *post_ffn_norm; /* (dim,) Gemma 3, or NULL */
    const float *bq, *bk, *bv;                   /* (q_dim,), (kv_dim,) x 2: Qwen2, or NULL */
} engine_cuda_layer;
typedef struct {
    locks_model_info info;           /* architecture and shapes (swa_window, swa_period,
                                      * rope_theta_swa: the sliding-window layers) */
    int32_t n_rot;                   /* rotated dims per head */
    int tied;                        /* 1: output is the token embedding */
    const matmul_weight *tok_embd;   /* (n_vocab, dim) */
    const matmul_weight *output;     /* (n_vocab, dim) */
    const float *output_norm;        /* (dim,) */
    const engine_cuda_layer *layers; /* [info.n_layers] */
    int rope_neox;                   /* RoPE on (x[i], x[i + n_rot/2]) (Qwen, Gemma) */
    int geglu;                       /* gate GELU(tanh) instead of SiLU (Gemma 3) */
    int emb_scale;                   /* embeddings times sqrt(dim) (Gemma 3) */
} engine_cuda_model;

/* Positions each sliding-window ring of a context keeps (the engine's and llama.c's
 * bookkeeping agree on it): min(n_ctx, window - 1 + max(the prefill chunk, swa_rollback)),
 * the prefill chunk max(n_batch, ENGINE_CUDA_MIN_CHUNK); 0 for a model without such
 * layers. The same in every build. */
int32_t engine_cuda_swa_cap(const locks_model_info *in, const locks_ctx_params *p);

/* The declared capability list: what the engine runs. */
typedef struct {
    const char *const *archs;          /* general.architecture values */
    int32_t n_archs;
    const ggml_type *weight_types;     /* matrix types it uploads (dequantized as needed) */
    int32_t n_weight_types;
    const locks_selector *selectors;   /* step selectors on the device */
    int32_t n_selectors;
    int32_t max_rank;                  /* summaries: quantized (LOCKS_SUMMARY_Q), rank <= this */
    int callbacks;                     /* 0: no on_query / on_step callbacks */
} engine_cuda_caps;
const engine_cuda_caps *engine_cuda_capabilities(void);

/* LOCKS_OK if m with p is inside the list; else LOCKS_ERR_UNSUPPORTED, the reason in
 * locks_last_error() (the architecture, type, selector, rank or callback by name) and
 * in the log. Touches no device; the same in every build. */
locks_status engine_cuda_check(const engine_cuda_model *m, const locks_ctx_params *p);

/* Creates the CUDA cache (into *cache) and the device engine for a context of p->n_ctx
 * tokens. NULL and *err: LOCKS_ERR_UNSUPPORTED (outside the list: engine_cuda_check; or
 * no CUDA in this build), LOCKS_ERR_BACKEND (no device), LOCKS_ERR_OOM (does not fit; the
 * log gives the numbers). Nothing is left allocated on failure. */
engine_cuda *engine_cuda_init(const engine_cuda_model *m, const locks_ctx_params *p, locks_cache **cache,
                              locks_status *err);
void engine_cuda_free(engine_cuda *g);

/* The weights of m on device 0 as engine_cuda_init uploads them (matrices of the types
 * lg_qtype_supported keeps quantized, the rest in the 16-bit type), with no cache or
 * engine: for `locks bench --backend cuda --gguf`. NULL and *err as engine_cuda_init
 * (LOCKS_ERR_UNSUPPORTED outside the capability list, _BACKEND, _OOM). Free with
 * lg_model_free. */
typedef struct lg_model lg_model;
lg_model *engine_cuda_upload(const engine_cuda_model *m, locks_status *err);

/* Tokens [pos, pos + n) of sequence seq (reserved in the cache): a prefill chunk (decode
 * = 0) or one decode token of that sequence alone (decode = 1, n = 1:
 * engine_cuda_decode_seqs of {seq}). logits (may be NULL): [n_vocab] of the last token.
 * Decode adds its KV bytes to *stats. */
locks_status engine_cuda_forward(engine_cuda *g, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                 int decode, float *logits, const locks_step_params *step, int32_t n_ctx,
                                 locks_run_stats *stats);
/* One decode token of each of the n sequences seqs[i] (distinct cache slots 0 .. n_seqs - 1,
 * any order), tokens[i] at position pos[i] (its slot reserved in the cache), in one pass
 * (one graph replay; lg_set_rows: a subset's logits are those of the whole batch, bit for
 * bit); logits (may be NULL): [n][n_vocab] in seqs' order. */
locks_status engine_cuda_decode_seqs(engine_cuda *g, const int32_t *seqs, int32_t n, const int32_t *tokens,
                                     const int32_t *pos, float *logits, const locks_step_params *step, int32_t n_ctx,
                                     locks_run_stats *stats);
/* The verify pass of speculative decoding (lg_verify): tokens [pos, pos + n) of sequence
 * seq (reserved) with dense attention, logits [n][n_vocab] of every token. */
locks_status engine_cuda_verify(engine_cuda *g, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                float *logits);
/* Device sampling for locks_generate: set the parameters, sample the last prefill
 * token's logits, or read the token the last decode sampled. */
locks_status engine_cuda_set_sampler(engine_cuda *g, locks_sampler_params p);
locks_status engine_cuda_sample_prefill(engine_cuda *g, int32_t *tok);
int32_t engine_cuda_next(const engine_cuda *g);

#endif
