/*
 * locks_model.h — a small inference engine for Llama-family GGUF models that decodes
 * through the LOCKS cache (locks.h) with any selector.
 *
 * Objects (init/free pairs, opaque):
 *   locks_model    the weights (a read-only mapping of the GGUF file), hyper-parameters
 *                  and tokenizer. Shareable by several contexts (read-only after load).
 *   locks_ctx      one session: a locks_cache holding one sequence (or n_seqs decoded
 *                  together), a thread pool and the activation buffers. Tokens go in through prefill (batched, causal dense
 *                  attention) and decode (one token, attention by the chosen selector).
 *   locks_sampler  greedy / temperature / top-k / top-p sampling with its own RNG.
 *
 * Supported models: GGUF `general.architecture` = llama (Llama 2/3, SmolLM, TinyLlama,
 * ...), qwen2 (Qwen2 / Qwen2.5: Q/K/V biases, NeoX RoPE), qwen3 (QK-norm, NeoX RoPE) and
 * gemma3 (Gemma 3: QK-norm, post-branch norms, GeGLU, scaled embeddings, five of six
 * layers local with a sliding window attended exactly, their K/V kept for the last
 * positions only (swa_rollback); the selector and budget act in the global layers only),
 * with F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K tensors, head_dim
 * 64/128/256, GQA, tied or separate output embeddings; tokenizers: byte-level BPE
 * (tokenizer.ggml.model gpt2) or SentencePiece BPE (llama). For llama, RoPE follows
 * llama.cpp's GGUF convention: the converter permutes Q/K so that rotation acts on
 * adjacent pairs (x[2i], x[2i+1]).
 *
 * Threading: a context is used by one thread at a time; its cache's pool of n_threads
 * workers (caller included) runs both the matmuls and the attention.
 *
 * Errors: as in locks.h, a failed locks_model_load / locks_ctx_* / locks_generate call
 * sets locks_last_error() to why, named by the call ("locks_ctx_prefill: token 300 at
 * index 2 (the vocabulary is 0..299)"), and a refused call leaves the context as it was.
 */
#ifndef LOCKS_MODEL_H
#define LOCKS_MODEL_H

#include <stdbool.h>
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
    char arch[16];          /* general.architecture: "llama", "qwen2", "qwen3", "gemma3" */
    int32_t swa_window;     /* sliding window of the local layers in tokens; 0: none */
    int32_t swa_period;     /* layer l is local iff swa_window > 0 and (l + 1) % swa_period != 0 */
    float rope_theta_swa;   /* RoPE base of the local layers */
} locks_model_info;

/* Maps and checks a GGUF file. Returns NULL and sets *err: LOCKS_ERR_IO, LOCKS_ERR_FORMAT
 * (malformed file, missing tensor or key, inconsistent shapes), LOCKS_ERR_UNSUPPORTED
 * (another architecture or tensor type; locks_last_error and the log say which),
 * LOCKS_ERR_OOM. */
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
/* Sees the query of every token, per layer, after RoPE: q[n_q_heads][head_dim] of the
 * token at position pos, prompt (prefill) tokens and decode steps alike (for KV dumps
 * and analysis). */
typedef void (*locks_query_fn)(int32_t layer, int32_t pos, const float *q, void *user);
/* Sees every decode step's attention, per layer, after it ran: the queries q[n_q_heads]
 * [head_dim] (after RoPE) and the pages attended, for one sequence: sel->pages[Hkv]
 * [sel->max_pages] (logical, ascending), sel->n_pages[Hkv]. For measurements (locks eval
 * --tasks); it must not use the context. */
typedef void (*locks_step_fn)(int32_t layer, const float *q, int32_t n_q_heads,
                              const locks_selection *sel, void *user);

