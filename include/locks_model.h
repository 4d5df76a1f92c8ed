/*
 * locks_model.h — a small inference engine for Llama-family GGUF models that decodes
 * through the LOCKS cache (locks.h) with any selector.
 *
 * Objects (init/free pairs, opaque):
 *   locks_model    the weights (a read-only mapping of the GGUF file), hyper-parameters
 *                  and tokenizer. Shareable by several contexts (read-only after load).
 *   locks_ctx      one session: a locks_cache holding one sequence, a thread pool and the
 *                  activation buffers. Tokens go in through prefill (batched, causal dense
 *                  attention) and decode (one token, attention by the chosen selector).
 *   locks_sampler  greedy / temperature / top-k / top-p sampling with its own RNG.
 *
 * Supported models: GGUF `general.architecture = llama` (Llama 2/3, SmolLM, TinyLlama,
 * ...) with F32/F16/BF16/Q8_0/Q4_0/Q4_1 tensors, head_dim 64/128/256, GQA, tied or
 * separate output embeddings. RoPE follows llama.cpp's GGUF convention: the converter
 * permutes Q/K so that rotation acts on adjacent pairs (x[2i], x[2i+1]).
 *
 * Threading: a context is used by one thread at a time; it runs its own n_threads.
 */
#ifndef LOCKS_MODEL_H
#define LOCKS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Model                                                                            */
/* ------------------------------------------------------------------------------ */

typedef struct locks_model locks_model;

typedef struct {
    int32_t n_vocab;
    int32_t dim;        /* embedding width */
    int32_t n_layers;
    int32_t n_heads;    /* query heads Hq */
    int32_t n_kv_heads; /* KV heads Hkv (Hq % Hkv == 0) */
    int32_t head_dim;   /* dim / n_heads */
    int32_t ffn_dim;    /* SwiGLU hidden width */
    int32_t n_ctx_train;
    float rope_theta;
    float norm_eps;
    int32_t bos_id, eos_id; /* -1 if the file has none */
    int32_t add_bos;        /* tokenizer.ggml.add_bos_token */
    char name[128];         /* general.name (truncated), "" if absent */
} locks_model_info;

/* Maps and checks a GGUF file. Returns NULL and sets *err: LOCKS_ERR_IO, LOCKS_ERR_FORMAT
 * (malformed file, missing tensor or key, inconsistent shapes), LOCKS_ERR_UNSUPPORTED
 * (another architecture or tensor type; the log says which), LOCKS_ERR_OOM. */
locks_model *locks_model_load(const char *path, locks_status *err);
void locks_model_free(locks_model *m);
locks_model_info locks_model_get_info(const locks_model *m);

/* Where scripts/fetch-model.sh puts SmolLM2-135M-Instruct: $LOCKS_MODEL_DIR (default
 * $HOME/.cache/locks) + "/SmolLM2-135M-Instruct.Q4_1.gguf", into buf (NUL-terminated).
 * Returns the length, as snprintf (the file may not exist). */
int32_t locks_model_default_path(char *buf, size_t size);

/* The model's tokenizer, built from its GGUF vocabulary (see the Tokenizer section
 * for its API). Owned by the model. */
typedef struct locks_tokenizer locks_tokenizer;
const locks_tokenizer *locks_model_tokenizer(const locks_model *m);

/* ------------------------------------------------------------------------------ */
/* Context (one session through a locks_cache)                                      */
/* ------------------------------------------------------------------------------ */

typedef struct locks_ctx locks_ctx;

typedef void (*locks_progress_fn)(int32_t done, int32_t total, void *user);
/* Sees the queries of every decode step, per layer, after RoPE: q[n_q_heads][head_dim]
 * of the token at position pos (for KV dumps and analysis). */
typedef void (*locks_query_fn)(int32_t layer, int32_t pos, const float *q, void *user);

typedef struct {
    int32_t n_ctx;       /* max tokens in the session (default 4096) */
    int32_t n_threads;   /* worker threads, caller included (default 1) */
    int32_t n_batch;     /* prefill chunk in tokens (default 64) */
    int32_t rank;        /* summary rank (default 8) */
    locks_summary_prec summary_prec; /* default LOCKS_SUMMARY_Q */
    locks_step_params step;          /* selector, budget, sink, recent for decode */
    int32_t f32_act; /* 0 (default): activations meet block-quantized weights as int8
                      * blocks, like llama.cpp; 1: fp32 activations (slower; validation) */
    locks_progress_fn progress;      /* called after each prefill chunk (may be NULL) */
    void *progress_user;
    locks_query_fn on_query;         /* called in each decode step, per layer (may be NULL) */
    void *on_query_user;
} locks_ctx_params;

