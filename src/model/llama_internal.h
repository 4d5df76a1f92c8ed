/*
 * llama_internal.h — what llama.c and sampler.c lend the tests, the tools and the fuzz
 * harness (read access to a loaded model's weights, checked at load against the
 * hyper-parameters) and each other. The GPU engine (cuda/engine_cuda.c) gets its view of
 * the weights from llama.c instead (engine_cuda_model) and includes nothing of this.
 */
#ifndef LOCKS_LLAMA_INTERNAL_H
#define LOCKS_LLAMA_INTERNAL_H

#include "locks_model.h"
#include "cuda/engine_cuda.h"
#include "matmul.h"

typedef enum {
    LLAMA_W_TOK_EMBD = 0, /* (n_vocab, dim) */
    LLAMA_W_OUTPUT,       /* (n_vocab, dim); == the embeddings when tied */
    LLAMA_W_Q, LLAMA_W_K, LLAMA_W_V, LLAMA_W_O,
    LLAMA_W_GATE, LLAMA_W_UP, LLAMA_W_DOWN,
} llama_weight_kind;

/* The weight (layer ignored for the embeddings and the output). */
const matmul_weight *llama_model_weight(const locks_model *m, int32_t layer, llama_weight_kind k);
/* Norm weights and biases fp32: which 0 = attention, 1 = FFN (of layer), 2 = output
 * (dim,); 3, 4 = the QK-norms (head_dim,); 5, 6 = the post-attention and post-FFN norms
 * (dim,); 7, 8, 9 = the Q, K, V biases. NULL where the architecture has none. */
const float *llama_model_norm(const locks_model *m, int32_t layer, int which);
/* Rotated dims per head; 1 if the output matrix is the token embedding. */
int32_t llama_model_n_rot(const locks_model *m);
/* locks_model_load from a GGUF in memory (buf must outlive the model: weights point into
 * it); for the model loader's fuzz harness (tests/fuzz/fuzz_model.c). */
locks_model *llama_model_load_buffer(const void *buf, size_t size, locks_status *err);
int llama_model_tied(const locks_model *m);
/* The GPU engine's view of m (what a CUDA context hands engine_cuda_init): pointers into
 * m, valid while m lives; layers: the caller's [n_layers], filled. Any architecture is
 * viewed; engine_cuda_check (and so engine_cuda_init / engine_cuda_upload) refuses those
 * outside the engine's list. For `locks bench --backend cuda --gguf`. */
engine_cuda_model llama_gpu_view(const locks_model *m, engine_cuda_layer *layers);
/* Speculation's drafts (speculate.c): LLAMA_DRAFT_RECORD makes the next sparse decode
 * steps keep the pages each global layer selected, LLAMA_DRAFT_REPLAY makes them attend
 * those pages again (plus any page begun since) without scoring, LLAMA_DRAFT_OFF ends
 * either. The drafts of one round are consecutive tokens: the round's first draft step
 * selects for the rest. CPU only (the device engine ignores it); LOCKS_ERR_OOM if the
 * page lists cannot be allocated (the mode is then off). */
enum { LLAMA_DRAFT_OFF = 0, LLAMA_DRAFT_RECORD, LLAMA_DRAFT_REPLAY };
locks_status llama_ctx_draft_mode(locks_ctx *c, int mode);
/* Greedy drafts (speculate.c, when the sampler is greedy): with on, a decode step in a
 * draft mode scores the vocabulary with a 4-bit (Q4_0) copy of the output matrix, built
 * on the first call (rows x cols / 32 x 18 bytes: SmolLM2's 30 MB of Q8_0 in 16 MB),
 * and gives the exact logits of its LLAMA_DRAFT_TOP best rows only, -inf elsewhere: the
 * draft's token is the exact head's argmax unless that row is not among them (the dense
 * verify decides either way). Off for an output matrix of 4 bits, fp32 activations or
 * the device engine. LOCKS_ERR_OOM if the copy cannot be allocated (then off). */
#define LLAMA_DRAFT_TOP 8
#define LLAMA_HEAD4_MAX_COLS 16384 /* the widest output matrix given a 4-bit copy */
locks_status llama_ctx_draft_argmax(locks_ctx *c, int on);
/* The greedy drafts' vocabulary: a draft proposes only tokens in it (the dense verify
 * keeps the output exact whatever it proposes). It is the first LLAMA_DRAFT_VOCAB(n_vocab)
 * ids (BPE and SentencePiece vocabularies put the frequent tokens first: their merge
 * order or score) and every token the context has been fed (the prompt, each emitted
 * token; a clone inherits them), plus any given to llama_ctx_draft_vocab_add: a draft
 * reads a quarter of the 4-bit head (a third of SmolLM2's), not all of it (after
 * FR-Spec, Zhao et al. 2025). Both calls are no-ops until the 4-bit copy exists
 * (llama_ctx_draft_argmax). */
#define LLAMA_DRAFT_VOCAB(n) ((n) / 4 > 16384 ? (n) / 4 : (n) < 16384 ? (n) : 16384)
void llama_ctx_draft_vocab_add(locks_ctx *c, const int32_t *ids, int32_t n);
int llama_ctx_draft_vocab_has(const locks_ctx *c, int32_t id);
/* The sampler's parameters (sampler.c), for the device sampler. */
locks_sampler_params locks_sampler_get_params(const locks_sampler *s);

#endif