typedef struct {
    int32_t n_ctx;       /* max tokens in the session (default 4096) */
    int32_t n_threads;   /* worker threads, caller included (default 1) */
    int32_t n_batch;     /* prefill chunk in tokens (default 64) */
    int32_t rank;        /* summary rank (default 8) */
    locks_summary_prec summary_prec; /* default LOCKS_SUMMARY_Q */
    locks_step_params step;          /* selector, budget, sink, recent for decode */
    uint32_t selectors; /* the selectors locks_ctx_set_step may switch to, beyond
                         * step.selector (LOCKS_SEL_BIT set; default 0): the cache keeps
                         * their metadata (locks_cache_params.selectors) */
    int32_t f32_act; /* 0 (default): activations meet block-quantized weights as int8
                      * blocks, like llama.cpp; 1: fp32 activations (slower; validation) */
    locks_progress_fn progress;      /* called after each prefill chunk (may be NULL) */
    void *progress_user;
    locks_query_fn on_query;         /* called for every token's query, per layer (may be NULL) */
    void *on_query_user;
    locks_step_fn on_step;           /* called after each decode attention, per layer (may be NULL) */
    void *on_step_user;
    locks_backend backend; /* LOCKS_BACKEND_CPU (default) or LOCKS_BACKEND_CUDA: see below */
    int32_t cuda_graph;    /* CUDA: 1 (default) replays one captured graph per decode token;
                            * 0 launches the same kernels one by one (validation) */
    int32_t n_seqs;        /* sequences the context holds, 1 (default) .. LOCKS_CTX_MAX_SEQS,
                            * each up to n_ctx tokens: see "Several sequences" below */
    int32_t swa_rollback;  /* models with sliding-window layers (Gemma 3): how many tokens
                            * locks_ctx_truncate may drop at once, at least n_batch (default
                            * 256; n_ctx: any). Those layers keep only the K/V of their
                            * last window - 1 + max(n_batch, swa_rollback) positions (at
                            * most n_ctx), not the whole context: see locks_ctx_truncate */
} locks_ctx_params;

/* The CUDA backend (backend = LOCKS_BACKEND_CUDA, builds with LOCKS_HAVE_CUDA): the
 * context copies the model's weights to the GPU at init — F16 and BF16 as stored, F32 and
 * the block types Q8_0 / Q4_0 / Q4_1 dequantized to fp16 (bf16 if the file holds BF16
 * weights) — and runs prefill (chunks of max(n_batch, 1024) tokens, causal attention on
 * tensor cores over the paged cache) and decode (the whole token, every layer, the
 * sampling included, one CUDA graph replayed while the sequence grows) there; K/V live in
 * a CUDA-backend locks_cache (fp16, quantized summaries). Selectors full and locks, rank
 * <= 8, no on_query / on_step callbacks, no locks_ctx_clone, no sliding-window layers
 * (LOCKS_ERR_UNSUPPORTED otherwise). locks_generate samples on the device: same rule as the CPU sampler, top_k
 * capped at 1024 candidates, its own RNG stream (a seed reproduces a GPU run, not a CPU
 * one). locks_ctx_init fails, leaving nothing allocated, with LOCKS_ERR_UNSUPPORTED in a
 * build without CUDA, LOCKS_ERR_BACKEND when there is no GPU, and LOCKS_ERR_OOM (the log
 * names weights, KV cache and free memory) when the model and n_ctx do not fit. */

locks_ctx_params locks_ctx_default_params(void);

/* Returns NULL and sets *err on invalid parameters (LOCKS_ERR_INVALID_ARG, including a
 * step the first decode would reject: budget <= 0, negative n_sink / n_recent, an
 * unknown selector, a negative or non-finite scale) or allocation failure. */
locks_ctx *locks_ctx_init(const locks_model *m, locks_ctx_params p, locks_status *err);
void locks_ctx_free(locks_ctx *c);
/* A new context with the same parameters holding a copy of src's tokens and KV (the
 * summaries are rebuilt from the copied keys: same values). For answering one prompt
 * several ways without prefilling it again. The clone runs on src's worker threads (no
 * new ones): a context and its clones may be used from several threads, but their
 * parallel jobs take turns on those threads. */
locks_ctx *locks_ctx_clone(const locks_ctx *src, locks_status *err);
/* Empties the session (the cache sequence is dropped and re-added). */
locks_status locks_ctx_reset(locks_ctx *c);
/* Tokens in the session. */
int32_t locks_ctx_len(const locks_ctx *c);
/* Drops every token after the first n (0 <= n <= locks_ctx_len, else
 * LOCKS_ERR_INVALID_ARG): the session goes on from n exactly as if the rest had never
 * been run (locks_cache_seq_truncate). For answering one prefill several ways. On a
 * model with sliding-window layers, whose K/V the context keeps only for the last
 * positions (locks_ctx_params.swa_rollback), a truncation that would need positions
 * already overwritten — more than max(n_batch, swa_rollback) tokens back from the
 * furthest position run since, unless n == 0 or nothing was overwritten yet — returns
 * LOCKS_ERR_UNSUPPORTED (the log says how far back it can go) and changes nothing. */
