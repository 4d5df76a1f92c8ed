/*
 * engine_cuda.h — a locks_ctx on the GPU (locks_ctx_params.backend = LOCKS_BACKEND_CUDA):
 * the bridge between llama.c's context and the device engine of src/cuda/model_cuda.h.
 *
 * At init the model's weights are copied to the device (F16 and BF16 as stored; F32,
 * Q8_0, Q4_0 and Q4_1 dequantized to fp16, or to bf16 when the file holds BF16 weights),
 * after checking that weights plus the KV cache of n_ctx tokens fit in free device
 * memory. The context's cache is a CUDA-backend locks_cache holding p->n_seqs sequences
 * (slots 0 .. n_seqs - 1, the engine's sequences), n_ctx tokens of room each.
 * Prefill runs in chunks of max(n_batch, 1024) tokens; every decode token is one replay
 * of the captured CUDA graph (or, with cuda_graph = 0, the same kernels launched one by
 * one); a step may decode any subset of the sequences (the idle ones do not move).
 * Selectors on the GPU: full and locks. In a build without CUDA every entry
 * fails with LOCKS_ERR_UNSUPPORTED.
 */
#ifndef LOCKS_ENGINE_CUDA_H
#define LOCKS_ENGINE_CUDA_H

#include "locks_model.h"

typedef struct engine_cuda engine_cuda;

#define ENGINE_CUDA_MIN_CHUNK 1024

/* Creates the CUDA cache (into *cache) and the device engine for a context of p->n_ctx
 * tokens. NULL and *err: LOCKS_ERR_UNSUPPORTED (no CUDA in this build, a selector or
 * shape the GPU does not run), LOCKS_ERR_BACKEND (no device), LOCKS_ERR_OOM (does not
 * fit; the log gives the numbers). Nothing is left allocated on failure. */
engine_cuda *engine_cuda_init(const locks_model *m, const locks_ctx_params *p, locks_cache **cache, locks_status *err);
void engine_cuda_free(engine_cuda *g);

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

/* The sampler's parameters (sampler.c), for the device sampler. */
locks_sampler_params locks_sampler_get_params(const locks_sampler *s);

#endif