locks_ctx_params locks_ctx_default_params(void);

/* Returns NULL and sets *err on invalid parameters or allocation failure. */
locks_ctx *locks_ctx_init(const locks_model *m, locks_ctx_params p, locks_status *err);
void locks_ctx_free(locks_ctx *c);
/* A new context with the same parameters holding a copy of src's tokens and KV (the
 * summaries are rebuilt from the copied keys: same values). For answering one prompt
 * several ways without prefilling it again. */
locks_ctx *locks_ctx_clone(const locks_ctx *src, locks_status *err);
/* Empties the session (the cache sequence is dropped and re-added). */
locks_status locks_ctx_reset(locks_ctx *c);
/* Tokens in the session. */
int32_t locks_ctx_len(const locks_ctx *c);
/* The cache, for inspection (summaries, pages, KV dumps). Owned by the context. */
locks_cache *locks_ctx_cache(locks_ctx *c);
int32_t locks_ctx_seq(const locks_ctx *c);
/* Decode step parameters (selector, budget, ...) used by later decode calls. */
locks_status locks_ctx_set_step(locks_ctx *c, locks_step_params step);

/* Runs n tokens through the model (chunks of n_batch: batched matmuls, causal dense
 * attention), appending them to the session. logits (may be NULL): [n_vocab] of the last
 * token. LOCKS_ERR_POOL_FULL if the session would exceed n_ctx (nothing appended). */
locks_status locks_ctx_prefill(locks_ctx *c, const int32_t *tokens, int32_t n, float *logits);
/* One token through the model; attention of every layer is one locks_decode_step with the
 * context's step parameters. logits: [n_vocab]. */
locks_status locks_ctx_decode(locks_ctx *c, int32_t token, float *logits);

/* KV traffic and time of the decode steps so far (summed over steps and layers). */
typedef struct {
    int32_t n_prefill, n_decode;  /* tokens */
    double prefill_ms, decode_ms; /* wall time */
    uint64_t bytes_meta;          /* selector metadata read by decode attention */
    uint64_t bytes_kv;            /* K/V bytes read by decode attention */
    uint64_t bytes_dense;         /* K/V bytes dense decode attention would read */
    double attn_ms;               /* decode attention time (score + select + attend) */
} locks_run_stats;

locks_run_stats locks_ctx_stats(const locks_ctx *c);
void locks_ctx_stats_reset(locks_ctx *c);

/* ------------------------------------------------------------------------------ */
/* Sampler                                                                          */
/* ------------------------------------------------------------------------------ */

typedef struct {
    float temp;    /* <= 0: greedy (argmax, lowest id on ties) (default 0.8) */
    int32_t top_k; /* keep the k most likely (<= 0: all) (default 40) */
    float top_p;   /* keep the smallest set with mass >= top_p (>= 1: all) (default 0.95) */
    uint64_t seed; /* RNG seed (default 42) */
} locks_sampler_params;

locks_sampler_params locks_sampler_default_params(void);

typedef struct locks_sampler locks_sampler;

locks_sampler *locks_sampler_init(locks_sampler_params p, int32_t n_vocab, locks_status *err);
void locks_sampler_free(locks_sampler *s);
/* Picks a token from logits[n_vocab] (not modified). */
int32_t locks_sampler_sample(locks_sampler *s, const float *logits);

/* ------------------------------------------------------------------------------ */
/* Generate                                                                         */
/* ------------------------------------------------------------------------------ */

/* Called with each generated token; return non-zero to stop. */
typedef int (*locks_token_fn)(int32_t token, void *user);

/* Prefills the prompt, then samples up to n_predict tokens (stopping after an
 * end-of-generation token, which is reported but not fed back), decoding each through
 * the context's selector. out (may be NULL) receives up to n_predict ids, *n_out (may be
 * NULL) their count. Stats: locks_ctx_stats. */
locks_status locks_generate(locks_ctx *c, const int32_t *prompt, int32_t n_prompt,
                            int32_t n_predict, locks_sampler *s, locks_token_fn on_token,
                            void *user, int32_t *out, int32_t *n_out);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_MODEL_H */