locks_status locks_ctx_truncate(locks_ctx *c, int32_t n);
/* The model and the parameters the context was made with (step: as last set). */
const locks_model *locks_ctx_model(const locks_ctx *c);
locks_ctx_params locks_ctx_get_params(const locks_ctx *c);
/* The cache, for inspection (summaries, pages, KV dumps). Owned by the context. It
 * holds the global layers only: see locks_ctx_cache_layer. */
locks_cache *locks_ctx_cache(locks_ctx *c);
/* The cache layer holding model layer `layer`'s K/V; -1 for a sliding-window layer
 * (kept by the context, not in the cache) or a layer outside 0 .. n_layers - 1. On a
 * model without such layers, the identity. */
int32_t locks_ctx_cache_layer(const locks_ctx *c, int32_t layer);
/* Bytes of host memory the context keeps for the K/V of its sliding-window layers (all
 * sequences; 0 without such layers): independent of n_ctx beyond the ring's size. */
size_t locks_ctx_swa_bytes(const locks_ctx *c);
int32_t locks_ctx_seq(const locks_ctx *c);
/* Decode step parameters (selector, budget, ...) used by later decode calls.
 * LOCKS_ERR_NO_META for a selector the context's cache does not serve (neither
 * step.selector nor in selectors at init). */
locks_status locks_ctx_set_step(locks_ctx *c, locks_step_params step);
/* For per-layer measurements: later decode calls use the step parameters at this layer
 * only and dense attention (`full`) at every other; -1 (the default) = every layer.
 * LOCKS_ERR_INVALID_ARG outside -1 .. n_layers - 1. */
locks_status locks_ctx_set_sparse_layer(locks_ctx *c, int32_t layer);

/* Runs n tokens through the model (chunks of n_batch: batched matmuls, causal dense
 * attention), appending them to the session. logits (may be NULL): [n_vocab] of the last
 * token. LOCKS_ERR_POOL_FULL if the session would exceed n_ctx (nothing appended). */
locks_status locks_ctx_prefill(locks_ctx *c, const int32_t *tokens, int32_t n, float *logits);
/* As locks_ctx_prefill (batched matmuls), but logits (required) receives [n][n_vocab]:
 * the logits after every one of the n tokens (logits[i] predicts the token after
 * tokens[i]), and each token attends as a dense decode step (`full` selector) would, so
 * the logits and K/V are bit for bit those of n locks_ctx_decode calls under `full`.
 * For verifying drafted tokens (locks_speculate) and dense references. */
locks_status locks_ctx_prefill_all(locks_ctx *c, const int32_t *tokens, int32_t n, float *logits);
/* One token through the model; attention of every layer is one locks_decode_step with the
 * context's step parameters. logits: [n_vocab].
 * Both calls are all or nothing: on any error (LOCKS_ERR_INVALID_ARG for a bad token id,
 * POOL_FULL, LOCKS_ERR_BUDGET for a budget below the forced pages, ...) the session is as
 * before the call (a pass that failed midway is truncated back). Only if that cleanup
 * itself fails is the context broken: then every call returns INVALID_ARG until
 * locks_ctx_reset. (That includes a prefill of more than max(n_batch, swa_rollback)
 * tokens on a model with sliding-window layers failing in a later chunk: those layers
 * cannot go back that far. Its inputs are checked first, so only an allocation failure
 * or non-finite activations get there.) */
locks_status locks_ctx_decode(locks_ctx *c, int32_t token, float *logits);

/* ---- Several sequences (locks_ctx_params.n_seqs > 1) ----
 * The context's sequences 0 .. n_seqs - 1 share one cache (n_seqs x n_ctx tokens of
 * room) and decode together: locks_ctx_decode_batch runs one token of every sequence —
 * on the CUDA backend in one pass (one graph replay; each weight read once for up to 8
 * sequences, once per 8 for 9..32: the products run in pieces of 8 rows so that a
 * sequence's logits do not depend on how many decode with it),
 * on the CPU backend one sequence after the other (the same results as separate
 * contexts, bit for bit). Sequences may differ in length; an empty one decodes its first
 * token. The calls without a sequence argument (prefill, prefill_all, decode, truncate,
 * len, seq, generate) act on sequence 0, reset empties all of them; locks_ctx_clone needs
 * n_seqs == 1. */
#define LOCKS_CTX_MAX_SEQS 32
/* As locks_ctx_prefill, into sequence seq (0 .. n_seqs - 1; else LOCKS_ERR_INVALID_ARG). */
locks_status locks_ctx_prefill_seq(locks_ctx *c, int32_t seq, const int32_t *tokens, int32_t n, float *logits);
/* Tokens in sequence seq; -1 for a bad seq. */
int32_t locks_ctx_seq_len(const locks_ctx *c, int32_t seq);
/* One token of every sequence: tokens[n_seqs] (tokens[s] goes to sequence s); logits (may
 * be NULL): [n_seqs][n_vocab]. All or nothing, as locks_ctx_decode: a bad token id
 * (INVALID_ARG) or a full sequence (POOL_FULL) is found before any sequence moves, and a
 * failure midway truncates every sequence back. Stats count n_seqs decode tokens. */
locks_status locks_ctx_decode_batch(locks_ctx *c, const int32_t *tokens, float *logits);

/* For serving (continuous batching): one token for each of the n sequences seqs[0, n)
 * (distinct, 0 .. n_seqs - 1, any order), tokens[n] (tokens[i] goes to seqs[i]); logits
 * (may be NULL): [n][n_vocab] in the same order. Sequences not named do not move. Checks
 * and all-or-nothing as locks_ctx_decode_batch; on the CPU backend the sequences run one
 * after the other (bit for bit separate decode calls). On the CUDA backend in one pass,
 * whose work is the whole batch's whatever n (the idle rows run too): a sequence's logits
 * are the same bit for bit whichever sequences decode with it and in which order
 * (locks_ctx_decode on the GPU is this call for sequence 0 alone). */
locks_status locks_ctx_decode_seqs(locks_ctx *c, const int32_t *seqs, int32_t n, const int32_t *tokens,
                                   float *logits);
/* As locks_ctx_prefill_all, into sequence seq (for locks_speculate_round). */
locks_status locks_ctx_prefill_all_seq(locks_ctx *c, int32_t seq, const int32_t *tokens, int32_t n, float *logits);
/* As locks_ctx_truncate, for sequence seq (n = 0 empties it: a per-sequence reset).
 * LOCKS_ERR_INVALID_ARG for a bad seq or n outside 0 .. its length. */
locks_status locks_ctx_truncate_seq(locks_ctx *c, int32_t seq, int32_t n);

/* Shared prefix pages (CPU backend): sequence dst drops its tokens and takes the first n
 * tokens of sequence src (dst != src) without running them: the same physical cache
 * pages (locks_cache_seq_share: reference counted, never written again, freed when the
 * last holder drops them), and on a model with sliding-window layers a copy of src's
 * rings. dst then goes on (prefill, decode) exactly as if it had run those n tokens
 * itself; truncating, resetting or re-sharing either sequence leaves the other's tokens
 * as they were. n must be a multiple of 16 (whole pages) within src's length and, with
 * sliding-window layers, the rings of src must still hold the window before n (src ran
 * at most about swa_rollback tokens past n); locks_ctx_seq_shareable gives the largest
 * such n up to a bound. LOCKS_ERR_INVALID_ARG otherwise (nothing changed),
 * LOCKS_ERR_UNSUPPORTED on the CUDA backend; locks_last_error() says why. */
locks_status locks_ctx_seq_share(locks_ctx *c, int32_t dst, int32_t src, int32_t n);
/* The largest n <= max_n that locks_ctx_seq_share(c, any, src, n) takes; 0 if none (also
 * for a bad src and on the CUDA backend). */
int32_t locks_ctx_seq_shareable(const locks_ctx *c, int32_t src, int32_t max_n);

/* Sequence seq's K and V of one layer as stored (fp16 bits): k, v [len][n_kv_heads]
 * [head_dim] (len = locks_ctx_seq_len). CPU backend (LOCKS_ERR_UNSUPPORTED on CUDA);
 * LOCKS_ERR_INVALID_ARG for a bad seq or layer. For saving a slot. A sliding-window
 * layer keeps only its last positions (locks_ctx_params.swa_rollback): the earlier ones,
 * never attended again, read as 0. */
locks_status locks_ctx_seq_read_kv(const locks_ctx *c, int32_t seq, int32_t layer, uint16_t *k, uint16_t *v);
/* Bytes of one page summary record (one full page, one KV head) of the context's cache:
 * locks_summary_bytes(head_dim, rank, summary_prec); 0 for NULL. */
size_t locks_ctx_summary_bytes(const locks_ctx *c);
/* Sequence seq's page summaries of one layer as the cache stores them: dst [len / 16]
 * [n_kv_heads][locks_ctx_summary_bytes] gets the records of its full pages in order
 * (record layout: locks_cache_read_summaries in locks_core.h; dst may be NULL when len
 * < 16). A sliding-window layer has none (locks_ctx_cache_layer is -1):
 * LOCKS_ERR_INVALID_ARG, as for a bad seq or layer; LOCKS_ERR_UNSUPPORTED on CUDA. For
 * saving a slot with its summaries. */
locks_status locks_ctx_seq_read_summaries(const locks_ctx *c, int32_t seq, int32_t layer, void *dst);
/* Replaces sequence seq by n tokens with the given K/V, k and v [n_layers][n][n_kv_heads]
 * [head_dim] fp16 bits as locks_ctx_seq_read_kv gives them, stored as given. sums: the
 * page summaries as locks_ctx_seq_read_summaries gives them, for every layer with
 * summaries in model order (those with locks_ctx_cache_layer >= 0, cache layer i at
 * i), [n_cache_layers][n / 16][n_kv_heads][locks_ctx_summary_bytes], copied as given so
 * the loaded sequence selects bit for bit as the saved one; NULL: built from the keys
 * (the same values as when the tokens ran, on a machine whose summary build gives the
 * same bits). The selectors' page metadata is built from the keys either way. For
 * restoring a saved slot: decoding then goes on as if the tokens had been prefilled (a
 * sliding-window layer takes the positions its ring holds; below n the sequence can
 * then be truncated only to 0, as the earlier positions of the saved K/V may be the
 * zeros of locks_ctx_seq_read_kv). CPU backend only (LOCKS_ERR_UNSUPPORTED on CUDA).
 * Every input is checked before the sequence changes: LOCKS_ERR_INVALID_ARG (bad seq,
 * n < 0, NULL k / v with n > 0), LOCKS_ERR_POOL_FULL past n_ctx, LOCKS_ERR_NONFINITE for
 * a NaN or Inf among the K/V bits of any layer or a non-finite scale (Q) or float (F32)
 * in a summary record leave the sequence as it was (any other summary bits are valid
 * data: a wrong summary selects badly, never crashes). A later failure (allocation, a
 * pool without the pages) leaves the sequence empty. */
locks_status locks_ctx_seq_load(locks_ctx *c, int32_t seq, int32_t n, const uint16_t *k, const uint16_t *v,
                                const void *sums);
/* locks_ctx_seq_load without summaries (sums = NULL): they are built from the keys. */
locks_status locks_ctx_seq_load_kv(locks_ctx *c, int32_t seq, int32_t n, const uint16_t *k, const uint16_t *v);

/* KV traffic and time of the decode steps so far (summed over steps and layers). */
typedef struct {
    int32_t n_prefill, n_decode;  /* tokens */
    double prefill_ms, decode_ms; /* wall time */
    double prefill_cpu_ms, decode_cpu_ms; /* process CPU time (all threads): on a shared
                                           * machine, CPU ms / n_threads estimates the
                                           * wall time the machine would take alone */
    uint64_t bytes_meta;          /* selector metadata read by decode attention */
    uint64_t bytes_kv;            /* K/V bytes read by decode attention (GPU backend with a
                                     mass target: the budget's cap, an upper bound, as the
                                     device does not report each token's selection) */
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
/* The distribution locks_sampler_sample draws from: probs[n_vocab] (sums to 1; greedy: 1 at
 * the argmax). Uses no random number. */
void locks_sampler_probs(locks_sampler *s, const float *logits, float *probs);
/* A token drawn from probs[n_vocab] (>= 0, normalised here by their sum) with the
 * sampler's RNG; -1 if every entry is 0. */
int32_t locks_sampler_draw(locks_sampler *s, const float *probs);
/* Uniform in [0, 1) from the sampler's RNG. */
float locks_sampler_uniform(locks_sampler *s);

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

/* Speculative decoding with LOCKS drafts (src/model/speculate.c).
 *
 * Each round drafts up to k tokens by sparse decode steps (draft's selector and budget;
 * the round's first draft step selects the pages of each global layer and KV head, the
 * later ones attend those pages again, plus any page begun since, without scoring: the
 * drafts are consecutive tokens, and a draft's quality only moves the acceptance rate),
 * drops them from the cache, runs the pending token and the drafts through one dense
 * prefill pass (locks_ctx_prefill_all), and keeps the longest prefix dense attention
 * accepts plus one token from the dense distribution. Acceptance is speculative
 * rejection sampling (accept a draft x with probability min(1, p(x) / q(x)), p dense, q
 * the draft, both after the sampler's temperature / top-k / top-p; on a rejection the
 * token is drawn from max(0, p - q) normalised), so the output is distributed as
 * locks_generate with a `full` context; greedy (temp <= 0) keeps exactly the drafts equal
 * to the dense argmax, so greedy output is token for token that of locks_generate
 * under `full` (the verify pass reproduces dense decode steps bit for bit). The cache
 * afterwards holds exactly the tokens locks_generate would have fed, with dense K/V. */
typedef struct {
    int32_t k;               /* tokens drafted per round: 1 .. n_ctx - 1; with sliding-window
                              * layers at most max(n_batch, swa_rollback) (else
                              * LOCKS_ERR_UNSUPPORTED, nothing run) */
    locks_step_params draft; /* the drafts' step parameters; selector must not be FULL */
} locks_spec_params;

typedef struct {
    int32_t n_rounds;   /* verify passes */
    int32_t n_drafted;  /* draft tokens proposed */
    int32_t n_accepted; /* of those, kept */
    double draft_ms, verify_ms; /* wall time of the draft steps and of the dense passes */
} locks_spec_stats;

/* As locks_generate (the prompt is appended to the context by a dense prefill; n_prompt
 * >= 1), with speculative rounds. The context's own step parameters are not used and are
 * left as they were. stats (may be NULL) is overwritten. LOCKS_ERR_INVALID_ARG for k < 1
 * or k >= the context's n_ctx, a FULL draft selector, a bad draft mass. A round that
 * fails (draft or verify) leaves the context as it was before that round's draft and
 * returns the error, with the tokens produced before it in out / *n_out. */
locks_status locks_speculate(locks_ctx *c, const int32_t *prompt, int32_t n_prompt, int32_t n_predict,
                             locks_sampler *s, const locks_spec_params *sp, locks_token_fn on_token,
                             void *user, int32_t *out, int32_t *n_out, locks_spec_stats *stats);

/* One speculative round (as in locks_speculate) for sequence seq of any context, for a
 * server interleaving rounds with other sequences' steps. seq holds n tokens and t0 is
 * the next token (sampled, not fed). Drafts k >= 1 tokens with draft's step parameters
 * (not FULL), rewinds, verifies t0 and the drafts in one dense pass, and keeps t0 and the
 * accepted drafts (seq then holds n + 1 + a tokens, dense K/V). out[k + 1] receives the a
 * accepted drafts and then the next token (the next round's t0); *n_out = a + 1. A
 * caller that stops at accepted draft i (an end-of-generation token, a stop string)
 * truncates seq to n + 1 + i. The context's step parameters are left as they were.
 * LOCKS_ERR_INVALID_ARG for bad arguments, POOL_FULL if n + k + 1 exceeds n_ctx,
 * UNSUPPORTED for k past the sliding-window layers' reach (locks_spec_params.k); on any
 * error seq holds its n tokens again. */
locks_status locks_speculate_round(locks_ctx *c, int32_t seq, int32_t t0, int32_t k, const locks_step_params *draft,
                                   locks_sampler *s, int32_t *out, int32_t *n_out);

/* ================================================================================ */
/* Tokenizer                                                                         */
/* ================================================================================ */
/*
 * GPT-2-style byte-level BPE, built from a vocabulary as a GGUF stores it:
 *
 *   tokenizer.ggml.tokens      string[n]   token text; NORMAL tokens are in GPT-2's
 *                                          byte-to-unicode alphabet ("Ġthe" = " the"),
 *                                          CONTROL / USER_DEFINED tokens are plain UTF-8
 *   tokenizer.ggml.token_type  int32[n]    locks_token_type
 *   tokenizer.ggml.merges      string[m]   "left right" in rank order (first = merged first)
 *   tokenizer.ggml.pre         string      pre-tokenizer name (see below)
 *   tokenizer.ggml.{bos,eos,unknown,padding}_token_id
 *
 * Encoding: text is first cut at special tokens (CONTROL tokens when parse_special is
 * set, USER_DEFINED tokens always; longest match wins), each remaining span is split by
 * the pre-tokenizer, and each piece is BPE-merged from its bytes by merge rank (lowest
 * rank first, leftmost first on ties), as Hugging Face `tokenizers` does.
 *
 * Pre-tokenizers ("pre"):
 *   "gpt2"                      GPT-2's regex
 *                               's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   "smollm", "starcoder",      every \p{N} code point is its own piece first, then the
 *   "refact", "codeshell"       GPT-2 regex on the spans between them
 * \p{L}, \p{N} follow Unicode 16.0 general categories, \s the White_Space property: every
 * code point is classified as Hugging Face tokenizers' regex engine does. Bytes
 * that are not valid UTF-8 count as "other" (neither letter, number nor space), so any
 * byte string whose bytes all have tokens encodes and decodes back to itself.
 *
 * Decoding is byte-exact: a token's piece is its raw bytes, which may be a fragment of a
 * UTF-8 character; locks_tokenizer_decode_stream holds such fragments back.
 *
 * A tokenizer is read-only after init (set_special aside): encode and decode may run on
 * several threads at once.
 */

typedef struct locks_tokenizer locks_tokenizer;

/* Token types, numbered as GGUF (llama.cpp) stores them. */
typedef enum {
    LOCKS_TOKEN_UNDEFINED = 0,
    LOCKS_TOKEN_NORMAL = 1,
    LOCKS_TOKEN_UNKNOWN = 2,
    LOCKS_TOKEN_CONTROL = 3,      /* <|im_start|>, <|endoftext|>, ... */
    LOCKS_TOKEN_USER_DEFINED = 4, /* added text token: always matched literally */
    LOCKS_TOKEN_UNUSED = 5,
    LOCKS_TOKEN_BYTE = 6, /* "<0xAB>": the single byte 0xAB */
} locks_token_type;

/* Special token ids; -1 = the vocabulary has none. */
typedef struct {
    int32_t bos, eos, unk, pad;
} locks_token_ids;

/* Builds a tokenizer. tokens[n_tokens] (UTF-8, NUL-terminated), types[n_tokens]
 * (locks_token_type; NULL = all NORMAL), merges[n_merges] ("a b"; a merge whose parts or
 * result are not in the vocabulary is skipped with a warning), pre = pre-tokenizer name
 * (NULL = "gpt2"). The tokenizer copies what it needs; the arrays may be freed after.
 * Special ids start as all -1 (set them with locks_tokenizer_set_special).
 * Returns NULL and sets *err (if err is non-NULL): LOCKS_ERR_INVALID_ARG for NULL arrays,
 * n_tokens <= 0 or a type out of range, LOCKS_ERR_UNSUPPORTED for an unknown pre name,
 * LOCKS_ERR_OOM. */
locks_tokenizer *locks_tokenizer_init(const char *const *tokens, const int32_t *types,
                                      int32_t n_tokens, const char *const *merges,
                                      int32_t n_merges, const char *pre, locks_status *err);
/* A SentencePiece-style BPE tokenizer (GGUF tokenizer.ggml.model = "llama": Gemma,
 * Llama 2, Mistral): tokens[n_tokens] in SentencePiece's spelling (U+2581 for a space,
 * "<0xAB>" BYTE tokens), types as above, scores[n_tokens] (finite). Encoding cuts text at
 * special tokens as above, then merges each span from its UTF-8 characters: the adjacent
 * pair whose concatenation is a token with the highest score first (leftmost on ties),
 * as sentencepiece's BPE and llama.cpp do; a character that ends up in no token falls
 * back to its bytes' <0xAB> tokens. No space prefix is added and spaces are not
 * collapsed (Gemma's add_space_prefix = false). Errors as locks_tokenizer_init
 * (LOCKS_ERR_INVALID_ARG also for NULL or non-finite scores). */
locks_tokenizer *locks_tokenizer_init_spm(const char *const *tokens, const int32_t *types,
                                          const float *scores, int32_t n_tokens, locks_status *err);
void locks_tokenizer_free(locks_tokenizer *t);

int32_t locks_tokenizer_n_vocab(const locks_tokenizer *t);
/* LOCKS_ERR_INVALID_ARG if an id is neither -1 nor in [0, n_vocab); nothing changes then. */
locks_status locks_tokenizer_set_special(locks_tokenizer *t, locks_token_ids ids);
locks_token_ids locks_tokenizer_special(const locks_tokenizer *t);
/* Type of token id; LOCKS_TOKEN_UNDEFINED for an id out of range. */
locks_token_type locks_tokenizer_type(const locks_tokenizer *t, int32_t id);
/* Id of the token whose decoded bytes are exactly text[0, len) (CONTROL and USER_DEFINED
 * tokens first, then the lowest id), or -1. E.g. locks_tokenizer_find(t, "<|im_end|>", 10). */
int32_t locks_tokenizer_find(const locks_tokenizer *t, const char *text, size_t len);
/* True for ids that end a generation: eos, and the CONTROL tokens <|im_end|>,
 * <|endoftext|>, <|eot_id|>, <|end|>, <end_of_turn> where the vocabulary has them. */
bool locks_tokenizer_is_eog(const locks_tokenizer *t, int32_t id);

/* Encodes text[0, len) (any bytes; no BOS is added). Writes up to cap ids to ids and the
 * total count to *n_out. At most len ids are ever produced, so cap >= len always fits.
 * Returns LOCKS_ERR_INVALID_ARG with *n_out = the count needed if cap is too small
 * (call again with a bigger buffer), LOCKS_ERR_OOM. A byte that has no token in the
 * vocabulary is dropped, as Hugging Face tokenizers and llama.cpp do (SmolLM2 has tokens
 * for all of valid UTF-8 below U+40000 except six ASCII control characters). */
locks_status locks_tokenizer_encode(const locks_tokenizer *t, const char *text, size_t len,
                                    bool parse_special, int32_t *ids, int32_t cap,
                                    int32_t *n_out);

/* The raw bytes of token id (not NUL-terminated; valid while t lives). CONTROL, UNKNOWN
 * and UNUSED tokens give their text only when special is true, else zero bytes.
 * LOCKS_ERR_INVALID_ARG for an id out of range. */
locks_status locks_tokenizer_piece(const locks_tokenizer *t, int32_t id, bool special,
                                   const char **bytes, size_t *len);

/* Concatenated pieces of ids[0, n), NUL-terminated. *n_out = length without the NUL;
 * LOCKS_ERR_INVALID_ARG (with *n_out set) if cap < *n_out + 1 or an id is out of range. */
locks_status locks_tokenizer_decode(const locks_tokenizer *t, const int32_t *ids, int32_t n,
                                    bool special, char *out, size_t cap, size_t *n_out);

/* Streaming detokenization: zero-initialise one per output stream. */
typedef struct {
    char pending[4]; /* trailing bytes of an unfinished UTF-8 character */
    int32_t n_pending;
} locks_detok_state;

/* Appends the piece of id to what st holds back and writes to out everything except a
 * trailing, still-incomplete UTF-8 character, which st keeps for the next call. Bytes that
 * can never become valid UTF-8 are passed through. out needs cap >= piece length + 4;
 * *n_out = bytes written (no NUL). LOCKS_ERR_INVALID_ARG for a bad id or small cap
 * (st unchanged). */
locks_status locks_tokenizer_decode_stream(const locks_tokenizer *t, locks_detok_state *st,
                                           int32_t id, bool special, char *out, size_t cap,
                                           size_t *n_out);
/* Writes whatever st still holds (at most 3 bytes; an unfinished character at the end
 * of the stream) and resets it. */
size_t locks_detok_flush(locks_detok_state *st, char out[4]);

/* One chat message; role is "system", "user" or "assistant" (any text is accepted). */
typedef struct {
    const char *role;
    const char *content;
} locks_chat_msg;

/* SmolLM2's chat template inserts this system message when the first message is not a
 * system message; pass it yourself to get the same prompt. */
#define LOCKS_SMOLLM2_SYSTEM_PROMPT \
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

/* ChatML: for each message "<|im_start|>{role}\n{content}<|im_end|>\n", then, if
 * add_assistant, "<|im_start|>assistant\n". Writes the NUL-terminated text to out;
 * *n_out = its length. LOCKS_ERR_INVALID_ARG (with *n_out set) if cap < *n_out + 1 or a
 * role/content is NULL. Encode the result with parse_special = true. */
locks_status locks_chatml_format(const locks_chat_msg *msgs, int32_t n_msgs, bool add_assistant,
                                 char *out, size_t cap, size_t *n_out);

/* Gemma's chat template: "<bos>", then for each message "<start_of_turn>{role}\n{content}
 * <end_of_turn>\n" with role "assistant" written "model" and the content trimmed of
 * surrounding white space; a leading "system" message has no turn of its own, its text
 * and "\n\n" open the first turn. Then, if add_assistant, "<start_of_turn>model\n".
 * Output and errors as locks_chatml_format; encode with parse_special = true and no
 * extra BOS. */
locks_status locks_gemma_chat_format(const locks_chat_msg *msgs, int32_t n_msgs, bool add_assistant,
                                     char *out, size_t cap, size_t *n_out);

/* ================================================================================ */
/* end Tokenizer                                                                     */
/* ================================================================================ */

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_MODEL_H */
